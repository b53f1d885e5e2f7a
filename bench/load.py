#!/usr/bin/python3
"""HTTP load tester for zipmoe's OpenAI-compatible API (`zipmoe serve`, `zipmoe up`), driven by real
ShareGPT prompts (not a test; the standard library only).

Every request streams (`"stream": true`, server-sent events), so each one is timed on its own:
  TTFT     send -> the first chunk that carries generated text
  TPOT     (last token time - first token time) / (completion_tokens - 1); the last token time is
           when the final chunk (finish_reason + usage) arrives, since the server sends it right after
           the step that produced the last token (a token that adds no text, e.g. EOS, gets no chunk)
  latency  send -> `data: [DONE]`
completion_tokens and prompt_tokens come from the `usage` chunk (`stream_options.include_usage`); a
server that sends none falls back to counting text chunks (fewer than tokens when a chunk carries the
text of several tokens or a token adds none; the row's "tokens_from" says which).

Load shapes:
  closed loop (default)  --concurrency C client threads; each sends its next request when the
                         previous one ends, until --requests N have been sent
  open loop (--rate R)   requests arrive as a Poisson process of R requests/s (exponential gaps
                         drawn with --seed); --concurrency, if given, caps the requests in flight
                         (an arrival beyond the cap waits; its row records both times)

Request i uses the first human turn of prompt --offset + i of --prompts (entries longer than
--max-prompt-chars are skipped), "temperature" --temperature, "seed" --seed + prompt index (the same
prompt gets the same sampling seed in every run) and "max_tokens" --max-tokens. The model id is taken
from GET /v1/models. --url may end in /v1.

Output: a summary on stdout (requests ok/failed, wall time from the first send to the last reply,
request and output-token throughput, TTFT/TPOT/latency mean/p50/p90/p99) and, with --out, a JSON file
{"config": {...}, "summary": {...}, "requests": [one row per request: prompt_index, prompt_id,
prompt_chars, status, error, ttft_s, tpot_s, latency_s, completion_tokens, finish_reason, text, ...]}.

--check-against EARLIER.json compares each request's text with the row for the same prompt index in
an earlier --out file (e.g. a --concurrency 1 run): at temperature 0, continuous batching should not
change the outputs (zipmoe documents that greedy tokens inside a batch can differ in rare float
near-ties, so an isolated mismatch is a finding to look at, not necessarily a bug).

Exit status: 0 = every request succeeded (and matched, with --check-against); 1 = a request failed
(non-200, an error event, a stream without [DONE], a timeout) or a text mismatched; the JSON is
written first. 2 = could not start: server unreachable or not ready, bad prompts or reference file,
bad flags.

Examples:
  zipmoe serve --model /tmp/model-z --port 8080 &
  bench/load.py --wait 60 --concurrency 1 --requests 8 --out /tmp/c1.json
  bench/load.py --concurrency 4 --requests 8 --check-against /tmp/c1.json
  bench/load.py --rate 2 --requests 64 --max-tokens 64 --max-prompt-chars 2000 --out /tmp/r2.json
  bench/load.py --chat --ignore-eos --max-tokens 128 --concurrency 8 --requests 64
"""
import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from load_summary import SetupError, check_against, load_reference, print_summary, summarize

DEFAULT_PROMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "sharegpt-first-turn-500.json")


# --------------------------------------------------------------------------------------------- prompts


def json_type(x):
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(x), "number")


