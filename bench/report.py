#!/usr/bin/python3
"""Turns the JSON files of one bench/suite.py run (OUT/*.json) into PNG figures and the generated
docs/benchmarks.md (the prose that does not change between runs lives in bench/benchmarks_template.md).
Every number in the output comes from OUT; nothing is typed in by hand.

Usage: bench/report.py --out OUT --docs docs/benchmarks.md --figures docs/bench [--command "bench/run.sh --quick"]
"""
import argparse
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from suite import MODES, OTHERS_MAX  # noqa: E402  (what the other mode runs, for the caveats; (m)'s limit)
import routing_stats  # noqa: E402

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # the report still has its tables
    plt = None

GIB = 1 << 30
MIB = 1 << 20
DPI = 80
TARGETS = {"zipmoe/lru": 0.5, "zipmoe/mmap": 0.35, "TPOT/physical limit": 1.3, "makespan/bound": 1.2}
COLORS = {"zipmoe": "C3", "lru": "C0", "fifo": "C1", "lfu": "C2", "marking": "C4", "dali": "C6", "full-load": "C7",
          "mmap": "C5", "zipmoe-noplan": "C8", "zipmoe-fifo-dispatch": "C9", "smoe": "tab:olive",
          "coserve": "tab:brown"}


def load(out, pattern):
    paths = sorted(glob.glob(os.path.join(out, pattern)))
    return json.load(open(paths[0])) if paths else None


