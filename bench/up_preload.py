#!/usr/bin/python3
"""`zipmoe up --preload` against `zipmoe up` cold: what the warm start buys the first requests.

  bench/up_preload.py --build build --model COMPRESSED_DIR --plan-trace TRACE [--budget 50%] [--rounds 2]
                      [--prompts bench/data/sharegpt-first-turn-500.json] [--max-tokens 16] [--work-dir DIR]

Per round, for each of (no preload, --preload): drops the page cache (root: /proc/sys/vm/drop_caches),
starts `zipmoe up --model DIR --memory-budget B --plan-trace TRACE [--preload]`, times it to /health 200
("ready": the other services load meanwhile, so the preload overlaps them), then sends two streamed
greedy completions of MAX_TOKENS tokens (ShareGPT prompts #3 and #4, not the trace's) and reports each
one's TTFT (first chunk, client side) and TPOT (mean gap of the following chunks), then stops it.
Both runs plan with the same trace; only the preload differs. Prints a markdown table; exit 0 (a
measurement, not a test).
"""
import argparse
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def completion(port, text, max_tokens):
    """(TTFT s, TPOT s) of one streamed greedy completion."""
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=600)
    body = json.dumps({'prompt': text, 'max_tokens': max_tokens, 'temperature': 0, 'stream': True,
                       'ignore_eos': True})
    t0 = time.time()
    c.request('POST', '/v1/completions', body, {'Content-Type': 'application/json'})
    reply = c.getresponse()
    if reply.status != 200:
        raise SystemExit(f'completion: HTTP {reply.status}: {reply.read()[:200]!r}')
    ttft, chunks = None, 0
    for line in reply:
        if line.startswith(b'data: ') and b'[DONE]' not in line:
            if ttft is None:
                ttft = time.time() - t0
            chunks += 1
    total = time.time() - t0
    return ttft, (total - ttft) / max(1, chunks - 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default=os.path.join(HERE, '..', 'build'))
    ap.add_argument('--model', required=True)
    ap.add_argument('--plan-trace', required=True)
    ap.add_argument('--budget', default='50%')
    ap.add_argument('--rounds', type=int, default=2)
    ap.add_argument('--prompts', default=os.path.join(HERE, 'data', 'sharegpt-first-turn-500.json'))
    ap.add_argument('--max-tokens', type=int, default=16)
    ap.add_argument('--work-dir', default='/tmp/zipmoe_up_preload')
    a = ap.parse_args()
    zipmoe = os.path.join(a.build, 'bin', 'zipmoe')
    os.makedirs(a.work_dir, exist_ok=True)
    with open(a.prompts) as f:
        prompts = [p['conversations'][0]['value'][:400] for p in json.load(f)[3:5]]
    rows = []
    cap = benchlib.MemoryCap('zipmoe_up_preload')  # no limit is set: benchlib.server wants a group to start in
    try:
        for rnd in range(1, a.rounds + 1):
            for preload in (False, True):
                name = f'{rnd}{"_preload" if preload else ""}'
                log_path = os.path.join(a.work_dir, f'up_{name}.log')
                up = ['up', '--model', a.model, '--memory-budget', a.budget, '--plan-trace', a.plan_trace,
                      '--run-dir', os.path.join(a.work_dir, f'run_{name}')] + (['--preload'] if preload else [])
                if not benchlib.drop_caches():
                    raise SystemExit('cannot drop the page cache (needs root): the runs would not start cold')
                t0 = time.time()  # from the start of `up` to /health 200
                with benchlib.server(zipmoe, up, log_path, cap, cold=False) as (url, _):
                    ready = time.time() - t0
                    port = int(url.rsplit(':', 1)[1])
                    first = completion(port, prompts[0], a.max_tokens)
                    second = completion(port, prompts[1], a.max_tokens)
                with open(log_path) as log:
                    said = [line.strip() for line in log if 'preload:' in line]
                rows.append((rnd, preload, ready, first, second, said[0] if said else ''))
    finally:
        cap.remove()
    print(f'`zipmoe up --memory-budget {a.budget} --plan-trace` on {a.model}, page cache dropped before each start, '
          f'{a.max_tokens} greedy tokens per request:\n')
    print('| round | --preload | ready s | 1st request TTFT s | 1st TPOT s | 2nd request TTFT s | 2nd TPOT s |')
    print('|---|---|---|---|---|---|---|')
    for rnd, preload, ready, first, second, _ in rows:
        print(f'| {rnd} | {"yes" if preload else "no"} | {ready:.1f} | {first[0]:.2f} | {first[1]:.3f} | '
              f'{second[0]:.2f} | {second[1]:.3f} |')
    for line in sorted({r[5] for r in rows if r[5]}):
        print(f'\n{line}')


if __name__ == '__main__':
    main()
