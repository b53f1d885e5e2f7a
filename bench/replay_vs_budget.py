#!/usr/bin/python3
"""Cache + scheduler + storage + recovery under capacity pressure, via `zipmoe replay` (not a test).

bench/suite.py (c) measures whole generations, where one cold request's misses are mostly first
touches, so the cache policies differ little there. This script drives the
runtime with a synthetic routing trace instead: every step and MoE layer selects top_k distinct
experts drawn from a Zipf(s) popularity over a random permutation per layer (s = 0: uniform), and each
expert's lease is held --compute-us µs as a stand-in for its computation. The zipmoe planner is fitted
to a trace of the same distribution drawn with another seed (workload profiling, ZipMoE §3.4).

Prints a markdown table (mean time per step, hit rate, MiB read, makespan / Lemma B.3 bound) and
writes one stats JSON per run under --out.

Usage:
  bench/replay_vs_budget.py --zipmoe build/bin/zipmoe --zstd DIR [--raw DIR] [--budgets 25,50,75]
                            [--zipf 1.0] [--steps 32] [--repeat 1] [--compute-us 2000] [--out DIR]
"""
import argparse
import json
import os
import random
import subprocess
import sys


def make_trace(path, n_layers_with_experts, n_experts, top_k, steps, zipf, seed):
    rng = random.Random(seed)
    weights = [1.0 / (r + 1) ** zipf for r in range(n_experts)]
    perms = {}
    with open(path, "w") as f:
        for step in range(steps):
            for layer in n_layers_with_experts:
                perm = perms.setdefault(layer, rng.sample(range(n_experts), n_experts))
                chosen = set()
                while len(chosen) < top_k:
                    chosen.add(perm[rng.choices(range(n_experts), weights)[0]])
                ids = sorted(chosen)
                f.write(json.dumps({"step": step, "layer": layer, "experts": ids, "tokens": [1] * len(ids)}) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--zstd", required=True)
    ap.add_argument("--raw")
    ap.add_argument("--budgets", default="25,50,75")
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--compute-us", type=float, default=2000)
    ap.add_argument("--repeat", type=int, default=1, help="replay the trace this many times (frequencies converge)")
    ap.add_argument("--systems", default="zipmoe,lru,lru-raw,full-load-raw")
    ap.add_argument("--out", default="bench-out/replay_vs_budget")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    info = json.loads(subprocess.run([a.zipmoe, "inspect", a.zstd, "--json"], capture_output=True, text=True,
                                     check=True).stdout)
    total = int(info["expert_bytes_raw"])
    layers = [p["layer_id"] for p in info["per_layer"] if p["experts"] > 0]
    config = json.load(open(os.path.join(a.zstd, "config.json")))
    top_k = int(config["num_experts_per_tok"])
    n_experts = int(info["n_experts"])
    trace = os.path.join(a.out, "trace.jsonl")
    plan_trace = os.path.join(a.out, "plan-trace.jsonl")
    make_trace(trace, layers, n_experts, top_k, a.steps, a.zipf, seed=1)
    make_trace(plan_trace, layers, n_experts, top_k, a.steps, a.zipf, seed=2)
    dirs = {"zstd": a.zstd, "raw": a.raw}
    systems = {"zipmoe": ("zipmoe", "zstd", ["--plan-trace", plan_trace]), "lru": ("lru", "zstd", []),
               "lru-raw": ("lru", "raw", []), "full-load-raw": ("full-load", "raw", []),
               "full-load": ("full-load", "zstd", []),
               "zipmoe-fifo-dispatch": ("zipmoe", "zstd", ["--plan-trace", plan_trace, "--fifo-dispatch"]),
               "zipmoe-nocomp": ("zipmoe", "raw", ["--no-compression", "--plan-trace", plan_trace])}
    rows = []
    for pct in [int(x) for x in a.budgets.split(",")]:
        for name in a.systems.split(","):
            policy, src, extra = systems[name]
            if not dirs[src]:
                continue
            stats = os.path.join(a.out, f"{name}-{pct}.json")
            cmd = [a.zipmoe, "replay", "--model", dirs[src], "--trace", trace, "--memory-budget",
                   str(total * pct // 100), "--policy", policy, "--compute-us", str(a.compute_us),
                   "--stats-json", stats, "--repeat", str(a.repeat)] + extra
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                raise SystemExit(f"failed: {' '.join(cmd)}\n{p.stderr[-2000:]}")
            j = json.load(open(stats))
            rows.append({"budget_pct": pct, "system": name, "step_s": j["step_seconds"],
                         "hit_rate": j["requests"]["hit_rate"],
                         "read_mib_per_step": (j["io"]["bytes_e"] + j["io"]["bytes_sm"]) / 2**20 / j["steps"],
                         "makespan_over_bound": j["mean_makespan_over_bound"]})
            print(f"{name}-{pct}: {j['step_seconds']:.3f} s/step, hit rate {j['requests']['hit_rate']:.3f}",
                  file=sys.stderr)
    json.dump({"zipf": a.zipf, "steps": a.steps, "repeat": a.repeat, "compute_us": a.compute_us, "rows": rows},
              open(os.path.join(a.out, "summary.json"), "w"), indent=2)
    print("| budget | system | s / step | / zipmoe | hit rate | read MiB / step | makespan/bound |")
    print("|---|---|---|---|---|---|---|")
    for pct in sorted({r["budget_pct"] for r in rows}):
        group = [r for r in rows if r["budget_pct"] == pct]
        z = next((r["step_s"] for r in group if r["system"] == "zipmoe"), None)
        for r in group:
            print(f"| {pct}% | {r['system']} | {r['step_s']:.3f} | {r['step_s'] / z:.2f} | {r['hit_rate']:.3f} | "
                  f"{r['read_mib_per_step']:.0f} | {r['makespan_over_bound']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
