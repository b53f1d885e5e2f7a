// Rotary position embeddings as the HF modules compute them, in float32:
//   inv_freq[i] = 1 / theta^(2i / dim), i < dim/2 (torch float32 pow, as HF);
//   linear scaling: position / factor;
//   DeepSeek-V2 yarn (DeepseekV2YarnRotaryEmbedding._set_cos_sin_cache):
//     freq_extra = inv_freq, freq_inter = 1 / (factor * theta^(2i/dim));
//     low = floor(d(beta_fast)), high = ceil(d(beta_slow)) clamped to [0, dim-1], with
//       d(r) = dim * ln(original_max_position_embeddings / (2*pi*r)) / (2 * ln(theta));
//     mask = 1 - clamp((i - low) / (high - low), 0, 1) (high += 0.001 if equal), i < dim/2;
//     inv_freq = freq_inter * (1 - mask) + freq_extra * mask;
//     cos/sin multiplied by yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
//     where yarn_get_mscale(s, m) = 1 if s <= 1 else 0.1 * m * ln(s) + 1.
//   HF's generic yarn (modeling_rope_utils._compute_yarn_parameters; gpt_oss): the same, except that
//     low/high are not floored/ceiled when rope_scaling.truncate is false, and the factor is the
//     config's attention_factor when it sets one.
//   cos/sin = cos/sin(cat(freqs, freqs)) with freqs = position * inv_freq: [T, dim].
//   apply: x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[dim/2:], x[:dim/2]) (NeoX style).
//   DeepSeek-V2 first de-interleaves x (x.view(.., d/2, 2).transpose(-1, -2).reshape(.., d)), as its
//   apply_rotary_pos_emb does; the result stays in the de-interleaved order.
//
// Internal to services/executor. Immutable after construction; thread-safe.
#pragma once

#include <ATen/ATen.h>

#include <utility>

#include "common/checkpoint/model_config.h"

namespace zipmoe::executor {

class RotaryEmbedding {
 public:
  RotaryEmbedding(const ModelConfig& config, at::Device device);

  // cos, sin: [T, dim] float32 on the device, for positions [T] (int64, any device).
  std::pair<at::Tensor, at::Tensor> CosSin(const at::Tensor& positions) const;

  // Rotates x [..., T, n, dim] (or [T, n, dim]) whose T axis is dimension x.dim()-3, with
  // cos/sin [T, dim] from CosSin(); de-interleaves first when `interleaved` (DeepSeek-V2).
  // Computed in float32, returned in x's dtype.
  static at::Tensor Apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved);

  const at::Tensor& inv_freq() const { return inv_freq_; }  // [dim/2] float32
  double attention_scaling() const { return mscale_; }       // yarn _mscale (1 otherwise)
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
  double position_divisor_ = 1.0;  // linear scaling: factor
  double mscale_ = 1.0;
  at::Tensor inv_freq_;
};

}  // namespace zipmoe::executor
