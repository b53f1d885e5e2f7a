"""The GGUF v3 container and the safetensors reader of bench/gguf_writer.py: GGUF constants, value and
tensor packing (GGUFWriter), the memory-mapped safetensors Checkpoint, and ConversionError, whose
messages name the file and field at fault. Needs only Python 3 and NumPy."""
import json
import os
import struct
from pathlib import Path

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_ALIGNMENT = 32

# GGUF metadata value types.
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types.
GGML_F32, GGML_BF16, GGML_MXFP4 = 0, 30, 39
LLAMA_FTYPE_ALL_F32, LLAMA_FTYPE_MOSTLY_BF16 = 0, 32
# llama.cpp token types.
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5

SAFETENSORS_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
                        "U8": 1, "BOOL": 1}


class ConversionError(Exception):
    """A problem with the input checkpoint; the message names the file and field."""


# ---------------------------------------------------------------------------------------------------
# safetensors


class Checkpoint:
    """The tensors of a safetensors checkpoint, read lazily through one memory map per file."""

    def __init__(self, model_dir):
        self.model_dir = Path(model_dir)
        index = self.model_dir / "model.safetensors.index.json"
        if index.is_file():
            weight_map = load_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ConversionError(f"{index}: 'weight_map' must be a non-empty object")
            files = sorted(set(weight_map.values()))
        else:
            files = sorted(p.name for p in self.model_dir.glob("*.safetensors"))
            if not files:
                raise ConversionError(f"{self.model_dir}: no *.safetensors files and no model.safetensors.index.json")
        self._maps = {}
        self._entries = {}  # name -> (file, dtype, shape, begin, end)
        for name in files:
            self._read_header(self.model_dir / name)
        self._unused = set(self._entries)

    def _read_header(self, path):
        if not path.is_file():
            raise ConversionError(f"{path}: listed in the checkpoint but missing")
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ConversionError(f"{path}: shorter than the 8-byte safetensors header length")
            (header_len,) = struct.unpack("<Q", raw)
            if header_len > size - 8:
                raise ConversionError(f"{path}: header length {header_len} exceeds the file size {size}")
            try:
                header = json.loads(f.read(header_len))
            except (ValueError, UnicodeDecodeError) as e:
                raise ConversionError(f"{path}: header is not valid JSON ({e})") from None
        data_start = 8 + header_len
        self._maps[path] = np.memmap(path, dtype=np.uint8, mode="r")
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if not (isinstance(info, dict) and isinstance(info.get("shape"), list)
                    and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2):
                raise ConversionError(f"{path}: tensor '{name}': header entry needs 'dtype', 'shape' and a "
                                      f"2-element 'data_offsets', got {info!r}")
            dtype, shape, offsets = info.get("dtype"), info["shape"], info["data_offsets"]
            if dtype not in SAFETENSORS_ITEMSIZE:
                raise ConversionError(f"{path}: tensor '{name}': unknown dtype {dtype!r}")
            begin, end = offsets
            if end - begin != int(np.prod(shape, dtype=np.int64)) * SAFETENSORS_ITEMSIZE[dtype]:
                raise ConversionError(f"{path}: tensor '{name}': data_offsets {offsets} do not match "
                                      f"shape {shape} of {dtype}")
            if data_start + end > size:
                raise ConversionError(f"{path}: tensor '{name}': data_offsets {offsets} run past the end of the file")
            if name in self._entries:
                raise ConversionError(f"{path}: tensor '{name}' also appears in {self._entries[name][0]}")
            self._entries[name] = (path, dtype, tuple(shape), data_start + begin, data_start + end)

    def has(self, name):
        return name in self._entries

    def _take(self, name, dtype, why):
        """The raw bytes of tensor `name` (a uint8 memory-map slice) and its shape, after checking its dtype;
        marks it used. `why` completes the dtype error ("only BF16 checkpoints are supported", ...)."""
        if name not in self._entries:
            raise ConversionError(f"{self.model_dir}: tensor '{name}' is missing from the safetensors files")
        path, got, shape, begin, end = self._entries[name]
        if got != dtype:
            raise ConversionError(f"{path}: tensor '{name}' has dtype {got}; {why}")
        self._unused.discard(name)
        return self._maps[path][begin:end], shape

    def bf16(self, name):
        """The tensor's raw BF16 bits as a read-only uint16 array of its shape (marks it used)."""
        raw, shape = self._take(name, "BF16", "only BF16 checkpoints are supported")
        return raw.view(np.uint16).reshape(shape)

    def f32(self, name):
        """An F32 tensor's values as a read-only float32 array of its shape (marks it used): the routers'
        selection biases (e_score_correction_bias), which releases keep in F32."""
        raw, shape = self._take(name, "F32", "F32 expected")
        return raw.view(np.float32).reshape(shape)

    def u8(self, name):
        """A U8 tensor (MXFP4 blocks or scales) as a read-only uint8 array of its shape (marks it used)."""
        raw, shape = self._take(name, "U8", "U8 (MXFP4 blocks / scales) expected")
        return raw.reshape(shape)

    def skip(self, prefix):
        """Marks every tensor whose name starts with `prefix` as deliberately left out (e.g. a multi-token-
        prediction layer that llama.cpp's graph does not run); returns how many."""
        names = [n for n in self._unused if n.startswith(prefix)]
        self._unused.difference_update(names)
        return len(names)

    def check_all_used(self, arch):
        leftover = sorted(n for n in self._unused if not n.endswith("rotary_emb.inv_freq"))
        if leftover:
            path = self._entries[leftover[0]][0]
            more = f" and {len(leftover) - 1} more" if len(leftover) > 1 else ""
            raise ConversionError(f"{path}: tensor '{leftover[0]}'{more} not expected in a {arch} checkpoint "
                                  "(layout not supported by this converter)")


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


