#!/usr/bin/python3
"""The benchmark suite behind bench/run.sh (ZipMoE §5, Figs. 3, 4, 7-10; issue 6). Not a test.

Prepares the models (synth -> compress -> profile, cached under --models), measures the disk, then
runs the experiments in order of value, each writing OUT/<experiment>.json:

  c  TPOT / TTFT vs memory budget, every policy + mmap, with the physical-limit line (Fig. 7)
  r  the same runtime under capacity pressure: `zipmoe replay` of a Zipf routing trace vs budget
  a  compressed size per codec / level / K vs the entropy bound (Fig. 3)
  b  read vs decode throughput of the same bytes with 1..cores threads (Fig. 4)
  g  per-layer makespan / Lemma B.3 bound: cache-affinity scheduler vs FIFO dispatch
  f  eviction ablation FIFO / LRU / Marking / zipmoe with and without the plan (Fig. 10)
  d  throughput vs batch size (Fig. 8)
  e  end-to-end latency vs output length (Fig. 9)
  h  embedded (`zipmoe generate`) vs multi-process (`zipmoe up`) TPOT
  l  HTTP serving under load: bench/load.py's ShareGPT requests at concurrency 1..C against `zipmoe serve`
  i  GPU recovery kernel and TPOT (skipped without a CUDA device)

Every generation runs cold (page cache dropped) inside one cgroup v1 memory group whose limit is
the same for every system at a given budget (benchlib.MemoryCap), and its --logits-out must be
byte-equal to (a prefix of) the all-resident run; the suite exits 1 otherwise. bench/report.py
turns OUT into PNGs and docs/benchmarks.md.

Usage: bench/suite.py --mode quick|full --bin BUILD/bin --out DIR --models DIR [--only c,a,...]
"""
import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from load import load_prompts  # noqa: E402
from replay_vs_budget import make_trace  # noqa: E402

# Real prompts (bench/data/README.md): every generation's prompt comes from ShareGPT. Sequence i of a
# batch of N is prompt prompt_index + i; the planner's workload profile is single-prompt runs on other
# prompts from PLAN_INDEX (ZipMoE §3.4: popularity from a calibration workload, not the measured one).
PROMPTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sharegpt-first-turn-500.json")
# Per mode: "prompt_index" (quick: #3 "Suggest subchapters for chapter 5", 33 characters, so a cold
# prefill reads part of the model rather than all of it; full: #0 "How to stop automatic updates from
# the WSUS Server to a target machine", 70 characters) and "plan_prompts" (how many from PLAN_INDEX).
PLAN_INDEX = 100
LOAD_INDEX = 200      # (l): the HTTP load test's requests start here
EMBEDDING_STD = 1.0  # docs/synth.md "Embedding scale": keeps decode-time routing token-dependent
ROUTER_SKEW = 0.5  # docs/synth.md: X = 0.25-0.5 gives the 20-30 % top-10 % shares of trained MoE models

POLICIES = ["zipmoe", "lru", "fifo", "lfu", "marking", "full-load", "mmap"]
MODES = {
    "quick": {"tokens": 8, "budgets": [25, 50], "lengths": [8, 16], "batches": [1, 2],
              "batch_systems": ["zipmoe", "lru"], "length_systems": ["zipmoe", "lru"],
              "ablation_budgets": [50], "fifo_budgets": [50], "deepseek": "tiny",
              "prompt_index": 3, "plan_prompts": 2, "c_systems_other_budgets": ["zipmoe", "lru", "mmap"],
              "codec_sections": "ratio,threads,io", "io_mib": 256,
              "replay": {"steps": 16, "repeat": 2, "systems": ["zipmoe", "lru", "fifo", "marking"]},
              "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 8, "max_tokens": 8,
                       "max_prompt_chars": 400}},
    "full": {"tokens": 32, "budgets": [10, 25, 50, 75, 90], "lengths": [32, 64, 128, 256], "batches": [1, 4, 16],
             "batch_systems": ["zipmoe", "lru", "full-load", "mmap"], "length_systems": ["zipmoe", "lru", "mmap"],
             "ablation_budgets": [25, 50], "fifo_budgets": [25, 50, 75], "deepseek": "mini",
             "prompt_index": 0, "plan_prompts": 4, "c_systems_other_budgets": POLICIES,
             "codec_sections": "ratio,threads,io", "io_mib": 1024,
             "replay": {"steps": 48, "repeat": 2, "budgets": [10, 25, 50],
                        "systems": ["zipmoe", "lru", "fifo", "lfu", "marking", "full-load", "zipmoe-noplan"]},
             "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 16, "max_tokens": 32,
                      "max_prompt_chars": 1000}},
}


