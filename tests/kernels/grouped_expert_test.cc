#include "kernels/grouped_expert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_memory.h"
#include "kernels/recovery.h"
#include "tests/kernels/bf16_values.h"

namespace zipmoe::kernels {
namespace {

using testing::FromBf16;
using testing::ToBf16;

// A MoE layer's grouped inputs: `n_experts` selected experts with random BF16 weights, n_tokens
// tokens each routed to `top_k` distinct experts with random weights. Owns every buffer.
struct Layer {
  int64_t n_tokens, hidden, inter;
  int32_t n_experts;
  std::vector<uint16_t> x;
  std::vector<std::vector<uint16_t>> mats;  // 3 per expert
  std::vector<uint64_t> weights;
  std::vector<int32_t> expert_pair_offsets, pair_token, token_pair_offsets, token_pairs;
  std::vector<float> pair_weight, act, out, y;

  Layer(int64_t n, int64_t h, int64_t i, int32_t e, int top_k, uint64_t seed)
      : n_tokens(n), hidden(h), inter(i), n_experts(e) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    x.resize(static_cast<size_t>(n * h));
    for (auto& v : x) v = ToBf16(normal(rng));
    const float scale_in = 1.0f / std::sqrt(static_cast<float>(h)), scale_down = 1.0f / std::sqrt(static_cast<float>(i));
    for (int32_t j = 0; j < e; ++j) {
      for (int m = 0; m < 3; ++m) {
        std::vector<uint16_t> w(static_cast<size_t>(h * i));
        for (auto& v : w) v = ToBf16(normal(rng) * (m < 2 ? scale_in : scale_down));
        mats.push_back(std::move(w));
      }
    }
    for (auto& m : mats) weights.push_back(reinterpret_cast<uint64_t>(m.data()));
    // Routing: each token picks top_k distinct experts.
    std::vector<std::vector<std::pair<int64_t, float>>> by_expert(static_cast<size_t>(e));
    std::uniform_real_distribution<float> uni(0.05f, 1.0f);
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> ids(static_cast<size_t>(e));
      for (int32_t j = 0; j < e; ++j) ids[static_cast<size_t>(j)] = j;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (int k = 0; k < top_k; ++k) by_expert[static_cast<size_t>(ids[static_cast<size_t>(k)])].push_back({t, uni(rng)});
    }
    expert_pair_offsets.push_back(0);
    for (const auto& list : by_expert) {
      for (const auto& [t, w] : list) {
        pair_token.push_back(static_cast<int32_t>(t));
        pair_weight.push_back(w);
      }
      expert_pair_offsets.push_back(static_cast<int32_t>(pair_token.size()));
    }
    token_pair_offsets.push_back(0);
    for (int64_t t = 0; t < n; ++t) {
      for (int32_t p = 0; p < static_cast<int32_t>(pair_token.size()); ++p)
        if (pair_token[static_cast<size_t>(p)] == t) token_pairs.push_back(p);
      token_pair_offsets.push_back(static_cast<int32_t>(token_pairs.size()));
    }
    act.assign(pair_token.size() * static_cast<size_t>(i), NAN);
    out.assign(pair_token.size() * static_cast<size_t>(h), NAN);
    y.assign(static_cast<size_t>(n * h), NAN);
  }

  GroupedExpertArgs Args() {
    GroupedExpertArgs a;
    a.x = x.data();
    a.n_tokens = n_tokens;
    a.hidden = hidden;
    a.inter = inter;
    a.weights = weights.data();
    a.n_experts = n_experts;
    a.expert_pair_offsets = expert_pair_offsets.data();
    a.n_pairs = static_cast<int32_t>(pair_token.size());
    a.pair_token = pair_token.data();
    a.pair_weight = pair_weight.data();
    a.token_pair_offsets = token_pair_offsets.data();
    a.token_pairs = token_pairs.data();
    a.act = act.data();
    a.out = out.data();
    a.y = y.data();
    return a;
  }

