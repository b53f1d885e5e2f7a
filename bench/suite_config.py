"""Constants and helpers of bench/suite.py shared with its experiment modules: prompt indices, policies,
the peer settings, MODES (quick / full), and the model-size helpers."""
import json
import os
import re
import struct


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
              "switch": {"preset": "mini", "tokens": 32, "budgets": [10, 25], "ablation_budgets": [10],
                         "sampling": ["--temperature", "30", "--seed", "1"]},
              "prompt_index": 3, "plan_prompts": 2, "c_systems_other_budgets": ["zipmoe", "lru", "mmap"],
              "codec_sections": "ratio,threads,io", "io_mib": 256,
              "replay": {"steps": 16, "repeat": 2, "budgets": [10, 25, 50],
                         "systems": ["zipmoe", "lru", "fifo", "marking", "dali", "coserve"]},
              "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 8, "max_tokens": 8,
                       "max_prompt_chars": 400},
              # (h): the (l) requests with more tokens each, serve and up interleaved `rounds` times (one
              # 8 x 8-token sample per mode moved the up/serve ratio by +-0.1 from run to run; one round of
              # two hand runs put up at 1.26x serve and the other three rounds at 0.99-1.04; a three-round
              # run had 1.23, 0.96 and 1.08: five rounds give a median that two slow rounds cannot move)
              "h": {"rounds": 5, "max_tokens": 16},
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
             "switch": {"preset": "mini", "tokens": 64, "budgets": [10, 25, 50], "ablation_budgets": [10, 25],
                        "sampling": ["--temperature", "30", "--seed", "1"]},
             "prompt_index": 0, "plan_prompts": 4, "c_systems_other_budgets": POLICIES,
             "codec_sections": "ratio,threads,io", "io_mib": 1024,
             "replay": {"steps": 48, "repeat": 2, "budgets": [10, 25, 50],
                        "systems": ["zipmoe", "lru", "fifo", "lfu", "marking", "dali", "coserve", "full-load",
                                    "zipmoe-noplan"]},
             "load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 16, "max_tokens": 32,
                      "max_prompt_chars": 1000},
             "h": {"rounds": 5, "max_tokens": 32},
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