class Suite:
    def __init__(self, a):
        self.a = a
        self.cfg = MODES[a.mode]
        self.zipmoe = os.path.join(a.bin, "zipmoe")
        self.out = a.out
        self.logs = os.path.join(a.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.cap = bl.MemoryCap(f"zipmoe-bench-{os.getpid()}")
        self.failures = []      # bit-exactness failures (fatal at the end)
        self.threads = os.cpu_count() or 2
        self.rows = {}          # run key -> row (reused across experiments)
        self.models = {}
        self.meta = {"mode": a.mode, "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                     "machine": bl.machine_info(), "commit": bl.git_commit(a.repo),
                     "cgroup": {"available": self.cap.available, "reason": self.cap.reason,
                                "path": self.cap.path if self.cap.available else None},
                     "drop_caches": bl.drop_caches(), "router_skew": ROUTER_SKEW, "embedding_std": EMBEDDING_STD, "prompts_file": os.path.relpath(PROMPTS_FILE, a.repo),
                     "prompt_index": self.cfg["prompt_index"],
                     "prompt": load_prompts(PROMPTS_FILE)[self.cfg["prompt_index"]][2],
                     "plan_prompts": [PLAN_INDEX, PLAN_INDEX + self.cfg["plan_prompts"] - 1], "threads": self.threads,
                     "cfg": self.cfg}
        if not self.cap.available:
            bl.warn(f"no memory cap: {self.cap.reason}; every run goes uncapped (the report says so)")

    # ---------------------------------------------------------------- models
    def zm(self, *args, log, cold=False, capped=False, limit=None, timeout=None):
        return bl.run_cmd([self.zipmoe] + list(args), os.path.join(self.logs, log),
                          cap=self.cap if capped else None, limit_bytes=limit, cold=cold, timeout=timeout)

    def prepare(self, arch, preset):
        root = os.path.join(self.a.models, f"{arch}-{preset}-skew{ROUTER_SKEW}-emb{EMBEDDING_STD}")
        hf, zstd = root + "-hf", root + "-zstd"
        t0 = time.time()
        if not os.path.exists(os.path.join(hf, "config.json")):
            bl.log(f"synth {arch} {preset} --router-skew {ROUTER_SKEW} -> {hf}")
            self.zm("synth", "--arch", arch, "--preset", preset, "--router-skew", str(ROUTER_SKEW), "--seed", "0",
                    "--embedding-std", str(EMBEDDING_STD),
                    "--out", hf, log=f"synth-{arch}-{preset}.log")
        if not os.path.exists(os.path.join(zstd, "manifest.bin")):
            bl.log(f"compress {hf} -> {zstd}")
            self.zm("compress", hf, zstd, "--codec", "zstd", "--force", log=f"compress-{arch}-{preset}.log")
        if not os.path.exists(os.path.join(zstd, "profile.json")):
            bl.log(f"profile {zstd}")
            self.zm("profile", "--model", zstd, log=f"profile-{arch}-{preset}.log", cold=True)
        info = json.loads(subprocess.run([self.zipmoe, "inspect", zstd, "--json"], capture_output=True, text=True,
                                         check=True).stdout)
        m = {"arch": arch, "preset": preset, "hf": hf, "zstd": zstd, "inspect": info,
             "config": json.load(open(os.path.join(zstd, "config.json"))),
             "expert_bytes": int(info["expert_bytes_raw"]), "prepare_s": time.time() - t0}
        self.models[(arch, preset)] = m
        return m

    # ---------------------------------------------------------------- runs
    def prompt_args(self, index=None):
        index = self.cfg["prompt_index"] if index is None else index
        return ["--prompts-file", PROMPTS_FILE, "--prompt-index", str(index)]

    def reference(self, m, tokens, batch=1):
        """All-resident run on the HF checkpoint (uncapped): the logits every system must reproduce."""
        key = ("ref", m["arch"], m["preset"], batch)
        have = self.rows.get(key)
        if have and (have["tokens"] == tokens or (batch == 1 and have["tokens"] >= tokens)):
            return have
        tag = f"{m['arch']}-{m['preset']}-resident-b{batch}"
        logits = os.path.join(self.out, tag + ".logits")
        r = self.zm("generate", "--model", m["hf"], *self.prompt_args(), "--max-new-tokens", str(tokens),
                    "--ignore-eos", "--threads", str(self.threads), "--json", "--batch", str(batch),
                    "--logits-out", logits, log=tag + ".log", cold=True)
        j = json.loads(r["stdout"].strip().splitlines()[-1])
        row = {"tokens": tokens, "logits": open(logits, "rb").read(), "generated_ids": j["generated_ids"],
               "prompt_ids": j["prompt_ids"], "prompt_tokens_total": j["prompt_tokens_total"], "tpot_s": j["tpot_s"],
               "ttft_s": j["ttft_s"], "tokens_per_s": j["tokens_per_s"]}
        os.remove(logits)
        self.rows[key] = row
        ref_meta = {"tokens": tokens, "tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"], "tokens_per_s": j["tokens_per_s"]}
        n = self.cfg["tokens"]
        floor_key = f"{m['arch']}-{m['preset']}-n{n}"
        if batch == 1 and floor_key not in self.meta.get("compute_floor", {}):
            # The compute floor: (c)'s generation again with the page cache still warm, so every expert
            # is resident and nothing is read or decoded. No cache policy's TPOT can go below it here.
            w = self.zm("generate", "--model", m["hf"], *self.prompt_args(), "--max-new-tokens", str(n),
                        "--ignore-eos", "--threads", str(self.threads), "--json", log=tag + "-warm.log")
            floor = json.loads(w["stdout"].strip().splitlines()[-1])["tpot_s"]
            self.meta.setdefault("compute_floor", {})[floor_key] = floor
        self.meta.setdefault("reference", {})[f"{m['arch']}-{m['preset']}" + ("" if batch == 1 else f"-b{batch}")] = ref_meta
        return row

    def cap_bytes(self, m, pct):
        if "overhead_bytes" not in m:
            return None
        return m["expert_bytes"] * pct // 100 + m["overhead_bytes"]

    @staticmethod
    def logits_allowance(m, ref, batch, tokens):
        """Extra cap for a run that records its logits for the bit-exactness check (the calibration run
        records none): rows × vocab × 4 B, three times (the prefill's logits tensor, the per-sequence
        results, the file's concatenation). Same for every system at a point; a 16-prompt ShareGPT
        batch records ~1600 rows × 151936 floats ≈ 1 GB, which the 256 MiB slack cannot hold."""
        rows = ref["prompt_tokens_total"] + batch * max(0, tokens - 1)
        return 3 * rows * int(m["config"]["vocab_size"]) * 4

    def calibrate(self, m, pct):
        """(1) Warm-up runs (lru, cfg["plan_prompts"] other ShareGPT prompts, uncapped): the routing trace the zipmoe planner
        fits (workload profiling, ZipMoE §3.4). (2) The memory a process needs besides its expert
        arena: a short full-load run (arena = staging slots only) in the group without a limit;
        overhead = its peak (RSS + page cache + shm) - its arena + 256 MiB slack. Every capped run at
        budget B then gets the limit B + overhead, whatever the system."""
        trace = os.path.join(self.out, f"{m['arch']}-{m['preset']}-warmup.trace")
        budget = m["expert_bytes"] * pct // 100
        # One single-sequence generation per calibration prompt (the planner fits batch size 1), merged
        # into one trace with a session per prompt (docs/planner.md "Trace format").
        lines = []
        for i in range(self.cfg["plan_prompts"]):
            part = f"{trace}.{i}"
            self.zm("generate", "--model", m["zstd"], *self.prompt_args(PLAN_INDEX + i), "--max-new-tokens",
                    str(self.cfg["tokens"]), "--ignore-eos", "--threads", str(self.threads), "--json",
                    "--memory-budget", str(budget), "--policy", "lru", "--trace-out", part,
                    log=f"{m['arch']}-{m['preset']}-warmup-{i}.log", cold=True)
            for line in open(part):
                rec = json.loads(line)
                rec["session"] = f"plan-{PLAN_INDEX + i}"
                lines.append(json.dumps(rec))
            os.remove(part)
        with open(trace, "w") as f:
            f.write("\n".join(lines) + "\n")
        m["trace"] = trace
        if not self.cap.available:
            return
        stats = os.path.join(self.out, f"{m['arch']}-{m['preset']}-calibration.json")
        r = self.zm("generate", "--model", m["zstd"], *self.prompt_args(), "--max-new-tokens", "4", "--ignore-eos",
                    "--threads", str(self.threads), "--json", "--memory-budget", str(m["expert_bytes"] // 10),
                    "--policy", "full-load", "--stats-json", stats, log=f"{m['arch']}-{m['preset']}-calibration.log",
                    cold=True, capped=True, limit=None)
        arena = json.load(open(stats))["arena"]["mapped_bytes"]
        slack = 256 * bl.MIB
        m["overhead_bytes"] = ((r["peak_bytes"] - arena + slack) // (64 * bl.MIB) + 1) * 64 * bl.MIB
        m["calibration"] = {"policy": "full-load", "peak_bytes": r["peak_bytes"], "arena_bytes": arena,
                            "slack_bytes": slack}
        bl.log(f"calibration: full-load peak {r['peak_bytes'] / bl.GIB:.2f} GiB with a {arena / bl.GIB:.2f} GiB arena "
               f"-> cap = budget + {m['overhead_bytes'] / bl.GIB:.2f} GiB")

    def system_args(self, m, system):
        """(model dir, extra generate flags) of a named system."""
        z = m["zstd"]
        plan = ["--plan-trace", m["trace"]] if m.get("trace") else []
        table = {
            "zipmoe": (z, ["--policy", "zipmoe"] + plan),
            "zipmoe-noplan": (z, ["--policy", "zipmoe", "--pool-ratios", "F=1"]),
            "zipmoe-fifo-dispatch": (z, ["--policy", "zipmoe", "--fifo-dispatch"] + plan),
            "mmap": (m["hf"], ["--policy", "mmap"]),
        }
        for p in ("lru", "fifo", "lfu", "marking", "full-load"):
            table[p] = (z, ["--policy", p])
        return table[system]

    def run(self, m, system, pct, tokens, batch=1, tag_extra=""):
        """One capped, cold generation; checked against the all-resident logits. Returns its row."""
        key = (m["arch"], m["preset"], system, pct, tokens, batch)
        if key in self.rows:
            return self.rows[key]
        ref = self.reference(m, tokens, batch)
        model_dir, extra = self.system_args(m, system)
        budget = m["expert_bytes"] * pct // 100
        tag = f"{m['arch']}-{m['preset']}-{system}-{pct}-n{tokens}-b{batch}{tag_extra}"
        stats = os.path.join(self.out, "runs", tag + ".json")
        os.makedirs(os.path.dirname(stats), exist_ok=True)
        logits = os.path.join(self.out, tag + ".logits")
        limit = self.cap_bytes(m, pct)
        if limit is not None:
            limit += self.logits_allowance(m, ref, batch, tokens)
        row = {"arch": m["arch"], "preset": m["preset"], "system": system, "budget_pct": pct, "budget_bytes": budget,
               "tokens": tokens, "batch": batch, "cap_bytes": limit if self.cap.available else None,
               "stats_json": os.path.relpath(stats, self.out)}
        try:
            r = self.zm("generate", "--model", model_dir, *self.prompt_args(), "--max-new-tokens", str(tokens),
                        "--ignore-eos", "--threads", str(self.threads), "--json", "--batch", str(batch),
                        "--memory-budget", str(budget), "--stats-json", stats, "--logits-out", logits, *extra,
                        log=tag + ".log", cold=True, capped=True, limit=limit, timeout=1800)
        except bl.RunError as e:
            res = e.args[1]
            row.update({"ok": False, "error": str(e.args[0])[:600], "oom": res["oom_kills"] > 0,
                        "peak_bytes": res["peak_bytes"]})
            bl.warn(f"{tag}: {row['error'][:300]}")
            self.rows[key] = row
            return row
        j = json.loads(r["stdout"].strip().splitlines()[-1])
        s = json.load(open(stats))
        # Rows of a batch are concatenated per sequence: a prefix check only holds for batch 1.
        same = bl.same_prefix(logits, ref["logits"]) if batch == 1 or ref["tokens"] == tokens else False
        os.remove(logits)
        row.update({"ok": True, "tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"], "tokens_per_s": j["tokens_per_s"],
                    "wall_s": r["wall_s"], "total_s": s.get("total_s"), "text": j.get("text"), "peak_bytes": r["peak_bytes"], "bit_identical": same,
                    "generated_tokens": s.get("generated_tokens"), "stats": s})
        if system != "mmap":
            row.update({"hit_rate": s["requests"].get("hit_rate"),
                        "read_bytes": s["io"]["bytes_e"] + s["io"]["bytes_sm"],
                        "makespan_over_bound": s.get("mean_makespan_over_bound"),
                        "layer_ratios": [l.get("mean_makespan_over_bound") for l in s.get("layers", [])
                                         if l.get("runs")]})
        else:
            row.update({"major_faults": s["mmap"]["major_faults"], "read_bytes": None})
        if not same:
            self.failures.append(tag)
            bl.warn(f"{tag}: logits differ from the all-resident run")
        bl.log(f"{tag}: tpot {row['tpot_s']:.3f} s, ttft {row['ttft_s']:.2f} s, peak "
               f"{(row['peak_bytes'] or 0) / bl.GIB:.2f} GiB, identical {same}")
        self.rows[key] = row
        return row

    def save(self, name, obj):
        obj = dict(obj)
        obj["experiment"] = name
        bl.write_json(os.path.join(self.out, name + ".json"), obj)

    @staticmethod
    def public(row):
        return {k: v for k, v in row.items() if k not in ("stats",)}

    # ---------------------------------------------------------------- experiments
    def disk(self, m):
        """O_DIRECT bandwidth of the disk holding the models: dd over the largest compressed file."""
        files = sorted((os.path.getsize(os.path.join(m["zstd"], f)), f) for f in os.listdir(m["zstd"]))
        path = os.path.join(m["zstd"], files[-1][1])
        res = {}
        for bs, count in (("1M", 1024), ("128K", 4096)):
            vals = [bl.dd_direct_gbps(path, bs, count) for _ in range(3)]
            vals = [v for v in vals if v]
            res[bs] = sorted(vals)[len(vals) // 2] if vals else None
        self.meta["disk"] = {"file": path, "odirect_gbps_1m": res["1M"], "odirect_gbps_128k": res["128K"],
                             "how": "dd iflag=direct, sequential, median of 3 (1 GiB at 1 MiB, 512 MiB at 128 KiB)"}
        bl.log(f"disk: O_DIRECT {res['1M']} GB/s (1 MiB), {res['128K']} GB/s (128 KiB)")

    def exp_c(self, m):
        rows = []
        tokens = self.cfg["tokens"]
        for pct in self.cfg["budgets"]:
            for system in POLICIES if pct == 50 else self.cfg["c_systems_other_budgets"]:
                rows.append(self.run(m, system, pct, tokens))
            # Bytes read by the decode steps: the run's totals minus its counters at the first token
            # (--stats-json "prefill").
            z = self.rows[(m["arch"], m["preset"], "zipmoe", pct, tokens, 1)]
            bw = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
            prefill = (z.get("stats") or {}).get("prefill")
            if z.get("ok") and prefill and bw:
                steps = max(1, (z["generated_tokens"] or tokens) - 1)
                z["prefill_read_bytes"] = prefill["io"]["bytes_e"] + prefill["io"]["bytes_sm"]
                decode_bytes = max(0, z["read_bytes"] - z["prefill_read_bytes"])
                z["decode_read_bytes_per_token"] = decode_bytes / steps
                z["physical_limit_s"] = decode_bytes / steps / (bw * 1e9)
        self.save(f"c_tpot_vs_budget_{m['arch']}", {"model": self.model_meta(m), "rows": [self.public(r) for r in rows]})

    def exp_r(self, m):
        """`zipmoe replay` (storage, cache, scheduler, decode, recovery; no model math): per step and MoE
        layer, top_k distinct experts from a Zipf(1.0) popularity over a per-layer permutation; each lease
        held 200 µs (a stand-in for GPU expert compute). The zipmoe plan is fitted to a trace of the same
        distribution drawn with another seed (bench/replay_vs_budget.py's generator)."""
        rc = self.cfg["replay"]
        info = m["inspect"]
        layers = [p["layer_id"] for p in info["per_layer"] if p["experts"] > 0]
        top_k = int(m["config"]["num_experts_per_tok"])
        trace = os.path.join(self.out, "replay-trace.jsonl")
        plan_trace = os.path.join(self.out, "replay-plan-trace.jsonl")
        make_trace(trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=1)
        make_trace(plan_trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=2)
        bw = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
        rows = []
        for pct in rc.get("budgets", self.cfg["budgets"]):
            for system in rc["systems"]:
                _, extra = self.system_args(m, system)
                if "--plan-trace" in extra:  # the replay's own workload, not the generation's warm-up trace
                    i = extra.index("--plan-trace")
                    extra = extra[:i + 1] + [plan_trace] + extra[i + 2:]
                tag = f"replay-{system}-{pct}"
                stats = os.path.join(self.out, "runs", tag + ".json")
                os.makedirs(os.path.dirname(stats), exist_ok=True)
                row = {"system": system, "budget_pct": pct, "cap_bytes": self.cap_bytes(m, pct)}
                try:
                    r = self.zm("replay", "--model", m["zstd"], "--trace", trace, "--memory-budget",
                                str(m["expert_bytes"] * pct // 100), "--compute-us", "200", "--repeat",
                                str(rc["repeat"]), "--stats-json", stats, *extra, log=tag + ".log", cold=True,
                                capped=True, limit=self.cap_bytes(m, pct), timeout=1800)
                except bl.RunError as e:
                    row.update({"ok": False, "error": str(e.args[0])[:600], "oom": e.args[1]["oom_kills"] > 0})
                    rows.append(row)
                    continue
                j = json.load(open(stats))
                read = (j["io"]["bytes_e"] + j["io"]["bytes_sm"]) / max(1, j["steps"])
                row.update({"ok": True, "step_s": j["step_seconds"], "hit_rate": j["requests"].get("hit_rate"),
                            "read_bytes_per_step": read, "physical_limit_s": read / (bw * 1e9) if bw else None,
                            "makespan_over_bound": j.get("mean_makespan_over_bound"), "peak_bytes": r["peak_bytes"],
                            "layer_ratios": [l.get("mean_makespan_over_bound") for l in j.get("layers", [])
                                             if l.get("runs")]})
                bl.log(f"{tag}: {row['step_s'] * 1e3:.1f} ms/step, hit rate {row['hit_rate']}, "
                       f"{read / bl.MIB:.1f} MiB/step")
                rows.append(row)
        self.save(f"r_replay_vs_budget_{m['arch']}", {"zipf": 1.0, "compute_us": 200, "steps": rc["steps"],
                                                      "repeat": rc["repeat"], "rows": rows})

    def model_meta(self, m):
        keep = ("arch", "preset", "hf", "zstd", "expert_bytes", "overhead_bytes", "calibration", "prepare_s")
        out = {k: m[k] for k in keep if k in m}
        info = m["inspect"]
        out["inspect"] = {k: v for k, v in info.items() if k != "per_layer"}
        return out

    def exp_a(self, m):
        p = subprocess.run([os.path.join(self.a.bin, "codec_bench"), "--sections=ratio", "--min_seconds=0.05"],
                           capture_output=True, text=True)
        open(os.path.join(self.logs, "codec_bench_ratio.log"), "w").write(p.stdout + p.stderr)
        rows = []
        for line in p.stdout.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 10 and cells[1] in ("zstd", "lz4", "none"):
                def num(x):
                    try:
                        return float(x.rstrip("%"))
                    except ValueError:
                        return None
                rows.append({"tensor": cells[0], "codec": cells[1], "level": cells[2], "k": cells[3],
                             "e_bits": num(cells[5]), "h_bits": num(cells[6]), "stored_pct": num(cells[7]),
                             "bound_pct": num(cells[8]), "compress_mbps": num(cells[9])})
        models = {f"{a}-{pr}": {k: v for k, v in mm["inspect"].items() if k != "per_layer"}
                  for (a, pr), mm in self.models.items()}
        self.save("a_ratio", {"codec_bench": rows, "models": models})

    def codec_bench(self, sections, log, extra=()):
        """Runs codec_bench and parses its decode-thread rows and read rows."""
        p = subprocess.run([os.path.join(self.a.bin, "codec_bench"), f"--sections={sections}",
                            f"--io_dir={self.a.models}", f"--io_mib={self.cfg['io_mib']}", "--min_seconds=0.2",
                            f"--threads={self.threads}", *extra], capture_output=True, text=True)
        open(os.path.join(self.logs, log), "w").write(p.stdout + p.stderr)
        decode, read = [], []
        num = re.compile(r"([0-9.]+) \(([0-9.]+)\)")
        for line in p.stdout.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 5 and cells[0].isdigit():
                k16, k4 = num.match(cells[1]), num.match(cells[3])
                decode.append({"threads": int(cells[0]), "k16_gbps": float(k16.group(1)) if k16 else None,
                               "k4_gbps": float(k4.group(1)) if k4 else None})
            elif len(cells) == 2 and cells[0].startswith(("O_DIRECT", "buffered")):
                g = num.match(cells[1])
                t = re.search(r"(\d+) thread", cells[0])
                read.append({"read": cells[0], "threads": int(t.group(1)) if t else 1,
                             "gbps": float(g.group(1)) if g else None})
        return decode, read

    def exp_b(self, m):
        decode, read = self.codec_bench("threads,io", "codec_bench_threads_io.log")
        # The same with the other side running concurrently on the same cores: decode while a loop of
        # O_DIRECT reads of the model's experts file runs, and O_DIRECT reads (dd) while a 1-thread
        # decode loop runs.
        experts = os.path.join(m["zstd"], max(os.listdir(m["zstd"]),
                                              key=lambda f: os.path.getsize(os.path.join(m["zstd"], f))))
        loop = subprocess.Popen(["bash", "-c", f"while :; do dd if='{experts}' of=/dev/null bs=1M count=1024 "
                                               "iflag=direct 2>/dev/null; done"], start_new_session=True)
        try:
            decode_busy, _ = self.codec_bench("threads", "codec_bench_threads_with_reads.log")
        finally:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        alone = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
        loop = subprocess.Popen(["bash", "-c", f"while :; do '{os.path.join(self.a.bin, 'codec_bench')}' "
                                               "--sections=threads --threads=1 --min_seconds=0.2 >/dev/null; done"],
                                start_new_session=True)
        try:
            time.sleep(1)
            busy = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
        finally:
            os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        med = (lambda v: sorted(v)[len(v) // 2] if v else None)
        self.save("b_read_vs_decode", {"decode": decode, "read": read, "decode_with_reads": decode_busy,
                                       "dd_read_gbps": med(alone), "dd_read_with_decode_gbps": med(busy),
                                       "note": "decode: GB/s of exponent bytes out, zstd level 1, disjoint E-chunks; "
                                               "read: GB/s of a 1-file sequential read; both wall-clock medians"})

    def exp_g(self, m):
        rows = []
        for pct in self.cfg["fifo_budgets"]:
            for system in ("zipmoe", "zipmoe-fifo-dispatch"):
                rows.append(self.run(m, system, pct, self.cfg["tokens"]))
        self.save(f"g_makespan_{m['arch']}", {"rows": [self.public(r) for r in rows]})

    def exp_f(self, m):
        rows = []
        for pct in self.cfg["ablation_budgets"]:
            for system in ("fifo", "lru", "marking", "zipmoe-noplan", "zipmoe"):
                rows.append(self.run(m, system, pct, self.cfg["tokens"]))
        self.save(f"f_ablation_{m['arch']}", {"rows": [self.public(r) for r in rows]})

    def exp_d(self, m):
        rows = []
        for b in self.cfg["batches"]:
            for system in self.cfg["batch_systems"]:
                rows.append(self.run(m, system, 50, self.cfg["tokens"], batch=b))
        self.save(f"d_batch_{m['arch']}", {"budget_pct": 50, "rows": [self.public(r) for r in rows]})

    def exp_e(self, m):
        rows = []
        for n in self.cfg["lengths"]:
            for system in self.cfg["length_systems"]:
                rows.append(self.run(m, system, 50, n))
        self.save(f"e_length_{m['arch']}", {"budget_pct": 50, "rows": [self.public(r) for r in rows]})

    @contextlib.contextmanager
    def server(self, args, log, cap_bytes):
        """Starts `zipmoe ARGS --port P` cold inside the memory cap (limit `cap_bytes`), waits for
        /health (5 min), yields its URL, and stops it (SIGTERM, then SIGKILL of its process group)."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        out = open(os.path.join(self.logs, log), "w")
        bl.drop_caches()
        if self.cap.available:
            self.cap.set_limit(cap_bytes)
            self.cap.reset_peak()
        proc = subprocess.Popen([self.zipmoe] + list(args) + ["--port", str(port)], stdout=out,
                                stderr=subprocess.STDOUT, preexec_fn=self.cap.preexec(), start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + 300
            while time.time() < deadline and proc.poll() is None:
                try:
                    if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                        break
                except OSError:
                    time.sleep(0.5)
            else:
                raise RuntimeError(f"`zipmoe {args[0]}` did not become healthy (exit {proc.poll()}); see logs/{log}")
            yield url
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            out.close()
            if self.cap.available:
                self.cap.set_limit(None)

    def exp_l(self, m):
        """Serving under load (bench/load.py): `zipmoe serve` (embedded, continuous batching) at 50 %
        budget inside the same memory cap, streaming ShareGPT requests from LOAD_INDEX, closed loop at
        concurrency 1 then higher, one fresh server per system; at temperature 0 every completion must
        equal the first system's at concurrency 1 (the suite fails otherwise). TTFT/TPOT/latency
        percentiles are client-side."""
        lc = self.cfg["load"]
        budget = m["expert_bytes"] * 50 // 100
        rows = []
        first = None  # the first system's concurrency-1 output: what every other run must reproduce
        for system in lc["systems"]:
            model_dir, extra = self.system_args(m, system)
            args = ["serve", "--model", model_dir, "--memory-budget", str(budget), "--threads", str(self.threads),
                    "--max-batch", str(max(lc["concurrency"])), *extra]
            try:
                with self.server(args, f"load-{system}-serve.log", self.cap_bytes(m, 50)) as url:
                    for c in lc["concurrency"]:
                        out = os.path.join(self.out, "runs", f"load-{system}-c{c}.json")
                        os.makedirs(os.path.dirname(out), exist_ok=True)
                        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py"),
                               "--url", url, "--prompts", PROMPTS_FILE, "--offset", str(LOAD_INDEX),
                               "--requests", str(lc["requests"]), "--concurrency", str(c), "--max-tokens",
                               str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]),
                               "--ignore-eos", "--timeout", "1800", "--out", out]
                        if first:
                            cmd += ["--check-against", first]
                        p = subprocess.run(cmd, capture_output=True, text=True)
                        open(os.path.join(self.logs, f"load-{system}-c{c}.log"), "w").write(p.stdout + p.stderr)
                        j = json.load(open(out)) if os.path.exists(out) else {}
                        summ = j.get("summary", {})
                        row = {"system": system, "concurrency": c, "ok": p.returncode == 0, "summary": summ,
                               "peak_bytes": self.cap.peak_bytes(), "cap_bytes": self.cap_bytes(m, 50)}
                        if first:
                            row["same_text_as_first"] = p.returncode == 0
                            if p.returncode != 0:
                                self.failures.append(f"l-{system}-c{c}")
                        rows.append(row)
                        bl.log(f"l: {system} concurrency {c}: rc {p.returncode}, "
                               f"{summ.get('output_tokens_per_s')} tokens/s")
                        first = first or out
            except RuntimeError as e:
                bl.warn(f"l: {system}: {e}")
                rows.append({"system": system, "ok": False, "error": str(e)[:500]})
        self.save(f"l_load_{m['arch']}", {"budget_pct": 50, "prompt_offset": LOAD_INDEX, "config": lc, "rows": rows})

    def exp_h(self, m):
        """`zipmoe up` (one process per service) vs embedded `zipmoe generate`, 50 % budget, same prompt ids.
        TPOT over HTTP = (t(N tokens) - t(1 token)) / (N - 1), client-side; the tokens must match."""
        tokens = self.cfg["tokens"]
        emb = self.run(m, "zipmoe", 50, tokens)
        ref = self.reference(m, tokens)
        res = {"budget_pct": 50, "tokens": tokens, "embedded": self.public(emb)}
        run_dir = os.path.join(self.out, "up-run")
        os.makedirs(run_dir, exist_ok=True)
        budget = m["expert_bytes"] * 50 // 100
        args = ["up", "--model", m["zstd"], "--run-dir", run_dir, "--memory-budget", str(budget),
                "--set", f"threads={self.threads}"]
        if m.get("trace"):
            args += ["--set", f"plan_trace={m['trace']}"]
        for svc in ("storage", "decompressor", "scheduler", "executor", "cache_manager"):
            args += ["--set", f"metrics.port.{svc}=0"]
        try:
            with self.server(args, "up.log", self.cap_bytes(m, 50)) as url:
                def complete(n):
                    body = json.dumps({"prompt": ref["prompt_ids"], "max_tokens": n, "temperature": 0,
                                       "ignore_eos": True}).encode()
                    req = urllib.request.Request(url + "/v1/completions", data=body,
                                                 headers={"Content-Type": "application/json"})
                    t0 = time.time()
                    reply = json.loads(urllib.request.urlopen(req, timeout=1800).read())
                    return time.time() - t0, reply
                complete(1)  # warm: process start-up, first plan, arena faults
                t1, _ = complete(1)
                tn, reply = complete(tokens)
                # The embedded run's text (its logits were checked byte-equal to all-resident).
                want_text = emb.get("text") if emb.get("ok") and emb.get("bit_identical") else None
                got_text = reply["choices"][0]["text"]
                same = want_text is not None and got_text == want_text
                if not same:
                    self.failures.append("h-up")
                n_proc = None
                try:
                    m2 = re.search(r"(\d+) processes", open(os.path.join(self.logs, "up.log")).read())
                    n_proc = int(m2.group(1)) if m2 else None
                except OSError:
                    pass
                res["multiprocess"] = {"tpot_s": (tn - t1) / max(1, tokens - 1), "t_1_token_s": t1,
                                       f"t_{tokens}_tokens_s": tn, "same_text_as_embedded": same,
                                       "processes": n_proc, "peak_bytes": self.cap.peak_bytes(), "warm": True}
                bl.log(f"h: up tpot {res['multiprocess']['tpot_s']:.3f} s vs embedded {emb.get('tpot_s')}")
        except Exception as e:  # (h) is best-effort: the multi-process layout is still changing
            res["error"] = str(e)[:500]
            bl.warn(f"h: {e}")
        self.save(f"h_embedded_vs_up_{m['arch']}", res)

    def exp_i(self):
        gpu = self.meta["machine"].get("gpu")
        self.save("i_gpu", {"skipped": gpu is None,
                            "reason": "no CUDA device (nvidia-smi absent or lists no GPU)" if gpu is None else
                            "GPU present: recovery_bench / GPU TPOT not wired into the suite yet",
                            "gpu": gpu})

    def exp_deepseek(self):
        """deepseek_v2: every policy at 25 / 50 % on the preset of this mode; bit-exactness and TPOT."""
        m = self.prepare("deepseek_v2", self.cfg["deepseek"])
        self.calibrate(m, 50)
        rows = []
        for pct in (25, 50):
            for system in POLICIES:
                rows.append(self.run(m, system, pct, min(self.cfg["tokens"], 16)))
        self.save("c_tpot_vs_budget_deepseek_v2", {"model": self.model_meta(m), "rows": [self.public(r) for r in rows]})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=MODES, default="quick")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--only", default="c,r,a,b,g,f,d,e,deepseek,h,l,i")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.models, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: meta.json, cgroup removal
    t0 = time.time()
    s = Suite(a)
    only = a.only.split(",")
    status = 0
    try:
        m = s.prepare("qwen2_moe", "mini")
        s.disk(m)
        if any(x in only for x in ("c", "r", "g", "f", "d", "e", "h", "l")):
            s.calibrate(m, 50)
        if any(x in only for x in ("c", "g", "f", "d", "e", "h")):  # one reference long enough for all
            s.reference(m, max([s.cfg["tokens"]] + (s.cfg["lengths"] if "e" in only else [])))
        steps = [("c", lambda: s.exp_c(m)), ("r", lambda: s.exp_r(m)), ("a", lambda: s.exp_a(m)), ("b", lambda: s.exp_b(m)),
                 ("g", lambda: s.exp_g(m)), ("f", lambda: s.exp_f(m)), ("d", lambda: s.exp_d(m)),
                 ("e", lambda: s.exp_e(m)), ("deepseek", s.exp_deepseek), ("h", lambda: s.exp_h(m)),
                 ("l", lambda: s.exp_l(m)), ("i", s.exp_i)]
        for name, fn in steps:
            if name not in only:
                continue
            t = time.time()
            bl.log(f"experiment {name}")
            try:
                fn()
            except bl.RunError as e:
                bl.warn(f"experiment {name} failed: {e.args[0][:500]}")
                s.meta.setdefault("experiment_errors", {})[name] = e.args[0][:500]
            s.meta.setdefault("experiment_seconds", {})[name] = round(time.time() - t, 1)
    finally:
        s.meta["seconds"] = round(time.time() - t0, 1)
        s.meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        s.meta["bit_exact_failures"] = s.failures
        s.meta["models"] = {f"{k[0]}-{k[1]}": s.model_meta(v) for k, v in s.models.items()}
        bl.write_json(os.path.join(a.out, "meta.json"), s.meta)
        s.cap.remove()
    if s.failures:
        bl.warn(f"outputs differ from the all-resident run: {', '.join(s.failures)}")
        status = 1
    bl.log(f"suite done in {time.time() - t0:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