  // An independent float64 computation of y (HF's loop: per expert, silu(gate x) * up x, down, times weight).
  std::vector<double> Float64Y() const {
    std::vector<double> ref(static_cast<size_t>(n_tokens * hidden), 0.0);
    for (int32_t j = 0; j < n_experts; ++j) {
      const auto& gate = mats[static_cast<size_t>(3 * j)];
      const auto& up = mats[static_cast<size_t>(3 * j + 1)];
      const auto& down = mats[static_cast<size_t>(3 * j + 2)];
      for (int32_t p = expert_pair_offsets[static_cast<size_t>(j)]; p < expert_pair_offsets[static_cast<size_t>(j + 1)];
           ++p) {
        const int64_t t = pair_token[static_cast<size_t>(p)];
        std::vector<double> a(static_cast<size_t>(inter));
        for (int64_t r = 0; r < inter; ++r) {
          double g = 0, u = 0;
          for (int64_t k = 0; k < hidden; ++k) {
            const double xv = FromBf16(x[static_cast<size_t>(t * hidden + k)]);
            g += FromBf16(gate[static_cast<size_t>(r * hidden + k)]) * xv;
            u += FromBf16(up[static_cast<size_t>(r * hidden + k)]) * xv;
          }
          a[static_cast<size_t>(r)] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int64_t h = 0; h < hidden; ++h) {
          double s = 0;
          for (int64_t r = 0; r < inter; ++r) s += FromBf16(down[static_cast<size_t>(h * inter + r)]) * a[static_cast<size_t>(r)];
          ref[static_cast<size_t>(t * hidden + h)] += s * pair_weight[static_cast<size_t>(p)];
        }
      }
    }
    return ref;
  }
};

double MaxRelError(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(want[i]));
    if (std::isnan(got[i])) return INFINITY;
    err = std::max(err, std::abs(got[i] - want[i]));
  }
  return err / scale;
}

struct Shape {
  int64_t n_tokens, hidden, inter;
  int32_t n_experts;
  int top_k;
};

class GroupedExpertTest : public ::testing::TestWithParam<Shape> {};

// Vector path (hidden, inter multiples of 8), scalar path (neither), and each mixed; decode (1 token)
// and small batches (tokens sharing experts, more than 4 tokens on one expert).
INSTANTIATE_TEST_SUITE_P(Shapes, GroupedExpertTest,
                         ::testing::Values(Shape{1, 512, 96, 4, 4}, Shape{7, 256, 64, 6, 2}, Shape{3, 100, 36, 3, 2},
                                           Shape{5, 264, 44, 4, 3}, Shape{9, 60, 48, 2, 2}, Shape{1, 8, 8, 1, 1}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           const Shape& s = info.param;
                           return "n" + std::to_string(s.n_tokens) + "_h" + std::to_string(s.hidden) + "_i" +
                                  std::to_string(s.inter) + "_e" + std::to_string(s.n_experts) + "_k" +
                                  std::to_string(s.top_k);
                         });

TEST_P(GroupedExpertTest, ReferenceMatchesFloat64WithinFp32Rounding) {
  const Shape s = GetParam();
  Layer layer(s.n_tokens, s.hidden, s.inter, s.n_experts, s.top_k, 42);
  ASSERT_TRUE(GroupedExpertMlpReference(layer.Args()).ok());
  EXPECT_LT(MaxRelError(layer.y, layer.Float64Y()), 1e-5);
}

TEST_P(GroupedExpertTest, EachTokenAloneGivesTheSameBitsAsInTheBatch) {
  const Shape s = GetParam();
  Layer batch(s.n_tokens, s.hidden, s.inter, s.n_experts, s.top_k, 7);
  ASSERT_TRUE(GroupedExpertMlpReference(batch.Args()).ok());
  for (int64_t t = 0; t < s.n_tokens; ++t) {
    // The same experts and weights, only token t's pairs.
    Layer one = batch;
    one.n_tokens = 1;
    one.x.assign(batch.x.begin() + t * s.hidden, batch.x.begin() + (t + 1) * s.hidden);
    one.pair_token.clear();
    one.pair_weight.clear();
    one.expert_pair_offsets = {0};
    for (int32_t j = 0; j < s.n_experts; ++j) {
      for (int32_t p = batch.expert_pair_offsets[static_cast<size_t>(j)];
           p < batch.expert_pair_offsets[static_cast<size_t>(j + 1)]; ++p) {
        if (batch.pair_token[static_cast<size_t>(p)] != t) continue;
        one.pair_token.push_back(0);
        one.pair_weight.push_back(batch.pair_weight[static_cast<size_t>(p)]);
      }
      one.expert_pair_offsets.push_back(static_cast<int32_t>(one.pair_token.size()));
    }
    one.token_pair_offsets = {0, static_cast<int32_t>(one.pair_token.size())};
    one.token_pairs.clear();
    for (int32_t p = 0; p < static_cast<int32_t>(one.pair_token.size()); ++p) one.token_pairs.push_back(p);
    one.weights.clear();
    for (auto& m : one.mats) one.weights.push_back(reinterpret_cast<uint64_t>(m.data()));
    one.act.assign(one.pair_token.size() * static_cast<size_t>(s.inter), NAN);
    one.out.assign(one.pair_token.size() * static_cast<size_t>(s.hidden), NAN);
    one.y.assign(static_cast<size_t>(s.hidden), NAN);
    ASSERT_TRUE(GroupedExpertMlpReference(one.Args()).ok());
    ASSERT_EQ(0, std::memcmp(one.y.data(), batch.y.data() + t * s.hidden, sizeof(float) * static_cast<size_t>(s.hidden)))
        << "token " << t;
  }
}

