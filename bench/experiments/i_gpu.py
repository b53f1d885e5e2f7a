"""(i) GPU recovery kernel and TPOT: skipped without a CUDA device; its report section. An experiment of
bench/suite.py (bench/experiments/__init__.py)."""
from benchlib import load

NAME = "i"
NEEDS = ()
CONFIG = {"quick": {}, "full": {}}


def run(s):
    gpu = s.meta["machine"].get("gpu")
    s.save("i_gpu", {"skipped": gpu is None,
                     "reason": "no CUDA device (nvidia-smi absent or lists no GPU)" if gpu is None else
                     "GPU present: recovery_bench / GPU TPOT not wired into the suite yet",
                     "gpu": gpu})


# ------------------------------------------------------------------ report

def report(rep):
    i = load(rep.a.out, "i_gpu.json")
    rep.p("## (i) GPU", "")
    rep.p((("Skipped: " + i["reason"] + ".") if i and i["skipped"] else (i or {}).get("reason", "Not run.")) +
          ' The hand runs of `scripts/gpu_check.sh` on GPU machines are under "Background: GPU check runs".', "")

# ------------------------------------------------------------------ assemble
