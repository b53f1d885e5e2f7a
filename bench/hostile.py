#!/usr/bin/env python3
"""Replays hostile-client cases against a running `zipmoe serve` / `zipmoe up` on loopback (issue 37).

  hostile.py --port P [--api-key KEY] [--pid PID] [--slow 60] [--seconds 10]

One line per case: what the server answered (or did), /health latency while the case ran (p50 / p99 /
max, failures = no 200 within 1 s), and the server's RSS before -> after (from /proc/PID/status when
--pid is given). Bounded: every connection has a timeout, every case ends after --seconds at most.
Loopback only (refuses another host). Standard library only.
"""
import argparse
import os
import socket
import statistics
import sys
import threading
import time

HOST = "127.0.0.1"


def rss_mib(pid):
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def exchange(port, data, timeout=5.0, read_all=True):
    """Sends `data`, returns everything received until close or timeout."""
    s = socket.create_connection((HOST, port), timeout=timeout)
    out = b""
    try:
        s.sendall(data)
        s.settimeout(timeout)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
            if not read_all and b"\r\n\r\n" in out:
                break
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    return out


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0].decode("latin-1", "replace")
    return line if line else "(no response)"


class HealthProbe(threading.Thread):
    """Polls GET /health every 0.2 s with a 1 s timeout while a case runs."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop, self.lat, self.failures = port, threading.Event(), [], 0

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                raw = exchange(self.port, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", timeout=1.0)
                if b" 200 " in raw.split(b"\r\n", 1)[0]:
                    self.lat.append(time.monotonic() - t0)
                else:
                    self.failures += 1
            except OSError:
                self.failures += 1
            self.stop.wait(0.2)

    def summary(self):
        if not self.lat:
            return f"/health: 0 answers, {self.failures} failures"
        lat = sorted(self.lat)
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))]
        return (f"/health p50 {statistics.median(lat) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, max {lat[-1] * 1e3:.0f} ms, "
                f"{self.failures} failures of {len(lat) + self.failures}")


def run_case(name, port, pid, fn):
    before = rss_mib(pid)
    probe = HealthProbe(port)
    probe.start()
    try:
        outcome = fn()
    except Exception as e:  # noqa: BLE001 - a case that breaks is reported, the others still run
        outcome = f"error: {e!r}"
    probe.stop.set()
    probe.join()
    after = rss_mib(pid)
    rss = f"RSS {before:.0f} -> {after:.0f} MiB" if before is not None and after is not None else "RSS n/a"
    print(f"{name:<22} {outcome} | {probe.summary()} | {rss}", flush=True)


def slow_clients(port, n, seconds):
    conns = []
    for _ in range(n):
        try:
            s = socket.create_connection((HOST, port), timeout=2)
            s.sendall(b"P")
            conns.append(s)
        except OSError:
            break
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(min(2.0, max(0.0, end - time.monotonic())))
        for s in conns:
            try:
                s.sendall(b"O")
            except OSError:
                pass
    for s in conns:
        s.close()
    return f"{len(conns)} connections sending a byte every 2 s for {seconds} s"


def post_head(path, length, key=None, close=False):
    """The head of a JSON POST of `length` body bytes, with the API key when given."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    conn = "Connection: close\r\n" if close else ""
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n{conn}"
            f"Content-Length: {length}\r\n\r\n").encode()


def half_sent(port, n, key):
    """n requests whose headers arrived and whose bodies never finish, while one real completion runs."""
    head = post_head("/v1/completions", 100, key) + b"{"
    conns = []
    for _ in range(n):
        try:
            s = socket.create_connection((HOST, port), timeout=2)
            s.sendall(head)
            conns.append(s)
        except OSError:
            break
    body = b'{"prompt": "Hello", "max_tokens": 4}'
    t0 = time.monotonic()
    got = exchange(port, post_head("/v1/completions", len(body), key, close=True) + body, timeout=30)
    took = time.monotonic() - t0
    for s in conns:
        s.close()
    return f"{len(conns)} open; a real completion meanwhile -> {status_of(got)} in {took * 1e3:.0f} ms"