# ---------------------------------------------------------------------------------------------------
# GGUF v3 writer


class Tensor:
    """One GGUF tensor: its ggml type, numpy-order shape and the arrays whose bytes are its data."""

    def __init__(self, name, ggml_type, shape, parts):
        self.name, self.ggml_type, self.shape, self.parts = name, ggml_type, tuple(shape), parts
        self.nbytes = sum(p.nbytes for p in parts)


class GGUFWriter:
    """Collects metadata and tensors, then writes one GGUF v3 file (little-endian, 32-byte alignment)."""

    def __init__(self, widen_bf16=False):
        self.kv = []  # (key, value type, value, array element type or None)
        self.tensors = []
        self._names = set()
        self.widen_bf16 = widen_bf16  # tensor_bf16 / tensor_bf16_stack write exact F32 widenings instead

    # --- metadata ---
    def add_u32(self, key, value):
        self.kv.append((key, T_UINT32, int(value), None))

    def add_f32(self, key, value):
        self.kv.append((key, T_FLOAT32, float(value), None))

    def add_bool(self, key, value):
        self.kv.append((key, T_BOOL, bool(value), None))

    def add_string(self, key, value):
        self.kv.append((key, T_STRING, str(value), None))

    def add_array(self, key, element_type, values):
        self.kv.append((key, T_ARRAY, list(values), element_type))

    # --- tensors (bits: BF16 bit patterns as a uint16 array in numpy order) ---
    def tensor_bf16(self, name, bits):
        """A tensor kept bit-exact as BF16 (widened exactly to F32 with widen_bf16)."""
        if self.widen_bf16:
            return self.tensor_f32(name, bits)
        self._add(Tensor(name, GGML_BF16, bits.shape, [np.ascontiguousarray(bits)]))

    def tensor_bf16_stack(self, name, experts):
        """Per-expert BF16 matrices [out, in] stacked into one [n_expert, out, in] tensor."""
        shape = experts[0].shape
        for e, m in enumerate(experts):
            if m.shape != shape:
                raise ConversionError(f"GGUF tensor '{name}': expert {e} has shape {list(m.shape)}, "
                                      f"expert 0 {list(shape)}")
        if self.widen_bf16:
            self._add(Tensor(name, GGML_F32, (len(experts),) + shape, [bf16_to_f32(m) for m in experts]))
            return
        self._add(Tensor(name, GGML_BF16, (len(experts),) + shape, [np.ascontiguousarray(m) for m in experts]))

    def tensor_f32(self, name, bits):
        """A BF16 tensor widened (exactly) to F32."""
        self._add(Tensor(name, GGML_F32, bits.shape, [bf16_to_f32(bits)]))

    def tensor_mxfp4(self, name, blocks, scales):
        """MXFP4 weights as released (blocks [..., rows, cols / 32, 16] of two E2M1 codes a byte, element 2i in
        byte i's low nibble, 2i + 1 in its high one; E8M0 scales [..., rows, cols / 32]) repacked, bits unchanged,
        into ggml's block_mxfp4 (the scale byte, then 16 bytes whose low nibbles hold elements 0..15 and high
        nibbles 16..31), a tensor of logical shape [..., rows, cols]."""
        if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
            raise ConversionError(f"GGUF tensor '{name}': MXFP4 blocks {list(blocks.shape)} do not match scales "
                                  f"{list(scales.shape)} (blocks [..., n, 16] against scales [..., n])")
        codes = np.stack((blocks & 0x0F, blocks >> 4), axis=-1).reshape(blocks.shape[:-1] + (32,))
        qs = codes[..., :16] | (codes[..., 16:] << 4)
        packed = np.concatenate((scales[..., None], qs), axis=-1).astype(np.uint8)
        shape = blocks.shape[:-2] + (blocks.shape[-2] * 32,)
        self._add(Tensor(name, GGML_MXFP4, shape, [np.ascontiguousarray(packed)]))

    def tensor_f32_values(self, name, values):
        """A tensor that is F32 in the checkpoint, stored as is."""
        self._add(Tensor(name, GGML_F32, values.shape, [np.ascontiguousarray(values, dtype=np.float32)]))

    def _add(self, tensor):
        if tensor.name in self._names:
            raise ConversionError(f"GGUF tensor '{tensor.name}' written twice")
        self._names.add(tensor.name)
        self.tensors.append(tensor)

    # --- serialisation ---
    def write(self, path):
        header = bytearray(GGUF_MAGIC)
        header += struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv))
        for key, vtype, value, element_type in self.kv:
            header += pack_string(key) + struct.pack("<I", vtype) + pack_value(vtype, value, element_type)
        offset = 0
        for t in self.tensors:
            dims = tuple(reversed(t.shape))  # ggml order: ne[0] is the innermost (contiguous) dimension
            header += pack_string(t.name) + struct.pack(f"<I{len(dims)}Q", len(dims), *dims)
            header += struct.pack("<IQ", t.ggml_type, offset)
            offset += align(t.nbytes)
        header += bytes(align(len(header)) - len(header))
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(header)
                for t in self.tensors:
                    for part in t.parts:
                        f.write(part.data)
                    f.write(bytes(align(t.nbytes) - t.nbytes))
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        return len(header) + offset


def align(n):
    return (n + GGUF_ALIGNMENT - 1) // GGUF_ALIGNMENT * GGUF_ALIGNMENT


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(vtype, value, element_type=None):
    if vtype == T_UINT32:
        return struct.pack("<I", value)
    if vtype == T_INT32:
        return struct.pack("<i", value)
    if vtype == T_FLOAT32:
        return struct.pack("<f", value)
    if vtype == T_BOOL:
        return struct.pack("<?", value)
    if vtype == T_STRING:
        return pack_string(value)
    if vtype == T_ARRAY:
        return struct.pack("<IQ", element_type, len(value)) + b"".join(pack_value(element_type, v) for v in value)
    raise ValueError(f"GGUF value type {vtype} not written by this converter")




def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ConversionError(f"{path}: missing") from None
    except ValueError as e:
        raise ConversionError(f"{path}: not valid JSON ({e})") from None
