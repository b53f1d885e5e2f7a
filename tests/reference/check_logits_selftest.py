"""The self-test of the numpy reference (check_logits.py --self-test): known answers of its helpers and,
on small checkpoints written here in exact HF layout, the vectorised pass against the independent slow
pass, causality, sharded == single file, and the CLI output file. The gpt_oss part is in
check_logits_selftest_gpt_oss.py, the qwen3_next / qwen3_5_moe part in check_logits_selftest_qwen3_next.py, the
granitemoe / granitemoeshared part in check_logits_selftest_granite.py, the granitemoehybrid part in
check_logits_selftest_granite_hybrid.py, the lfm2_moe part in check_logits_selftest_lfm2.py, the afmoe part in
check_logits_selftest_afmoe.py.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import moe_reference as ref
from check_logits_compare import CheckError, config_only_model, fed_sequence, log
from check_logits_selftest_afmoe import afmoe_tests, known_answer_tests_afmoe
from check_logits_selftest_gpt_oss import gpt_oss_tests, known_answer_tests_gpt_oss
from check_logits_selftest_granite import granite_tests, known_answer_tests_granite
from check_logits_selftest_granite_hybrid import granite_hybrid_tests, known_answer_tests_granite_hybrid
from check_logits_selftest_lfm2 import known_answer_tests_lfm2, lfm2_tests
from check_logits_selftest_qwen3_next import known_answer_tests_qwen3_next, qwen3_next_tests

# ====================================================================================================
# self-test
# ====================================================================================================

class SelfTest:
    def __init__(self):
        self.n = 0
        self.failures = []

    def check(self, cond, what):
        self.n += 1
        if not cond:
            self.failures.append(what)
            log(f"  FAIL: {what}")

    def close(self, got, want, what, rtol=1e-6, atol=1e-7):
        got = np.asarray(got, dtype=np.float64)
        want = np.asarray(want, dtype=np.float64)
        ok = got.shape == want.shape and bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)))
        if not ok:
            what = f"{what}: got {np.array2string(got.ravel()[:8], precision=9)} want " \
                   f"{np.array2string(want.ravel()[:8], precision=9)}"
        self.check(ok, what)


def known_answer_tests(t):
    log("known-answer checks of the helpers")
    # RMSNorm: x=[1,2,3,4]: mean(x^2) = 30/4 = 7.5.
    x = np.array([[1, 2, 3, 4]], dtype=np.float32)
    w = np.array([1, 2, 0.5, -1], dtype=np.float32)
    inv = 1 / math.sqrt(7.5 + 1e-6)
    t.close(ref.rms_norm(x, w, 1e-6), [[1 * inv, 4 * inv, 1.5 * inv, -4 * inv]], "rms_norm [1,2,3,4]")
    t.check(ref.rms_norm(x, w, 1e-6).dtype == np.float32, "rms_norm returns float32")

    # inv_freq, d=4, theta=10000: [1, 1/100].
    t.close(ref.rope_inv_freq(4, 10000.0), [1.0, 0.01], "rope_inv_freq(4, 1e4)")
    t.close(ref.rope_inv_freq(8, 1e6), [1.0, 1e-1 * 10 ** (-0.5), 1e-3, 1e-3 * 10 ** (-1.5)],
            "rope_inv_freq(8, 1e6)")
    # rotate_half([1,2,3,4]) = [-3,-4,1,2].
    t.close(ref.rotate_half(np.array([1, 2, 3, 4], dtype=np.float32)), [-3, -4, 1, 2], "rotate_half")
    # NeoX rope at position 1 of x=[1,0,0,0] (pair (0,2), angle 1): [cos1, 0, sin1, 0];
    # of x=[0,1,0,0] (pair (1,3), angle 0.01): [0, cos.01, 0, sin.01].
    cos, sin = ref.rope_cos_sin([0, 1], ref.rope_inv_freq(4, 10000.0))
    c1, s1 = 0.5403023058681398, 0.8414709848078965
    c01, s01 = 0.9999500004166653, 0.009999833334166664
    t.close(cos[1], [c1, c01, c1, c01], "rope cos table pos 1")
    t.close(sin[0], [0, 0, 0, 0], "rope sin table pos 0")
    xr = np.array([[1, 0, 0, 0], [0, 1, 0, 0]], dtype=np.float32)
    t.close(ref.apply_rope(xr[:, None, :], cos[1:2], sin[1:2])[:, 0, :],
            [[c1, 0, s1, 0], [0, c01, 0, s01]], "apply_rope pos 1")
    # DeepSeek de-interleave: [a0 b0 a1 b1] -> [a0 a1 b0 b1].
    t.close(ref.deinterleave(np.array([[10, 11, 20, 21, 30, 31]], dtype=np.float32)), [[10, 20, 30, 11, 21, 31]],
            "deinterleave")
    # YaRN (DeepSeek-V2 / -Lite constants: factor 40, mscale = mscale_all_dim = 0.707, beta 32/1, orig 4096).
    t.close(ref.yarn_get_mscale(40, 0.707), 1 + 0.0707 * math.log(40), "yarn_get_mscale(40, .707)", rtol=1e-12)
    t.close(ref.yarn_get_mscale(40, 0.707), 1.2608037774, "yarn_get_mscale(40, .707) value", rtol=1e-9)
    t.close(ref.yarn_get_mscale(1.0, 0.707), 1.0, "yarn_get_mscale(scale<=1) = 1")
    t.close(ref.yarn_get_mscale(40, 0), 1.0, "yarn_get_mscale(mscale=0) = 1")
    # correction dim: dim * ln(orig / (rot * 2pi)) / (2 ln base); dim 64: rot 32 -> 10.3..., rot 1 -> 22.5...
    t.close(ref.yarn_find_correction_dim(32, 64, 10000, 4096), 64 * math.log(4096 / (64 * math.pi)) / (2 * math.log(1e4)),
            "yarn_find_correction_dim", rtol=1e-12)
    t.check(ref.yarn_find_correction_range(32, 1, 64, 10000, 4096) == (10, 23), "yarn correction range dim 64 = (10, 23)")
    t.check(ref.yarn_find_correction_range(32, 1, 16, 10000, 4096) == (2, 6), "yarn correction range dim 16 = (2, 6)")
    t.close(ref.yarn_linear_ramp_mask(2, 6, 8), [0, 0, 0, 0.25, 0.5, 0.75, 1, 1], "yarn_linear_ramp_mask(2, 6, 8)")
    t.close(ref.yarn_linear_ramp_mask(3, 3, 5), [0, 0, 0, 0, 1], "yarn_linear_ramp_mask(min == max)")
    rs = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
          "original_max_position_embeddings": 4096, "type": "yarn"}
    inv, m = ref.deepseek_yarn_inv_freq_and_mscale(16, 10000, rs)
    # i < 2: extrapolation (unscaled); i >= 6: interpolation (/40); i = 4: halfway: (0.01 + 0.01/40) / 2.
    want = [10000 ** (-2 * i / 16) for i in range(8)]
    ramp = [0, 0, 0, 0.25, 0.5, 0.75, 1, 1]
    want = [f * (1 - r) + f / 40 * r for f, r in zip(want, ramp)]
    t.close(inv, want, "deepseek yarn inv_freq dim 16", rtol=2e-7)
    t.close(inv[4], 0.005125, "deepseek yarn inv_freq[4] = 0.005125", rtol=2e-7)
    t.close(inv[7], 10 ** -3.5 / 40, "deepseek yarn inv_freq[7]", rtol=2e-7)
    t.close(m, 1.0, "deepseek yarn cos/sin mscale (mscale == mscale_all_dim) = 1")
    _, m2 = ref.deepseek_yarn_inv_freq_and_mscale(16, 10000, dict(rs, mscale=1.0, mscale_all_dim=0))
    t.close(m2, 1 + 0.1 * math.log(40), "deepseek yarn cos/sin mscale (mscale 1, all_dim 0)", rtol=1e-7)
    # BF16 <-> F32.
    bits = np.array([0x3F80, 0xC000, 0x3EAA, 0x0000, 0x8000, 0x7F80], dtype=np.uint16)
    got = ref.bf16_bits_to_f32(bits)
    t.check(got.dtype == np.float32 and got.tolist() == [1.0, -2.0, 0.33203125, 0.0, -0.0, float("inf")]
            and bool(np.signbit(got[4])), f"bf16 -> f32: {got.tolist()}")
    t.check(ref.f32_to_bf16_bits(np.array([1.0, 1.00390625, 1.01171875], dtype=np.float32)).tolist()
            == [0x3F80, 0x3F80, 0x3F82], "f32 -> bf16 round-to-nearest-even")
    # Softmax/top-k routing with probs [.1 .2 .3 .4].
    probs = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    idx, w = ref.select_experts("qwen2_moe", probs, 2, False)
    t.check(idx.tolist() == [[3, 2]], "routing: top-2 indices in descending order")
    t.close(w, [[0.4, 0.3]], "qwen2_moe norm_topk_prob=false keeps raw probs")
    t.close(ref.select_experts("qwen3_moe", probs, 2, True)[1], [[4 / 7, 3 / 7]], "qwen3_moe norm_topk_prob=true")
    t.close(ref.select_experts("mixtral", probs, 2, False)[1], [[4 / 7, 3 / 7]], "mixtral always renormalises")
    t.close(ref.select_experts("olmoe", probs, 2, False)[1], [[0.4, 0.3]], "olmoe norm_topk_prob=false")
    t.close(ref.select_experts("deepseek_v2", probs, 2, False, routed_scale=2.5)[1], [[1.0, 0.75]],
            "deepseek: no norm -> x routed_scaling_factor")
    t.close(ref.select_experts("deepseek_v2", probs, 2, True, routed_scale=2.5)[1], [[4 / 7, 3 / 7]],
            "deepseek: norm (top_k > 1) -> / (sum + 1e-20), no scaling")
    t.close(ref.select_experts("deepseek_v2", probs, 1, True, routed_scale=2.5)[1], [[1.0]],
            "deepseek: top_k == 1 -> x routed_scaling_factor even with norm_topk_prob")
    # group_limited_greedy: 4 experts in 2 groups {0,1}, {2,3}; probs [.35 .05 .3 .3]: group maxima .35/.3,
    # topk_group 1 keeps group 0 only -> experts 0 then 1 (not 2, 3).
    p2 = np.array([[0.35, 0.05, 0.3, 0.3]], dtype=np.float32)
    idx, w = ref.select_experts("deepseek_v2", p2, 2, False, topk_method="group_limited_greedy", n_group=2,
                                topk_group=1)
    t.check(idx.tolist() == [[0, 1]], f"group_limited_greedy keeps the best group only (got {idx.tolist()})")
    t.close(w, [[0.35, 0.05]], "group_limited_greedy weights")
    idx, _ = ref.select_experts("deepseek_v2", p2, 2, False, topk_method="greedy")
    t.check(idx.tolist() == [[0, 2]], "greedy ignores groups")
    # Attention: two tokens, one head, the second query attends equally to both keys when scores tie.
    q = np.array([[[0.0, 0.0], [0.0, 0.0]]], dtype=np.float32)
    k = np.array([[[1.0, 0.0], [0.0, 1.0]]], dtype=np.float32)
    v = np.array([[[2.0, 4.0], [6.0, 8.0]]], dtype=np.float32)
    t.close(ref.attention(q, k, v, 1.0), [[2, 4], [4, 6]], "causal attention")
    t.close(ref.attention(q, k, v, 1.0, sliding_window=1), [[2, 4], [6, 8]], "sliding window 1 attends to self")
    # GQA: query head h reads kv head h // 2.
    q4 = np.zeros((4, 1, 2), dtype=np.float32)
    k2 = np.zeros((2, 1, 2), dtype=np.float32)
    v2 = np.array([[[1.0, 1.0]], [[5.0, 5.0]]], dtype=np.float32)
    t.close(ref.attention(q4, k2, v2, 1.0), [[1, 1, 1, 1, 5, 5, 5, 5]], "GQA head mapping")
    known_answer_tests_v3(t)
    known_answer_tests_ernie(t)
    known_answer_tests_gpt_oss(t)
    known_answer_tests_qwen3_next(t)
    known_answer_tests_granite(t)
    known_answer_tests_granite_hybrid(t)
    known_answer_tests_lfm2(t)
    known_answer_tests_afmoe(t)


def e4m3_by_ldexp(code):
    """E4M3 decoded from the OCP FP8 definition with math.ldexp (independent of the reader's bit tricks)."""
    sign = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 0x7
    if e == 15 and m == 7:
        return float("nan")
    if e == 0:
        return sign * math.ldexp(m, -9)          # subnormal: m/8 * 2^(1-7)
    return sign * math.ldexp(8 + m, e - 10)      # normal: (1 + m/8) * 2^(e-7)


def known_answer_tests_v3(t):
    """DeepSeek-V3 / GLM-4.5: the noaux_tc router, transformers' YaRN, partial rotary, FP8 E4M3."""
    # noaux_tc, bias changes the choice: scores [.9 .8 .7 .1] + bias [0 0 .3 0] -> choice [.9 .8 1.0 .1]:
    # experts 2 then 0 (not 1), weights from the UNBIASED scores [.7 .9]; norm: /1.6; always x scaling 2.
    sc = np.array([[0.9, 0.8, 0.7, 0.1]], dtype=np.float32)
    bias = np.array([0.0, 0.0, 0.3, 0.0], dtype=np.float32)
    idx, w = ref.select_experts_noaux_tc(sc, bias, 2, 1, 1, True, 2.0)
    t.check(idx.tolist() == [[2, 0]], f"noaux_tc: the bias changes the choice to experts [2, 0] (got {idx.tolist()})")
    t.close(w, [[0.7 / 1.6 * 2.0, 0.9 / 1.6 * 2.0]], "noaux_tc: unbiased weights, normalised, then x routed_scaling_factor")
    t.close(ref.select_experts_noaux_tc(sc, bias, 2, 1, 1, False, 2.0)[1], [[1.4, 1.8]],
            "noaux_tc: no norm -> unbiased scores x routed_scaling_factor")
    idx, _ = ref.select_experts_noaux_tc(sc, np.zeros(4, dtype=np.float32), 2, 1, 1, True, 1.0)
    t.check(idx.tolist() == [[0, 1]], "noaux_tc: zero bias picks the top scores")
    # top_k 1 with norm_topk_prob: w = s/(s + 1e-20) = 1, then x 2.5 (the V2 rule would give s x 2.5).
    t.close(ref.select_experts_noaux_tc(np.array([[0.3, 0.6]], dtype=np.float32), np.zeros(2, dtype=np.float32),
                                        1, 1, 1, True, 2.5)[1], [[2.5]], "noaux_tc: top_k 1 + norm -> 1 x scaling")
    # Groups: 8 experts in 4 groups of 2, keep 2 groups, top-3. Group scores are the sums of the two best:
    # g0 {.9 .1} = 1.0, g1 {.6 .5} = 1.1, g2 {.8 .05} = .85, g3 {.3 .3} = .6 -> keep g1, g0 -> experts 0, 2, 3
    # (expert 4 = .8 is the second best overall but its group is dropped; a max-per-group rule would keep g2).
    sc = np.array([[0.9, 0.1, 0.6, 0.5, 0.8, 0.05, 0.3, 0.3]], dtype=np.float32)
    idx, w = ref.select_experts_noaux_tc(sc, np.zeros(8, dtype=np.float32), 3, 4, 2, False, 1.0)
    t.check(idx.tolist() == [[0, 2, 3]], f"noaux_tc groups: sum of the top-2 per group (got {idx.tolist()})")
    t.close(w, [[0.9, 0.6, 0.5]], "noaux_tc groups: weights")
    # The bias moves the groups: +.7 on expert 5 gives choice .75 there and g2 = .8 + .75 = 1.55: groups g2, g1
    # are kept, g0 (with the best score .9) is dropped; top-3 choice: 4 (.8), 5 (.75), 2 (.6); weights are the
    # unbiased scores .8, .05, .6.
    b5 = np.array([0, 0, 0, 0, 0, 0.7, 0, 0], dtype=np.float32)
    idx, w = ref.select_experts_noaux_tc(sc, b5, 3, 4, 2, False, 1.0)
    t.check(idx.tolist() == [[4, 5, 2]], f"noaux_tc groups: the bias selects groups 2 and 1 (got {idx.tolist()})")
    t.close(w, [[0.8, 0.05, 0.6]], "noaux_tc groups: biased choice, unbiased weights")
    # The masked value: scores [.9 .1 .3 .2] + bias [.5 -.3 0 0] -> choice [1.4 -.2 .3 .2]; groups {0,1} = 1.2,
    # {2,3} = .5: group 0 kept. masked_fill 0.0 (transformers' DeepseekV3 / Glm4Moe): [1.4 -.2 0 0] -> top-2 is
    # expert 0 then a dropped expert at 0.0 (the tie 2/3 goes to the lower index: 2, weight .3); with -inf
    # (the newest Glm4MoeLite, vLLM) it would be expert 1 (weight .1).
    sc = np.array([[0.9, 0.1, 0.3, 0.2]], dtype=np.float32)
    bneg = np.array([0.5, -0.3, 0.0, 0.0], dtype=np.float32)
    idx, w = ref.select_experts_noaux_tc(sc, bneg, 2, 2, 1, False, 1.0)
    t.check(idx.tolist() == [[0, 2]], f"noaux_tc: masked experts score 0.0 (got {idx.tolist()})")
    t.close(w, [[0.9, 0.3]], "noaux_tc: masked 0.0 weights")
    idx, _ = ref.select_experts_noaux_tc(sc, bneg, 2, 2, 1, False, 1.0, mask_value=-np.inf)
    t.check(idx.tolist() == [[0, 1]], "noaux_tc: masked -inf keeps the kept group's negative choice")
    try:
        ref.select_experts_noaux_tc(np.zeros((1, 6), dtype=np.float32), np.zeros(6, dtype=np.float32), 2, 4, 1,
                                    True, 1.0)
        t.check(False, "noaux_tc accepts 6 experts in 4 groups")
    except ValueError:
        t.check(True, "noaux_tc rejects uneven groups")

    # transformers' YaRN (DeepSeek-V3 constants: factor 40, mscale = mscale_all_dim = 1, orig 4096): the
    # inv_freq of DeepSeek-V2's remote YaRN, cos/sin multiplier 1.
    rs = {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
          "original_max_position_embeddings": 4096}
    inv, m = ref.hf_yarn_inv_freq_and_attention_factor(16, 10000, rs, 163840)
    inv2, _ = ref.deepseek_yarn_inv_freq_and_mscale(16, 10000, rs)
    t.check(np.array_equal(inv, inv2), "HF yarn inv_freq == DeepSeek-V2 yarn inv_freq (same orig)")
    t.close(m, 1.0, "HF yarn attention factor (mscale == mscale_all_dim) = 1")
    # mscale_all_dim 0: HF uses get_mscale(factor) = 1 + 0.1 ln 40 (DeepSeek-V2's remote code: get_mscale(40, .707)).
    _, m = ref.hf_yarn_inv_freq_and_attention_factor(16, 10000, dict(rs, mscale=0.707, mscale_all_dim=0), 163840)
    t.close(m, 1 + 0.1 * math.log(40), "HF yarn attention factor, mscale_all_dim 0", rtol=1e-12)
    _, m = ref.hf_yarn_inv_freq_and_attention_factor(16, 10000, dict(rs, attention_factor=0.75), 163840)
    t.close(m, 0.75, "HF yarn attention_factor override", rtol=1e-12)
    # No original_max_position_embeddings: the range uses max_position_embeddings 8192: dim 16, theta 1e4:
    # low = floor(16 ln(8192/(64 pi)) / (2 ln 1e4)) = 3, high = ceil(16 ln(8192/(2 pi)) / (2 ln 1e4)) = 7.
    rs2 = {"type": "yarn", "factor": 4}
    inv, m = ref.hf_yarn_inv_freq_and_attention_factor(16, 10000, rs2, 8192)
    ramp = [0, 0, 0, 0, 0.25, 0.5, 0.75, 1]
    want = [10000 ** (-2 * i / 16) for i in range(8)]
    t.close(inv, [f * (1 - r) + f / 4 * r for f, r in zip(want, ramp)], "HF yarn, orig = max_position_embeddings",
            rtol=2e-7)
    t.close(m, 1 + 0.1 * math.log(4), "HF yarn default attention factor", rtol=1e-12)
    lo = 16 * math.log(8192 / (64 * math.pi)) / (2 * math.log(1e4))
    hi = 16 * math.log(8192 / (2 * math.pi)) / (2 * math.log(1e4))
    inv, _ = ref.hf_yarn_inv_freq_and_attention_factor(16, 10000, dict(rs2, truncate=False), 8192)
    ramp = [min(max((i - lo) / (hi - lo), 0), 1) for i in range(8)]
    t.close(inv, [f * (1 - r) + f / 4 * r for f, r in zip(want, ramp)], "HF yarn truncate=false", rtol=2e-6)

    # GLM partial rotary: head 8, rotary dim 4 (inv_freq [1, .01]) at position 1: pairs (0,2) and (1,3) rotate,
    # dims 4..7 pass through.
    cos, sin = ref.rope_cos_sin([1], ref.rope_inv_freq(4, 10000.0))
    x = np.array([[[1, 0, 0, 0, 7, 8, 9, 10], [0, 1, 0, 0, 7, 8, 9, 10]]], dtype=np.float32)
    c1, s1 = math.cos(1), math.sin(1)
    c01, s01 = math.cos(0.01), math.sin(0.01)
    t.close(ref.apply_partial_rope(x.transpose(1, 0, 2), cos, sin)[:, 0, :],
            [[c1, 0, s1, 0, 7, 8, 9, 10], [0, c01, 0, s01, 7, 8, 9, 10]], "partial rope (rotary dim 4 of 8)")

    # FP8 E4M3: all 256 codes against the ldexp definition (NaN at 0x7F / 0xFF, signed zeros).
    got = ref.e4m3_bits_to_f32(np.arange(256, dtype=np.uint8))
    want = np.array([e4m3_by_ldexp(c) for c in range(256)], dtype=np.float64)
    nan_ok = np.array_equal(np.isnan(got), np.isnan(want))
    fin = ~np.isnan(want)
    t.check(got.dtype == np.float32 and nan_ok and np.array_equal(got[fin].astype(np.float64), want[fin])
            and np.array_equal(np.signbit(got[fin]), np.signbit(want[fin])),
            "e4m3 decoder: all 256 codes equal the ldexp definition")
    t.check([float(got[c]) for c in (0x01, 0x08, 0x38, 0x7E, 0xB8, 0xFE)] == [2.0 ** -9, 2.0 ** -6, 1.0, 448.0, -1.0,
                                                                              -448.0], "e4m3 landmarks")
    t.check(int(np.isnan(got).sum()) == 2 and bool(np.isnan(got[0x7F])) and bool(np.isnan(got[0xFF])),
            "e4m3: exactly 0x7F and 0xFF are NaN (no infinities)")
    codes = np.array([c for c in range(256) if c not in (0x7F, 0xFF)], dtype=np.uint8)
    t.check(np.array_equal(ref.f32_to_e4m3_bits(ref.e4m3_bits_to_f32(codes)), codes), "e4m3 encoder round trip")
    mid = np.array([1.0625, 1.1875, 2.0 ** -10, 3 * 2.0 ** -10, 1000.0, -1000.0, 464.0], dtype=np.float32)
    t.check(ref.f32_to_e4m3_bits(mid).tolist() == [0x38, 0x3A, 0x00, 0x02, 0x7E, 0xFE, 0x7E],
            f"e4m3 encoder: ties to even, saturation (got {[hex(v) for v in ref.f32_to_e4m3_bits(mid)]})")


def known_answer_tests_ernie(t):
    """ERNIE 4.5 MoE: the interleaved RoPE and the router with its selection-only bias and norm_min."""
    # rotate_half of modeling_ernie4_5*.py: (x0, x1, x2, x3) -> (-x1, x0, -x3, x2) (NeoX: (-x2, -x3, x0, x1)).
    t.close(ref.rotate_half_interleaved(np.array([1, 2, 3, 4], dtype=np.float32)), [-2, 1, -4, 3],
            "rotate_half_interleaved")
    # Position 1, head 4, theta 1e4 (inv_freq [1, .01]): pair (0,1) turns by 1 rad, pair (2,3) by .01 rad.
    cos, sin = ref.rope_cos_sin([0, 1], ref.rope_inv_freq(4, 10000.0))
    c1, s1 = math.cos(1), math.sin(1)
    c01, s01 = math.cos(0.01), math.sin(0.01)
    x = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 2, 3, 4]], dtype=np.float32)
    want = [[c1, s1, 0, 0], [-s1, c1, 0, 0], [0, 0, c01, s01], [0, 0, -s01, c01],
            [c1 - 2 * s1, 2 * c1 + s1, 3 * c01 - 4 * s01, 4 * c01 + 3 * s01]]
    t.close(ref.apply_rope_interleaved(x[:, None, :], cos[1:2], sin[1:2])[:, 0, :], want,
            "interleaved rope at position 1 (pairs (0,1) by 1 rad, (2,3) by .01 rad)", rtol=1e-6, atol=1e-6)
    t.close(ref.apply_rope_interleaved(x[:, None, :], cos[0:1], sin[0:1])[:, 0, :], x, "interleaved rope at position 0")
    # Applying DeepSeek's de-interleave then NeoX rotate_half to both q and k gives the same q.k products
    # (the same permutation of the head dims on both sides), and the rotated vectors are that permutation of
    # the interleaved ones; plain NeoX on the stored layout gives other products.
    rng = np.random.default_rng(5)
    q = rng.standard_normal((3, 6, 16)).astype(np.float32)
    k = rng.standard_normal((3, 6, 16)).astype(np.float32)
    cos, sin = ref.rope_cos_sin(np.arange(6), ref.rope_inv_freq(16, 500000.0))
    qi, ki = ref.apply_rope_interleaved(q, cos, sin), ref.apply_rope_interleaved(k, cos, sin)
    qd, kd = ref.apply_rope(ref.deinterleave(q), cos, sin), ref.apply_rope(ref.deinterleave(k), cos, sin)
    dots_i = qi @ ki.transpose(0, 2, 1)
    t.close(qd @ kd.transpose(0, 2, 1), dots_i, "interleaved rope q.k == de-interleave + rotate_half q.k",
            rtol=1e-5, atol=1e-5)
    t.close(qd, ref.deinterleave(qi), "de-interleave + rotate_half == de-interleave of the interleaved rope",
            rtol=1e-6, atol=1e-6)
    dots_n = ref.apply_rope(q, cos, sin) @ ref.apply_rope(k, cos, sin).transpose(0, 2, 1)
    t.check(float(np.max(np.abs(dots_n - dots_i))) > 1e-2, "NeoX rope on the stored layout differs from ERNIE's")

    # Router: probs [.1 .2 .3 .4], top-2. No bias: experts 3, 2, weights .4/.7, .3/.7.
    probs = np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32)
    idx, w = ref.select_experts_ernie(probs, np.zeros(4, dtype=np.float32), 2, 1e-12)
    t.check(idx.tolist() == [[3, 2]], f"ernie router: no bias picks the top probs (got {idx.tolist()})")
    t.close(w, [[0.4 / 0.7, 0.3 / 0.7]], "ernie router: weights renormalised")
    # The bias changes the choice: +.25 on expert 1 gives [.1 .45 .3 .4]: experts 1, 3; the weights are the
    # UNBIASED probs .2, .4 over their sum .6.
    idx, w = ref.select_experts_ernie(probs, np.array([0, 0.25, 0, 0], dtype=np.float32), 2, 1e-12)
    t.check(idx.tolist() == [[1, 3]], f"ernie router: the bias changes the choice to [1, 3] (got {idx.tolist()})")
    t.close(w, [[0.2 / 0.6, 0.4 / 0.6]], "ernie router: unbiased probs weigh, renormalised")
    # A negative bias drops a choice: -.5 on expert 3 gives [.1 .2 .3 -.1]: experts 2, 1, weights .3/.5, .2/.5.
    idx, w = ref.select_experts_ernie(probs, np.array([0, 0, 0, -0.5], dtype=np.float32), 2, 1e-12)
    t.check(idx.tolist() == [[2, 1]], f"ernie router: a negative bias drops expert 3 (got {idx.tolist()})")
    t.close(w, [[0.6, 0.4]], "ernie router: weights after a negative bias")
    # norm_min clamps the divisor: a tiny sum 5e-13 < 1e-12 gives w = p / 1e-12 = .3, .2 (not .6, .4) ...
    tiny = np.array([[1e-13, 2e-13, 3e-13, 0.0]], dtype=np.float32)
    idx, w = ref.select_experts_ernie(tiny, np.zeros(4, dtype=np.float32), 2, 1e-12)
    t.check(idx.tolist() == [[2, 1]], "ernie router: tiny probs choose experts 2, 1")
    t.close(w, [[0.3, 0.2]], "ernie router: sum 5e-13 < moe_norm_min 1e-12 divides by 1e-12", rtol=1e-6)
    # ... and a large moe_norm_min .9 > .7 divides [.4 .3] by .9; top_k 1 with the default gives weight 1.
    t.close(ref.select_experts_ernie(probs, np.zeros(4, dtype=np.float32), 2, 0.9)[1], [[0.4 / 0.9, 0.3 / 0.9]],
            "ernie router: moe_norm_min .9 > sum .7")
    t.close(ref.select_experts_ernie(probs, np.zeros(4, dtype=np.float32), 1, 1e-12)[1], [[1.0]],
            "ernie router: top_k 1 -> weight 1")


