// Gated DeltaNet on the CPU: the linear-attention layers of Qwen3-Next and Qwen3.5-MoE, the gated delta
// rule S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T (Yang, Kautz, Hatamizadeh, "Gated Delta
// Networks: Improving Mamba2 with Delta Rule", ICLR 2025; S is stored transposed here, [dk, dv]), one
// token at a time, as transformers' modeling_qwen3_next.py torch_recurrent_gated_delta_rule computes it
// after its l2norm and scaling; and the per-token elementwise parts around it (the depthwise causal
// conv1d + SiLU over the q/k/v channels, the L2 normalisation of q and k). Host API only; no torch, all
// float32.
//
// The recurrence. For each value head h in [head_begin, head_end), its state S = state[h]: [dk, dv]
// float32 row-major (dv contiguous), and each token s in [0, t) in order, with key head hk = h / (n_v / n_k)
// (value heads share key heads in groups of n_v / n_k consecutive heads, as transformers'
// repeat_interleave), q = q[s, hk], k = k[s, hk]: [dk] (already L2-normalised, q already scaled by
// dk^-0.5), v = v[s, h]: [dv], d = expf(g[s, h]) (libm's expf, float), b = beta[s, h]:
//   S[i][j] = S[i][j] * d                                    for every i, j
//   kv[j] = 0; for i ascending: kv[j] = kv[j] + S[i][j] * k[i]
//   delta[j] = (v[j] - kv[j]) * b
//   S[i][j] = S[i][j] + k[i] * delta[j]                      for every i, j
//   o[j] = 0;  for i ascending: o[j] = o[j] + S[i][j] * q[i]
//   out[s, h, j] = o[j]
// Every operation is one fp32 multiplication, addition or subtraction rounded to nearest (no fused
// multiply-add; the kernels' translation units are compiled with -ffp-contract=off). Lane j depends on
// column j of S only, so the variants vectorise over j, run a block of columns through all t tokens
// (it stays in the near caches) and do the steps above lane by lane in exactly this order: every
// variant is BIT-IDENTICAL to GatedDeltaRecurrentReference, whatever the head split, and t tokens in one call
// give the same bits as t calls of one token each (tests/kernels/gated_delta_test.cc checks all three).
// Across machines the bits also depend on libm's expf (one call per token and head).
//
// Variants (the Bf16Gemm ISAs of kernels/bf16_gemm.h, chosen by BestGemmIsa and its ZIPMOE_GEMM_ISA
// override, each run only where GemmIsaAvailable says so; each in its own translation unit compiled
// with that ISA's flags):
//   kScalar  GatedDeltaRecurrentReference itself; any CPU.
//   kAvx2    x86-64 AVX2: 8 lanes per vector (gated_delta_avx2.cc).
//   kAvx512  x86-64 AVX-512F: 16 lanes per vector (gated_delta_avx512.cc).
//   kNeon    AArch64: 4 lanes per vector (gated_delta_neon.cc; tested under qemu, tests/kernels/aarch64).
// kAvx512Bf16, kAmxBf16 and kNeonBf16 (BF16 dot products for the matmuls) have no variant here: where
// BestGemmIsa picks one, GatedDeltaRecurrent runs kAvx512 / kNeon.
//
// Thread-safety: every function is reentrant. A call is single-threaded; callers parallelise over value
// heads by giving threads disjoint [head_begin, head_end) ranges (they write disjoint state and out).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "kernels/bf16_gemm.h"

