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
  m  llama.cpp as a peer (bench/llama_peer.mjs on a GGUF of the same weights): warm TPOT / prefill against
     llama.cpp and the memory-bandwidth decode floor, peak RSS, and cold TPOT vs memory cap for both
  t  the trained model (models/qwen2moe-debian-18m): routing statistics of learned vs synthetic routing
     (bench/routing_stats.py) and (f)'s eviction ablation on learned routing
  q  CoServe's request grouping in `zipmoe serve` (--request-grouping none vs coserve) under a queue longer
     than the batch: throughput, TTFT, hit rate, same text
  i  GPU recovery kernel and TPOT (skipped without a CUDA device)

Every generation runs cold (page cache dropped) inside one cgroup v1 memory group whose limit is
the same for every system at a given budget (benchlib.MemoryCap), and its --logits-out must be
byte-equal to (a prefix of) the all-resident run; the suite exits 1 otherwise. bench/report.py
turns OUT into PNGs and docs/benchmarks.md.

Usage: bench/suite.py --mode quick|full --bin BUILD/bin --out DIR --models DIR [--only c,a,...]
"""
import argparse
import array
import contextlib
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402
from load import load_prompts  # noqa: E402
from replay_vs_budget import make_trace  # noqa: E402
import routing_stats  # noqa: E402

# Real prompts (bench/data/README.md): every generation's prompt comes from ShareGPT. Sequence i of a
# batch of N is prompt prompt_index + i; the planner's workload profile is single-prompt runs on other
# prompts from PLAN_INDEX (ZipMoE §3.4: popularity from a calibration workload, not the measured one).
PROMPTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sharegpt-first-turn-500.json")
# Per mode: "prompt_index" (quick: #3 "Suggest subchapters for chapter 5", 33 characters, so a cold
# prefill reads part of the model rather than all of it; full: #0 "How to stop automatic updates from
# the WSUS Server to a target machine", 70 characters) and "plan_prompts" (how many from PLAN_INDEX).
PLAN_INDEX = 100
LOAD_INDEX = 200      # (l): the HTTP load test's requests start here
RESIDUAL_INDEX = 300  # DALI residual calibration (`zipmoe profile --prefetch-residuals`): prompts from here
# Prefetching systems (--prefetch, ExpertProvider::Prefetch): "<policy>+<predictor>".
PREFETCHERS = ("top-score", "residual")
EMBEDDING_STD = 1.0  # docs/synth.md "Embedding scale": keeps decode-time routing token-dependent
ROUTER_SKEW = 0.5  # docs/synth.md: X = 0.25-0.5 gives the 20-30 % top-10 % shares of trained MoE models

POLICIES = ["zipmoe", "lru", "fifo", "lfu", "marking", "dali", "smoe", "coserve", "full-load", "mmap"]
# (f) and (t): every eviction policy (smoe brings its own top-score prefetching) next to the prefetch systems.
ABLATION = ("fifo", "lru", "marking", "dali", "smoe", "coserve", "zipmoe-noplan", "zipmoe")
# (s) SMoE expert substitution: prompts from SUBST_INDEX, the thresholds α swept (0 = exact).
SUBST_INDEX = 400
SUBST_ALPHAS = [0.0, 0.1, 0.2, 0.3, 0.5]
# (m) llama.cpp peer. prompt_len random ids (seed PEER_SEED) for both systems; warm: `rounds` × (zipmoe
# executor_bench with `zipmoe_reps` timed repetitions, llama_peer.mjs), `warm_decode` timed steps each, plus up to
# `extra_rounds` more while a system's best run shared the cores with > OTHERS_MAX cores of other work; cold
# sweep: caps where llama.cpp holds `llama_fractions` of its GGUF, where zipmoe's budget is `zipmoe_pcts` % of
# the expert bytes (llama.cpp runs there too only with `llama_at_zipmoe_pcts`), and zipmoe's smallest cap (one
# staging slot); `cold_tokens` new tokens per cold run; llama.cpp runs longer than `llama_timeout_s` time out;
# zipmoe runs each cap a second time with `--prefetch sweep_prefetch` (None: not).
PEER_SEED = 12345
OTHERS_MAX = 0.3
PEER_QUICK = {"sweep_prefetch": "residual", "prompt_len": 16, "warm_decode": 16, "zipmoe_reps": 2, "rounds": 2, "extra_rounds": 1, "membw_reps": 5,
              "cold_tokens": 8, "llama_fractions": [1.0, 0.5], "zipmoe_pcts": [50], "llama_at_zipmoe_pcts": False,
              "llama_timeout_s": 45, "zipmoe_timeout_s": 300}
PEER_FULL = {"sweep_prefetch": "residual", "prompt_len": 64, "warm_decode": 32, "zipmoe_reps": 3, "rounds": 3, "extra_rounds": 2, "membw_reps": 8,
             "cold_tokens": 16, "llama_fractions": [1.0, 0.85, 0.7, 0.5, 0.3], "zipmoe_pcts": [50, 25, 10],
             "llama_at_zipmoe_pcts": True, "llama_timeout_s": 600, "zipmoe_timeout_s": 1800}
MODES = {
    "quick": {"tokens": 8, "budgets": [25, 50], "lengths": [8, 16], "batches": [1, 2],
              "batch_systems": ["zipmoe", "lru"], "length_systems": ["zipmoe", "lru"],
              "ablation_budgets": [50], "fifo_budgets": [50], "deepseek": "tiny",
              "prompt_index": 3, "plan_prompts": 2, "c_systems_other_budgets": ["zipmoe", "lru", "mmap"],
              "codec_sections": "ratio,threads,io", "io_mib": 256,
              "replay": {"steps": 16, "repeat": 2, "budgets": [10, 25, 50],
                         "systems": ["zipmoe", "lru", "fifo", "marking", "dali", "coserve"]},
              "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 8, "max_tokens": 8,
                       "max_prompt_chars": 400},
              "peer": PEER_QUICK,
              "residual_prompts": 16,
              "prefetch_systems": ["zipmoe+top-score", "zipmoe+residual", "lru+residual", "dali+residual"],
              "trained": {"tokens": 32, "budgets": [25, 50], "routing_prompts": 16, "routing_prompts_mini": 6},
              "substitution": {"models": ["trained"], "prompts": 4, "tokens": 24, "budget": 25},
              "grouping": {"budget": 25, "max_batch": 2, "concurrency": 8, "requests": 16, "max_tokens": 8,
                           "max_prompt_chars": 400}},
    "full": {"tokens": 32, "budgets": [10, 25, 50, 75, 90], "lengths": [32, 64, 128, 256], "batches": [1, 4, 16],
             "batch_systems": ["zipmoe", "lru", "full-load", "mmap"], "length_systems": ["zipmoe", "lru", "mmap"],
             "ablation_budgets": [25, 50], "fifo_budgets": [25, 50, 75], "deepseek": "mini",
             "prompt_index": 0, "plan_prompts": 4, "c_systems_other_budgets": POLICIES,
             "codec_sections": "ratio,threads,io", "io_mib": 1024,
             "replay": {"steps": 48, "repeat": 2, "budgets": [10, 25, 50],
                        "systems": ["zipmoe", "lru", "fifo", "lfu", "marking", "dali", "coserve", "full-load",
                                    "zipmoe-noplan"]},
             "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 16, "max_tokens": 32,
                      "max_prompt_chars": 1000},
             "peer": PEER_FULL,
             "residual_prompts": 64,
             "prefetch_systems": ["zipmoe+top-score", "zipmoe+residual", "lru+top-score", "lru+residual",
                                  "dali+residual"],
             "trained": {"tokens": 64, "budgets": [10, 25, 50], "routing_prompts": 32, "routing_prompts_mini": 16},
             "substitution": {"models": ["trained", "mini"], "prompts": 8, "tokens": 32, "budget": 25},
             "grouping": {"budget": 25, "max_batch": 2, "concurrency": 8, "requests": 32, "max_tokens": 32,
                          "max_prompt_chars": 1000}},
}


BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
TRAINED = "qwen2moe-debian-18m"  # models/TRAINED: the model trained on Debian text (models/TRAINED/README.md)


def cpu_busy_s():
    """Seconds of CPU time the whole machine has spent busy (all cores, /proc/stat: not idle or iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def safetensors_tensors(model_dir):
    """{tensor name: bytes} from the headers of every *.safetensors file of `model_dir`."""
    out = {}
    for name in sorted(os.listdir(model_dir)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, name), "rb") as f:
            header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
        for key, t in header.items():
            if key != "__metadata__":
                out[key] = t["data_offsets"][1] - t["data_offsets"][0]
    return out


