"""Safetensors for the numpy reference (moe_reference.py), parsed by hand without the safetensors
package: a file reader, a writer (used by check_logits.py's self-test) and Hugging Face checkpoint
directories (single file or shards + index). BF16/F16 weights are upcast exactly to float32.
"""

import json
import os
import struct

import numpy as np

# ----------------------------------------------------------------------------------------------------
# safetensors (parsed by hand: u64 LE header length, JSON header, raw little-endian tensor bytes)
# ----------------------------------------------------------------------------------------------------

_ST_DTYPES = {
    "BF16": ("<u2", 2),
    "F16": ("<f2", 2),
    "F32": ("<f4", 4),
    "F64": ("<f8", 8),
    "I64": ("<i8", 8),
    "I32": ("<i4", 4),
    "I16": ("<i2", 2),
    "I8": ("i1", 1),
    "U8": ("u1", 1),
    "BOOL": ("u1", 1),
}


def bf16_bits_to_f32(u16):
    """uint16 BF16 bit patterns -> float32 (exact: the bits go to the top half of a uint32)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> BF16 bits, round-to-nearest-even (used by the self-test checkpoint writer)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


class SafetensorsFile:
    """Lazily converts tensors of one .safetensors file to float32 numpy arrays."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError(f"{path}: shorter than the 8-byte header length")
            (n,) = struct.unpack("<Q", raw)
            size = os.fstat(f.fileno()).st_size
            if n > size - 8:
                raise ValueError(f"{path}: header length {n} exceeds the file size {size}")
            header = json.loads(f.read(n).decode("utf-8"))
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        self.meta = {k: v for k, v in header.items() if k != "__metadata__"}
        self._mm = None
        for name, info in self.meta.items():
            dt = info["dtype"]
            if dt not in _ST_DTYPES:
                raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
            b, e = info["data_offsets"]
            count = int(np.prod(info["shape"], dtype=np.int64)) if info["shape"] else 1
            if not (0 <= b <= e <= self.data_size) or e - b != count * _ST_DTYPES[dt][1]:
                raise ValueError(f"{path}: tensor {name}: bad data_offsets {info['data_offsets']} for "
                                 f"shape {info['shape']} {dt} (data size {self.data_size})")

    def names(self):
        return list(self.meta.keys())

    def raw(self, name):
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self.meta[name]
        b, e = info["data_offsets"]
        np_dt, _ = _ST_DTYPES[info["dtype"]]
        buf = self._mm[self.data_start + b:self.data_start + e]
        return np.frombuffer(buf, dtype=np_dt).reshape(info["shape"]), info["dtype"]

    def get_f32(self, name):
        arr, dt = self.raw(name)
        if dt == "BF16":
            return np.ascontiguousarray(bf16_bits_to_f32(arr))
        return np.ascontiguousarray(arr.astype(np.float32))


def write_safetensors(path, tensors, dtype="BF16"):
    """Writes {name: float32 array} as BF16 (or F32) safetensors. Used by the self-test."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name], dtype=np.float32)
        if dtype == "BF16":
            data = f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            data = a.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for blob in blobs:
            f.write(blob)


class Checkpoint:
    """A Hugging Face checkpoint dir: config.json + model.safetensors or index + shards."""

    def __init__(self, model_dir):
        self.dir = model_dir
        with open(os.path.join(model_dir, "config.json"), "r", encoding="utf-8") as f:
            self.config = json.load(f)
        index_path = os.path.join(model_dir, "model.safetensors.index.json")
        single = os.path.join(model_dir, "model.safetensors")
        self.where = {}
        files = {}
        if os.path.exists(index_path):
            with open(index_path, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            for name, shard in weight_map.items():
                if shard not in files:
                    files[shard] = SafetensorsFile(os.path.join(model_dir, shard))
                if name not in files[shard].meta:
                    raise ValueError(f"index maps {name} to {shard}, which does not hold it")
                self.where[name] = files[shard]
        elif os.path.exists(single):
            st = SafetensorsFile(single)
            for name in st.names():
                self.where[name] = st
        else:
            raise FileNotFoundError(f"{model_dir}: neither model.safetensors nor model.safetensors.index.json")
        self.used = set()
        self._cache = {}

    def has(self, name):
        return name in self.where

    def __getitem__(self, name):
        if name not in self._cache:
            if name not in self.where:
                raise KeyError(f"{self.dir}: tensor '{name}' not found in the checkpoint")
            self._cache[name] = self.where[name].get_f32(name)
        self.used.add(name)
        return self._cache[name]

    def unused(self):
        return sorted(set(self.where) - self.used)
