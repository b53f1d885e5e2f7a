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

// Argmax against a one-pass reference (the first strict maximum among non-NaN values) on rows of every
// length around its 16-lane blocks, with NaN, +-inf, ties and signed zeros placed at random.
TEST(SamplerTest, ArgmaxIsTheFirstLargestNonNanValue) {
  const auto reference = [](const std::vector<float>& x) {
    int32_t best = 0;
    bool found = false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      if (!found || x[i] > x[static_cast<size_t>(best)]) best = static_cast<int32_t>(i), found = true;
    }
    return best;
  };
  const float specials[] = {std::nanf(""), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 1.0f};
  uint64_t state = 7;
  const auto next = [&state] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(state >> 33);
  };
  for (int64_t n = 1; n <= 70; ++n)
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x(static_cast<size_t>(n));
      const uint32_t mode = next() % 4;
      for (float& v : x) {
        if (mode == 0) v = static_cast<float>(next() % 5) - 2.0f;               // many ties
        else if (mode == 1) v = specials[next() % 6];                          // specials only
        else if (mode == 2) v = next() % 3 ? std::nanf("") : -std::numeric_limits<float>::infinity();
        else v = static_cast<float>(static_cast<int32_t>(next() % 2001) - 1000) * 1e-3f;
      }
      ASSERT_EQ(Argmax(x.data(), n), reference(x)) << "n " << n << " trial " << trial << " mode " << mode;
    }
  const std::vector<float> all_nan(37, std::nanf(""));
  EXPECT_EQ(Argmax(all_nan.data(), 37), 0);
  const std::vector<float> zeros = {-1.0f, -0.0f, 0.0f, 0.0f};
  EXPECT_EQ(Argmax(zeros.data(), 4), 1);
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