def _ernie_model(cfg, work, name):
    return config_only_model(work, "ernie_cfg_" + name, cfg)


def ernie_config_tests(t, work):
    """ernie4_5_moe config parsing: transformers' Ernie4_5_MoeConfig defaults, the MoE layer rule, the
    attribute_map aliases, rope_theta sources, and the refused configs."""
    log("ernie4_5_moe config checks")
    base = {"model_type": "ernie4_5_moe", "hidden_size": 64, "num_hidden_layers": 6, "num_attention_heads": 8,
            "vocab_size": 96}
    m = _ernie_model(base, work, "defaults")
    got = (m.tie, m.eps, m.theta, m.top_k, m.n_experts, m.moe_inter, m.n_shared, m.norm_min, m.qkv_bias, m.o_bias,
           m.mlp_bias, m.lm_head_bias, m.n_kv, m.head_dim, m.moe_start, m.moe_end, m.moe_interval)
    t.check(got == (True, 1e-5, 500000.0, 6, 64, 1536, 2, 1e-12, False, False, False, False, 4, 8, 1, 5, 1),
            f"ernie defaults (tie, eps, theta, k, E, moe_inter, shared, norm_min, biases, kv 4 (not the 8 heads), "
            f"head_dim, start, end, interval): {got}")
    t.close(m.inv_freq, [500000.0 ** (-i / 4) for i in range(4)], "ernie inv_freq over head_dim 8, theta 5e5",
            rtol=2e-7)
    t.check(m.rope_style == "interleaved", "ernie rope style interleaved")
    names = m.expected_names()
    t.check("lm_head.weight" not in names and "lm_head.bias" not in names, "ernie default: tied head, no bias")
    t.check("model.layers.0.mlp.gate_proj.weight" in names and "model.layers.1.mlp.gate.weight" in names
            and "model.layers.1.mlp.moe_statics.e_score_correction_bias" in names
            and "model.layers.1.mlp.shared_experts.up_proj.weight" in names
            and "model.layers.5.mlp.experts.63.down_proj.weight" in names,
            "ernie default names: dense layer 0, MoE 1..5 with moe_statics and shared experts")
    cases = [  # (config changes, MoE layers of 6)
        (dict(moe_layer_start_index=1, moe_layer_end_index=4, moe_layer_interval=2), [1, 3]),
        (dict(moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=2), [1, 3, 5]),
        (dict(moe_layer_start_index=0, moe_layer_interval=3), [2, 5]),
        (dict(moe_layer_start_index=0), [0, 1, 2, 3, 4, 5]),
        (dict(moe_layer_start_index=2, moe_layer_end_index=3), [2, 3]),
        (dict(moe_layer_end_index=-2), []),  # only -1 means the last layer
        (dict(moe_layer_end_index=None), [1, 2, 3, 4, 5]),
    ]
    for i, (kw, want) in enumerate(cases):
        m = _ernie_model(dict(base, **kw), work, f"layers{i}")
        got = [j for j in range(6) if m.is_moe_layer(j)]
        t.check(got == want, f"ernie MoE layers for {kw}: {got}, want {want}")
    m = _ernie_model(dict(base, num_experts=8, num_experts_per_tok=3), work, "aliases")
    t.check((m.n_experts, m.top_k) == (8, 3), "ernie: num_experts / num_experts_per_tok alias moe_num_experts / moe_k")
    m = _ernie_model(dict(base, num_experts=8, moe_num_experts=8, moe_k=2), work, "aliases_same")
    t.check((m.n_experts, m.top_k) == (8, 2), "ernie: an alias equal to its moe_* key")
    m = _ernie_model(dict(base, use_bias=True, tie_word_embeddings=False, moe_num_shared_experts=0,
                          moe_num_experts=4, moe_k=2, head_dim=16, num_key_value_heads=2), work, "bias")
    names = m.expected_names()
    want = ["lm_head.weight", "lm_head.bias", "model.layers.0.self_attn.q_proj.bias",
            "model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.down_proj.bias",
            "model.layers.1.mlp.experts.3.gate_proj.bias"]
    t.check(all(n in names for n in want) and not any(".shared_experts." in n for n in names)
            and "model.layers.1.mlp.gate.bias" not in names and (m.head_dim, m.n_kv) == (16, 2),
            "ernie use_bias: q/k/v/o, every MLP and lm_head have a bias, the router none; no shared experts at 0")
    m = _ernie_model(dict(base, rope_parameters={"rope_type": "default", "rope_theta": 1e4}), work, "rope_params")
    t.check(m.theta == 1e4, "ernie rope_theta from rope_parameters")
    m = _ernie_model(dict(base, rope_theta=2e5), work, "rope_theta")
    t.check(m.theta == 2e5, "ernie top-level rope_theta")
    m = _ernie_model(dict(base, rope_scaling={"type": "linear", "factor": 2.0}), work, "linear")
    t.check(m.rope_linear_factor == 2.0, "ernie linear rope scaling")
    bad = [
        ("interval0", dict(moe_layer_interval=0), ValueError, "moe_layer_interval"),
        ("alias_conflict", dict(moe_k=2, num_experts_per_tok=3), ValueError, "num_experts_per_tok"),
        ("list_experts", dict(moe_num_experts=[64, 64]), ValueError, "moe_num_experts"),
        ("k_gt_e", dict(moe_num_experts=4, moe_k=6), ValueError, "moe_k"),
        ("yarn", dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), NotImplementedError, "yarn"),
        ("partial", dict(partial_rotary_factor=0.5), NotImplementedError, "partial_rotary_factor"),
        ("gelu", dict(hidden_act="gelu"), NotImplementedError, "hidden_act"),
    ]
    for name, kw, exc, text in bad:
        try:
            _ernie_model(dict(base, **kw), work, name)
            t.check(False, f"ernie config {name}: no error")
        except exc as e:
            t.check(text in str(e), f"ernie config {name}: error {e!r} lacks {text!r}")


