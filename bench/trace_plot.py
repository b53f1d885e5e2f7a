#!/usr/bin/python3
"""Draws one decode step of a zipmoe Chrome trace (generate/serve/up --trace-events) as a timeline:
one lane per process and thread, spans coloured by category (step, layer, expert, message, io, decode),
and prints where the step's time went per process (busy time by category, and the executor's time
waiting for experts), plus the mean and median of every decode step in the trace (the number to
compare between two runs: one step is noisy on a shared machine).

It also sums the spans of every decode step by name, layer numbers taken out ("attention 3" ->
"attention N"), per step: on a GPU executor the host only enqueues most work, so "router scores to
the host (layer N)" (the layer's one wait for the device) holds the device's time and the other spans
the host's; that tells a launch-bound step from a device-bound one.

Usage: bench/trace_plot.py TRACE.json --out step.png [--step K] [--json summary.json] [--line TAG]
  --step K: the K-th forward step of the executor whose span covers one token per sequence (a decode
            step), counted from 0; default: the last one (warm).
  --line TAG: print only one line: TAG, the mean decode step and its largest spans by name (ms per step).
Needs python3-matplotlib for the picture (the summary is printed without it).
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict

COLOURS = {"step": "#dddddd", "layer": "#9ecae1", "expert": "#fdae6b", "message": "#74c476",
           "io": "#9e9ac8", "decode": "#fb6a4a", "compute": "#e6550d"}


def load(path):
    with open(path) as f:
        doc = json.load(f)
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        sys.exit(f"{path}: not a trace file (no traceEvents array)")
    names = {}
    threads = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    return names, threads, spans


def decode_steps(spans):
    """The executor's forward steps of one token per sequence, in time order."""
    steps = [s for s in spans if s.get("cat") == "step"]
    steps.sort(key=lambda s: s["ts"])
    decode = [s for s in steps if s.get("args", {}).get("tokens") == s.get("args", {}).get("sequences")]
    return decode or steps


def by_name(spans, steps, pid=None):
    """ms per decode step of every span name (digits -> N) inside the decode steps of the executor's
    process (`pid`), largest first; nested spans are counted in their own name and in their parent's."""
    if not steps:
        return {}
    totals = defaultdict(float)
    for step in steps:
        t0, t1 = step["ts"], step["ts"] + step["dur"]
        for s in spans:
            if s.get("cat") == "step" or (pid is not None and s["pid"] != pid):
                continue
            if s["ts"] < t1 and s["ts"] + s["dur"] > t0:
                totals[re.sub(r"\d+", "N", s["name"])] += min(s["ts"] + s["dur"], t1) - max(s["ts"], t0)
    per_step = {k: v / 1e3 / len(steps) for k, v in totals.items()}
    return dict(sorted(per_step.items(), key=lambda kv: -kv[1]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--out", help="PNG to draw")
    ap.add_argument("--step", type=int, default=-1)
    ap.add_argument("--json", help="write the per-process summary here")
    ap.add_argument("--title", default="")
    ap.add_argument("--line", help="print one summary line with this tag and nothing else")
    args = ap.parse_args()

    names, threads, spans = load(args.trace)
    steps = decode_steps(spans)
    if not steps:
        sys.exit(f"{args.trace}: no executor forward step (category 'step') in the trace")
    step = steps[args.step]
    names_ms = by_name(spans, steps, pid=step["pid"])
    if args.line:
        mean = statistics.mean(s["dur"] for s in steps) / 1e3
        top = ", ".join(f"{k} {v:.3f}" for k, v in list(names_ms.items())[:6])
        print(f"{args.line}: {len(steps)} decode steps, mean {mean:.3f} ms; per step: {top}")
        return
    t0, t1 = step["ts"], step["ts"] + step["dur"]
    inside = [s for s in spans if s["ts"] < t1 and s["ts"] + s["dur"] > t0]

    busy = defaultdict(lambda: defaultdict(float))  # process -> category -> µs (clipped to the step)
    for s in inside:
        if s["cat"] == "step":
            continue
        d = min(s["ts"] + s["dur"], t1) - max(s["ts"], t0)
        busy[names.get(s["pid"], str(s["pid"]))][s["cat"]] += d
    waits = sum(min(s["ts"] + s["dur"], t1) - max(s["ts"], t0) for s in inside
                if s["cat"] == "expert" and s["name"].startswith("wait"))
    summary = {"trace": args.trace, "step_index": args.step if args.step >= 0 else len(steps) + args.step,
               "decode_steps": len(steps), "step_ms": step["dur"] / 1e3,
               "all_steps_ms": {"mean": round(statistics.mean(s["dur"] for s in steps) / 1e3, 3),
                                "median": round(statistics.median(s["dur"] for s in steps) / 1e3, 3)}, "executor_wait_for_experts_ms": waits / 1e3,
               "busy_ms": {p: {c: round(v / 1e3, 3) for c, v in cats.items()} for p, cats in busy.items()},
               "per_decode_step_by_name_ms": {k: round(v, 4) for k, v in names_ms.items()}}
    print(json.dumps(summary, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    if not args.out:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("no matplotlib (apt-get install python3-matplotlib): summary only")

    lanes = sorted({(s["pid"], s["tid"]) for s in inside},
                   key=lambda k: (names.get(k[0], ""), k[1]))
    fig, ax = plt.subplots(figsize=(12, 0.45 * len(lanes) + 1.6))
    height = {"step": 0.9, "layer": 0.7, "compute": 0.3}  # outer spans drawn first and taller, the nested ones over them
    order = {"step": 0, "layer": 1}
    for row, lane in enumerate(lanes):
        for s in sorted(inside, key=lambda e: (order.get(e["cat"], 2), e["ts"])):
            if (s["pid"], s["tid"]) != lane:
                continue
            start = (max(s["ts"], t0) - t0) / 1e3
            width = max((min(s["ts"] + s["dur"], t1) - max(s["ts"], t0)) / 1e3, 0.002)
            depth = height.get(s["cat"], 0.45)
            ax.barh(row, width, left=start, height=depth, color=COLOURS.get(s["cat"], "#bbbbbb"),
                    edgecolor="none")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels([f"{names.get(p, p)} / {threads.get((p, t), t)}" for p, t in lanes], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the step began")
    ax.set_xlim(0, step["dur"] / 1e3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, COLOURS.keys(), loc="upper right", fontsize=7, ncol=6)
    ax.set_title(args.title or f"one decode step ({step['dur'] / 1e3:.1f} ms), {args.trace.split('/')[-1]}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
