#!/usr/bin/python3
"""Compares zipmoe's logits with the independent numpy reference (moe_reference.py).

  check_logits.py --zipmoe PATH [--arch A[,B..]] [--seed S] [--work-dir DIR] [--keep]
      For each architecture: `zipmoe synth --preset tiny`, `zipmoe compress --shards 4`, then
      `zipmoe generate --logits-out` (greedy) on the HF dir and on the compressed dir. Every row of
      each logits file is compared with the reference forward over the full fed sequence (prompt +
      the greedy tokens fed back, read from the argmax of the rows themselves):
      max|zipmoe - ref| <= 1e-4 * max|ref| per row. Exit 1 on any failure (arch, dir kind, row named).
      Synth variants follow the presets (deepseek_v2 --q-lora-rank, qwen3_moe sharded, mixtral
      --router-skew, FP8 checkpoints); --base-only skips them. Archs of ARCHS_PENDING (implemented
      here before `zipmoe synth` offers them: afmoe) are compared only when named, their variants
      (afmoe+small_embedding, afmoe+long with a 40-id prompt) with them.

  check_logits.py --self-test [--arch ...]
      Internal consistency of the reference without zipmoe: known-answer checks of its helpers
      (rmsnorm, rope, partial rope, de-interleave, ERNIE's interleaved rope, yarn, routing incl. the
      noaux_tc and ERNIE routers, bf16, the e4m3 decoder, FP8 dequantization, safetensors, ERNIE config
      parsing; gpt_oss: the MXFP4 decoder, the clamped SwiGLU, attention sinks, its router and YaRN, config
      parsing; qwen3_next / qwen3_5_moe: the norms, the conv1d, the gated delta rule by hand and chunked ==
      recurrent, the qkvz split, config parsing; granitemoe / granitemoeshared: the router, config parsing, a
      one-layer model by hand with each multiplier's effect; granitemoehybrid: the conv1d with its bias, the gated
      norm, a Mamba2 step by hand, chunked SSD scan == recurrence, the splits, config parsing; lfm2_moe: the sigmoid
      router with its selection-only bias and 1e-6, the causal depthwise conv, one-layer conv / MoE / attention
      checkpoints by hand, config parsing, planted bugs; also check_logits_selftest_lfm2.py on its own; afmoe: the
      sigmoid router with its selection-only bias and route_scale, the sliding window's boundary, the sigmoid output
      gate, mup, a dense model by hand in float64 (four norms, RoPE on the sliding layers only, NoPE on the full
      ones), a MoE layer with its shared expert by hand, config parsing with the Trinity router keys' refusals,
      planted bugs; also check_logits_selftest_afmoe.py on its own), and, on small checkpoints written here in exact
      HF layout (several config variants per arch, FP8 and MXFP4 ones too): layout check, vectorised pass ==
      independent slow token-by-token pass, causality (prefix logits == first rows), sharded == single-file
      checkpoint, and the CLI output file.
      The default is every arch of ARCHS and ARCHS_PENDING.

Run with Debian's /usr/bin/python3 (needs python3-numpy).
"""

# The comparison with zipmoe is in check_logits_compare.py, the self-test in check_logits_selftest.py.

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_logits_compare import ARCHS, ARCHS_PENDING, run_compare  # noqa: E402
from check_logits_selftest import run_self_test  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", help="path of the zipmoe binary")
    ap.add_argument("--arch", action="append",
                    help=f"architecture(s), comma-separated or repeated (default: {', '.join(ARCHS)}"
                         + (f"; with --self-test also {', '.join(ARCHS_PENDING)}; {', '.join(ARCHS_PENDING)} only "
                            f"when named)" if ARCHS_PENDING else ")"))
    ap.add_argument("--seed", type=int, default=7, help="zipmoe synth seed")
    ap.add_argument("--threads", type=int, default=2, help="zipmoe generate --threads")
    ap.add_argument("--work-dir", help="keep everything in this dir instead of a temp dir")
    ap.add_argument("--keep", action="store_true", help="do not delete the temp dir")
    ap.add_argument("--base-only", action="store_true", help="only the tiny presets, no synth variants")
    ap.add_argument("--self-test", action="store_true", help="check the reference itself (no zipmoe needed)")
    ap.add_argument("--model-dir", action="append",
                    help="also check this existing HF model directory (e.g. the shipped models/qwen2moe-debian-18m)")
    args = ap.parse_args()
    archs = []
    default = ARCHS + ARCHS_PENDING if args.self_test else ARCHS   # pending archs are compared only when named
    for a in args.arch or [",".join(default)]:
        archs += [x for x in a.split(",") if x]
    for a in archs:
        if a not in ARCHS + ARCHS_PENDING:
            ap.error(f"unknown arch {a!r} (expected {', '.join(ARCHS + ARCHS_PENDING)})")
    args.archs = archs
    if args.self_test:
        return run_self_test(args)
    if not args.zipmoe:
        ap.error("--zipmoe PATH is required (or --self-test)")
    return run_compare(args)


if __name__ == "__main__":
    sys.exit(main())
