// Cache planner probabilities (ZipMoE App. C Alg. 2, App. D eq. 24): Poisson-binomial DP against
// hand-worked answers and Monte-Carlo sampling, IPF against brute-force enumeration of k-subsets
// (Theorem D.1), and the joint hit pattern of §3.4 against enumeration and sampling.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"
#include "tests/services/cache_manager/planner_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::Hits;
using test::BruteForceSubsets;
using test::BruteForceInclusion;
using test::RandomRankFreq;

// --- Alg. 2 -------------------------------------------------------------------------------------

TEST(PoissonBinomialTest, KnownAnswersByHand) {
  // N = 3, equal q = 1/2: binomial(3, 1/2) = [1, 3, 3, 1] / 8 (all exact in binary).
  EXPECT_EQ(PoissonBinomial({0.5, 0.5, 0.5}), (std::vector<double>{0.125, 0.375, 0.375, 0.125}));
  // N = 3, equal q = 1/3: Φ(1) = 3 · 1/3 · (2/3)² = 4/9.
  const auto third = PoissonBinomial({1.0 / 3, 1.0 / 3, 1.0 / 3});
  EXPECT_NEAR(third[0], 8.0 / 27, 1e-15);
  EXPECT_NEAR(third[1], 4.0 / 9, 1e-15);
  EXPECT_NEAR(third[2], 2.0 / 9, 1e-15);
  EXPECT_NEAR(third[3], 1.0 / 27, 1e-15);
  // q = (0.2, 0.5, 0.9): Φ(0) = .8·.5·.1, Φ(1) = .01 + .04 + .36, Φ(2) = .01 + .09 + .36, Φ(3) = .2·.5·.9.
  const auto mixed = PoissonBinomial({0.2, 0.5, 0.9});
  EXPECT_NEAR(mixed[0], 0.04, 1e-15);
  EXPECT_NEAR(mixed[1], 0.41, 1e-15);
  EXPECT_NEAR(mixed[2], 0.46, 1e-15);
  EXPECT_NEAR(mixed[3], 0.09, 1e-15);
  // Truncation keeps the low entries exact; an empty interval is Φ = [1].
  const double q[] = {0.2, 0.5, 0.9};
  const auto head = PoissonBinomial(q, 3, 1);
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head[0], mixed[0]);
  EXPECT_EQ(head[1], mixed[1]);
  EXPECT_EQ(PoissonBinomial(q, 0, 4), std::vector<double>{1.0});
}