namespace zipmoe::kernels {

// One call of the recurrence over t tokens. The token strides let q, k and v be column slices of one
// projection (or conv) output [t, channels] without copies: q = x + 0, k = x + n_k * dk,
// v = x + 2 * n_k * dk, each with token stride `channels`.
// None of q, k, v, g, beta may overlap state or out.
struct GatedDeltaArgs {
  const float* q = nullptr;     // [t, q_token_stride]: q[s * q_token_stride + hk * dk + i], hk < n_k, i < dk
  const float* k = nullptr;     // [t, k_token_stride]: k[s * k_token_stride + hk * dk + i]
  const float* v = nullptr;     // [t, v_token_stride]: v[s * v_token_stride + h * dv + j], h < n_v, j < dv
  const float* g = nullptr;     // [t, n_v] log decay (<= 0 in the model: -exp(A_log) * softplus(a + dt_bias))
  const float* beta = nullptr;  // [t, n_v] write strength (sigmoid(b) in the model)
  float* state = nullptr;       // [n_v, dk, dv] in/out; heads outside [head_begin, head_end) untouched
  float* out = nullptr;         // [t, out_token_stride]: out[s * out_token_stride + h * dv + j] written
  int64_t t = 0;                // tokens, processed in order (1 = one decode step)
  int64_t n_k = 0;              // key heads (q and k)
  int64_t n_v = 0;              // value heads, a multiple of n_k
  int64_t dk = 0;               // key head dimension
  int64_t dv = 0;               // value head dimension
  int64_t q_token_stride = 0;   // floats between tokens of q (>= n_k * dk)
  int64_t k_token_stride = 0;   // floats between tokens of k (>= n_k * dk)
  int64_t v_token_stride = 0;   // floats between tokens of v (>= n_v * dv)
  int64_t out_token_stride = 0; // floats between tokens of out (>= n_v * dv)
  int64_t head_begin = 0;       // value heads [head_begin, head_end) are computed
  int64_t head_end = 0;
};

// Checks the shapes, strides, head range and pointers of `a`. Errors: kInvalidArgument naming the bad
// field (negative size, n_k == 0 with value heads, n_v not a multiple of n_k, a token stride below its
// row, a head range outside [0, n_v], a null pointer with work to do). Values are not read.
Status ValidateGatedDeltaArgs(const GatedDeltaArgs& a);

// The scalar reference: the steps above, token by token, each a plain loop over all of S. No validation.
void GatedDeltaRecurrentReference(const GatedDeltaArgs& a);

// The variant GatedDeltaRecurrent runs: BestGemmIsa(), with kAvx512Bf16 and kAmxBf16 -> kAvx512 and kNeonBf16 ->
// kNeon.
GemmIsa GatedDeltaIsa();

// True when `isa` has a variant here (kScalar, kAvx2, kAvx512, kNeon) and GemmIsaAvailable(isa).
bool GatedDeltaIsaAvailable(GemmIsa isa);

// GatedDeltaIsa()'s variant. No validation (the executor validates the layer's shapes once; see
// ValidateGatedDeltaArgs); t == 0 or an empty head range does nothing.
void GatedDeltaRecurrent(const GatedDeltaArgs& a);

// `isa`'s variant (tests, benches). Errors: ValidateGatedDeltaArgs's; kUnavailable if
// !GatedDeltaIsaAvailable(isa).
Status GatedDeltaRecurrentWithIsa(GemmIsa isa, const GatedDeltaArgs& a);

// The depthwise causal conv1d over time, with an optional bias and an optional SiLU after it, over a rolling
// state of the last kernel - 1 inputs (transformers' conv_state [C, K] holds the last K inputs, of which the
// conv reads the last K - 1; here the state is those K - 1, token-major). Its three users: Qwen3-Next's conv1d
// on the q/k/v channels (no bias, SiLU), Mamba2's over xBC (BambaMixer: bias, SiLU) and LFM2's short
// convolution over B * x (Lfm2MoeShortConv: bias iff conv_bias, no activation). With xx the state rows followed
// by the t input rows, for every token s and channel c:
//   acc = bias ? bias[c] : 0; for j in [0, kernel): acc = acc + w[c, j] * xx[s + j, c]
//   out[s, c] = silu ? acc / (1 + expf(-acc)) : acc
// and the state becomes the last kernel - 1 rows of xx. out may be x itself (same pointer and stride:
// each input is read before its output is written); otherwise they must not overlap, nor either the state.
struct CausalConvArgs {
  const float* x = nullptr;      // [t, x_token_stride]: x[s * x_token_stride + c], c < channels
  const float* w = nullptr;      // [channels, kernel] (conv1d.weight [C, 1, K] without its middle axis)
  float* state = nullptr;        // [kernel - 1, channels] in/out, oldest row first (zeros before the first token)
  float* out = nullptr;          // [t, out_token_stride]: out[s * out_token_stride + c]
  int64_t t = 0;
  int64_t channels = 0;
  int64_t kernel = 0;            // >= 1 (4 in Qwen3-Next)
  int64_t x_token_stride = 0;    // >= channels
  int64_t out_token_stride = 0;  // >= channels
  const float* bias = nullptr;   // [channels], or null: no bias
  bool silu = true;              // SiLU after the conv (false: the conv's output as it is)
};

// Scalar, token by token. No validation.
void CausalConv1d(const CausalConvArgs& a);

// In place, for every token s < t and head h < n_heads, the row r = x + s * token_stride + h * dim:
//   sum = 0; for i ascending: sum = sum + r[i] * r[i]
//   inv = 1 / sqrtf(sum + 1e-6);  r[i] = (r[i] * inv) * scale
// transformers' l2norm (x * rsqrt(sum x^2 + 1e-6)) followed by Qwen3-Next's query scaling
// (scale = dim^-0.5 for q; 1 for k, which leaves r[i] * inv). Scalar. No validation.
void L2NormalizeHeads(float* x, int64_t t, int64_t n_heads, int64_t dim, int64_t token_stride, float scale);

}  // namespace zipmoe::kernels
