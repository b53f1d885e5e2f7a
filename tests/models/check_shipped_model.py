#!/usr/bin/python3
"""Checks the trained model shipped in models/ (models/<name>/README.md) end to end with the CLI.

  check_shipped_model.py --zipmoe BIN --model models/qwen2moe-debian-18m

1. Layout: config.json is a qwen2_moe with >= 8 layers, hidden >= 256, >= 32 experts, top-4 and a shared
   expert; model.safetensors holds BF16 tensors only; tokenizer.json / tokenizer_config.json /
   generation_config.json exist; the model card (README.md) exists.
2. `zipmoe compress --shards 1` then `zipmoe verify` (every tensor bit-exact), and the compressed
   size within 0.6 percentage points of the exponent-entropy bound (`zipmoe inspect --json`).
3. The tokenizer: the C++ tokenizer's ids for ASCII ShareGPT prompts equal those of an independent
   encoder of the same tokenizer.json (scripts/train/bpe.py: merges applied by rank per pre-token).
4. Greedy generation from the compressed directory, all-resident and in a 50 % memory budget with
   the zipmoe policy: byte-equal logits, and the continuation is text: printable ASCII, at least
   70 % of its whitespace-separated words purely alphabetic (the model was trained on ASCII English).
Exit 1 with the failed check named.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile


HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = os.path.join(HERE, "..", "..", "bench", "data", "sharegpt-first-turn-500.json")
PROMPT = "The configuration file is read when the program starts. It"
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts", "train"))
import bpe  # noqa: E402


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{out[-3000:]}")
    return out


def last_json(out):
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    m = a.model
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json", "README.md"):
        if not os.path.isfile(os.path.join(m, f)):
            fail(f"{m}/{f} is missing")
    c = json.load(open(os.path.join(m, "config.json")))
    want = [("model_type", c.get("model_type") == "qwen2_moe"), ("num_hidden_layers >= 8", c["num_hidden_layers"] >= 8),
            ("hidden_size >= 256", c["hidden_size"] >= 256), ("num_experts >= 32", c["num_experts"] >= 32),
            ("num_experts_per_tok == 4", c["num_experts_per_tok"] == 4),
            ("shared_expert_intermediate_size > 0", c["shared_expert_intermediate_size"] > 0)]
    for what, ok in want:
        if not ok:
            fail(f"{m}/config.json: {what}")
    with open(os.path.join(m, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    if dtypes != {"BF16"}:
        fail(f"{m}/model.safetensors: dtypes {sorted(dtypes)}, want BF16 only")
    print(f"layout ok: {len(header) - 1} BF16 tensors, {c['num_hidden_layers']} layers x {c['num_experts']} experts")

    with tempfile.TemporaryDirectory(prefix="zipmoe-shipped-") as work:
        z = os.path.join(work, "z")
        run([a.zipmoe, "compress", m, z, "--shards", "1"])
        run([a.zipmoe, "verify", m, z])
        info = json.loads(run([a.zipmoe, "inspect", z, "--json"]))
        gap = info["ratio"] - info["entropy_bound_ratio"]
        print(f"compressed: ratio {info['ratio']:.4f}, entropy bound {info['entropy_bound_ratio']:.4f} "
              f"(gap {100 * gap:.2f} pt), exponent entropy {info['exponent_entropy_bits']:.3f} bits, "
              f"stored {info['e_bits_per_value']:.3f} bits")
        if gap > 0.006:
            fail(f"compressed ratio {info['ratio']:.4f} is {100 * gap:.2f} pt above the entropy bound "
                 f"{info['entropy_bound_ratio']:.4f} (want <= 0.6)")

        tok = json.load(open(os.path.join(m, "tokenizer.json")))
        tokens = [None] * len(tok["model"]["vocab"])
        for t, i in tok["model"]["vocab"].items():
            tokens[i] = t
        index = {t: i for i, t in enumerate(tokens)}
        enc = bpe.Encoder(tokens, [tuple(index[x] for x in mg.split(" ")) for mg in tok["model"]["merges"]])
        prompts = [p["conversations"][0]["value"] for p in json.load(open(PROMPTS))]
        prompts = [p for p in prompts if p.isascii() and 40 < len(p) < 400][:5]
        for prompt in prompts:
            ids = last_json(run([a.zipmoe, "generate", "--model", z, "--prompt", prompt, "--max-new-tokens", "1",
                                 "--json"]))["prompt_ids"]
            if ids != enc.encode(prompt):
                fail(f"C++ tokenizer ids {ids} != bpe.py's {enc.encode(prompt)} for {prompt!r}")
        print(f"tokenizer ok: {len(prompts)} ShareGPT prompts, C++ ids == bpe.py ids")

        logits = []
        texts = []
        for extra in ([], ["--memory-budget", "50%", "--policy", "zipmoe"]):
            out_path = os.path.join(work, f"logits{len(logits)}")
            j = last_json(run([a.zipmoe, "generate", "--model", z, "--prompt", PROMPT, "--max-new-tokens", "24",
                               "--ignore-eos", "--json", "--logits-out", out_path] + extra))
            logits.append(open(out_path, "rb").read())
            texts.append(j["text"])
        if logits[0] != logits[1]:
            fail("logits in a 50 % memory budget differ from the all-resident run")
        text = texts[0]
        print(f"greedy continuation of {PROMPT!r}: {text!r}")
        if any(not (ch.isprintable() or ch in "\n\t") or ord(ch) > 126 for ch in text):
            fail(f"the continuation is not printable ASCII: {text!r}")
        words = text.split()
        alpha = [w for w in words if re.fullmatch(r"[A-Za-z]+[.,;:]?", w)]
        if len(words) < 8 or len(alpha) < 0.7 * len(words):
            fail(f"the continuation is not word-like ({len(alpha)} of {len(words)} words alphabetic): {text!r}")
    print("shipped model ok")


if __name__ == "__main__":
    main()
