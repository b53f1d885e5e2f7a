// CPU references of the GPU decode-step kernels (kernels/dense_decode.h): the same per-thread order,
// the same butterflies and the same roundings as dense_decode.cu, on the host. Compiled with
// -ffp-contract=off (kernels/CMakeLists.txt): a product followed by a sum stays two roundings, as the
// device code's __fmul_rn / __fadd_rn. Without CUDA the launches answer kUnavailable.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/dtype.h"
#include "kernels/dense_decode.h"

namespace zipmoe::kernels {
namespace {

constexpr int kWarp = 32;

// BF16 to nearest even; any NaN as the canonical 0x7fc0 (the device's ToBf16).
uint16_t ToBf16(float f) { return std::isnan(f) ? uint16_t{0x7fc0} : FloatToBf16(f); }

// The xor butterfly of one warp (offsets 16, 8, 4, 2, 1): every lane ends with the same sum; lane 0's.
float WarpSum(const float* lanes) {
  float v[kWarp];
  std::copy_n(lanes, kWarp, v);
  for (int off = kWarp / 2; off >= 1; off /= 2) {
    float next[kWarp];
    for (int l = 0; l < kWarp; ++l) next[l] = v[l] + v[l ^ off];
    std::copy_n(next, kWarp, v);
  }
  return v[0];
}

// Per-thread partials [threads] -> the block's sum: each warp's butterfly, then the warps in order.
float BlockSum(const std::vector<float>& partial) {
  const int warps = static_cast<int>(partial.size()) / kWarp;
  float sum = WarpSum(partial.data());
  for (int w = 1; w < warps; ++w) sum += WarpSum(partial.data() + w * kWarp);
  return sum;
}

}  // namespace

Status ValidateRmsNormBf16(const RmsNormBf16Args& a) {
  if (a.rows <= 0) return Status::InvalidArgument(fmt::format("RmsNormBf16: rows {} <= 0", a.rows));
  if (a.d <= 0) return Status::InvalidArgument(fmt::format("RmsNormBf16: d {} <= 0", a.d));
  if (!(a.eps >= 0.0f)) return Status::InvalidArgument(fmt::format("RmsNormBf16: eps {} is not >= 0", a.eps));
  return Status::Ok();
}

Status ValidateRotaryBf16(const RotaryBf16Args& a) {
  if (a.n <= 0) return Status::InvalidArgument(fmt::format("RotaryBf16: n {} <= 0", a.n));
  if (a.a_heads <= 0) return Status::InvalidArgument(fmt::format("RotaryBf16: a_heads {} <= 0", a.a_heads));
  if (a.b_heads < 0 || (a.b_heads > 0) != (a.b != nullptr))
    return Status::InvalidArgument(fmt::format("RotaryBf16: b_heads {} with b {}", a.b_heads, a.b ? "set" : "null"));
  if (a.head_dim <= 0) return Status::InvalidArgument(fmt::format("RotaryBf16: head_dim {} <= 0", a.head_dim));
  if (a.rotary_dim <= 0 || a.rotary_dim % 2 != 0 || a.rotary_dim > a.head_dim)
    return Status::InvalidArgument(
        fmt::format("RotaryBf16: rotary_dim {} is not even and in (0, head_dim {}]", a.rotary_dim, a.head_dim));
  return Status::Ok();
}

Status ValidateDecodeAttentionBf16(const DecodeAttentionBf16Args& a) {
  if (a.n_heads <= 0 || a.n_kv <= 0 || a.n_heads % a.n_kv != 0)
    return Status::InvalidArgument(
        fmt::format("DecodeAttentionBf16: n_heads {} is not a positive multiple of n_kv {}", a.n_heads, a.n_kv));
  if (a.dk <= 0 || a.dv <= 0)
    return Status::InvalidArgument(fmt::format("DecodeAttentionBf16: dk {} / dv {} <= 0", a.dk, a.dv));
  if (a.total <= 0) return Status::InvalidArgument(fmt::format("DecodeAttentionBf16: total {} <= 0", a.total));
  if (a.pos < 0 || a.pos >= a.total)
    return Status::InvalidArgument(fmt::format("DecodeAttentionBf16: pos {} outside [0, total {})", a.pos, a.total));
  if (a.window < 0) return Status::InvalidArgument(fmt::format("DecodeAttentionBf16: window {} < 0", a.window));
  if (a.k_head_stride < a.total * a.dk || a.v_head_stride < a.total * a.dv)
    return Status::InvalidArgument(fmt::format(
        "DecodeAttentionBf16: k_head_stride {} / v_head_stride {} below total {} x dk {} / dv {}", a.k_head_stride,
        a.v_head_stride, a.total, a.dk, a.dv));
  return Status::Ok();
}

Status RmsNormBf16Reference(const RmsNormBf16Args& a) {
  ZM_RETURN_IF_ERROR(ValidateRmsNormBf16(a));
  std::vector<float> partial(kNormThreads);
  for (int64_t r = 0; r < a.rows; ++r) {
    const uint16_t* x = a.x + r * a.d;
    uint16_t* y = a.y + r * a.d;
    for (int i = 0; i < kNormThreads; ++i) {
      float acc = 0.0f;
      for (int64_t j = i; j < a.d; j += kNormThreads) {
        const float v = Bf16ToFloat(x[j]);
        acc = std::fma(v, v, acc);
      }
      partial[static_cast<size_t>(i)] = acc;
    }
    const float var = BlockSum(partial) / static_cast<float>(a.d);
    const float inv = 1.0f / std::sqrt(var + a.eps);
    for (int64_t j = 0; j < a.d; ++j) {
      const float normed = Bf16ToFloat(ToBf16(Bf16ToFloat(x[j]) * inv));
      y[j] = ToBf16(Bf16ToFloat(a.weight[j]) * normed);
    }
  }
  return Status::Ok();
}

Status RotaryBf16Reference(const RotaryBf16Args& a) {
  ZM_RETURN_IF_ERROR(ValidateRotaryBf16(a));
  const int64_t half = a.rotary_dim / 2;
  for (int which = 0; which < 2; ++which) {
    uint16_t* base = which == 0 ? a.a : a.b;
    const int64_t heads = which == 0 ? a.a_heads : a.b_heads;
    for (int64_t t = 0; t < a.n; ++t) {
      const float* c = a.cos + t * a.rotary_dim;
      const float* s = a.sin + t * a.rotary_dim;
      for (int64_t h = 0; h < heads; ++h) {
        uint16_t* x = base + (t * heads + h) * a.head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = Bf16ToFloat(x[i]), x2 = Bf16ToFloat(x[i + half]);
          const float p1 = x1 * c[i], p2 = -x2 * s[i];
          const float p3 = x2 * c[i + half], p4 = x1 * s[i + half];
          x[i] = ToBf16(p1 + p2);
          x[i + half] = ToBf16(p3 + p4);
        }
      }
    }
  }
  return Status::Ok();
}

