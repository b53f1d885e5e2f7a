"""deepseek_v2: every policy at 25 % (--full: 25 and 50 %) on the preset of the mode (bit-exactness and TPOT on
MLA); its report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
from benchlib import MIB, f3, gib, load
from experiments.c_tpot_vs_budget import POLICIES

NAME = "deepseek"
NEEDS = ()
# The preset, and the budgets every policy runs at.
CONFIG = {"quick": {"deepseek": "tiny", "deepseek_budgets": [25]},
          "full": {"deepseek": "mini", "deepseek_budgets": [25, 50]}}


def quick_note(cfg):
    q, f = cfg.get("deepseek_budgets", [25, 50]), CONFIG["full"]["deepseek_budgets"]
    return None if q == f else (f"deepseek_v2 at {' / '.join(str(b) for b in q)} % "
                                f"(`--full`: {' / '.join(str(b) for b in f)} %)")


def run(s):
    """deepseek_v2: every policy at the budgets of this mode, on its preset; bit-exactness and TPOT."""
    m = s.prepare("deepseek_v2", s.cfg["deepseek"])
    s.calibrate(m, 50)
    rows = []
    for pct in s.cfg["deepseek_budgets"]:
        for system in POLICIES:
            rows.append(s.run(m, system, pct, min(s.cfg["tokens"], 16)))
    s.save("c_tpot_vs_budget_deepseek_v2", {"model": s.model_meta(m), "rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def report(rep):
    d = load(rep.a.out, "c_tpot_vs_budget_deepseek_v2.json")
    budgets = sorted({r["budget_pct"] for r in d["rows"]}) if d else [25, 50]
    rep.p(f"## deepseek_v2: every policy at {' / '.join(str(b) for b in budgets)} %", "")
    if not d:
        rep.p("Not run.", "")
        return
    mm = d["model"]
    rep.p(f"deepseek_v2 **{mm['preset']}** ({mm['expert_bytes'] / MIB:.1f} MiB of BF16 experts), same prompt and "
          "settings as (c).", "", "| budget | system | TPOT s | TTFT s | hit rate | peak GiB | = resident |",
          "|---|---|---|---|---|---|---|")
    for r in d["rows"]:
        if r.get("ok"):
            rep.p(f"| {r['budget_pct']}% | {r['system']} | {f3(r['tpot_s'])} | {f3(r['ttft_s'], 2)} | "
                  f"{f3(r.get('hit_rate'))} | {gib(r.get('peak_bytes'))} | {'yes' if r['bit_identical'] else '**NO**'} |")
        else:
            rep.p(f"| {r['budget_pct']}% | {r['system']} | {'OOM under the cap' if r.get('oom') else 'failed'} | | | | |")
    rep.p("")