# --- synthetic checkpoints for the self-test, in exact HF layout ---

def _cfg_common(model_type, **kw):
    c = {"model_type": model_type, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 96, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
         "tie_word_embeddings": False, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
         "hidden_act": "silu", "torch_dtype": "bfloat16"}
    c.update(kw)
    return c


def selftest_configs():
    yarn = {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
            "original_max_position_embeddings": 4096, "type": "yarn"}
    ds = dict(intermediate_size=48, moe_intermediate_size=16, kv_lora_rank=24, qk_nope_head_dim=8,
              qk_rope_head_dim=16, v_head_dim=12, n_routed_experts=8, n_shared_experts=2, first_k_dense_replace=1,
              moe_layer_freq=1, norm_topk_prob=False, routed_scaling_factor=1.0, scoring_func="softmax",
              topk_method="greedy", n_group=1, topk_group=1, q_lora_rank=None, attention_bias=False,
              rope_scaling=yarn, num_key_value_heads=4, num_experts_per_tok=3)
    return [
        ("qwen2_moe", _cfg_common("qwen2_moe", num_key_value_heads=4, intermediate_size=48, moe_intermediate_size=16,
                                  shared_expert_intermediate_size=40, num_experts=8, norm_topk_prob=False,
                                  decoder_sparse_step=1, mlp_only_layers=[], rope_theta=1e6)),
        ("qwen2_moe/sparse_step2+mlp_only+norm+gqa",
         _cfg_common("qwen2_moe", intermediate_size=48, moe_intermediate_size=16, shared_expert_intermediate_size=40,
                     num_experts=8, norm_topk_prob=True, decoder_sparse_step=2, mlp_only_layers=[0],
                     num_hidden_layers=4)),
        ("mixtral", _cfg_common("mixtral", intermediate_size=40, num_local_experts=6, sliding_window=None,
                                rms_norm_eps=1e-5, rope_theta=1e6)),
        ("mixtral/sliding_window5", _cfg_common("mixtral", intermediate_size=40, num_local_experts=6, sliding_window=5)),
        ("qwen3_moe", _cfg_common("qwen3_moe", head_dim=16, intermediate_size=48, moe_intermediate_size=16,
                                  num_experts=8, num_experts_per_tok=3, norm_topk_prob=True, decoder_sparse_step=1,
                                  mlp_only_layers=[], attention_bias=False, rope_theta=1e6)),
        ("qwen3_moe/attention_bias+tied",
         _cfg_common("qwen3_moe", head_dim=8, intermediate_size=48, moe_intermediate_size=16, num_experts=8,
                     norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1], attention_bias=True,
                     tie_word_embeddings=True)),
        ("olmoe", _cfg_common("olmoe", num_key_value_heads=4, intermediate_size=16, num_experts=8, norm_topk_prob=False,
                              clip_qkv=None, attention_bias=False, rms_norm_eps=1e-5)),
        ("olmoe/clip_qkv+gqa+norm+tied",
         _cfg_common("olmoe", intermediate_size=16, num_experts=8, norm_topk_prob=True, clip_qkv=0.3,
                     attention_bias=False, tie_word_embeddings=True)),
        ("deepseek_v2", _cfg_common("deepseek_v2", **ds)),
        ("deepseek_v2/q_lora+group_limited+norm+bias+freq2",
         _cfg_common("deepseek_v2", **dict(ds, q_lora_rank=20, topk_method="group_limited_greedy", n_group=4,
                                          topk_group=2, norm_topk_prob=True, attention_bias=True, moe_layer_freq=2,
                                          num_hidden_layers=4, first_k_dense_replace=0))),
        ("deepseek_v2/no_norm+scaling2.5+mscale_ne",
         _cfg_common("deepseek_v2", **dict(ds, routed_scaling_factor=2.5, n_shared_experts=0,
                                          rope_scaling=dict(yarn, mscale=1.0, mscale_all_dim=0.5)))),
        ("deepseek_v2/no_rope_scaling", _cfg_common("deepseek_v2", **dict(ds, rope_scaling=None))),
    ] + selftest_configs_v3() + selftest_configs_ernie()


