#!/usr/bin/python3
"""gpt_oss_widen.py MXFP4_DIR OUT_DIR: the same gpt-oss checkpoint with its experts widened to BF16.

The baseline of the MXFP4 decode bench (issue 41: MXFP4 mini TPOT / the same mini with BF16 experts):
every `model.layers.L.mlp.experts.{gate_up,down}_proj_blocks` / `_scales` pair is dequantized (E2M1 value
times 2^(scale - 127); exact in BF16, whose 8 exponent bits hold every such power and whose 7 mantissa bits
hold E2M1's 1) and written as transformers' dense runtime tensor `gate_up_proj` [E, H, 2I] /
`down_proj` [E, I, H] (the dequantized [E, out, in] transposed, as integrations/mxfp4.py's
convert_moe_packed_tensors does); every other tensor is copied byte for byte; config.json loses its
quantization_config; the tokenizer files are copied. So both directories compute the same function with the
same weights: zipmoe's logits on them are byte-equal (the MXFP4 and BF16 matmuls sum in one order).
Standard library + numpy; one layer's experts in memory at a time.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

FP4 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)
DTYPES = {"BF16": (np.uint16, 2), "F16": (np.float16, 2), "F32": (np.float32, 4), "U8": (np.uint8, 1),
          "I64": (np.int64, 8)}


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def tensors(model_dir):
    """name -> (file, data offset, dtype, shape), over every *.safetensors of the directory."""
    out = {}
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, name)
        header, base = read_header(path)
        for t, info in header.items():
            out[t] = (path, base + info["data_offsets"][0], info["dtype"], info["shape"])
    return out


def load(entry):
    path, offset, dtype, shape = entry
    np_type, size = DTYPES[dtype]
    count = int(np.prod(shape)) if shape else 1
    return np.fromfile(path, dtype=np_type, count=count, offset=offset).reshape(shape)


def bf16(x):
    """float32 -> BF16 bits (round to nearest even; exact for dequantized MXFP4)."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def dequantize(blocks, scales):
    """[E, rows, cols/32, 16] nibbles + [E, rows, cols/32] E8M0 -> float32 [E, rows, cols]."""
    lo, hi = FP4[blocks & 0x0F], FP4[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(blocks.shape[:-1] + (32,))
    vals = vals * np.ldexp(np.float32(1.0), scales.astype(np.int32) - 127)[..., None]
    return vals.reshape(blocks.shape[0], blocks.shape[1], -1)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: gpt_oss_widen.py MXFP4_DIR OUT_DIR")
    src, out = sys.argv[1:]
    config = json.load(open(os.path.join(src, "config.json")))
    if config.get("model_type") != "gpt_oss" or (config.get("quantization_config") or {}).get("quant_method") != "mxfp4":
        sys.exit(f"{src}: not a gpt_oss MXFP4 checkpoint")
    os.makedirs(out, exist_ok=True)
    ts = tensors(src)
    plan = []  # (name, dtype, shape, producer)
    for name in sorted(ts):
        if name.endswith("_blocks") or name.endswith("_scales"):
            if name.endswith("_blocks"):
                base = name[: -len("_blocks")]
                e, rows, nb, _ = ts[name][3]
                plan.append((base, "BF16", [e, nb * 32, rows],
                             lambda b=name, s=base + "_scales": bf16(dequantize(load(ts[b]), load(ts[s])).transpose(0, 2, 1))))
            continue
        plan.append((name, ts[name][2], ts[name][3], lambda n=name: load(ts[n])))
    header, offset = {}, 0
    for name, dtype, shape, _ in plan:
        size = int(np.prod(shape)) * DTYPES[dtype][1]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, dtype, shape, make in plan:
            np.ascontiguousarray(make()).tofile(f)
    config.pop("quantization_config")
    config["torch_dtype"] = "bfloat16"
    json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
    for name in os.listdir(src):
        if name.endswith(".json") and name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    print(f"{out}: {len(plan)} tensors, {offset / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
