#!/usr/bin/python3
"""Multi-turn chat replay against `zipmoe serve`, with and without prefix reuse (issue 43 item 2).

Each conversation takes CONVERSATIONS x TURNS consecutive ShareGPT first-turn prompts
(bench/data/sharegpt-first-turn-500.json) as its user turns: turn t sends the whole history (every
earlier user prompt and the model's own answers) plus the next prompt, as a chat client does. One
server runs with `--prefix-cache MIB`, then one with `--prefix-cache 0`, on the same conversations
(greedy, streaming); per turn the report gives the median TTFT of each, their ratio, the prompt tokens
the cache held (usage.prompt_tokens_details.cached_tokens) and whether both servers answered the same
text (they must: reuse is exact).

  bench/prefix_reuse.py --zipmoe build/bin/zipmoe --model DIR [--turns 5] [--conversations 4]
                        [--max-tokens 24] [--threads 2] [--prefix-cache 512] [--max-chars 600]
"""

import argparse
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MemoryCap, server  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sharegpt-first-turn-500.json")


def load_prompts(n, max_chars):
    with open(DATA) as f:
        rows = json.load(f)
    out = []
    for row in rows:
        turns = row.get("conversations") or [{}]  # ShareGPT: [{"from": "human", "value": ...}]
        text = turns[0].get("value", "")
        if text and len(text) <= max_chars:
            out.append(text)
        if len(out) == n:
            return out
    raise SystemExit(f"{DATA}: fewer than {n} prompts of at most {max_chars} characters")


def chat(port, messages, max_tokens):
    """(ttft seconds, text, cached prompt tokens, prompt tokens) of one streamed greedy completion."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"chat completion: HTTP {r.status}: {r.read()[:300]!r}")
    ttft, text, usage = None, [], {}
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            piece = choice.get("delta", {}).get("content")
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text.append(piece)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return ttft if ttft is not None else time.perf_counter() - t0, "".join(text), cached, usage.get("prompt_tokens", 0)


def replay(port, conversations, max_tokens):
    """rows[t] = list over conversations of (ttft, text, cached, prompt_tokens)."""
    rows = [[] for _ in conversations[0]]
    for prompts in conversations:
        messages = []
        for t, prompt in enumerate(prompts):
            messages.append({"role": "user", "content": prompt})
            ttft, text, cached, prompt_tokens = chat(port, messages, max_tokens)
            messages.append({"role": "assistant", "content": text})
            rows[t].append((ttft, text, cached, prompt_tokens))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--turns", type=int, default=5)
    ap.add_argument("--conversations", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefix-cache", type=int, default=512, help="MiB for the reusing server")
    ap.add_argument("--max-chars", type=int, default=600, help="longest ShareGPT prompt taken")
    ap.add_argument("--work-dir", default="/tmp/zipmoe_prefix_reuse")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    prompts = load_prompts(args.turns * args.conversations, args.max_chars)
    conversations = [prompts[i * args.turns:(i + 1) * args.turns] for i in range(args.conversations)]
    results = {}
    cap = MemoryCap("zipmoe_prefix_reuse")  # no limit is set: benchlib.server wants a group to start in
    try:
        for mode, mib in (("reuse", args.prefix_cache), ("none", 0)):
            serve = ["serve", "--model", args.model, "--threads", str(args.threads), "--prefix-cache", str(mib)]
            with server(args.zipmoe, serve, os.path.join(args.work_dir, f"serve_{mode}.log"), cap, cold=False) as (url, _):
                results[mode] = replay(int(url.rsplit(":", 1)[1]), conversations, args.max_tokens)
    finally:
        cap.remove()
    print(f"prefix_reuse: {args.model}, {args.conversations} conversations x {args.turns} turns, {args.max_tokens} "
          f"tokens per answer, --threads {args.threads}; medians over conversations")
    print("| turn | prompt tokens | cached tokens | TTFT reuse s | TTFT none s | reuse / none | same text |")
    print("|---|---|---|---|---|---|---|")
    all_same = True
    for t in range(args.turns):
        a, b = results["reuse"][t], results["none"][t]
        same = all(x[1] == y[1] for x, y in zip(a, b))
        all_same = all_same and same
        ta = statistics.median(x[0] for x in a)
        tb = statistics.median(y[0] for y in b)
        print(f"| {t + 1} | {statistics.median(x[3] for x in a):.0f} | {statistics.median(x[2] for x in a):.0f} | "
              f"{ta:.3f} | {tb:.3f} | {ta / tb:.2f} | {'yes' if same else 'NO'} |")
    if not all_same:
        print("FAIL: an answer differs between the two servers")
        sys.exit(1)


if __name__ == "__main__":
    main()