FP8_QUANT = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [16, 16]}


def selftest_configs_v3():
    """deepseek_v3, glm4_moe, glm4_moe_lite. Each has a nonzero random e_score_correction_bias (model_tests
    checks that it changes the routing) and, where noted, an MTP layer after the last layer."""
    yarn3 = {"type": "yarn", "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1,
             "original_max_position_embeddings": 4096}
    v3 = dict(intermediate_size=48, moe_intermediate_size=16, kv_lora_rank=24, qk_nope_head_dim=8,
              qk_rope_head_dim=16, v_head_dim=12, n_routed_experts=8, n_shared_experts=1, first_k_dense_replace=1,
              moe_layer_freq=1, norm_topk_prob=True, routed_scaling_factor=2.5, scoring_func="sigmoid",
              topk_method="noaux_tc", n_group=4, topk_group=2, q_lora_rank=20, attention_bias=False,
              rope_scaling=yarn3, rope_interleave=True, num_key_value_heads=4, num_experts_per_tok=3,
              num_nextn_predict_layers=1, max_position_embeddings=163840)
    glm = dict(head_dim=16, num_key_value_heads=2, intermediate_size=48, moe_intermediate_size=16,
               n_routed_experts=8, n_shared_experts=1, first_k_dense_replace=1, norm_topk_prob=True,
               routed_scaling_factor=2.5, n_group=1, topk_group=1, attention_bias=True, use_qk_norm=False,
               partial_rotary_factor=0.5, rope_theta=1e6, rms_norm_eps=1e-5, num_experts_per_tok=3,
               num_nextn_predict_layers=1)
    lite = dict(intermediate_size=48, moe_intermediate_size=16, kv_lora_rank=24, qk_nope_head_dim=8,
                qk_rope_head_dim=16, v_head_dim=12, n_routed_experts=8, n_shared_experts=1, q_lora_rank=20,
                norm_topk_prob=True, routed_scaling_factor=1.8, n_group=1, topk_group=1, attention_bias=False,
                rope_interleave=True, rope_theta=1e6, rms_norm_eps=1e-5, num_key_value_heads=4,
                num_experts_per_tok=3, mlp_layer_types=["dense", "sparse", "sparse"], num_nextn_predict_layers=1)
    return [
        ("deepseek_v3", _cfg_common("deepseek_v3", **v3)),
        ("deepseek_v3/q_lora_null+no_groups+no_norm+no_rope_scaling",
         _cfg_common("deepseek_v3", **dict(v3, q_lora_rank=None, n_group=1, topk_group=1, norm_topk_prob=False,
                                          routed_scaling_factor=1.5, n_shared_experts=2, rope_scaling=None,
                                          num_nextn_predict_layers=0))),
        ("deepseek_v3/mscale_all_dim0+no_interleave+freq2+dense0",
         _cfg_common("deepseek_v3", **dict(v3, rope_scaling=dict(yarn3, mscale=0.707, mscale_all_dim=0),
                                          rope_interleave=False, moe_layer_freq=2, first_k_dense_replace=0,
                                          num_hidden_layers=4))),
        ("deepseek_v3/group_limited_greedy+softmax(V2 gate)",
         _cfg_common("deepseek_v3", **dict(v3, topk_method="group_limited_greedy", scoring_func="softmax",
                                          norm_topk_prob=False, routed_scaling_factor=2.0))),
        ("deepseek_v3/fp8", _cfg_common("deepseek_v3", **dict(v3, quantization_config=FP8_QUANT))),
        ("glm4_moe", _cfg_common("glm4_moe", **glm)),
        ("glm4_moe/qk_norm+groups+rope_parameters(partial .25)",
         _cfg_common("glm4_moe", **dict({k: v for k, v in glm.items() if k not in ("partial_rotary_factor",
                                                                                 "rope_theta")},
                                        use_qk_norm=True, n_group=4, topk_group=2,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                                                         "partial_rotary_factor": 0.25}))),
        ("glm4_moe/defaults(partial .5, head_dim)+no_bias+tied",
         _cfg_common("glm4_moe", **dict({k: v for k, v in glm.items() if k not in ("partial_rotary_factor",
                                                                                 "head_dim")},
                                        attention_bias=False, tie_word_embeddings=True, norm_topk_prob=False,
                                        n_shared_experts=2, num_nextn_predict_layers=0))),
        ("glm4_moe/fp8+not_converted_o_proj",
         _cfg_common("glm4_moe", **dict(glm, use_qk_norm=True, n_group=2, topk_group=1, moe_intermediate_size=24,
                                        intermediate_size=40,
                                        quantization_config=dict(FP8_QUANT, modules_to_not_convert=[
                                            "model.layers.1.self_attn.o_proj"])))),
        ("glm4_moe_lite", _cfg_common("glm4_moe_lite", **lite)),
        ("glm4_moe_lite/q_lora_null+first_k_dense2+groups",
         _cfg_common("glm4_moe_lite", **dict({k: v for k, v in lite.items() if k != "mlp_layer_types"},
                                             q_lora_rank=None, first_k_dense_replace=2, num_hidden_layers=4,
                                             n_group=2, topk_group=1, norm_topk_prob=False))),
    ]


