"""(t) The trained model (models/qwen2moe-debian-18m): routing statistics of learned vs synthetic routing
(bench/routing_stats.py), (f)'s eviction ablation and (l) on it; its report section. An experiment of
bench/suite.py (bench/experiments/__init__.py)."""
import json
import os
import tempfile

import benchlib as bl
import routing_stats
from benchlib import ROUTER_SKEW, TRAINED, load
from experiments import l_load
from experiments.f_ablation import ABLATION, ablation_table

NAME = "t"
NEEDS = ()  # calibrates the trained model itself; routing statistics use the mini model's HF directory
CONFIG = {"quick": {"trained": {"tokens": 32, "budgets": [25], "routing_prompts": 16, "routing_prompts_mini": 3}},
          "full": {"trained": {"tokens": 64, "budgets": [10, 25, 50], "routing_prompts": 32,
                               "routing_prompts_mini": 16}}}


def quick_note(cfg):
    q, f = cfg["trained"], CONFIG["full"]["trained"]
    return (f"(t) the ablation at {' / '.join(str(b) for b in q['budgets'])} %, the mini model's routing statistics "
            f"over {q['routing_prompts_mini']} prompts (`--full`: {' / '.join(str(b) for b in f['budgets'])} %, "
            f"{f['routing_prompts_mini']} prompts)")


def run(s):
    """(t) The trained model: routing statistics of learned routing next to the synthetic models'
    (bench/routing_stats.py), and the eviction ablation of (f) on it, cold and capped."""
    mini = s.mini
    tc = s.cfg["trained"]
    m = s.prepare_trained()
    s.calibrate(m, 50)
    s.reference(m, tc["tokens"])
    rows = []
    for pct in tc["budgets"]:
        for system in (*ABLATION, *s.cfg["prefetch_systems"]):
            rows.append(s.run(m, system, pct, tc["tokens"]))
    routing = []
    for name, mm, n in ((f"{TRAINED} (trained)", m, tc["routing_prompts"]),
                        (f"qwen2_moe mini (synthetic, --router-skew {ROUTER_SKEW})", mini, tc["routing_prompts_mini"])):
        with tempfile.TemporaryDirectory(prefix="zipmoe-routing-") as work:
            sessions = routing_stats.run_traces(s.zipmoe, mm["hf"], n, tc["tokens"], s.threads, work)
        cfg = mm["config"]
        row = {"model": name, "prompts": n, "tokens": tc["tokens"],
               **routing_stats.stats(sessions, int(cfg["num_experts"]), int(cfg["num_experts_per_tok"]))}
        info = mm["inspect"]
        row.update({k: info[k] for k in ("exponent_entropy_bits", "e_bits_per_value", "ratio", "entropy_bound_ratio")})
        bl.log(f"routing {name}: {json.dumps(row)}")
        routing.append(row)
    l_load.run(s, m, tag="-trained")  # (l) on learned routing: written as l_load_qwen2_moe-trained.json
    s.save("t_trained", {"model": TRAINED, "tokens": tc["tokens"], "rows": [s.public(r) for r in rows],
                         "routing": routing, "card": os.path.join("models", TRAINED, "README.md")})


# ------------------------------------------------------------------ report

def report(rep):
    t = load(rep.a.out, "t_trained.json")
    rep.p("## (t) The trained model: learned routing statistics and the eviction ablation on it", "")
    if not t:
        rep.p("Not run.", "")
        return
    rep.p(f"`models/{t['model']}` ({t['card']}): a Qwen2-MoE trained here on English text Debian ships and ShareGPT "
          "prompts, with a learned byte-level BPE tokenizer. Synthetic checkpoints route by construction "
          "(`--router-skew`); a trained router's statistics are what caches and prefetchers see on real "
          "models. Routing statistics over the decode steps of ShareGPT prompts #300… (batch 1, greedy, "
          "`bench/routing_stats.py`): **top-10 % share** = share of a layer's activations that go to its 10 % "
          "most used experts; **reuse** = share of a token's experts at a layer that the previous token also "
          "used there; **next-layer recall** = share of layer l+1's experts predicted from layer l's by a "
          "co-occurrence table fitted on the other half of the prompts (2-fold), against predicting l+1's most "
          "popular experts; uniform routing's value in parentheses.", "")
    rep.p(routing_stats.markdown(t["routing"]))
    ok = [r for r in t["rows"] if r.get("ok")]
    rep.p(f"Eviction ablation on the trained model (as (f): cold, capped, {t['tokens']} new tokens, the same "
          "ShareGPT prompt; zipmoe's plan fitted to warm-up runs on other prompts):", "")
    ablation_table(rep, ok, read_digits=1)
    texts = [r.get("text") for r in ok if r.get("text")]
    if texts:
        rep.p("", f"Its greedy continuation of the prompt (every row generated the same): “{texts[0].strip()[:400]}”")
    rep.p("")
    l_load.report(rep, "l_load_qwen2_moe-trained.json", "### (l) on the trained model: ShareGPT requests over HTTP")
