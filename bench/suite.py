#!/usr/bin/python3
"""The benchmark suite behind bench/run.sh (ZipMoE §5, Figs. 3, 4, 7-10; issue 6). Not a test.

Prepares the qwen2_moe mini model (synth -> compress -> profile, cached under --models), measures the disk,
calibrates the memory cap and the planner's warm-up trace and runs the all-resident reference where the selected
experiments need them, then runs each experiment of bench/experiments/ (one file each: its settings, run and
report section; experiments.REGISTRY has the order) that --only names, each writing OUT/<experiment>.json, and
OUT/meta.json with the seconds each took. bench/report.py turns OUT into PNGs and docs/benchmarks.md.

  c  TPOT / TTFT vs memory budget, every policy + mmap, with the physical-limit line (Fig. 7)
  r  the same runtime under capacity pressure: `zipmoe replay` of a Zipf routing trace vs budget
  a  compressed size per codec / level / K vs the entropy bound (Fig. 3)
  b  read vs decode throughput of the same bytes with 1..cores threads (Fig. 4)
  g  per-layer makespan / Lemma B.3 bound: cache-affinity scheduler vs FIFO dispatch
  f  eviction ablation FIFO / LRU / Marking / zipmoe with and without the plan (Fig. 10)
  d  throughput vs batch size (Fig. 8)
  e  end-to-end latency vs output length (Fig. 9)
  deepseek, switch  (c) on deepseek_v2 and Switch Transformers ((f) too for Switch)
  h  embedded (`zipmoe serve`) vs multi-process (`zipmoe up`) TPOT
  l  HTTP serving under load: bench/load.py's ShareGPT requests at concurrency 1..C against `zipmoe serve`
  m  llama.cpp as a peer (bench/llama_peer.mjs on a GGUF of the same weights): warm TPOT / prefill against
     llama.cpp and the memory-bandwidth decode floor, peak RSS, and cold TPOT vs memory cap for both
  t  the trained model (models/qwen2moe-debian-18m): routing statistics of learned vs synthetic routing
     (bench/routing_stats.py) and (f)'s eviction ablation on learned routing
  s  SMoE expert substitution: KL / top-1 agreement against speed for the threshold α
  q  CoServe's request grouping in `zipmoe serve` (--request-grouping none vs coserve) under a queue longer
     than the batch: throughput, TTFT, hit rate, same text
  i  GPU recovery kernel and TPOT (skipped without a CUDA device)

Every generation runs cold (page cache dropped) inside one cgroup v1 memory group whose limit is
the same for every system at a given budget (benchlib.MemoryCap), and its --logits-out must be
byte-equal to (a prefix of) the all-resident run; the suite exits 1 otherwise.

Usage: bench/suite.py --mode quick|full --bin BUILD/bin --out DIR --models DIR [--only c,a,...]
"""
import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
import experiments  # noqa: E402
from benchlib import (EMBEDDING_STD, PLAN_INDEX, PREFETCHERS, PROMPTS_FILE, RESIDUAL_INDEX, ROUTER_SKEW,  # noqa: E402
                      TRAINED)
from load import load_prompts  # noqa: E402

# The settings every experiment shares, per mode; each experiment adds its own (its CONFIG). "tokens" new tokens
# per generation and "budgets" (% of the BF16 expert bytes) of (c) and the runs that reuse its rows;
# "prompt_index" the measured ShareGPT prompt, "plan_prompts" how many from PLAN_INDEX the planner's warm-up
# trace runs, "residual_prompts" how many DALI's residual calibration runs.
CORE = {
    "quick": {"tokens": 8, "budgets": [25, 50], "prompt_index": 3, "plan_prompts": 2, "residual_prompts": 16},
    "full": {"tokens": 32, "budgets": [10, 25, 50, 75, 90], "prompt_index": 0, "plan_prompts": 4,
             "residual_prompts": 64},
}
MODES = {mode: experiments.config(mode, CORE) for mode in CORE}


