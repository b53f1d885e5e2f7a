#!/usr/bin/python3
"""Validation loss of a trained checkpoint as shipped (BF16 weights from model.safetensors, fp32 math):
every token of the corpus' val.txt, in consecutive windows of --seq tokens (each predicted with up to
seq-1 tokens of context), reported as nats/token, perplexity and bits/byte (val.txt's bytes / tokens);
then the same for the held-out ShareGPT prompts alone ("sharegpt_val"). Writes the result
into the model directory's training.json ("evaluation") when --update is given.

Usage: evaluate.py --model DIR --corpus DIR [--seq 128] [--update]
"""
import argparse
import hashlib
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
import corpus  # noqa: E402
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
    ap.add_argument("--sharegpt", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                                                       "data", "sharegpt-first-turn-500.json"))
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
    eot = tok["added_tokens"][0]["id"]

    def measure(docs):
        """(tokens scored, nats/token, bits/byte) over the documents, windows of a.seq + 1 tokens."""
        ids = []
        for i, doc in enumerate(docs):
            if i:
                ids.append(eot)
            ids.extend(enc.encode(doc))
        ids = torch.tensor(ids, dtype=torch.long)
        total, count = 0.0, 0
        with torch.no_grad():
            starts = list(range(0, len(ids) - 1, a.seq))
            full = [w for w in starts if w + a.seq + 1 <= len(ids)]
            batches = [full[s:s + 16] for s in range(0, len(full), 16)] + [[w] for w in starts if w not in full]
            for group in batches:
                win = torch.stack([ids[w:w + min(a.seq + 1, len(ids) - w)] for w in group])
                logits, _, _ = model(win[:, :-1])
                total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), win[:, 1:].reshape(-1),
                                         reduction="sum").item()
                count += win[:, 1:].numel()
        nats = total / count
        n_bytes = sum(len(d.encode()) for d in docs) + len("\n<|endoftext|>\n") * (len(docs) - 1)
        return count, nats, nats / math.log(2) * len(ids) / n_bytes

    docs = open(os.path.join(a.corpus, "val.txt")).read().split("\n<|endoftext|>\n")
    count, nats, bpb = measure(docs)
    res = {"val_tokens": count, "val_nats_per_token": nats, "val_perplexity": math.exp(nats), "val_bits_per_byte": bpb,
           "seq": a.seq, "weights": "bf16 (model.safetensors)"}
    # The held-out ShareGPT prompts alone (chat requests, unlike the man pages): the same hash rule as corpus.py.
    held = [d for d in (corpus.to_ascii(x["conversations"][0]["value"]) for x in json.load(open(a.sharegpt)))
            if len(d) > 20 and int(hashlib.sha256(d.encode()).hexdigest()[:8], 16) % 20 == 0]
    count, nats, bpb = measure(held)
    res["sharegpt_val"] = {"documents": len(held), "tokens": count, "nats_per_token": nats,
                           "perplexity": math.exp(nats), "bits_per_byte": bpb}
    print(json.dumps(res))
    if a.update:
        path = os.path.join(a.model, "training.json")
        j = json.load(open(path))
        j["evaluation"] = res
        json.dump(j, open(path, "w"), indent=2)


if __name__ == "__main__":
    main()