TEST(PoissonBinomialTest, MatchesMonteCarlo) {
  std::mt19937_64 rng(20240611);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> q(12);
  for (double& x : q) x = u(rng);
  const std::vector<double> phi = PoissonBinomial(q);
  constexpr int kSamples = 400000;
  std::vector<int64_t> counts(q.size() + 1, 0);
  for (int s = 0; s < kSamples; ++s) {
    int hits = 0;
    for (double p : q) hits += u(rng) < p;
    ++counts[hits];
  }
  double total = 0;
  for (size_t h = 0; h < phi.size(); ++h) {
    total += phi[h];
    const double empirical = static_cast<double>(counts[h]) / kSamples;
    const double se = std::sqrt(phi[h] * (1 - phi[h]) / kSamples);
    EXPECT_NEAR(empirical, phi[h], 5 * se + 1e-9) << "h = " << h;
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
}

// --- eq. 24 (Theorem D.1) -----------------------------------------------------------------------

TEST(IpfTest, ReproducesTargetInclusionProbabilitiesByBruteForce) {
  std::mt19937_64 rng(7);
  int cases = 0;
  for (int n = 2; n <= 8; ++n) {
    for (int k = 1; k < n; ++k) {
      for (double skew : {0.5, 1.0, 3.0, 8.0}) {
        const std::vector<double> f = RandomRankFreq(rng, n, k, skew);
        auto fit = FitSelectionProbabilities(f, k);
        ASSERT_TRUE(fit.ok()) << fit.status().ToString();
        const std::vector<double> achieved = BruteForceInclusion(fit->q, k);
        for (int i = 0; i < n; ++i) {
          EXPECT_NEAR(achieved[i], f[i], 1e-9) << "n " << n << " k " << k << " skew " << skew << " rank " << i;
        }
        EXPECT_LE(fit->max_error, 1e-9);
        double sum_q = std::accumulate(fit->q.begin(), fit->q.end(), 0.0);
        EXPECT_NEAR(sum_q, k, 1e-9);  // the documented scale
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 4 * 28);
}

TEST(IpfTest, NormalizeInclusionCapsAtOne) {
  // 3 × (.9, .6, .3, .2) / 2 exceeds 1 twice; capping and rescaling keeps .3 : .2 for the rest.
  const auto f = NormalizeInclusion({0.9, 0.6, 0.3, 0.2}, 3).value();
  EXPECT_EQ(f[0], 1.0);
  EXPECT_EQ(f[1], 1.0);
  EXPECT_NEAR(f[2], 0.6, 1e-12);
  EXPECT_NEAR(f[3], 0.4, 1e-12);
  EXPECT_EQ(NormalizeInclusion({1.0, 1.0, 0.5}, 2).value(), (std::vector<double>{1.0, 1.0, 0.0}));
  EXPECT_EQ(NormalizeInclusion({1.0, 1.0, 1.0, 0.5}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NormalizeInclusion({0.5, 0.0, 0.0}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NormalizeInclusion({0.5, -0.1, 0.0}, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(IpfTest, ForwardMapMatchesBruteForce) {
  const std::vector<double> q = {0.9, 0.7, 0.5, 0.5, 0.2, 0.1, 1.0, 0.0};
  for (int k = 1; k <= 7; ++k) {
    const auto dp = ConditionalInclusion(q, k);
    const auto bf = BruteForceInclusion(q, k);
    for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(dp[i], bf[i], 1e-12) << "k " << k << " i " << i;
  }
}

TEST(IpfTest, UniformIsAFixedPointAndEdgesAreCertain) {
  auto fit = FitSelectionProbabilities(UniformRankFrequencies(10, 3), 3);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->iterations, 0);
  for (double q : fit->q) EXPECT_NEAR(q, 0.3, 1e-12);
  // f = 1 -> always selected, f = 0 -> never.
  auto edge = FitSelectionProbabilities({1.0, 0.6, 0.4, 0.0}, 2);
  ASSERT_TRUE(edge.ok()) << edge.status().ToString();
  EXPECT_EQ(edge->q[0], 1.0);
  EXPECT_EQ(edge->q[3], 0.0);
  const auto achieved = BruteForceInclusion(edge->q, 2);
  EXPECT_NEAR(achieved[1], 0.6, 1e-9);
  EXPECT_NEAR(achieved[2], 0.4, 1e-9);
}

// Regression: rank frequencies of a heavily skewed workload (the bench's ShareGPT calibration trace on
// the qwen2_moe mini preset, router skew 0.5): four ranks are selected almost always, so eq. 24
// converges only linearly and stopped at 1.2e-11 > 1e-12 after 20000 iterations, which made
// `serve --plan-trace` fail at start-up. The fit is good to far better than its inputs and is returned.
TEST(IpfTest, SlowLinearConvergenceStillReturnsAnAccurateFit) {
  std::vector<double> f = {0.99930555555555556, 0.99791666666666667, 0.96597222222222223, 0.82499999999999984,
                           0.16250000000000001, 0.043055555555555562, 0.0062499999999999995};
  f.resize(60, 0.0);
  auto fit = FitSelectionProbabilities(f, 4);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_LE(fit->max_error, 1e-9);
  const auto achieved = ConditionalInclusion(fit->q, 4);
  for (size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(achieved[i], f[i], 1e-9) << i;
  // The budget of iterations is still enforced: an unreachable `acceptable_error` is an error naming both.
  IpfOptions strict;
  strict.max_iterations = 10;
  strict.acceptable_error = 1e-14;
  auto refused = FitSelectionProbabilities(f, 4, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInternal);
  EXPECT_NE(refused.status().message().find("after 10 iterations"), std::string::npos) << refused.status().ToString();
  // With a loose acceptance the best iterate is returned and its error reported.
  IpfOptions loose;
  loose.max_iterations = 200;
  loose.acceptable_error = 1e-2;
  auto early = FitSelectionProbabilities(f, 4, loose);
  ASSERT_TRUE(early.ok()) << early.status().ToString();
  EXPECT_GT(early->max_error, 1e-12);
  EXPECT_LE(early->max_error, 1e-2);
}

TEST(IpfTest, FittedDistributionHasMaximumEntropy) {
  // N = 4, k = 2: moving ε from {0,2},{1,3} to {0,1},{2,3} keeps every marginal, so by Theorem D.1
  // any such move away from the fitted distribution lowers the entropy.
  const std::vector<double> f = {0.8, 0.6, 0.35, 0.25};
  auto fit = FitSelectionProbabilities(f, 2);
  ASSERT_TRUE(fit.ok());
  auto p = BruteForceSubsets(fit->q, 2);
  auto entropy = [](const std::map<uint32_t, double>& d) {
    double h = 0;
    for (const auto& [m, w] : d) h -= w > 0 ? w * std::log(w) : 0;
    return h;
  };
  const double h0 = entropy(p);
  for (double eps : {-0.01, 0.01}) {
    auto moved = p;
    moved[0b0011] += eps;
    moved[0b1100] += eps;
    moved[0b0101] -= eps;
    moved[0b1010] -= eps;
    EXPECT_LT(entropy(moved), h0) << eps;
  }
}

// --- joint hit pattern (§3.4) -------------------------------------------------------------------

TEST(HitModelTest, PatternProbabilitiesSumToOneAndMatchEnumeration) {
  std::mt19937_64 rng(11);
  const int n = 8, k = 3;
  const auto f = RandomRankFreq(rng, n, k, 2.0);
  const auto q = FitSelectionProbabilities(f, k).value().q;
  const Hits cap = {2, 1, 2, 1};  // F = ranks 0-1, C = 2, S = 3-4, E = 5, M = 6-7
  const HitModel model(q, k, cap);
  EXPECT_EQ(model.miss_capacity(), 2);
  // Enumeration: pool of each rank, pattern of each k-subset.
  const int pool_of[] = {0, 0, 1, 2, 2, 3, 4, 4};
  std::map<Hits, double> want;
  for (const auto& [mask, w] : BruteForceSubsets(q, k)) {
    Hits h{};
    for (int i = 0; i < n; ++i) {
      if ((mask >> i & 1) && pool_of[i] < kPoolCount) ++h[pool_of[i]];
    }
    want[h] += w;
  }
  double total = 0;
  Hits h{};
  for (h[0] = 0; h[0] <= 2; ++h[0])
    for (h[1] = 0; h[1] <= 1; ++h[1])
      for (h[2] = 0; h[2] <= 2; ++h[2])
        for (h[3] = 0; h[3] <= 1; ++h[3]) {
          const double p = model.PatternProbability(h);
          total += p;
          EXPECT_NEAR(p, want.count(h) ? want[h] : 0.0, 1e-12);
        }
  EXPECT_NEAR(total, 1.0, 1e-12);
}

TEST(HitModelTest, PatternProbabilitiesMatchMonteCarlo) {
  std::mt19937_64 rng(12);
  const int n = 10, k = 3;
  const auto q = FitSelectionProbabilities(RandomRankFreq(rng, n, k, 1.5), k).value().q;
  const Hits cap = {2, 2, 2, 2};
  const HitModel model(q, k, cap);
  // Rejection sampling of the exactly-k model: independent Bernoulli(q) draws, kept when Σ = k.
  std::uniform_real_distribution<double> u(0.0, 1.0);
  constexpr int kSamples = 200000;
  std::map<Hits, int64_t> counts;
  for (int s = 0; s < kSamples;) {
    Hits h{};
    int total = 0;
    for (int i = 0; i < n; ++i) {
      if (u(rng) < q[i]) {
        ++total;
        if (i < 8) ++h[i / 2];
      }
    }
    if (total != k) continue;
    ++counts[h];
    ++s;
  }
  for (const auto& [h, c] : counts) {
    const double p = model.PatternProbability(h);
    const double se = std::sqrt(p * (1 - p) / kSamples);
    EXPECT_NEAR(static_cast<double>(c) / kSamples, p, 5 * se + 1e-9);
  }
}

}  // namespace
}  // namespace zipmoe::cache_manager