Status DecodeAttentionBf16Reference(const DecodeAttentionBf16Args& a) {
  ZM_RETURN_IF_ERROR(ValidateDecodeAttentionBf16(a));
  const int64_t group = a.n_heads / a.n_kv;
  const int64_t last = std::min(a.pos, a.total - 1);
  const int64_t first = a.window > 0 ? std::max<int64_t>(0, a.pos - a.window + 1) : 0;
  constexpr int kWarps = kAttentionThreads / kWarp;
  std::vector<float> lanes(kWarp), partial(kAttentionThreads);
  for (int64_t h = 0; h < a.n_heads; ++h) {
    const uint16_t* q = a.q + h * a.dk;
    const uint16_t* kh = a.k + (h / group) * a.k_head_stride;
    const uint16_t* vh = a.v + (h / group) * a.v_head_stride;
    float* s = a.scores + h * a.total;
    // Scores: one warp a key (which warp does not change the value).
    for (int64_t j = first; j <= last; ++j) {
      for (int l = 0; l < kWarp; ++l) {
        float acc = 0.0f;
        for (int64_t d = l; d < a.dk; d += kWarp) acc = std::fma(Bf16ToFloat(q[d]), Bf16ToFloat(kh[j * a.dk + d]), acc);
        lanes[static_cast<size_t>(l)] = acc;
      }
      s[j] = WarpSum(lanes.data()) * a.scale;
    }
    float m = -INFINITY;
    for (int64_t j = first; j <= last; ++j) m = std::max(m, s[j]);
    const bool sink = a.sinks != nullptr;
    if (sink) m = std::max(m, a.sinks[h]);
    for (int i = 0; i < kAttentionThreads; ++i) {
      float acc = 0.0f;
      for (int64_t j = first + i; j <= last; j += kAttentionThreads) {
        s[j] = std::exp(s[j] - m);
        acc += s[j];
      }
      partial[static_cast<size_t>(i)] = acc;
    }
    static_assert(kWarps >= 1, "attention block of whole warps");
    float sum = BlockSum(partial);
    if (sink) sum += std::exp(a.sinks[h] - m);
    for (int64_t j = first; j <= last; ++j) s[j] = s[j] / sum;
    for (int64_t d = 0; d < a.dv; ++d) {
      float acc = 0.0f;
      for (int64_t j = first; j <= last; ++j) acc = std::fma(s[j], Bf16ToFloat(vh[j * a.dv + d]), acc);
      a.out[h * a.dv + d] = ToBf16(acc);
    }
  }
  return Status::Ok();
}

}  // namespace zipmoe::kernels
