"""(l) HTTP serving under load: bench/load.py's ShareGPT requests at concurrency 1..C against `zipmoe serve`; its
report section (also (t)'s on the trained model, and the headline's warm-server sentence). An experiment of
bench/suite.py (bench/experiments/__init__.py)."""
import json
import os
import subprocess
import sys

import benchlib as bl
from benchlib import BENCH_DIR, LOAD_INDEX, PROMPTS_FILE, f3, gib, load

NAME = "l"
NEEDS = ("calibrate",)
CONFIG = {"quick": {"load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 8, "max_tokens": 8,
                             "max_prompt_chars": 400}},
          "full": {"load": {"systems": ["zipmoe", "lru"], "concurrency": [1, 4], "requests": 16, "max_tokens": 32,
                            "max_prompt_chars": 1000}}}


def run(s, m=None, tag=""):
    """Serving under load (bench/load.py): `zipmoe serve` (embedded, continuous batching) at 50 %
    budget inside the same memory cap, streaming ShareGPT requests from LOAD_INDEX, closed loop at
    concurrency 1 then higher, one fresh server per system; at temperature 0 every completion must
    equal the first system's at concurrency 1 (the suite fails otherwise). TTFT/TPOT/latency
    percentiles are client-side. `tag` names another model's files (exp_t)."""
    m = m or s.mini
    lc = s.cfg["load"]
    budget = m["expert_bytes"] * 50 // 100
    rows = []
    first = None  # the first system's concurrency-1 output: what every other run must reproduce
    for system in lc["systems"]:
        model_dir, extra = s.system_args(m, system)
        args = ["serve", "--model", model_dir, "--memory-budget", str(budget), "--threads", str(s.threads),
                "--max-batch", str(max(lc["concurrency"])), *extra]
        try:
            with s.server(args, f"load{tag}-{system}-serve.log", s.cap_bytes(m, 50)) as url:
                for c in lc["concurrency"]:
                    out = os.path.join(s.out, "runs", f"load{tag}-{system}-c{c}.json")
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    cmd = [sys.executable, os.path.join(BENCH_DIR, "load.py"),
                           "--url", url, "--prompts", PROMPTS_FILE, "--offset", str(LOAD_INDEX),
                           "--requests", str(lc["requests"]), "--concurrency", str(c), "--max-tokens",
                           str(lc["max_tokens"]), "--max-prompt-chars", str(lc["max_prompt_chars"]),
                           "--ignore-eos", "--timeout", "1800", "--out", out]
                    if first:
                        cmd += ["--check-against", first]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    open(os.path.join(s.logs, f"load{tag}-{system}-c{c}.log"), "w").write(p.stdout + p.stderr)
                    j = json.load(open(out)) if os.path.exists(out) else {}
                    summ = j.get("summary", {})
                    row = {"system": system, "concurrency": c, "ok": p.returncode == 0, "summary": summ,
                           "peak_bytes": s.cap.peak_bytes(), "cap_bytes": s.cap_bytes(m, 50)}
                    if first:
                        row["same_text_as_first"] = p.returncode == 0
                        if p.returncode != 0:
                            s.failures.append(f"l{tag}-{system}-c{c}")
                    rows.append(row)
                    bl.log(f"l: {system} concurrency {c}: rc {p.returncode}, "
                           f"{summ.get('output_tokens_per_s')} tokens/s")
                    first = first or out
        except RuntimeError as e:
            bl.warn(f"l: {system}: {e}")
            rows.append({"system": system, "ok": False, "error": str(e)[:500]})
    s.save(f"l_load_{m['arch']}{tag}", {"budget_pct": 50, "prompt_offset": LOAD_INDEX, "config": lc, "rows": rows})


# ------------------------------------------------------------------ report