def many_completions(port, n, key):
    """n completions at once (8 tokens each); counts their statuses."""
    body = b'{"prompt": "Once upon a time", "max_tokens": 8, "ignore_eos": true}'
    raw = post_head("/v1/completions", len(body), key, close=True) + body
    statuses, lock = {}, threading.Lock()

    def one():
        line = status_of(exchange(port, raw, timeout=60)).split(" ")
        status = line[1] if len(line) > 1 else "none"
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return f"statuses {dict(sorted(statuses.items()))} in {time.monotonic() - t0:.1f} s"


def big_post(port, path, size, key=None, read_after_headers=True):
    head = post_head(path, size, key)
    s = socket.create_connection((HOST, port), timeout=10)
    t0 = time.monotonic()
    s.sendall(head)
    s.settimeout(3)
    got = b""
    try:
        got = s.recv(65536)
    except socket.timeout:
        pass
    first = time.monotonic() - t0
    if not got and read_after_headers:  # the server waits for the body: send it
        body = b'{"content": "' + "é".encode() * ((size - 16) // 2) + b'"}'
        body = body[:size].ljust(size, b" ")
        try:
            s.sendall(body)
            s.settimeout(30)
            got = s.recv(65536)
        except OSError:
            pass
    s.close()
    return status_of(got), first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default=HOST)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--pid", type=int, default=0, help="the server's pid, for RSS")
    ap.add_argument("--slow", type=int, default=60, help="slow connections")
    ap.add_argument("--seconds", type=int, default=10, help="how long the slow connections last")
    args = ap.parse_args()
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        sys.exit("hostile.py runs against loopback only")
    port, pid, key = args.port, args.pid, args.api_key or None

    run_case("slow clients", port, pid, lambda: slow_clients(port, args.slow, args.seconds))
    run_case("half-sent requests", port, pid, lambda: half_sent(port, 300, key))
    run_case("300 real requests", port, pid, lambda: many_completions(port, 300, key))

    def tokenize_bomb():
        status, first = big_post(port, "/tokenize", 28 << 20, key)
        return f"28 MiB /tokenize -> {status} ({first * 1e3:.0f} ms to the first byte)"

    run_case("tokenize bomb", port, pid, tokenize_bomb)

    hidden = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
    n = str(len(hidden)).encode()
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(70))
    smuggling = {
        "CL 0x3c": b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3c\r\n\r\n" + hidden,
        "CL +N": b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: +" + n + b"\r\n\r\n" + hidden,
        "two CL": b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: " + n + b"\r\n\r\n" + hidden,
        "CL + chunked": b"POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                        + hidden,
        "70 headers": b"POST /v1/models HTTP/1.1\r\nHost: x\r\n" + many + b"Content-Length: " + n + b"\r\n\r\n" + hidden,
    }
    for name, raw in smuggling.items():
        def case(raw=raw):
            got = exchange(port, raw, timeout=3)
            responses = got.count(b"HTTP/1.1 ")
            return f"{status_of(got)}; responses {responses}; smuggled answered: {b'smuggled' in got}"
        run_case("smuggle " + name, port, pid, case)

    if key:
        def unauth():
            worst, statuses = 0.0, set()
            for _ in range(40):
                status, first = big_post(port, "/v1/completions", 30 << 20, None, read_after_headers=False)
                statuses.add(status)
                worst = max(worst, first)
            return f"40 x 30 MiB POSTs without a key -> {sorted(statuses)}, slowest first byte {worst * 1e3:.0f} ms"
        run_case("unauthenticated body", port, pid, unauth)

    def expect():
        auth = f"Authorization: Bearer {key}\r\n".encode() if key else b""
        got = exchange(port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + auth +
                       b"Expect: 100-continue\r\nContent-Length: 15\r\n\r\n", timeout=2, read_all=False)
        return f"Expect: 100-continue -> {status_of(got)}"

    run_case("expect 100-continue", port, pid, expect)
    run_case("OPTIONS *", port, pid, lambda: status_of(exchange(port, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 3)))
    run_case("absolute-form URI", port, pid,
             lambda: status_of(exchange(port, b"GET http://x/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
