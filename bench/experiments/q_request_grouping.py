"""(q) CoServe's request grouping in `zipmoe serve` (--request-grouping none vs coserve) under a queue longer than
the batch; its report section. An experiment of bench/suite.py (bench/experiments/__init__.py)."""
import contextlib
import json
import os
import subprocess
import sys
import urllib.request

import benchlib as bl
from benchlib import BENCH_DIR, LOAD_INDEX, PROMPTS_FILE, f3, load

NAME = "q"
NEEDS = ("calibrate",)
# Quick mode: one request per client, so the queue forms once, at the start.
CONFIG = {"quick": {"grouping": {"budget": 25, "max_batch": 2, "concurrency": 8, "requests": 8, "max_tokens": 8,
                                 "max_prompt_chars": 400}},
          "full": {"grouping": {"budget": 25, "max_batch": 2, "concurrency": 8, "requests": 32, "max_tokens": 32,
                                "max_prompt_chars": 1000}}}


def quick_note(cfg):
    q, f = cfg["grouping"], CONFIG["full"]["grouping"]
    return (f"(q) {q['requests']} requests of {q['max_tokens']} tokens from {q['concurrency']} clients (`--full`: "
            f"{f['requests']} of {f['max_tokens']})")


def scrape(url):
    """GET url/metrics -> {series text (name{labels}): value}; {} when unreachable."""
    out = {}
    with contextlib.suppress(OSError, ValueError):
        for line in urllib.request.urlopen(url + "/metrics", timeout=10).read().decode().splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                out[series] = float(value)
    return out


def run(s):
    """(q) CoServe's dependency-aware request grouping (issue 17 item 4): `zipmoe serve --policy coserve` at
    a tight budget with a small batch and more clients than slots, so a queue forms; --request-grouping none
    (first come, first served) vs coserve, one fresh cold server each inside the same memory cap, the same
    ShareGPT requests through bench/load.py closed loop; coserve's completions must equal none's."""
    m = s.mini
    qc = s.cfg["grouping"]
    budget = m["expert_bytes"] * qc["budget"] // 100
    cap = s.cap_bytes(m, qc["budget"])
    os.makedirs(os.path.join(s.out, "runs"), exist_ok=True)
    load_py = os.path.join(BENCH_DIR, "load.py")
    rows, first = [], None
    for grouping in ("none", "coserve"):
        args = ["serve", "--model", m["zstd"], "--memory-budget", str(budget), "--threads", str(s.threads),
                "--policy", "coserve", "--request-grouping", grouping, "--max-batch", str(qc["max_batch"])]
        try:
            with s.server(args, f"q-{grouping}.log", cap) as url:
                out = os.path.join(s.out, "runs", f"q-{grouping}.json")
                cmd = [sys.executable, load_py, "--url", url, "--prompts", PROMPTS_FILE, "--offset",
                       str(LOAD_INDEX), "--requests", str(qc["requests"]), "--concurrency", str(qc["concurrency"]),
                       "--max-tokens", str(qc["max_tokens"]), "--max-prompt-chars", str(qc["max_prompt_chars"]),
                       "--ignore-eos", "--timeout", "1800", "--out", out]
                if first:
                    cmd += ["--check-against", first]
                p = subprocess.run(cmd, capture_output=True, text=True)
                open(os.path.join(s.logs, f"q-{grouping}-load.log"), "w").write(p.stdout + p.stderr)
                metrics = scrape(url)
                peak = s.cap.peak_bytes()
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
                s.failures.append(f"q-{grouping}")
        first = first or out
        rows.append(row)
        bl.log(f"q: {grouping}: rc {p.returncode}, {row['summary'].get('output_tokens_per_s')} tokens/s, "
               f"hit rate {row['hit_rate']}, grouped {row['admitted_grouped']}")
    s.save(f"q_request_grouping_{m['arch']}", {"budget_pct": qc["budget"], "config": qc,
                                               "prompt_offset": LOAD_INDEX, "rows": rows})


# ------------------------------------------------------------------ report

def report(rep):
    q = load(rep.a.out, "q_request_grouping_qwen2_moe.json")
    rep.p("## (q) CoServe's request grouping in `zipmoe serve`", "")
    if not q:
        rep.p("Not run.", "")
        return
    qc = q["config"]
    rep.p(f"`zipmoe serve --policy coserve --max-batch {qc['max_batch']}` at a {q['budget_pct']} % budget inside "
          f"the same memory cap, started cold; `bench/load.py` keeps {qc['concurrency']} clients busy (closed loop) "
          f"with {qc['requests']} ShareGPT requests from #{q['prompt_offset']} (at most {qc['max_prompt_chars']} "
          f"characters, {qc['max_tokens']} new tokens, `--ignore-eos`), so sequences wait for a batch slot. "
          "`none` admits them first come, first served; `coserve` (`--request-grouping coserve`) admits the one "
          "of the first 8 waiting whose predicted experts are most at hand (docs/policies.md \"Request "
          "grouping\"). **grouped** = admissions that skipped an older waiting sequence. Hit rate and bytes read "
          "from the server's /metrics after the run (expert lookups, prefill included); TTFT and latency "
          "client-side.", "")
    rep.p("| grouping | tokens/s | TTFT p50 s | TTFT p90 s | latency p90 s | TPOT p50 s | hit rate | read MiB | "
          "grouped / admitted | same text as none |", "|---|---|---|---|---|---|---|---|---|---|")
    for r in q["rows"]:
        if not r.get("summary"):
            rep.p(f"| {r['grouping']} | failed: {r.get('error', '')[:100]} | | | | | | | | |")
            continue
        s = r["summary"]
        pct = lambda k, p: (s.get(k) or {}).get(p)  # noqa: E731
        admitted = (r.get("admitted_fifo") or 0) + (r.get("admitted_grouped") or 0)
        same = "–" if r["grouping"] == "none" else ("yes" if r.get("same_text_as_none") else "**NO**")
        rep.p(f"| {r['grouping']} | {f3(s.get('output_tokens_per_s'), 2)} | {f3(pct('ttft_s', 'p50'), 2)} | "
              f"{f3(pct('ttft_s', 'p90'), 2)} | {f3(pct('latency_s', 'p90'), 2)} | {f3(pct('tpot_s', 'p50'))} | "
              f"{f3(r.get('hit_rate'))} | {(r.get('read_bytes') or 0) / 2**20:.0f} | "
              f"{int(r.get('admitted_grouped') or 0)} / {int(admitted)} | {same} |")
    rep.p("")
