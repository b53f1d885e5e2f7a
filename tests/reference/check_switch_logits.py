#!/usr/bin/python3
"""Compares zipmoe's switch_transformers logits with the independent numpy reference (switch_reference.py).

  check_switch_logits.py --zipmoe PATH [--seed S] [--threads T] [--work-dir DIR] [--keep]

`zipmoe synth --arch switch_transformers --preset tiny` (expert_capacity 2, 8 experts), then
`zipmoe generate --logits-out FILE --json --ignore-eos --max-new-tokens 8` in four cases:
  long-greedy    one 24-token encoder input (more tokens than 8 experts x capacity 2: the encoder's sparse
                 block must drop tokens), greedy;
  long-sampled   the same input, temperature 1 (seeded): the decoder is fed varied tokens, so its
                 self-attention and relative position bias matter (greedy on a random model repeats one id);
  batch-greedy,  three text prompts of different lengths as one --batch 3 (--prompts-file): zipmoe's ragged
  batch-sampled  batch against the reference's right-padded batch with encoder_mask.

Row layout of `generate --logits-out` for an encoder-decoder model (services/cli/cmd_generate.cc): the prompt
feeds the encoder and only decoder positions give rows: one for decoder_start_token_id, then one per
generated token fed back (the last generated token is not fed), i.e. max(1, n_generated) rows per sequence,
the sequences of a batch one after the other. The decoder inputs are therefore
[decoder_start_token_id] + generated_ids[:-1], read from --json batch_prompt_ids / batch_generated_ids.

The cases run on the synthetic model as written and on a copy whose attention and feed-forward projections
are rescaled from std 0.02 to 1/sqrt(fan_in) (write_scaled_copy): at 0.02 the encoder reaches the logits
only at ~1e-5 relative, below the tolerance, so only the rescaled copy really tests the encoder, the
cross-attention and the capacity drop.

Every row is compared with SwitchModel.forward(..., incremental=True) (one decoder token per call, as
generation does): max|zipmoe - ref| <= 1e-4 * max|ref| per row. On the rescaled copy the long cases also
require that the capacity drop is visible (the reference with an unlimited capacity must differ from the
rows by more than 10x the tolerance) and the sampled cases that the decoder was fed varied tokens. Exit 1 on any failure, naming case, sequence, row.

The compressed directory: the rescaled copy is compressed (`compress --shards 4`; its experts stay F32, bit-exact)
and every case runs again from it, with every expert resident and through the offloading runtime at two memory
budgets and policies (COMPRESSED_RUNS); each logits file must be byte-identical to the HF directory's.
Run with Debian's /usr/bin/python3 (needs python3-numpy).
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_logits_compare import CheckError, compare_rows, log, read_logits, run_cmd  # noqa: E402
from moe_reference_safetensors import SafetensorsFile, write_safetensors  # noqa: E402
from switch_reference import SwitchModel  # noqa: E402

REL_TOL = 1e-4
MAX_NEW_TOKENS = 8
LONG_PROMPT_LEN = 23  # + </s> = 24 encoder tokens > 8 experts * capacity 2
BATCH_PROMPTS = [
    "hi",
    "the quick brown fox jumps over the lazy dog",
    "a longer prompt, long enough that the encoder's experts overflow their capacity twice over",
]


def long_prompt(vocab, seed):
    rng = np.random.default_rng(2000 + seed)
    return [int(v) for v in rng.integers(16, vocab - 16, size=LONG_PROMPT_LEN)] + [1]


PROJECTIONS = (".q.weight", ".k.weight", ".v.weight", ".o.weight", ".wi.weight", ".wo.weight")


def write_scaled_copy(src, dst):
    """Copies the synthetic checkpoint with every attention and feed-forward projection rescaled from
    std 0.02 to 1/sqrt(fan_in). At 0.02 the sub-layers barely move the residual (the encoder reaches the
    logits at ~1e-5 relative, below the tolerance); at fan-in scale the encoder, the cross-attention and the
    capacity drop all show in the logits. Same F32 dtype and names; config and tokenizer copied."""
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors"))
    f = SafetensorsFile(os.path.join(src, "model.safetensors"))
    tensors = {}
    for name in f.names():
        a = f.get_f32(name)
        if name.endswith(PROJECTIONS):
            a = a * np.float32((1.0 / np.sqrt(a.shape[1])) / max(float(np.std(a)), 1e-12))
        tensors[name] = a.astype(np.float32)
    write_safetensors(os.path.join(dst, "model.safetensors"), tensors, dtype="F32")


# Runs from the compressed directory: (tag, extra generate arguments). Each must reproduce the HF run's bytes.
COMPRESSED_RUNS = (("resident", []),
                   ("zipmoe-40pct", ["--memory-budget", "40%", "--policy", "zipmoe"]),
                   ("lru-25pct", ["--memory-budget", "25%", "--policy", "lru"]))


def run_generate(zipmoe, model, work, name, source, sampled, threads, extra=()):
    """Runs generate; returns (path of the logits file, sequences from --json)."""
    out = os.path.join(work, name + ".logits.f32")
    cmd = [zipmoe, "generate", "--model", model, "--max-new-tokens", str(MAX_NEW_TOKENS), "--ignore-eos",
           "--json", "--logits-out", out, "--threads", str(threads)] + source + list(extra)
    if sampled:
        cmd += ["--temperature", "1.0", "--seed", "11"]
    stdout, _ = run_cmd(cmd, f"{name}: zipmoe generate")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise CheckError(f"{name}: no --json line in the output:\n{stdout[-2000:]}")
    j = json.loads(lines[-1])
    if "batch_prompt_ids" not in j:
        raise CheckError(f"{name}: --json has no batch_prompt_ids / batch_generated_ids / batch_logits_rows")
    seqs = [{"prompt_ids": p, "generated_ids": g, "logits_rows": n}
            for p, g, n in zip(j["batch_prompt_ids"], j["batch_generated_ids"], j["batch_logits_rows"])]
    return out, seqs


def check_compressed(zipmoe, compressed, work, name, source, sampled, threads):
    """The case `name` again from the compressed directory, per COMPRESSED_RUNS: byte-equal logits files."""
    failures = []
    with open(os.path.join(work, name.replace("/", "-") + ".logits.f32"), "rb") as f:
        want = f.read()
    for tag, extra in COMPRESSED_RUNS:
        run = f"{name}@compressed-{tag}"
        path, _ = run_generate(zipmoe, compressed, work, run.replace("/", "-"), source, sampled, threads, extra)
        with open(path, "rb") as f:
            got = f.read()
        if got != want:
            n = min(len(got), len(want)) // 4
            diff = np.nonzero(np.frombuffer(got[:4 * n], "<f4") != np.frombuffer(want[:4 * n], "<f4"))[0]
            failures.append(f"{run}: logits differ from the HF directory's ({len(got)} vs {len(want)} bytes, "
                            f"{diff.size} floats differ, first at {int(diff[0]) if diff.size else -1})")
    log(f"[{name}] compressed directory: {', '.join(t for t, _ in COMPRESSED_RUNS)} "
        f"{'byte-identical' if not failures else 'DIFFER'}")
    return failures


def check_case(m, zipmoe, model, work, name, source, sampled, threads, strict, expect_drop):
    """strict: sampling must feed the decoder varied tokens (the rescaled model; the raw synthetic one
    mostly repeats the fed token, its tied head favouring the input embedding)."""
    path, seqs = run_generate(zipmoe, model, work, name.replace("/", "-"), source, sampled, threads)
    rows = read_logits(path, int(m.cfg["vocab_size"]))
    failures = []
    # Row layout: max(1, n_generated) decoder rows per sequence, in batch order.
    want_rows = [max(1, len(s["generated_ids"])) for s in seqs]
    if [s["logits_rows"] for s in seqs] != want_rows or rows.shape[0] != sum(want_rows):
        raise CheckError(f"{name}: {rows.shape[0]} rows, --json batch_logits_rows {[s['logits_rows'] for s in seqs]}; "
                         f"expected {want_rows} (one per decoder position fed)")
    if len(set(want_rows)) != 1:
        raise CheckError(f"{name}: sequences generated {want_rows} tokens despite --ignore-eos")
    enc = [s["prompt_ids"] for s in seqs]
    dec = [[m.decoder_start] + s["generated_ids"][:-1] for s in seqs]
    width = max(len(e) for e in enc)
    enc_pad = np.array([e + [0] * (width - len(e)) for e in enc])
    mask = np.array([[1] * len(e) + [0] * (width - len(e)) for e in enc])
    want = m.forward(enc_pad, np.array(dec), mask if len(set(map(len, enc))) > 1 else None)
    got = rows.reshape(len(seqs), want_rows[0], -1)
    worst = 0.0
    for i in range(len(seqs)):
        err, scale = compare_rows(got[i], want[i])
        worst = max(worst, float(np.max(err / np.maximum(scale, 1e-30))))
        for r in np.nonzero(err > REL_TOL * scale)[0]:
            failures.append(f"{name}: sequence {i} (encoder length {len(enc[i])}) row {int(r)} (decoder token "
                            f"{dec[i][r]}): max|zipmoe-ref|={err[r]:.3e} > {REL_TOL:g} x {scale[r]:.3e}")
    if strict and sampled and all(len(set(d[1:])) <= 1 for d in dec):
        failures.append(f"{name}: sampling fed the decoder one repeated token {dec[0][1:]}: nothing varied")
    drop_effect = None
    if expect_drop:
        capacity = m.capacity
        m.capacity = 1 << 30
        try:
            undropped = m.forward(enc_pad, np.array(dec), None)
        finally:
            m.capacity = capacity
        err, scale = compare_rows(got[0], undropped[0])
        drop_effect = float(np.max(err / scale))
        if drop_effect <= 10 * REL_TOL:
            failures.append(f"{name}: the rows equal the reference without capacity limit (max rel diff "
                            f"{drop_effect:.2e}): the case does not exercise dropped tokens")
    log(f"[{name}] encoder lengths {[len(e) for e in enc]}, decoder fed {dec[0]}{' ...' if len(dec) > 1 else ''}; "
        f"worst rel err {worst:.2e}" + (f"; unlimited-capacity ref differs by {drop_effect:.2e}" if drop_effect else ""))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", required=True, help="path of the zipmoe binary")
    ap.add_argument("--seed", type=int, default=7, help="zipmoe synth seed")
    ap.add_argument("--threads", type=int, default=2, help="zipmoe generate --threads")
    ap.add_argument("--work-dir", help="keep everything in this dir instead of a temp dir")
    ap.add_argument("--keep", action="store_true", help="do not delete the temp dir")
    args = ap.parse_args()
    zipmoe = os.path.abspath(args.zipmoe)
    work = args.work_dir or tempfile.mkdtemp(prefix="zipmoe_switchlogits_")
    os.makedirs(work, exist_ok=True)
    failures = []
    try:
        model = os.path.join(work, "switch-tiny")
        shutil.rmtree(model, ignore_errors=True)
        run_cmd([zipmoe, "synth", "--arch", "switch_transformers", "--preset", "tiny", "--seed", str(args.seed),
                 "--out", model], "zipmoe synth")
        scaled = model + "-scaled"
        write_scaled_copy(model, scaled)
        prompts_file = os.path.join(work, "prompts.json")
        with open(prompts_file, "w", encoding="utf-8") as f:
            json.dump(BATCH_PROMPTS, f)
        batch = ["--prompts-file", prompts_file, "--batch", str(len(BATCH_PROMPTS))]
        compressed = scaled + ".z"
        shutil.rmtree(compressed, ignore_errors=True)
        run_cmd([zipmoe, "compress", "--shards", "4", scaled, compressed], "zipmoe compress")
        # The synthetic model as written (drops invisible at 0.02 std: no drop assertion), then the rescaled one.
        for tag, d, drop in (("synth", model, False), ("scaled", scaled, True)):
            m = SwitchModel(d)
            ids = ["--prompt-ids", ",".join(map(str, long_prompt(int(m.cfg["vocab_size"]), args.seed)))]
            for name, source, sampled, long in (("long-greedy", ids, False, True), ("long-sampled", ids, True, True),
                                                ("batch-greedy", batch, False, False),
                                                ("batch-sampled", batch, True, False)):
                try:
                    failures += check_case(m, zipmoe, d, work, f"{tag}/{name}", source, sampled, args.threads,
                                           drop, drop and long)
                    if d == scaled:
                        failures += check_compressed(zipmoe, compressed, work, f"{tag}/{name}", source, sampled,
                                                     args.threads)
                except CheckError as e:
                    failures.append(str(e))
    except CheckError as e:
        failures.append(str(e))
    finally:
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        log(f"FAILED ({len(failures)}):")
        for f in failures:
            log("  " + f)
        return 1
    log(f"all switch_transformers logits match the reference (tolerance {REL_TOL:g} x max|ref| per row)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
