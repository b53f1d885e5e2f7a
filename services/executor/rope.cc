#include "services/executor/rope.h"

#include <algorithm>
#include <cmath>

namespace zipmoe::executor {
namespace {

double YarnGetMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// yarn_find_correction_dim (Python float arithmetic = double).
double YarnCorrectionDim(double num_rotations, int64_t dim, double base, double max_position) {
  return (static_cast<double>(dim) * std::log(max_position / (num_rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config, at::Device device) : dim_(config.rope_dim()) {
  const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat);
  const double base = config.rope_theta;
  // base ** (arange(0, dim, 2).float() / dim), in float32 like HF.
  const at::Tensor exponent = at::arange(0, dim_, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
                              static_cast<double>(dim_);
  const at::Tensor base_pow = at::pow(at::Scalar(base), exponent);
  const at::Tensor freq_extra = 1.0 / base_pow;
  const RopeScaling& s = config.rope_scaling;
  if (s.type == RopeScaling::Type::kYarn) {
    const at::Tensor freq_inter = 1.0 / (s.factor * base_pow);
    double low = YarnCorrectionDim(s.beta_fast, dim_, base, static_cast<double>(s.original_max_position_embeddings));
    double high = YarnCorrectionDim(s.beta_slow, dim_, base, static_cast<double>(s.original_max_position_embeddings));
    if (s.truncate) {  // DeepSeek-V2 always; HF's generic yarn unless `truncate` is false (gpt_oss)
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim_ - 1));
    if (low == high) high += 0.001;  // yarn_linear_ramp_mask: prevent singularity
    const at::Tensor ramp = at::clamp((at::arange(dim_ / 2, f32) - low) / (high - low), 0, 1);
    const at::Tensor inv_freq_mask = 1.0 - ramp;
    inv_freq_ = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask;
    mscale_ = s.attention_factor ? *s.attention_factor
                                 : YarnGetMscale(s.factor, s.mscale) / YarnGetMscale(s.factor, s.mscale_all_dim);
  } else {
    inv_freq_ = freq_extra;
    if (s.type == RopeScaling::Type::kLinear) position_divisor_ = s.factor;
  }
  inv_freq_ = inv_freq_.to(device);
}

std::pair<at::Tensor, at::Tensor> RotaryEmbedding::CosSin(const at::Tensor& positions) const {
  at::Tensor t = positions.to(inv_freq_.device(), at::kFloat);
  if (position_divisor_ != 1.0) t = t / position_divisor_;  // linear: t = t / scaling_factor
  const at::Tensor freqs = at::outer(t, inv_freq_);                // [T, dim/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).contiguous();  // [T, dim]
  at::Tensor cos, sin;
  if (emb.is_cpu() && emb.scalar_type() == at::kFloat) {
    // Element by element with libm's cosf / sinf: torch's vectorised cos / sin round the last bit of
    // some elements differently from its scalar tail, and where the tail falls depends on the tensor's
    // size and the thread split, so a rotary dimension that is not a multiple of 16 gave the same
    // position other bits in a longer prompt (a prefix-cache hit or a preemption then left the bits
    // of an uninterrupted run).
    cos = at::empty_like(emb);
    sin = at::empty_like(emb);
    const float* e = emb.data_ptr<float>();
    float* c = cos.data_ptr<float>();
    float* sn = sin.data_ptr<float>();
    for (int64_t i = 0, n = emb.numel(); i < n; ++i) {
      c[i] = std::cos(e[i]);
      sn[i] = std::sin(e[i]);
    }
  } else {
    cos = emb.cos();
    sin = emb.sin();
  }
  if (mscale_ != 1.0) {
    cos = cos * mscale_;
    sin = sin * mscale_;
  }
  return {cos, sin};
}

at::Tensor RotaryEmbedding::Apply(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                  bool interleaved) {
  at::Tensor xf = x.to(at::kFloat);
  const int64_t d = xf.size(-1);
  if (interleaved) {
    std::vector<int64_t> split(xf.sizes().begin(), xf.sizes().end() - 1);
    split.push_back(d / 2);
    split.push_back(2);
    xf = xf.reshape(split).transpose(-1, -2).reshape(x.sizes());
  }
  // cos/sin [T, d] -> [T, 1, d], broadcast over the head axis.
  const at::Tensor c = cos.unsqueeze(-2);
  const at::Tensor s = sin.unsqueeze(-2);
  const at::Tensor x1 = xf.narrow(-1, 0, d / 2);
  const at::Tensor x2 = xf.narrow(-1, d / 2, d - d / 2);
  const at::Tensor rotated = at::cat({-x2, x1}, -1);
  return (xf * c + rotated * s).to(x.scalar_type());
}

}  // namespace zipmoe::executor
