#!/usr/bin/python3
"""MXFP4 experts against the same experts widened to BF16, end to end (issue 41's target: warm decode TPOT of
the MXFP4 gpt_oss mini / the same mini with BF16 experts <= 0.45).

  bench/mxfp4_decode.py --build build [--work DIR] [--rounds 5] [--threads 2] [--decode-tokens 16] [--preset mini]

Makes `zipmoe synth --arch gpt_oss --preset PRESET` (MXFP4 experts as released) and its BF16-widened twin
(scripts/gpt_oss_widen.py: dequantized exactly, transformers' dense layout), reads both into the page cache,
then runs `executor_bench DIR --prompt-ids IDS --decode-tokens D --reps 2` on each, interleaved round by
round (the machine's memory bandwidth drifts: only rounds taken side by side compare). Reports per round the
TPOT of each (the best repetition of the round) and their ratio, then the median ratio, the machine, and
which matrix kernel ran. Both directories compute the same function (the logits are byte-equal:
tests/reference/check_logits.py's gpt_oss+bf16 case), so the ratio is the cost of reading and decoding the
experts. Prints a markdown table; exit 0 (a measurement, not a test).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

TARGET = 0.45
HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-3000:]}")
    return p.stdout


def warm(path):
    for root, _, files in os.walk(path):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                while fh.read(1 << 24):
                    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/zipmoe_mxfp4_decode")
    ap.add_argument("--preset", default="mini")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", type=int, default=16)
    args = ap.parse_args()
    zipmoe = os.path.join(args.build, "bin", "zipmoe")
    bench = os.path.join(args.build, "bin", "executor_bench")
    mx = os.path.join(args.work, f"gpt_oss-{args.preset}")
    wide = mx + "-bf16"
    if not os.path.exists(os.path.join(mx, "config.json")):
        run([zipmoe, "synth", "--arch", "gpt_oss", "--preset", args.preset, "--seed", "7", "--out", mx])
    if not os.path.exists(os.path.join(wide, "config.json")):
        run([sys.executable, os.path.join(HERE, "..", "scripts", "gpt_oss_widen.py"), mx, wide])
    ids = ",".join(str(i) for i in range(1000, 1016))
    rows = []
    for r in range(args.rounds):
        tpot = {}
        for name, d in (("mxfp4", mx), ("bf16", wide)):
            warm(d)
            out = run([bench, d, "--threads", str(args.threads), "--prompt-ids", ids, "--decode-tokens",
                       str(args.decode_tokens), "--reps", "2"])
            reps = [float(t) for t in re.findall(r"tpot ([0-9.]+) s", out)]
            if not reps:
                sys.exit(f"executor_bench printed no TPOT:\n{out}")
            tpot[name] = min(reps)
            kernel = re.search(r"gemm isa (\w+)", out)
            tpot["kernel"] = "zipmoe's kernel " + (kernel.group(1) if kernel else "?")
        rows.append((r + 1, tpot["mxfp4"], tpot["bf16"], tpot["mxfp4"] / tpot["bf16"], tpot["kernel"]))
    ratios = [r[3] for r in rows]
    med = statistics.median(ratios)
    model, flags = benchlib.cpu_model_and_flags()
    flags = " ".join(sorted(f for f in flags if f.startswith(("avx", "fma", "f16c", "amx", "asimd", "bf16", "i8mm"))))
    print(f"machine: {model}; flags: {flags}; {args.threads} threads; {args.preset} gpt_oss, 16 prompt ids, "
          f"{args.decode_tokens} decode tokens, {args.rounds} interleaved rounds")
    print("| round | MXFP4 TPOT s | BF16 TPOT s | MXFP4 / BF16 |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.4f} | {r[2]:.4f} | {r[3]:.2f} |")
    print(f"median MXFP4 / BF16 TPOT: {med:.2f} (target <= {TARGET}: {'met' if med <= TARGET else 'not met'}); "
          f"{rows[-1][4]}")


if __name__ == "__main__":
    main()