def load_prompts(path):
    """Returns [(prompt_index, id, text)] for every entry of a ShareGPT first-turn file."""
    if not os.path.exists(path):
        raise SetupError(f"prompts file {path}: no such file")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise SetupError(f"prompts file {path}: cannot read it: {e.strerror or e}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise SetupError(f"prompts file {path}: not UTF-8 text ({e})")
    except json.JSONDecodeError as e:
        raise SetupError(f"prompts file {path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}")
    shape = 'expected [{"id": str, "conversations": [{"from": "human", "value": str}, ...]}, ...]'
    if not isinstance(data, list):
        raise SetupError(f"prompts file {path}: the top level is a JSON {json_type(data)}, not a list; {shape}")
    if not data:
        raise SetupError(f"prompts file {path}: the list is empty")
    prompts = []
    for i, entry in enumerate(data):
        where = f"prompts file {path}: entry {i}"
        if not isinstance(entry, dict):
            raise SetupError(f"{where} is a JSON {json_type(entry)}, not an object; {shape}")
        conv = entry.get("conversations")
        if not isinstance(conv, list) or not conv:
            raise SetupError(f'{where} has no non-empty "conversations" list; {shape}')
        first = conv[0]
        if not isinstance(first, dict) or not isinstance(first.get("value"), str):
            raise SetupError(f'{where}: conversations[0] is not an object with a string "value"; {shape}')
        if first.get("from", "human") != "human":
            raise SetupError(f'{where}: conversations[0] is from "{first.get("from")}", not "human"')
        pid = entry.get("id", str(i))
        prompts.append((i, str(pid), first["value"]))
    return prompts


def select_prompts(prompts, path, offset, n, max_chars):
    if offset < 0 or offset >= len(prompts):
        raise SetupError(f"--offset {offset} is outside prompts file {path} ({len(prompts)} entries)")
    chosen = []
    skipped = 0
    for p in prompts[offset:]:
        if not p[2]:
            skipped += 1
        elif max_chars > 0 and len(p[2]) > max_chars:
            skipped += 1
        else:
            chosen.append(p)
            if len(chosen) == n:
                break
    if len(chosen) < n:
        raise SetupError(
            f"prompts file {path}: only {len(chosen)} usable prompts from index {offset} "
            f"({skipped} skipped: empty" + (f" or longer than --max-prompt-chars {max_chars}" if max_chars else "")
            + f"); --requests asks for {n}")
    return chosen, skipped


# ------------------------------------------------------------------------------------------------ HTTP


class Server:
    def __init__(self, url, api_key):
        u = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise SetupError(f"--url {url}: expected http://HOST:PORT")
        self.url = url
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        base = u.path.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.base = base  # path prefix before /v1/..., usually ""
        self.root = f"{u.scheme}://{u.netloc}{base}"
        self.headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key

    def connection(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def get_json(self, path, timeout=10.0):
        """(status, parsed body or None, raw text); raises OSError when the server cannot be reached."""
        req = urllib.request.Request(self.root + path, headers={k: v for k, v in self.headers.items() if k != "Accept"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, text = r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode("utf-8", "replace")
        except urllib.error.URLError as e:
            raise OSError(str(e.reason)) from None
        try:
            return status, json.loads(text), text
        except ValueError:
            return status, None, text


def error_message(body_text):
    try:
        j = json.loads(body_text)
        if isinstance(j, dict) and isinstance(j.get("error"), dict):
            return str(j["error"].get("message", body_text))
    except ValueError:
        pass
    return body_text.strip()[:500]


def wait_ready(server, wait_s):
    """Waits up to wait_s for GET /health = 200 (0: one look), then returns the model id."""
    deadline = time.monotonic() + wait_s
    last = None
    while True:
        try:
            status, _, text = server.get_json("/health", timeout=5.0)
            if status == 200:
                break
            last = f"GET /health answers {status} {text.strip()[:200]}"
        except (OSError, http.client.HTTPException) as e:
            last = None
            unreachable = f"GET /health: {e}"
        if time.monotonic() >= deadline:
            waited = f" after waiting {wait_s:g} s" if wait_s > 0 else ""
            if last is None:
                raise SetupError(f"cannot reach the server at {server.root}{waited} ({unreachable})")
            hint = "" if wait_s > 0 else " (--wait SECONDS to wait for it)"
            raise SetupError(f"the server at {server.root} is not ready{waited}: {last}{hint}")
        time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
    try:
        status, body, text = server.get_json("/v1/models")
    except (OSError, http.client.HTTPException) as e:
        raise SetupError(f"cannot reach the server at {server.root} (GET /v1/models: {e})")
    if status != 200:
        raise SetupError(f"the server at {server.root}: GET /v1/models answers {status}: {error_message(text)}")
    try:
        return body["data"][0]["id"]
    except (TypeError, KeyError, IndexError):
        raise SetupError(f"the server at {server.root}: GET /v1/models has no model id: {text.strip()[:200]}")


def run_request(server, model, prompt, args, timeout):
    """Sends one streaming request; returns its row (timings relative to its own send)."""
    pidx, pid, text = prompt
    row = {"prompt_index": pidx, "prompt_id": pid, "prompt_chars": len(text), "ok": False, "status": None,
           "error": None, "ttft_s": None, "tpot_s": None, "latency_s": None, "completion_tokens": None,
           "prompt_tokens": None, "tokens_from": None, "chunks": 0, "finish_reason": None, "text": ""}
    body = {"model": model, "max_tokens": args.max_tokens, "temperature": args.temperature,
            "seed": args.seed + pidx, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.chat:
        body["messages"] = [{"role": "user", "content": text}]
        path = server.base + "/v1/chat/completions"
    else:
        body["prompt"] = text
        path = server.base + "/v1/completions"
    payload = json.dumps(body).encode("utf-8")

    pieces = []
    t0 = time.perf_counter()
    deadline = t0 + timeout
    t_first = t_final = None
    usage = None
    done = False
    conn = server.connection(timeout)

    def remaining():
        left = deadline - time.perf_counter()
        if left <= 0:
            raise socket.timeout()
        return left

    try:
        conn.request("POST", path, body=payload, headers=server.headers)
        sock = conn.sock  # getresponse() drops conn.sock for a "Connection: close" reply; the stream keeps it
        sock.settimeout(remaining())
        resp = conn.getresponse()
        row["status"] = resp.status
        if resp.status != 200:
            row["error"] = f"HTTP {resp.status}: {error_message(resp.read().decode('utf-8', 'replace'))}"
            return row
        data_lines = []
        while not done:
            sock.settimeout(remaining())
            line = resp.readline()
            if not line:
                break  # EOF
            line = line.decode("utf-8", "replace").rstrip("\r\n")
            if line.startswith("data:"):
                data_lines.append(line[5:].lstrip(" "))
                continue
            if line or not data_lines:
                continue  # an SSE comment/field we do not use, or a blank line between events
            data = "\n".join(data_lines)
            data_lines = []
            now = time.perf_counter()
            if data.strip() == "[DONE]":
                done = True
                break
            try:
                event = json.loads(data)
            except ValueError:
                row["error"] = f"stream: an event is not JSON: {data[:200]}"
                return row
            if isinstance(event, dict) and "error" in event:
                err = event["error"]
                row["error"] = "stream error: " + (str(err.get("message", err)) if isinstance(err, dict) else str(err))
                return row
            row["chunks"] += 1
            choices = event.get("choices") or [{}]
            choice = choices[0] if isinstance(choices[0], dict) else {}
            if args.chat:
                piece = (choice.get("delta") or {}).get("content") or ""
            else:
                piece = choice.get("text") or ""
            if piece:
                pieces.append(piece)
                if t_first is None:
                    t_first = now
                t_final = now
            if choice.get("finish_reason") is not None:
                row["finish_reason"] = choice["finish_reason"]
                t_final = now
            if isinstance(event.get("usage"), dict):
                usage = event["usage"]
        t_end = time.perf_counter()
    except socket.timeout:
        row["error"] = f"timeout after {timeout:g} s"
        return row
    except (OSError, http.client.HTTPException) as e:
        row["error"] = f"{type(e).__name__}: {e}"
        return row
    except Exception as e:  # a bug here must not lose the row (or the run)
        row["error"] = f"client error: {type(e).__name__}: {e}"
        return row
    finally:
        row["text"] = "".join(pieces)
        conn.close()

    if not done:
        row["error"] = "broken stream: it ended without data: [DONE]"
        return row
    row["ok"] = True
    row["latency_s"] = t_end - t0
    if usage is not None and isinstance(usage.get("completion_tokens"), int):
        n = usage["completion_tokens"]
        row["tokens_from"] = "usage"
        row["prompt_tokens"] = usage.get("prompt_tokens")
    else:
        n = sum(1 for p in pieces if p)
        row["tokens_from"] = "chunks"
    row["completion_tokens"] = n
    if t_first is not None:
        row["ttft_s"] = t_first - t0
        if n > 1 and t_final is not None:
            row["tpot_s"] = (t_final - t_first) / (n - 1)
    return row


# ----------------------------------------------------------------------------------------------- load


def run_closed_loop(server, model, prompts, args, t_start):
    results = [None] * len(prompts)
    lock = threading.Lock()
    next_i = [0]

    def worker():
        while True:
            with lock:
                i = next_i[0]
                if i >= len(prompts):
                    return
                next_i[0] += 1
            sent = time.perf_counter()
            row = run_request(server, model, prompts[i], args, args.timeout)
            row["sent_s"] = sent - t_start
            row["end_s"] = time.perf_counter() - t_start
            results[i] = row
            report_failure(i, row)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(args.concurrency, len(prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    return results


def run_open_loop(server, model, prompts, args, t_start):
    rng = random.Random(args.seed)
    results = [None] * len(prompts)
    cap = threading.BoundedSemaphore(args.concurrency) if args.concurrency else None
    threads = []

    def one(i, scheduled):
        try:
            sent = time.perf_counter()
            row = run_request(server, model, prompts[i], args, args.timeout)
            row["scheduled_s"] = scheduled
            row["sent_s"] = sent - t_start
            row["end_s"] = time.perf_counter() - t_start
            results[i] = row
            report_failure(i, row)
        finally:
            if cap:
                cap.release()

    at = 0.0
    for i in range(len(prompts)):
        if i > 0:
            at += rng.expovariate(args.rate)
        delay = t_start + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if cap:
            cap.acquire()
        t = threading.Thread(target=one, args=(i, at), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        while t.is_alive():
            t.join(0.2)
    return results


_print_lock = threading.Lock()


def report_failure(i, row):
    if not row["ok"]:
        with _print_lock:
            print(f"W: request {i} (prompt {row['prompt_index']}) failed: {row['error']}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="See the module docstring (head bench/load.py) for the metrics' definitions.")
    p.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL (default %(default)s)")
    p.add_argument("--api-key", default=os.environ.get("ZIPMOE_API_KEY", ""),
                   help="sent as 'Authorization: Bearer KEY' (default: $ZIPMOE_API_KEY)")
    p.add_argument("--prompts", default=DEFAULT_PROMPTS, metavar="FILE",
                   help="ShareGPT first-turn JSON (default bench/data/sharegpt-first-turn-500.json)")
    p.add_argument("--requests", type=int, default=32, metavar="N", help="requests to send (default 32)")
    p.add_argument("--concurrency", type=int, default=None, metavar="C",
                   help="closed loop: client threads (default 4); with --rate: most requests in flight (default no cap)")
    p.add_argument("--rate", type=float, default=None, metavar="R",
                   help="open loop: Poisson arrivals of R requests/s instead of the closed loop")
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens per request (default 32)")
    p.add_argument("--max-prompt-chars", type=int, default=0, metavar="N",
                   help="skip prompts longer than N characters (default 0 = no limit)")
    p.add_argument("--offset", type=int, default=0, metavar="K", help="index of the first prompt to use (default 0)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the Poisson arrivals; request seeds are SEED + prompt index (default 0)")
    p.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0 = greedy)")
    p.add_argument("--chat", action="store_true",
                   help="POST /v1/chat/completions with the prompt as one user message (default /v1/completions)")
    p.add_argument("--ignore-eos", action="store_true",
                   help='send "ignore_eos": true (zipmoe/vLLM extension: always generate max_tokens tokens)')
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="per-request limit in seconds, send to [DONE] (default 300)")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for GET /health = 200 before starting (default 0)")
    p.add_argument("--out", metavar="FILE.json", help="write config, summary and per-request rows (with texts)")
    p.add_argument("--check-against", metavar="FILE.json",
                   help="compare texts with an earlier --out file, by prompt index; exit 1 on a mismatch")
    args = p.parse_args(argv)
    if args.requests < 1:
        p.error("--requests must be >= 1")
    if args.concurrency is not None and args.concurrency < 1:
        p.error("--concurrency must be >= 1")
    if args.rate is not None and not args.rate > 0:
        p.error("--rate must be > 0")
    if args.rate is None and args.concurrency is None:
        args.concurrency = 4
    if args.max_tokens < 0:
        p.error("--max-tokens must be >= 0")
    if args.max_prompt_chars < 0:
        p.error("--max-prompt-chars must be >= 0")
    if args.offset < 0:
        p.error("--offset must be >= 0")
    if args.temperature < 0:
        p.error("--temperature must be >= 0")
    if not args.timeout > 0:
        p.error("--timeout must be > 0")
    if args.wait < 0:
        p.error("--wait must be >= 0")
    return args


def main(argv):
    args = parse_args(argv)
    try:
        prompts_all = load_prompts(args.prompts)
        prompts, skipped = select_prompts(prompts_all, args.prompts, args.offset, args.requests, args.max_prompt_chars)
        ref = load_reference(args.check_against) if args.check_against else None
        server = Server(args.url, args.api_key)
        model = wait_ready(server, args.wait)
    except SetupError as e:
        print(f"E: {e}", file=sys.stderr)
        return 2

    cfg = {
        "url": server.root, "model": model,
        "endpoint": "/v1/chat/completions" if args.chat else "/v1/completions",
        "prompts": os.path.abspath(args.prompts), "requests": args.requests,
        "concurrency": args.concurrency, "rate": args.rate, "max_tokens": args.max_tokens,
        "max_prompt_chars": args.max_prompt_chars, "offset": args.offset, "seed": args.seed,
        "temperature": args.temperature, "ignore_eos": args.ignore_eos, "timeout_s": args.timeout,
        "prompts_skipped": skipped, "prompt_indices": [p[0] for p in prompts],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "check_against": args.check_against,
    }
    t_start = time.perf_counter()
    try:
        if args.rate:
            rows = run_open_loop(server, model, prompts, args, t_start)
        else:
            rows = run_closed_loop(server, model, prompts, args, t_start)
    except KeyboardInterrupt:
        print("E: interrupted; nothing written", file=sys.stderr)
        return 130
    for i, r in enumerate(rows):
        r["request"] = i
    summary = summarize(rows)
    print_summary(cfg, summary)
    passed = True
    if ref is not None:
        summary["check"], passed = check_against(args.check_against, ref[0], ref[1], cfg, rows)
    if args.out:
        ordered = [{k: r.get(k) for k in ("request", "prompt_index", "prompt_id", "prompt_chars", "ok", "status",
                                          "error", "scheduled_s", "sent_s", "end_s", "ttft_s", "tpot_s",
                                          "latency_s", "prompt_tokens", "completion_tokens", "tokens_from",
                                          "chunks", "finish_reason", "text") if k in r} for r in rows]
        tmp = args.out + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"config": cfg, "summary": summary, "requests": ordered}, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, args.out)
        print(f"  wrote           {args.out}")
    return 1 if summary["failed"] or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
