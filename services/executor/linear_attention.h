// Gated DeltaNet, the linear attention of qwen3_next / qwen3_5_moe (transformers'
// Qwen3NextGatedDeltaNet / Qwen3_5MoeGatedDeltaNet; Yang et al., "Gated Delta Networks", 2024), over
// a ragged batch with each sequence's state in its KvCache. Per layer, with nk / nv key / value heads
// of width dk / dv (value head h reads key head h / (nv / nk)) and C = 2 nk dk + nv dv channels:
//   [q | k | v], z, b, a = the input projections of x   (qwen3_next: in_proj_qkvz / in_proj_ba
//                          de-interleaved per key-head group; qwen3_5_moe: in_proj_qkv / _z / _b / _a)
//   [q | k | v] = silu(causal depthwise conv1d over time, kernel K, no bias), the K-1 inputs before the
//                 first new token taken from the cache (zeros for a new sequence)
//   q = l2norm(q) * dk^-0.5, k = l2norm(k)   (l2norm(x) = x / sqrt(Σ x² + 1e-6) per head)
//   beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias)   (softplus: x above 20, as torch)
//   per value head, state S [dk, dv]: S *= exp(g); S += k ((v - Sᵀk) beta)ᵀ; o = Sᵀq   (one token at a
//   time, in order: prefill and decode run the same recurrence, so a prompt fed in one call or token
//   by token gives the same bits)
//   y = out_proj(RMSNorm(o) * norm.weight * silu(z))   (per value head, eps rms_norm_eps)
// Everything between the projections is float32 on the CPU (the executor refuses these layers on
// another device at load time).
//
// Internal to services/executor. Reentrant; a KvCache is used by one thread at a time.
#pragma once

#include <ATen/ATen.h>

#include "common/checkpoint/model_config.h"
#include "services/executor/attention.h"
#include "services/executor/model_weights.h"

namespace zipmoe::executor {

// x [N, hidden] float32 CPU (after input_layernorm) -> [N, hidden] (after out_proj). Reads and
// advances each sequence's LinearState of `layer_id` in batch.caches (the caller calls Advance).
// granitemoehybrid's layers (config.mamba()) go to Mamba2Forward, lfm2_moe's (config.short_conv()) to
// ShortConvForward.
at::Tensor LinearAttentionForward(const ModelConfig& config, const LinearAttentionWeights& w, int64_t layer_id,
                                  const at::Tensor& x, const BatchLayout& batch);

// Mamba2, granitemoehybrid's "mamba" layers (transformers' BambaMixer.torch_forward; Dao & Gu, "Transformers
// are SSMs", 2024), over the same ragged batch and LinearState (conv: the last K-1 xBC inputs [K-1, Cc];
// recurrent: the SSM state [nh, P, N]). With Ci = nh P, Cc = Ci + 2 G N:
//   z [Ci] | xBC [Cc] | dt [nh] = in_proj(x) (+ bias)
//   xBC = silu(causal depthwise conv1d over time, K taps, + conv bias), the K-1 inputs before the first new
//         token from the cache (zeros for a new sequence); x [nh, P] | B [G, N] | C [G, N] = xBC
//   dt_h = softplus(dt_h + dt_bias_h), A_h = -exp(A_log_h); head h reads group g = h / (nh / G):
//   S_h [P, N] = exp(dt_h A_h) S_h + (dt_h B_g) x_hᵀ;  y_h = S_h C_g + D_h x_h   (one token at a time, in
//   order: a prompt fed in one call or token by token gives the same bits)
//   out = out_proj(RMSNorm(y * silu(z)) over all Ci, weight norm.weight, eps rms_norm_eps) (+ bias)
// float32 on the CPU. Same contract as LinearAttentionForward.
at::Tensor Mamba2Forward(const ModelConfig& config, const LinearAttentionWeights& w, int64_t layer_id,
                         const at::Tensor& x, const BatchLayout& batch);

// LFM2's gated short convolution, lfm2_moe's "conv" layers (transformers' Lfm2MoeShortConv.slow_forward; Liquid AI,
// "LFM2", 2025), over the same ragged batch and LinearState (conv: the last K-1 inputs B * x [K-1, H]; recurrent
// unused). With H = hidden and K = conv_L_cache:
//   B | C | x = in_proj(x) (+ bias), each [H]
//   u = B * x;  c_t = bias + sum_j w[:, j] u_{t - K + 1 + j}   (depthwise causal conv1d over time, the K-1 inputs
//               before the first new token from the cache: zeros for a new sequence; no activation)
//   out = out_proj(C * c) (+ bias)
// float32 on the CPU. Same contract as LinearAttentionForward.
at::Tensor ShortConvForward(const ModelConfig& config, const LinearAttentionWeights& w, int64_t layer_id,
                            const at::Tensor& x, const BatchLayout& batch);

}  // namespace zipmoe::executor
