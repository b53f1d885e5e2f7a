"""(f) Eviction ablation (ZipMoE Fig. 10): every eviction policy and prefetcher, zipmoe with and without its plan;
its report section and the ablation table (t) and the Switch model share. An experiment of bench/suite.py
(bench/experiments/__init__.py)."""
from benchlib import COLORS, MIB, f3, load

NAME = "f"
NEEDS = ("calibrate", "reference")
# Every eviction policy (smoe brings its own top-score prefetching), then the prefetch systems of the mode.
ABLATION = ("fifo", "lru", "marking", "dali", "smoe", "coserve", "zipmoe-noplan", "zipmoe")
CONFIG = {"quick": {"ablation_budgets": [50], "prefetch_systems": ["zipmoe+residual", "lru+residual"]},
          "full": {"ablation_budgets": [25, 50],
                   "prefetch_systems": ["zipmoe+top-score", "zipmoe+residual", "lru+top-score", "lru+residual",
                                        "dali+residual"]}}


def quick_note(cfg):
    return (f"(f) and (t) prefetch systems {', '.join(cfg['prefetch_systems'])} "
            f"(`--full`: {', '.join(CONFIG['full']['prefetch_systems'])})")


def run(s):
    m = s.mini
    rows = []
    for pct in s.cfg["ablation_budgets"]:
        for system in (*ABLATION, *s.cfg["prefetch_systems"]):
            rows.append(s.run(m, system, pct, s.cfg["tokens"]))
    s.save(f"f_ablation_{m['arch']}", {"rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    f = load(rep.a.out, "f_ablation_qwen2_moe.json")
    rep.p("## (f) Eviction ablation: every policy and prefetcher, zipmoe with and without the plan (Fig. 10)", "")
    if not f:
        rep.p("Not run.", "")
        return
    ok = [r for r in f["rows"] if r.get("ok")]
    rep.p("`zipmoe-noplan` = the zipmoe policy (frequency-rank dispatch and eviction) with the whole budget in "
          "the F pool (`--pool-ratios F=1`) instead of Alg. 4's plan; `marking` = the classic Marking paging "
          "algorithm (random unmarked victim, seeded); `dali` = DALI's workload-aware replacement in equal per-layer "
          "F pools; `smoe` = SMoE's score-based eviction (lowest mean router score over the last steps) with its "
          "top-score prefetching, substitution off (exact); `coserve` = CoServe's two-stage eviction (experts the "
          "latest step did not select first, then the least probable); `X+P` = system X prefetching the next MoE "
          "layer's predicted experts with predictor P. The synthetic model's routing is synthetic "
          "(`--router-skew`); (t) repeats this on the trained model.", "")
    if plt and ok:
        plt.figure(figsize=(6, 3.4))
        for r in ok:
            plt.scatter(r["tokens_per_s"], r["tpot_s"], color=COLORS.get(r["system"]), label=
                        f"{r['system']} {r['budget_pct']}%")
        plt.xlabel("throughput (tokens/s, whole generation)")
        plt.ylabel("latency: TPOT (s)")
        plt.grid(alpha=0.3)
        plt.legend(fontsize=7)
        rep.fig("f_ablation.png", "eviction ablation")
    ablation_table(rep, ok, read_digits=0)
    rep.p("")


def ablation_table(rep, rows, read_digits):
    """(f)'s table: one row per generation (budget, system, TPOT, throughput, hit rate, MiB read, bit-exact)."""
    rep.p("| budget | system | TPOT s | tokens/s | hit rate | read MiB | prefetch accuracy (used / issued) | "
          "wasted MiB | = resident |", "|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if not r.get("ok"):
            rep.p(f"| {r['budget_pct']}% | {r['system']} | failed: {r.get('error', '')[:120]} | | | | | | |")
            continue
        pf = r.get("prefetch") or {}
        acc = (f"{f3(pf.get('accuracy'), 2)} ({pf.get('used')} / {pf.get('issued')})" if pf.get("issued") else "–")
        wasted = f"{pf['wasted_bytes'] / MIB:.{read_digits}f}" if pf.get("issued") else "–"
        rep.p(f"| {r['budget_pct']}% | {r['system']} | {f3(r['tpot_s'])} | {f3(r['tokens_per_s'], 2)} | "
              f"{f3(r.get('hit_rate'))} | {r['read_bytes'] / MIB:.{read_digits}f} | {acc} | {wasted} | "
              f"{'yes' if r['bit_identical'] else '**NO**'} |")
