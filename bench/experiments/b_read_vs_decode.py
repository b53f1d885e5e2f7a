"""(b) Reading vs decoding the same bytes with 1..cores threads (ZipMoE Fig. 4): codec_bench's decode and read rows,
alone and with the other side running on the same cores; its report section. An experiment of bench/suite.py
(bench/experiments/__init__.py)."""
import os
import re
import signal
import subprocess
import time

import benchlib as bl
from benchlib import f3, load

NAME = "b"
NEEDS = ()
# codec_bench --io_mib: MiB each read row reads.
CONFIG = {"quick": {"codec_sections": "ratio,threads,io", "io_mib": 256},
          "full": {"codec_sections": "ratio,threads,io", "io_mib": 1024}}


def codec_bench(s, sections, log, extra=()):
    """Runs codec_bench and parses its decode-thread rows and read rows."""
    p = subprocess.run([os.path.join(s.a.bin, "codec_bench"), f"--sections={sections}",
                        f"--io_dir={s.a.models}", f"--io_mib={s.cfg['io_mib']}", "--min_seconds=0.2",
                        f"--threads={s.threads}", *extra], capture_output=True, text=True)
    open(os.path.join(s.logs, log), "w").write(p.stdout + p.stderr)
    decode, read = [], []
    num = re.compile(r"([0-9.]+) \(([0-9.]+)\)")
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            k16, k4 = num.match(cells[1]), num.match(cells[3])
            decode.append({"threads": int(cells[0]), "k16_gbps": float(k16.group(1)) if k16 else None,
                           "k4_gbps": float(k4.group(1)) if k4 else None})
        elif len(cells) == 2 and cells[0].startswith(("O_DIRECT", "buffered")):
            g = num.match(cells[1])
            t = re.search(r"(\d+) thread", cells[0])
            read.append({"read": cells[0], "threads": int(t.group(1)) if t else 1,
                         "gbps": float(g.group(1)) if g else None})
    return decode, read


def run(s):
    m = s.mini
    decode, read = codec_bench(s, "threads,io", "codec_bench_threads_io.log")
    # The same with the other side running concurrently on the same cores: decode while a loop of
    # O_DIRECT reads of the model's experts file runs, and O_DIRECT reads (dd) while a 1-thread
    # decode loop runs.
    experts = os.path.join(m["zstd"], max(os.listdir(m["zstd"]),
                                          key=lambda f: os.path.getsize(os.path.join(m["zstd"], f))))
    loop = subprocess.Popen(["bash", "-c", f"while :; do dd if='{experts}' of=/dev/null bs=1M count=1024 "
                                           "iflag=direct 2>/dev/null; done"], start_new_session=True)
    try:
        decode_busy, _ = codec_bench(s, "threads", "codec_bench_threads_with_reads.log")
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
    alone = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
    loop = subprocess.Popen(["bash", "-c", f"while :; do '{os.path.join(s.a.bin, 'codec_bench')}' "
                                           "--sections=threads --threads=1 --min_seconds=0.2 >/dev/null; done"],
                            start_new_session=True)
    try:
        time.sleep(1)
        busy = [v for v in (bl.dd_direct_gbps(experts, "1M", 512) for _ in range(3)) if v]
    finally:
        os.killpg(loop.pid, signal.SIGKILL)
        loop.wait()
    med = (lambda v: sorted(v)[len(v) // 2] if v else None)
    s.save("b_read_vs_decode", {"decode": decode, "read": read, "decode_with_reads": decode_busy,
                                "dd_read_gbps": med(alone), "dd_read_with_decode_gbps": med(busy),
                                "note": "decode: GB/s of exponent bytes out, zstd level 1, disjoint E-chunks; "
                                           "read: GB/s of a 1-file sequential read; both wall-clock medians"})


# ------------------------------------------------------------------ report

def report(rep):
    plt = rep.plt
    b = load(rep.a.out, "b_read_vs_decode.json")
    rep.p("## (b) Reading vs decoding the same bytes, 1..cores threads (Fig. 4)", "")
    if not b:
        rep.p("Not run.", "")
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
        rep.fig("b_read_vs_decode.png", "read vs decode throughput")
    busy = {x["threads"]: x for x in b.get("decode_with_reads") or []}
    rep.p("| threads | decode K=16 GB/s | decode K=4 GB/s | K=16 with concurrent reads | K=4 with concurrent reads |",
          "|---|---|---|---|---|")
    for x in b["decode"]:
        y = busy.get(x["threads"], {})
        rep.p(f"| {x['threads']} | {f3(x['k16_gbps'], 2)} | {f3(x['k4_gbps'], 2)} | {f3(y.get('k16_gbps'), 2)} | "
              f"{f3(y.get('k4_gbps'), 2)} |")
    rep.p("", "| read | GB/s |", "|---|---|")
    for x in b["read"]:
        rep.p(f"| {x['read']} | {f3(x['gbps'], 2)} |")
    if "dd_read_gbps" in b:
        rep.p(f"| dd O_DIRECT 1 MiB, the model's experts file, alone | {f3(b['dd_read_gbps'], 2)} |",
              f"| the same while a 1-thread decode loop runs | {f3(b.get('dd_read_with_decode_gbps'), 2)} |")
    rep.p("", f"{b['note']}. \"Concurrent\": the other side runs at the same time on the same cores (a loop of "
          "O_DIRECT `dd` reads of the experts file during the decode rows; a `codec_bench` decode loop during "
          "the `dd` rows).", "")

# ------------------------------------------------------------------ (g)
