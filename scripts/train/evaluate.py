#!/usr/bin/python3
"""Validation loss of a trained checkpoint as shipped (BF16 weights from model.safetensors, fp32 math):
every token of the corpus' val.txt, in windows of --seq tokens (each predicted with up to seq-1 tokens of
context), reported as nats/token, perplexity and bits/byte (bytes of val.txt / tokens). Writes the result
into the model directory's training.json ("evaluation") when --update is given.

Usage: evaluate.py --model DIR --corpus DIR [--seq 128] [--update]
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import train  # noqa: E402


def load_model(d):
    c = json.load(open(os.path.join(d, "config.json")))
    model = train.Model(c)
    with open(os.path.join(d, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    sd = {}
    for local in model.state_dict():
        hf = train.hf_name(local)
        if hf not in header:
            raise SystemExit(f"{d}/model.safetensors: tensor {hf} is missing")
        h = header[hf]
        if h["dtype"] != "BF16":
            raise SystemExit(f"{d}/model.safetensors: {hf} is {h['dtype']}, want BF16")
        a, b = h["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=np.int16).copy()
        sd[local] = torch.from_numpy(raw).view(torch.bfloat16).to(torch.float32).reshape(h["shape"])
    model.load_state_dict(sd)
    model.eval()
    return model, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--update", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, c = load_model(a.model)
    tok = json.load(open(os.path.join(a.model, "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    index = {t: i for i, t in enumerate(tokens)}
    merges = [tuple(index[x] for x in m.split(" ")) for m in tok["model"]["merges"]]
    enc = bpe.Encoder(tokens, merges)
    text = open(os.path.join(a.corpus, "val.txt")).read()
    eot = tok["added_tokens"][0]["id"]
    ids = []
    for i, doc in enumerate(text.split("\n<|endoftext|>\n")):
        if i:
            ids.append(eot)
        ids.extend(enc.encode(doc))
    ids = torch.tensor(ids, dtype=torch.long)
    total, count = 0.0, 0
    with torch.no_grad():
        n_win = (len(ids) - 1) // a.seq
        for s in range(0, n_win, 16):
            batch = torch.stack([ids[w * a.seq:w * a.seq + a.seq + 1] for w in range(s, min(n_win, s + 16))])
            logits, _, _ = model(batch[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum")
            total += loss.item()
            count += batch[:, 1:].numel()
    nats = total / count
    bpb = nats / math.log(2) * len(ids) / len(text.encode())
    res = {"val_tokens": count, "val_nats_per_token": nats, "val_perplexity": math.exp(nats), "val_bits_per_byte": bpb,
           "seq": a.seq, "weights": "bf16 (model.safetensors)"}
    print(json.dumps(res))
    if a.update:
        path = os.path.join(a.model, "training.json")
        j = json.load(open(path))
        j["evaluation"] = res
        json.dump(j, open(path, "w"), indent=2)


if __name__ == "__main__":
    main()
