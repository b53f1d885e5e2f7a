#!/usr/bin/python3
"""`zipmoe up --preload` against `zipmoe up` cold: what the warm start buys the first requests.

  bench/up_preload.py --build build --model COMPRESSED_DIR --plan-trace TRACE [--budget 50%] [--rounds 2]
                      [--prompts bench/data/sharegpt-first-turn-500.json] [--max-tokens 16]

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
import signal
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def drop_page_cache():
    subprocess.run(['sync'], check=True)
    with open('/proc/sys/vm/drop_caches', 'w') as f:
        f.write('3\n')


def healthy(port):
    try:
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=2)
        c.request('GET', '/health')
        return c.getresponse().status == 200
    except OSError:
        return False


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
    ap.add_argument('--port', type=int, default=18800)
    a = ap.parse_args()
    zipmoe = os.path.join(a.build, 'bin', 'zipmoe')
    with open(a.prompts) as f:
        prompts = [p['conversations'][0]['value'][:400] for p in json.load(f)[3:5]]
    rows = []
    for rnd in range(1, a.rounds + 1):
        for preload in (False, True):
            drop_page_cache()
            port = a.port + 2 * rnd + int(preload)
            run_dir = f'/tmp/zipmoe-up-preload-{port}'
            cmd = [zipmoe, 'up', '--model', a.model, '--memory-budget', a.budget, '--plan-trace', a.plan_trace,
                   '--port', str(port), '--run-dir', run_dir] + (['--preload'] if preload else [])
            with open(run_dir + '.log', 'w') as log:
                t0 = time.time()
                up = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
                try:
                    while not healthy(port):
                        if up.poll() is not None or time.time() - t0 > 600:
                            raise SystemExit(f'zipmoe up did not become healthy: {run_dir}.log')
                        time.sleep(0.2)
                    ready = time.time() - t0
                    first = completion(port, prompts[0], a.max_tokens)
                    second = completion(port, prompts[1], a.max_tokens)
                finally:
                    up.send_signal(signal.SIGINT)
                    up.wait(120)
            with open(run_dir + '.log') as log:
                said = [line.strip() for line in log if 'preload:' in line]
            rows.append((rnd, preload, ready, first, second, said[0] if said else ''))
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
