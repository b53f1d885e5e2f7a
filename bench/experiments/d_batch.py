"""(d) Throughput vs batch size at 50 % (ZipMoE Fig. 8); its report section (Report.xy_section). An experiment of
bench/suite.py (bench/experiments/__init__.py)."""
NAME = "d"
NEEDS = ("calibrate", "reference")
CONFIG = {"quick": {"batches": [1, 2], "batch_systems": ["zipmoe", "lru"]},
          "full": {"batches": [1, 4, 16], "batch_systems": ["zipmoe", "lru", "full-load", "mmap"]}}


def run(s):
    m = s.mini
    rows = []
    for b in s.cfg["batches"]:
        for system in s.cfg["batch_systems"]:
            rows.append(s.run(m, system, 50, s.cfg["tokens"], batch=b))
    s.save(f"d_batch_{m['arch']}", {"budget_pct": 50, "rows": [s.public(r) for r in rows]})


# ------------------------------------------------------------------ report

def report(rep):
    rep.xy_section("d_batch_qwen2_moe.json", "(d) Throughput vs batch size at 50 % (Fig. 8)", "batch", "batch",
                   "tokens_per_s", "tokens/s (all sequences)", "d_batch.png")
