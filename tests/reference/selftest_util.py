"""Helpers the per-architecture parts of the numpy reference's self-test share (check_logits_selftest_*.py): the
relative error the checks compare against, scalar sigmoid / SiLU for answers worked by hand, planting a bug in a
reference module for the span of a check, and running one part on its own."""

import contextlib
import math
import shutil
import tempfile
import time

import numpy as np

from check_logits_compare import log


def rel(a, b):
    """max |a - b| / max |b|, in float64 (|b| floored at 1e-30)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def silu(v):
    return v * sig(v)


@contextlib.contextmanager
def planted(module, **fns):
    """Replaces module-level functions of `module` (a reference's vectorised pass) for the duration."""
    old = {k: getattr(module, k) for k in fns}
    try:
        for k, v in fns.items():
            setattr(module, k, v)
        yield
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def run_part_alone(name, known_answer_tests, tests, argv=None):
    """One architecture's part of the self-test on its own (`python3 check_logits_selftest_<name>.py [--keep]`): its
    known-answer checks, then `tests(t, work)` over checkpoints in a temporary directory. Returns the exit status."""
    import argparse
    from check_logits_selftest import SelfTest
    ap = argparse.ArgumentParser(description=f"the {name} part of the numpy reference's self-test")
    ap.add_argument("--keep", action="store_true", help="keep the checkpoints written")
    args = ap.parse_args(argv)
    t = SelfTest()
    t0 = time.time()
    log(f"{name} known-answer checks of the helpers")
    known_answer_tests(t)
    work = tempfile.mkdtemp(prefix=f"zipmoe_refselftest_{name}_")
    try:
        tests(t, work)
    finally:
        if args.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if t.failures:
        log(f"\n{name} self-test FAILED: {len(t.failures)} of {t.n} checks ({time.time() - t0:.1f}s)")
        for f in t.failures:
            log("  " + f)
        return 1
    log(f"\n{name} self-test passed: {t.n} checks ({time.time() - t0:.1f}s)")
    return 0
