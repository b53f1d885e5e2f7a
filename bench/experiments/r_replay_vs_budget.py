"""(r) The same runtime under capacity pressure: `zipmoe replay` of a Zipf routing trace vs budget, every cache
policy, cold and capped; its report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
import json
import os

import benchlib as bl
from benchlib import COLORS, MIB, f3, gib, load
from replay_vs_budget import make_trace

NAME = "r"
NEEDS = ("calibrate",)
# `steps` routing steps replayed `repeat` times at each budget, per system.
# Quick mode replays two budgets, the tightest and the headline's 50 %, and four systems ((c) and (f) run the others).
CONFIG = {"quick": {"replay": {"steps": 16, "repeat": 2, "budgets": [10, 50],
                               "systems": ["zipmoe", "lru", "dali", "coserve"]}},
          "full": {"replay": {"steps": 48, "repeat": 2, "budgets": [10, 25, 50],
                              "systems": ["zipmoe", "lru", "fifo", "lfu", "marking", "dali", "coserve", "full-load",
                                          "zipmoe-noplan"]}}}


def quick_note(cfg):
    q, f = cfg["replay"], CONFIG["full"]["replay"]
    return (f"(r) {q['steps']} × {q['repeat']} steps at {', '.join(f'{b} %' for b in q['budgets'])}, "
            f"{len(q['systems'])} systems (`--full`: {f['steps']} × {f['repeat']} steps at "
            f"{', '.join(f'{b} %' for b in f['budgets'])}, {len(f['systems'])} systems)")


def run(s):
    """`zipmoe replay` (storage, cache, scheduler, decode, recovery; no model math): per step and MoE
    layer, top_k distinct experts from a Zipf(1.0) popularity over a per-layer permutation; each lease
    held 200 µs (a stand-in for GPU expert compute). The zipmoe plan is fitted to a trace of the same
    distribution drawn with another seed (bench/replay_vs_budget.py's generator)."""
    m = s.mini
    rc = s.cfg["replay"]
    info = m["inspect"]
    layers = [p["layer_id"] for p in info["per_layer"] if p["experts"] > 0]
    top_k = int(m["config"]["num_experts_per_tok"])
    trace = os.path.join(s.out, "replay-trace.jsonl")
    plan_trace = os.path.join(s.out, "replay-plan-trace.jsonl")
    make_trace(trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=1)
    make_trace(plan_trace, layers, int(info["n_experts"]), top_k, rc["steps"], 1.0, seed=2)
    bw = (s.meta.get("disk") or {}).get("odirect_gbps_1m")
    rows = []
    for pct in rc.get("budgets", s.cfg["budgets"]):
        for system in rc["systems"]:
            _, extra = s.system_args(m, system)
            if "--plan-trace" in extra:  # the replay's own workload, not the generation's warm-up trace
                i = extra.index("--plan-trace")
                extra = extra[:i + 1] + [plan_trace] + extra[i + 2:]
            tag = f"replay-{system}-{pct}"
            stats = os.path.join(s.out, "runs", tag + ".json")
            os.makedirs(os.path.dirname(stats), exist_ok=True)
            row = {"system": system, "budget_pct": pct, "cap_bytes": s.cap_bytes(m, pct)}
            try:
                r = s.zm("replay", "--model", m["zstd"], "--trace", trace, "--memory-budget",
                         str(m["expert_bytes"] * pct // 100), "--compute-us", "200", "--repeat",
                         str(rc["repeat"]), "--stats-json", stats, *extra, log=tag + ".log", cold=True,
                         capped=True, limit=s.cap_bytes(m, pct), timeout=1800)
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
    s.save(f"r_replay_vs_budget_{m['arch']}", {"zipf": 1.0, "compute_us": 200, "steps": rc["steps"],
                                               "repeat": rc["repeat"], "rows": rows})


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    r = load(rep.a.out, "r_replay_vs_budget_qwen2_moe.json")
    rep.p("## (r) The same runtime under capacity pressure: `zipmoe replay` of a Zipf trace vs budget", "")
    if not r:
        rep.p("Not run.", "")
        return None
    ok = [x for x in r["rows"] if x.get("ok")]
    rep.p(f"(c) is one cold request, where first-touch misses dominate, so this drives the same runtime (storage, "
          f"cache, scheduler, decode, recovery; no model math) with a synthetic routing trace: per step and MoE "
          f"layer, top-4 distinct experts drawn from a Zipf({r['zipf']}) popularity over a per-layer permutation "
          f"of the 60 experts, {r['steps']} steps replayed {r['repeat']}×, each expert's lease held "
          f"{r['compute_us']} µs (a stand-in for GPU expert compute, leaving the CPU to the runtime); same caps, "
          "cold. zipmoe's plan is fitted to a trace of the same distribution drawn with another seed. Physical "
          "limit = compressed bytes read per step / O_DIRECT bandwidth. No mmap row: replay has no model to map. "
          "No bit-exactness check here (no logits); (c) checks the same code paths."
          + (" **Short replay** (quick mode): frequency ranks, which zipmoe dispatches and evicts by, have not "
             "converged in so few steps, which favours recency-based policies; `--full` replays "
             f"{CONFIG['full']['replay']['steps']} × {CONFIG['full']['replay']['repeat']} steps."
             if rep.meta.get("mode") == "quick" else ""), "")
    if plt and ok:
        plt.figure(figsize=(6, 3.4))
        for sname in [x for x in COLORS if any(y["system"] == x for y in ok)]:
            pts = sorted((y["budget_pct"], y["step_s"]) for y in ok if y["system"] == sname)
            plt.plot([a for a, _ in pts], [b for _, b in pts], "o-", label=sname, color=COLORS[sname])
        lim = sorted((y["budget_pct"], y["physical_limit_s"]) for y in ok
                     if y["system"] == "zipmoe" and y.get("physical_limit_s"))
        if lim:
            plt.plot([a for a, _ in lim], [b for _, b in lim], "k--", label="physical limit (zipmoe bytes)")
        plt.xlabel("budget (% of BF16 expert bytes)")
        plt.ylabel("time per step (s)")
        plt.ylim(bottom=0)
        plt.grid(alpha=0.3)
        plt.legend(fontsize=7)
        plt.title("qwen2_moe mini, zipmoe replay, Zipf(1.0) routing", fontsize=9)
        rep.fig("r_replay_vs_budget.png", "replay time per step vs budget")
    rep.p("| budget | system | s / step | / zipmoe | hit rate | read MiB / step | physical limit s | "
          "makespan/bound | peak GiB |", "|---|---|---|---|---|---|---|---|---|")
    for pct in sorted({x["budget_pct"] for x in r["rows"]}):
        z = next((x for x in ok if x["budget_pct"] == pct and x["system"] == "zipmoe"), None)
        for x in [y for y in r["rows"] if y["budget_pct"] == pct]:
            if not x.get("ok"):
                rep.p(f"| {pct}% | {x['system']} | {'OOM under the cap' if x.get('oom') else 'failed'} | | | | | | |")
                continue
            ratio = f"{x['step_s'] / z['step_s']:.2f}" if z else "–"
            rep.p(f"| {pct}% | {x['system']} | {f3(x['step_s'])} | {ratio} | {f3(x.get('hit_rate'))} | "
                  f"{x['read_bytes_per_step'] / MIB:.1f} | {f3(x.get('physical_limit_s'))} | "
                  f"{f3(x.get('makespan_over_bound'), 2)} | {gib(x.get('peak_bytes'))} |")
    rep.p("")
    return r

# ------------------------------------------------------------------ headline
