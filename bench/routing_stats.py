#!/usr/bin/python3
"""Routing statistics of a model on real prompts: what expert caches and prefetchers can exploit.

For each model, `zipmoe generate` (all experts resident, greedy, batch 1) runs on N ShareGPT prompts
with --trace-out; the decode steps' records (one token each: its top-k experts per MoE layer) give

  top-10 % share   per layer, the share of all activations that go to the 10 % most used experts
                   (mean over layers; uniform routing gives 0.10);
  reuse            |E(t) ∩ E(t-1)| / k: of a token's experts at a layer, the share the previous token
                   also used there (mean over layers and tokens; uniform routing gives k / n_experts);
  next-layer recall  predicting layer l+1's k experts from layer l's: a co-occurrence table
                   count(e at l, e' at l+1) fitted on half of the prompts, evaluated on the other half
                   (2-fold): predicted = the k experts e' with the largest Σ_{e in E_l} count(e, e');
                   recall = |predicted ∩ E_{l+1}| / k. "popularity recall" = the same with the k most
                   used experts of l+1 as the prediction (no cross-layer information);
  exponent entropy  bits per BF16 exponent (Shannon) and zstd's bits, from `zipmoe inspect --json`.

Usage: routing_stats.py --zipmoe BIN --model NAME=HF_DIR[:COMPRESSED_DIR] [--model ...] [--prompts N]
                        [--tokens T] [--json OUT] [--markdown OUT]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPTS = os.path.join(HERE, "data", "sharegpt-first-turn-500.json")
FIRST_PROMPT = 300  # prompts #300.. (the other benchmarks use #0-#3, #100-#101, #200-#215)


def run_traces(zipmoe, hf, n_prompts, tokens, threads, work):
    """{session: {step: {layer: [experts]}}} of the decode steps."""
    sessions = {}
    for i in range(n_prompts):
        idx = FIRST_PROMPT + i
        trace = os.path.join(work, f"trace-{idx}.jsonl")
        cmd = [zipmoe, "generate", "--model", hf, "--prompts-file", PROMPTS, "--prompt-index", str(idx),
               "--max-new-tokens", str(tokens), "--ignore-eos", "--threads", str(threads), "--json",
               "--trace-out", trace]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode != 0:
            sys.exit(f"routing_stats: {' '.join(cmd)} failed:\n{p.stdout.decode()[-2000:]}")
        steps = defaultdict(dict)
        for line in open(trace):
            if not line.strip():
                continue
            r = json.loads(line)
            if r["step"] == 0:
                continue  # the prefill: many tokens in one record
            steps[r["step"]][r["layer"]] = r["experts"]
        sessions[idx] = steps
    return sessions


def stats(sessions, n_experts, top_k):
    layers = sorted({l for s in sessions.values() for st in s.values() for l in st})
    counts = {l: [0] * n_experts for l in layers}
    reuse_hits = reuse_n = 0
    for s in sessions.values():
        prev = None
        for step in sorted(s):
            for l, ex in s[step].items():
                for e in ex:
                    counts[l][e] += 1
                if prev is not None and l in prev:
                    reuse_hits += len(set(ex) & set(prev[l]))
                    reuse_n += len(ex)
            prev = s[step]
    top = max(1, math.ceil(0.1 * n_experts))
    shares = [sum(sorted(c, reverse=True)[:top]) / max(1, sum(c)) for c in counts.values()]

    # Cross-layer predictability, 2-fold over sessions.
    keys = sorted(sessions)
    folds = [keys[0::2], keys[1::2]]
    hit = pop_hit = n = 0
    for f in range(2):
        fit, test = folds[f], folds[1 - f]
        co = {l: defaultdict(lambda: [0] * n_experts) for l in layers}
        pop = {l: [0] * n_experts for l in layers}
        for k in fit:
            for st in sessions[k].values():
                for a, b in zip(layers, layers[1:]):
                    if a in st and b in st:
                        for e in st[a]:
                            row = co[a][e]
                            for e2 in st[b]:
                                row[e2] += 1
                        for e2 in st[b]:
                            pop[b][e2] += 1
        for k in test:
            for st in sessions[k].values():
                for a, b in zip(layers, layers[1:]):
                    if a not in st or b not in st:
                        continue
                    score = [0] * n_experts
                    for e in st[a]:
                        for e2, c in enumerate(co[a][e]):
                            score[e2] += c
                    kk = len(st[b])
                    pred = sorted(range(n_experts), key=lambda e2: (-score[e2], e2))[:kk]
                    ppop = sorted(range(n_experts), key=lambda e2: (-pop[b][e2], e2))[:kk]
                    hit += len(set(pred) & set(st[b]))
                    pop_hit += len(set(ppop) & set(st[b]))
                    n += kk
    decode_tokens = sum(len(s) for s in sessions.values())
    return {"decode_tokens": decode_tokens, "layers": len(layers), "n_experts": n_experts, "top_k": top_k,
            "top10_share": sum(shares) / len(shares), "top10_share_min": min(shares), "top10_share_max": max(shares),
            "top10_uniform": top / n_experts, "reuse": reuse_hits / max(1, reuse_n), "reuse_uniform": top_k / n_experts,
            "next_layer_recall": hit / max(1, n), "popularity_recall": pop_hit / max(1, n)}


def markdown(rows):
    """The statistics of `rows` (stats() + inspect fields) as a Markdown table (also docs/benchmarks.md (t))."""
    md = ["| model | experts (top-k) | decode tokens | top-10 % share (uniform) | reuse t-1 → t (uniform) | "
          "next-layer recall (popularity only) | exponent entropy bits | zstd bits | ratio (entropy bound) |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ent = (f"{r['exponent_entropy_bits']:.2f} | {r['e_bits_per_value']:.2f} | {r['ratio']:.3f} "
               f"({r['entropy_bound_ratio']:.3f})") if "ratio" in r else "– | – | –"
        md.append(f"| {r['model']} | {r['n_experts']} ({r['top_k']}) | {r['decode_tokens']} | "
                  f"{r['top10_share']:.3f} ({r['top10_uniform']:.3f}) | {r['reuse']:.3f} ({r['reuse_uniform']:.3f}) | "
                  f"{r['next_layer_recall']:.3f} ({r['popularity_recall']:.3f}) | {ent} |")
    return "\n".join(md) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--model", action="append", required=True, help="NAME=HF_DIR[:COMPRESSED_DIR]")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    rows = []
    for spec in args.model:
        name, dirs = spec.split("=", 1)
        hf, _, comp = dirs.partition(":")
        cfg = json.load(open(os.path.join(hf, "config.json")))
        n_exp = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
        with tempfile.TemporaryDirectory(prefix="zipmoe-routing-") as work:
            sessions = run_traces(args.zipmoe, hf, args.prompts, args.tokens, args.threads, work)
        row = {"model": name, "hf": hf, "prompts": args.prompts, "tokens": args.tokens,
               **stats(sessions, n_exp, cfg["num_experts_per_tok"])}
        if comp:
            p = subprocess.run([args.zipmoe, "inspect", comp, "--json"], stdout=subprocess.PIPE, check=True)
            ins = json.loads(p.stdout)
            row["exponent_entropy_bits"] = ins["exponent_entropy_bits"]
            row["e_bits_per_value"] = ins["e_bits_per_value"]
            row["ratio"] = ins["ratio"]
            row["entropy_bound_ratio"] = ins["entropy_bound_ratio"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    text = markdown(rows)
    print(text)
    if args.json:
        json.dump(rows, open(args.json, "w"), indent=1)
    if args.markdown:
        open(args.markdown, "w").write(text)


if __name__ == "__main__":
    main()
