#!/usr/bin/python3
"""TPOT of the runtime's policies at several memory budgets, measured in one run (not a test).

For each budget (a share of the model's BF16 expert bytes) it runs `zipmoe generate --memory-budget`
for every system below on one prompt, with cold expert reads (O_DIRECT; the page cache is dropped
before each run when /proc/sys/vm/drop_caches is writable), checks that every run's logits are
byte-equal to the all-resident run (exits 1 otherwise), and prints a markdown table plus one JSON
file per run under --out.

Systems (a system = policy + the directory its experts are read from):
  zipmoe          --policy zipmoe on the zstd directory (pools planned by Alg. 4, profile.json)
  lru             --policy lru on the zstd directory (full-tensor LRU cache over our compressed storage)
  lru-raw         --policy lru on a `--codec none` directory (MoE-Infinity-like: BF16 bytes from disk)
  full-load-raw   --policy full-load on the `--codec none` directory (Accelerate-like: no cache)
  full-load       --policy full-load on the zstd directory
  zipmoe-nocomp   --policy zipmoe --no-compression on the `--codec none` directory (ablation)

Usage:
  bench/tpot_vs_budget.py --zipmoe build/bin/zipmoe --zstd DIR --raw DIR [--budgets 25,50,75]
                          [--max-new-tokens 12] [--threads 2] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import time

WARMUP_PROMPT = "Write a short poem about autumn leaves falling in a quiet park near the river."
PROMPT = ("The quick brown fox jumps over the lazy dog. Tell me a story about a lighthouse keeper "
          "who finds a message in a bottle.")


def expert_bytes(zipmoe, model):
    out = subprocess.run([zipmoe, "inspect", model, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("`zipmoe inspect --json` failed: " + out.stderr[-400:])
    return int(json.loads(out.stdout)["expert_bytes_raw"])


def drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def run(cmd, log):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stdout + p.stderr)
    if p.returncode != 0:
        raise SystemExit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--zstd", required=True, help="compressed directory (zstd)")
    ap.add_argument("--raw", help="the same model compressed with --codec none")
    ap.add_argument("--budgets", default="25,50,75")
    ap.add_argument("--max-new-tokens", type=int, default=12)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="zipmoe,lru,lru-raw,full-load-raw,full-load")
    ap.add_argument("--out", default="bench-out/tpot_vs_budget")
    ap.add_argument("--warmup-prompt", default=WARMUP_PROMPT,
                    help="prompt of the warm-up run whose routing trace the zipmoe planner fits (\"\" = uniform f_r)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    total = expert_bytes(a.zipmoe, a.zstd)
    base = [a.zipmoe, "generate", "--prompt", PROMPT, "--max-new-tokens", str(a.max_new_tokens), "--ignore-eos",
            "--threads", str(a.threads), "--json"]
    dirs = {"zstd": a.zstd, "raw": a.raw}
    systems = {"zipmoe": ("zipmoe", "zstd", []), "lru": ("lru", "zstd", []), "lru-raw": ("lru", "raw", []),
               "full-load-raw": ("full-load", "raw", []), "full-load": ("full-load", "zstd", []),
               "zipmoe-nocomp": ("zipmoe", "raw", ["--no-compression"])}
    chosen = [s for s in a.systems.split(",") if s in systems and dirs[systems[s][1]]]

    # Workload profiling (ZipMoE §3.4): the planner fits f_r to the routing of a different prompt.
    trace = None
    if a.warmup_prompt:
        trace = os.path.join(a.out, "warmup.trace")
        run([a.zipmoe, "generate", "--prompt", a.warmup_prompt, "--max-new-tokens", str(a.max_new_tokens),
             "--ignore-eos", "--threads", str(a.threads), "--json", "--model", a.zstd, "--memory-budget",
             str(total // 2), "--policy", "lru", "--trace-out", trace], os.path.join(a.out, "warmup.log"))
        for name, (policy, src, extra) in systems.items():
            if policy == "zipmoe":
                extra.extend(["--plan-trace", trace])

    ref = os.path.join(a.out, "resident.logits")
    dropped = drop_caches()
    run(base + ["--model", a.zstd, "--logits-out", ref], os.path.join(a.out, "resident.log"))
    want = open(ref, "rb").read()
    rows = []
    for pct in [int(x) for x in a.budgets.split(",")]:
        budget = total * pct // 100
        for name in chosen:
            policy, src, extra = systems[name]
            tag = f"{name}-{pct}"
            stats = os.path.join(a.out, tag + ".json")
            logits = os.path.join(a.out, tag + ".logits")
            drop_caches()
            wall = run(base + ["--model", dirs[src], "--memory-budget", str(budget), "--policy", policy,
                               "--stats-json", stats, "--logits-out", logits] + extra, os.path.join(a.out, tag + ".log"))
            same = open(logits, "rb").read() == want
            os.remove(logits)
            j = json.load(open(stats))
            rows.append({"budget_pct": pct, "budget_bytes": budget, "system": name, "tpot_s": j["tpot_s"],
                         "ttft_s": j["ttft_s"], "hit_rate": j["requests"]["hit_rate"],
                         "read_mib": (j["io"]["bytes_e"] + j["io"]["bytes_sm"]) / 2**20,
                         "read_s": j["io"]["seconds"],
                         "makespan_over_bound": j["mean_makespan_over_bound"], "bit_identical": same,
                         "wall_s": wall})
            print(f"{tag}: tpot {j['tpot_s']:.3f} s, hit rate {j['requests']['hit_rate']:.3f}, "
                  f"makespan/bound {j['mean_makespan_over_bound']:.2f}, identical {same}", file=sys.stderr)
    json.dump({"expert_bytes": total, "caches_dropped": dropped, "rows": rows},
              open(os.path.join(a.out, "summary.json"), "w"), indent=2)

    print(f"| budget | system | TPOT s | TPOT / zipmoe | TTFT s | hit rate | read MiB | makespan/bound | logits = resident |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pct in sorted({r["budget_pct"] for r in rows}):
        group = [r for r in rows if r["budget_pct"] == pct]
        zt = next((r["tpot_s"] for r in group if r["system"] == "zipmoe"), None)
        for r in group:
            ratio = f"{r['tpot_s'] / zt:.2f}" if zt else "-"
            print(f"| {pct}% | {r['system']} | {r['tpot_s']:.3f} | {ratio} | {r['ttft_s']:.2f} | {r['hit_rate']:.3f} | "
                  f"{r['read_mib']:.0f} | {r['makespan_over_bound']:.2f} | {'yes' if r['bit_identical'] else 'NO'} |")
    if not all(r["bit_identical"] for r in rows):
        print("error: some run's logits differ from the all-resident run", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
