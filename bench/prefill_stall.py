#!/usr/bin/python3
"""What a long prompt does to a request that is already generating, against `zipmoe serve` (chunked
prefill, GeneratorOptions::prefill_chunk; not a test).

For each --chunks value C one server runs with `--prefill-chunk C` (0 = a prompt whole). Request A (a
16-id prompt, greedy, `ignore_eos`, --max-tokens new tokens, streamed) starts first; once A has --after
tokens, request B (--long-tokens prompt ids, one new token, not streamed) is sent. Per run: A's largest
gap between two tokens while B was in flight (the stall), A's median gap outside it (its TPOT alone), B's
latency (its TTFT: the whole prefill), and whether A's text equals the other runs' (it must: the chunks
change no bit).

  bench/prefill_stall.py --zipmoe build/bin/zipmoe --model DIR [--chunks 0,2048,512] [--long-tokens 2000]
                         [--max-tokens 96] [--after 4] [--threads 2] [--work-dir DIR]
"""

import argparse
import http.client
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MemoryCap, server  # noqa: E402


def post(url, path, body, stream, on_event=None):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=1800)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"{path}: HTTP {r.status}: {r.read()[:300]!r}")
    if not stream:
        return json.loads(r.read())
    for raw in r:
        line = raw.decode().strip()
        if line.startswith("data: ") and line != "data: [DONE]":
            on_event(json.loads(line[6:]))
    return None


def one_run(url, args, vocab_hi):
    rng = random.Random(12345)
    short = [rng.randrange(1000, vocab_hi) for _ in range(16)]
    long_prompt = [rng.randrange(1000, vocab_hi) for _ in range(args.long_tokens)]
    times, text = [], []
    b_window = {}
    b_started = threading.Event()

    def send_b():
        b_started.wait()
        b_window["start"] = time.perf_counter()
        post(url, "/v1/completions", {"prompt": long_prompt, "max_tokens": 1, "temperature": 0}, False)
        b_window["end"] = time.perf_counter()

    def on_a(chunk):
        for choice in chunk.get("choices", []):
            if choice.get("text"):
                times.append(time.perf_counter())
                text.append(choice["text"])
                if len(times) == args.after:
                    b_started.set()

    tb = threading.Thread(target=send_b)
    tb.start()
    post(url, "/v1/completions", {"prompt": short, "max_tokens": args.max_tokens, "temperature": 0,
                                  "ignore_eos": True, "stream": True}, True, on_a)
    b_started.set()
    tb.join()
    gaps = [(times[i - 1], times[i] - times[i - 1]) for i in range(1, len(times))]
    during = [g for t, g in gaps if t + g > b_window["start"] and t < b_window["end"]]
    outside = [g for t, g in gaps if t + g <= b_window["start"] or t >= b_window["end"]]
    return {"a_tokens": len(times), "stall_s": max(during) if during else 0.0,
            "a_gaps_during_b": len(during),
            "a_tpot_alone_s": statistics.median(outside) if outside else None,
            "b_latency_s": b_window["end"] - b_window["start"],
            "b_done_before_a": b_window["end"] < times[-1], "text": "".join(text)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zipmoe", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--chunks", default="0,2048,512")
    p.add_argument("--long-tokens", type=int, default=2000)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--after", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--work-dir", default="/tmp/prefill_stall")
    args = p.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    vocab_hi = min(int(config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")), 200000)
    cap = MemoryCap("zipmoe_prefill_stall")  # no limit is set: benchlib.server wants a group to start in
    rows = []
    for chunk in [int(c) for c in args.chunks.split(",")]:
        serve = ["serve", "--model", args.model, "--threads", str(args.threads), "--prefix-cache", "0",
                 "--prefill-chunk", str(chunk)]
        with server(args.zipmoe, serve, os.path.join(args.work_dir, f"serve_{chunk}.log"), cap, cold=False) as (url, _):
            row = one_run(url, args, vocab_hi)
        row["chunk"] = chunk
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "text"}), flush=True)
    same = all(r["text"] == rows[0]["text"] for r in rows)
    print(json.dumps({"same_text": same}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
