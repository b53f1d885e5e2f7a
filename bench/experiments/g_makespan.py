"""(g) Per-layer makespan over the Lemma B.3 lower bound: the cache-affinity scheduler (Alg. 1) vs FIFO dispatch; its
report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
from benchlib import f3, load

NAME = "g"
NEEDS = ("calibrate", "reference")
CONFIG = {"quick": {"fifo_budgets": [50]}, "full": {"fifo_budgets": [25, 50, 75]}}


def run(s):
    m = s.mini
    rows = []
    for pct in s.cfg["fifo_budgets"]:
        for system in ("zipmoe", "zipmoe-fifo-dispatch"):
            rows.append(s.run(m, system, pct, s.cfg["tokens"]))
    s.save(f"g_makespan_{m['arch']}", {"rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    g = load(rep.a.out, "g_makespan_qwen2_moe.json")
    rep.p("## (g) Per-layer makespan / Lemma B.3 lower bound: cache-affinity scheduler vs FIFO dispatch", "")
    if not g:
        rep.p("Not run.", "")
        return
    ok = [r for r in g["rows"] if r.get("ok")]
    if plt and ok:
        plt.figure(figsize=(6, 3.4))
        data = [r.get("layer_ratios") or [0] for r in ok]
        plt.boxplot(data, labels=[f"{r['system']}\n{r['budget_pct']}%" for r in ok])
        plt.axhline(1.2, color="k", ls="--", label="target 1.2")
        plt.ylabel("mean makespan / bound per layer")
        plt.legend(fontsize=8)
        plt.xticks(fontsize=7)
        rep.fig("g_makespan.png", "makespan over bound")
    rep.p("| budget | dispatch | TPOT s | mean makespan/bound | per-layer min / median / max | = resident |",
          "|---|---|---|---|---|---|")
    for r in ok:
        lr = sorted(x for x in (r.get("layer_ratios") or []) if x)
        spread = f"{lr[0]:.2f} / {lr[len(lr) // 2]:.2f} / {lr[-1]:.2f}" if lr else "–"
        rep.p(f"| {r['budget_pct']}% | {'FIFO' if 'fifo' in r['system'] else 'Alg. 1'} | {f3(r['tpot_s'])} | "
              f"{f3(r.get('makespan_over_bound'), 2)} | {spread} | {'yes' if r['bit_identical'] else '**NO**'} |")
    rep.p("")

# ------------------------------------------------------------------ (f)
