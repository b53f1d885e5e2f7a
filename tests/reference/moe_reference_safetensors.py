"""Safetensors for the numpy reference (moe_reference.py), parsed by hand without the safetensors
package: a file reader, a writer (used by check_logits.py's self-test) and Hugging Face checkpoint
directories (single file or shards + index). BF16/F16 weights are upcast exactly to float32; FP8 (E4M3)
block-scaled weights (`X.weight` F8_E4M3 + `X.weight_scale_inv` F32, config `quantization_config`
quant_method "fp8") are dequantized exactly to float32, and so are MXFP4 tensors (gpt_oss experts:
`X_blocks` U8 [..., G, 16] of e2m1 nibble pairs + `X_scales` U8 [..., G] of E8M0 exponents, quant_method
"mxfp4").
"""

import json
import math
import os
import re
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
    "F8_E4M3": ("u1", 1),
}


def bf16_bits_to_f32(u16):
    """uint16 BF16 bit patterns -> float32 (exact: the bits go to the top half of a uint32)."""
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> BF16 bits, round-to-nearest-even (used by the self-test checkpoint writer)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


# --- FP8 E4M3 (OCP "e4m3fn": 1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits, subnormals,
# S.1111.111 = NaN, no infinities; largest finite value 448) ---

def _e4m3_table():
    """The 256 decoded values, built by placing the fields into float32 bit patterns (the known-answer
    test checks it against an independent ldexp formula)."""
    code = np.arange(256, dtype=np.uint32)
    sign = (code >> np.uint32(7)) << np.uint32(31)
    exp = (code >> np.uint32(3)) & np.uint32(0xF)
    man = code & np.uint32(0x7)
    # normal: (1 + m/8) * 2^(e - 7): float32 exponent field e - 7 + 127, mantissa m at the top 3 bits.
    normal = (sign | ((exp + np.uint32(120)) << np.uint32(23)) | (man << np.uint32(20))).view(np.float32)
    # subnormal (e == 0): m/8 * 2^-6 = m * 2^-9 (exact in float32).
    sub = (man.astype(np.float32) * np.float32(2.0 ** -9)) * np.where(sign != 0, np.float32(-1), np.float32(1))
    out = np.where(exp == 0, sub, normal).astype(np.float32)
    out[(code & np.uint32(0x7F)) == np.uint32(0x7F)] = np.float32("nan")
    return out


E4M3_TO_F32 = _e4m3_table()
E4M3_MAX = 448.0


def e4m3_bits_to_f32(bits):
    """uint8 E4M3 bit patterns -> float32 (exact)."""
    return E4M3_TO_F32[np.asarray(bits, dtype=np.uint8)]


def f32_to_e4m3_bits(x):
    """float32 -> E4M3 bits, round-to-nearest-even, saturating at +-448 (NaN -> 0x7F). Used by the
    self-test to write FP8 checkpoints."""
    x = np.asarray(x, dtype=np.float32)
    pos_codes = np.arange(0x7F, dtype=np.uint8)            # 0x00..0x7E: the finite non-negative values
    pos_vals = E4M3_TO_F32[pos_codes].astype(np.float64)    # increasing with the code
    a = np.minimum(np.abs(x.astype(np.float64)), E4M3_MAX)
    hi = np.clip(np.searchsorted(pos_vals, a, side="left"), 0, len(pos_vals) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo = a - pos_vals[lo]
    d_hi = pos_vals[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo).astype(np.uint8)
    code = np.where(np.signbit(x), code | np.uint8(0x80), code)
    return np.where(np.isnan(x), np.uint8(0x7F), code).astype(np.uint8)


# --- MXFP4 (OCP Microscaling: blocks of 32 FP4 E2M1 values sharing one E8M0 scale), as gpt-oss stores its
# experts. E2M1: 1 sign bit (bit 3), 2 exponent bits (bias 1), 1 mantissa bit; no inf/NaN; values
# 0, .5, 1, 1.5, 2, 3, 4, 6 and their negatives (code 8 is -0.0). E8M0: an unsigned biased exponent, the scale
# is 2^(code - 127); 0xFF is NaN in the OCP spec. ---

E2M1_TO_F32 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                        -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float32)
MXFP4_BLOCK = 32              # values per scale: 16 bytes of two nibbles
MXFP4_BLOCKS_SUFFIX = "_blocks"
MXFP4_SCALES_SUFFIX = "_scales"
E8M0_NAN = 0xFF


