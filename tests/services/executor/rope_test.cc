// Known-answer tests of rotary embeddings (NeoX and DeepSeek's interleaved form, linear and yarn
// scaling) and of the causal attention core.
#include "services/executor/rope.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "services/executor/attention.h"

namespace zipmoe::executor {
namespace {

ModelConfig RopeConfig(int64_t dim, double theta) {
  ModelConfig c;
  c.arch = ModelArch::kQwen2Moe;
  c.head_dim = dim;
  c.rope_theta = theta;
  return c;
}

TEST(RopeTest, PlainInvFreq) {
  const RotaryEmbedding rope(RopeConfig(8, 10000.0), at::kCPU);
  const at::Tensor f = rope.inv_freq();
  ASSERT_EQ(f.numel(), 4);
  for (int i = 0; i < 4; ++i)
    EXPECT_NEAR(f[i].item<float>(), 1.0 / std::pow(10000.0, 2.0 * i / 8.0), 1e-6 * (1.0 / std::pow(10000.0, i / 4.0)));
  EXPECT_EQ(rope.attention_scaling(), 1.0);
}

TEST(RopeTest, YarnInvFreqAndMscaleAsDeepseekV2) {
  ModelConfig c;
  c.arch = ModelArch::kDeepseekV2;
  c.qk_rope_head_dim = 64;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = RopeScaling::Type::kYarn;
  c.rope_scaling.factor = 40.0;
  c.rope_scaling.original_max_position_embeddings = 4096;
  c.rope_scaling.beta_fast = 32.0;
  c.rope_scaling.beta_slow = 1.0;
  c.rope_scaling.mscale = 1.0;
  c.rope_scaling.mscale_all_dim = 0.0;
  const RotaryEmbedding rope(c, at::kCPU);
  // Reference in double precision, written from DeepseekV2YarnRotaryEmbedding.
  const int dim = 64;
  auto corr = [&](double r) { return dim * std::log(4096.0 / (r * 2.0 * M_PI)) / (2.0 * std::log(10000.0)); };
  const double low = std::max(std::floor(corr(32.0)), 0.0);
  const double high = std::min(std::ceil(corr(1.0)), dim - 1.0);
  EXPECT_EQ(low, 10.0);
  EXPECT_EQ(high, 23.0);
  for (int i = 0; i < dim / 2; ++i) {
    const double extra = 1.0 / std::pow(10000.0, 2.0 * i / dim);
    const double inter = extra / 40.0;
    const double ramp = std::min(std::max((i - low) / (high - low), 0.0), 1.0);
    const double mask = 1.0 - ramp;
    const double want = inter * (1.0 - mask) + extra * mask;
    EXPECT_NEAR(rope.inv_freq()[i].item<float>(), want, 2e-6 * want) << i;
  }
  // mscale 1 vs mscale_all_dim 0: _mscale = (0.1 ln 40 + 1) / 1.
  EXPECT_DOUBLE_EQ(rope.attention_scaling(), 0.1 * std::log(40.0) + 1.0);
  const auto [cos, sin] = rope.CosSin(at::tensor({0, 5}, at::TensorOptions().dtype(at::kLong)));
  EXPECT_FLOAT_EQ(cos[0][0].item<float>(), static_cast<float>(0.1 * std::log(40.0) + 1.0));
  EXPECT_FLOAT_EQ(sin[0][3].item<float>(), 0.0f);
}

TEST(RopeTest, LinearScalingDividesPositions) {
  ModelConfig c = RopeConfig(4, 100.0);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 4.0;
  const RotaryEmbedding scaled(c, at::kCPU);
  const RotaryEmbedding plain(RopeConfig(4, 100.0), at::kCPU);
  const auto a = scaled.CosSin(at::tensor({8}, at::TensorOptions().dtype(at::kLong)));
  const auto b = plain.CosSin(at::tensor({2}, at::TensorOptions().dtype(at::kLong)));
  EXPECT_TRUE(at::equal(a.first, b.first));
  EXPECT_TRUE(at::equal(a.second, b.second));
}

// A position's cos / sin have the same bits whatever positions share the call and however many threads
// run it, for rotary dimensions that are not multiples of the vector width too (torch's vectorised cos
// rounded some elements differently from its scalar tail: helper check, 2026-11-30).
TEST(RopeTest, CosSinOfAPositionDoNotDependOnTheOtherPositions) {
  const int saved = at::get_num_threads();
  for (int64_t dim : {int64_t{24}, int64_t{40}, int64_t{128}}) {
    const RotaryEmbedding rope(RopeConfig(dim, 10000.0), at::kCPU);
    const auto opts = at::TensorOptions().dtype(at::kLong);
    at::set_num_threads(2);
    const auto all = rope.CosSin(at::arange(0, 1019, opts));
    at::set_num_threads(1);
    for (int64_t p : {int64_t{0}, int64_t{509}, int64_t{510}, int64_t{999}, int64_t{1018}}) {
      const auto one = rope.CosSin(at::tensor({p}, opts));
      EXPECT_TRUE(at::equal(all.first[p], one.first[0])) << "dim " << dim << " position " << p;
      EXPECT_TRUE(at::equal(all.second[p], one.second[0])) << "dim " << dim << " position " << p;
      EXPECT_EQ(one.first[0][0].item<float>(), std::cos(static_cast<float>(p) * rope.inv_freq()[0].item<float>()));
    }
  }
  at::set_num_threads(saved);
}

TEST(RopeTest, NeoxAndInterleavedRotation) {
  const int64_t d = 4;
  const RotaryEmbedding rope(RopeConfig(d, 10000.0), at::kCPU);
  const int64_t pos = 3;
  const auto [cos, sin] = rope.CosSin(at::tensor({pos}, at::TensorOptions().dtype(at::kLong)));
  const std::vector<float> xv = {1.0f, 2.0f, 3.0f, 4.0f};
  const at::Tensor x = at::tensor(xv).view({1, 1, d});  // [T=1, heads=1, d]
  const std::vector<double> f = {1.0, 1.0 / 100.0};     // 10000^(-2i/4)
  const at::Tensor neox = RotaryEmbedding::Apply(x, cos, sin, false).view({d});
  for (int i = 0; i < 2; ++i) {
    const double c = std::cos(pos * f[i]), s = std::sin(pos * f[i]);
    EXPECT_NEAR(neox[i].item<float>(), xv[i] * c - xv[i + 2] * s, 1e-5);
    EXPECT_NEAR(neox[i + 2].item<float>(), xv[i + 2] * c + xv[i] * s, 1e-5);
  }
  // Interleaved: pairs (x0, x1), (x2, x3) rotate; the output is in de-interleaved order.
  const at::Tensor inter = RotaryEmbedding::Apply(x, cos, sin, true).view({d});
  for (int i = 0; i < 2; ++i) {
    const double c = std::cos(pos * f[i]), s = std::sin(pos * f[i]);
    EXPECT_NEAR(inter[i].item<float>(), xv[2 * i] * c - xv[2 * i + 1] * s, 1e-5);
    EXPECT_NEAR(inter[i + 2].item<float>(), xv[2 * i + 1] * c + xv[2 * i] * s, 1e-5);
  }
}

TEST(AttentionTest, CausalPrefillMatchesManualSoftmaxWithGqa) {
  at::manual_seed(1);
  const int64_t heads = 4, kv = 2, t = 3, d = 5;
  const at::Tensor q = at::randn({heads, t, d});
  const at::Tensor k = at::randn({kv, t, d});
  const at::Tensor v = at::randn({kv, t, d});
  const double scale = 0.37;
  const at::Tensor out = AttendCausal(q, k, v, 0, scale, 0);  // [t, heads * d]
  ASSERT_EQ(out.size(0), t);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kv);
    for (int64_t i = 0; i < t; ++i) {
      const at::Tensor s = (k[g].narrow(0, 0, i + 1).matmul(q[h][i]) * scale).softmax(0);
      const at::Tensor want = s.unsqueeze(0).matmul(v[g].narrow(0, 0, i + 1)).squeeze(0);
      EXPECT_TRUE(at::allclose(out[i].narrow(0, h * d, d), want, 1e-5, 1e-6)) << h << " " << i;
    }
  }
  // Sliding window of 2: query 2 sees keys 1 and 2 only.
  const at::Tensor windowed = AttendCausal(q, k, v, 0, scale, 2);
  const at::Tensor s = (k[0].narrow(0, 1, 2).matmul(q[0][2]) * scale).softmax(0);
  const at::Tensor want = s.unsqueeze(0).matmul(v[0].narrow(0, 1, 2)).squeeze(0);
  EXPECT_TRUE(at::allclose(windowed[2].narrow(0, 0, d), want, 1e-5, 1e-6));
}

}  // namespace
}  // namespace zipmoe::executor
