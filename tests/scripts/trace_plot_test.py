#!/usr/bin/python3
"""bench/trace_plot.py's per-name breakdown on a hand-made trace with known answers: two decode steps
and a prompt step of the executor, spans of another process, layer numbers folded into N, spans
clipped to their step."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def span(name, cat, ts, dur, pid=1, args=None):
    e = {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": dur, "pid": pid, "tid": pid}
    if args is not None:
        e["args"] = args
    return e


def main():
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "zipmoe generate"}},
        # prompt step (4 tokens): not a decode step, its spans not counted
        span("forward 4 tokens", "step", 0, 5000, args={"tokens": 4, "sequences": 1}),
        span("attention 0", "layer", 0, 4000),
        # decode step 1: 1000 µs
        span("forward 1 tokens", "step", 10000, 1000, args={"tokens": 1, "sequences": 1}),
        span("attention 0", "layer", 10000, 200),
        span("router scores to the host (layer 0)", "device", 10200, 300),
        span("attention 1", "layer", 10500, 100),
        span("router scores to the host (layer 1)", "device", 10600, 350),
        span("final norm and lm_head", "layer", 10950, 50),
        # decode step 2: 2000 µs; its last span runs 100 µs past the step and is clipped
        span("forward 1 tokens", "step", 20000, 2000, args={"tokens": 1, "sequences": 1}),
        span("attention 0", "layer", 20000, 400),
        span("router scores to the host (layer 10)", "device", 20400, 1500),
        span("final norm and lm_head", "layer", 21900, 200),
        # another process during step 2: not the executor's
        span("read 3 experts", "io", 20000, 1900, pid=2),
    ]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        with open(path, "w") as f:
            json.dump({"traceEvents": events}, f)
        line = subprocess.run([sys.executable, os.path.join(ROOT, "bench/trace_plot.py"), path, "--line", "t"],
                              check=True, capture_output=True, text=True).stdout.strip()
        want = ("t: 2 decode steps, mean 1.500 ms; per step: router scores to the host (layer N) 1.075, "
                "attention N 0.350, final norm and lm_head 0.075")
        assert line == want, f"--line printed\n  {line!r}\nwant\n  {want!r}"
        out = os.path.join(d, "summary.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench/trace_plot.py"), path, "--json", out],
                       check=True, capture_output=True, text=True)
        summary = json.load(open(out))
        by_name = summary["per_decode_step_by_name_ms"]
        assert by_name == {"router scores to the host (layer N)": 1.075, "attention N": 0.35,
                           "final norm and lm_head": 0.075}, by_name
        assert summary["decode_steps"] == 2 and summary["step_ms"] == 2.0, summary
    print("trace_plot: per-name breakdown as expected")


if __name__ == "__main__":
    main()