def e8m0_to_f32(codes):
    """uint8 E8M0 codes -> float32 2^(code - 127) (exact: 2^-127 is a float32 subnormal, 2^127 is normal).
    The code 0xFF (NaN in the OCP spec) is refused by mxfp4_dequantize, so it maps to NaN here."""
    c = np.asarray(codes, dtype=np.uint8)
    with np.errstate(over="ignore"):
        out = np.ldexp(np.float32(1.0), c.astype(np.int32) - 127).astype(np.float32)
    return np.where(c == E8M0_NAN, np.float32("nan"), out).astype(np.float32)


def mxfp4_dequantize(blocks, scales, what="mxfp4 tensor"):
    """blocks uint8 [..., G, 16], scales uint8 [..., G] -> float32 [..., G * 32], in the stored orientation
    (for gpt-oss [E, out, in]). Byte j of block g holds elements g*32 + 2j (low nibble) and g*32 + 2j + 1
    (high nibble), as transformers' convert_moe_packed_tensors lays them out. Each value is
    e2m1(nibble) * 2^(scale - 127): exact in float32 (at most two significant bits, smallest magnitude
    2^-128) unless it overflows, which needs a scale code >= 253. A scale 0xFF (NaN) or an overflow raises
    ValueError naming `what` (transformers would produce inf/NaN weights there)."""
    blocks = np.asarray(blocks, dtype=np.uint8)
    scales = np.asarray(scales, dtype=np.uint8)
    if blocks.ndim < 2 or blocks.shape[-1] != MXFP4_BLOCK // 2 or blocks.shape[:-1] != scales.shape:
        raise ValueError(f"{what}: blocks {list(blocks.shape)} / scales {list(scales.shape)}: want blocks "
                         f"[..., G, {MXFP4_BLOCK // 2}] and scales [..., G]")
    if np.any(scales == E8M0_NAN):
        raise ValueError(f"{what}: an E8M0 scale is 0xFF (NaN in the OCP MX spec)")
    vals = np.empty(blocks.shape[:-1] + (MXFP4_BLOCK,), dtype=np.float32)
    vals[..., 0::2] = E2M1_TO_F32[blocks & np.uint8(0x0F)]
    vals[..., 1::2] = E2M1_TO_F32[blocks >> np.uint8(4)]
    with np.errstate(over="ignore"):
        out = (vals * e8m0_to_f32(scales)[..., None]).astype(np.float32)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{what}: a value e2m1 x 2^(scale - 127) overflows float32 (scale code >= 253)")
    return out.reshape(blocks.shape[:-2] + (blocks.shape[-2] * MXFP4_BLOCK,))


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

    def dtype(self, name):
        return self.meta[name]["dtype"]

    def shape(self, name):
        return list(self.meta[name]["shape"])

    def get_f32(self, name):
        """float32 values as stored; F8_E4M3 is decoded WITHOUT its block scales (Checkpoint applies them)."""
        arr, dt = self.raw(name)
        if dt == "BF16":
            return np.ascontiguousarray(bf16_bits_to_f32(arr))
        if dt == "F8_E4M3":
            return np.ascontiguousarray(e4m3_bits_to_f32(arr))
        return np.ascontiguousarray(arr.astype(np.float32))


