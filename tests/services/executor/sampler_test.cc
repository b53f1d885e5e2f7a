// Tests of next-token selection (services/executor/sampler.h).
#include "services/executor/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace zipmoe::executor {
namespace {

std::vector<int32_t> Draw(const SamplingParams& p, uint64_t stream, const std::vector<float>& logits, int n) {
  Sampler s(p, stream);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Sample(logits.data(), static_cast<int64_t>(logits.size())));
  return out;
}

TEST(SamplerTest, GreedyTakesTheLowestIdAmongTies) {
  const std::vector<float> logits = {0.0f, 2.0f, std::nanf(""), 2.0f, -1.0f};
  EXPECT_EQ(Argmax(logits.data(), 5), 1);
  EXPECT_EQ(Draw(SamplingParams{}, 0, logits, 1)[0], 1);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedsDiffer) {
  std::vector<float> flat(64, 0.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  const auto a = Draw(p, 0, flat, 32);
  EXPECT_EQ(a, Draw(p, 0, flat, 32));
  EXPECT_NE(a, Draw(p, 1, flat, 32));  // another stream
  p.seed = 43;
  EXPECT_NE(a, Draw(p, 0, flat, 32));
}

// Skip(n) moves the stream past n samples (a resumed sequence): the samples after it are those a
// stream that sampled n times would give, whatever logits the skipped samples saw (also all-NaN rows).
TEST(SamplerTest, SkipEqualsSamplingThatManyTimes) {
  std::vector<float> logits(64);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.05f * static_cast<float>(i % 7);
  const std::vector<float> nan_row(64, std::nanf(""));
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.seed = 99;
  Sampler whole(p, 2);
  std::vector<int32_t> want;
  for (int i = 0; i < 20; ++i) {
    const std::vector<float>& row = i == 3 ? nan_row : logits;
    want.push_back(whole.Sample(row.data(), 64));
  }
  for (int k : {0, 1, 4, 19}) {
    Sampler resumed(p, 2);
    resumed.Skip(static_cast<uint64_t>(k));
    for (int i = k; i < 20; ++i) {
      const std::vector<float>& row = i == 3 ? nan_row : logits;
      EXPECT_EQ(resumed.Sample(row.data(), 64), want[static_cast<size_t>(i)]) << "skip " << k << ", sample " << i;
    }
  }
  // Greedy consumes nothing: Skip is a no-op.
  Sampler greedy(SamplingParams{}, 0);
  greedy.Skip(5);
  EXPECT_EQ(greedy.Sample(logits.data(), 64), Argmax(logits.data(), 64));
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.5f, 0.1f, 3.0f, 2.9f};
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  for (int32_t t : Draw(p, 0, logits, 20)) EXPECT_EQ(t, 2);
  p.top_k = 0;
  p.top_p = 1e-6f;
  for (int32_t t : Draw(p, 0, logits, 20)) EXPECT_EQ(t, 2);
}

TEST(SamplerTest, TopKRestrictsTheSupport) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.9f, 0.2f, 0.95f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;  // ids 1 and 4
  for (int32_t t : Draw(p, 0, logits, 200)) EXPECT_TRUE(t == 1 || t == 4) << t;
}

TEST(SamplerTest, TopPKeepsTheTokenThatCrossesTheThreshold) {
  // probabilities ~ 0.5, 0.3, 0.2 (temperature 1): top_p 0.6 keeps {0, 1}.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.6f;
  int seen1 = 0;
  for (int32_t t : Draw(p, 0, logits, 400)) {
    EXPECT_NE(t, 2);
    seen1 += (t == 1);
  }
  EXPECT_GT(seen1, 80);  // ~ 0.3 / 0.8 of 400 = 150
}

TEST(SamplerTest, EmpiricalFrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  int ones = 0;
  const int n = 4000;
  for (int32_t t : Draw(p, 0, logits, n)) ones += t;
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.03);
}

}  // namespace
}  // namespace zipmoe::executor
