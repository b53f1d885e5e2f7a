#!/usr/bin/python3
"""Soak test (issue 15, not CI): bench/load.py at --concurrency for --minutes against `zipmoe serve`
and/or `zipmoe up` in a memory cap (bench/benchlib.py MemoryCap, cgroup v1), killing one random
service every --kill-every seconds under `up` (1 s into a round of load, with requests in flight).
Reports requests, errors (inside and outside the
kill windows), text equality with a single-client run at temperature 0, RSS over time (slope) and
/dev/shm after exit.

  bench/soak.sh [--minutes 30] [--mode serve|up|both] [--kill-every 300] [--kill executor,...] [--cap 6GiB]
                [--model COMPRESSED_DIR] [--concurrency 16] [--requests-per-round 64] [--out DIR]

Without --model a tiny qwen2_moe is synthesized and compressed under --out. Writes DIR/soak.json
(config, per-mode summary, samples every 10 s) and prints a markdown table for docs/reliability.md.
Exit status 0 iff, in every mode: no error outside a kill window, every successful text equals the
reference, and no /dev/shm/zipmoe-* object is left after the server exits.
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILL_DELAY_S = 1.0   # a due kill lands this long into a round of load (requests in flight)
KILL_WINDOW_S = 35.0  # a request that ends this long after a kill may fail (docs/services.md: <= 30 s)
SERVICES = ["storage", "decompressor-0", "scheduler", "cache-manager", "executor", "front"]


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def shm_prefixes(mode, pid):
    # The server's own shared-memory objects: up's arena /zipmoe-up-<up pid>, the embedded runtime's
    # /zipmoe-arena-<pid>-<n> (other zipmoe processes on the machine are not counted).
    return [f"zipmoe-up-{pid}"] if mode == "up" else [f"zipmoe-arena-{pid}-"]


def shm_bytes(prefixes):
    total = 0
    for name in os.listdir("/dev/shm"):
        if any(name.startswith(p) for p in prefixes):
            try:
                total += os.stat(os.path.join("/dev/shm", name)).st_size
            except OSError:
                pass
    return total


def shm_names(prefixes):
    return sorted(n for n in os.listdir("/dev/shm") if any(n.startswith(p) for p in prefixes))


def load(port, out_json, args, concurrency):
    # --wait: a round that starts while a killed service restarts waits for /health, as a client
    # that checks it would (the requests themselves are what the soak counts).
    cmd = ["/usr/bin/python3", os.path.join(REPO, "bench", "load.py"), "--url", f"http://127.0.0.1:{port}",
           "--requests", str(args.requests_per_round), "--concurrency", str(concurrency),
           "--max-tokens", str(args.max_tokens), "--temperature", "0", "--timeout", "120", "--wait", "120",
           "--out", out_json]
    if os.path.exists(out_json):
        os.remove(out_json)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not os.path.exists(out_json):  # load.py could not start (server unreachable): every request failed
        return {"summary": {"failed": args.requests_per_round},
                "requests": [{"prompt_index": i, "ok": False} for i in range(args.requests_per_round)]}
    with open(out_json) as f:
        return json.load(f)


def run_rounds(mode, port, proc, run_dir, args, cap, summary):
    """The single-client reference, then rounds of load until --minutes pass (killing a service every
    --kill-every s under up); fills `summary`."""
    reference = os.path.join(args.out, f"{mode}-reference.json")
    ref = load(port, reference, args, 1)
    if ref["summary"].get("failed", 0):
        summary["fatal"] = "the single-client reference run had errors"
        return
    ref_texts = {r["prompt_index"]: r["text"] for r in ref["requests"] if r.get("ok")}
    start = time.time()
    next_kill = start + args.kill_every
    round_no = 0
    rng = random.Random(args.seed)
    def kill(victim):
        try:
            with open(os.path.join(run_dir, f"{victim}.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
            summary["kills"].append({"t": time.time() - start, "service": victim})
            benchlib.log(f"soak up: SIGKILL {victim} at {time.time() - start:.0f} s (mid-round)")
        except (OSError, ValueError) as e:
            benchlib.warn(f"soak up: could not kill {victim}: {e}")

    while time.time() - start < args.minutes * 60:
        killer = None
        if mode == "up" and time.time() >= next_kill:
            # The kill lands KILL_DELAY_S into the round, with requests in flight.
            killer = threading.Timer(KILL_DELAY_S, kill, args=(rng.choice(args.kill),))
            killer.start()
            next_kill += args.kill_every
        pids = [proc.pid]
        if mode == "up":
            for name in os.listdir(run_dir) if os.path.isdir(run_dir) else []:
                if name.endswith(".pid"):
                    try:
                        with open(os.path.join(run_dir, name)) as f:
                            pids.append(int(f.read()))
                    except (OSError, ValueError):
                        pass
        summary["samples"].append({"t": time.time() - start, "rss_kib": rss_kib(pids),
                                   "shm_bytes": shm_bytes(shm_prefixes(mode, proc.pid)),
                                   "cgroup_bytes": cap.peak_bytes() if cap.available else None})
        t_round = time.time() - start
        out = load(port, os.path.join(args.out, f"{mode}-round.json"), args, args.concurrency)
        if killer is not None:
            killer.join()
        t_round_end = time.time() - start
        round_no += 1
        for row in out["requests"]:
            summary["requests"] += 1
            if row.get("ok"):
                if ref_texts.get(row["prompt_index"]) != row.get("text"):
                    summary["mismatches"] += 1
                continue
            summary["errors"] += 1
            # In a kill window: a kill during the round, or at most KILL_WINDOW_S before it started.
            in_window = any(t_round - KILL_WINDOW_S <= k["t"] <= t_round_end for k in summary["kills"])
            summary["errors_in_kill_windows" if in_window else "errors_outside"] += 1
        if proc.poll() is not None:
            summary["fatal"] = f"the server exited (code {proc.returncode})"
            break
    summary["rounds"] = round_no
    summary["seconds"] = time.time() - start


def soak(mode, model, args, cap, cap_bytes):
    zipmoe = os.path.join(args.build_dir, "bin", "zipmoe")
    run_dir = os.path.join(args.out, f"run-{mode}")
    log_path = os.path.join(args.out, f"{mode}.log")
    if mode == "serve":
        server_args = ["serve", "--model", model, "--max-batch", str(args.concurrency), "--memory-budget", args.budget]
    else:
        server_args = ["up", "--model", model, "--run-dir", run_dir, "--memory-budget", args.budget,
                       "--set", f"http.max_batch={args.concurrency}", "--set", "metrics.port.up=0",
                       "--set", "metrics.port.storage=0", "--set", "metrics.port.decompressor=0",
                       "--set", "metrics.port.scheduler=0", "--set", "metrics.port.executor=0",
                       "--set", "metrics.port.cache_manager=0"]
    benchlib.log(f"soak {mode}: zipmoe {' '.join(server_args)}")
    summary = {"mode": mode, "requests": 0, "errors": 0, "errors_in_kill_windows": 0, "errors_outside": 0,
               "mismatches": 0, "kills": [], "samples": [], "shm_after_exit": []}
    proc = None
    try:
        with benchlib.server(zipmoe, server_args, log_path, cap, cap_bytes, cold=False, stop_timeout=60) as (url, proc):
            run_rounds(mode, int(url.rsplit(":", 1)[1]), proc, run_dir, args, cap, summary)
    except RuntimeError as e:  # never healthy
        summary["fatal"] = str(e)
    if proc is not None:
        time.sleep(1)
        summary["shm_after_exit"] = shm_names(shm_prefixes(mode, proc.pid))
        summary["exit_code"] = proc.returncode
    s = summary["samples"]
    if len(s) >= 4:
        # Least-squares slope over the second half (the first includes warm-up: caches, allocator).
        half = s[len(s) // 2:]
        ts = [x["t"] / 3600 for x in half]
        ys = [x["rss_kib"] / 1024 for x in half]
        mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
        var = sum((t - mt) ** 2 for t in ts)
        summary["rss_slope_mib_per_hour"] = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / var if var else 0.0
        all_rss = [x["rss_kib"] / 1024 for x in s]
        summary["rss_first_mib"], summary["rss_last_mib"], summary["rss_max_mib"] = all_rss[0], all_rss[-1], max(all_rss)
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--mode", choices=["serve", "up", "both"], default="both")
    p.add_argument("--kill-every", type=float, default=300, help="seconds between kills under up (default 300)")
    p.add_argument("--kill", default=",".join(s for s in SERVICES if s != "front"),
                   help="comma-separated services to pick the victim from (default: every one but the HTTP "
                        "front, which holds the clients' connections); e.g. --kill executor")
    p.add_argument("--cap", default="6GiB", help="memory cap of the server's cgroup (default 6GiB)")
    p.add_argument("--budget", default="50%", help="--memory-budget of the runtime (default 50%%)")
    p.add_argument("--model", help="compressed model directory (default: a tiny qwen2_moe, synthesized)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--requests-per-round", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--build-dir", default=os.environ.get("ZIPMOE_BENCH_BUILD_DIR", os.path.join(REPO, "build")))
    p.add_argument("--out", default=os.path.join(REPO, "out", "soak"))
    args = p.parse_args()
    args.kill = [s for s in args.kill.split(",") if s]
    for s in args.kill:
        if s not in SERVICES:
            p.error(f"--kill: unknown service '{s}' (one of {', '.join(SERVICES)})")
    os.makedirs(args.out, exist_ok=True)
    zipmoe = os.path.join(args.build_dir, "bin", "zipmoe")
    model = args.model
    if not model:
        hf = os.path.join(args.out, "tiny-qwen2_moe")
        model = hf + ".z"
        if not os.path.isdir(model):
            subprocess.run([zipmoe, "synth", "--arch", "qwen2_moe", "--preset", "tiny", "--out", hf], check=True)
            subprocess.run([zipmoe, "compress", hf, model, "--force"], check=True)
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    suffix = next((k for k in units if args.cap.endswith(k)), None)
    cap_bytes = int(float(args.cap[:-3]) * units[suffix]) if suffix else int(args.cap)
    cap = benchlib.MemoryCap("zipmoe-soak")
    if not cap.available:
        benchlib.warn(f"no memory cap: {cap.reason}")
    results = []
    try:
        for mode in (["serve", "up"] if args.mode == "both" else [args.mode]):
            results.append(soak(mode, model, args, cap, cap_bytes))
    finally:
        cap.remove()
    config = {k: v for k, v in vars(args).items()}
    config["cap_bytes"] = cap_bytes if cap.available else None
    config["commit"] = benchlib.git_commit(REPO)
    config["machine"] = benchlib.machine_info()
    benchlib.write_json(os.path.join(args.out, "soak.json"), {"config": config, "results": results})
    print("| mode | minutes | requests | errors (in kill windows / outside) | text mismatches | kills | RSS first → last "
          "(max) MiB | RSS slope, 2nd half, MiB/h | /dev/shm after exit |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for r in results:
        kills = ", ".join(k["service"] for k in r["kills"]) or "—"
        print(f"| {r['mode']} | {r.get('seconds', 0) / 60:.1f} | {r['requests']} | {r['errors']} "
              f"({r['errors_in_kill_windows']} / {r['errors_outside']}) | {r['mismatches']} | {kills} | "
              f"{r.get('rss_first_mib', 0):.0f} → {r.get('rss_last_mib', 0):.0f} ({r.get('rss_max_mib', 0):.0f}) | "
              f"{r.get('rss_slope_mib_per_hour', 0):+.1f} | {len(r['shm_after_exit'])} objects |"
              + (f" **{r['fatal']}**" if r.get("fatal") else ""))
        ok = ok and not r.get("fatal") and r["errors_outside"] == 0 and r["mismatches"] == 0 and not r["shm_after_exit"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
