// Tests of next-token selection (services/executor/sampler.h).
#include "services/executor/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
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

// Empirical frequencies of n draws, per token id.
std::vector<double> Frequencies(const SamplingParams& p, const std::vector<float>& logits, int n) {
  std::vector<double> f(logits.size(), 0.0);
  for (int32_t t : Draw(p, 0, logits, n)) f[static_cast<size_t>(t)] += 1.0 / n;
  return f;
}

// min_p keeps the tokens at least min_p x the most probable one's probability (of logits / temperature)
// and draws from them renormalised: computed here from the formula of transformers' MinPLogitsWarper.
TEST(SamplerTest, MinPKeepsTokensWithinItsFractionOfTheMostProbable) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  for (const float temperature : {1.0f, 2.0f}) {
    for (const float min_p : {0.2f, 0.5f}) {
      std::vector<double> want(logits.size());
      double max_p = 0.0, sum = 0.0;
      for (size_t i = 0; i < logits.size(); ++i) sum += std::exp(static_cast<double>(logits[i]) / temperature);
      for (size_t i = 0; i < logits.size(); ++i) {
        want[i] = std::exp(static_cast<double>(logits[i]) / temperature) / sum;
        max_p = std::max(max_p, want[i]);
      }
      double kept = 0.0;
      for (double& w : want) {
        if (w < min_p * max_p) w = 0.0;
        kept += w;
      }
      for (double& w : want) w /= kept;
      SamplingParams p;
      p.temperature = temperature;
      p.min_p = min_p;
      p.seed = 11;
      const std::vector<double> got = Frequencies(p, logits, 20000);
      for (size_t i = 0; i < logits.size(); ++i) {
        if (want[i] == 0.0) {
          EXPECT_EQ(got[i], 0.0) << "T " << temperature << " min_p " << min_p << " token " << i;
        } else {
          EXPECT_NEAR(got[i], want[i], 0.015) << "T " << temperature << " min_p " << min_p << " token " << i;
        }
      }
    }
  }
  // 0 is off (the same draws as without it); 1 keeps only the most probable token.
  SamplingParams off, one;
  off.temperature = one.temperature = 1.0f;
  one.min_p = 1.0f;
  SamplingParams zero = off;
  zero.min_p = 0.0f;
  EXPECT_EQ(Draw(off, 3, logits, 200), Draw(zero, 3, logits, 200));
  for (int32_t t : Draw(one, 3, logits, 200)) EXPECT_EQ(t, 0);
}

// min_p applies after top_p (transformers' warper order): top_p 0.9 keeps {0, 1, 2}, then min_p 0.35 of
// 0.5 / 0.95 drops token 2 (0.15 / 0.95 < 0.175 / 0.95).
TEST(SamplerTest, MinPAfterTopP) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.min_p = 0.35f;
  const std::vector<double> got = Frequencies(p, logits, 20000);
  EXPECT_EQ(got[2], 0.0);
  EXPECT_EQ(got[3], 0.0);
  EXPECT_NEAR(got[0], 0.625, 0.015);
}

// Known answers of AdjustLogits: the bias first, the repetition penalty once per distinct token of the
// prompt and the generated tokens (divided when positive, multiplied otherwise, as transformers'
// RepetitionPenaltyLogitsProcessor and vLLM), then the OpenAI penalties on generated tokens only.
TEST(SamplerTest, AdjustLogitsKnownAnswers) {
  SamplingParams p;
  p.logit_bias = {{4, -1.0f}, {0, 0.5f}, {99, 3.0f}};  // 99: outside the vocabulary, skipped
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.1f;
  p.frequency_penalty = 0.5f;
  const std::vector<int32_t> prompt = PromptTokenSet({1, 0, 1, 1, 0});
  EXPECT_EQ(prompt, (std::vector<int32_t>{0, 1}));
  const std::unordered_map<int32_t, int32_t> generated = {{1, 2}, {2, 1}, {5, 1}};
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 0.0f, 3.0f, -4.0f};
  ASSERT_TRUE(AdjustsLogits(p, true, true));
  AdjustLogits(p, prompt, generated, logits.data(), static_cast<int64_t>(logits.size()));
  EXPECT_EQ(logits[0], (2.0f + 0.5f) / 2.0f);                    // bias, then prompt token: divided
  EXPECT_EQ(logits[1], -1.0f * 2.0f - (2 * 0.5f + 0.1f));        // prompt and generated: penalised once
  EXPECT_EQ(logits[2], 0.5f / 2.0f - (1 * 0.5f + 0.1f));         // generated only
  EXPECT_EQ(logits[3], 0.0f);                                    // never seen
  EXPECT_EQ(logits[4], 3.0f - 1.0f);                             // biased, never seen
  EXPECT_EQ(logits[5], -4.0f * 2.0f - (1 * 0.5f + 0.1f));        // negative: multiplied
  // Nothing to do: no bias, penalties off or nothing seen.
  SamplingParams none;
  EXPECT_FALSE(AdjustsLogits(none, true, true));
  none.repetition_penalty = 1.3f;
  EXPECT_FALSE(AdjustsLogits(none, false, false));
  EXPECT_TRUE(AdjustsLogits(none, true, false));
  none.repetition_penalty = 1.0f;
  none.presence_penalty = 0.2f;
  EXPECT_FALSE(AdjustsLogits(none, true, false));
  EXPECT_TRUE(AdjustsLogits(none, false, true));
}

}  // namespace
}  // namespace zipmoe::executor
