// The executor's float32 CPU path between the matrix products: RMSNorm, rotary embedding, gated
// MLPs (routed experts, shared experts, dense MLPs) and the products themselves, as plain loops over
// raw buffers instead of one torch operator per step (issue 13: at decode, ~150 small torch
// operators per layer cost ~9 ms of a 48 ms token on 2 cores while the second core idled).
//
// Parallel regions. Gemms / MlpGateUp / MlpDown each run all their products in ONE parallel region
// (torch's intra-op threads, at::parallel_for) whose threads claim small tasks (a few rows of one
// product, ~32 KiB of weights each) from a shared counter until none is left, so products of
// different shapes share one fork/join and the threads finish together. Each output element is
// computed by kernels::Bf16Gemm in its fixed summation order (kernels/bf16_gemm.h), so results do
// not depend on the thread count, on how rows are split or on which other products share a region.
//
// Numerics (float32, one rounding per operation, the same on every call whatever the batch):
//   RmsNorm      y = w * (x * (1 / sqrt(var + eps))), var = (float)(Σ x² in double / d)
//   silu·up      act = (g / (1 + exp(-g))) * u
//   rotate-half  y[i] = x[i] cos[i] - x[i + d/2] sin[i],  y[i + d/2] = x[i + d/2] cos[i + d/2] + x[i] sin[i + d/2]
// These match the HF modules' formulas (Qwen2RMSNorm, nn.SiLU, apply_rotary_pos_emb) up to the
// rounding of their fp32 reductions; tests/reference/check_logits.py bounds the result at 1e-4.
//
// Internal to services/executor; no torch types in this header. Thread-safety: reentrant; callers
// own every buffer and keep it alive for the call.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/bf16_gemm.h"

namespace zipmoe::executor::cpu {

// RMSNorm of n rows of width d (row stride d): x [n, d], weight [d] float32 -> y [n, d] (y may be x).
void RmsNorm(const float* x, int64_t n, int64_t d, const float* weight, float eps, float* y);

// Rotate-half rotary embedding in place (apply_rotary_pos_emb, non-interleaved) of the first d dims
// of each head: x [n, heads, head_dim] contiguous (d <= head_dim; the dims from d on pass through, as
// Glm4Moe's partial rotary), cos/sin [n, d] (row t is token t's position).
void RotateHalf(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t d, const float* cos, const float* sin);

// Causal attention of one sequence (AttendCausal in attention.h), heads grouped as repeat_kv does:
// q [n_heads, t, dk] contiguous; key j of kv head h at k + h * k_head_stride + (j - key_begin) * dk (v
// likewise with dv), key_begin <= j < total; query i sits at position pos0 + i and sees key j iff j <= pos0 + i and
// (window == 0 or pos0 + i - j < window). out [t, n_heads * dv]:
//   s_j = q · k_j (the dot product in the kernels' order, computed for visible keys only), then per
//   query row kernels::SoftmaxValues (kernels/attention_cpu.h): p = exp(s·scale - max) / Σ exp(s·scale -
//   max) over the visible keys in a fixed sixteen-lane order, out = Σ_j p_j v_j in ascending j; the
//   same bits on every ISA and machine, for a row whatever else is in the call (decode or prefill).
// KV heads run in parallel when the work is large enough.
struct AttentionArgs {
  const float* q = nullptr;
  int64_t n_heads = 0, t = 0, dk = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  // A BF16 KV cache (GeneratorOptions::kv_cache_bf16): keys and values as BF16 bit patterns, laid out as
  // k and v, used instead of them when set (both or neither).
  const uint16_t* k_bf16 = nullptr;
  const uint16_t* v_bf16 = nullptr;
  int64_t k_head_stride = 0, v_head_stride = 0;
  int64_t n_kv = 0, total = 0, dv = 0;
  // Values (float32 or BF16 as the keys) between value rows; 0 = dv. MLA's latent cache reads its values
  // as the first dv columns of its keys (v == k, v_row_stride == dk).
  int64_t v_row_stride = 0;
  int64_t pos0 = 0;
  float scale = 1.0f;
  int64_t window = 0;
  // The position of the first cached row: key j at k + h * k_head_stride + (j - key_begin) * dk (v likewise),
  // key_begin <= j < total. A sliding-window layer's cache drops the positions no later query can see
  // (KvCache::set_trim_windows): every query's visible keys must start at key_begin or later (else
  // std::invalid_argument). 0 = every position from the first.
  int64_t key_begin = 0;
  // gpt_oss: one logit per query head [n_heads] appended to every row of the softmax and dropped after
  // it (p_j = exp(s_j - m) / (Σ exp(s - m) + exp(sink - m)), m = max(s, sink)); null = none.
  const float* sinks = nullptr;
  float* out = nullptr;
};
void AttendCausal(const AttentionArgs& a);

// act[t, i] = silu(g[t, i]) * u[t, i] for count elements (act may alias g or u).
void SiluMul(const float* g, const float* u, int64_t count, float* act);

// gpt_oss's clamped SwiGLU (GptOssExperts): g' = min(g, limit), u' = clamp(u, -limit, limit),
// act = (u' + 1) * (g' * sigmoid(g' * alpha)), for count elements (act may alias g or u).
void ClampedSwiglu(const float* g, const float* u, int64_t count, float limit, float alpha, float* act);
// The product y = x · Wᵀ over all rows of `w`: x [n, ldx], y [n, ldy] (row_end = w.rows, no bias).
kernels::GemmArgs Product(const kernels::GemmWeights& w, const float* x, int64_t n, int64_t ldx, float* y,
                          int64_t ldy);

// Every product of `args` (each over all rows of its weight: row_begin/row_end are ignored) in one
// parallel region. No validation (shapes come from the loaded model).
void Gemms(const std::vector<kernels::GemmArgs>& args);

// One gated MLP y = down(silu(gate(x)) * up(x)) (gpt_oss: with biases and the clamped SwiGLU, below):
// gate/up [I, H], down [H, I], x [n, H] (row stride
// ldx), y [n, H] (row stride ldy), with caller-owned scratch act and up_out, each [n, I].
struct MlpJob {
  kernels::GemmWeights gate, up, down;
  const float* x = nullptr;
  int64_t n = 0;
  int64_t ldx = 0;
  float* act = nullptr;     // [n, I]: gate(x), then silu(gate(x)) * up(x)
  float* up_out = nullptr;  // [n, I]: up(x)
  float* y = nullptr;       // [n, ldy]: columns [0, H) written by MlpDown
  int64_t ldy = 0;
  // gpt_oss: biases of the gate / up [I] and down [H] products (null: none), and the clamped SwiGLU
  // (ClampedSwiglu) instead of silu·up when swiglu_limit > 0.
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 1.702f;
};

// Phase 1 of every job (gate and up products, then silu·up on the same rows, in the same task) and
// every product of `extra`, in one parallel region.
void MlpGateUp(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra = {});

// MlpGateUp, with `on_caller` run first by the calling thread inside the same region while the
// helpers start on the products (then the caller joins them; it runs everything itself where no helper
// joins; with no products, `on_caller` alone runs). `on_caller` must not touch the jobs' or products' buffers. For serial work that the products
// do not depend on: a decode step's router and routing beside the shared expert (moe_block.cc).
void MlpGateUp(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra,
               const std::function<void()>& on_caller);

// Phase 2 of every job (the down product from act) and every product of `extra`, in one region.
void MlpDown(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra = {});

}  // namespace zipmoe::executor::cpu