class Suite:
    """What every experiment's run(suite) gets: the options (a), the mode's cfg, the prepared models (mini = the
    qwen2_moe mini model), the memory cap, meta.json's dict, and the shared runs: zm() (one zipmoe command),
    reference() (all-resident), calibrate() (cap overhead + warm-up trace), run() (one capped, cold, checked
    generation, cached by its key), server() (a server in the cap), save() (OUT/<name>.json)."""

    def __init__(self, a):
        self.a = a
        self.cfg = MODES[a.mode]
        self.mini = None
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

    def model_root(self, arch, preset):
        """Where the files of the synthetic `arch` / `preset` live under --models: ROOT-hf, ROOT-zstd, ROOT.gguf."""
        return os.path.join(self.a.models, f"{arch}-{preset}-skew{ROUTER_SKEW}-emb{EMBEDDING_STD}")

    def synth(self, arch, preset):
        """The synthetic checkpoint of `arch` / `preset` under --models (written once: seed 0, ROUTER_SKEW,
        EMBEDDING_STD); returns (root, HF directory)."""
        root = self.model_root(arch, preset)
        hf = root + "-hf"
        if not os.path.exists(os.path.join(hf, "config.json")):
            bl.log(f"synth {arch} {preset} --router-skew {ROUTER_SKEW} -> {hf}")
            self.zm("synth", "--arch", arch, "--preset", preset, "--router-skew", str(ROUTER_SKEW), "--seed", "0",
                    "--embedding-std", str(EMBEDDING_STD),
                    "--out", hf, log=f"synth-{arch}-{preset}.log")
            bl.evict_written([hf])  # read back later as a downloaded checkpoint is (benchlib.evict_written)
        return root, hf

    def prepare(self, arch, preset):
        t0 = time.time()
        root, hf = self.synth(arch, preset)
        zstd = root + "-zstd"
        if not os.path.exists(os.path.join(zstd, "manifest.bin")):
            bl.log(f"compress {hf} -> {zstd}")
            self.zm("compress", hf, zstd, "--codec", "zstd", "--force", log=f"compress-{arch}-{preset}.log")
        if not os.path.exists(os.path.join(zstd, "profile.json")):
            bl.log(f"profile {zstd}")
            self.zm("profile", "--model", zstd, log=f"profile-{arch}-{preset}.log", cold=True)
        if arch != "switch_transformers":  # no next-layer prediction for an encoder-decoder model (no prefetch)
            self.calibrate_residuals(zstd, f"{arch}-{preset}")
        info = json.loads(subprocess.run([self.zipmoe, "inspect", zstd, "--json"], capture_output=True, text=True,
                                         check=True).stdout)
        m = {"arch": arch, "preset": preset, "root": root, "hf": hf, "zstd": zstd, "inspect": info,
             "config": json.load(open(os.path.join(zstd, "config.json"))),
             "expert_bytes": int(info["expert_bytes_raw"]), "prepare_s": time.time() - t0}
        self.models[(arch, preset)] = m
        return m

    def calibrate_residuals(self, zstd, name):
        """DALI's residual vectors (`--prefetch residual`) for the compressed dir, once: `zipmoe profile
        --prefetch-residuals` over cfg["residual_prompts"] ShareGPT prompts from RESIDUAL_INDEX (none of them
        a measured prompt), 128 tokens each at most."""
        if os.path.exists(os.path.join(zstd, "prefetch_residuals.safetensors")):
            return
        prompts = os.path.join(self.out, f"residual-prompts-{name}.txt")
        data = json.load(open(PROMPTS_FILE))
        n = self.cfg["residual_prompts"]
        lines = [" ".join(d["conversations"][0]["value"].split()) for d in data[RESIDUAL_INDEX:RESIDUAL_INDEX + n]]
        with open(prompts, "w") as f:
            f.write("\n".join(lines) + "\n")
        bl.log(f"prefetch residuals {zstd} ({n} prompts from #{RESIDUAL_INDEX})")
        self.zm("profile", "--model", zstd, "--prefetch-residuals", prompts, "--calibration-prompts", str(n),
                "--calibration-max-tokens", "128", "--threads", str(self.threads), log=f"residuals-{name}.log")

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
                    "--logits-out", logits, *m.get("gen_args", []), log=tag + ".log", cold=True)
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
                        "--ignore-eos", "--threads", str(self.threads), "--json", *m.get("gen_args", []),
                        log=tag + "-warm.log")
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
                    "--memory-budget", str(budget), "--policy", "lru", "--trace-out", part, *m.get("gen_args", []),
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
        for p in ("lru", "fifo", "lfu", "marking", "dali", "smoe", "coserve", "full-load"):
            table[p] = (z, ["--policy", p])
        if "+" in system:  # "<system>+<predictor>": the same system, prefetching the next MoE layer
            base, predictor = system.split("+", 1)
            assert predictor in PREFETCHERS, system
            model_dir, extra = table[base]
            return model_dir, extra + ["--prefetch", predictor]
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
                        *m.get("gen_args", []),
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
            row.update({"hit_rate": s["requests"].get("hit_rate"), "prefetch": s.get("prefetch"),
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

    def model_meta(self, m):
        keep = ("arch", "preset", "hf", "zstd", "expert_bytes", "overhead_bytes", "calibration", "prepare_s")
        out = {k: m[k] for k in keep if k in m}
        info = m["inspect"]
        out["inspect"] = {k: v for k, v in info.items() if k != "per_layer"}
        cfg = m.get("config") or {}
        out["config"] = {k: cfg[k] for k in ("model_type", "num_layers", "num_decoder_layers", "num_hidden_layers",
                                             "encoder_sparse_step", "decoder_sparse_step", "num_experts",
                                             "num_local_experts", "num_experts_per_tok", "expert_capacity",
                                             "torch_dtype") if k in cfg}
        return out

    @contextlib.contextmanager
    def server(self, args, log, cap_bytes):
        """bl.server cold inside the memory cap (limit `cap_bytes`), logging to logs/LOG; yields its URL."""
        with bl.server(self.zipmoe, args, os.path.join(self.logs, log), self.cap, cap_bytes) as (url, _):
            yield url

    def prepare_trained(self):
        """The trained Qwen2-MoE shipped in models/ (learned routing, a learned BPE tokenizer): its HF
        directory as is, compressed once under --models (again when the checkpoint's bytes change)."""
        hf = os.path.join(self.a.repo, "models", TRAINED)
        zstd = os.path.join(self.a.models, TRAINED + "-zstd")
        digest = hashlib.sha256(open(os.path.join(hf, "model.safetensors"), "rb").read()).hexdigest()
        stamp = os.path.join(zstd, "source.sha256")
        t0 = time.time()
        if not (os.path.exists(stamp) and open(stamp).read().strip() == digest):
            bl.log(f"compress {hf} -> {zstd}")
            self.zm("compress", hf, zstd, "--codec", "zstd", "--force", log=f"compress-{TRAINED}.log")
            self.zm("profile", "--model", zstd, log=f"profile-{TRAINED}.log", cold=True)
            with contextlib.suppress(OSError):
                os.remove(os.path.join(zstd, "prefetch_residuals.safetensors"))
            open(stamp, "w").write(digest + "\n")
        self.calibrate_residuals(zstd, TRAINED)
        info = json.loads(subprocess.run([self.zipmoe, "inspect", zstd, "--json"], capture_output=True, text=True,
                                         check=True).stdout)
        m = {"arch": "qwen2_moe", "preset": "trained", "root": hf, "hf": hf, "zstd": zstd, "inspect": info,
             "config": json.load(open(os.path.join(zstd, "config.json"))),
             "expert_bytes": int(info["expert_bytes_raw"]), "prepare_s": time.time() - t0}
        self.models[("qwen2_moe", "trained")] = m
        return m

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=MODES, default="quick")
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--only", default=",".join(experiments.NAMES))
    a = ap.parse_args()
    only = a.only.split(",")
    unknown = [x for x in only if x not in experiments.NAMES]
    if unknown:
        ap.error(f"--only: no experiment {', '.join(unknown)} (have {', '.join(experiments.NAMES)})")
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.models, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: meta.json, cgroup removal
    t0 = time.time()
    s = Suite(a)
    selected = [e for e in experiments.REGISTRY if e.NAME in only]
    status = 0
    try:
        m = s.mini = s.prepare("qwen2_moe", "mini")
        s.disk(m)
        if any("calibrate" in e.NEEDS for e in selected):
            s.calibrate(m, 50)
        if any("reference" in e.NEEDS for e in selected):  # one reference long enough for all
            s.reference(m, max([s.cfg["tokens"]] + (s.cfg["lengths"] if "e" in only else [])))
        s.meta["prepare_seconds"] = round(time.time() - t0, 1)
        bl.log(f"models, disk, calibration and reference: {s.meta['prepare_seconds']:.0f} s")
        for e in selected:
            t = time.time()
            bl.log(f"experiment {e.NAME}")
            try:
                e.run(s)
            except bl.RunError as err:
                bl.warn(f"experiment {e.NAME} failed: {err.args[0][:500]}")
                s.meta.setdefault("experiment_errors", {})[e.NAME] = err.args[0][:500]
            s.meta.setdefault("experiment_seconds", {})[e.NAME] = round(time.time() - t, 1)
            bl.log(f"experiment {e.NAME}: {time.time() - t:.0f} s (suite at {time.time() - t0:.0f} s)")
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
