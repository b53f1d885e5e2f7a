#!/usr/bin/env python3
"""Proves that the GGUF of bench/gguf_writer.py carries the same model as the checkpoint: llama.cpp's
logits against zipmoe's for a short prompt and a few greedy steps.

    /usr/bin/python3 bench/peer_check.py --model DIR [--zipmoe build/bin/zipmoe] [--prompt-ids 1,2,...]
                                         [--steps 4] [--threads 2] [--tolerance 1e-2] [--f32] [--work DIR]

DIR is a Hugging Face checkpoint. Make it with small embeddings so that the layers, not the embedding,
dominate the logits: `zipmoe synth --arch qwen2_moe --preset tiny --embedding-std 0.02 --out DIR`. With the
synth default (embedding std 1) the residual stream is mostly the embedding row and the check is blind:
stacking a tiny qwen2_moe's experts in reverse order moves its relative difference only from 1.7e-3 to
2.2e-3, while with --embedding-std 0.02 it goes from 3.7e-3 to 3.5e-2 (and to 1.3e-1 without the shared
expert; a mixtral GGUF without the q/k rotary row order fails at 1.6e-2 on a 48-token prompt). The check
  1. converts DIR to WORK/model.gguf (bench/gguf_writer.py),
  2. runs `zipmoe generate --model DIR --prompt-ids ... --max-new-tokens STEPS --temperature 0
     --ignore-eos --logits-out WORK/zipmoe.logits` (float32 rows, one per position fed),
  3. runs `node bench/llama_peer.mjs --model WORK/model.gguf --prompt-ids ... --dump WORK/llama.json
     --dump-steps STEPS` (bench/install_peer.sh first),
  4. compares, for each greedy step i (the prompt's last position, then each generated token fed
     back) while both greedy sequences still agree, zipmoe's row with llama.cpp's: max |difference|,
     relative to the row's max |logit|, and the two argmax tokens.
It passes when both sides pick the same STEPS greedy tokens (or part at a near tie: the two picks' logits in
zipmoe's row within --tolerance of max |logit| of each other; no later step is then compared) and every
compared row's relative max-abs difference is <= --tolerance (llama.cpp computes in its own order and
precision, e.g. BF16 activations in its BF16 matrix products, so the rows agree closely, not bit-exactly). Prints a table on stderr and
one JSON object on stdout; exit status 0 pass, 1 mismatch, 2 a step failed to run.
--f32 makes the GGUF with every matrix widened exactly to F32 (bench/gguf_writer.py --dtype f32) and runs
llama.cpp with an F32 KV cache and no flash attention (bench/llama_peer.mjs --f32-kv): llama.cpp then computes in
float32 throughout and agrees with zipmoe to ~1e-6 of max |logit| (3-4e-7 on tiny qwen3_moe and lfm2_moe
checkpoints), so a tolerance like 1e-4 checks the conversion and both forward passes far more tightly than the
BF16 run, whose rounding noise is 3-4e-3 of max |logit| for most tiny checkpoints but 0.7-1.5e-2 for lfm2_moe's.
WORK defaults to a temporary directory removed afterwards.
"""
import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import numpy as np
except ImportError as e:  # e.g. a pyenv or venv python3 ahead of Debian's on PATH
    sys.exit(f"peer_check.py: needs NumPy ({e}); Debian: apt-get install python3-numpy (scripts/install_deps.sh), "
             f"then run it with /usr/bin/python3 (this is {sys.executable})")

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import gguf_writer  # noqa: E402


# 32 ids spread over ids 3..2002 (the tiny presets have 2048): long enough for rotary-embedding errors to show.
DEFAULT_PROMPT_IDS = ",".join(str((37 * i + 11) % 2000 + 3) for i in range(32))


class StepFailed(Exception):
    pass


def run(cmd, what):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StepFailed(f"{what} failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n{proc.stderr[-4000:]}")
    return proc.stdout


