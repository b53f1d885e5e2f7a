// The grouped expert MLP's table checks and CPU reference (kernels/grouped_expert.h); the launcher is
// kernels/grouped_expert.cu with CUDA, no_cuda.cc without.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/grouped_expert.h"

namespace zipmoe::kernels {
namespace {

constexpr int kWarp = 32;

float Bf16ToFloat(uint16_t bits) {
  const uint32_t w = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &w, sizeof f);
  return f;
}

// The 32 lanes' partial sums added as the GPU's butterfly does (xor 16, 8, 4, 2, 1); lane 0's value.
float Butterfly(float* lanes) {
  for (int off = kWarp / 2; off >= 1; off /= 2) {
    float next[kWarp];
    for (int l = 0; l < kWarp; ++l) next[l] = lanes[l] + lanes[l ^ off];
    std::memcpy(lanes, next, sizeof next);
  }
  return lanes[0];
}

// One warp's dot product of a BF16 row with a vector `b` of length k (b_at(i) widened to float),
// in the lane order of the header: 8-element chunks when k % 8 == 0, else strided by 32.
template <typename B>
float WarpDot(const uint16_t* row, B b_at, int64_t k) {
  float lanes[kWarp] = {};
  if (k % 8 == 0) {
    for (int l = 0; l < kWarp; ++l) {
      for (int64_t base = 8 * l; base < k; base += 8 * kWarp) {
        for (int64_t j = 0; j < 8; ++j) lanes[l] = std::fma(Bf16ToFloat(row[base + j]), b_at(base + j), lanes[l]);
      }
    }
  } else {
    for (int l = 0; l < kWarp; ++l) {
      for (int64_t i = l; i < k; i += kWarp) lanes[l] = std::fma(Bf16ToFloat(row[i]), b_at(i), lanes[l]);
    }
  }
  return Butterfly(lanes);
}

}  // namespace

bool GroupedExpertWeightsAligned(const uint64_t* weights, int32_t n_experts, int64_t hidden, int64_t inter) {
  for (int32_t j = 0; j < n_experts; ++j) {
    for (int m = 0; m < 3; ++m) {
      const bool vector_path = m < 2 ? hidden % 8 == 0 : inter % 8 == 0;
      if (vector_path && weights[3 * j + m] % 16 != 0) return false;
    }
  }
  return true;
}

Status ValidateGroupedExpertTables(const GroupedExpertArgs& a) {
  if (a.n_tokens <= 0 || a.hidden <= 0 || a.inter <= 0 || a.n_experts <= 0 || a.n_pairs <= 0)
    return Status::InvalidArgument(fmt::format("grouped expert MLP: n_tokens {}, hidden {}, inter {}, n_experts {} and "
                                               "n_pairs {} must all be positive",
                                               a.n_tokens, a.hidden, a.inter, a.n_experts, a.n_pairs));
  if (a.expert_pair_offsets == nullptr || a.pair_token == nullptr || a.pair_weight == nullptr ||
      a.token_pair_offsets == nullptr || a.token_pairs == nullptr)
    return Status::InvalidArgument("grouped expert MLP: a pair table is null");
  if (a.expert_pair_offsets[0] != 0 || a.expert_pair_offsets[a.n_experts] != a.n_pairs)
    return Status::InvalidArgument(fmt::format("grouped expert MLP: expert_pair_offsets must run from 0 to n_pairs {} "
                                               "(found {} .. {})",
                                               a.n_pairs, a.expert_pair_offsets[0], a.expert_pair_offsets[a.n_experts]));
  for (int32_t j = 0; j < a.n_experts; ++j) {
    if (a.expert_pair_offsets[j + 1] < a.expert_pair_offsets[j])
      return Status::InvalidArgument(fmt::format("grouped expert MLP: expert_pair_offsets[{}] decreases", j + 1));
  }
  for (int32_t p = 0; p < a.n_pairs; ++p) {
    if (a.pair_token[p] < 0 || a.pair_token[p] >= a.n_tokens)
      return Status::InvalidArgument(
          fmt::format("grouped expert MLP: pair_token[{}] = {} outside [0, {})", p, a.pair_token[p], a.n_tokens));
  }
  if (a.token_pair_offsets[0] != 0 || a.token_pair_offsets[a.n_tokens] != a.n_pairs)
    return Status::InvalidArgument("grouped expert MLP: token_pair_offsets must run from 0 to n_pairs");
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    const int32_t b = a.token_pair_offsets[t], e = a.token_pair_offsets[t + 1];
    if (e < b) return Status::InvalidArgument(fmt::format("grouped expert MLP: token_pair_offsets[{}] decreases", t + 1));
    for (int32_t i = b; i < e; ++i) {
      const int32_t p = a.token_pairs[i];
      if (p < 0 || p >= a.n_pairs || a.pair_token[p] != t || (i > b && p <= a.token_pairs[i - 1]))
        return Status::InvalidArgument(fmt::format(
            "grouped expert MLP: token {}'s pair list is not its pairs in ascending order (entry {} = {})", t, i, p));
    }
  }
  return Status::Ok();
}

Status GroupedExpertMlpReference(const GroupedExpertArgs& a) {
  ZM_RETURN_IF_ERROR(ValidateGroupedExpertTables(a));
  if (a.x == nullptr || a.weights == nullptr || a.act == nullptr || a.out == nullptr || a.y == nullptr)
    return Status::InvalidArgument("grouped expert MLP: x, weights, act, out and y must be non-null");
  const int64_t hidden = a.hidden, inter = a.inter;
  for (int32_t j = 0; j < a.n_experts; ++j) {
    const auto* gate = reinterpret_cast<const uint16_t*>(a.weights[3 * j]);
    const auto* up = reinterpret_cast<const uint16_t*>(a.weights[3 * j + 1]);
    const auto* down = reinterpret_cast<const uint16_t*>(a.weights[3 * j + 2]);
    for (int32_t p = a.expert_pair_offsets[j]; p < a.expert_pair_offsets[j + 1]; ++p) {
      const uint16_t* xt = a.x + static_cast<int64_t>(a.pair_token[p]) * hidden;
      const auto x_at = [xt](int64_t i) { return Bf16ToFloat(xt[i]); };
      float* act = a.act + static_cast<int64_t>(p) * inter;
      for (int64_t r = 0; r < inter; ++r) {
        const float g = WarpDot(gate + r * hidden, x_at, hidden);
        const float u = WarpDot(up + r * hidden, x_at, hidden);
        const float silu = g / (1.0f + std::exp(-g));
        act[r] = silu * u;
      }
      const auto act_at = [act](int64_t i) { return act[i]; };
      float* out = a.out + static_cast<int64_t>(p) * hidden;
      for (int64_t h = 0; h < hidden; ++h) out[h] = WarpDot(down + h * inter, act_at, inter) * a.pair_weight[p];
    }
  }
  for (int64_t t = 0; t < a.n_tokens; ++t) {
    for (int64_t h = 0; h < hidden; ++h) {
      float s = 0.0f;
      for (int32_t i = a.token_pair_offsets[t]; i < a.token_pair_offsets[t + 1]; ++i)
        s += a.out[static_cast<int64_t>(a.token_pairs[i]) * hidden + h];
      a.y[t * hidden + h] = s;
    }
  }
  return Status::Ok();
}

}  // namespace zipmoe::kernels