def f3(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def gib(x):
    return "–" if x is None else (f"{x / GIB:.2f}" if x >= GIB / 10 or x == 0 else f"{x / GIB:.4f}")


class Report:
    def __init__(self, a):
        self.a = a
        self.meta = json.load(open(os.path.join(a.out, "meta.json")))
        self.md = []
        self.figs = a.figures
        os.makedirs(self.figs, exist_ok=True)
        self.rel = os.path.relpath(self.figs, os.path.dirname(os.path.abspath(a.docs)))

    def p(self, *lines):
        self.md.extend(lines)

    def fig(self, name, title):
        path = os.path.join(self.figs, name)
        plt.tight_layout()
        plt.savefig(path, dpi=DPI)
        plt.close()
        self.p("", f"![{title}]({self.rel}/{name})", "")

    # ------------------------------------------------------------------ header
    def header(self):
        m = self.meta
        mach = m["machine"]
        disk = m.get("disk") or {}
        self.p("# Benchmarks",
               "",
               f"**Generated** by `{self.a.command}` ({m['mode']} mode) on {m['started']} in {m['seconds']:.0f} s "
               f"(the build before it not counted), commit `{m['commit']}`. Do not edit by hand: change "
               "`bench/benchmarks_template.md` or `bench/report.py` and re-run. Speed numbers live here, never in "
               "tests (style.md \"Tests\")." + (
                   f" **Quick-mode target (≤ 15 min) missed: {m['seconds'] / 60:.0f} min.** Per experiment: "
                   + ", ".join(f"{k} {v:.0f} s" for k, v in (m.get("experiment_seconds") or {}).items())
                   + ". Every cold run of the mini model reads 2-3 GiB of experts now that routing is "
                   f"token-dependent, a ragged batch of {max((m.get('cfg') or {}).get('batches') or [1])} requests touches "
                   "many more experts per step than one, and the VM's "
                   "load average (below) shows other tenants sharing its 2 cores."
                   if m["mode"] == "quick" and m["seconds"] > 900 else ""),
               "",
               f"**Machine.** {mach.get('cpu', '?')}, {mach.get('nproc')} cores (`nproc`), {mach.get('mem_gib')} GiB RAM, "
               f"{mach.get('os', '?')}, kernel {mach.get('kernel')}, GPU: {mach.get('gpu') or 'none'}. At the start: load "
               f"average {' / '.join(mach.get('loadavg', []))}, {mach.get('mem_available_gib', '?')} GiB available, "
               f"{mach.get('dev_shm_used_gib', '?')} GiB held in /dev/shm. Disk holding the models: O_DIRECT sequential read "
               f"**{f3(disk.get('odirect_gbps_1m'), 2)} GB/s** at 1 MiB, {f3(disk.get('odirect_gbps_128k'), 2)} GB/s "
               f"at 128 KiB ({disk.get('how', 'not measured')}). **This VM is shared**: other engineers' builds ran "
               "on the same 2 cores during the run, so wall-clock numbers carry roughly ±10-20 % noise; compare "
               "rows of one run, not runs.",
               "")
        for run in m.get("partial_runs") or []:  # experiments re-run later with --only, merged into this report
            self.p(f"**Added later**: ({', '.join(run['experiments'])}) by `{run['command']}` at commit "
                   f"`{run['commit']}`, finished {run['finished']}; the other sections are from the run above.", "")
        cg = m["cgroup"]
        self.p("## Memory cap and I/O (what every run gets)", "")
        if cg["available"]:
            self.p(f"Every generation of every system runs inside one cgroup v1 memory group (`{cg['path']}`) whose "
                   "`memory.limit_in_bytes` is set before the run. The v1 controller charges the group for its "
                   "processes' anonymous memory (RSS: torch, non-expert weights, KV cache), the shared-memory expert "
                   "arena, and **the page cache pages they bring in**, so the cap bounds RSS + page cache together; "
                   "reaching it makes the kernel reclaim the group's page cache (that is the only \"cache\" the mmap "
                   "baseline has).")
        else:
            self.p(f"**No memory cap in this run**: {cg['reason']}. Runs went uncapped; the budgets below only bound "
                   "the runtime's own arena, and the mmap baseline could use all free RAM as page cache.")
        self.p("",
               f"Page cache dropped before every cold run (`echo 3 > /proc/sys/vm/drop_caches`): "
               f"{'yes' if m.get('drop_caches') else '**no** (not root?)'}. The runtime reads experts with O_DIRECT; "
               "mmap reads through the page cache. Budget = `--memory-budget`, a share of the model's BF16 expert "
               "bytes: the runtime's arena (cache pools + in-flight staging slots) never exceeds it; it does not include "
               "the non-expert weights, torch or the KV cache.", "")
        rows = []
        for key, mm in (m.get("models") or {}).items():
            if "overhead_bytes" in mm:
                cal = mm.get("calibration", {})
                rows.append(f"| {key} | {gib(mm['expert_bytes'])} | {gib(cal.get('peak_bytes'))} | "
                            f"{gib(cal.get('arena_bytes'))} | {gib(mm['overhead_bytes'])} |")
        if rows:
            self.p("Cap = budget + overhead, the same for every system at a budget. Overhead = peak group memory of a "
                   "short `full-load` run (no cache: arena = staging only) − its arena + 256 MiB slack, rounded up to "
                   "64 MiB: what the process needs besides expert memory. A generation that records its logits for "
                   "the bit-exactness check also gets 3 × rows × vocab × 4 B (the float32 logits held by torch, by the "
                   "results and by the output file's buffer): the same for every system at a point, and what lets a "
                   "16-prompt batch's prefill logits fit. The tables' cap column is the limit each run got.", "",
                   "| model | BF16 expert GiB | calibration peak GiB | its arena GiB | overhead GiB |",
                   "|---|---|---|---|---|", *rows, "")

    # ------------------------------------------------------------------ (c)
    def exp_c(self):
        c = load(self.a.out, "c_tpot_vs_budget_qwen2_moe.json")
        if not c:
            self.p("## (c) TPOT vs budget", "", "Not run.", "")
            return None
        rows = [r for r in c["rows"] if r.get("tokens") == max(x["tokens"] for x in c["rows"])]
        model = c["model"]
        budgets = sorted({r["budget_pct"] for r in rows})
        systems = [s for s in ["zipmoe", "lru", "fifo", "lfu", "marking", "dali", "smoe", "coserve", "full-load", "mmap"]
                   if any(r["system"] == s for r in rows)]
        self.p("## (c) TPOT and TTFT vs memory budget (Fig. 7)", "",
               f"qwen2_moe **mini** (24 MoE layers × 60 experts, top-4; {gib(model['expert_bytes'])} GiB of BF16 expert "
               f"weights; `--router-skew {self.meta['router_skew']}`), one real ShareGPT prompt "
               f"({self.prompt_text()}), greedy, `--ignore-eos`, "
               f"{rows[0]['tokens']} new tokens, `--threads {self.meta['threads']}`, cold. zipmoe's pools are planned "
               f"by Alg. 4 from `profile.json` and the routing trace of {self.plan_text()} (`--plan-trace`). "
               "Physical limit = per decode step, the compressed bytes zipmoe had to read (its run's total minus what it "
               "had read when the first token was sampled, i.e. without prefill) / the O_DIRECT disk bandwidth above.", "")
        if plt:
            fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
            for s in systems:
                xs = [r["budget_pct"] for r in rows if r["system"] == s and r.get("ok")]
                for ax, key in zip(axes, ("tpot_s", "ttft_s")):
                    ys = [r[key] for r in rows if r["system"] == s and r.get("ok")]
                    ax.plot(xs, ys, "o-", label=s, color=COLORS.get(s))
            lim = [(r["budget_pct"], r.get("physical_limit_s")) for r in rows
                   if r["system"] == "zipmoe" and r.get("physical_limit_s") is not None]
            if lim:
                axes[0].plot([x for x, _ in lim], [y for _, y in lim], "k--", label="physical limit (zipmoe bytes)")
            axes[0].set_ylabel("TPOT (s)")
            axes[1].set_ylabel("TTFT (s)")
            for ax in axes:
                ax.set_xlabel("budget (% of BF16 expert bytes)")
                ax.set_ylim(bottom=0)
                ax.grid(alpha=0.3)
            axes[0].legend(fontsize=7, ncol=2)
            fig.suptitle("qwen2_moe mini: TPOT / TTFT vs budget (cold, capped)", fontsize=10)
            self.fig("c_tpot_vs_budget.png", "TPOT and TTFT vs budget")
        self.p("| budget | cap GiB | system | TPOT s | / zipmoe | TTFT s | tokens/s | hit rate | read MiB | "
               "peak GiB | makespan/bound | = resident |", "|---|---|---|---|---|---|---|---|---|---|---|---|")
        for pct in budgets:
            z = next((r for r in rows if r["budget_pct"] == pct and r["system"] == "zipmoe" and r.get("ok")), None)
            for s in systems:
                r = next((r for r in rows if r["budget_pct"] == pct and r["system"] == s), None)
                if r is None:
                    continue
                if not r.get("ok"):
                    why = "OOM-killed under the cap" if r.get("oom") else "failed"
                    self.p(f"| {pct}% | {gib(r.get('cap_bytes'))} | {s} | {why} | | | | | | {gib(r.get('peak_bytes'))} | | |")
                    continue
                ratio = f"{r['tpot_s'] / z['tpot_s']:.2f}" if z and z["tpot_s"] else "–"
                read = f"{r['read_bytes'] / MIB:.0f}" if r.get("read_bytes") is not None else \
                    f"{r.get('major_faults', 0)} major faults"
                self.p(f"| {pct}% | {gib(r.get('cap_bytes'))} | {s} | {f3(r['tpot_s'])} | {ratio} | {f3(r['ttft_s'], 2)} | "
                       f"{f3(r['tokens_per_s'], 2)} | {f3(r.get('hit_rate'))} | {read} | {gib(r.get('peak_bytes'))} | "
                       f"{f3(r.get('makespan_over_bound'), 2)} | {'yes' if r['bit_identical'] else '**NO**'} |")
            if z and z.get("physical_limit_s") is not None:
                self.p(f"| {pct}% | | physical limit | {f3(z['physical_limit_s'])} | | | | | "
                       f"{z['decode_read_bytes_per_token'] / MIB:.1f} / step | | | |")
        self.p("")
        return c

    # ------------------------------------------------------------------ (r)
    def exp_r(self):
        r = load(self.a.out, "r_replay_vs_budget_qwen2_moe.json")
        self.p("## (r) The same runtime under capacity pressure: `zipmoe replay` of a Zipf trace vs budget", "")
        if not r:
            self.p("Not run.", "")
            return None
        ok = [x for x in r["rows"] if x.get("ok")]
        self.p(f"(c) is one cold request, where first-touch misses dominate, so this drives the same runtime (storage, "
               f"cache, scheduler, decode, recovery; no model math) with a synthetic routing trace: per step and MoE "
               f"layer, top-4 distinct experts drawn from a Zipf({r['zipf']}) popularity over a per-layer permutation "
               f"of the 60 experts, {r['steps']} steps replayed {r['repeat']}×, each expert's lease held "
               f"{r['compute_us']} µs (a stand-in for GPU expert compute, leaving the CPU to the runtime); same caps, "
               "cold. zipmoe's plan is fitted to a trace of the same distribution drawn with another seed. Physical "
               "limit = compressed bytes read per step / O_DIRECT bandwidth. No mmap row: replay has no model to map. "
               "No bit-exactness check here (no logits); (c) checks the same code paths."
               + (" **Short replay** (quick mode): frequency ranks, which zipmoe dispatches and evicts by, have not "
                  "converged in so few steps, which favours recency-based policies; `--full` replays "
                  f"{MODES['full']['replay']['steps']} × {MODES['full']['replay']['repeat']} steps."
                  if self.meta.get("mode") == "quick" else ""), "")
        if plt and ok:
            plt.figure(figsize=(6, 3.4))
            for sname in [x for x in COLORS if any(y["system"] == x for y in ok)]:
                pts = sorted((y["budget_pct"], y["step_s"]) for y in ok if y["system"] == sname)
                plt.plot([a for a, _ in pts], [b for _, b in pts], "o-", label=sname, color=COLORS[sname])
            lim = sorted((y["budget_pct"], y["physical_limit_s"]) for y in ok
                         if y["system"] == "zipmoe" and y.get("physical_limit_s"))
            if lim:
                plt.plot([a for a, _ in lim], [b for _, b in lim], "k--", label="physical limit (zipmoe bytes)")
            plt.xlabel("budget (% of BF16 expert bytes)")
            plt.ylabel("time per step (s)")
            plt.ylim(bottom=0)
            plt.grid(alpha=0.3)
            plt.legend(fontsize=7)
            plt.title("qwen2_moe mini, zipmoe replay, Zipf(1.0) routing", fontsize=9)
            self.fig("r_replay_vs_budget.png", "replay time per step vs budget")
        self.p("| budget | system | s / step | / zipmoe | hit rate | read MiB / step | physical limit s | "
               "makespan/bound | peak GiB |", "|---|---|---|---|---|---|---|---|---|")
        for pct in sorted({x["budget_pct"] for x in r["rows"]}):
            z = next((x for x in ok if x["budget_pct"] == pct and x["system"] == "zipmoe"), None)
            for x in [y for y in r["rows"] if y["budget_pct"] == pct]:
                if not x.get("ok"):
                    self.p(f"| {pct}% | {x['system']} | {'OOM under the cap' if x.get('oom') else 'failed'} | | | | | | |")
                    continue
                ratio = f"{x['step_s'] / z['step_s']:.2f}" if z else "–"
                self.p(f"| {pct}% | {x['system']} | {f3(x['step_s'])} | {ratio} | {f3(x.get('hit_rate'))} | "
                       f"{x['read_bytes_per_step'] / MIB:.1f} | {f3(x.get('physical_limit_s'))} | "
                       f"{f3(x.get('makespan_over_bound'), 2)} | {gib(x.get('peak_bytes'))} |")
        self.p("")
        return r

    # ------------------------------------------------------------------ headline
    def headline(self, c, rp=None):
        self.p("## Headline: qwen2_moe mini at 50 % budget", "")
        if not c:
            self.p("(c) did not run.", "")
            return
        rows = {r["system"]: r for r in c["rows"] if r["budget_pct"] == 50 and r.get("ok")
                and r["tokens"] == max(x["tokens"] for x in c["rows"])}
        z = rows.get("zipmoe")
        if not z:
            self.p("The zipmoe run at 50 % did not complete.", "")
            return
        lines = []

        def ratio(other):
            o = rows.get(other)
            return z["tpot_s"] / o["tpot_s"] if o and o["tpot_s"] else None
        vals = {"zipmoe/lru": ratio("lru"), "zipmoe/mmap": ratio("mmap"), "zipmoe/full-load": ratio("full-load"),
                "TPOT/physical limit": z["tpot_s"] / z["physical_limit_s"] if z.get("physical_limit_s") else None,
                "makespan/bound": z.get("makespan_over_bound")}
        rv = {}
        if rp:
            rr = {x["system"]: x for x in rp["rows"] if x["budget_pct"] == 50 and x.get("ok")}
            zr = rr.get("zipmoe")
            if zr:
                rv = {"zipmoe/lru": zr["step_s"] / rr["lru"]["step_s"] if "lru" in rr else None,
                      "zipmoe/full-load": zr["step_s"] / rr["full-load"]["step_s"] if "full-load" in rr else None,
                      "TPOT/physical limit": zr["step_s"] / zr["physical_limit_s"] if zr.get("physical_limit_s") else None,
                      "makespan/bound": zr.get("makespan_over_bound")}
        self.p("(c) = end-to-end generation (TPOT); (r) = `zipmoe replay` under capacity pressure (time per step, "
               "no mmap there).", "", "| measure | target | (c) measured | met? | (r) measured | met? |",
               "|---|---|---|---|---|---|")
        for k, v in vals.items():
            t = TARGETS.get(k)

            def met(x):
                return "–" if t is None or x is None else ("yes" if x <= t else "**no**")
            self.p(f"| {k} | {'≤ ' + str(t) if t else '(report)'} | {f3(v, 2)} | {met(v)} | {f3(rv.get(k), 2)} | "
                   f"{met(rv.get(k))} |")
        self.p("")
        lj = load(self.a.out, "l_load_qwen2_moe.json")
        warm = self.warm_text(lj)
        if warm:
            self.p(f"Warm server ((l): `zipmoe serve` in the same cap, {lj['config']['requests']} ShareGPT requests in a "
                   f"closed loop, TPOT p50; target ≤ 0.5): {warm}.", "")
        if rv:
            rr50 = {x["system"]: x for x in rp["rows"] if x["budget_pct"] == 50 and x.get("ok")}
            zr, lr = rr50.get("zipmoe"), rr50.get("lru")
            if zr and lr:
                self.p(f"Under pressure (r, 50 %): hit rate zipmoe {f3(zr.get('hit_rate'))} vs lru {f3(lr.get('hit_rate'))}; "
                       f"read {zr['read_bytes_per_step'] / MIB:.1f} vs {lr['read_bytes_per_step'] / MIB:.1f} MiB per "
                       f"step; makespan/bound {f3(zr.get('makespan_over_bound'), 2)}. A compressed hit still costs "
                       "E-chunk decodes and BF16 recoveries on the one decompression worker of a 2-core machine, so "
                       "the bytes saved are partly paid back in CPU time, and the physical limit (bytes / disk "
                       "bandwidth) ignores that decode cost.", "")
        ref = (self.meta.get("reference") or {}).get("qwen2_moe-mini")
        lru, mm = rows.get("lru"), rows.get("mmap")
        # The compute floor: all-resident, warm page cache (nothing read or decoded), same prompt and length.
        floor = (self.meta.get("compute_floor") or {}).get(f"qwen2_moe-mini-n{z['tokens']}")
        if floor:
            best = {k: floor / o["tpot_s"] for k, o in (("zipmoe/lru", lru), ("zipmoe/mmap", mm)) if o and o["tpot_s"]}
            if z.get("physical_limit_s"):
                best["TPOT/physical limit"] = floor / z["physical_limit_s"]
            self.p(f"**Compute floor.** The all-resident run again with a warm page cache (every expert in memory, "
                   f"nothing read or decoded) takes **{f3(floor)} s** per decode step on this machine. Even a system "
                   "that hid all I/O and decompression could not beat it, so the best reachable values here are "
                   + ", ".join(f"{k} ≥ {v:.2f} (target ≤ {TARGETS[k]})" for k, v in best.items()) + ".", "")
        why = []
        # The lowest budget's rows of the same length: where capacity binds (when it is below 50 %).
        low_pct = min(x["budget_pct"] for x in c["rows"])
        low = {r["system"]: r for r in c["rows"] if r["budget_pct"] == low_pct and r.get("ok")
               and r["tokens"] == z["tokens"]} if low_pct < 50 else {}
        if vals["zipmoe/lru"] is not None and vals["zipmoe/lru"] > TARGETS["zipmoe/lru"]:
            def first_touch(row):  # misses that are no eviction's fault: (misses - evictions) / misses
                if not row.get("stats_json"):
                    return None, None
                try:
                    st = json.load(open(os.path.join(self.a.out, row["stats_json"])))
                except (OSError, ValueError):
                    return None, None
                misses = (st.get("requests") or {}).get("misses")
                ev = sum(p.get("evictions", 0) for p in (st.get("pools") or {}).values())
                return (misses, max(0, misses - ev) / misses) if misses else (None, None)
            misses, share = first_touch(lru)
            low_txt = ""
            if "zipmoe" in low and "lru" in low:
                low_txt = (f" Where capacity binds ({low_pct} %), zipmoe's compressed pools raise the hit rate "
                           f"({f3(low['zipmoe'].get('hit_rate'))} vs lru {f3(low['lru'].get('hit_rate'))}) but TPOT "
                           f"stays at {f3(low['zipmoe']['tpot_s'] / low['lru']['tpot_s'], 2)}× lru: every C/E hit costs "
                           "E-chunk decodes and a BF16 recovery on the CPU, and on 2 cores that CPU is the expert "
                           "math's.")
            share_txt = (f" This is one cold {z['tokens']}-token request: at least {share * 100:.0f} % of lru's "
                         f"{misses} misses are first touches (misses − evictions), which no policy avoids, so the "
                         "policy decides only the rest." if share is not None else "")
            why.append(f"**zipmoe/lru missed**: hit rates zipmoe {f3(z.get('hit_rate'))} vs lru {f3(lru.get('hit_rate'))}, "
                       f"read {z['read_bytes'] / MIB:.0f} vs {lru['read_bytes'] / MIB:.0f} MiB.{share_txt}{low_txt} The "
                       "paper's 2× assumes expert math on a GPU and idle CPU cores for decompression; (l) shows a warm "
                       "server.")
        if vals["zipmoe/mmap"] is not None and vals["zipmoe/mmap"] > TARGETS["zipmoe/mmap"]:
            low_ratio = ""
            if "mmap" in low and "zipmoe" in low:
                low_ratio = (f" The gap grows as the cap tightens: at {low_pct} % mmap's TPOT is "
                             f"{f3(low['mmap']['tpot_s'] / low['zipmoe']['tpot_s'], 2)}× zipmoe's.")
            why.append(f"**zipmoe/mmap missed**: mmap TPOT {f3(mm['tpot_s'])} s with {mm.get('major_faults')} major faults "
                       f"and peak {gib(mm.get('peak_bytes'))} GiB of {gib(mm.get('cap_bytes'))} GiB cap: at this cap the "
                       "page cache holds most of what one short request touches, so mmap pays mostly first-touch "
                       f"faults, as zipmoe pays first-touch reads.{low_ratio}")
        if vals["TPOT/physical limit"] is not None and vals["TPOT/physical limit"] > TARGETS["TPOT/physical limit"]:
            why.append(f"**TPOT/limit missed**: zipmoe reads only {z['decode_read_bytes_per_token'] / MIB:.1f} MiB per "
                       f"decode step (limit {f3(z['physical_limit_s'])} s) but a step costs {f3(z['tpot_s'])} s: it is "
                       "compute-bound, not disk-bound, so the disk line is far below it.")
        if rv.get("TPOT/physical limit") is not None and rv["TPOT/physical limit"] > TARGETS["TPOT/physical limit"]:
            why.append(f"**(r) step/limit missed ({rv['TPOT/physical limit']:.2f})**: under pressure the disk line is "
                       "meaningful, but each compressed hit or miss also costs E-chunk decodes + BF16 recoveries "
                       "(their times are in the model's `profile.json`) on one decompression worker sharing 2 cores with the I/O "
                       "thread; the limit counts bytes only.")
        mk = [x for x in (vals["makespan/bound"], rv.get("makespan/bound")) if x is not None]
        if any(x > TARGETS["makespan/bound"] for x in mk):
            why.append("**makespan/bound missed** (where > 1.2): the Lemma B.3 bound assumes the L decode workers, the "
                       "I/O thread and recovery run in parallel with each other and the expert math; on 2 shared "
                       "cores they preempt each other, which the bound does not model; layers where the expert math "
                       "dominates sit near 1.")
        if why:
            self.p(*[f"- {w}" for w in why], "")
        if ref:
            self.p(f"All-resident reference (no budget, HF checkpoint mapped, uncapped): TPOT {f3(ref['tpot_s'])} s, "
                   f"TTFT {f3(ref['ttft_s'], 2)} s.", "")

    # ------------------------------------------------------------------ (a)
    def exp_a(self):
        a = load(self.a.out, "a_ratio.json")
        self.p("## (a) Compressed size per codec / level / K vs the entropy bound (Fig. 3)", "")
        if not a:
            self.p("Not run.", "")
            return
        rows = [r for r in a["codec_bench"] if r["stored_pct"] is not None and "1024x704" in r["tensor"]]
        if plt and rows:
            labels = [f"{r['codec']} {r['level']} K={r['k']}" for r in rows]
            plt.figure(figsize=(9, 3.4))
            plt.bar(range(len(rows)), [r["stored_pct"] for r in rows], color=["C3" if r["codec"] == "zstd" and
                                                                             r["level"] == "1" else "C0" for r in rows])
            plt.axhline(rows[0]["bound_pct"], color="k", ls="--", label=f"entropy bound (H+8)/16 = {rows[0]['bound_pct']}%")
            plt.xticks(range(len(rows)), labels, rotation=60, fontsize=7, ha="right")
            plt.ylabel("stored / raw BF16 (%)")
            plt.ylim(60, 101)
            plt.legend(fontsize=8)
            plt.title("1024x704 BF16 expert ~ N(0, 0.02²) (codec_bench --sections=ratio)", fontsize=9)
            self.fig("a_ratio.png", "compressed size vs entropy bound")
        self.p("| tensor | codec | level | K | E bits/value | H bits | stored/raw | bound | compress MB/s |",
               "|---|---|---|---|---|---|---|---|---|")
        for r in a["codec_bench"]:
            self.p(f"| {r['tensor']} | {r['codec']} | {r['level']} | {r['k']} | {f3(r['e_bits'], 4)} | {f3(r['h_bits'], 4)} | "
                   f"{f3(r['stored_pct'], 2)}% | {f3(r['bound_pct'], 2)}% | {f3(r['compress_mbps'], 1)} |")
        self.p("", "Whole models as compressed for this run (`zipmoe inspect --json`):", "")
        for name, info in a.get("models", {}).items():
            self.p(f"- {name}: `{json.dumps({k: v for k, v in info.items() if not isinstance(v, (list, dict))})}`")
        self.p("")

    # ------------------------------------------------------------------ (b)
    def exp_b(self):
        b = load(self.a.out, "b_read_vs_decode.json")
        self.p("## (b) Reading vs decoding the same bytes, 1..cores threads (Fig. 4)", "")
        if not b:
            self.p("Not run.", "")
            return
        if plt:
            plt.figure(figsize=(6, 3.4))
            d = b["decode"]
            plt.plot([x["threads"] for x in d], [x["k4_gbps"] for x in d], "o-", label="decode zstd-1, K=4 (176 KiB)")
            plt.plot([x["threads"] for x in d], [x["k16_gbps"] for x in d], "o-", label="decode zstd-1, K=16 (44 KiB)")
            db = b.get("decode_with_reads") or []
            if db:
                plt.plot([x["threads"] for x in db], [x["k4_gbps"] for x in db], "o:",
                         label="decode K=4, concurrent O_DIRECT reads")
            rd = [x for x in b["read"] if x["read"].startswith("O_DIRECT, 1 MiB")]
            plt.plot([x["threads"] for x in rd], [x["gbps"] for x in rd], "s--", label="O_DIRECT read, 1 MiB")
            if b.get("dd_read_with_decode_gbps"):
                plt.plot([1], [b["dd_read_with_decode_gbps"]], "kx", ms=8, label="dd O_DIRECT read, concurrent decode")
            plt.xlabel("threads")
            plt.ylabel("GB/s (wall, median)")
            plt.ylim(bottom=0)
            plt.grid(alpha=0.3)
            plt.legend(fontsize=7)
            self.fig("b_read_vs_decode.png", "read vs decode throughput")
        busy = {x["threads"]: x for x in b.get("decode_with_reads") or []}
        self.p("| threads | decode K=16 GB/s | decode K=4 GB/s | K=16 with concurrent reads | K=4 with concurrent reads |",
               "|---|---|---|---|---|")
        for x in b["decode"]:
            y = busy.get(x["threads"], {})
            self.p(f"| {x['threads']} | {f3(x['k16_gbps'], 2)} | {f3(x['k4_gbps'], 2)} | {f3(y.get('k16_gbps'), 2)} | "
                   f"{f3(y.get('k4_gbps'), 2)} |")
        self.p("", "| read | GB/s |", "|---|---|")
        for x in b["read"]:
            self.p(f"| {x['read']} | {f3(x['gbps'], 2)} |")
        if "dd_read_gbps" in b:
            self.p(f"| dd O_DIRECT 1 MiB, the model's experts file, alone | {f3(b['dd_read_gbps'], 2)} |",
                   f"| the same while a 1-thread decode loop runs | {f3(b.get('dd_read_with_decode_gbps'), 2)} |")
        self.p("", f"{b['note']}. \"Concurrent\": the other side runs at the same time on the same cores (a loop of "
                   "O_DIRECT `dd` reads of the experts file during the decode rows; a `codec_bench` decode loop during "
                   "the `dd` rows).", "")

    # ------------------------------------------------------------------ (g)
    def exp_g(self):
        g = load(self.a.out, "g_makespan_qwen2_moe.json")
        self.p("## (g) Per-layer makespan / Lemma B.3 lower bound: cache-affinity scheduler vs FIFO dispatch", "")
        if not g:
            self.p("Not run.", "")
            return
        ok = [r for r in g["rows"] if r.get("ok")]
        if plt and ok:
            plt.figure(figsize=(6, 3.4))
            data = [r.get("layer_ratios") or [0] for r in ok]
            plt.boxplot(data, labels=[f"{r['system']}\n{r['budget_pct']}%" for r in ok])
            plt.axhline(1.2, color="k", ls="--", label="target 1.2")
            plt.ylabel("mean makespan / bound per layer")
            plt.legend(fontsize=8)
            plt.xticks(fontsize=7)
            self.fig("g_makespan.png", "makespan over bound")
        self.p("| budget | dispatch | TPOT s | mean makespan/bound | per-layer min / median / max | = resident |",
               "|---|---|---|---|---|---|")
        for r in ok:
            lr = sorted(x for x in (r.get("layer_ratios") or []) if x)
            spread = f"{lr[0]:.2f} / {lr[len(lr) // 2]:.2f} / {lr[-1]:.2f}" if lr else "–"
            self.p(f"| {r['budget_pct']}% | {'FIFO' if 'fifo' in r['system'] else 'Alg. 1'} | {f3(r['tpot_s'])} | "
                   f"{f3(r.get('makespan_over_bound'), 2)} | {spread} | {'yes' if r['bit_identical'] else '**NO**'} |")
        self.p("")

    # ------------------------------------------------------------------ (f)
    def exp_f(self):
        f = load(self.a.out, "f_ablation_qwen2_moe.json")
        self.p("## (f) Eviction ablation: every policy and prefetcher, zipmoe with and without the plan (Fig. 10)", "")
        if not f:
            self.p("Not run.", "")
            return
        ok = [r for r in f["rows"] if r.get("ok")]
        self.p("`zipmoe-noplan` = the zipmoe policy (frequency-rank dispatch and eviction) with the whole budget in "
               "the F pool (`--pool-ratios F=1`) instead of Alg. 4's plan; `marking` = the classic Marking paging "
               "algorithm (random unmarked victim, seeded); `dali` = DALI's workload-aware replacement in equal per-layer "
               "F pools; `smoe` = SMoE's score-based eviction (lowest mean router score over the last steps) with its "
               "top-score prefetching, substitution off (exact); `coserve` = CoServe's two-stage eviction (experts the "
               "latest step did not select first, then the least probable); `X+P` = system X prefetching the next MoE "
               "layer's predicted experts with predictor P. The synthetic model's routing is synthetic "
               "(`--router-skew`); (t) repeats this on the trained model.", "")
        if plt and ok:
            plt.figure(figsize=(6, 3.4))
            for r in ok:
                plt.scatter(r["tokens_per_s"], r["tpot_s"], color=COLORS.get(r["system"]), label=
                            f"{r['system']} {r['budget_pct']}%")
            plt.xlabel("throughput (tokens/s, whole generation)")
            plt.ylabel("latency: TPOT (s)")
            plt.grid(alpha=0.3)
            plt.legend(fontsize=7)
            self.fig("f_ablation.png", "eviction ablation")
        self.ablation_table(ok, read_digits=0)
        self.p("")

    # ------------------------------------------------------------------ (d), (e)
    def exp_xy(self, pattern, title, xkey, xlabel, ykey, ylabel, png):
        d = load(self.a.out, pattern)
        self.p(f"## {title}", "")
        if not d:
            self.p("Not run.", "")
            return
        ok = [r for r in d["rows"] if r.get("ok")]
        systems = sorted({r["system"] for r in ok}, key=lambda s: list(COLORS).index(s) if s in COLORS else 99)
        if plt and ok:
            plt.figure(figsize=(6, 3.4))
            for s in systems:
                pts = sorted((r[xkey], r[ykey]) for r in ok if r["system"] == s)
                plt.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=s, color=COLORS.get(s))
            plt.xlabel(xlabel)
            plt.ylabel(ylabel)
            plt.ylim(bottom=0)
            plt.grid(alpha=0.3)
            plt.legend(fontsize=8)
            self.fig(png, title)
        self.p(f"| {xlabel} | system | TPOT s | TTFT s | tokens/s | generation s | process wall s | = resident |",
               "|---|---|---|---|---|---|---|---|")
        for r in sorted(ok, key=lambda r: (r[xkey], r["system"])):
            self.p(f"| {r[xkey]} | {r['system']} | {f3(r['tpot_s'])} | {f3(r['ttft_s'], 2)} | {f3(r['tokens_per_s'], 2)} | "
                   f"{f3(r.get('total_s'), 2)} | {f3(r['wall_s'], 1)} | {'yes' if r['bit_identical'] else '**NO**'} |")
        for r in d["rows"]:
            if not r.get("ok"):
                self.p(f"| {r[xkey]} | {r['system']} | failed: {r.get('error', '')[:120]} | | | | | |")
        self.p("")

    def deepseek(self):
        d = load(self.a.out, "c_tpot_vs_budget_deepseek_v2.json")
        self.p("## deepseek_v2: every policy at 25 / 50 %", "")
        if not d:
            self.p("Not run.", "")
            return
        mm = d["model"]
        self.p(f"deepseek_v2 **{mm['preset']}** ({mm['expert_bytes'] / MIB:.1f} MiB of BF16 experts), same prompt and "
               "settings as (c).", "", "| budget | system | TPOT s | TTFT s | hit rate | peak GiB | = resident |",
               "|---|---|---|---|---|---|---|")
        for r in d["rows"]:
            if r.get("ok"):
                self.p(f"| {r['budget_pct']}% | {r['system']} | {f3(r['tpot_s'])} | {f3(r['ttft_s'], 2)} | "
                       f"{f3(r.get('hit_rate'))} | {gib(r.get('peak_bytes'))} | {'yes' if r['bit_identical'] else '**NO**'} |")
            else:
                self.p(f"| {r['budget_pct']}% | {r['system']} | {'OOM under the cap' if r.get('oom') else 'failed'} | | | | |")
        self.p("")

    def exp_h(self):
        h = load(self.a.out, "h_embedded_vs_up_qwen2_moe.json")
        self.p("## (h) Embedded vs multi-process: `zipmoe serve` and `zipmoe up` measured the same way", "")
        if not h or "rows" not in h:
            self.p("Not run (or an older layout of this experiment).", "")
            return
        lc = h["config"]
        self.p(f"50 % budget, the same memory cap, the (l) requests (ShareGPT from #{h['prompt_offset']}, "
               f"{lc['requests']} requests of {lc['max_tokens']} new tokens, `--ignore-eos`), closed loop, one warm-up "
               "request first, TTFT/TPOT client-side (`bench/load.py`). `serve` runs every service as a thread of one "
               f"process; `up` runs {h.get('processes') or 'one process per service'} processes (ZeroMQ + the shared "
               "arena). `serve-separate-recovery` = serve with `--separate-recovery`: every missed expert is recovered "
               "to BF16 before it is computed, as up must do (its executor is another process and reads BF16 from the "
               "arena), instead of being multiplied straight from its E/SM planes; it tells how much of up's gap is "
               "that recovery rather than the processes and messages. Target (issue 20): up / serve TPOT ≤ 1.05 at "
               "concurrency 1, ≤ 1.10 at 4.", "")
        self.p("| concurrency | mode | TPOT p50 s | TTFT p50 s | tokens/s | / serve TPOT | target | met? | "
               "same text as serve |", "|---|---|---|---|---|---|---|---|---|")
        by = {(r.get("mode"), r.get("concurrency")): r for r in h["rows"] if r.get("ok")}
        for c in sorted({r.get("concurrency") for r in h["rows"] if r.get("concurrency")}):
            for mode in ("serve", "serve-separate-recovery", "up"):
                r = by.get((mode, c))
                if not r:
                    self.p(f"| {c} | {mode} | failed | | | | | | |")
                    continue
                s = r["summary"]
                tp = (s.get("tpot_s") or {}).get("p50")
                tt = (s.get("ttft_s") or {}).get("p50")
                ratio, target, met = "", "", ""
                base = by.get(("serve", c))
                if mode != "serve" and base and tp and (base["summary"].get("tpot_s") or {}).get("p50"):
                    x = tp / base["summary"]["tpot_s"]["p50"]
                    ratio = f"{x:.2f}"
                    if mode == "up":
                        target = 1.05 if c == 1 else 1.10
                        met = "yes" if x <= target else "**no**"
                        target = f"≤ {target}"
                same = "–" if mode == "serve" else ("yes" if r.get("same_text_as_serve") else "**NO**")
                self.p(f"| {c} | {mode} | {f3(tp)} | {f3(tt, 2)} | {f3(s.get('output_tokens_per_s'), 2)} | {ratio} | "
                       f"{target} | {met} | {same} |")
        for r in h["rows"]:
            if not r.get("ok") and r.get("error"):
                self.p("", f"{r.get('mode')}: failed: `{r['error'][:300]}`")
        self.p("")

    def prompt_text(self):
        m = self.meta
        if "prompt_index" not in m:
            return "prompt in meta.json"
        text = m.get("prompt", "")
        short = text if len(text) <= 80 else text[:77] + "..."
        return f"`{m.get('prompts_file')}` #{m['prompt_index']}: “{short}”"

    def plan_text(self):
        pp = self.meta.get("plan_prompts")
        if not pp:
            return "a *different* prompt"
        return f"{pp[1] - pp[0] + 1} *other* ShareGPT prompts (#{pp[0]}–{pp[1]}, one generation each)"

    def exp_l(self, name="l_load_qwen2_moe.json", title="## (l) Serving under load: ShareGPT requests over HTTP"):
        lj = load(self.a.out, name)
        self.p(title, "")
        if not lj:
            self.p("Not run.", "")
            return
        cfg = lj["config"]
        self.p(f"`zipmoe serve` (embedded, continuous batching, `--max-batch {max(cfg['concurrency'])}`) at "
               f"{lj['budget_pct']} % budget inside the same memory cap, started cold. `bench/load.py` streams "
               f"{cfg['requests']} real ShareGPT prompts (from #{lj['prompt_offset']}, at most "
               f"{cfg['max_prompt_chars']} characters) with `max_tokens` {cfg['max_tokens']}, temperature 0, "
               "`ignore_eos`, closed loop at each concurrency in turn (one fresh server per system; it stays up, so "
               "later rows run with a warmer cache). TTFT, TPOT and latency are client-side; **same text** = every "
               f"completion equals the first system's ({lj['rows'][0].get('system', '?') if lj['rows'] else '?'}) "
               "concurrency-1 completion of the same prompt (the suite fails otherwise).", "")
        self.p("| system | concurrency | ok | output tokens/s | req/s | TTFT p50 / p90 s | TPOT p50 / p90 s | "
               "latency p50 / p90 s | peak GiB | same text |", "|---|---|---|---|---|---|---|---|---|---|")
        for r in lj["rows"]:
            sm = r.get("summary") or {}
            if not sm:
                self.p(f"| {r['system']} | {r.get('concurrency', '–')} | failed: {r.get('error', '?')[:120]} "
                       "| | | | | | | |")
                continue

            def pp(key):
                d = sm.get(key) or {}
                return f"{f3(d.get('p50'))} / {f3(d.get('p90'))}"
            same = "–" if "same_text_as_first" not in r else ("yes" if r["same_text_as_first"] else "**NO**")
            self.p(f"| {r['system']} | {r['concurrency']} | {sm.get('ok')}/{sm.get('requests')} | "
                   f"{f3(sm.get('output_tokens_per_s'))} | {f3(sm.get('request_throughput_rps'))} | {pp('ttft_s')} | "
                   f"{pp('tpot_s')} | {pp('latency_s')} | {gib(r.get('peak_bytes'))} | {same} |")
        warm = self.warm_text(lj)
        if warm:
            self.p("", f"TPOT p50, warm server: {warm}. At concurrency 1 a warm step is compute-bound (see the "
                   "compute floor in the headline); at higher concurrency each step routes several sequences, touches "
                   "more distinct experts per layer and capacity binds, as at the lowest budget of (c). `serve` "
                   "reports no per-run hit rates to this suite, so the split is not shown here.")
        self.p("", "Rerun against any server (also `zipmoe up` or a Jetson): `/usr/bin/python3 bench/load.py --url "
               "http://HOST:PORT --concurrency 4 --requests 32 --out load.json` (`--rate R` for Poisson arrivals, "
               "`--check-against` an earlier output).", "")

    @staticmethod
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

    def warm_text(self, lj):
        """One sentence on (l)'s zipmoe/lru TPOT ratios, lowest and highest concurrency; "" without both."""
        conc = sorted(set((lj or {}).get("config", {}).get("concurrency", [])))
        parts = []
        for c in (conc[0], conc[-1]) if len(conc) > 1 else conc:
            w = self.load_ratio(lj, c)
            if w:
                parts.append(f"concurrency {c}: zipmoe/lru = **{w[0]:.2f}** ({f3(w[1])} vs {f3(w[2])} s)")
        return "; ".join(parts)

    # ------------------------------------------------------------------ (m)
    @staticmethod
    def cap_verdict(x, sw):
        """(text, met ≤ 1 or None when unknown, numeric ratio or None) of one cap of (m)'s sweep."""
        z, lc = x["zipmoe"], x["llama"]
        if x.get("ratio") is not None:
            return f"{x['ratio']:.2f}", x["ratio"] <= 1.0, x["ratio"]
        if lc.get("timed_out"):
            if x.get("ratio_partial") is not None:
                return (f"≈ {x['ratio_partial']:.2f} (llama.cpp timed out; mean of its {lc['steps_done']} finished "
                        "steps)", x["ratio_partial"] <= 1.0, x["ratio_partial"])
            if z.get("wall_s") is not None and z["wall_s"] < sw["llama_timeout_s"]:
                return (f"llama.cpp finished no decode step in {sw['llama_timeout_s']} s (zipmoe's whole run: "
                        f"{z['wall_s']:.0f} s)", True, None)
            return f"llama.cpp timed out after {sw['llama_timeout_s']} s", None, None
        if lc.get("oom"):
            return "llama.cpp OOM-killed under the cap", True, None
        return "llama.cpp failed", None, None

    @staticmethod
    def prefetch_view(x):
        """A row of (m)'s sweep as seen by its prefetching zipmoe run (zipmoe_prefetch in place of zipmoe)."""
        zp = x.get("zipmoe_prefetch") or {"ok": False, "error": "not run"}
        return dict(x, zipmoe=zp, ratio=x.get("ratio_prefetch"), ratio_partial=x.get("ratio_prefetch_partial"),
                    zipmoe_preload=zp.get("preload"))

    @staticmethod
    def cap_why(x, rows, sw):
        """Why zipmoe lost to llama.cpp at one cap of (m)'s sweep, from the two runs' counters."""
        xl, xz = x["llama"], x["zipmoe"]
        tpot_l = xl.get("tpot_s") or xl.get("tpot_s_partial")
        why = (f"at {gib(x['cap_bytes'])} GiB llama.cpp holds {max(0.0, x['llama_holds']):.0%} of its GGUF"
               + (f": it pages the file in while loading ({f3(xl.get('load_s'), 1)} s, not part of its TPOT) and then "
                  f"decodes from memory ({xl.get('major_faults')} major faults in the whole run, {f3(tpot_l)} s per "
                  "step)" if x["llama_holds"] >= 0.95 else
                  f" and pages ({xl.get('major_faults')} major faults, {f3(tpot_l)} s per step)")
               + (f", while zipmoe at a {xz['budget_pct']:.0f} % budget fills its cache on demand: hit rate "
                  f"{f3(xz.get('hit_rate'))}, {(xz.get('decode_read_bytes_per_token') or 0) / MIB:.0f} MiB of "
                  f"compressed experts read, decoded and recovered per decode step (a cold {sw.get('tokens')}-token "
                  "request)" if not x.get("zipmoe_preload") else
                  f"; zipmoe at a {xz['budget_pct']:.0f} % budget preloaded {x['zipmoe_preload']['experts']} experts "
                  f"({x['zipmoe_preload']['read_mib']:.0f} MiB in {x['zipmoe_preload']['seconds']:.1f} s, before the "
                  f"request) and then hit {f3(xz.get('hit_rate'))} of its lookups, reading "
                  f"{(xz.get('decode_read_bytes_per_token') or 0) / MIB:.0f} MiB per decode step, so I/O does not "
                  f"explain its TPOT ({f3(xz['tpot_s'])} s): its run also took {f3(xz.get('sys_s'), 1)} s of kernel "
                  f"CPU and {(xz.get('minor_faults') or 0) / 1e3:.0f}k minor faults (first touches of the arena while "
                  "preloading, in the same process), and what else slows its decode near the cap is not in this "
                  "run's counters"))
        others = [y["zipmoe"] for y in rows if y is not x and y["zipmoe"].get("ok") and y["zipmoe"].get("minor_faults")]
        ref = min(others, key=lambda z: z["tpot_s"], default=None)
        if ref and xz.get("evictions") == 0 and (xz.get("minor_faults") or 0) > ref["minor_faults"] and \
                xz["tpot_s"] > ref["tpot_s"]:
            cap_ref = next(y["cap_bytes"] for y in rows if y["zipmoe"] is ref)
            why += (f". Its TPOT is also {xz['tpot_s'] / ref['tpot_s']:.1f}× its own at {gib(cap_ref)} GiB "
                    f"({f3(ref['tpot_s'])} s): with a pool that never evicts (0 evictions), every expert placed during "
                    "decode lands on expert-arena pages touched for the first time: "
                    f"{xz['minor_faults'] / 1e3:.0f}k minor page faults and {f3(xz.get('sys_s'), 1)} s of kernel CPU "
                    f"in the run, vs {ref['minor_faults'] / 1e3:.0f}k and {f3(ref.get('sys_s'), 1)} s there "
                    f"({ref.get('evictions')} evictions: decode reuses evicted slots)")
        if (xz.get("others_cpu") or 0) > 0.3:
            why += f"; other work took {xz['others_cpu']:.2f} cores during zipmoe's run"
        return why

    def exp_m(self):
        mj = load(self.a.out, "m_llama_peer.json")
        self.p("## (m) llama.cpp as a peer: decode floor, warm TPOT / prefill, peak RSS, cold TPOT vs cap", "")
        if not mj:
            self.p("Not run.", "")
            return
        pc = mj["config"]
        fb = mj["floor_bytes"]
        best = mj.get("best") or {}
        z, l = best.get("zipmoe"), best.get("llama.cpp")
        rel = next((w.get("llama_cpp_release") for w in mj.get("warm", []) if w.get("llama_cpp_release")), None)
        disk = (self.meta.get("disk") or {}).get("odirect_gbps_1m")
        self.p(f"The peer: llama.cpp {rel or ''} (node-llama-cpp's prebuilt CPU build, `bench/llama_peer.mjs`) on a BF16 "
               f"GGUF of the same checkpoint ({gib(mj.get('gguf_bytes'))} GiB, `bench/gguf_writer.py`: the same BF16 "
               "bits, norms and routers widened to F32). Both get the same "
               f"{len(mj['prompt_ids'])} random prompt ids (seed {mj['seed']}) and `--threads {mj['threads']}`. "
               f"**Decode floor** = weight bytes one decode token reads / memory read bandwidth: "
               f"{fb['dense'] / MIB:.0f} MiB dense (attention, norms, shared experts, routers) + "
               f"{fb['routed'] / MIB:.0f} MiB routed (top-{fb['top_k']} of each of {fb['moe_layers']} MoE layers) + "
               f"{fb['lm_head'] / MIB:.0f} MiB lm_head{' (tied embedding)' if fb['tied_embeddings'] else ''} = "
               f"**{fb['total'] / GIB:.3f} GiB**; bandwidth = best of `membw_bench` (a 2 GiB float sum on "
               f"{mj['threads']} threads) before and after the warm runs: **{f3(mj.get('membw_gbps'), 1)} GB/s** "
               f"(median of its repetitions {f3(mj.get('membw_gbps_median'), 1)}), so the floor is "
               f"**{f3(mj.get('floor_s'), 4)} s**. Warm = every weight in the page cache (read in first; the "
               f"resident column says how much was), {1 + max((w['round'] for w in mj.get('warm') or []), default=-1)} "
               "interleaved rounds of zipmoe "
               f"(`executor_bench` on the HF directory: {pc['zipmoe_reps']} timed generations of "
               f"{pc['warm_decode']} + 1 tokens after a warm-up) and llama.cpp ({pc['warm_decode']} timed decode "
               "steps after 2 untimed, prefill = median of 3 after a warm-up), best of each: the VM's bandwidth "
               "drifts between runs. *Other work meanwhile* = CPU time the rest of the VM used during the run "
               "(`/proc/stat` busy time minus the run's own, in cores); while a system's best run shared the cores "
               f"with more than {mj.get('others_max', 0.3)} cores of it, another round runs (at most "
               f"{pc.get('extra_rounds', 0)}).", "")
        if mj.get("llama_error"):
            self.p(f"**llama.cpp could not run**: {mj['llama_error']}", "")
        rss = mj.get("rss") or {}
        sw = mj.get("sweep") or {}
        rows = sw.get("rows") or []
        vals = []  # (measure, target text, value text, met, why)

        def add(measure, target, value, ok, why=""):
            vals.append((measure, target, value, ok, why))
        eff = lambda t: fb["total"] / t / 1e9 if t else None  # noqa: E731  effective weight GB/s of a decode step
        if z and mj.get("floor_s"):
            r = z["tpot_s"] / mj["floor_s"]
            why = ""
            if r > 1.2:
                lr = f"llama.cpp's {l['tpot_s'] / mj['floor_s']:.2f}× ({f3(eff(l['tpot_s']), 1)} GB/s)" if l else ""
                l_busy = l and (l.get("others_cpu") or 0) > OTHERS_MAX
                z_busy = (z.get("others_cpu") or 0) > OTHERS_MAX
                why = (f"zipmoe's step streams its {fb['total'] / GIB:.2f} GiB at {f3(eff(z['tpot_s']), 1)} GB/s, "
                       f"{mj['membw_gbps'] / eff(z['tpot_s']):.1f}× below what a plain {mj['threads']}-thread sum reads"
                       + (f"; its best run shared the cores with {z['others_cpu']:.2f} cores of other work" if z_busy
                          else "")
                       + ("" if not l else
                          f"; {lr} shared the cores too ({l['others_cpu']:.2f} cores of other work), so it tells "
                          "nothing about the machine here" if l_busy else
                          f"; {lr} is far above the floor too, so on these cores a BF16 matrix-vector step is bound "
                          "by the per-byte work (widening BF16, FMAs, the per-layer threading), not by DRAM"
                          if l["tpot_s"] / mj["floor_s"] > 1.2 else
                          f"; {lr} comes closer, so the gap is zipmoe's kernels/threading, not the machine"))
            add("zipmoe warm TPOT / decode floor", "≤ 1.2", f"{r:.2f} ({f3(z['tpot_s'], 4)} / {f3(mj['floor_s'], 4)} s)",
                r <= 1.2, why)
        if z and l:
            r = z["tpot_s"] / l["tpot_s"]
            def busy(key):
                text = [f"{name}'s best run shared the cores with {b[key]:.2f} cores of other work"
                        for name, b in (("zipmoe", z), ("llama.cpp", l)) if (b.get(key) or 0) > 0.3]
                return f"; {', '.join(text)}" if text else ""
            add("zipmoe / llama.cpp warm TPOT", "≤ 1.0",
                f"{r:.2f} ({f3(z['tpot_s'], 4)} vs {f3(l['tpot_s'], 4)} s{busy('others_cpu')})", r <= 1.0,
                "" if r <= 1.0 else f"same bytes per step, zipmoe streams them at {f3(eff(z['tpot_s']), 1)} GB/s vs "
                f"llama.cpp's {f3(eff(l['tpot_s']), 1)} GB/s")
            r = z["prefill_tokens_per_s"] / l["prefill_tokens_per_s"]
            # ≈ FLOPs of the prefill: 2 per BF16 weight of what every prompt token uses (dense + top-k experts),
            # plus lm_head once (the last position's logits).
            n = len(mj["prompt_ids"])
            flops = 2 * ((fb["dense"] + fb["routed"]) * n + fb["lm_head"]) / 2
            gz, gl = flops * z["prefill_tokens_per_s"] / n / 1e9, flops * l["prefill_tokens_per_s"] / n / 1e9
            add("zipmoe / llama.cpp warm prefill tokens/s", "≥ 0.8",
                f"{r:.2f} ({z['prefill_tokens_per_s']:.1f} vs {l['prefill_tokens_per_s']:.1f} tok/s"
                f"{busy('prefill_others_cpu')})", r >= 0.8,
                "" if r >= 0.8 else
                f"a {n}-token prefill is a GEMM over ~{flops / 1e9:.1f} GFLOP; zipmoe's reaches ≈ {gz:.1f} GFLOP/s on "
                f"{mj['threads']} cores, llama.cpp's ≈ {gl:.1f} GFLOP/s: the gap is in the matrix kernels "
                "(and each token's experts are multiplied per expert, in small row groups), not in bytes read")
        if rss.get("peak_rss_bytes"):
            r = rss["peak_rss_bytes"] / rss["allowed_bytes"]
            add("peak RSS, all-resident `zipmoe generate` / (checkpoint × 1.05 + 512 MiB)", "≤ 1",
                f"{r:.2f} ({gib(rss['peak_rss_bytes'])} / {gib(rss['allowed_bytes'])} GiB)", r <= 1,
                "" if r <= 1 else f"{(rss['peak_rss_bytes'] - rss['weights_bytes']) / MIB:.0f} MiB above the "
                f"{gib(rss['weights_bytes'])} GiB of mapped checkpoint: torch, activations, KV cache and any copies")
        variants = [("zipmoe", rows, mj.get("cold50_over_warm"))]
        pf = pc.get("sweep_prefetch")
        if pf and any(x.get("zipmoe_prefetch") for x in rows):
            variants.append((f"zipmoe --prefetch {pf}", [self.prefetch_view(x) for x in rows],
                             mj.get("cold50_over_warm_prefetch")))
        for vname, rows_v, cold50 in variants:
            r50 = next((x for x in rows_v if (x.get("zipmoe") or {}).get("budget_pct") == 50 and x["zipmoe"].get("ok")), None)
            if cold50 is not None and r50:
                r = cold50
                zc = r50["zipmoe"]
                io = zc.get("decode_read_bytes_per_token")
                why = ""
                if r > 1.5:
                    why = (f"cold and capped, zipmoe's hit rate is {f3(zc.get('hit_rate'))}: it reads "
                           f"{(io or 0) / MIB:.0f} MiB of compressed experts per decode step"
                           + (f" (≥ {io / (disk * 1e9):.3f} s at the disk's {disk:.2f} GB/s)" if io and disk else "")
                           + " and decompresses them on its decompression worker, on the same 2 cores as the expert math"
                           + (f" ({zc['decompress_s']:.1f} s of decompression and {f3(zc.get('sys_s'), 1)} s of kernel CPU "
                              "over the run, prefill included)" if zc.get("decompress_s") is not None else "")
                           + f"; a single cold request of {sw.get('tokens')} tokens is mostly first touches"
                           + (f"; other work took {zc['others_cpu']:.2f} cores during the run"
                              if (zc.get("others_cpu") or 0) > 0.3 else ""))
                add(f"{vname} cold TPOT at 50 % budget (capped) / warm TPOT", "≤ 1.5",
                    f"{r:.2f} ({f3(zc['tpot_s'], 3)} / {f3(z['tpot_s'], 4)} s)", r <= 1.5, why)
            both = [x for x in rows_v if x.get("zipmoe", {}).get("ok") and not x["llama"].get("skipped")]
            verdicts = [(x, *self.cap_verdict(x, sw)) for x in both]
            judged = [(x, text, met, r) for x, text, met, r in verdicts if met is not None]
            if judged:
                num = [(r, x) for x, _, _, r in judged if r is not None]
                mx = max(num, key=lambda t: t[0]) if num else None
                n_to = sum(1 for x in both if x["llama"].get("timed_out"))
                text = (f"max {mx[0]:.2f} (at {gib(mx[1]['cap_bytes'])} GiB)" if mx else "–") + \
                    (f"; llama.cpp timed out at {n_to} of {len(both)} caps" if n_to else "")
                ok = all(met for _, _, met, _ in judged)
                worst = max((t for t in judged if not t[2] and t[3] is not None), key=lambda t: t[3], default=None)
                add(f"{vname} / llama.cpp cold TPOT, every cap", "≤ 1", text, ok,
                    self.cap_why(worst[0], rows_v, sw) if worst and not ok else "")
            half = [(x, text, met, r) for x, text, met, r in verdicts
                    if x.get("llama_holds") is not None and x["llama_holds"] <= 0.5]
            if half:
                hv = [(x, text, r is not None and r <= 0.25 or (r is None and met)) for x, text, met, r in half
                      if met is not None]
                ok = bool(hv) and all(m for _, _, m in hv)
                worst = max(((x, r) for x, _, _, r in half if r is not None and r > 0.25), key=lambda t: t[1],
                            default=None)
                add(f"{vname} / llama.cpp cold TPOT where llama.cpp holds ≤ half its GGUF", "≤ 0.25",
                    "; ".join(f"{text} at {gib(x['cap_bytes'])} GiB" for x, text, _, _ in half), ok,
                    self.cap_why(worst[0], rows_v, sw) if worst else "")
        if vals:
            self.p("| measure | target | measured | met? | why missed (from this run's data) |", "|---|---|---|---|---|")
            for measure, target, value, ok, why in vals:
                self.p(f"| {measure} | {target} | {value} | {'yes' if ok else '**no**'} | {why if not ok else ''} |")
            self.p("")
        warm = mj.get("warm") or []
        if warm:
            self.p("| round | system | TPOT s | prefill tok/s | weights resident | other work meanwhile (cores) | "
                   "group peak GiB (own memory) |", "|---|---|---|---|---|---|---|")
            for w in warm:
                res = "–" if w.get("resident") is None else f"{w['resident']:.0%}"
                if w.get("ok"):
                    self.p(f"| {w['round'] + 1} | {w['system']} | {f3(w['tpot_s'], 4)} | {w['prefill_tokens_per_s']:.1f} | "
                           f"{res} | {f3(w.get('others_cpu'), 2)} | {gib(w.get('peak_bytes'))} |")
                else:
                    self.p(f"| {w['round'] + 1} | {w['system']} | failed: {w.get('error', '')} | | {res} | | |")
            bws = ", ".join(f"{b['gbps']:.1f}" + (f" (other work meanwhile: {b['others_cpu']:.2f} cores)"
                                                  if b.get("others_cpu") is not None else "")
                            for b in mj.get("membw") or [])
            self.p("", f"membw_bench best per run: {bws} GB/s. " + (
                f"All-resident `zipmoe generate` (the RSS run): TPOT {f3(rss.get('tpot_s'), 4)} s, peak RSS "
                f"{gib(rss.get('peak_rss_bytes'))} GiB for a {gib(rss.get('weights_bytes'))} GiB checkpoint (RSS "
                "counts the mapped checkpoint pages)." if rss.get("peak_rss_bytes") else ""), "")
        if sw.get("skipped"):
            self.p(f"Cold sweep skipped: {sw['skipped']}.", "")
            return
        if not rows:
            return
        self.p(f"**Cold TPOT vs cap.** Both systems run in the cgroup at each cap with the page cache dropped first, "
               f"{sw['tokens']} new tokens (llama.cpp: its prefill twice, then {sw['tokens'] - 1} timed decode steps). "
               f"zipmoe runs the compressed directory with `--memory-budget` = cap − its overhead "
               f"({gib(sw['zipmoe_overhead_bytes'])} GiB, the calibration above), at least its minimum of one staging "
               f"slot ({(sw.get('zipmoe_min_budget_bytes') or 0) / MIB:.1f} MiB), and `--preload --plan-trace` (the "
               f"warm-up trace above): before the request it fills its pools to the plan, the experts the trace "
               f"selects most placed by rank (\"its preload\": seconds and MiB read; before the request, so in neither "
               f"its TTFT nor its TPOT), as llama.cpp reads its model while loading (\"its load\"). llama.cpp maps the GGUF and pages "
               f"through the capped page cache; its overhead ({gib(sw.get('llama_overhead_bytes'))} GiB) is its warm "
               f"runs' own group peak ({gib(sw.get('llama_warm_peak_bytes'))} GiB: node, buffers, KV) + 256 MiB, so "
               "\"holds\" = (cap − that) / GGUF size. A llama.cpp run longer than "
               f"{sw['llama_timeout_s']} s is stopped and counted as timed out.", "")
        if plt:
            plt.figure(figsize=(6.4, 3.6))
            series = [("zipmoe", "zipmoe", COLORS["zipmoe"]), ("llama", "llama.cpp", "C5")]
            if pc.get("sweep_prefetch"):
                series.insert(1, ("zipmoe_prefetch", f"zipmoe --prefetch {pc['sweep_prefetch']}", "C2"))
            for key, name, color in series:
                pts = sorted((x["cap_bytes"] / GIB, x[key]["tpot_s"]) for x in rows if (x.get(key) or {}).get("ok"))
                if pts:
                    plt.plot([a for a, _ in pts], [b for _, b in pts], "o-", color=color, label=name)
            part = [(x["cap_bytes"] / GIB, x["llama"]["tpot_s_partial"]) for x in rows
                    if not x["llama"].get("ok") and x["llama"].get("tpot_s_partial")]
            if part:
                plt.scatter([a for a, _ in part], [b for _, b in part], marker="o", facecolors="none", color="C5",
                            s=50, label=f"llama.cpp, timed out ({sw['llama_timeout_s']} s): its finished steps")
            finite = [x[k]["tpot_s"] for x in rows for k in ("zipmoe", "llama") if x[k].get("ok")] + [b for _, b in part]
            top = max(finite) * 2 if finite else 1
            lost = [x["cap_bytes"] / GIB for x in rows if not x["llama"].get("ok") and not x["llama"].get("skipped")
                    and not x["llama"].get("tpot_s_partial")]
            if lost:
                plt.scatter(lost, [top] * len(lost), marker="x", color="C5", s=60,
                            label=f"llama.cpp: no decode step in {sw['llama_timeout_s']} s, or failed")
            if z:
                plt.axhline(z["tpot_s"], color=COLORS["zipmoe"], ls=":", lw=1, label="zipmoe warm")
            if mj.get("floor_s"):
                plt.axhline(mj["floor_s"], color="k", ls="--", lw=1, label="decode floor (bytes / bandwidth)")
            plt.yscale("log")
            plt.xlabel("memory cap (GiB): RSS + page cache of the run")
            plt.ylabel("TPOT (s), log")
            plt.grid(alpha=0.3, which="both")
            plt.legend(fontsize=7)
            plt.title(f"qwen2_moe mini, cold, {sw['tokens']} tokens: TPOT vs cap", fontsize=9)
            self.fig("m_llama_peer_tpot_vs_cap.png", "TPOT vs memory cap, zipmoe and llama.cpp")
        pf = pc.get("sweep_prefetch")
        self.p("| cap GiB | which cap | llama.cpp holds | zipmoe budget | zipmoe TPOT s | TTFT s | its preload s (MiB) | "
               "hit rate | read MiB / step | llama.cpp TPOT s | its load s | its major faults | other work z / l (cores) | "
               "zipmoe / llama.cpp | target | met? |"
               + (f" zipmoe --prefetch {pf}: TPOT s (prefetch accuracy) | its ratio | met? |" if pf else ""),
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|---|" if pf else ""))
        for x in rows:
            zc, lc = x["zipmoe"], x["llama"]
            target = 0.25 if x.get("llama_holds") is not None and x["llama_holds"] <= 0.5 else 1.0
            if zc.get("ok"):
                pre = x.get("zipmoe_preload")
                pre_t = f"{pre['seconds']:.1f} ({pre['read_mib']:.0f})" if pre else "–"
                zt = f"{f3(zc['tpot_s'])} | {f3(zc.get('ttft_s'), 2)} | {pre_t} | {f3(zc.get('hit_rate'))} | " \
                     f"{(zc.get('decode_read_bytes_per_token') or 0) / MIB:.0f}"
            else:
                zt = f"{zc.get('error', 'failed')} | | | |"
            if lc.get("ok"):
                lt = f3(lc["tpot_s"])
            elif lc.get("skipped"):
                lt = "not run at this cap"
            elif lc.get("timed_out"):
                lt = (f"timed out ({sw['llama_timeout_s']} s): {lc['steps_done']} of {sw['tokens'] - 1} steps, mean "
                      f"{f3(lc['tpot_s_partial'])}" if lc.get("tpot_s_partial") else
                      f"timed out ({sw['llama_timeout_s']} s) after {lc.get('prefills_done', 0)} of 2 prefills, "
                      "no decode step")
            else:
                lt = (lc.get("error") or "failed").split(" (")[0]
            ratio, met = "–", "–"
            if zc.get("ok") and not lc.get("skipped"):
                text, ok, r = self.cap_verdict(x, sw)
                ratio = text.split(" (")[0] if r is not None else text
                if r is not None:
                    met = "yes" if r <= target else "**no**"
                elif ok is not None:
                    met = "yes" if ok else "**no**"
            holds = "–" if x.get("llama_holds") is None else f"{max(0.0, x['llama_holds']):.0%}"
            extra = ""
            if pf:
                v = self.prefetch_view(x)
                zp = v["zipmoe"]
                acc = (zp.get("prefetch") or {}).get("accuracy")
                pt = f"{f3(zp['tpot_s'])} ({f3(acc, 2)})" if zp.get("ok") else zp.get("error", "failed").split(" (")[0]
                pr, pm = "–", "–"
                if zp.get("ok") and not lc.get("skipped"):
                    text, ok, r = self.cap_verdict(v, sw)
                    pr = text.split(" (")[0] if r is not None else text
                    pm = ("yes" if r <= target else "**no**") if r is not None else \
                        ("–" if ok is None else "yes" if ok else "**no**")
                extra = f" {pt} | {pr} | {pm} |"
            self.p(f"| {gib(x['cap_bytes'])} | {x['label']} | {holds} | {zc.get('budget_pct')} % | {zt} | {lt} | "
                   f"{f3(lc.get('load_s'), 1)} | {lc.get('major_faults', '–')} | {f3(zc.get('others_cpu'), 2)} / "
                   f"{f3(lc.get('others_cpu'), 2)} | {ratio} | ≤ {target} | {met} |{extra}")
        diff = [x for x in rows if x["zipmoe"].get("ok") and x["zipmoe"].get("same_tokens_as_resident") is False]
        self.p("", "zipmoe's tokens in every cold run " + (
            "equal the all-resident run's." if not diff else
            f"**differ from the all-resident run's at {len(diff)} cap(s)**.") + " llama.cpp computes in its own order "
            "and precision (BF16 activations in its matrix products), so its tokens may drift from zipmoe's after a "
            "few steps; `bench/peer_check.py` checks that the two carry the same model.", "")

    def ablation_table(self, rows, read_digits):
        """(f)'s table: one row per generation (budget, system, TPOT, throughput, hit rate, MiB read, bit-exact)."""
        self.p("| budget | system | TPOT s | tokens/s | hit rate | read MiB | prefetch accuracy (used / issued) | "
               "wasted MiB | = resident |", "|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if not r.get("ok"):
                self.p(f"| {r['budget_pct']}% | {r['system']} | failed: {r.get('error', '')[:120]} | | | | | | |")
                continue
            pf = r.get("prefetch") or {}
            acc = (f"{f3(pf.get('accuracy'), 2)} ({pf.get('used')} / {pf.get('issued')})" if pf.get("issued") else "–")
            wasted = f"{pf['wasted_bytes'] / MIB:.{read_digits}f}" if pf.get("issued") else "–"
            self.p(f"| {r['budget_pct']}% | {r['system']} | {f3(r['tpot_s'])} | {f3(r['tokens_per_s'], 2)} | "
                   f"{f3(r.get('hit_rate'))} | {r['read_bytes'] / MIB:.{read_digits}f} | {acc} | {wasted} | "
                   f"{'yes' if r['bit_identical'] else '**NO**'} |")

    def exp_t(self):
        t = load(self.a.out, "t_trained.json")
        self.p("## (t) The trained model: learned routing statistics and the eviction ablation on it", "")
        if not t:
            self.p("Not run.", "")
            return
        self.p(f"`models/{t['model']}` ({t['card']}): a Qwen2-MoE trained here on English text Debian ships and ShareGPT "
               "prompts, with a learned byte-level BPE tokenizer. Synthetic checkpoints route by construction "
               "(`--router-skew`); a trained router's statistics are what caches and prefetchers see on real "
               "models. Routing statistics over the decode steps of ShareGPT prompts #300… (batch 1, greedy, "
               "`bench/routing_stats.py`): **top-10 % share** = share of a layer's activations that go to its 10 % "
               "most used experts; **reuse** = share of a token's experts at a layer that the previous token also "
               "used there; **next-layer recall** = share of layer l+1's experts predicted from layer l's by a "
               "co-occurrence table fitted on the other half of the prompts (2-fold), against predicting l+1's most "
               "popular experts; uniform routing's value in parentheses.", "")
        self.p(routing_stats.markdown(t["routing"]))
        ok = [r for r in t["rows"] if r.get("ok")]
        self.p(f"Eviction ablation on the trained model (as (f): cold, capped, {t['tokens']} new tokens, the same "
               "ShareGPT prompt; zipmoe's plan fitted to warm-up runs on other prompts):", "")
        self.ablation_table(ok, read_digits=1)
        texts = [r.get("text") for r in ok if r.get("text")]
        if texts:
            self.p("", f"Its greedy continuation of the prompt (every row generated the same): “{texts[0].strip()[:400]}”")
        self.p("")
        self.exp_l("l_load_qwen2_moe-trained.json", "### (l) on the trained model: ShareGPT requests over HTTP")

    def exp_s(self):
        s = load(self.a.out, "s_substitution.json")
        self.p("## (s) SMoE expert substitution: accuracy against speed for the threshold α", "")
        if not s:
            self.p("Not run.", "")
            return
        self.p(f"`--policy smoe --substitution-alpha α` at a {s['budget_pct']} % budget, cold and capped, "
               f"{s['tokens']} new tokens (greedy) per ShareGPT prompt from #{s['prompt_index']}, against the exact "
               "all-resident run of the same prompt. A selected expert scoring below (1+α)·S_k+1 that the cache "
               "does not hold in F is replaced by a cached (or elsewhere top-scored) expert scoring at least "
               "(1−α)·S_k+1; α = 0 is the exact model. **KL** = KL(exact ‖ substituted) of the next-token "
               "distributions, in nats, and **top-1** = share of positions whose most likely token is the exact "
               "run's, both over the positions whose inputs are still the same in the two runs (every prompt "
               "position, then the decode steps up to the first differing token); **same tokens** = greedy decode "
               "steps before the first difference, over all steps; **substituted** = share of routed (token, expert) "
               "pairs replaced. TPOT: median over the prompts.", "")
        self.p("| model | α | prompts | positions | KL mean | KL max | top-1 | same tokens | substituted | TPOT s | "
               "hit rate |", "|---|---|---|---|---|---|---|---|---|---|---|")
        for r in s["rows"]:
            self.p(f"| {r['model']} | {r['alpha']} | {r['prompts']} | {r['positions']} | {r['kl_mean']:.2e} | "
                   f"{(r['kl_max'] or 0):.2e} | {r['top1_agreement']:.3f} | {r['same_token_steps']} / "
                   f"{r['decode_steps']} | {r['substituted_rate']:.3f} | {f3(r['tpot_s'])} | {f3(r['hit_rate'])} |")
        self.p("")

    def exp_q(self):
        q = load(self.a.out, "q_request_grouping_qwen2_moe.json")
        self.p("## (q) CoServe's request grouping in `zipmoe serve`", "")
        if not q:
            self.p("Not run.", "")
            return
        qc = q["config"]
        self.p(f"`zipmoe serve --policy coserve --max-batch {qc['max_batch']}` at a {q['budget_pct']} % budget inside "
               f"the same memory cap, started cold; `bench/load.py` keeps {qc['concurrency']} clients busy (closed loop) "
               f"with {qc['requests']} ShareGPT requests from #{q['prompt_offset']} (at most {qc['max_prompt_chars']} "
               f"characters, {qc['max_tokens']} new tokens, `--ignore-eos`), so sequences wait for a batch slot. "
               "`none` admits them first come, first served; `coserve` (`--request-grouping coserve`) admits the one "
               "of the first 8 waiting whose predicted experts are most at hand (docs/policies.md \"Request "
               "grouping\"). **grouped** = admissions that skipped an older waiting sequence. Hit rate and bytes read "
               "from the server's /metrics after the run (expert lookups, prefill included); TTFT and latency "
               "client-side.", "")
        self.p("| grouping | tokens/s | TTFT p50 s | TTFT p90 s | latency p90 s | TPOT p50 s | hit rate | read MiB | "
               "grouped / admitted | same text as none |", "|---|---|---|---|---|---|---|---|---|---|")
        for r in q["rows"]:
            if not r.get("summary"):
                self.p(f"| {r['grouping']} | failed: {r.get('error', '')[:100]} | | | | | | | | |")
                continue
            s = r["summary"]
            pct = lambda k, p: (s.get(k) or {}).get(p)  # noqa: E731
            admitted = (r.get("admitted_fifo") or 0) + (r.get("admitted_grouped") or 0)
            same = "–" if r["grouping"] == "none" else ("yes" if r.get("same_text_as_none") else "**NO**")
            self.p(f"| {r['grouping']} | {f3(s.get('output_tokens_per_s'), 2)} | {f3(pct('ttft_s', 'p50'), 2)} | "
                   f"{f3(pct('ttft_s', 'p90'), 2)} | {f3(pct('latency_s', 'p90'), 2)} | {f3(pct('tpot_s', 'p50'))} | "
                   f"{f3(r.get('hit_rate'))} | {(r.get('read_bytes') or 0) / 2**20:.0f} | "
                   f"{int(r.get('admitted_grouped') or 0)} / {int(admitted)} | {same} |")
        self.p("")

    def exp_i(self):
        i = load(self.a.out, "i_gpu.json")
        self.p("## (i) GPU", "")
        self.p(("Skipped: " + i["reason"] + ".") if i and i["skipped"] else (i or {}).get("reason", "Not run."), "")

    # ------------------------------------------------------------------ assemble
    def write(self):
        self.header()
        c = self.exp_c()
        head_at = len(self.md)
        rp = self.exp_r()
        self.exp_a()
        self.exp_b()
        self.exp_g()
        self.exp_f()
        self.exp_xy("d_batch_qwen2_moe.json", "(d) Throughput vs batch size at 50 % (Fig. 8)", "batch", "batch",
                    "tokens_per_s", "tokens/s (all sequences)", "d_batch.png")
        self.exp_xy("e_length_qwen2_moe.json", "(e) Latency vs output length at 50 % (Fig. 9)", "tokens",
                    "new tokens", "total_s", "generation latency (s): prefill + decode", "e_length.png")
        self.deepseek()
        self.exp_h()
        self.exp_l()
        self.exp_m()
        self.exp_t()
        self.exp_s()
        self.exp_q()
        self.exp_i()
        body = self.md[head_at:]
        self.md = self.md[:head_at]
        self.headline(c, rp)
        self.md += body
        errs = self.meta.get("experiment_errors")
        if errs:
            self.p("## Experiments that failed in this run", "", *[f"- ({k}) `{v[:300]}`" for k, v in errs.items()], "")
        if self.meta.get("bit_exact_failures"):
            self.p("## BIT-EXACTNESS FAILURES", "", *[f"- {t}" for t in self.meta["bit_exact_failures"]], "")
        secs = self.meta.get("experiment_seconds", {})
        self.p("Seconds per experiment in this run: " + ", ".join(f"{k} {v:.0f}" for k, v in secs.items()) + ".", "")
        template = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks_template.md")
        if os.path.exists(template):
            self.md += ["", open(template).read().rstrip()]
        text = "\n".join(self.md).rstrip() + "\n"
        tmp = self.a.docs + ".tmp"
        open(tmp, "w").write(text)
        os.replace(tmp, self.a.docs)
        # The JSON results next to the figures, so the report's numbers can be traced.
        for path in glob.glob(os.path.join(self.a.out, "*.json")):
            shutil.copy(path, self.figs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", required=True)
    ap.add_argument("--figures", required=True)
    ap.add_argument("--command", default="bench/run.sh")
    a = ap.parse_args()
    if plt is None:
        print("W: matplotlib missing (use /usr/bin/python3 with python3-matplotlib): tables only", file=sys.stderr)
    Report(a).write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