def decode_bytes_per_token(tensors, config):
    """Weight bytes one decode token reads: every dense weight except the embedding (attention, norms, shared
    experts, routers, dense MLPs), top_k routed experts per MoE layer (at the layer's mean expert size), and
    lm_head (a tied embedding counts once, as lm_head). The embedding lookup reads one row: not counted."""
    expert = re.compile(r"\.layers\.(\d+)\..*\.experts\.(\d+)\.")
    layers = {}
    dense = emb = head = 0
    for name, nbytes in tensors.items():
        hit = expert.search(name)
        if hit:
            per = layers.setdefault(int(hit.group(1)), {})
            per[int(hit.group(2))] = per.get(int(hit.group(2)), 0) + nbytes
        elif "embed_tokens" in name:
            emb += nbytes
        elif name.startswith("lm_head"):
            head += nbytes
        else:
            dense += nbytes
    top_k = int(config.get("num_experts_per_tok") or 0)
    routed = sum(top_k * sum(per.values()) / len(per) for per in layers.values())
    tied = head == 0
    return {"dense": dense, "routed": int(routed), "lm_head": emb if tied else head, "tied_embeddings": tied,
            "embedding_not_counted": 0 if tied else emb, "moe_layers": len(layers), "top_k": top_k,
            "total": int(dense + routed + (emb if tied else head))}


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

    def exp_t(self, mini):
        """(t) The trained model: routing statistics of learned routing next to the synthetic models'
        (bench/routing_stats.py), and the eviction ablation of (f) on it, cold and capped."""
        tc = self.cfg["trained"]
        m = self.prepare_trained()
        self.calibrate(m, 50)
        self.reference(m, tc["tokens"])
        rows = []
        for pct in tc["budgets"]:
            for system in (*ABLATION, *self.cfg["prefetch_systems"]):
                rows.append(self.run(m, system, pct, tc["tokens"]))
        routing = []
        for name, mm, n in ((f"{TRAINED} (trained)", m, tc["routing_prompts"]),
                            (f"qwen2_moe mini (synthetic, --router-skew {ROUTER_SKEW})", mini, tc["routing_prompts_mini"])):
            with tempfile.TemporaryDirectory(prefix="zipmoe-routing-") as work:
                sessions = routing_stats.run_traces(self.zipmoe, mm["hf"], n, tc["tokens"], self.threads, work)
            cfg = mm["config"]
            row = {"model": name, "prompts": n, "tokens": tc["tokens"],
                   **routing_stats.stats(sessions, int(cfg["num_experts"]), int(cfg["num_experts_per_tok"]))}
            info = mm["inspect"]
            row.update({k: info[k] for k in ("exponent_entropy_bits", "e_bits_per_value", "ratio", "entropy_bound_ratio")})
            bl.log(f"routing {name}: {json.dumps(row)}")
            routing.append(row)
        self.exp_l(m, tag="-trained")  # (l) on learned routing: written as l_load_qwen2_moe-trained.json
        self.save("t_trained", {"model": TRAINED, "tokens": tc["tokens"], "rows": [self.public(r) for r in rows],
                                "routing": routing, "card": os.path.join("models", TRAINED, "README.md")})

    @staticmethod
    def logit_rows(path, vocab):
        """float32 logits file (generate --logits-out) -> list of rows of `vocab` floats."""
        a = array.array("f")
        a.frombytes(open(path, "rb").read())
        if sys.byteorder != "little":
            a.byteswap()
        return [a[i:i + vocab] for i in range(0, len(a), vocab)]

    @staticmethod
    def kl_and_top1(p_row, q_row):
        """KL(softmax(p) || softmax(q)) in nats, and whether the two argmaxes agree."""
        mp, mq = max(p_row), max(q_row)
        zp = math.log(sum(math.exp(x - mp) for x in p_row))
        zq = math.log(sum(math.exp(x - mq) for x in q_row))
        kl = 0.0
        for x, y in zip(p_row, q_row):
            lp = x - mp - zp
            kl += math.exp(lp) * (lp - (y - mq - zq))
        top1 = max(range(len(p_row)), key=p_row.__getitem__) == max(range(len(q_row)), key=q_row.__getitem__)
        return max(kl, 0.0), top1

    def exp_s(self, mini):
        """(s) SMoE expert substitution: for each threshold α, `--policy smoe --substitution-alpha α` at one
        budget, cold and capped, on several ShareGPT prompts; its logits against the exact all-resident run's.
        A row's logits are comparable while every earlier input is the same: every prompt position, then the
        decode steps up to and including the first whose greedy token differs from the exact run's."""
        sc = self.cfg["substitution"]
        models = []
        for name in sc["models"]:
            models.append(self.prepare_trained() if name == "trained" else mini)
        out = []
        for m in models:
            self.calibrate(m, sc["budget"])
            vocab = int(m["config"]["vocab_size"])
            budget = m["expert_bytes"] * sc["budget"] // 100
            limit = self.cap_bytes(m, sc["budget"])
            per_alpha = {a: {"kl": [], "top1": [], "prefix": [], "steps": 0, "tpot": [], "hit": [], "sub": 0, "routed": 0}
                         for a in SUBST_ALPHAS}
            for i in range(sc["prompts"]):
                index = SUBST_INDEX + i
                base = f"s-{m['arch']}-{m['preset']}-p{index}"
                exact_logits = os.path.join(self.out, base + "-exact.logits")
                r = self.zm("generate", "--model", m["hf"], *self.prompt_args(index), "--max-new-tokens",
                            str(sc["tokens"]), "--ignore-eos", "--threads", str(self.threads), "--json",
                            "--logits-out", exact_logits, log=base + "-exact.log")
                exact = json.loads(r["stdout"].strip().splitlines()[-1])
                p_rows = self.logit_rows(exact_logits, vocab)
                os.remove(exact_logits)
                n_prompt = len(exact["prompt_ids"])
                for alpha in SUBST_ALPHAS:
                    tag = f"{base}-a{alpha}"
                    logits = os.path.join(self.out, tag + ".logits")
                    stats = os.path.join(self.out, "runs", tag + ".json")
                    os.makedirs(os.path.dirname(stats), exist_ok=True)
                    lim = None if limit is None else limit + len(p_rows) * vocab * 4
                    try:
                        r = self.zm("generate", "--model", m["zstd"], *self.prompt_args(index), "--max-new-tokens",
                                    str(sc["tokens"]), "--ignore-eos", "--threads", str(self.threads), "--json",
                                    "--memory-budget", str(budget), "--policy", "smoe", "--substitution-alpha",
                                    str(alpha), "--stats-json", stats, "--logits-out", logits, log=tag + ".log",
                                    cold=True, capped=True, limit=lim, timeout=1800)
                    except bl.RunError as e:
                        bl.warn(f"{tag}: {str(e.args[0])[:300]}")
                        continue
                    j = json.loads(r["stdout"].strip().splitlines()[-1])
                    st = json.load(open(stats))
                    q_rows = self.logit_rows(logits, vocab)
                    os.remove(logits)
                    got, want = j["generated_ids"], exact["generated_ids"]
                    prefix = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                    rows = min(len(p_rows), len(q_rows), n_prompt + prefix)
                    acc = per_alpha[alpha]
                    for k in range(rows):
                        kl, top1 = self.kl_and_top1(p_rows[k], q_rows[k])
                        acc["kl"].append(kl)
                        acc["top1"].append(top1)
                    acc["prefix"].append(prefix)
                    acc["steps"] += len(want)
                    acc["tpot"].append(j["tpot_s"])
                    acc["hit"].append(st["requests"].get("hit_rate") or 0.0)
                    acc["sub"] += st["substitution"]["substituted"]
                    acc["routed"] += st["substitution"]["routed"]
                    bl.log(f"{tag}: tpot {j['tpot_s']:.3f} s, substituted {st['substitution']['substituted']} / "
                           f"{st['substitution']['routed']}, same tokens for {prefix} / {len(want)} steps")
            for alpha in SUBST_ALPHAS:
                acc = per_alpha[alpha]
                if not acc["tpot"]:
                    continue
                out.append({"model": f"{m['arch']}-{m['preset']}", "alpha": alpha, "budget_pct": sc["budget"],
                            "prompts": len(acc["tpot"]), "positions": len(acc["kl"]),
                            "kl_mean": sum(acc["kl"]) / max(1, len(acc["kl"])),
                            "kl_max": max(acc["kl"]) if acc["kl"] else None,
                            "top1_agreement": sum(acc["top1"]) / max(1, len(acc["top1"])),
                            "same_token_steps": sum(acc["prefix"]), "decode_steps": acc["steps"],
                            "substituted_rate": acc["sub"] / max(1, acc["routed"]),
                            "tpot_s": sorted(acc["tpot"])[len(acc["tpot"]) // 2],
                            "hit_rate": sum(acc["hit"]) / len(acc["hit"])})
        self.save("s_substitution", {"alphas": SUBST_ALPHAS, "tokens": sc["tokens"], "budget_pct": sc["budget"],
                                     "prompt_index": SUBST_INDEX, "rows": out})

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
            for system in (*ABLATION, *self.cfg["prefetch_systems"]):
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
        """bl.server cold inside the memory cap (limit `cap_bytes`), logging to logs/LOG; yields its URL."""
        with bl.server(self.zipmoe, args, os.path.join(self.logs, log), self.cap, cap_bytes) as (url, _):
            yield url

    def exp_l(self, m, tag=""):
        """Serving under load (bench/load.py): `zipmoe serve` (embedded, continuous batching) at 50 %
        budget inside the same memory cap, streaming ShareGPT requests from LOAD_INDEX, closed loop at
        concurrency 1 then higher, one fresh server per system; at temperature 0 every completion must
        equal the first system's at concurrency 1 (the suite fails otherwise). TTFT/TPOT/latency
        percentiles are client-side. `tag` names another model's files (exp_t)."""
        lc = self.cfg["load"]
        budget = m["expert_bytes"] * 50 // 100
        rows = []
        first = None  # the first system's concurrency-1 output: what every other run must reproduce
        for system in lc["systems"]:
            model_dir, extra = self.system_args(m, system)
            args = ["serve", "--model", model_dir, "--memory-budget", str(budget), "--threads", str(self.threads),
                    "--max-batch", str(max(lc["concurrency"])), *extra]
            try:
                with self.server(args, f"load{tag}-{system}-serve.log", self.cap_bytes(m, 50)) as url:
                    for c in lc["concurrency"]:
                        out = os.path.join(self.out, "runs", f"load{tag}-{system}-c{c}.json")
                        os.makedirs(os.path.dirname(out), exist_ok=True)
                        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py"),
                               "--url", url, "--prompts", PROMPTS_FILE, "--offset", str(LOAD_INDEX),
                               "--requests", str(lc["requests"]), "--concurrency", str(c), "--max-tokens",
                               str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]),
                               "--ignore-eos", "--timeout", "1800", "--out", out]
                        if first:
                            cmd += ["--check-against", first]
                        p = subprocess.run(cmd, capture_output=True, text=True)
                        open(os.path.join(self.logs, f"load{tag}-{system}-c{c}.log"), "w").write(p.stdout + p.stderr)
                        j = json.load(open(out)) if os.path.exists(out) else {}
                        summ = j.get("summary", {})
                        row = {"system": system, "concurrency": c, "ok": p.returncode == 0, "summary": summ,
                               "peak_bytes": self.cap.peak_bytes(), "cap_bytes": self.cap_bytes(m, 50)}
                        if first:
                            row["same_text_as_first"] = p.returncode == 0
                            if p.returncode != 0:
                                self.failures.append(f"l{tag}-{system}-c{c}")
                        rows.append(row)
                        bl.log(f"l: {system} concurrency {c}: rc {p.returncode}, "
                               f"{summ.get('output_tokens_per_s')} tokens/s")
                        first = first or out
            except RuntimeError as e:
                bl.warn(f"l: {system}: {e}")
                rows.append({"system": system, "ok": False, "error": str(e)[:500]})
        self.save(f"l_load_{m['arch']}{tag}", {"budget_pct": 50, "prompt_offset": LOAD_INDEX, "config": lc, "rows": rows})

    @staticmethod
    def scrape(url):
        """GET url/metrics -> {series text (name{labels}): value}; {} when unreachable."""
        out = {}
        with contextlib.suppress(OSError, ValueError):
            for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
                if line and not line.startswith("#"):
                    series, _, value = line.rpartition(" ")
                    out[series] = float(value)
        return out

    def exp_q(self, m):
        """(q) CoServe's dependency-aware request grouping (issue 17 item 4): `zipmoe serve --policy coserve` at
        a tight budget with a small batch and more clients than slots, so a queue forms; --request-grouping none
        (first come, first served) vs coserve, one fresh cold server each inside the same memory cap, the same
        ShareGPT requests through bench/load.py closed loop; coserve's completions must equal none's."""
        qc = self.cfg["grouping"]
        budget = m["expert_bytes"] * qc["budget"] // 100
        cap = self.cap_bytes(m, qc["budget"])
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        load_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py")
        rows, first = [], None
        for grouping in ("none", "coserve"):
            args = ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads", str(self.threads),
                    "--policy", "coserve", "--request-grouping", grouping, "--max-batch", str(qc["max_batch"])]
            try:
                with self.server(args, f"q-{grouping}.log", cap) as url:
                    out = os.path.join(self.out, "runs", f"q-{grouping}.json")
                    cmd = [sys.executable, load_py, "--url", url, "--prompts", PROMPTS_FILE, "--offset",
                           str(LOAD_INDEX), "--requests", str(qc["requests"]), "--concurrency", str(qc["concurrency"]),
                           "--max-tokens", str(qc["max_tokens"]), "--max-prompt-chars", str(qc["max_prompt_chars"]),
                           "--ignore-eos", "--timeout", "1800", "--out", out]
                    if first:
                        cmd += ["--check-against", first]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    open(os.path.join(self.logs, f"q-{grouping}-load.log"), "w").write(p.stdout + p.stderr)
                    metrics = self.scrape(url)
                    peak = self.cap.peak_bytes()
            except RuntimeError as e:
                bl.warn(f"q: {grouping}: {e}")
                rows.append({"grouping": grouping, "ok": False, "error": str(e)[:500]})
                continue
            j = json.load(open(out)) if os.path.exists(out) else {}
            lookups = sum(v for k, v in metrics.items() if k.startswith("zipmoe_cache_requests_total{"))
            misses = sum(v for k, v in metrics.items() if k.startswith("zipmoe_cache_requests_total{") and 'pool="M"' in k)
            row = {"grouping": grouping, "ok": p.returncode == 0, "summary": j.get("summary", {}),
                   "hit_rate": (1 - misses / lookups) if lookups else None,
                   "admitted_fifo": metrics.get('zipmoe_requests_admitted_total{order="fifo"}'),
                   "admitted_grouped": metrics.get('zipmoe_requests_admitted_total{order="grouped"}'),
                   "read_bytes": sum(v for k, v in metrics.items() if k.startswith("zipmoe_runtime_io_bytes_total{")),
                   "peak_bytes": peak, "cap_bytes": cap}
            if first:
                row["same_text_as_none"] = p.returncode == 0
                if p.returncode != 0:
                    self.failures.append(f"q-{grouping}")
            first = first or out
            rows.append(row)
            bl.log(f"q: {grouping}: rc {p.returncode}, {row['summary'].get('output_tokens_per_s')} tokens/s, "
                   f"hit rate {row['hit_rate']}, grouped {row['admitted_grouped']}")
        self.save(f"q_request_grouping_{m['arch']}", {"budget_pct": qc["budget"], "config": qc,
                                                      "prompt_offset": LOAD_INDEX, "rows": rows})

    def load_run(self, url, tag, concurrency, reference=None, warmup=True):
        """bench/load.py against `url` (closed loop, the (l) requests of this mode); one warm-up request first
        when `warmup`. Returns (rc, summary, output path)."""
        lc = self.cfg["load"]
        load_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py")
        common = [sys.executable, load_py, "--url", url, "--prompts", PROMPTS_FILE, "--max-tokens",
                  str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]), "--ignore-eos",
                  "--timeout", "1800"]
        if warmup:  # process start-up, arena faults, first plan: not what a serving client sees
            subprocess.run(common + ["--offset", str(LOAD_INDEX + 100), "--requests", "1", "--concurrency", "1",
                                     "--out", os.path.join(self.out, "runs", f"{tag}-warmup.json")],
                           capture_output=True, text=True)
        out = os.path.join(self.out, "runs", f"{tag}-c{concurrency}.json")
        cmd = common + ["--offset", str(LOAD_INDEX), "--requests", str(lc["requests"]), "--concurrency",
                        str(concurrency), "--out", out]
        if reference:
            cmd += ["--check-against", reference]
        p = subprocess.run(cmd, capture_output=True, text=True)
        open(os.path.join(self.logs, f"{tag}-c{concurrency}.log"), "w").write(p.stdout + p.stderr)
        j = json.load(open(out)) if os.path.exists(out) else {}
        return p.returncode, j.get("summary", {}), out

    def exp_h(self, m):
        """(h) `zipmoe serve` (embedded: every service a thread of one process) vs `zipmoe up` (one process per
        service, ZeroMQ + the shared arena), measured the same way (issue 20): both warm (one warm-up request
        first), both through bench/load.py with the (l) requests, closed loop at each concurrency of (l), the
        same 50 % budget and memory cap, one fresh server each; up's completions must equal serve's."""
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        lc = self.cfg["load"]
        budget = m["expert_bytes"] * 50 // 100
        cap = self.cap_bytes(m, 50)
        plan = ["--set", f"plan_trace={m['trace']}"] if m.get("trace") else []
        run_dir = os.path.join(self.out, "up-run")
        os.makedirs(run_dir, exist_ok=True)
        modes = {
            "serve": ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads", str(self.threads),
                      "--max-batch", str(max(lc["concurrency"]))]
                     + (["--plan-trace", m["trace"]] if m.get("trace") else []),
            # serve with up's recovery: every missed expert recovered to BF16 before it is computed (up's
            # executor is another process and takes BF16 offsets), not multiplied from its E/SM planes.
            "serve-separate-recovery": ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads",
                                        str(self.threads), "--max-batch", str(max(lc["concurrency"])),
                                        "--separate-recovery"]
                                       + (["--plan-trace", m["trace"]] if m.get("trace") else []),
            "up": ["up", "--model", m["zstd"], "--run-dir", run_dir, "--memory-budget", str(budget),
                   "--set", f"threads={self.threads}", "--set", f"http.max_batch={max(lc['concurrency'])}", *plan]
                  + [x for svc in ("storage", "decompressor", "scheduler", "executor", "cache_manager", "up")
                     for x in ("--set", f"metrics.port.{svc}=0")],
        }
        rows, first = [], {}
        for mode, args in modes.items():
            try:
                with self.server(args, f"h-{mode}.log", cap) as url:
                    for c in lc["concurrency"]:
                        rc, summ, out = self.load_run(url, f"h-{mode}", c, reference=first.get(c), warmup=(c == lc["concurrency"][0]))
                        row = {"mode": mode, "concurrency": c, "ok": rc == 0, "summary": summ,
                               "peak_bytes": self.cap.peak_bytes(), "cap_bytes": cap}
                        if c in first:
                            row["same_text_as_serve"] = rc == 0
                            if rc != 0:
                                self.failures.append(f"h-{mode}-c{c}")
                        first.setdefault(c, out)
                        rows.append(row)
                        tpot = (summ.get("tpot_s") or {}).get("p50")
                        bl.log(f"h: {mode} concurrency {c}: rc {rc}, TPOT p50 {tpot}")
            except RuntimeError as e:
                bl.warn(f"h: {mode}: {e}")
                rows.append({"mode": mode, "ok": False, "error": str(e)[:500]})
        n_proc = None
        with contextlib.suppress(OSError):
            m2 = re.search(r"(\d+) processes", open(os.path.join(self.logs, "h-up.log")).read())
            n_proc = int(m2.group(1)) if m2 else None
        self.save(f"h_embedded_vs_up_{m['arch']}", {"budget_pct": 50, "config": lc, "prompt_offset": LOAD_INDEX,
                                                    "processes": n_proc, "rows": rows})

    # ---------------------------------------------------------------- (m) llama.cpp peer
    def run_group(self, cmd, log, capped=False, limit=None, cold=False, timeout=None):
        """Runs `cmd` in its own session (optionally inside the cap with `limit`, after dropping the page cache
        when `cold`) and kills its whole process group after `timeout` s. Returns rc (124 on timeout, 127 when it
        cannot start), timed_out, wall_s, stdout, the child's max RSS, page faults and CPU times (wait4 rusage),
        others_cpu (CPU the rest of the machine used meanwhile, in cores: /proc/stat busy time minus the child's),
        and the group's peak / OOM kills."""
        dropped = bl.drop_caches() if cold else False
        enter = None
        use_cap = capped and self.cap.available
        if use_cap:
            self.cap.set_limit(limit)
            self.cap.reset_peak()
            enter = self.cap.preexec()
        oom0 = self.cap.oom_kills() if use_cap else 0
        timed_out = False
        busy0 = cpu_busy_s()
        with open(os.path.join(self.logs, log), "w") as lf, tempfile.TemporaryFile() as out:
            lf.write(" ".join(cmd) + (f"   [cap {limit / bl.GIB:.2f} GiB]" if use_cap and limit else "") + "\n")
            lf.flush()
            t0 = time.time()
            try:
                p = subprocess.Popen(cmd, stdout=out, stderr=lf, preexec_fn=enter, start_new_session=True)
            except OSError as e:
                lf.write(f"cannot start: {e}\n")
                if use_cap:
                    self.cap.set_limit(None)
                return {"rc": 127, "timed_out": False, "wall_s": 0.0, "stdout": "", "caches_dropped": dropped,
                        "maxrss_bytes": None, "major_faults": None, "minor_faults": None, "user_s": None,
                        "sys_s": None, "others_cpu": None, "peak_bytes": None, "oom_kills": 0,
                        "limit_bytes": limit if use_cap else None}
            while True:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if timeout and time.time() - t0 > timeout:
                    os.killpg(p.pid, signal.SIGKILL)
                    _, status, ru = os.wait4(p.pid, 0)
                    timed_out = True
                    break
                time.sleep(0.05)
            wall = time.time() - t0
            others = max(0.0, cpu_busy_s() - busy0 - ru.ru_utime - ru.ru_stime) / max(wall, 1e-3)
            p.returncode = rc = 124 if timed_out else os.waitstatus_to_exitcode(status)
            out.seek(0)
            stdout = out.read().decode(errors="replace")
            lf.write(stdout[-4000:] + (f"\n[timed out after {timeout} s]\n" if timed_out else ""))
        res = {"rc": rc, "timed_out": timed_out, "wall_s": wall, "stdout": stdout, "caches_dropped": dropped,
               "maxrss_bytes": ru.ru_maxrss * 1024, "major_faults": ru.ru_majflt, "minor_faults": ru.ru_minflt,
               "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "others_cpu": round(others, 2),
               "peak_bytes": self.cap.peak_bytes() if use_cap else None,
               "oom_kills": (self.cap.oom_kills() - oom0) if use_cap else 0, "limit_bytes": limit if use_cap else None}
        if use_cap:
            self.cap.set_limit(None)
        return res

    @staticmethod
    def last_json(text):
        for line in reversed(text.strip().splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    pass
        return None

    def peer_gguf(self, m):
        """The BF16 GGUF of the HF checkpoint (bench/gguf_writer.py), written once next to the model dirs."""
        path = m["root"] + ".gguf"
        if not os.path.exists(path):
            bl.log(f"gguf_writer {m['hf']} -> {path}")
            bl.run_cmd([sys.executable, os.path.join(BENCH_DIR, "gguf_writer.py"), m["hf"], "--out", path],
                       os.path.join(self.logs, "gguf_writer.log"), cold=False)
        return path

    def min_budget(self, m):
        """zipmoe's smallest --memory-budget (one staging slot), from the error it gives below it."""
        p = subprocess.run([self.zipmoe, "generate", "--model", m["zstd"], "--prompt-ids", "0", "--max-new-tokens",
                            "1", "--memory-budget", "1"], capture_output=True, text=True)
        hit = re.search(r"below the minimum (\d+) bytes", p.stdout + p.stderr)
        return int(hit.group(1)) if hit else None

    @staticmethod
    def page_in(paths):
        """Reads files into the page cache (from this process's cgroup, so a capped run that maps them later is
        not charged for them); returns {path: resident fraction} when fincore is installed."""
        for path in paths:
            with open(path, "rb") as f:
                while f.read(16 << 20):
                    pass
        return Suite.residency(paths)

    @staticmethod
    def residency(paths):
        if not shutil.which("fincore"):
            return None
        p = subprocess.run(["fincore", "-b", "-n", "-r", "-o", "RES,SIZE"] + list(paths), capture_output=True,
                           text=True)
        try:
            res = [tuple(int(x) for x in line.split()) for line in p.stdout.strip().splitlines()]
            return round(sum(r for r, _ in res) / max(1, sum(sz for _, sz in res)), 4)
        except ValueError:
            return None

    def membw(self, reps, log):
        r = self.run_group([os.path.join(self.a.bin, "membw_bench"), "--threads", str(self.threads), "--reps",
                            str(reps)], log, timeout=300)
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
        if j:
            j["others_cpu"] = r["others_cpu"]
            bl.log(f"m: memory read bandwidth {j['gbps']:.1f} GB/s best, {j['gbps_median']:.1f} median "
                   f"(others used {r['others_cpu']:.2f} cores)")
        return j

    def exp_m(self, m):
        """llama.cpp (node-llama-cpp, bench/llama_peer.mjs) on a BF16 GGUF of the same checkpoint.
        (1) decode floor = bytes one decode token reads / memory bandwidth (membw_bench, same run);
        (2) warm, all weights in the page cache, same prompt ids and threads: zipmoe (executor_bench on the HF
        dir) and llama.cpp interleaved `rounds` times, best of each; (3) peak RSS of an all-resident
        `zipmoe generate` (/usr/bin/time -f %M) vs checkpoint bytes × 1.05 + 512 MiB; (4) cold TPOT vs cap,
        both systems in the same cgroup limit with the page cache dropped before each run (zipmoe: the
        compressed dir, --memory-budget = cap - its overhead from calibrate()); (5) zipmoe's cold TPOT at 50 %
        over its warm TPOT."""
        pc = self.cfg["peer"]
        res = {"config": pc, "threads": self.threads, "seed": PEER_SEED, "others_max": OTHERS_MAX}
        rng = random.Random(PEER_SEED)
        ids = [rng.randrange(int(m["config"]["vocab_size"])) for _ in range(pc["prompt_len"])]
        ids_s = ",".join(map(str, ids))
        res["prompt_ids"] = ids
        tensors = safetensors_tensors(m["hf"])
        res["floor_bytes"] = decode_bytes_per_token(tensors, m["config"])
        res["checkpoint_bytes"] = sum(tensors.values())
        hf_files = sorted(os.path.join(m["hf"], f) for f in os.listdir(m["hf"]) if f.endswith(".safetensors"))
        # llama.cpp: node-llama-cpp (bench/install_peer.sh, idempotent) and the GGUF.
        gguf = None
        inst = subprocess.run(["bash", os.path.join(BENCH_DIR, "install_peer.sh")], capture_output=True, text=True)
        open(os.path.join(self.logs, "install_peer.log"), "w").write(inst.stdout + inst.stderr)
        if inst.returncode != 0:
            res["llama_error"] = f"bench/install_peer.sh failed: {(inst.stdout + inst.stderr).strip()[-300:]}"
            bl.warn(f"m: {res['llama_error']}")
        else:
            try:
                gguf = self.peer_gguf(m)
                res["gguf_bytes"] = os.path.getsize(gguf)
            except bl.RunError as e:
                res["llama_error"] = f"bench/gguf_writer.py failed: {e.args[0][:300]}"
                bl.warn(f"m: {res['llama_error']}")
        llama_cmd = ["node", os.path.join(BENCH_DIR, "llama_peer.mjs"), "--model", gguf or "", "--threads",
                     str(self.threads), "--prompt-ids", ids_s]
        # (1) + (2): warm, interleaved; bandwidth measured before and after.
        bw = [self.membw(pc["membw_reps"], "membw-1.log")]
        mem = {}
        for line in open("/proc/meminfo"):
            if line.startswith(("MemTotal", "MemAvailable")):
                mem[line.split(":")[0]] = int(line.split()[1]) * 1024
        res["mem_available_bytes"] = mem.get("MemAvailable")
        t0 = time.time()
        res["resident_before"] = self.page_in(hf_files + ([gguf] if gguf else []))
        res["page_in_s"] = round(time.time() - t0, 1)
        warm = []

        def warm_zipmoe(i):
            resid = self.residency(hf_files)
            r = self.run_group([os.path.join(self.a.bin, "executor_bench"), m["hf"], "--threads", str(self.threads),
                                "--prompt-ids", ids_s, "--decode-tokens", str(pc["warm_decode"]), "--reps",
                                str(pc["zipmoe_reps"])], f"m-warm-zipmoe-{i}.log", capped=True, limit=None,
                               timeout=600)
            reps = [(float(a), float(b), float(c)) for a, b, c in re.findall(
                r"rep \d+: ttft ([0-9.]+) s, tpot ([0-9.]+) s, prefill ([0-9.]+) tokens/s", r["stdout"])]
            row = {"system": "zipmoe", "round": i, "ok": r["rc"] == 0 and bool(reps), "resident": resid,
                   "wall_s": r["wall_s"], "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"]}
            if row["ok"]:
                row.update({"tpot_s": min(x[1] for x in reps), "prefill_tokens_per_s": max(x[2] for x in reps),
                            "reps": [{"ttft_s": a, "tpot_s": b, "prefill_tokens_per_s": c} for a, b, c in reps]})
                bl.log(f"m: warm zipmoe #{i}: tpot {row['tpot_s']:.4f} s, prefill {row['prefill_tokens_per_s']:.1f} "
                       f"tok/s (others used {r['others_cpu']:.2f} cores)")
            else:
                row["error"] = f"executor_bench exit {r['rc']} (logs/m-warm-zipmoe-{i}.log)"
                bl.warn(f"m: {row['error']}")
            warm.append(row)

        def warm_llama(i):
            resid = self.residency([gguf])
            r = self.run_group(llama_cmd + ["--decode-tokens", str(pc["warm_decode"]), "--warmup-tokens", "2",
                                            "--prefill-reps", "3"], f"m-warm-llama-{i}.log", capped=True,
                               limit=None, timeout=600)
            j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
            row = {"system": "llama.cpp", "round": i, "ok": j is not None, "resident": resid, "wall_s": r["wall_s"],
                   "peak_bytes": r["peak_bytes"], "others_cpu": r["others_cpu"]}
            if j:
                row.update({k: j.get(k) for k in ("tpot_s", "prefill_tokens_per_s", "prefill_s", "load_s",
                                                  "decode_step_s", "generated_ids", "llama_cpp_release")})
                bl.log(f"m: warm llama.cpp #{i}: tpot {row['tpot_s']:.4f} s, prefill "
                       f"{row['prefill_tokens_per_s']:.1f} tok/s (others used {r['others_cpu']:.2f} cores)")
            else:
                row["error"] = f"llama_peer.mjs exit {r['rc']} (logs/m-warm-llama-{i}.log)"
                bl.warn(f"m: {row['error']}")
            warm.append(row)

        def disturbed():
            """True while some system's best warm run shared the machine with > OTHERS_MAX cores of other work."""
            for sysname in ("zipmoe", "llama.cpp") if gguf else ("zipmoe",):
                ok = [w for w in warm if w["system"] == sysname and w["ok"]]
                if ok and min(ok, key=lambda w: w["tpot_s"])["others_cpu"] > OTHERS_MAX:
                    return True
            return False

        i = 0
        while i < pc["rounds"] or (i < pc["rounds"] + pc["extra_rounds"] and disturbed()):
            if i >= pc["rounds"]:
                bl.log("m: extra warm round: a best run shared the cores with other work")
            warm_zipmoe(i)
            if gguf:
                warm_llama(i)
            i += 1
        bw.append(self.membw(pc["membw_reps"], "membw-2.log"))
        bw = [b for b in bw if b]
        res["warm"] = warm
        res["membw"] = bw
        res["membw_gbps"] = max(b["gbps"] for b in bw) if bw else None
        res["membw_gbps_median"] = sorted(x for b in bw for x in b["gbps_runs"])[
            len([x for b in bw for x in b["gbps_runs"]]) // 2] if bw else None
        if res["membw_gbps"]:
            res["floor_s"] = res["floor_bytes"]["total"] / (res["membw_gbps"] * 1e9)
        best = {}
        for sysname in ("zipmoe", "llama.cpp"):
            ok = [w for w in warm if w["system"] == sysname and w["ok"]]
            if ok:
                fastest = min(ok, key=lambda w: w["tpot_s"])
                prefill = max(ok, key=lambda w: w["prefill_tokens_per_s"])
                best[sysname] = {"tpot_s": fastest["tpot_s"], "others_cpu": fastest["others_cpu"],
                                 "prefill_tokens_per_s": prefill["prefill_tokens_per_s"],
                                 "prefill_others_cpu": prefill["others_cpu"],
                                 "peak_bytes": max((w["peak_bytes"] or 0) for w in ok) or None}
        res["best"] = best
        # (3) peak RSS of an all-resident generate (warm), and the resident run's tokens for the cold runs.
        rss_file = os.path.join(self.out, "m-rss.txt")
        r = self.run_group(["/usr/bin/time", "-f", "%M", "-o", rss_file, self.zipmoe, "generate", "--model", m["hf"],
                            "--prompt-ids", ids_s, "--max-new-tokens", str(pc["cold_tokens"]), "--ignore-eos",
                            "--threads", str(self.threads), "--json"], "m-rss-generate.log", timeout=600)
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
        resident_ids = None
        if j:
            try:
                kb = int(open(rss_file).read().strip().splitlines()[-1])
            except (OSError, ValueError, IndexError):
                kb = None
            resident_ids = j["generated_ids"]
            res["rss"] = {"peak_rss_bytes": kb * 1024 if kb else None, "weights_bytes": res["checkpoint_bytes"],
                          "allowed_bytes": int(res["checkpoint_bytes"] * 1.05) + 512 * bl.MIB,
                          "tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"], "major_faults": r["major_faults"],
                          "generated_ids": resident_ids}
            bl.log(f"m: all-resident generate: peak RSS {(kb or 0) / (1 << 20):.2f} GiB, tpot {j['tpot_s']:.4f} s")
        else:
            res["rss"] = {"error": f"zipmoe generate exit {r['rc']} (logs/m-rss-generate.log)"}
        with contextlib.suppress(OSError):
            os.remove(rss_file)
        # (4) + (5) cold sweep, both systems under the same cap.
        res["sweep"] = self.peer_sweep(m, pc, res, gguf, llama_cmd, ids_s, resident_ids)
        zw = best.get("zipmoe")
        r50 = next((x for x in res["sweep"].get("rows", []) if x["zipmoe"].get("budget_pct") == 50
                    and x["zipmoe"].get("ok")), None)
        if zw and r50:
            res["cold50_over_warm"] = r50["zipmoe"]["tpot_s"] / zw["tpot_s"]
            if (r50.get("zipmoe_prefetch") or {}).get("ok"):
                res["cold50_over_warm_prefetch"] = r50["zipmoe_prefetch"]["tpot_s"] / zw["tpot_s"]
        self.save("m_llama_peer", res)

    def peer_sweep(self, m, pc, res, gguf, llama_cmd, ids_s, resident_ids):
        if not self.cap.available:
            return {"skipped": f"no memory cap: {self.cap.reason}"}
        if "overhead_bytes" not in m:
            return {"skipped": "zipmoe's overhead was not calibrated"}
        E, oz = m["expert_bytes"], m["overhead_bytes"]
        lw = [w["peak_bytes"] for w in res["warm"] if w["system"] == "llama.cpp" and w["ok"] and w["peak_bytes"]]
        slack = 256 * bl.MIB
        # llama.cpp's overhead: its warm runs' group peak (the GGUF was paged in outside the group, so the peak
        # is its own memory: node, llama.cpp's buffers, KV cache) + the same slack as zipmoe's, in 64 MiB steps.
        ol = ((max(lw) + slack) // (64 * bl.MIB) + 1) * 64 * bl.MIB if lw else None
        G = res.get("gguf_bytes")
        zmin = self.min_budget(m)
        out = {"zipmoe_overhead_bytes": oz, "llama_overhead_bytes": ol, "llama_warm_peak_bytes": max(lw) if lw else None,
               "zipmoe_min_budget_bytes": zmin, "expert_bytes": E, "gguf_bytes": G, "tokens": pc["cold_tokens"],
               "llama_timeout_s": pc["llama_timeout_s"]}
        caps = []  # (label, cap bytes, llama.cpp runs there too)
        if G and ol:
            caps += [(f"llama.cpp holds {f:.0%} of its GGUF", int(f * G) + ol, True) for f in pc["llama_fractions"]]
        caps += [(f"zipmoe {p} % budget", E * p // 100 + oz, pc["llama_at_zipmoe_pcts"]) for p in pc["zipmoe_pcts"]]
        floor_cap = (zmin or E // 100) + oz
        caps.append(("zipmoe's smallest cap (one staging slot)", floor_cap, True))
        merged = []
        for label, cap, with_llama in sorted(caps, key=lambda c: -c[1]):
            if cap < floor_cap:
                continue
            if merged and merged[-1][1] - cap < 64 * bl.MIB:
                merged[-1] = (merged[-1][0] + "; " + label, merged[-1][1], merged[-1][2] or with_llama)
            else:
                merged.append((label, cap, with_llama))
        rows = []
        n = pc["cold_tokens"]
        for label, cap, with_llama in merged:
            budget = max(zmin or 0, min(E, cap - oz))
            row = {"cap_bytes": cap, "label": label,
                   "llama_holds": (cap - ol) / G if G and ol else None}
            row["zipmoe"] = z = self.cold_zipmoe(m, pc, cap, budget, "zipmoe", ids_s, resident_ids)
            if z.get("preload"):
                row["zipmoe_preload"] = z["preload"]
            if pc.get("sweep_prefetch"):
                row["zipmoe_prefetch"] = self.cold_zipmoe(m, pc, cap, budget, f"zipmoe+{pc['sweep_prefetch']}", ids_s,
                                                          resident_ids)
            lrow = {"ok": False, "skipped": True}
            if gguf and with_llama:
                tag = f"m-cold-llama-{cap // bl.MIB}MiB"
                r = self.run_group(llama_cmd + ["--decode-tokens", str(n - 1), "--warmup-tokens", "0", "--prefill-reps",
                                                "1", "--progress"], tag + ".log", capped=True, limit=cap, cold=True,
                                   timeout=pc["llama_timeout_s"])
                j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
                lrow = {"ok": j is not None, "timed_out": r["timed_out"], "oom": r["oom_kills"] > 0,
                        "peak_bytes": r["peak_bytes"], "wall_s": r["wall_s"], "major_faults": r["major_faults"],
                        "minor_faults": r["minor_faults"], "sys_s": r["sys_s"], "others_cpu": r["others_cpu"]}
                if j:
                    lrow.update({k: j.get(k) for k in ("tpot_s", "prefill_s", "load_s", "decode_step_s", "generated_ids")})
                elif r["timed_out"]:
                    # What it finished before the limit (llama_peer.mjs --progress lines in its log).
                    prog = []
                    for line in open(os.path.join(self.logs, tag + ".log"), errors="replace"):
                        if line.startswith('{"progress"'):
                            with contextlib.suppress(ValueError):
                                prog.append(json.loads(line))
                    steps = [x["s"] for x in prog if x["progress"] == "decode" and x.get("timed")]
                    lrow.update({"load_s": next((x["s"] for x in prog if x["progress"] == "load"), None),
                                 "prefills_done": sum(x["progress"] == "prefill" for x in prog),
                                 "decode_step_s": steps, "steps_done": len(steps),
                                 "tpot_s_partial": sum(steps) / len(steps) if steps else None})
                    lrow["error"] = f"timed out after {pc['llama_timeout_s']} s (logs/{tag}.log)"
                else:
                    lrow["error"] = ("OOM-killed under the cap" if lrow["oom"] else f"exit {r['rc']}") + f" (logs/{tag}.log)"
                bl.log(f"m: cap {cap / bl.GIB:.2f} GiB: llama.cpp " + (f"tpot {lrow['tpot_s']:.3f} s" if lrow["ok"]
                                                                       else lrow["error"]))
            row["llama"] = lrow
            if z["ok"] and lrow["ok"]:
                row["ratio"] = z["tpot_s"] / lrow["tpot_s"]
            elif z["ok"] and lrow.get("tpot_s_partial"):
                row["ratio_partial"] = z["tpot_s"] / lrow["tpot_s_partial"]
            zp = row.get("zipmoe_prefetch") or {}
            if zp.get("ok") and lrow["ok"]:
                row["ratio_prefetch"] = zp["tpot_s"] / lrow["tpot_s"]
            elif zp.get("ok") and lrow.get("tpot_s_partial"):
                row["ratio_prefetch_partial"] = zp["tpot_s"] / lrow["tpot_s_partial"]
            rows.append(row)
        out["rows"] = rows
        return out

    def cold_zipmoe(self, m, pc, cap, budget, system, ids_s, resident_ids):
        """One cold zipmoe run of (m)'s sweep under `cap` (--preload, like llama.cpp paging its GGUF in)."""
        n = pc["cold_tokens"]
        z_preload = None
        model_dir, extra = self.system_args(m, system)
        tag = f"m-cold-{system.replace('+', '-')}-{cap // bl.MIB}MiB"
        stats = os.path.join(self.out, "runs", tag + ".json")
        os.makedirs(os.path.dirname(stats), exist_ok=True)
        r = self.run_group([self.zipmoe, "generate", "--model", model_dir, "--prompt-ids", ids_s, "--max-new-tokens",
                            str(n), "--ignore-eos", "--threads", str(self.threads), "--json", "--memory-budget",
                            str(budget), "--stats-json", stats, "--preload", *extra], tag + ".log", capped=True,
                           limit=cap, cold=True, timeout=pc["zipmoe_timeout_s"])
        j = self.last_json(r["stdout"]) if r["rc"] == 0 else None
        # --preload: like llama.cpp paging its GGUF in while loading, zipmoe fills its pools to the plan
        # before the request (counted in its TTFT, not its TPOT); the line says how long and how much.
        with contextlib.suppress(OSError):
            pm = re.search(r"I: preload: (\d+) experts .* in ([0-9.]+) s \(([0-9.]+) MiB read\)",
                           open(os.path.join(self.logs, tag + ".log")).read())
            if pm:
                z_preload = {"experts": int(pm.group(1)), "seconds": float(pm.group(2)), "read_mib": float(pm.group(3))}
        z = {"system": system, "budget_bytes": budget, "budget_pct": round(100 * budget / m["expert_bytes"], 1),
             "ok": j is not None, "preload": z_preload,
             "timed_out": r["timed_out"], "oom": r["oom_kills"] > 0, "peak_bytes": r["peak_bytes"],
             "wall_s": r["wall_s"], "others_cpu": r["others_cpu"], "major_faults": r["major_faults"],
             "minor_faults": r["minor_faults"], "sys_s": r["sys_s"], "user_s": r["user_s"]}
        if j:
            st = json.load(open(stats)) if os.path.exists(stats) else {}
            io = st.get("io") or {}
            pre = (st.get("prefill") or {}).get("io") or {}
            read = io.get("bytes_e", 0) + io.get("bytes_sm", 0)
            steps = max(1, len(j["generated_ids"]) - 1)
            z.update({"tpot_s": j["tpot_s"], "ttft_s": j["ttft_s"],
                      "hit_rate": (st.get("requests") or {}).get("hit_rate"), "read_bytes": read,
                      "decode_read_bytes_per_token": max(0, read - pre.get("bytes_e", 0) - pre.get("bytes_sm", 0)) / steps,
                      "generated_ids": j["generated_ids"], "arena_bytes": (st.get("arena") or {}).get("mapped_bytes"),
                      "decompress_s": (st.get("decode") or {}).get("seconds"), "io_s": io.get("seconds"),
                      "evictions": sum(p.get("evictions", 0) for p in (st.get("pools") or {}).values()),
                      "prefetch": st.get("prefetch"),
                      "same_tokens_as_resident": resident_ids is not None
                      and j["generated_ids"] == resident_ids[:len(j["generated_ids"])]})
            if resident_ids is not None and not z["same_tokens_as_resident"]:
                self.failures.append(tag)
        else:
            z["error"] = ("OOM-killed under the cap" if z["oom"] else f"exit {r['rc']}") + f" (logs/{tag}.log)"
        bl.log(f"m: cap {cap / bl.GIB:.2f} GiB: {system} budget {z['budget_pct']} %: "
               + (f"tpot {z['tpot_s']:.3f} s" if z["ok"] else z["error"]))
        return z

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
    ap.add_argument("--only", default="c,r,a,b,g,f,d,e,deepseek,h,l,m,t,s,q,i")
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
        if any(x in only for x in ("c", "r", "g", "f", "d", "e", "h", "l", "m", "s", "q")):
            s.calibrate(m, 50)
        if any(x in only for x in ("c", "g", "f", "d", "e", "h")):  # one reference long enough for all
            s.reference(m, max([s.cfg["tokens"]] + (s.cfg["lengths"] if "e" in only else [])))
        steps = [("c", lambda: s.exp_c(m)), ("r", lambda: s.exp_r(m)), ("a", lambda: s.exp_a(m)), ("b", lambda: s.exp_b(m)),
                 ("g", lambda: s.exp_g(m)), ("f", lambda: s.exp_f(m)), ("d", lambda: s.exp_d(m)),
                 ("e", lambda: s.exp_e(m)), ("deepseek", s.exp_deepseek), ("h", lambda: s.exp_h(m)),
                 ("l", lambda: s.exp_l(m)), ("m", lambda: s.exp_m(m)), ("t", lambda: s.exp_t(m)), ("s", lambda: s.exp_s(m)),
                 ("q", lambda: s.exp_q(m)), ("i", s.exp_i)]
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
