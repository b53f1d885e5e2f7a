#!/usr/bin/python3
"""`zipmoe serve` under a memory cap with long prompts at concurrency 16, with and without a KV budget
(issue 43 item 2): the KV budget keeps the running requests' caches inside what the cap leaves, so the
kernel's OOM killer never has to choose; without it the same load can exceed the cap.

The server runs in a cgroup v1 memory group (bench/benchlib.py MemoryCap) capped at
  model directory bytes + KV budget x 1.1 + OVERHEAD
(the weights are mapped page cache the group is charged for); CONCURRENCY clients each send a prompt of
PROMPT ids and ask for MAX_TOKENS tokens. Per run the report gives the HTTP statuses, the server's exit
(alive / OOM-killed), the group's peak, the preemptions and the cap.

  bench/kv_budget_memory.py --zipmoe build/bin/zipmoe --model DIR [--kv-budget 256] [--concurrency 16]
                            [--prompt 600] [--max-tokens 160] [--overhead 768] [--threads 2]
"""

import argparse
import http.client
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MemoryCap, server  # noqa: E402

MIB = 1 << 20


def dir_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if os.path.isfile(os.path.join(d, f)))


def vocab_size(model):
    with open(os.path.join(model, "config.json")) as f:
        c = json.load(f)
    return (c.get("text_config") or c)["vocab_size"]


def run(args, cap, limit, kv_budget_mib, label):
    vocab = vocab_size(args.model)
    log_path = f"/tmp/kv_budget_memory_{label}.log"
    oom_before = cap.oom_kills()
    serve = ["serve", "--model", args.model, "--threads", str(args.threads), "--kv-budget", str(kv_budget_mib),
             "--prefix-cache", "0", "--max-batch", str(args.concurrency)]
    with server(args.zipmoe, serve, log_path, cap, cap_bytes=limit, cold=False) as (url, proc):
        port = int(url.rsplit(":", 1)[1])
        statuses = [None] * args.concurrency

        def client(i):
            prompt = [16 + (i * 7919 + j * 31) % (vocab - 32) for j in range(args.prompt)]
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
                c.request("POST", "/v1/completions", json.dumps({"prompt": prompt, "max_tokens": args.max_tokens,
                                                                  "temperature": 0, "ignore_eos": True}))
                statuses[i] = c.getresponse().status
            except OSError as e:
                statuses[i] = f"connection: {e.__class__.__name__}"

        t0 = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.time() - t0
        preemptions = None
        if proc.poll() is None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/metrics")
                m = re.search(r"^zipmoe_preemptions_total (\S+)$", c.getresponse().read().decode(), re.M)
                preemptions = int(float(m.group(1))) if m else None
            except OSError:
                pass
            alive = "alive"
        else:
            alive = f"exited {proc.returncode}"
        peak_mib = cap.peak_bytes() / MIB
    ready = [line for line in open(log_path) if "ready on" in line]
    return {"label": label, "statuses": statuses, "server": alive, "oom_kills": cap.oom_kills() - oom_before,
            "peak_mib": peak_mib, "preemptions": preemptions, "wall_s": wall, "ready": ready[0].strip() if ready else ""}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--kv-budget", type=int, default=256, help="MiB")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=600)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--overhead", type=int, default=768, help="MiB for the process beside weights and KV")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--without-model-bytes", action="store_true",
                    help="leave the model's bytes out of the cap: its pages already sit in the page cache, charged to "
                         "the group that read them first (e.g. synth's writes), so the group is charged its anonymous "
                         "memory (KV cache, activations) only")
    args = ap.parse_args()
    cap = MemoryCap("zipmoe_kv_budget")
    if not cap.available:
        raise SystemExit(f"no memory cgroup: {cap.reason}")
    model_bytes = 0 if args.without_model_bytes else dir_bytes(args.model)
    limit = model_bytes + int(args.kv_budget * 1.1 * MIB) + args.overhead * MIB
    try:
        rows = [run(args, cap, limit, args.kv_budget, "budget"), run(args, cap, limit, 0, "unbounded")]
    finally:
        cap.remove()
    print(f"kv_budget_memory: {args.model}, cap {limit / MIB:.0f} MiB (model {model_bytes / MIB:.0f} + KV "
          f"budget {args.kv_budget} x 1.1 + {args.overhead}), {args.concurrency} clients x {args.prompt}-id prompts, "
          f"{args.max_tokens} tokens each")
    print("| run | HTTP statuses | server | OOM kills | group peak MiB | preemptions | wall s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        counts = {}
        for s in r["statuses"]:
            counts[s] = counts.get(s, 0) + 1
        print(f"| {r['label']} | {', '.join(f'{k}: {v}' for k, v in counts.items())} | {r['server']} | {r['oom_kills']} "
              f"| {r['peak_mib']:.0f} | {r['preemptions']} | {r['wall_s']:.1f} |")
    print(rows[0]["ready"])


if __name__ == "__main__":
    main()
