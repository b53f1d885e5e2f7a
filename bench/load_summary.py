"""The summary of a bench/load.py run: latency distributions (TTFT, TPOT, latency; numpy's linear
percentiles), throughput, the printed table, and the check of a run's texts against a reference run's."""
import json
import math
import statistics
import sys


class SetupError(Exception):
    """Something that stops the run before it starts (exit 2)."""


def percentile(sorted_xs, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not sorted_xs:
        return None
    pos = (len(sorted_xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def dist(values):
    xs = sorted(v for v in values if v is not None)
    if not xs:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None}
    return {"n": len(xs), "mean": statistics.fmean(xs), "p50": percentile(xs, 50), "p90": percentile(xs, 90),
            "p99": percentile(xs, 99), "min": xs[0], "max": xs[-1]}


def summarize(rows):
    ok = [r for r in rows if r["ok"]]
    first_send = min(r["sent_s"] for r in rows)
    last_end = max(r["end_s"] for r in rows)
    wall = last_end - first_send
    out_tokens = sum(r["completion_tokens"] or 0 for r in ok)
    prompt_tokens = [r["prompt_tokens"] for r in ok if r["prompt_tokens"] is not None]
    return {
        "requests": len(rows),
        "ok": len(ok),
        "failed": len(rows) - len(ok),
        "wall_s": wall,
        "request_throughput_rps": len(ok) / wall if wall > 0 else None,
        "output_tokens": out_tokens,
        "output_tokens_per_s": out_tokens / wall if wall > 0 else None,
        "prompt_tokens": sum(prompt_tokens) if ok and len(prompt_tokens) == len(ok) else None,
        "tokens_from": sorted({r["tokens_from"] for r in ok if r["tokens_from"]}),
        "finish_reasons": {k: sum(1 for r in ok if r["finish_reason"] == k)
                           for k in sorted({str(r["finish_reason"]) for r in ok})},
        "ttft_s": dist(r["ttft_s"] for r in ok),
        "tpot_s": dist(r["tpot_s"] for r in ok),
        "latency_s": dist(r["latency_s"] for r in ok),
        "completion_tokens": dist(r["completion_tokens"] for r in ok),
    }


def ms(x):
    return "-" if x is None else f"{x * 1e3:.1f}"


def print_summary(cfg, s):
    shape = (f"open loop, {cfg['rate']:g} req/s Poisson" + (f", at most {cfg['concurrency']} in flight" if cfg["concurrency"] else "")
             if cfg["rate"] else f"closed loop, concurrency {cfg['concurrency']}")
    print(f"zipmoe load: {cfg['url']} model {cfg['model']} {cfg['endpoint']}, {shape}, "
          f"max_tokens {cfg['max_tokens']}, temperature {cfg['temperature']:g}"
          + (", ignore_eos" if cfg["ignore_eos"] else ""))
    print(f"  requests        {s['ok']} ok, {s['failed']} failed of {s['requests']} "
          f"(prompts {cfg['prompt_indices'][0]}..{cfg['prompt_indices'][-1]}, {cfg['prompts_skipped']} skipped)")
    rps = "-" if s["request_throughput_rps"] is None else f"{s['request_throughput_rps']:.3f}"
    tps = "-" if s["output_tokens_per_s"] is None else f"{s['output_tokens_per_s']:.1f}"
    print(f"  wall time       {s['wall_s']:.3f} s")
    print(f"  throughput      {rps} req/s, {tps} output tokens/s "
          f"({s['output_tokens']} tokens, counted from {'/'.join(s['tokens_from']) or '-'}"
          + (f"; {s['prompt_tokens']} prompt tokens" if s["prompt_tokens"] is not None else "") + ")")
    ct = s["completion_tokens"]
    if ct["n"]:
        print(f"  tokens/request  mean {ct['mean']:.1f}, min {ct['min']}, max {ct['max']}; finish "
              + ", ".join(f"{k} {v}" for k, v in s["finish_reasons"].items()))
    print(f"  {'(ms)':<14}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'n':>6}")
    for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("latency", "latency_s")):
        d = s[key]
        print(f"  {name:<14}{ms(d['mean']):>10}{ms(d['p50']):>10}{ms(d['p90']):>10}{ms(d['p99']):>10}{d['n']:>6}")


# ------------------------------------------------------------------------------------ --check-against


def load_reference(path):
    try:
        with open(path, encoding="utf-8") as f:
            ref = json.load(f)
    except FileNotFoundError:
        raise SetupError(f"--check-against {path}: no such file")
    except (OSError, UnicodeDecodeError) as e:
        raise SetupError(f"--check-against {path}: cannot read it: {e}")
    except json.JSONDecodeError as e:
        raise SetupError(f"--check-against {path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}")
    if not isinstance(ref, dict) or not isinstance(ref.get("requests"), list):
        raise SetupError(f'--check-against {path}: not a bench/load.py --out file (no "requests" list)')
    texts = {}
    for r in ref["requests"]:
        if isinstance(r, dict) and r.get("ok") and isinstance(r.get("prompt_index"), int):
            texts[r["prompt_index"]] = r.get("text", "")
    return ref.get("config") or {}, texts


def check_against(path, ref_cfg, ref_texts, cfg, rows):
    """Prints the comparison; returns (summary dict, passed)."""
    for key in ("model", "endpoint", "max_tokens", "temperature", "ignore_eos", "seed"):
        if key in ref_cfg and ref_cfg[key] != cfg[key]:
            print(f"W: --check-against {path}: {key} was {ref_cfg[key]!r} there, {cfg[key]!r} here; "
                  f"texts may differ for that reason", file=sys.stderr)
    if cfg["temperature"] > 0:
        print(f"W: temperature {cfg['temperature']:g} > 0: sampled texts are only comparable if the server's "
              f"sampling is deterministic per seed", file=sys.stderr)
    matched, mismatched, missing = [], [], []
    for i, r in enumerate(rows):
        if not r["ok"]:
            continue
        if r["prompt_index"] not in ref_texts:
            missing.append(r["prompt_index"])
        elif ref_texts[r["prompt_index"]] == r["text"]:
            matched.append(r["prompt_index"])
        else:
            mismatched.append(r["prompt_index"])
            a, b = ref_texts[r["prompt_index"]], r["text"]
            k = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), min(len(a), len(b)))
            print(f"  MISMATCH prompt {r['prompt_index']}: first difference at char {k} "
                  f"(reference {len(a)} chars, this run {len(b)}): reference {a[k:k + 40]!r} vs {b[k:k + 40]!r}")
    compared = len(matched) + len(mismatched)
    print(f"  check-against   {len(matched)}/{compared} texts match {path}"
          + (f"; {len(mismatched)} mismatched (prompts {mismatched})" if mismatched else "")
          + (f"; {len(missing)} prompts not in the reference (prompts {missing})" if missing else ""))
    passed = not mismatched and compared > 0
    if compared == 0:
        print(f"  check-against   nothing to compare: no successful request here has an ok row in {path}")
    return {"reference": path, "compared": compared, "matched": len(matched), "mismatched": mismatched,
            "not_in_reference": missing, "passed": passed}, passed


# ----------------------------------------------------------------------------------------------- main