TEST_P(GroupedExpertTest, DeviceMatchesReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (built with CUDA: " << BuiltWithCuda() << ")";
  const Shape s = GetParam();
  Layer ref(s.n_tokens, s.hidden, s.inter, s.n_experts, s.top_k, 99);
  Layer dev = ref;
  dev.weights.clear();
  for (auto& m : dev.mats) dev.weights.push_back(reinterpret_cast<uint64_t>(m.data()));
  ASSERT_TRUE(GroupedExpertMlpReference(ref.Args()).ok());
  const Status st = GroupedExpertMlpOnDevice(dev.Args());
  ASSERT_TRUE(st.ok()) << st.ToString();
  // The same FMA order and butterfly: act differs only where the CPU's and CUDA's expf round
  // differently (1 ulp), so y within a few fp32 ulps, every element written.
  std::vector<double> want(ref.y.begin(), ref.y.end());
  EXPECT_LT(MaxRelError(dev.y, want), 2e-6);
  std::vector<double> want_out(ref.out.begin(), ref.out.end());
  EXPECT_LT(MaxRelError(dev.out, want_out), 2e-6);
}

TEST(GroupedExpertTablesTest, RejectsInconsistentTablesNamingTheField) {
  Layer layer(3, 16, 8, 3, 2, 1);
  GroupedExpertArgs a = layer.Args();
  EXPECT_TRUE(ValidateGroupedExpertTables(a).ok());
  {
    Layer bad = layer;
    bad.pair_token[0] = 3;
    const Status st = ValidateGroupedExpertTables(bad.Args());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("pair_token[0]"), std::string::npos) << st.ToString();
  }
  {
    Layer bad = layer;
    bad.expert_pair_offsets.back() -= 1;
    const Status st = ValidateGroupedExpertTables(bad.Args());
    EXPECT_NE(st.message().find("expert_pair_offsets"), std::string::npos) << st.ToString();
  }
  {
    Layer bad = layer;  // token 0's two pairs listed in descending order
    std::swap(bad.token_pairs[0], bad.token_pairs[1]);
    const Status st = ValidateGroupedExpertTables(bad.Args());
    EXPECT_NE(st.message().find("token 0's pair list"), std::string::npos) << st.ToString();
  }
  {
    GroupedExpertArgs zero = a;
    zero.hidden = 0;
    EXPECT_EQ(GroupedExpertMlpReference(zero).code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(LaunchGroupedExpertMlp(zero, nullptr).code(),
              BuiltWithCuda() ? StatusCode::kInvalidArgument : StatusCode::kUnavailable);
  }
}

TEST(GroupedExpertTablesTest, WeightAlignmentIsCheckedWhereTheVectorPathsRead) {
  // gate, up, down of two experts; hidden 16 (gate/up vector path), inter 12 (down scalar path).
  std::vector<uint64_t> w = {4096, 4096 + 384, 4096 + 768, 8192, 8192 + 384, 8192 + 768 + 2};
  EXPECT_TRUE(kernels::GroupedExpertWeightsAligned(w.data(), 2, 16, 12));  // a misaligned down is read by lanes
  w[4] += 2;                                                                 // expert 1's up, 2 bytes off
  EXPECT_FALSE(kernels::GroupedExpertWeightsAligned(w.data(), 2, 16, 12));
  EXPECT_TRUE(kernels::GroupedExpertWeightsAligned(w.data(), 2, 18, 12));   // neither length a multiple of 8
  EXPECT_FALSE(kernels::GroupedExpertWeightsAligned(w.data(), 2, 18, 16));  // the down's vector path: w[5]
}

TEST(DeviceMemoryTest, PageableMemoryHasNoDeviceAlias) {
  std::vector<uint8_t> pageable(4096);
  EXPECT_EQ(DeviceAliasOf(pageable.data()), nullptr);
  EXPECT_EQ(DeviceAliasOf(nullptr), nullptr);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(CopyAsync(pageable.data(), pageable.data(), 16, nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(SynchronizeStream(nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(QueryDevice().status().code(), StatusCode::kUnavailable);
  } else if (CudaDeviceCount() > 0) {
    Result<DeviceProperties> p = QueryDevice();
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_GT(p->total_bytes, 0u);
    EXPECT_LE(p->free_bytes, p->total_bytes);
  }
}

}  // namespace
}  // namespace zipmoe::kernels