def _ernie_cfg(**kw):
    """An ernie4_5_moe config: its own key names (moe_k, not num_experts_per_tok)."""
    c = _cfg_common("ernie4_5_moe", rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=True,
                    intermediate_size=48, moe_intermediate_size=16, moe_num_experts=8, moe_k=2,
                    moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_end_index=-1, moe_layer_interval=1,
                    moe_norm_min=1e-12, use_bias=False, max_position_embeddings=131072)
    del c["num_experts_per_tok"]
    c.update(kw)
    return {k: v for k, v in c.items() if v is not None}


def selftest_configs_ernie():
    """ernie4_5_moe. Each has a random e_score_correction_bias in [-0.1, 0.2) (model_tests checks that it
    changes the routing)."""
    return [
        ("ernie4_5_moe", _ernie_cfg(num_nextn_predict_layers=1)),   # as ERNIE-4.5-21B-A3B, with an MTP layer
        ("ernie4_5_moe/use_bias+untied+interval2+head_dim16",
         _ernie_cfg(use_bias=True, tie_word_embeddings=False, moe_layer_interval=2, num_hidden_layers=4,
                    head_dim=16, moe_k=3)),
        ("ernie4_5_moe/end_index2+no_shared+mha+rope_parameters",
         _ernie_cfg(num_hidden_layers=4, moe_layer_end_index=2, moe_num_shared_experts=0, num_key_value_heads=4,
                    rope_theta=None, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
        ("ernie4_5_moe/norm_min.9+aliases+start0+bias+tied",
         _ernie_cfg(moe_norm_min=0.9, moe_num_experts=None, moe_k=None, num_experts=8, num_experts_per_tok=2,
                    moe_layer_start_index=0, use_bias=True, moe_num_shared_experts=1)),
    ]


def fp8_quantize(w, block):
    """Block-wise E4M3 quantization as DeepSeek-V3's FP8 checkpoints: per [b0, b1] block, scale_inv =
    amax / 448 and bits = e4m3(w / scale_inv)."""
    b0, b1 = block
    o, i = w.shape
    scale = np.ones((math.ceil(o / b0), math.ceil(i / b1)), dtype=np.float32)
    bits = np.zeros(w.shape, dtype=np.uint8)
    for r in range(scale.shape[0]):
        for c in range(scale.shape[1]):
            blk = w[r * b0:(r + 1) * b0, c * b1:(c + 1) * b1]
            amax = float(np.max(np.abs(blk)))
            scale[r, c] = np.float32(amax / 448.0) if amax > 0 else np.float32(1.0)
            bits[r * b0:(r + 1) * b0, c * b1:(c + 1) * b1] = ref.f32_to_e4m3_bits(blk / scale[r, c])
    return bits, scale


def fp8_candidate(name, tensors):
    """The linear weights a real FP8 checkpoint quantizes: 2-D `.weight`s, not embeddings, heads, norms or
    the router."""
    leaf = name.split(".")[-2] if name.endswith(".weight") else None
    return (leaf is not None and tensors[name].ndim == 2 and "norm" not in leaf
            and leaf not in ("embed_tokens", "lm_head", "head", "gate"))


def synth_checkpoint(cfg, rng):
    """(tensors, dtypes) of a self-test checkpoint: BF16, e_score_correction_bias F32 (ernie4_5_moe: the router
    weight mlp.gate.weight too, as transformers keeps and saves it in fp32), and for an FP8 config the
    quantizable weights as F8_E4M3 bits + F32 `_scale_inv` (except modules_to_not_convert)."""
    tensors = synth_tensors(cfg, rng)
    dtypes = {n: "F32" for n in tensors if n.endswith("e_score_correction_bias")}
    if cfg["model_type"] == "ernie4_5_moe":
        dtypes.update({n: "F32" for n in tensors if n.endswith("mlp.gate.weight")})
    q = cfg.get("quantization_config")
    if q:
        keep = q.get("modules_to_not_convert") or []
        for name in sorted(tensors):
            if fp8_candidate(name, tensors) and not any(k in name for k in keep):
                bits, scale = fp8_quantize(tensors[name], q["weight_block_size"])
                tensors[name], tensors[name + "_scale_inv"] = bits, scale
                dtypes[name], dtypes[name + "_scale_inv"] = "F8_E4M3", "F32"
    return tensors, dtypes


def synth_tensors(cfg, rng):
    """Random float32 tensors with the HF state-dict names/shapes of cfg (via Model.expected_names on a
    shape oracle)."""
    t = cfg["model_type"]
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    nh, nkv = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh

    def shape_of(name):
        base = name.rsplit(".", 2)
        leaf = name.split(".")[-2] if name.endswith((".weight", ".bias")) else name
        is_bias = name.endswith(".bias")
        if name == "model.embed_tokens.weight" or name == "lm_head.weight":
            return (V, H)
        if name == "lm_head.bias":
            return (V,)
        if name.startswith(("model.mtp_emb_norm.", "model.mtp_hidden_norm.")):  # ERNIE MTP
            return (H,)
        if name.startswith("model.mtp_linear_proj."):
            return (H, 2 * H)
        if name.endswith("mlp.moe_statics.e_score_correction_bias"):  # ERNIE: [1, E]
            return (1, cfg.get("num_experts") or cfg["moe_num_experts"])
        if name == "model.norm.weight" or leaf in ("input_layernorm", "post_attention_layernorm", "enorm", "hnorm",
                                                    "norm"):
            return (H,)
        if name.endswith("mlp.gate.e_score_correction_bias"):
            return (cfg["n_routed_experts"],)
        if leaf == "embed_tokens" or leaf == "head":  # MTP layer: embed_tokens, shared_head.head
            return (V, H)
        if leaf == "eh_proj":
            return (H, 2 * H)
        if t in ref.MLA_TYPES:
            qh = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
            shapes = {"q_proj": (nh * qh, H), "q_a_proj": (cfg.get("q_lora_rank") or 0, H),
                      "q_a_layernorm": (cfg.get("q_lora_rank") or 0,),
                      "q_b_proj": (nh * qh, cfg.get("q_lora_rank") or 0),
                      "kv_a_proj_with_mqa": (cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"], H),
                      "kv_a_layernorm": (cfg["kv_lora_rank"],),
                      "kv_b_proj": (nh * (cfg["qk_nope_head_dim"] + cfg["v_head_dim"]), cfg["kv_lora_rank"]),
                      "o_proj": (H, nh * cfg["v_head_dim"])}
        else:
            shapes = {"q_proj": (nh * hd, H), "k_proj": (nkv * hd, H), "v_proj": (nkv * hd, H),
                      "o_proj": (H, nh * hd)}
            if t in ("qwen3_moe", "glm4_moe"):
                shapes.update({"q_norm": (hd,), "k_norm": (hd,)})
            if t == "olmoe":
                shapes.update({"q_norm": (nh * hd,), "k_norm": (nkv * hd,)})
        if leaf in shapes:
            s = shapes[leaf]
            return (s[0],) if is_bias else s
        # MLPs
        if leaf == "gate":
            n = (cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
                 or cfg.get("moe_num_experts"))
            return (n, H)
        if leaf == "shared_expert_gate":
            return (1, H)
        if ".experts." in name:
            inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        elif ".shared_expert." in name:
            inter = cfg["shared_expert_intermediate_size"]
        elif ".shared_experts." in name:
            inter = cfg["moe_intermediate_size"] * cfg.get("n_shared_experts", cfg.get("moe_num_shared_experts"))
        else:
            inter = cfg["intermediate_size"]
        if leaf in ("gate_proj", "up_proj", "w1", "w3"):
            return (inter,) if is_bias else (inter, H)
        if leaf in ("down_proj", "w2"):
            return (H,) if is_bias else (H, inter)
        raise KeyError(f"no shape rule for {name} ({base})")

    # Names come from a throw-away Model built on a config-only directory.
    tmp = tempfile.mkdtemp(prefix="reflayout_")
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(cfg, f)
        ref.write_safetensors(os.path.join(tmp, "model.safetensors"), {})
        names = ref.Model(tmp).expected_names()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if cfg.get("num_nextn_predict_layers") and t == "ernie4_5_moe":
        # ERNIE 4.5's MTP layer as released: model.mtp_block.0.* (a decoder layer: a copy of the last layer's
        # names), model.mtp_emb_norm.0, model.mtp_hidden_norm.0, model.mtp_linear_proj.0 [H, 2H].
        last = f"model.layers.{cfg['num_hidden_layers'] - 1}."
        names += ["model.mtp_block.0." + x[len(last):] for x in names if x.startswith(last)]
        names += [f"model.{x}.0.weight" for x in ("mtp_emb_norm", "mtp_hidden_norm", "mtp_linear_proj")]
    elif cfg.get("num_nextn_predict_layers"):
        # One DeepSeek-V3 / GLM-4.5 MTP layer after the last one: a full decoder layer (a copy of the last
        # layer's names) plus embed_tokens, enorm, hnorm, eh_proj and shared_head.{norm,head}.
        n, last = cfg["num_hidden_layers"], f"model.layers.{cfg['num_hidden_layers'] - 1}."
        names += [f"model.layers.{n}." + x[len(last):] for x in names if x.startswith(last)]
        names += [f"model.layers.{n}.{x}.weight" for x in ("embed_tokens", "enorm", "hnorm", "eh_proj",
                                                            "shared_head.norm", "shared_head.head")]
    out = {}
    for name in names:
        s = shape_of(name)
        leaf = name.split(".")[-2]
        if "norm" in leaf or name.startswith(("model.mtp_emb_norm.", "model.mtp_hidden_norm.")):
            a = 1.0 + 0.2 * rng.standard_normal(s)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(s)
        elif name == "model.embed_tokens.weight":
            a = rng.standard_normal(s)
        elif name.endswith("moe_statics.e_score_correction_bias"):
            # ERNIE: added to softmax probabilities (1/8 on average here); of the same order, so that both the
            # probabilities and the bias decide (model_tests checks that the bias changes the selection).
            a = rng.uniform(-0.1, 0.2, s)
        elif name.endswith("e_score_correction_bias"):
            # Large enough to change the selection (model_tests checks that it does), and positive, so that
            # every biased score stays > 0 and the masked_fill value (0.0 or -inf) cannot matter.
            a = rng.uniform(0.0, 0.6, s)
        elif leaf == "gate":
            a = 3.0 * rng.standard_normal(s) / math.sqrt(s[1])
        else:
            a = rng.standard_normal(s) / math.sqrt(s[1])
        out[name] = a.astype(np.float32)
    return out


def write_checkpoint(d, cfg, tensors, shards=1, dtypes=None):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    if shards == 1:
        ref.write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtypes=dtypes)
        return
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        ref.write_safetensors(os.path.join(d, fn), part, dtypes=dtypes)
        for n in part:
            weight_map[n] = fn
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)


def _dir_name(label):
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label.replace("/", "__"))