def report(rep, name="l_load_qwen2_moe.json", title="## (l) Serving under load: ShareGPT requests over HTTP"):
    lj = load(rep.a.out, name)
    rep.p(title, "")
    if not lj:
        rep.p("Not run.", "")
        return
    cfg = lj["config"]
    rep.p(f"`zipmoe serve` (embedded, continuous batching, `--max-batch {max(cfg['concurrency'])}`) at "
          f"{lj['budget_pct']} % budget inside the same memory cap, started cold. `bench/load.py` streams "
          f"{cfg['requests']} real ShareGPT prompts (from #{lj['prompt_offset']}, at most "
          f"{cfg['max_prompt_chars']} characters) with `max_tokens` {cfg['max_tokens']}, temperature 0, "
          "`ignore_eos`, closed loop at each concurrency in turn (one fresh server per system; it stays up, so "
          "later rows run with a warmer cache). TTFT, TPOT and latency are client-side; **same text** = every "
          f"completion equals the first system's ({lj['rows'][0].get('system', '?') if lj['rows'] else '?'}) "
          "concurrency-1 completion of the same prompt (the suite fails otherwise).", "")
    rep.p("| system | concurrency | ok | output tokens/s | req/s | TTFT p50 / p90 s | TPOT p50 / p90 s | "
          "latency p50 / p90 s | peak GiB | same text |", "|---|---|---|---|---|---|---|---|---|---|")
    for r in lj["rows"]:
        sm = r.get("summary") or {}
        if not sm:
            rep.p(f"| {r['system']} | {r.get('concurrency', '–')} | failed: {r.get('error', '?')[:120]} "
                  "| | | | | | | |")
            continue

        def pp(key):
            d = sm.get(key) or {}
            return f"{f3(d.get('p50'))} / {f3(d.get('p90'))}"
        same = "–" if "same_text_as_first" not in r else ("yes" if r["same_text_as_first"] else "**NO**")
        rep.p(f"| {r['system']} | {r['concurrency']} | {sm.get('ok')}/{sm.get('requests')} | "
              f"{f3(sm.get('output_tokens_per_s'))} | {f3(sm.get('request_throughput_rps'))} | {pp('ttft_s')} | "
              f"{pp('tpot_s')} | {pp('latency_s')} | {gib(r.get('peak_bytes'))} | {same} |")
    warm = warm_text(lj)
    if warm:
        rep.p("", f"TPOT p50, warm server: {warm}. At concurrency 1 a warm step is compute-bound (see the "
              "compute floor in the headline); at higher concurrency each step routes several sequences, touches "
              "more distinct experts per layer and capacity binds, as at the lowest budget of (c). `serve` "
              "reports no per-run hit rates to this suite, so the split is not shown here.")
    rep.p("", "Rerun against any server (also `zipmoe up` or a Jetson): `/usr/bin/python3 bench/load.py --url "
          "http://HOST:PORT --concurrency 4 --requests 32 --out load.json` (`--rate R` for Poisson arrivals, "
          "`--check-against` an earlier output).", "")


def load_ratio(lj, concurrency=1):
    """(zipmoe/lru, zipmoe, lru) TPOT p50 of (l) at `concurrency`, or None."""
    p50 = {}
    for r in (lj or {}).get("rows", []):
        d = ((r.get("summary") or {}).get("tpot_s") or {}).get("p50")
        if r.get("ok") and r.get("concurrency") == concurrency and d:
            p50[r["system"]] = d
    if "zipmoe" in p50 and "lru" in p50:
        return p50["zipmoe"] / p50["lru"], p50["zipmoe"], p50["lru"]
    return None


def warm_text(lj):
    """One sentence on (l)'s zipmoe/lru TPOT ratios, lowest and highest concurrency; "" without both."""
    conc = sorted(set((lj or {}).get("config", {}).get("concurrency", [])))
    parts = []
    for c in (conc[0], conc[-1]) if len(conc) > 1 else conc:
        w = load_ratio(lj, c)
        if w:
            parts.append(f"concurrency {c}: zipmoe/lru = **{w[0]:.2f}** ({f3(w[1])} vs {f3(w[2])} s)")
    return "; ".join(parts)

# ------------------------------------------------------------------ (m)
