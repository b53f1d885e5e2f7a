"""The granitemoe / granitemoeshared part of the reference self-test (check_logits.py --self-test): known answers
of the router (top-k of the logits with a softmax over the k == softmax over all, top-k, renormalised); config
parsing on the published granite-3.0-1b-a400m config, the class defaults and the refusals; a one-layer model
computed by hand (float64, written out in this file) with the four multipliers' effects isolated; and small
checkpoints written here in the exact HF layout (tied and untied, attention_bias, GQA and MHA, shared MLP or none)
on which the vectorised pass is checked against the token-by-token one, causality and sharding.
"""

import copy
import math
import os
import time

import numpy as np

import moe_reference as ref
import moe_reference_granite as gm
from check_logits_compare import config_only_model, log
from selftest_util import rel as _rel

VOCAB = 96
SEQ = 16

# ibm-granite/granite-3.0-1b-a400m-instruct's config.json (as given to us from memory, not downloaded: a parsing
# test of the keys, not a statement about the published file).
GRANITE_1B_A400M = {
    "architectures": ["GraniteMoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 512,
    "logits_scaling": 6.0, "max_position_embeddings": 4096, "model_type": "granitemoe", "num_attention_heads": 16,
    "num_experts_per_tok": 8, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "output_router_logits": False, "pad_token_id": 0, "residual_multiplier": 0.22, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 10000, "router_aux_loss_coef": 0.0, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers_version": "4.46.0.dev0", "use_cache": True, "vocab_size": 49155,
}


def small_config(**kw):
    """The 1b-a400m config shrunk: hidden 32, 3 layers, heads 4/2 of 8, 8 experts top-4 of width 16; the
    multipliers as published except attention_multiplier 1/8 (= 1/head_dim, the published rule)."""
    c = copy.deepcopy(GRANITE_1B_A400M)
    c.update(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, num_local_experts=8,
             num_experts_per_tok=4, intermediate_size=16, vocab_size=VOCAB, attention_multiplier=0.125,
             eos_token_id=VOCAB - 1, bos_token_id=VOCAB - 1, pad_token_id=VOCAB - 1)
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def _config_model(work, name, cfg):
    return config_only_model(work, "granite_cfg_" + name, cfg)


# ----------------------------------------------------------------------------------------------------

def known_answer_tests_granite(t):
    # Router logits [1 3 2 .5], top-2: experts 1, 2 with softmax([3, 2]) = [e/(1+e), 1/(1+e)].
    idx, w = ref.select_experts_granite(np.array([[1, 3, 2, 0.5]], dtype=np.float32), 2)
    t.check(idx.tolist() == [[1, 2]], f"granite router: top-2 of [1 3 2 .5] = experts 1, 2 (got {idx.tolist()})")
    t.close(w, [[math.e / (1 + math.e), 1 / (1 + math.e)]], "granite router: softmax over the two chosen logits")
    idx, w = ref.select_experts_granite(np.array([[1, 3, 2, 0.5]], dtype=np.float32), 1)
    t.check(idx.tolist() == [[1]] and w.tolist() == [[1.0]], "granite router top-1: weight 1")
    # Equal to the softmax over all experts, then top-k, renormalised (computed here in float64), and to mixtral's.
    rng = np.random.default_rng(77)
    logits = (3 * rng.standard_normal((64, 16))).astype(np.float32)
    idx, w = ref.select_experts_granite(logits, 4)
    z = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    want_idx = np.argsort(-probs, axis=1, kind="stable")[:, :4]
    want_w = np.take_along_axis(probs, want_idx, axis=1)
    t.check(np.array_equal(idx, want_idx), "granite router: the same experts as the top-4 of the full softmax")
    t.close(w, want_w / want_w.sum(axis=1, keepdims=True), "granite router == full softmax, top-4, renormalised",
            rtol=1e-6)
    midx, mw = ref.select_experts("mixtral", ref.softmax(logits), 4, False)
    t.check(np.array_equal(idx, midx) and np.allclose(w, mw, rtol=1e-6, atol=0), "granite router == mixtral's rule")
    t.check(float(np.max(np.abs(w - np.take_along_axis(probs, idx, axis=1)))) > 1e-2,
            "granite router weights are not the un-renormalised full-softmax probabilities")


def granite_config_tests(t, work):
    log("granitemoe config checks")
    m = _config_model(work, "1b_a400m", GRANITE_1B_A400M)
    got = (m.n_layers, m.n_experts, m.top_k, m.hidden, m.inter, m.n_heads, m.n_kv, m.head_dim, m.vocab, m.eps, m.tie,
           m.theta, m.embedding_multiplier, m.logits_scaling, m.residual_multiplier, m.attention_multiplier, m.scale,
           m.qkv_bias, m.o_bias, m.shared_inter, m.rope_type)
    t.check(got == (24, 32, 8, 1024, 512, 16, 8, 64, 49155, 1e-6, True, 10000.0, 12.0, 6.0, 0.22, 0.015625, 0.015625,
                    False, False, 0, "default"), f"granite-3.0-1b-a400m config: {got}")
    t.check(np.array_equal(m.inv_freq, ref.rope_inv_freq(64, 10000.0)), "granite-3.0-1b-a400m: inv_freq (64, 1e4)")
    names = m.expected_names()
    t.check(len(names) == len(set(names)) == 2 + 24 * 9 and "lm_head.weight" not in names
            and {"model.layers.23.block_sparse_moe.router.layer.weight", "model.layers.0.self_attn.o_proj.weight",
                 "model.layers.0.block_sparse_moe.input_linear.weight",
                 "model.layers.0.block_sparse_moe.output_linear.weight"} <= set(names),
            f"granite-3.0-1b-a400m tensor names ({len(names)})")
    m = _config_model(work, "shared_published", dict(GRANITE_1B_A400M, model_type="granitemoeshared",
                                                      architectures=["GraniteMoeSharedForCausalLM"],
                                                      shared_intermediate_size=1024, attention_bias=True,
                                                      tie_word_embeddings=False))
    names = set(m.expected_names())
    t.check(m.shared_inter == 1024 and len(names) == 3 + 24 * 15
            and {"model.layers.5.shared_mlp.input_linear.weight", "model.layers.5.shared_mlp.output_linear.weight",
                 "model.layers.5.self_attn.o_proj.bias", "lm_head.weight"} <= names,
            f"granitemoeshared names (shared MLP, q/k/v/o biases, lm_head): {len(names)}")
    # GraniteMoeConfig / GraniteMoeSharedConfig defaults for every missing key.
    for typ in gm.TYPES:
        m = _config_model(work, "defaults_" + typ, {"model_type": typ})
        got = (m.vocab, m.hidden, m.inter, m.n_layers, m.n_heads, m.n_kv, m.head_dim, m.eps, m.tie, m.theta,
               m.embedding_multiplier, m.logits_scaling, m.residual_multiplier, m.attention_multiplier, m.scale,
               m.n_experts, m.top_k, m.qkv_bias, m.shared_inter)
        t.check(got == (32000, 4096, 11008, 32, 32, 32, 128, 1e-6, False, 10000.0, 1.0, 1.0, 1.0, 1.0, 1.0, 8, 2,
                        False, 0), f"{typ} class defaults: {got}")
        t.check(not any("shared_mlp" in n for n in m.expected_names()), f"{typ} default: no shared MLP")
    m = _config_model(work, "stray_shared", small_config(shared_intermediate_size=64))
    t.check(m.shared_inter == 0, "granitemoe ignores shared_intermediate_size (GraniteMoeConfig has none)")
    m = _config_model(work, "kv_null", small_config(num_key_value_heads=None, head_dim=None))
    t.check((m.n_kv, m.head_dim) == (4, 8), "num_key_value_heads missing: = num_attention_heads")
    cfg = small_config()
    cfg["num_key_value_heads"] = None
    m = _config_model(work, "kv_explicit_null", cfg)
    t.check(m.n_kv == 4, "num_key_value_heads null: = num_attention_heads")
    m = _config_model(work, "head_dim_equal", small_config(head_dim=8))
    t.check(m.head_dim == 8, "head_dim equal to hidden / heads accepted")
    m = _config_model(work, "rope_parameters",
                      small_config(rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 5e5}))
    t.check(m.theta == 5e5 and np.array_equal(m.inv_freq, ref.rope_inv_freq(8, 5e5)),
            "transformers-5 rope_parameters with rope_theta inside")
    m = _config_model(work, "rope_linear", small_config(rope_scaling={"type": "linear", "factor": 2.0}))
    t.check(m.rope_linear_factor == 2.0 and m.theta == 10000.0, "rope_scaling linear factor 2")
    bad = [
        ("gelu", dict(hidden_act="gelu"), NotImplementedError, "hidden_act"),
        ("head_dim", dict(head_dim=16), NotImplementedError, "head_dim"),
        ("dynamic", dict(rope_scaling={"type": "dynamic", "factor": 2.0}), NotImplementedError, "'dynamic'"),
        ("partial", dict(partial_rotary_factor=0.5), NotImplementedError, "partial_rotary_factor"),
        ("k_gt_e", dict(num_experts_per_tok=9), ValueError, "num_experts_per_tok"),
        ("kv", dict(num_key_value_heads=3), ValueError, "num_key_value_heads"),
        ("hidden", dict(hidden_size=30), ValueError, "hidden_size"),
        ("null_multiplier", dict(attention_multiplier="null"), ValueError, "attention_multiplier"),
        ("string_multiplier", dict(embedding_multiplier="12"), ValueError, "embedding_multiplier"),
        ("logits_scaling_0", dict(logits_scaling=0), ValueError, "logits_scaling"),
        ("shared_negative", dict(model_type="granitemoeshared", shared_intermediate_size=-1), ValueError,
         "shared_intermediate_size"),
    ]
    for name, kw, exc, text in bad:
        cfg = small_config(**kw)
        if kw.get("attention_multiplier") == "null":
            cfg["attention_multiplier"] = None
        try:
            _config_model(work, "bad_" + name, cfg)
            t.check(False, f"granite config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"granite config {name}: error {e!r} lacks {text!r}")


# --- checkpoints ---

def synth(m, rng):
    """{name: float32 array} for every expected tensor of m, with the HF shapes."""
    H, V, E, I, S = m.hidden, m.vocab, m.n_experts, m.inter, m.shared_inter
    D = m.head_dim
    shapes = {"q_proj": (m.n_heads * D, H), "k_proj": (m.n_kv * D, H), "v_proj": (m.n_kv * D, H),
              "o_proj": (H, m.n_heads * D)}
    out = {}
    for name in m.expected_names():
        leaf = name.split(".")[-2]
        if name == "model.embed_tokens.weight":
            a = rng.standard_normal((V, H))
        elif name == "lm_head.weight":
            a = rng.standard_normal((V, H)) / math.sqrt(H)
        elif "norm" in leaf:
            a = 1.0 + 0.2 * rng.standard_normal(H)
        elif leaf in shapes:
            s = shapes[leaf]
            a = 0.2 * rng.standard_normal(s[0]) if name.endswith(".bias") else rng.standard_normal(s) / math.sqrt(s[1])
        elif name.endswith(gm.ROUTER):
            a = 3.0 * rng.standard_normal((E, H)) / math.sqrt(H)
        elif name.endswith(gm.EXPERTS_IN):
            a = rng.standard_normal((E, 2 * I, H)) / math.sqrt(H)
        elif name.endswith(gm.EXPERTS_OUT):
            a = rng.standard_normal((E, H, I)) / math.sqrt(I)
        elif name.endswith(gm.SHARED_IN):
            a = rng.standard_normal((2 * S, H)) / math.sqrt(H)
        elif name.endswith(gm.SHARED_OUT):
            a = rng.standard_normal((H, S)) / math.sqrt(S)
        else:
            raise KeyError(f"no shape rule for {name}")
        out[name] = a.astype(np.float32)
    return out


def _write(work, name, cfg, tensors=None, rng=None, shards=1):
    """Writes cfg (+ tensors, or random ones from rng) as an HF checkpoint WORK/NAME; returns (Model, tensors)."""
    from check_logits_selftest import write_checkpoint   # imported here: check_logits_selftest imports this module
    d = os.path.join(work, name)
    if tensors is None:
        tensors = synth(_config_model(work, "oracle_" + name, cfg), rng)
    write_checkpoint(d, cfg, tensors, shards=shards)
    return ref.Model(d), tensors


def model_configs():
    return [
        ("granitemoe/1b-a400m shrunk (tied, GQA 4/2, top-4 of 8, multipliers 12 .22 1/8 6)", small_config()),
        ("granitemoe/untied+attention_bias+MHA (kv null)+top-1+rope linear 2, multipliers 3 .5 .35 2.5",
         small_config(tie_word_embeddings=False, attention_bias=True, num_key_value_heads=None, num_experts_per_tok=1,
                      rope_scaling={"type": "linear", "factor": 2.0}, embedding_multiplier=3.0,
                      residual_multiplier=0.5, attention_multiplier=0.35, logits_scaling=2.5)),
        ("granitemoeshared/shared 24+GQA 4/1+attention_bias+tied, multipliers 12 .22 1/8 6",
         small_config(model_type="granitemoeshared", architectures=["GraniteMoeSharedForCausalLM"],
                      shared_intermediate_size=24, num_key_value_heads=1, attention_bias=True)),
        ("granitemoeshared/shared 0+untied+rope_parameters theta 5e5+top-3, multipliers 1 1 1 1",
         small_config(model_type="granitemoeshared", architectures=["GraniteMoeSharedForCausalLM"],
                      shared_intermediate_size=0, tie_word_embeddings=False, num_experts_per_tok=3, rope_theta=None,
                      rope_parameters={"rope_type": "default", "rope_theta": 5e5}, embedding_multiplier=1.0,
                      residual_multiplier=1.0, attention_multiplier=1.0, logits_scaling=1.0)),
    ]


def granite_model_tests(t, work, archs=gm.TYPES):
    log("granitemoe / granitemoeshared model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(1357)
    ids = [int(v) for v in rng.integers(0, VOCAB, size=SEQ)]
    for n, (label, cfg) in enumerate(model_configs()):
        if cfg["model_type"] not in archs:
            continue
        t0 = time.time()
        name = f"granite_{n}_" + label.split(" ")[0].replace("/", "__")
        m, tensors = _write(work, name, cfg, rng=rng)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (SEQ, VOCAB) and full.dtype == np.float32 and bool(np.all(np.isfinite(full))),
                f"{label}: logits shape/dtype/finite")
        t.check(not m.ckpt.unused(), f"{label}: tensors never read: {m.ckpt.unused()[:6]}")
        naive = m.forward(ids, naive=True)
        err = float(np.max(np.abs(naive.astype(np.float64) - full)))
        t.check(err <= 2e-5 * scale, f"{label}: vectorised vs token-by-token max err {err:.3e} (scale {scale:.3g})")
        perr = float(np.max(np.abs(m.forward(ids[:7]) - full[:7])))
        t.check(perr <= 1e-6 * scale, f"{label}: prefix logits differ from the first rows by {perr:.3e}")
        alt = ids[:-1] + [(ids[-1] + 1) % VOCAB]
        aerr = float(np.max(np.abs(m.forward(alt)[:-1] - full[:-1])))
        t.check(aerr <= 1e-6 * scale, f"{label}: changing the last token changed earlier rows by {aerr:.3e}")
        sh, _ = _write(work, name + "__sharded", cfg, tensors, shards=3)
        t.check(np.array_equal(sh.forward(ids), full), f"{label}: sharded checkpoint logits differ")
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        if m.shared_inter > 0:
            m2 = ref.Model(m.ckpt.dir)
            for i in range(m.n_layers):
                k = f"model.layers.{i}.{gm.SHARED_OUT}"
                m2.ckpt._cache[k] = np.zeros_like(m.ckpt[k])
            diff = float(np.max(np.abs(m2.forward(ids) - full)))
            t.check(diff > 1e-3 * scale, f"{label}: zeroing the shared MLP moves the logits by only {diff:.2e}")
        log(f"  {label[:80]:<80} max|logit| {scale:7.3f}  naive err {err:.2e}  ({time.time() - t0:.1f}s)")


# --- a one-layer model by hand ---

def hand_forward(T, c, ids):
    """The granitemoe / granitemoeshared forward of a ONE-layer checkpoint T (config c) over ids, written out
    in float64 from the formulas: embeddings x embedding_multiplier; RMSNorm; q/k/v (+ biases); RoPE as a 2-D
    rotation of (d, d + D/2) by pos * theta^(-2d/D); scores x attention_multiplier, causal softmax, GQA; o_proj;
    residual + attn x residual_multiplier; RMSNorm; router: sort the logits, softmax of the k largest; expert
    rows [0, I) gate, [I, 2I) up; shared MLP likewise; residual + mlp x residual_multiplier; RMSNorm; head;
    / logits_scaling."""
    f64 = lambda n: T[n].astype(np.float64)  # noqa: E731
    H, nh = c["hidden_size"], c["num_attention_heads"]
    nkv = c.get("num_key_value_heads") or nh
    D, I, k = H // nh, c["intermediate_size"], c["num_experts_per_tok"]
    S = c.get("shared_intermediate_size", 0) if c["model_type"] == "granitemoeshared" else 0
    em, rm = c.get("embedding_multiplier", 1.0), c.get("residual_multiplier", 1.0)
    am, ls = c.get("attention_multiplier", 1.0), c.get("logits_scaling", 1.0)
    eps, theta = c["rms_norm_eps"], float(c["rope_theta"])
    bias = c.get("attention_bias", False)

    def rms(v, w):
        return v / math.sqrt(float(np.mean(v * v)) + eps) * w

    def rot(v, pos):
        out = v.copy()
        for d in range(D // 2):
            ang = pos * theta ** (-2.0 * d / D)
            out[d] = v[d] * math.cos(ang) - v[d + D // 2] * math.sin(ang)
            out[d + D // 2] = v[d + D // 2] * math.cos(ang) + v[d] * math.sin(ang)
        return out

    def silu(v):
        return v / (1.0 + np.exp(-v))

    p = "model.layers.0."
    a = p + "self_attn."
    lin = lambda n, v: f64(a + n + ".weight") @ v + (f64(a + n + ".bias") if bias else 0.0)  # noqa: E731
    hs = [f64("model.embed_tokens.weight")[tok] * em for tok in ids]
    xs = [rms(h, f64(p + "input_layernorm.weight")) for h in hs]
    qs = [lin("q_proj", x) for x in xs]
    ks = [lin("k_proj", x) for x in xs]
    vs = [lin("v_proj", x) for x in xs]
    rows = []
    for t in range(len(ids)):
        heads = []
        for hh in range(nh):
            j = hh // (nh // nkv)
            q = rot(qs[t][hh * D:(hh + 1) * D], t)
            sc = [am * float(q @ rot(ks[u][j * D:(j + 1) * D], u)) for u in range(t + 1)]
            e = [math.exp(s - max(sc)) for s in sc]
            heads.append(sum(e[u] / sum(e) * vs[u][j * D:(j + 1) * D] for u in range(t + 1)))
        h = hs[t] + rm * lin("o_proj", np.concatenate(heads))
        x = rms(h, f64(p + "post_attention_layernorm.weight"))
        logit = f64(p + gm.ROUTER) @ x
        order = sorted(range(len(logit)), key=lambda e_: -logit[e_])[:k]
        z = [math.exp(logit[e_] - logit[order[0]]) for e_ in order]
        mlp = np.zeros(H)
        for e_, ze in zip(order, z):
            y = f64(p + gm.EXPERTS_IN)[e_] @ x
            mlp += ze / sum(z) * (f64(p + gm.EXPERTS_OUT)[e_] @ (silu(y[:I]) * y[I:]))
        if S:
            y = f64(p + gm.SHARED_IN) @ x
            mlp += f64(p + gm.SHARED_OUT) @ (silu(y[:S]) * y[S:])
        h = h + rm * mlp
        head = f64("model.embed_tokens.weight") if c["tie_word_embeddings"] else f64("lm_head.weight")
        rows.append(head @ rms(h, f64("model.norm.weight")) / ls)
    return np.stack(rows)


def multiplier_tests(t, work, archs=gm.TYPES):
    """One layer, hidden 8, heads 2/1 of 4, 3 experts top-2, 3 tokens, multipliers 1.5 (embedding), .75 (residual),
    .7 (attention), 6 (logits; the embedding and residual ones chosen so that both branches weigh against the
    embedding): both passes against hand_forward, then each
    multiplier's effect on its own: logits_scaling divides the logits exactly; attention_multiplier leaves row 0
    (one key) unchanged and moves the others, and at 0 makes the attention the plain mean of the values;
    residual_multiplier 0 leaves lm_head(norm(embedding)) / logits_scaling; scaling embedding_multiplier and
    residual_multiplier together by 4 changes nothing (every branch reads a normed input and the head a normed
    output), scaling either alone does."""
    log("granitemoe multiplier checks on a one-layer model")
    rng = np.random.default_rng(97531)
    ids = [3, 11, 5]
    for typ in gm.TYPES:
        if typ not in archs:
            continue
        base = dict(model_type=typ, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                    intermediate_size=4, num_local_experts=3, num_experts_per_tok=2, vocab_size=16, rms_norm_eps=1e-6,
                    rope_theta=10.0, tie_word_embeddings=typ == "granitemoe", attention_bias=typ == "granitemoeshared",
                    embedding_multiplier=1.5, residual_multiplier=0.75, attention_multiplier=0.7,
                    logits_scaling=6.0, hidden_act="silu")
        if typ == "granitemoeshared":
            base["shared_intermediate_size"] = 6
        m, _ = _write(work, f"granite_hand_{typ}", base, rng=rng)
        T = {n: m.ckpt[n] for n in m.expected_names()}   # the BF16-rounded values the checkpoint holds
        want = hand_forward(T, base, ids)
        variants = {"": dict(), "ls1": dict(logits_scaling=1.0), "am2": dict(attention_multiplier=2.0),
                    "am0": dict(attention_multiplier=0.0), "rm0": dict(residual_multiplier=0.0),
                    "em4rm4": dict(embedding_multiplier=6.0, residual_multiplier=3.0),
                    "em4": dict(embedding_multiplier=6.0), "rm4": dict(residual_multiplier=3.0)}
        out = {}
        for tag, kw in variants.items():
            mm = m if not tag else _write(work, f"granite_hand_{typ}_{tag}", dict(base, **kw), T)[0]
            out[tag] = (mm.forward(ids), mm.forward(ids, naive=True))
        head = T["model.embed_tokens.weight"] if base["tie_word_embeddings"] else T["lm_head.weight"]
        emb = T["model.embed_tokens.weight"][ids].astype(np.float64) * 1.5
        hn = emb / np.sqrt(np.mean(emb * emb, axis=1, keepdims=True) + 1e-6) * T["model.norm.weight"]
        want_r0 = hn @ head.T.astype(np.float64) / 6.0
        want_am0 = hand_forward(T, dict(base, attention_multiplier=0.0), ids)
        for n, name in ((0, "vectorised"), (1, "token-by-token")):
            got = {tag: v[n] for tag, v in out.items()}
            t.check(_rel(got[""], want) <= 1e-5,
                    f"{typ} ({name}): one layer by hand, rel err {_rel(got[''], want):.2e}")
            t.close(got["ls1"] / 6.0, got[""], f"{typ} ({name}): logits_scaling 6 divides the logits by 6", rtol=2e-7,
                    atol=0)
            t.check(_rel(got["am2"][0], got[""][0]) <= 1e-6,
                    f"{typ} ({name}): attention_multiplier does not move row 0 (one key)")
            t.check(_rel(got["am2"][1:], got[""][1:]) > 1e-3,
                    f"{typ} ({name}): attention_multiplier 2 vs .7 moves rows 1..")
            t.check(_rel(got["am0"], want_am0) <= 1e-5,
                    f"{typ} ({name}): attention_multiplier 0 (the mean of the values) by hand")
            t.check(_rel(got["rm0"], want_r0) <= 1e-6,
                    f"{typ} ({name}): residual_multiplier 0 leaves lm_head(norm(embedding)) / logits_scaling")
            t.check(_rel(got["em4rm4"], got[""]) <= 1e-5,
                    f"{typ} ({name}): embedding and residual multipliers x4 together: rel change "
                    f"{_rel(got['em4rm4'], got['']):.2e}")
            for tag in ("em4", "rm4"):
                t.check(_rel(got[tag], got[""]) > 1e-3, f"{typ} ({name}): {tag} alone moves the logits")


def granite_tests(t, work, archs=gm.TYPES):
    granite_config_tests(t, work)
    multiplier_tests(t, work, archs)
    granite_model_tests(t, work, archs)
