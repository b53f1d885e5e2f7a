// Tests for the synth router-skew mechanism and measurement, the Gaussian generator and the pool.
#include "services/synth/router_skew.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "services/synth/gaussian.h"
#include "services/synth/synth.h"
#include "services/synth/thread_pool.h"
#include "tests/test_util.h"

namespace zipmoe::synth {
namespace {

SynthOptions SkewOptions(const std::string& arch, double skew) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.seed = 3;
  o.router_skew = skew;
  return o;
}

TEST(SynthRouterSkew, TopDecileShareKnownAnswers) {
  int64_t n_hot = 0;
  // 16 experts -> ceil(1.6) = 2 hot experts.
  std::vector<int64_t> uniform(16, 10);
  EXPECT_DOUBLE_EQ(TopDecileShare(uniform, &n_hot), 20.0 / 160.0);
  EXPECT_EQ(n_hot, 2);
  std::vector<int64_t> skewed(16, 0);
  skewed[3] = 30;
  skewed[9] = 50;
  skewed[0] = 20;
  EXPECT_DOUBLE_EQ(TopDecileShare(skewed, &n_hot), 80.0 / 100.0);
  std::vector<int64_t> sixty(60, 1);
  TopDecileShare(sixty, &n_hot);
  EXPECT_EQ(n_hot, 6);
  std::vector<int64_t> eight(8, 1);
  TopDecileShare(eight, &n_hot);
  EXPECT_EQ(n_hot, 1);
}

TEST(SynthRouterSkew, CountTopKPicksLargestLogits) {
  // hidden 2, 3 experts: router rows e0 = (1,0), e1 = (0,1), e2 = (-1,-1).
  const std::vector<float> router = {1, 0, 0, 1, -1, -1};
  const std::vector<float> x = {2, 1, 1, 3, -5, -4};  // token 0 -> e0,e1; token 1 -> e1,e0; token 2 -> e2,e1
  EXPECT_EQ(CountTopKSelections(x, router, 2, 2), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(CountTopKSelections(x, router, 2, 1), (std::vector<int64_t>{1, 1, 1}));
}

TEST(SynthRouterSkew, ExpertScoresAreAPermutedNormalLadder) {
  const std::vector<float> z = ExpertSkewScores(42, 16);
  std::vector<float> sorted = z;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  EXPECT_NEAR(sorted[0], InverseNormalCdf(1.0 - 0.5 / 16), 1e-6);
  EXPECT_NEAR(sorted[15], -sorted[0], 1e-6);
  EXPECT_NE(z, sorted);  // the hottest expert is not simply expert 0
  EXPECT_NE(ExpertSkewScores(43, 16), z);
}

TEST(SynthRouterSkew, ShareIsNearUniformWithoutSkewAndGrowsMonotonically) {
  const double skews[] = {0.0, 0.5, 1.0, 2.0};
  std::vector<double> share;
  double uniform = 0.0;
  for (double x : skews) {
    Result<RouterShareReport> r = MeasureSynthRouterTopShare(SkewOptions("qwen2_moe", x), 4096, 1);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->layer_ids.size(), 4u);
    share.push_back(r->mean_top_share);
    uniform = r->uniform_share;
  }
  EXPECT_DOUBLE_EQ(uniform, 2.0 / 16.0);
  EXPECT_GE(share[0], uniform * 0.95);
  EXPECT_LE(share[0], uniform * 1.3);
  for (size_t i = 1; i < share.size(); ++i) EXPECT_GT(share[i], share[i - 1] + 0.02) << "skew " << skews[i];
  EXPECT_GT(share.back(), 2.5 * uniform);
}

TEST(SynthRouterSkew, DeepseekMeasuresOnlyMoeLayers) {
  Result<RouterShareReport> r = MeasureSynthRouterTopShare(SkewOptions("deepseek_v2", 1.0), 1024, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->layer_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_GT(r->mean_top_share, 1.5 * r->uniform_share);
}

TEST(SynthRouterSkew, CheckpointMeasurementMatchesInMemoryModel) {
  testing::TempDir tmp;
  SynthOptions o = SkewOptions("mixtral", 1.5);
  o.out_dir = tmp.path();
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  Result<RouterShareReport> from_disk = MeasureRouterTopShare(tmp.path(), 2048, 9);
  Result<RouterShareReport> in_memory = MeasureSynthRouterTopShare(o, 2048, 9);
  ASSERT_TRUE(from_disk.ok()) << from_disk.status().ToString();
  ASSERT_TRUE(in_memory.ok()) << in_memory.status().ToString();
  EXPECT_EQ(from_disk->top_share, in_memory->top_share);
  EXPECT_EQ(MeasureRouterTopShare(tmp.Sub("missing"), 16, 0).status().code(), StatusCode::kNotFound);
}

TEST(SynthRouterSkew, RejectsBadParameters) {
  EXPECT_EQ(MakeSkewModel(64, 0, -0.5, 1.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeSkewModel(64, 0, 1.0, 0.0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MeasureSynthRouterTopShare(SkewOptions("olmoe", 1.0), 0, 0).status().code(),
            StatusCode::kInvalidArgument);
  Result<SkewModel> m = MakeSkewModel(64, 0, 1.0, 2.0);
  ASSERT_TRUE(m.ok());
  double norm2 = 0;
  for (float v : m->direction) norm2 += v * v;
  EXPECT_NEAR(norm2, 1.0, 1e-5);
  EXPECT_NEAR(m->channel_amplitude, 2.0 * 0.02 * 8.0, 1e-6);
}

TEST(SynthGaussian, MomentsAndTailsMatchStandardNormal) {
  const int64_t n = 1 << 22;
  std::vector<float> z(n);
  StandardNormals(123, 0, n, z.data());
  double s = 0, s2 = 0, s4 = 0;
  int64_t beyond3 = 0, beyond45 = 0;
  for (float v : z) {
    s += v;
    s2 += static_cast<double>(v) * v;
    s4 += static_cast<double>(v) * v * v * v;
    beyond3 += std::fabs(v) > 3.0f;
    beyond45 += std::fabs(v) > 4.5f;
  }
  EXPECT_NEAR(s / n, 0.0, 0.003);
  EXPECT_NEAR(s2 / n, 1.0, 0.003);
  EXPECT_NEAR(s4 / n, 3.0, 0.03);  // kurtosis of a normal
  EXPECT_NEAR(static_cast<double>(beyond3) / n, 0.0026998, 0.0026998 * 0.1);
  // P(|z| > 4.5) = 6.8e-6 -> ~28 expected; the tails are sampled exactly, not clipped at 4.17.
  EXPECT_GT(beyond45, 10);
  EXPECT_LT(beyond45, 55);
}

TEST(SynthGaussian, AnyRangeSplitGivesTheSameValues) {
  const int64_t n = 3 * kNormalBlockElems + 123;
  std::vector<float> whole(n), parts(n);
  StandardNormals(77, 0, n, whole.data());
  const int64_t cuts[] = {0, 1, 2, 4095, 4096, 4097, 9000, n};
  for (size_t i = 0; i + 1 < std::size(cuts); ++i) {
    StandardNormals(77, cuts[i], cuts[i + 1], parts.data() + cuts[i]);
  }
  EXPECT_EQ(whole, parts);
  std::vector<float> other(n);
  StandardNormals(78, 0, n, other.data());
  EXPECT_NE(whole, other);
  EXPECT_NE(TensorSeed(0, "a.weight"), TensorSeed(0, "b.weight"));
  EXPECT_NE(TensorSeed(0, "a.weight"), TensorSeed(1, "a.weight"));
}

TEST(SynthGaussian, InverseNormalCdfKnownValues) {
  EXPECT_NEAR(InverseNormalCdf(0.5), 0.0, 1e-15);
  EXPECT_NEAR(InverseNormalCdf(0.975), 1.959963984540054, 1e-12);
  EXPECT_NEAR(InverseNormalCdf(0.001), -3.090232306167813, 1e-11);
  EXPECT_NEAR(InverseNormalCdf(1e-10), -6.361340902404056, 1e-9);
  EXPECT_TRUE(std::isinf(InverseNormalCdf(0.0)));
}

TEST(SynthThreadPool, RunsEveryIndexOnceAcrossCalls) {
  ParallelRunner runner(4);
  EXPECT_EQ(runner.n_threads(), 4);
  for (int round = 0; round < 50; ++round) {
    const int64_t n = 1 + round * 7;
    std::vector<std::atomic<int>> hits(n);
    runner.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "round " << round << " index " << i;
  }
  ParallelRunner inline_runner(1);
  int64_t sum = 0;
  inline_runner.ParallelFor(10, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum, 45);
}

}  // namespace
}  // namespace zipmoe::synth