def write_safetensors(path, tensors, dtype="BF16", dtypes=None):
    """Writes {name: array} as safetensors. Used by the self-test. Each tensor is written as
    dtypes[name] if given, else `dtype`: BF16 (float32 rounded to nearest even), F32, or F8_E4M3 / U8 (the
    array holds the uint8 bit patterns or codes, written as they are)."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        dt = (dtypes or {}).get(name, dtype)
        if dt in ("F8_E4M3", "U8"):
            a = np.asarray(tensors[name])
            if a.dtype != np.uint8:
                raise ValueError(f"{name}: {dt} tensors are written from uint8 arrays")
            data = a.tobytes()
        elif dt == "BF16":
            a = np.asarray(tensors[name], dtype=np.float32)
            data = f32_to_bf16_bits(a).astype("<u2").tobytes()
        elif dt == "F32":
            a = np.asarray(tensors[name], dtype=np.float32)
            data = a.astype("<f4").tobytes()
        else:
            raise ValueError(f"{name}: the writer does not write {dt}")
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(data)]}
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


FP8_SCALE_SUFFIX = "_scale_inv"


def _module_of(name):
    """'model.layers.0.mlp.down_proj.weight' -> 'model.layers.0.mlp.down_proj'."""
    return name.rsplit(".", 1)[0]


class Checkpoint:
    """A Hugging Face checkpoint dir: config.json + model.safetensors or index + shards.

    FP8 (config `quantization_config.quant_method == "fp8"`, DeepSeek-V3 / GLM-4.5-FP8 style): a tensor
    stored as F8_E4M3 [out, in] is returned dequantized, w[i, j] = e4m3(bits[i, j]) * scale_inv[i // b0,
    j // b1] in float32, with scale_inv the companion `<name>_scale_inv` ([ceil(out/b0), ceil(in/b1)])
    and [b0, b1] = `weight_block_size`. Every F8_E4M3 tensor must have its companion; a module listed in
    `modules_to_not_convert` / `ignored_layers` must not be F8_E4M3 (it is read as stored).

    MXFP4 (`quant_method == "mxfp4"`, gpt-oss): a parameter X is stored as `X_blocks` U8 [..., G, 16] and
    `X_scales` U8 [..., G]; `mxfp4(X)` returns it dequantized, float32 [..., G * 32] in the stored
    orientation (mxfp4_dequantize). A module matched by a `modules_to_not_convert` pattern (transformers'
    regex match at the start of the module name, `*` included) must not be stored that way."""

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
        self._init_quant()

    # --- quantized checkpoints (FP8, MXFP4) ---

    def _init_quant(self):
        q = self.config.get("quantization_config") or {}
        self.quant_method = q.get("quant_method") if q else None
        self.fp8_block = None
        self.fp8_keep = []
        self.mx_keep = []
        fp8_names = sorted(n for n in self.where if self.dtype(n) == "F8_E4M3")
        mx_names = sorted(n for n in self.where if self.dtype(n) == "U8"
                          and n.endswith((MXFP4_BLOCKS_SUFFIX, MXFP4_SCALES_SUFFIX)))
        if q and self.quant_method not in ("fp8", "mxfp4"):
            raise NotImplementedError(f"{self.dir}: quantization_config.quant_method {self.quant_method!r} "
                                      f"(only 'fp8' and 'mxfp4')")
        if mx_names and self.quant_method != "mxfp4":
            raise ValueError(f"{self.dir}: tensor '{mx_names[0]}' is an MXFP4 block/scale tensor (U8) but "
                             f"config.json has no quantization_config with quant_method 'mxfp4'")
        if self.quant_method == "mxfp4":
            if fp8_names:
                raise ValueError(f"{self.dir}: tensor '{fp8_names[0]}' is F8_E4M3 in an mxfp4 checkpoint")
            self._init_mxfp4(q, mx_names)
            return
        if q:
            fmt = q.get("fmt", "e4m3")
            if fmt != "e4m3":
                raise NotImplementedError(f"{self.dir}: quantization_config.fmt {fmt!r} (only 'e4m3')")
            block = q.get("weight_block_size")
            if block is None or len(block) != 2 or int(block[0]) <= 0 or int(block[1]) <= 0:
                raise NotImplementedError(f"{self.dir}: quantization_config.weight_block_size {block!r} "
                                          f"(only block-wise [b0, b1] scales)")
            self.fp8_block = (int(block[0]), int(block[1]))
            self.fp8_keep = list(q.get("modules_to_not_convert") or []) + list(q.get("ignored_layers") or [])
        elif fp8_names:
            raise ValueError(f"{self.dir}: tensor '{fp8_names[0]}' is F8_E4M3 but config.json has no "
                             f"quantization_config (quant_method 'fp8', weight_block_size)")
        for name in fp8_names:
            scale = name + FP8_SCALE_SUFFIX
            if scale not in self.where:
                raise ValueError(f"{self.dir}: tensor '{name}' is F8_E4M3 but its scale '{scale}' is missing")
            if self.fp8_kept(name):
                raise ValueError(f"{self.dir}: tensor '{name}' is F8_E4M3 but its module is listed in "
                                 f"quantization_config modules_to_not_convert/ignored_layers {self.fp8_keep}")
            shape = self.shape(name)
            if len(shape) != 2:
                raise ValueError(f"{self.dir}: F8_E4M3 tensor '{name}' has shape {shape}, expected [out, in]")
            want = [math.ceil(shape[0] / self.fp8_block[0]), math.ceil(shape[1] / self.fp8_block[1])]
            if self.shape(scale) != want or self.dtype(scale) not in ("F32", "BF16", "F16"):
                raise ValueError(f"{self.dir}: '{scale}' is {self.dtype(scale)} {self.shape(scale)}, expected a "
                                 f"float tensor of shape {want} (weight {shape}, block {list(self.fp8_block)})")

    def fp8_kept(self, name):
        """True if name's module is listed in modules_to_not_convert / ignored_layers (HF matches these
        as substrings of the module name)."""
        mod = _module_of(name)
        return any(k and (k == mod or k in mod) for k in self.fp8_keep)

    def _init_mxfp4(self, q, mx_names):
        """Validates the MXFP4 pairs: every `X_blocks` has its `X_scales` (both U8, scales shaped blocks[:-1],
        16 bytes per block) and the reverse; no pair for a module of modules_to_not_convert."""
        self.mx_keep = [k for k in (q.get("modules_to_not_convert") or []) if k]
        for name in mx_names:
            if name.endswith(MXFP4_SCALES_SUFFIX):
                base = name[:-len(MXFP4_SCALES_SUFFIX)]
                if base + MXFP4_BLOCKS_SUFFIX not in self.where:
                    raise ValueError(f"{self.dir}: MXFP4 scales '{name}' without '{base}{MXFP4_BLOCKS_SUFFIX}'")
                continue
            base = name[:-len(MXFP4_BLOCKS_SUFFIX)]
            scales = base + MXFP4_SCALES_SUFFIX
            if scales not in self.where or self.dtype(scales) != "U8":
                raise ValueError(f"{self.dir}: MXFP4 blocks '{name}' without U8 scales '{scales}'")
            shape = self.shape(name)
            if len(shape) < 2 or shape[-1] != MXFP4_BLOCK // 2 or self.shape(scales) != shape[:-1]:
                raise ValueError(f"{self.dir}: MXFP4 '{name}' {shape} / '{scales}' {self.shape(scales)}: want "
                                 f"blocks [..., G, {MXFP4_BLOCK // 2}] and scales [..., G]")
            if self.mxfp4_kept(_module_of(base)):
                raise ValueError(f"{self.dir}: '{name}' is MXFP4 but its module is matched by "
                                 f"quantization_config modules_to_not_convert {self.mx_keep}")

    def mxfp4_kept(self, module):
        """True if a modules_to_not_convert pattern matches the module name: transformers' mxfp4
        should_convert_module takes each pattern as a regex matched at the start of the name (so
        'model.layers.*.self_attn' matches 'model.layers.3.self_attn')."""
        return any(re.match(k, module) for k in self.mx_keep)

    def is_mxfp4(self, name):
        """True if parameter `name` is stored as the MXFP4 pair `name_blocks` / `name_scales`."""
        return self.quant_method == "mxfp4" and name + MXFP4_BLOCKS_SUFFIX in self.where

    def mxfp4(self, name):
        """Parameter `name` stored as MXFP4, dequantized: float32 [..., G * 32] in the stored orientation."""
        if name not in self._cache:
            bn, sn = name + MXFP4_BLOCKS_SUFFIX, name + MXFP4_SCALES_SUFFIX
            if not self.is_mxfp4(name):
                raise KeyError(f"{self.dir}: no MXFP4 pair '{bn}' / '{sn}' in the checkpoint")
            self._cache[name] = mxfp4_dequantize(self.where[bn].raw(bn)[0], self.where[sn].raw(sn)[0], bn)
        self.used.update((name + MXFP4_BLOCKS_SUFFIX, name + MXFP4_SCALES_SUFFIX))
        return self._cache[name]

    def fp8_scale_names(self):
        """The `_scale_inv` companions of the F8_E4M3 tensors."""
        return {n + FP8_SCALE_SUFFIX for n in self.where if self.dtype(n) == "F8_E4M3"}

    def _dequant(self, name):
        vals = self.where[name].get_f32(name)  # e4m3 decoded, unscaled
        scale_name = name + FP8_SCALE_SUFFIX
        scale = self.where[scale_name].get_f32(scale_name)
        self.used.add(scale_name)
        b0, b1 = self.fp8_block
        full = np.repeat(np.repeat(scale, b0, axis=0), b1, axis=1)[:vals.shape[0], :vals.shape[1]]
        return (vals * full).astype(np.float32)

    # --- access ---

    def has(self, name):
        return name in self.where

    def dtype(self, name):
        return self.where[name].dtype(name)

    def shape(self, name):
        return self.where[name].shape(name)

    def __getitem__(self, name):
        if name not in self._cache:
            if name not in self.where:
                raise KeyError(f"{self.dir}: tensor '{name}' not found in the checkpoint")
            if self.dtype(name) == "F8_E4M3":
                self._cache[name] = self._dequant(name)
            else:
                self._cache[name] = self.where[name].get_f32(name)
        self.used.add(name)
        return self._cache[name]

    def unused(self):
        return sorted(set(self.where) - self.used)
