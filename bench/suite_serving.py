"""Experiments (h), (l) and (q) of bench/suite.py: embedded vs multi-process TPOT, HTTP serving under
load, CoServe request grouping."""
import contextlib
import json
import os
import re
import subprocess
import sys
import urllib.request

import benchlib as bl
from suite_config import LOAD_INDEX, PROMPTS_FILE


class ServingExperiments:
    """Methods of Suite (bench/suite.py); self.a, self.cfg, self.meta, self.zm, self.run, ... as set up there."""

    @contextlib.contextmanager
    def server(self, args, log, cap_bytes):
        """bl.server cold inside the memory cap (limit `cap_bytes`), logging to logs/LOG; yields its URL."""
        with bl.server(self.zipmoe, args, os.path.join(self.logs, log), self.cap, cap_bytes) as (url, _):
            yield url

    def exp_l(self, m, tag=""):
        """Serving under load (bench/load.py): `zipmoe serve` (embedded, continuous batching) at 50 %
        budget inside the same memory cap, streaming ShareGPT requests from LOAD_INDEX, closed loop at
        concurrency 1 then higher, one fresh server per system; at temperature 0 every completion must
        equal the first system's at concurrency 1 (the suite fails otherwise). TTFT/TPOT/latency
        percentiles are client-side. `tag` names another model's files (exp_t)."""
        lc = self.cfg["load"]
        budget = m["expert_bytes"] * 50 // 100
        rows = []
        first = None  # the first system's concurrency-1 output: what every other run must reproduce
        for system in lc["systems"]:
            model_dir, extra = self.system_args(m, system)
            args = ["serve", "--model", model_dir, "--memory-budget", str(budget), "--threads", str(self.threads),
                    "--max-batch", str(max(lc["concurrency"])), *extra]
            try:
                with self.server(args, f"load{tag}-{system}-serve.log", self.cap_bytes(m, 50)) as url:
                    for c in lc["concurrency"]:
                        out = os.path.join(self.out, "runs", f"load{tag}-{system}-c{c}.json")
                        os.makedirs(os.path.dirname(out), exist_ok=True)
                        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py"),
                               "--url", url, "--prompts", PROMPTS_FILE, "--offset", str(LOAD_INDEX),
                               "--requests", str(lc["requests"]), "--concurrency", str(c), "--max-tokens",
                               str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]),
                               "--ignore-eos", "--timeout", "1800", "--out", out]
                        if first:
                            cmd += ["--check-against", first]
                        p = subprocess.run(cmd, capture_output=True, text=True)
                        open(os.path.join(self.logs, f"load{tag}-{system}-c{c}.log"), "w").write(p.stdout + p.stderr)
                        j = json.load(open(out)) if os.path.exists(out) else {}
                        summ = j.get("summary", {})
                        row = {"system": system, "concurrency": c, "ok": p.returncode == 0, "summary": summ,
                               "peak_bytes": self.cap.peak_bytes(), "cap_bytes": self.cap_bytes(m, 50)}
                        if first:
                            row["same_text_as_first"] = p.returncode == 0
                            if p.returncode != 0:
                                self.failures.append(f"l{tag}-{system}-c{c}")
                        rows.append(row)
                        bl.log(f"l: {system} concurrency {c}: rc {p.returncode}, "
                               f"{summ.get('output_tokens_per_s')} tokens/s")
                        first = first or out
            except RuntimeError as e:
                bl.warn(f"l: {system}: {e}")
                rows.append({"system": system, "ok": False, "error": str(e)[:500]})
        self.save(f"l_load_{m['arch']}{tag}", {"budget_pct": 50, "prompt_offset": LOAD_INDEX, "config": lc, "rows": rows})

    @staticmethod
    def scrape(url):
        """GET url/metrics -> {series text (name{labels}): value}; {} when unreachable."""
        out = {}
        with contextlib.suppress(OSError, ValueError):
            for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
                if line and not line.startswith("#"):
                    series, _, value = line.rpartition(" ")
                    out[series] = float(value)
        return out

    def exp_q(self, m):
        """(q) CoServe's dependency-aware request grouping (issue 17 item 4): `zipmoe serve --policy coserve` at
        a tight budget with a small batch and more clients than slots, so a queue forms; --request-grouping none
        (first come, first served) vs coserve, one fresh cold server each inside the same memory cap, the same
        ShareGPT requests through bench/load.py closed loop; coserve's completions must equal none's."""
        qc = self.cfg["grouping"]
        budget = m["expert_bytes"] * qc["budget"] // 100
        cap = self.cap_bytes(m, qc["budget"])
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        load_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py")
        rows, first = [], None
        for grouping in ("none", "coserve"):
            args = ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads", str(self.threads),
                    "--policy", "coserve", "--request-grouping", grouping, "--max-batch", str(qc["max_batch"])]
            try:
                with self.server(args, f"q-{grouping}.log", cap) as url:
                    out = os.path.join(self.out, "runs", f"q-{grouping}.json")
                    cmd = [sys.executable, load_py, "--url", url, "--prompts", PROMPTS_FILE, "--offset",
                           str(LOAD_INDEX), "--requests", str(qc["requests"]), "--concurrency", str(qc["concurrency"]),
                           "--max-tokens", str(qc["max_tokens"]), "--max-prompt-chars", str(qc["max_prompt_chars"]),
                           "--ignore-eos", "--timeout", "1800", "--out", out]
                    if first:
                        cmd += ["--check-against", first]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    open(os.path.join(self.logs, f"q-{grouping}-load.log"), "w").write(p.stdout + p.stderr)
                    metrics = self.scrape(url)
                    peak = self.cap.peak_bytes()
            except RuntimeError as e:
                bl.warn(f"q: {grouping}: {e}")
                rows.append({"grouping": grouping, "ok": False, "error": str(e)[:500]})
                continue
            j = json.load(open(out)) if os.path.exists(out) else {}
            lookups = sum(v for k, v in metrics.items() if k.startswith("zipmoe_cache_requests_total{"))
            misses = sum(v for k, v in metrics.items() if k.startswith("zipmoe_cache_requests_total{") and 'pool="M"' in k)
            row = {"grouping": grouping, "ok": p.returncode == 0, "summary": j.get("summary", {}),
                   "hit_rate": (1 - misses / lookups) if lookups else None,
                   "admitted_fifo": metrics.get('zipmoe_requests_admitted_total{order="fifo"}'),
                   "admitted_grouped": metrics.get('zipmoe_requests_admitted_total{order="grouped"}'),
                   "read_bytes": sum(v for k, v in metrics.items() if k.startswith("zipmoe_runtime_io_bytes_total{")),
                   "peak_bytes": peak, "cap_bytes": cap}
            if first:
                row["same_text_as_none"] = p.returncode == 0
                if p.returncode != 0:
                    self.failures.append(f"q-{grouping}")
            first = first or out
            rows.append(row)
            bl.log(f"q: {grouping}: rc {p.returncode}, {row['summary'].get('output_tokens_per_s')} tokens/s, "
                   f"hit rate {row['hit_rate']}, grouped {row['admitted_grouped']}")
        self.save(f"q_request_grouping_{m['arch']}", {"budget_pct": qc["budget"], "config": qc,
                                                      "prompt_offset": LOAD_INDEX, "rows": rows})

    def load_run(self, url, tag, concurrency, reference=None, warmup=True, lc=None):
        """bench/load.py against `url` (closed loop, the (l) requests of this mode, or `lc`); one warm-up request
        first when `warmup`. Returns (rc, summary, output path)."""
        lc = lc or self.cfg["load"]
        load_py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load.py")
        common = [sys.executable, load_py, "--url", url, "--prompts", PROMPTS_FILE, "--max-tokens",
                  str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]), "--ignore-eos",
                  "--timeout", "1800"]
        if warmup:  # process start-up, arena faults, first plan: not what a serving client sees
            subprocess.run(common + ["--offset", str(LOAD_INDEX + 100), "--requests", "1", "--concurrency", "1",
                                     "--out", os.path.join(self.out, "runs", f"{tag}-warmup.json")],
                           capture_output=True, text=True)
        out = os.path.join(self.out, "runs", f"{tag}-c{concurrency}.json")
        cmd = common + ["--offset", str(LOAD_INDEX), "--requests", str(lc["requests"]), "--concurrency",
                        str(concurrency), "--out", out]
        if reference:
            cmd += ["--check-against", reference]
        p = subprocess.run(cmd, capture_output=True, text=True)
        open(os.path.join(self.logs, f"{tag}-c{concurrency}.log"), "w").write(p.stdout + p.stderr)
        j = json.load(open(out)) if os.path.exists(out) else {}
        return p.returncode, j.get("summary", {}), out

    def exp_h(self, m):
        """(h) `zipmoe serve` (embedded: every service a thread of one process) vs `zipmoe up` (one process per
        service, ZeroMQ + the shared arena), measured the same way (issue 20): both warm (one warm-up request
        first), both through bench/load.py with the (l) requests, closed loop at each concurrency of (l), the
        same 50 % budget and memory cap, one fresh server each; up's completions must equal serve's. The modes
        run in turn `rounds` times (serve, ..., up, serve, ..., up), so a slow spell of the machine hits both."""
        os.makedirs(os.path.join(self.out, "runs"), exist_ok=True)
        hc = self.cfg.get("h", {})
        lc = dict(self.cfg["load"], max_tokens=hc.get("max_tokens", self.cfg["load"]["max_tokens"]))
        rounds = hc.get("rounds", 1)
        budget = m["expert_bytes"] * 50 // 100
        cap = self.cap_bytes(m, 50)
        plan = ["--set", f"plan_trace={m['trace']}"] if m.get("trace") else []
        run_dir = os.path.join(self.out, "up-run")
        os.makedirs(run_dir, exist_ok=True)
        modes = {
            "serve": ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads", str(self.threads),
                      "--max-batch", str(max(lc["concurrency"]))]
                     + (["--plan-trace", m["trace"]] if m.get("trace") else []),
            # serve with up's recovery: every missed expert recovered to BF16 before it is computed (up's
            # executor is another process and takes BF16 offsets), not multiplied from its E/SM planes.
            "serve-separate-recovery": ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads",
                                        str(self.threads), "--max-batch", str(max(lc["concurrency"])),
                                        "--separate-recovery"]
                                       + (["--plan-trace", m["trace"]] if m.get("trace") else []),
            "up": ["up", "--model", m["zstd"], "--run-dir", run_dir, "--memory-budget", str(budget),
                   "--set", f"threads={self.threads}", "--set", f"http.max_batch={max(lc['concurrency'])}", *plan]
                  + [x for svc in ("storage", "decompressor", "scheduler", "executor", "cache_manager", "up")
                     for x in ("--set", f"metrics.port.{svc}=0")],
        }
        rows, first = [], {}
        for rnd in range(rounds):
            for mode, args in modes.items():
                tag = f"h-{mode}" if rnd == 0 else f"h-{mode}-r{rnd}"
                try:
                    with self.server(args, f"{tag}.log", cap) as url:
                        for c in lc["concurrency"]:
                            rc, summ, out = self.load_run(url, tag, c, reference=first.get(c),
                                                          warmup=(c == lc["concurrency"][0]), lc=lc)
                            row = {"mode": mode, "round": rnd, "concurrency": c, "ok": rc == 0, "summary": summ,
                                   "peak_bytes": self.cap.peak_bytes(), "cap_bytes": cap}
                            if c in first:
                                row["same_text_as_serve"] = rc == 0
                                if rc != 0:
                                    self.failures.append(f"{tag}-c{c}")
                            first.setdefault(c, out)
                            rows.append(row)
                            tpot = (summ.get("tpot_s") or {}).get("p50")
                            bl.log(f"h: round {rnd} {mode} concurrency {c}: rc {rc}, TPOT p50 {tpot}")
                except RuntimeError as e:
                    bl.warn(f"h: {mode}: {e}")
                    rows.append({"mode": mode, "round": rnd, "ok": False, "error": str(e)[:500]})
        n_proc = None
        with contextlib.suppress(OSError):
            m2 = re.search(r"(\d+) processes", open(os.path.join(self.logs, "h-up.log")).read())
            n_proc = int(m2.group(1)) if m2 else None
        self.save(f"h_embedded_vs_up_{m['arch']}", {"budget_pct": 50, "config": lc, "rounds": rounds,
                                                    "prompt_offset": LOAD_INDEX, "processes": n_proc, "rows": rows})

    # ---------------------------------------------------------------- (m) llama.cpp peer
