#!/usr/bin/python3
"""Turns the JSON files of one bench/suite.py run (OUT/*.json) into PNG figures and the generated
docs/benchmarks.md: the header (machine, memory cap) here, then each experiment's section from its module in
bench/experiments/ (experiments.SECTIONS has the page's order), then the prose that does not change between runs,
bench/benchmarks_template.md (the "Background:" sections of hand runs included). Every number in the output
comes from OUT; nothing is typed in by hand.

Usage: bench/report.py --out OUT --docs docs/benchmarks.md --figures docs/bench [--command "bench/run.sh --quick"]
"""
import argparse
import glob
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiments  # noqa: E402
from benchlib import COLORS, DPI, f3, gib, load, pyplot  # noqa: E402


class Report:
    """What every experiment's report(report) gets: the options (a: out, docs, figures, command), meta.json
    (meta), the figure backend (plt, None without matplotlib), p() to add lines, fig() to save the current
    figure and link it, and the helpers several sections share."""

    def __init__(self, a):
        self.a = a
        self.plt = pyplot()
        self.meta = json.load(open(os.path.join(a.out, "meta.json")))
        self.md = []
        self.figs = a.figures
        os.makedirs(self.figs, exist_ok=True)
        self.rel = os.path.relpath(self.figs, os.path.dirname(os.path.abspath(a.docs)))

    def p(self, *lines):
        self.md.extend(lines)

    def fig(self, name, title):
        path = os.path.join(self.figs, name)
        self.plt.tight_layout()
        self.plt.savefig(path, dpi=DPI)
        self.plt.close()
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
        ran = m.get("experiment_seconds") or {}
        cuts = [e.quick_note(m.get("cfg") or {}) for e in experiments.REGISTRY
                if hasattr(e, "quick_note") and e.NAME in ran]
        cuts = [c for c in cuts if c]
        if m["mode"] == "quick" and cuts:
            self.p("**Quick mode** runs fewer rounds and points than `--full` to stay within its 15 minutes on 2 "
                   "cores, so its ratios are noisier: " + "; ".join(cuts) + ".", "")
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

    # ------------------------------------------------------------------ shared by sections

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

    def xy_section(self, pattern, title, xkey, xlabel, ykey, ylabel, png):
        """(d) and (e): one x/y figure of the rows that ran and their table."""
        plt = self.plt
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

    # ------------------------------------------------------------------ assemble

    def write(self):
        self.header()
        for section in experiments.SECTIONS:
            section(self)
        errs = self.meta.get("experiment_errors")
        if errs:
            self.p("## Experiments that failed in this run", "", *[f"- ({k}) `{v[:300]}`" for k, v in errs.items()], "")
        if self.meta.get("bit_exact_failures"):
            self.p("## BIT-EXACTNESS FAILURES", "", *[f"- {t}" for t in self.meta["bit_exact_failures"]], "")
        secs = self.meta.get("experiment_seconds", {})
        prep = self.meta.get("prepare_seconds")
        self.p("Seconds per experiment in this run: " + ", ".join(f"{k} {v:.0f}" for k, v in secs.items())
               + (f"; before them {prep:.0f} s for the mini model, the disk, the calibration and the reference"
                  if prep is not None else "") + ".", "")
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
    if pyplot() is None:
        print("W: matplotlib missing (use /usr/bin/python3 with python3-matplotlib): tables only", file=sys.stderr)
    Report(a).write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
