"""zipmoe's logits against the numpy reference (moe_reference.py), the comparison half of
check_logits.py: synth, compress and `zipmoe generate --logits-out` per architecture and variant, each
row against the reference forward over the fed sequence.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import moe_reference as ref

ARCHS = ["qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe", "glm4_moe_lite",
         "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe", "granitemoe", "granitemoeshared",
         "granitemoehybrid", "lfm2_moe", "afmoe"]
# Archs the reference implements but `zipmoe synth --arch` does not offer yet: compared with zipmoe only when
# asked for by name, never by default; the self-test covers them by default.
ARCHS_PENDING = []
# Extra synth variants run after the base cases, for the archs asked for (skip with --base-only): (label, arch,
# synth args).
VARIANTS = [
    ("deepseek_v2+q_lora", "deepseek_v2", ["--q-lora-rank", "48"]),   # q_a_proj/q_a_layernorm/q_b_proj
    ("qwen3_moe+sharded", "qwen3_moe", ["--shard-size", "2M"]),        # index.json + several shards
    ("mixtral+skew", "mixtral", ["--router-skew", "2"]),               # skewed, far-from-uniform routing
    # FP8 block-scaled checkpoints (F8_E4M3 *_proj weights + weight_scale_inv, 32x32 blocks): served as
    # stored, the reference dequantizes them itself.
    ("deepseek_v3+fp8+q_lora", "deepseek_v3", ["--dtype", "fp8", "--q-lora-rank", "40"]),
    ("glm4_moe+fp8", "glm4_moe", ["--dtype", "fp8"]),
    ("qwen3_moe+fp8", "qwen3_moe", ["--dtype", "fp8"]),                # as Qwen3-30B-A3B-FP8
    # gpt-oss with its MXFP4 experts widened to BF16 (scripts/gpt_oss_widen.py: transformers' dense
    # gate_up_proj [E, H, 2I] / down_proj [E, I, H] layout): the same function, so zipmoe's logits must also
    # equal the MXFP4 run's byte for byte (check_arch compares them when both ran).
    ("gpt_oss+bf16", "gpt_oss", []),
    # The hybrid models with a prompt of LONG_PROMPT_LEN ids: the reference prefills it with the chunked delta
    # rule (three chunks of 64), zipmoe with its token-by-token recurrence; and FP8 projections.
    ("qwen3_next+long", "qwen3_next", []),
    ("qwen3_5_moe+long+skew", "qwen3_5_moe", ["--router-skew", "2"]),
    ("qwen3_next+fp8", "qwen3_next", ["--dtype", "fp8"]),
    # Granite scales the embedding by 12 and each layer's output by 0.22: with synth's default token rows
    # (std 1) the residual stream is ~50x the layers' outputs and a gate/up swap in the experts moved the
    # logits by 9e-6 of their max, under REL_TOL; token rows of std 1e-3 let the experts and the shared MLP
    # show (the same swap then fails).
    ("granitemoe+small_embedding", "granitemoe", ["--embedding-std", "0.001"]),
    ("granitemoeshared+small_embedding", "granitemoeshared", ["--embedding-std", "0.001"]),
    ("granitemoehybrid+small_embedding", "granitemoehybrid", ["--embedding-std", "0.001"]),
    # LFM2-MoE: token rows of std 1e-3, so that the residual stream is the layers' outputs (the short convs, the
    # experts) rather than the embedding the final norm would otherwise mostly see; and a prompt of LONG_PROMPT_LEN
    # ids (the conv state and the KV cache carried over 150 positions).
    ("lfm2_moe+small_embedding", "lfm2_moe", ["--embedding-std", "0.001"]),
    ("lfm2_moe+long", "lfm2_moe", []),
    # AFMoE (pending: run only with --arch afmoe): token rows of std 1e-3, so that the four norms' outputs rather than
    # the embedding carry the residual stream (mup scales the rows by sqrt(hidden) first); and a prompt of
    # LONG_PROMPT_LENS["afmoe+long"] ids, longer than the tiny preset's sliding window (8), so that the window of the
    # sliding layers and the NoPE full layers' whole history both show.
    ("afmoe+small_embedding", "afmoe", ["--embedding-std", "0.001"]),
    ("afmoe+long", "afmoe", []),
]
WIDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gpt_oss_widen.py")
REL_TOL = 1e-4
PROMPT_LEN = 16
LONG_PROMPT_LEN = 150   # labels with "+long", unless LONG_PROMPT_LENS names them
LONG_PROMPT_LENS = {"afmoe+long": 40}
MAX_NEW_TOKENS = 4


def log(msg=""):
    print(msg, flush=True)


def config_only_model(work, dirname, cfg):
    """A Model on a directory holding `cfg` as config.json and no tensors (WORK/DIRNAME): for the self-tests'
    config parsing checks."""
    d = os.path.join(work, dirname)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    ref.write_safetensors(os.path.join(d, "model.safetensors"), {})
    return ref.Model(d)


# ====================================================================================================
# zipmoe comparison
# ====================================================================================================

class CheckError(Exception):
    pass


def run_cmd(cmd, what, timeout=600):
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    except FileNotFoundError as e:
        raise CheckError(f"{what}: cannot run {cmd[0]}: {e}")
    except subprocess.TimeoutExpired:
        raise CheckError(f"{what}: timed out after {timeout}s: {' '.join(cmd)}")
    out = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0:
        raise CheckError(f"{what}: exit {p.returncode}: {' '.join(cmd)}\n{out[-4000:]}")
    return out, time.time() - t0


def eos_ids(model_dir):
    ids = set()
    for fn in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, fn)
        if not os.path.exists(path):
            continue
        with open(path, "r", encoding="utf-8") as f:
            v = json.load(f).get("eos_token_id")
        if isinstance(v, int):
            ids.add(v)
        elif isinstance(v, list):
            ids.update(int(x) for x in v)
    return ids


def prompt_ids(vocab, seed, n=PROMPT_LEN):
    """Deterministic prompt avoiding the special ids at both ends of the synthetic vocabularies."""
    rng = np.random.default_rng(1000 + seed)
    return [int(v) for v in rng.integers(16, vocab - 16, size=n)]


def fed_sequence(rows, prompt, max_new, eos):
    """Prompt + the greedy tokens fed back, reconstructed from the rows; validates the row count."""
    n_rows, n_prompt = rows.shape[0], len(prompt)
    expected = n_prompt + max_new - 1 if max_new > 0 else n_prompt
    if n_rows < n_prompt:
        raise CheckError(f"{n_rows} rows < {n_prompt} prompt tokens: not one row per fed position")
    if n_rows > expected:
        raise CheckError(f"{n_rows} rows > {expected} (= n_prompt {n_prompt} + max_new_tokens {max_new} - 1)")
    seq = list(prompt)
    for r in range(n_prompt - 1, n_rows - 1):
        seq.append(int(np.argmax(rows[r])))
    if n_rows < expected:
        last = int(np.argmax(rows[n_rows - 1]))
        if last not in eos:
            raise CheckError(f"{n_rows} rows < {expected} but the last row's argmax {last} is not an EOS id "
                             f"{sorted(eos)}: generation stopped early for no visible reason")
    return seq


def read_logits(path, vocab):
    if not os.path.exists(path):
        raise CheckError(f"--logits-out file {path} was not written")
    data = np.fromfile(path, dtype="<f4")
    if data.size == 0 or data.size % vocab != 0:
        raise CheckError(f"{path}: {data.size} floats is not a positive multiple of vocab {vocab}")
    rows = data.reshape(-1, vocab).astype(np.float32)
    if not np.all(np.isfinite(rows)):
        bad = int(np.nonzero(~np.all(np.isfinite(rows), axis=1))[0][0])
        raise CheckError(f"{path}: non-finite logits (first in row {bad})")
    return rows


def compare_rows(got, want):
    """Per-row (max abs err, max|ref|); both [n, vocab]."""
    err = np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)), axis=1)
    scale = np.max(np.abs(want.astype(np.float64)), axis=1)
    return err, scale


def check_arch(zipmoe, label, arch, extra, seed, work, threads, model_dir=None):
    """arch: synthesize a tiny model of it; model_dir: an existing HF directory instead (arch None)."""
    hf = model_dir or os.path.join(work, label)
    cz = os.path.join(work, label + ".z")
    for d in ([cz] if model_dir else [hf, cz]):
        shutil.rmtree(d, ignore_errors=True)
    if not model_dir:
        run_cmd([zipmoe, "synth", "--arch", arch, "--preset", "tiny", "--seed", str(seed), "--out", hf] + extra,
                f"{label}: zipmoe synth")
        if label.endswith("+bf16"):  # gpt_oss: the same checkpoint with dense BF16 experts
            run_cmd([sys.executable, WIDEN, hf, hf + ".bf16"], f"{label}: gpt_oss_widen.py")
            shutil.rmtree(hf)
            os.rename(hf + ".bf16", hf)
    run_cmd([zipmoe, "compress", hf, cz, "--shards", "4"], f"{label}: zipmoe compress")
    model = ref.Model(hf)
    model.check_layout()
    eos = eos_ids(hf)
    prompt = prompt_ids(model.vocab, seed,
                        LONG_PROMPT_LENS.get(label, LONG_PROMPT_LEN) if "+long" in label else PROMPT_LEN)
    results = []
    failures = []
    ref_cache = {}
    for kind, d in (("hf", hf), ("compressed", cz)):
        out_path = os.path.join(work, f"{label}.{kind}.logits.f32")
        if os.path.exists(out_path):
            os.remove(out_path)
        cmd = [zipmoe, "generate", "--model", d, "--prompt-ids", ",".join(map(str, prompt)),
               "--max-new-tokens", str(MAX_NEW_TOKENS), "--logits-out", out_path, "--threads", str(threads)]
        _, t_gen = run_cmd(cmd, f"{label} [{kind}]: zipmoe generate")
        try:
            rows = read_logits(out_path, model.vocab)
            seq = fed_sequence(rows, prompt, MAX_NEW_TOKENS, eos)
        except CheckError as e:
            raise CheckError(f"{label} [{kind}]: {e}")
        key = tuple(seq)
        if key not in ref_cache:
            t0 = time.time()
            ref_cache[key] = (model.forward(seq), time.time() - t0)
        want, t_ref = ref_cache[key]
        err, scale = compare_rows(rows, want)
        rel = err / np.maximum(scale, 1e-30)
        bad = np.nonzero(err > REL_TOL * scale)[0]
        for r in bad:
            failures.append(f"arch={label} dir={kind} row={int(r)} (fed token {seq[r]} at position {int(r)}): "
                            f"max|zipmoe-ref|={err[r]:.3e} > {REL_TOL:g} x max|ref| = {REL_TOL * scale[r]:.3e}")
        argmax_ok = bool(np.all(np.argmax(rows, axis=1) == np.argmax(want, axis=1)))
        results.append({"kind": kind, "rows": rows.shape[0], "max_abs": float(err.max()),
                        "max_rel": float(rel.max()), "worst_row": int(np.argmax(rel)), "argmax_same": argmax_ok,
                        "generated": seq[len(prompt):], "t_gen": t_gen, "t_ref": t_ref, "logits": rows})
    a, b = results[0]["logits"], results[1]["logits"]
    hf_vs_z = float(np.max(np.abs(a - b))) if a.shape == b.shape else float("nan")
    return results, failures, hf_vs_z, prompt


def run_compare(args):
    zipmoe = os.path.abspath(args.zipmoe)
    if not (os.path.isfile(zipmoe) and os.access(zipmoe, os.X_OK)):
        log(f"FAIL: --zipmoe {zipmoe} is not an executable file")
        return 1
    # `generate` must exist: fail clearly, never skip.
    p = subprocess.run([zipmoe, "generate", "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    help_text = p.stdout.decode("utf-8", "replace")
    if p.returncode != 0 or "--logits-out" not in help_text:
        log(f"FAIL: `{zipmoe} generate --help` exited {p.returncode} or lacks --logits-out; this check needs "
            f"`zipmoe generate --model DIR --prompt-ids IDS --max-new-tokens N --logits-out FILE --threads T`.\n"
            + help_text[-2000:])
        return 1
    work = args.work_dir or tempfile.mkdtemp(prefix="zipmoe_reflogits_")
    os.makedirs(work, exist_ok=True)
    log(f"work dir: {work}   tolerance: max|zipmoe-ref| <= {REL_TOL:g} x max|ref| per row")
    all_failures = []
    table = []
    cases = [(a, a, [], None) for a in args.archs]
    if not args.base_only:
        cases += [v + (None,) for v in VARIANTS if v[1] in args.archs]
    for d in args.model_dir or []:
        cases.append((os.path.basename(os.path.normpath(d)), None, [], os.path.abspath(d)))
    first_logits = {}  # label -> the HF directory's logits
    for label, arch, extra, model_dir in cases:
        t0 = time.time()
        try:
            results, failures, hf_vs_z, prompt = check_arch(zipmoe, label, arch, extra, args.seed, work, args.threads,
                                                            model_dir)
        except (CheckError, ValueError, KeyError, NotImplementedError) as e:
            all_failures.append(f"arch={label}: {e}")
            log(f"[{label}] ERROR: {e}")
            continue
        all_failures += failures
        for r in results:
            table.append((label, r, hf_vs_z))
        first_logits[label] = results[0]["logits"]
        log(f"[{label}] prompt {prompt}  generated hf={results[0]['generated']} "
            f"compressed={results[1]['generated']}  ({time.time() - t0:.1f}s)")
    log("")
    log(f"{'arch':<19} {'dir':<11} {'rows':>4} {'max_abs_err':>12} {'max_rel_err':>12} {'worst':>5} "
        f"{'argmax=':>7} {'hf_vs_z':>10} {'gen_s':>6} {'ref_s':>6}  status")
    for arch, r, hz in table:
        status = "ok" if r["max_rel"] <= REL_TOL else "FAIL"
        log(f"{arch:<19} {r['kind']:<11} {r['rows']:>4} {r['max_abs']:>12.3e} {r['max_rel']:>12.3e} "
            f"{r['worst_row']:>5} {str(r['argmax_same']):>7} {hz:>10.3e} {r['t_gen']:>6.2f} {r['t_ref']:>6.2f}  {status}")
    # gpt-oss: MXFP4 experts and the same experts widened to BF16 compute the same bits.
    if "gpt_oss" in first_logits and "gpt_oss+bf16" in first_logits:
        a, b = first_logits["gpt_oss"], first_logits["gpt_oss+bf16"]
        same = a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
        log(f"gpt_oss MXFP4 vs BF16-widened experts: logits {'byte-equal' if same else 'DIFFER'}")
        if not same:
            all_failures.append("arch=gpt_oss+bf16: logits differ from the MXFP4 checkpoint's (the same weights)")
    if not args.keep and not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    if all_failures:
        log("")
        log(f"FAILED ({len(all_failures)}):")
        for f in all_failures:
            log("  " + f)
        return 1
    log("\nall logits match the reference")
    return 0