def dequantize_independently(bits, scale, block):
    """w[i, j] = e4m3(bits[i, j]) * scale[i // b0, j // b1], block by block with the ldexp decoder."""
    lut = np.array([e4m3_by_ldexp(c) for c in range(256)], dtype=np.float64)
    b0, b1 = block
    out = np.zeros(bits.shape, dtype=np.float32)
    for r in range(scale.shape[0]):
        for c in range(scale.shape[1]):
            blk = bits[r * b0:(r + 1) * b0, c * b1:(c + 1) * b1]
            out[r * b0:(r + 1) * b0, c * b1:(c + 1) * b1] = (lut[blk] * float(scale[r, c])).astype(np.float32)
    return out


def v3_model_checks(t, label, cfg, m, d1, tensors, dtypes, ids, full, scale, work):
    """deepseek_v3 / glm4_moe / glm4_moe_lite: the bias and the groups change the routing, MTP layers are
    not read, an FP8 checkpoint equals the F32 checkpoint of its weights dequantized independently."""
    moe_layers = [i for i in range(m.n_layers) if m.is_moe_layer(i)]
    dense = [i for i in range(m.n_layers) if f"model.layers.{i}.mlp.gate_proj.weight" in tensors]
    t.check(bool(moe_layers) and dense == [i for i in range(m.n_layers) if i not in moe_layers],
            f"{label}: MoE layers {moe_layers}, dense layers {dense}")
    if m.router == "noaux_tc":
        m2 = ref.Model(d1)
        for i in moe_layers:
            name = f"model.layers.{i}.mlp.gate.e_score_correction_bias"
            t.check(m2.ckpt.dtype(name) == "F32", f"{label}: {name} is stored F32")
            m2.ckpt._cache[name] = np.zeros(m.n_experts, dtype=np.float32)
        diff = float(np.max(np.abs(m2.forward(ids) - full)))
        t.check(diff > 1e-3 * scale, f"{label}: zeroing e_score_correction_bias changes the logits by only {diff:.2e}"
                                     f" (the bias should change the selection)")
    if m.n_group > 1 and m.topk_group < m.n_group:
        m3 = ref.Model(d1)
        m3.topk_group = m3.n_group
        diff = float(np.max(np.abs(m3.forward(ids) - full)))
        t.check(diff > 1e-3 * scale, f"{label}: keeping every group changes the logits by only {diff:.2e} "
                                     f"(topk_group should limit the selection)")
    extra = [n for n in m.ckpt.where if m.is_extra_layer_name(n)]
    if cfg.get("num_nextn_predict_layers"):
        t.check(len(extra) > 10, f"{label}: the checkpoint holds an MTP layer ({len(extra)} tensors)")
    t.check(not any(m.is_extra_layer_name(n) for n in m.ckpt.used), f"{label}: an MTP tensor was read")
    q = cfg.get("quantization_config")
    if not q:
        return
    f8 = sorted(n for n in tensors if dtypes.get(n) == "F8_E4M3")
    t.check(len(f8) > 10 and all(m.ckpt.dtype(n) == "F8_E4M3" for n in f8), f"{label}: FP8 weights stored F8_E4M3")
    for k in q.get("modules_to_not_convert") or []:
        t.check(m.ckpt.dtype(k + ".weight") == "BF16", f"{label}: {k} (modules_to_not_convert) stays BF16")
    deq = dict(tensors)
    ddt = dict(dtypes)
    for n in f8:
        deq[n] = dequantize_independently(tensors[n], tensors[n + "_scale_inv"], q["weight_block_size"])
        ddt[n] = "F32"
        del deq[n + "_scale_inv"], ddt[n + "_scale_inv"]
    name = f8[len(f8) // 2]
    t.check(np.array_equal(m.ckpt[name], deq[name]), f"{label}: dequantized {name} differs from the ldexp one")
    dcfg = {k: v for k, v in cfg.items() if k != "quantization_config"}
    d3 = d1 + "__dequantized"
    write_checkpoint(d3, dcfg, deq, dtypes=ddt)
    md = ref.Model(d3)
    md.check_layout()
    t.check(np.array_equal(md.forward(ids), full), f"{label}: FP8 logits differ from those of the F32 checkpoint "
                                                   f"of the independently dequantized weights")


def ernie_model_checks(t, label, cfg, m, d1, tensors, dtypes, ids, full, scale):
    """ernie4_5_moe: the MoE/dense layers follow the config rule, the router weight and the bias are F32 with
    the bias [1, E], the bias changes the routing, moe_norm_min acts when it exceeds the sums, MTP tensors
    are present where configured and never read."""
    n = cfg["num_hidden_layers"]
    end = cfg.get("moe_layer_end_index", -1)
    end = n - 1 if end == -1 else end
    want = [i for i in range(n) if (i + 1) % cfg.get("moe_layer_interval", 1) == 0
            and cfg.get("moe_layer_start_index", 1) <= i <= end]
    moe_layers = [i for i in range(n) if m.is_moe_layer(i)]
    dense = [i for i in range(n) if f"model.layers.{i}.mlp.gate_proj.weight" in tensors]
    t.check(moe_layers == want and dense == [i for i in range(n) if i not in want],
            f"{label}: MoE layers {moe_layers} (want {want}), dense layers {dense}")
    e = cfg.get("moe_num_experts") or cfg["num_experts"]
    for i in moe_layers:
        bias, gate = f"model.layers.{i}.{ref.ERNIE_BIAS}", f"model.layers.{i}.mlp.gate.weight"
        t.check(m.ckpt.dtype(bias) == "F32" and m.ckpt.shape(bias) == [1, e] and m.ckpt.dtype(gate) == "F32",
                f"{label}: {bias} is F32 [1, {e}] and {gate} F32")
    m2 = ref.Model(d1)
    for i in moe_layers:
        m2.ckpt._cache[f"model.layers.{i}.{ref.ERNIE_BIAS}"] = np.zeros((1, e), dtype=np.float32)
    diff = float(np.max(np.abs(m2.forward(ids) - full)))
    t.check(diff > 1e-3 * scale, f"{label}: zeroing moe_statics.e_score_correction_bias changes the logits by only "
                                 f"{diff:.2e} (the bias should change the selection)")
    if m.norm_min > 0.5:
        m3 = ref.Model(d1)
        m3.norm_min = 1e-12
        diff = float(np.max(np.abs(m3.forward(ids) - full)))
        t.check(diff > 1e-3 * scale,
                f"{label}: moe_norm_min {m.norm_min} vs 1e-12 changes the logits by only {diff:.2e}")
    extra = [x for x in m.ckpt.where if m.is_extra_layer_name(x)]
    if cfg.get("num_nextn_predict_layers"):
        t.check(len(extra) > 10 and all(x.startswith("model.mtp_") for x in extra),
                f"{label}: the checkpoint holds an MTP layer ({len(extra)} model.mtp_* tensors)")
    t.check(not any(m.is_extra_layer_name(x) for x in m.ckpt.used), f"{label}: an MTP tensor was read")


def fp8_error_tests(t, work):
    """The FP8 reader on a hand-made [3, 5] weight with [2, 2] blocks, and its errors."""
    codes = np.array([[0x38, 0x40, 0xB8, 0x01, 0x7E], [0x00, 0x80, 0x39, 0x08, 0x3F], [0xC0, 0x30, 0x48, 0x50, 0x7D]],
                     dtype=np.uint8)
    sc = np.array([[0.5, 2.0, 4.0], [8.0, 0.25, 1.0]], dtype=np.float32)
    want = [[e4m3_by_ldexp(int(codes[i, j])) * float(sc[i // 2, j // 2]) for j in range(5)] for i in range(3)]
    q = dict(FP8_QUANT, weight_block_size=[2, 2])

    def make(name, cfg, tensors, dtypes):
        d = os.path.join(work, "fp8_" + name)
        write_checkpoint(d, cfg, tensors, dtypes=dtypes)
        return d

    base_t = {"a.weight": codes, "a.weight_scale_inv": sc, "n.weight": np.ones(3, dtype=np.float32)}
    base_d = {"a.weight": "F8_E4M3", "a.weight_scale_inv": "F32"}
    ck = ref.Checkpoint(make("ok", {"quantization_config": q}, base_t, base_d))
    got = ck["a.weight"]
    t.check(got.dtype == np.float32 and np.array_equal(got, np.array(want, dtype=np.float32)),
            f"FP8 dequantization of a [3, 5] weight with [2, 2] blocks: got {got.tolist()}")
    t.check("a.weight_scale_inv" in ck.used, "FP8: reading a weight marks its scale as read")
    cases = [
        ("missing_scale", {"quantization_config": q}, {"a.weight": codes}, {"a.weight": "F8_E4M3"},
         ValueError, "'a.weight' is F8_E4M3 but its scale 'a.weight_scale_inv' is missing"),
        ("bad_scale_shape", {"quantization_config": q}, dict(base_t, **{"a.weight_scale_inv": sc[:1]}), base_d,
         ValueError, "expected a float tensor of shape [2, 3]"),
        ("not_converted", {"quantization_config": dict(q, modules_to_not_convert=["a"])}, base_t, base_d,
         ValueError, "modules_to_not_convert"),
        ("no_quant_config", {}, base_t, base_d, ValueError, "no quantization_config"),
        ("e5m2", {"quantization_config": dict(q, fmt="e5m2")}, base_t, base_d, NotImplementedError, "e5m2"),
    ]
    for name, cfg, tens, dts, exc, text in cases:
        try:
            ref.Checkpoint(make(name, cfg, tens, dts))
            t.check(False, f"FP8 {name}: no error")
        except exc as e:
            t.check(text in str(e), f"FP8 {name}: error {e!r} lacks {text!r}")


def model_tests(t, archs, work):
    log("model checks on self-written HF-layout checkpoints")
    rng = np.random.default_rng(1234)
    ids = [int(v) for v in rng.integers(0, 96, size=12)]
    for label, cfg in selftest_configs():
        if cfg["model_type"] not in archs:
            continue
        t0 = time.time()
        tensors, dtypes = synth_checkpoint(cfg, rng)
        d1 = os.path.join(work, _dir_name(label))
        d2 = d1 + "__sharded"
        write_checkpoint(d1, cfg, tensors, shards=1, dtypes=dtypes)
        write_checkpoint(d2, cfg, tensors, shards=3, dtypes=dtypes)
        m = ref.Model(d1)
        try:
            m.check_layout()
            t.check(True, "layout")
        except ValueError as e:
            t.check(False, f"{label}: {e}")
        full = m.forward(ids)
        scale = float(np.max(np.abs(full)))
        t.check(full.shape == (len(ids), cfg["vocab_size"]) and full.dtype == np.float32, f"{label}: logits shape/dtype")
        t.check(bool(np.all(np.isfinite(full))), f"{label}: finite logits")
        # Every tensor except the routed experts (and MTP layers) must have been read.
        unused = [n for n in m.ckpt.unused() if ".experts." not in n and not m.is_extra_layer_name(n)]
        t.check(not unused, f"{label}: tensors never read by the forward: {unused[:6]}")
        # vectorised == slow independent loop
        naive = m.forward(ids, naive=True)
        err = float(np.max(np.abs(naive - full)))
        t.check(err <= 2e-5 * scale, f"{label}: vectorised vs token-by-token max err {err:.3e} (scale {scale:.3g})")
        # causality: a prefix gives the first rows
        pre = m.forward(ids[:7])
        perr = float(np.max(np.abs(pre - full[:7])))
        t.check(perr <= 1e-6 * scale, f"{label}: prefix logits differ from the first rows by {perr:.3e}")
        # a change of the last token does not change earlier rows
        alt = list(ids)
        alt[-1] = (alt[-1] + 1) % cfg["vocab_size"]
        aerr = float(np.max(np.abs(m.forward(alt)[:-1] - full[:-1])))
        t.check(aerr <= 1e-6 * scale, f"{label}: changing the last token changed earlier rows by {aerr:.3e}")
        # sharded checkpoint gives identical logits
        sh = ref.Model(d2).forward(ids)
        t.check(np.array_equal(sh, full), f"{label}: sharded checkpoint logits differ")
        # the weights were rounded to bf16 exactly: a re-read tensor is bf16-representable
        emb = m.ckpt["model.embed_tokens.weight"]
        t.check(np.all((emb.view(np.uint32) & 0xFFFF) == 0), f"{label}: upcast bf16 has nonzero low bits")
        if m.type in ref.NEW_TYPE_DEFAULTS:
            v3_model_checks(t, label, cfg, m, d1, tensors, dtypes, ids, full, scale, work)
        elif m.type == "ernie4_5_moe":
            ernie_model_checks(t, label, cfg, m, d1, tensors, dtypes, ids, full, scale)
        log(f"  {label:<56} max|logit| {scale:7.3f}  naive err {err:.2e}  prefix err {perr:.1e}  "
            f"({time.time() - t0:.1f}s)")
    fp8_error_tests(t, work)
    if "ernie4_5_moe" in archs:
        ernie_config_tests(t, work)
    if "gpt_oss" in archs:
        gpt_oss_tests(t, work)
    if any(a in archs for a in ref.qwen3_next.TYPES):
        qwen3_next_tests(t, work, archs)
    if any(a in archs for a in ref.granite.TYPES):
        granite_tests(t, work, archs)
    if any(a in archs for a in ref.granite_hybrid.TYPES):
        granite_hybrid_tests(t, work, archs)
    if any(a in archs for a in ref.lfm2.TYPES):
        lfm2_tests(t, work, archs)
    if any(a in archs for a in ref.afmoe.TYPES):
        afmoe_tests(t, work, archs)
    # CLI
    label, cfg = selftest_configs()[0]
    if cfg["model_type"] in archs:
        d1 = os.path.join(work, _dir_name(label))
        out = os.path.join(work, "cli.f32")
        p = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "moe_reference.py"),
                            "--model", d1, "--ids", ",".join(map(str, ids)), "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        t.check(p.returncode == 0, f"CLI exit {p.returncode}: {p.stdout.decode()[-1000:]}")
        if p.returncode == 0:
            got = np.fromfile(out, dtype="<f4").reshape(len(ids), -1)
            t.check(np.array_equal(got, ref.Model(d1).forward(ids)), "CLI output equals Model.forward")
    # fed-sequence reconstruction of check_logits itself
    rows = np.zeros((5, 8), dtype=np.float32)
    rows[2, 5] = 1
    rows[3, 6] = 1
    rows[4, 1] = 1
    t.check(fed_sequence(rows, [1, 2, 3], 3, set()) == [1, 2, 3, 5, 6], "fed_sequence reconstruction")
    t.check(fed_sequence(rows[:4], [1, 2, 3], 3, {6}) == [1, 2, 3, 5], "fed_sequence with EOS stop")
    for bad_rows, eos, why in ((rows[:4], set(), "early stop without EOS"), (rows[:2], set(), "too few rows")):
        try:
            fed_sequence(bad_rows, [1, 2, 3], 3, eos)
            t.check(False, f"fed_sequence accepts {why}")
        except CheckError:
            t.check(True, why)


def run_self_test(args):
    t = SelfTest()
    t0 = time.time()
    known_answer_tests(t)
    work = tempfile.mkdtemp(prefix="zipmoe_refselftest_")
    try:
        model_tests(t, args.archs, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    if t.failures:
        log(f"\nself-test FAILED: {len(t.failures)} of {t.n} checks ({time.time() - t0:.1f}s)")
        for f in t.failures:
            log("  " + f)
        return 1
    log(f"\nself-test passed: {t.n} checks ({time.time() - t0:.1f}s)")
    return 0