def compare(ours, llama, n_prompt, steps, tolerance):
    """Rows of both sides step by step while the greedy sequences agree."""
    rows = []
    for i in range(steps):
        a = ours["logits"][n_prompt - 1 + i]
        b = np.asarray(llama["logits"][i], dtype=np.float64)
        if a.shape != b.shape:
            raise StepFailed(f"step {i}: zipmoe row has {a.size} logits, llama.cpp {b.size}")
        diff = float(np.max(np.abs(a - b)))
        scale = float(np.max(np.abs(a)))
        rows.append({"step": i, "max_abs_diff": diff, "max_abs_logit": scale, "rel_max_abs_diff": diff / scale,
                     "mean_abs_diff": float(np.mean(np.abs(a - b))),
                     "zipmoe_argmax": int(np.argmax(a)), "llama_argmax": int(np.argmax(b))})
        if ours["greedy"][i] != llama["greedy_ids"][i]:
            break  # later rows continue different sequences
    agree = next((i for i, (x, y) in enumerate(zip(ours["greedy"], llama["greedy_ids"])) if x != y), steps)
    # Where the greedy choices part, a near tie is no error: the two tokens' logits in zipmoe's row lie within
    # the tolerance (relative to the row's max |logit|) of each other, so BF16 activations may order them
    # either way. The sequences then differ, so no later step is compared.
    near_tie = None
    if agree < steps:
        a = ours["logits"][n_prompt - 1 + agree]
        gap = float(a[ours["greedy"][agree]] - a[llama["greedy_ids"][agree]]) / rows[agree]["max_abs_logit"]
        rows[agree]["greedy_gap_rel"] = gap
        near_tie = gap <= tolerance
    ok = (agree == steps or near_tie) and all(r["rel_max_abs_diff"] <= tolerance for r in rows)
    return {"pass": ok, "tolerance": tolerance, "steps": steps, "greedy_agree": agree, "near_tie": near_tie,
            "zipmoe_greedy_ids": ours["greedy"], "llama_greedy_ids": llama["greedy_ids"],
            "max_rel_max_abs_diff": max(r["rel_max_abs_diff"] for r in rows),
            "max_abs_diff": max(r["max_abs_diff"] for r in rows), "rows": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--model", required=True, help="Hugging Face checkpoint directory")
    parser.add_argument("--zipmoe", default=str(BENCH.parent / "build/bin/zipmoe"), help="zipmoe binary")
    parser.add_argument("--node", default="node", help="Node >= 20")
    parser.add_argument("--prompt-ids", default=DEFAULT_PROMPT_IDS, help="comma-separated token ids")
    parser.add_argument("--steps", type=int, default=4, help="greedy steps compared (>= 1)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-2, help="max relative max-abs logits difference")
    parser.add_argument("--mla", choices=("heads", "latent"), default="heads",
                        help="deepseek_v2/v3 GGUF layout (bench/gguf_writer.py --mla)")
    parser.add_argument("--f32", action="store_true",
                        help="F32 GGUF, F32 KV cache, no flash attention: llama.cpp in float32 (tolerance ~1e-4)")
    parser.add_argument("--work", help="keep the GGUF, logits and dumps here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    try:
        prompt = [int(x) for x in args.prompt_ids.split(",")]
    except ValueError:
        parser.error(f"--prompt-ids must be comma-separated integers, got '{args.prompt_ids}'")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="peer-check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        gguf = work / "model.gguf"
        gguf_writer.convert(args.model, gguf, mla=args.mla, dtype="f32" if args.f32 else "bf16")
        ids = ",".join(map(str, prompt))
        logits_file = work / "zipmoe.logits"
        out = run([args.zipmoe, "generate", "--model", args.model, "--prompt-ids", ids,
                   "--max-new-tokens", str(args.steps), "--temperature", "0", "--ignore-eos",
                   "--threads", str(args.threads), "--logits-out", str(logits_file), "--json"], "zipmoe generate")
        ours_json = json.loads(out.strip().splitlines()[-1])
        flat = np.fromfile(logits_file, dtype="<f4").astype(np.float64)
        n_rows = len(prompt) + args.steps - 1
        if flat.size % n_rows:
            raise StepFailed(f"{logits_file}: {flat.size} floats is not {n_rows} rows")
        ours = {"logits": flat.reshape(n_rows, -1), "greedy": ours_json["generated_ids"]}
        dump = work / "llama.json"
        run([args.node, str(BENCH / "llama_peer.mjs"), "--model", str(gguf), "--prompt-ids", ids,
             "--threads", str(args.threads), "--dump", str(dump), "--dump-steps", str(args.steps),
             "--decode-tokens", "1", "--warmup-tokens", "0", "--prefill-reps", "1"]
            + (["--f32-kv"] if args.f32 else []), "bench/llama_peer.mjs")
        with open(dump) as f:
            llama = json.load(f)
        result = {"model": args.model, "prompt_ids": prompt, "f32": args.f32,
                  **compare(ours, llama, len(prompt), args.steps, args.tolerance)}
    except (gguf_writer.ConversionError, StepFailed) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    for r in result["rows"]:
        print(f"step {r['step']}: max|diff| {r['max_abs_diff']:.3g} of max|logit| {r['max_abs_logit']:.3g} "
              f"(rel {r['rel_max_abs_diff']:.2e}), argmax zipmoe {r['zipmoe_argmax']} llama.cpp {r['llama_argmax']}",
              file=sys.stderr)
    tie = ""
    if result["near_tie"] is not None:
        gap = result["rows"][result["greedy_agree"]]["greedy_gap_rel"]
        tie = (f" (step {result['greedy_agree']}: {'a near tie' if result['near_tie'] else 'not a near tie'}, the two "
               f"tokens' logits {gap:.2e} of max|logit| apart in zipmoe's row)")
    print(f"{'PASS' if result['pass'] else 'FAIL'}: greedy ids agree for {result['greedy_agree']}/{args.steps} "
          f"steps{tie}, max relative max-abs diff {result['max_rel_max_abs_diff']:.2e} (tolerance {args.tolerance:g})",
          file=sys.stderr)
    print(json.dumps(result))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
