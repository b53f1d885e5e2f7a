"""Shared by bench/report.py and its section modules: the figure backend (matplotlib, or None), units,
targets, colours and the small loaders and formatters."""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# Re-exported to the section modules: what the other mode runs (for the caveats), (m)'s limit, routing stats.
from suite_config import MODES, OTHERS_MAX  # noqa: E402,F401
import routing_stats  # noqa: E402,F401

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # the report still has its tables
    plt = None

GIB = 1 << 30
MIB = 1 << 20
DPI = 80
TARGETS = {"zipmoe/lru": 0.5, "zipmoe/mmap": 0.35, "TPOT/physical limit": 1.3, "makespan/bound": 1.2}
COLORS = {"zipmoe": "C3", "lru": "C0", "fifo": "C1", "lfu": "C2", "marking": "C4", "dali": "C6", "full-load": "C7",
          "mmap": "C5", "zipmoe-noplan": "C8", "zipmoe-fifo-dispatch": "C9", "smoe": "tab:olive",
          "coserve": "tab:brown"}


def load(out, pattern):
    paths = sorted(glob.glob(os.path.join(out, pattern)))
    return json.load(open(paths[0])) if paths else None


def f3(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def gib(x):
    return "–" if x is None else (f"{x / GIB:.2f}" if x >= GIB / 10 or x == 0 else f"{x / GIB:.4f}")
