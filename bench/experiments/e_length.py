"""(e) End-to-end latency vs output length at 50 % (ZipMoE Fig. 9); its report section (Report.xy_section). An
experiment of bench/suite.py (bench/experiments/__init__.py)."""
NAME = "e"
NEEDS = ("calibrate", "reference")
CONFIG = {"quick": {"lengths": [8, 16], "length_systems": ["zipmoe", "lru"]},
          "full": {"lengths": [32, 64, 128, 256], "length_systems": ["zipmoe", "lru", "mmap"]}}


def run(s):
    m = s.mini
    rows = []
    for n in s.cfg["lengths"]:
        for system in s.cfg["length_systems"]:
            rows.append(s.run(m, system, 50, n))
    s.save(f"e_length_{m['arch']}", {"budget_pct": 50, "rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def report(rep):
    rep.xy_section("e_length_qwen2_moe.json", "(e) Latency vs output length at 50 % (Fig. 9)", "tokens",
                   "new tokens", "total_s", "generation latency (s): prefill + decode", "e_length.png")
