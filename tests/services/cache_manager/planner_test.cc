// Cache planner (ZipMoE §3.4, App. C Alg. 2-4, App. D eq. 24): Poisson-binomial DP against hand-worked
// answers and Monte-Carlo sampling, IPF against brute-force enumeration of k-subsets (Theorem D.1),
// makespan known answers, grid-search behaviour and budgets, rank frequencies from traces, errors,
// and the `zipmoe plan` / `zipmoe profile` CLI on a tiny compressed model.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/manifest.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"
#include "tests/test_util.h"

namespace zipmoe::cache_manager {
namespace {

using Hits = std::array<int32_t, kPoolCount>;

// Exactly-k conditional-Bernoulli distribution over subsets (bitmasks), by enumeration.
std::map<uint32_t, double> BruteForceSubsets(const std::vector<double>& q, int k) {
  std::map<uint32_t, double> p;
  double z = 0;
  const int n = static_cast<int>(q.size());
  for (uint32_t mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != k) continue;
    double w = 1;
    for (int i = 0; i < n; ++i) w *= (mask >> i & 1) ? q[i] : 1 - q[i];
    p[mask] = w;
    z += w;
  }
  for (auto& [mask, w] : p) w /= z;
  return p;
}

std::vector<double> BruteForceInclusion(const std::vector<double>& q, int k) {
  std::vector<double> f(q.size(), 0.0);
  for (const auto& [mask, w] : BruteForceSubsets(q, k)) {
    for (size_t i = 0; i < q.size(); ++i) f[i] += (mask >> i & 1) ? w : 0;
  }
  return f;
}

// Random feasible inclusion probabilities: sorted random weights normalised to Σ = k (capped at 1).
std::vector<double> RandomRankFreq(std::mt19937_64& rng, int n, int k, double skew) {
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::vector<double> w(n);
  for (double& x : w) x = std::pow(u(rng), skew);
  std::sort(w.rbegin(), w.rend());
  return NormalizeInclusion(w, k).value();
}

CostModel TestCost() {
  CostModel c;
  c.sm_read_us = 100;
  c.e_read_us = 10;
  c.decompress_us = 20;
  c.n_shards = 2;
  c.n_workers = 2;
  c.tensors_per_expert = 3;
  return c;
}

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

// --- Alg. 3 -------------------------------------------------------------------------------------

TEST(MakespanTest, KnownAnswers) {
  const CostModel c = TestCost();  // u 100, v 10, c 20, K 2, L 2, n 3; k = 2 below
  // All miss: n_SM = 6, n_E = 12 -> T_io = 600 + 120; T_dec = (120 + 12·20) / 2 = 180.
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {0, 0, 0, 0}, c), 720);
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {2, 0, 0, 0}, c), 0);    // all F
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {0, 2, 0, 0}, c), 120);  // all C: decode only, 240 / L
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {0, 0, 2, 0}, c), 180);  // all S: read E (120), decode (120+240)/2
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {0, 0, 0, 2}, c), 600);  // all E: read SM
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {1, 0, 0, 1}, c), 300);  // one F, one E: 3 SM reads
  // GPU terms: p = 50 per expert, recovery 5 per tensor.
  CostModel g = c;
  g.expert_compute_us = 50;
  g.recovery_us = 5;
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {2, 0, 0, 0}, g), 100);             // all F: compute only, k·p
  EXPECT_DOUBLE_EQ(EstimateMakespanUs(2, {0, 0, 0, 0}, g), 720 + 15 + 50);   // I/O bound + last expert
}

TEST(MakespanTest, ExpectationMatchesEnumerationAndLimits) {
  std::mt19937_64 rng(5);
  const int n = 7, k = 3;
  const auto q = FitSelectionProbabilities(RandomRankFreq(rng, n, k, 2.0), k).value().q;
  CostModel c = TestCost();
  c.expert_compute_us = 7;
  c.recovery_us = 1;
  const Hits cap = {1, 2, 1, 2};
  const int pool_of[] = {0, 1, 1, 2, 3, 3, 4};
  double want = 0;
  for (const auto& [mask, w] : BruteForceSubsets(q, k)) {
    Hits h{};
    for (int i = 0; i < n; ++i) {
      if ((mask >> i & 1) && pool_of[i] < kPoolCount) ++h[pool_of[i]];
    }
    want += w * EstimateMakespanUs(k, h, c);
  }
  const MakespanExpectation e = ExpectedMakespan(HitModel(q, k, cap), c);
  EXPECT_NEAR(e.makespan_us, want, 1e-9 * want);
  EXPECT_NEAR(e.probability_mass, 1.0, 1e-12);
  EXPECT_NEAR(e.expected_hits[0] + e.expected_hits[1] + e.expected_hits[2] + e.expected_hits[3] + e.expected_miss,
              k, 1e-12);
  // Everything in F: compute only (k·p); nothing cached: the all-miss estimate, I/O bound here.
  EXPECT_NEAR(ExpectedMakespan(HitModel(q, k, {n, 0, 0, 0}), c).makespan_us, k * c.expert_compute_us, 1e-9);
  const double miss = ExpectedMakespan(HitModel(q, k, {0, 0, 0, 0}), c).makespan_us;
  EXPECT_NEAR(miss, EstimateMakespanUs(k, {0, 0, 0, 0}, c), 1e-9);
  EXPECT_NEAR(miss, 3 * k * c.sm_read_us + 3 * 2 * k * c.e_read_us + 3 * c.recovery_us + c.expert_compute_us, 1e-9);
}

// --- Alg. 4 -------------------------------------------------------------------------------------

PoolCosts TestPoolCosts() {
  PoolCosts p;
  p.bytes_per_expert = {6000, 4600, 3000, 1600};  // F, C, S, E
  return p;
}

void ExpectWithinBudget(const PoolPlan& plan, uint64_t budget, const PoolCosts& costs, int n) {
  double used = 0;
  int experts = 0;
  for (int p = 0; p < kPoolCount; ++p) {
    used += plan.capacities[p] * costs.bytes_per_expert[p];
    experts += plan.capacities[p];
  }
  EXPECT_LE(used, static_cast<double>(budget));
  EXPECT_LE(experts, n);
  EXPECT_EQ(plan.miss_capacity, n - experts);
}

TEST(PlanPoolsTest, SkewedWorkloadPrefersFullTensors) {
  // Four hot experts (f ≈ 0.97) and a cold tail; the budget holds four F experts.
  const int n = 32, k = 4;
  std::vector<double> w(n, 0.004);
  for (int r = 0; r < 4; ++r) w[r] = 0.99;
  const auto f = NormalizeInclusion(w, k).value();
  const PoolCosts costs = TestPoolCosts();
  CostModel c = TestCost();
  const uint64_t budget = 4 * 6000;
  auto plan = PlanPools(f, k, budget, costs, c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_DOUBLE_EQ(plan->ratios[kPoolF], 1.0);
  EXPECT_EQ(plan->capacities[kPoolF], 4);
  EXPECT_GT(plan->expected_hits[kPoolF], 3.8);
  EXPECT_LT(plan->expected_makespan_us, 0.1 * plan->all_miss_makespan_us);
  EXPECT_EQ(plan->grid_points, 1771);  // C(20 + 3, 3) ratio vectors at δ = 0.05
  ExpectWithinBudget(*plan, budget, costs, n);
}

TEST(PlanPoolsTest, BudgetLimitedUniformWorkloadUsesCompressedPools) {
  const int n = 64, k = 8;
  const PoolCosts costs = TestPoolCosts();
  CostModel c = TestCost();
  c.n_workers = 8;  // cheap parallel decode: S/E/C hits beat fewer F hits
  const uint64_t budget = 16 * 6000;
  auto plan = PlanPools(UniformRankFrequencies(n, k), k, budget, costs, c);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  PlanOptions f_only;
  f_only.pools = {true, false, false, false};
  auto f_plan = PlanPools(UniformRankFrequencies(n, k), k, budget, costs, c, f_only);
  ASSERT_TRUE(f_plan.ok());
  EXPECT_EQ(f_plan->grid_points, 1);
  EXPECT_EQ(f_plan->capacities[kPoolF], 16);
  EXPECT_LT(plan->ratios[kPoolF], 1.0);
  EXPECT_GT(plan->capacities[kPoolC] + plan->capacities[kPoolS] + plan->capacities[kPoolE], 0);
  EXPECT_LT(plan->expected_makespan_us, f_plan->expected_makespan_us);
  ExpectWithinBudget(*plan, budget, costs, n);
  ExpectWithinBudget(*f_plan, budget, costs, n);
}

TEST(PlanPoolsTest, BudgetAlwaysRespectedAndPoolSetHonoured) {
  std::mt19937_64 rng(3);
  const int n = 24, k = 4;
  const auto f = RandomRankFreq(rng, n, k, 3.0);
  const PoolCosts costs = TestPoolCosts();
  for (const char* set : {"FCSE", "F", "FS", "SE", "C"}) {
    for (uint64_t budget : {1000ull, 7777ull, 50000ull, 1000000ull}) {
      PlanOptions options;
      options.pools = ParsePoolSet(set).value();
      options.grid_step = 0.1;
      auto plan = PlanPools(f, k, budget, costs, TestCost(), options);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      ExpectWithinBudget(*plan, budget, costs, n);
      double sum = 0;
      for (int p = 0; p < kPoolCount; ++p) {
        sum += plan->ratios[p];
        if (!options.pools[p]) {
          EXPECT_EQ(plan->ratios[p], 0.0) << set;
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      EXPECT_LE(plan->expected_makespan_us, plan->all_miss_makespan_us + 1e-9);
    }
  }
  // A budget that holds every expert in F: all F, compute-only makespan.
  CostModel c = TestCost();
  c.expert_compute_us = 30;
  auto all = PlanPools(f, k, 1000000, costs, c);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->capacities[kPoolF], n);
  EXPECT_NEAR(all->expected_makespan_us, k * 30.0, 1e-9);
}

TEST(PlanPoolsTest, InvalidArgumentsNameTheField) {
  const PoolCosts costs = TestPoolCosts();
  const CostModel c = TestCost();
  auto expect_error = [](const Result<PoolPlan>& r, const std::string& field) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().ToString();
  };
  expect_error(PlanPools({0.5, 0.7, 0.5, 0.3}, 2, 10000, costs, c), "rank_freq[1]");
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.5}, 5, 10000, costs, c), "top_k");
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.5}, 2, 0, costs, c), "budget_bytes_per_layer");
  expect_error(PlanPools({}, 2, 10000, costs, c), "rank_freq");
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.4}, 2, 10000, costs, c), "sums to");
  PlanOptions bad_step;
  bad_step.grid_step = 0.3;
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.5}, 2, 10000, costs, c, bad_step), "grid_step");
  PoolCosts zero = costs;
  zero.bytes_per_expert[kPoolS] = 0;
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.5}, 2, 10000, zero, c), "bytes_per_expert[S]");
  CostModel negative = c;
  negative.sm_read_us = -1;
  expect_error(PlanPools({0.5, 0.5, 0.5, 0.5}, 2, 10000, costs, negative), "cost.sm_read_us");
  EXPECT_EQ(ParsePoolSet("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePoolSet("FX").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePoolSet("FF").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PoolSetString(ParsePoolSet("es").value()), "SE");
}

// --- rank frequencies from traces ---------------------------------------------------------------

ActivationRecord Rec(int64_t step, int32_t layer, std::vector<int32_t> experts, std::string session = "") {
  ActivationRecord r;
  r.step = step;
  r.layer_id = layer;
  r.expert_ids = std::move(experts);
  r.tokens_per_expert.assign(r.expert_ids.size(), 1);
  r.session = std::move(session);
  return r;
}

TEST(RankFrequenciesTest, CountsSortedPerLayerAndAveraged) {
  // Layer 0: expert 0 every step, 1 twice, 2 and 3 once -> f = [1, .5, .25, .25].
  // Layer 1: expert 3 every step, 2 every step -> f = [1, 1, 0, 0].
  std::vector<ActivationRecord> records = {Rec(0, 0, {0, 1}), Rec(1, 0, {0, 2}), Rec(2, 0, {0, 1}),
                                           Rec(3, 0, {3, 0}), Rec(0, 1, {2, 3}), Rec(1, 1, {3, 2})};
  auto rf = ComputeRankFrequencies(records, 4, 2);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  ASSERT_EQ(rf->size(), 1u);
  const RankFrequencies& b1 = rf->at(1);
  EXPECT_EQ(b1.n_records, 6);
  EXPECT_EQ(b1.per_layer.at(0), (std::vector<double>{1, 0.5, 0.25, 0.25}));
  EXPECT_EQ(b1.per_layer.at(1), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(b1.active_k, 2);
  EXPECT_DOUBLE_EQ(b1.mean_active_experts, 2.0);
  EXPECT_EQ(b1.rank_freq, (std::vector<double>{1, 0.75, 0.125, 0.125}));
}

TEST(RankFrequenciesTest, BatchSizesAndSessionsAreSeparated) {
  // Two sessions with different hot experts: ranked per session, the skew survives.
  std::vector<ActivationRecord> records;
  for (int s = 0; s < 4; ++s) records.push_back(Rec(s, 0, {0}, "a"));
  for (int s = 0; s < 4; ++s) records.push_back(Rec(s, 0, {3}, "b"));
  ActivationRecord batch3 = Rec(9, 0, {0, 1, 2});
  batch3.tokens_per_expert = {1, 1, 1};  // 3 tokens routed, top-1
  records.push_back(batch3);
  auto rf = ComputeRankFrequencies(records, 4, 1);
  ASSERT_TRUE(rf.ok());
  EXPECT_EQ(rf->at(1).rank_freq, (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(rf->at(3).active_k, 3);
  EXPECT_EQ(rf->at(3).rank_freq, (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(ComputeRankFrequencies({Rec(0, 0, {4})}, 4, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeRankFrequencies({}, 4, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(TraceTest, LinesRoundTripAndErrorsNameTheLine) {
  ActivationRecord r = Rec(12, 3, {0, 5, 9});
  r.tokens_per_expert = {2, 1, 3};
  r.n_tokens = 2;
  r.session = "chat-1";
  const std::string line = FormatTraceLine(r);
  EXPECT_EQ(line, R"({"experts":[0,5,9],"layer":3,"n_tokens":2,"session":"chat-1","step":12,"tokens":[2,1,3]})");
  auto back = ParseTraceLine(line, "t:1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->expert_ids, r.expert_ids);
  EXPECT_EQ(back->tokens_per_expert, r.tokens_per_expert);
  EXPECT_EQ(BatchSizeOf(*back, 2), 2);
  back->n_tokens = 0;
  EXPECT_EQ(BatchSizeOf(*back, 2), 3);  // ceil(6 routed / top-2)

  testing::TempDir tmp;
  const std::string path = tmp.Sub("trace.jsonl");
  testing::WriteAll(path, line + "\n\n" + R"({"step":1,"layer":0,"experts":[1,1]})" + "\n");
  auto bad = ReadTrace(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":3"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("twice"), std::string::npos);
  EXPECT_EQ(ParseTraceLine(R"({"step":1,"layer":0})", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTraceLine(R"({"step":1,"layer":0,"experts":[1,2],"tokens":[1]})", "x").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTrace(tmp.Sub("missing.jsonl")).status().code(), StatusCode::kNotFound);
}

// --- profile file -------------------------------------------------------------------------------

TEST(ProfileFileTest, RoundTripAndMissingField) {
  testing::TempDir tmp;
  StorageProfile p;
  p.sm_read_us = 12.5;
  p.e_read_us = 3.25;
  p.decompress_us = 7;
  p.io_mode = "buffered";
  p.io_note = "open(O_DIRECT): Invalid argument";
  p.decodes = 40;
  ASSERT_TRUE(WriteStorageProfile(tmp.Sub("p.json"), p).ok());
  auto back = ReadStorageProfile(tmp.Sub("p.json"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sm_read_us, 12.5);
  EXPECT_EQ(back->e_read_us, 3.25);
  EXPECT_EQ(back->io_note, p.io_note);
  EXPECT_EQ(back->decodes, 40);
  testing::WriteAll(tmp.Sub("bad.json"), R"({"version":1,"sm_read_us":1,"e_read_us":2})");
  auto bad = ReadStorageProfile(tmp.Sub("bad.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("decompress_us"), std::string::npos);
}

// --- a real compressed model --------------------------------------------------------------------

// Tiny qwen2_moe (16 experts, top-4, 4 layers) compressed with K = 4, made once for the suite and
// removed after it.
class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = std::make_unique<testing::TempDir>();
    const std::string model = root_->Sub("tiny");
    auto s = testing::RunCli("synth --arch qwen2_moe --preset tiny --seed 3 --out " + model);
    ASSERT_EQ(s.exit_code, 0) << s.output;
    auto c = testing::RunCli("compress " + model + " " + root_->Sub("tiny.z") + " --shards 4");
    ASSERT_EQ(c.exit_code, 0) << c.output;
  }
  static void TearDownTestSuite() { root_.reset(); }
  static std::string TinyCompressed() { return root_->Sub("tiny.z"); }

 private:
  static std::unique_ptr<testing::TempDir> root_;
};
std::unique_ptr<testing::TempDir> TinyModelTest::root_;

nlohmann::json LastJsonLine(const std::string& output) {
  const size_t at = output.rfind("\n{");
  return nlohmann::json::parse(at == std::string::npos ? output : output.substr(at + 1));
}

TEST_F(TinyModelTest, InputsFromManifestAndProfile) {
  auto manifest = ReadManifest(TinyCompressed());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto in = ModelPlanInputsFromManifest(*manifest, TinyCompressed());
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->n_experts, 16);
  EXPECT_EQ(in->top_k, 4);
  EXPECT_EQ(in->n_shards, 4);
  EXPECT_EQ(in->tensors_per_expert, 3);
  const auto& b = in->pool_costs.bytes_per_expert;
  EXPECT_DOUBLE_EQ(b[kPoolC], b[kPoolS] + b[kPoolE]);
  EXPECT_DOUBLE_EQ(b[kPoolF], 2 * b[kPoolS]);  // SM plane = 1 byte per value
  EXPECT_LT(b[kPoolE], b[kPoolS]);              // exponents compress
  for (int p = 0; p < kPoolCount; ++p) {
    EXPECT_GE(in->slot_costs.bytes_per_expert[p], b[p]);
    EXPECT_EQ(std::fmod(in->slot_costs.bytes_per_expert[p], 4096.0), 0.0);
  }
  auto profile = ProfileStorage(TinyCompressed(), {/*max_tensors=*/8, /*decode_repeats=*/2, /*seed=*/1, true});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_EQ(profile->sm_reads, 8);
  EXPECT_EQ(profile->e_reads, 32);
  EXPECT_EQ(profile->decodes, 64);
  EXPECT_GT(profile->sm_read_us, 0);
  EXPECT_GT(profile->e_read_us, 0);
  EXPECT_GT(profile->decompress_us, 0);
  EXPECT_TRUE(profile->io_mode == "o_direct" || profile->io_mode == "buffered");
  EXPECT_EQ(profile->io_mode == "buffered", !profile->io_note.empty());
}

TEST_F(TinyModelTest, PlanCliJsonOutputUniformTraceAndProfile) {
  const std::string dir = TinyCompressed();
  auto r = testing::RunCli("plan --model " + dir + " --memory-budget 256KiB --json --decompress-threads 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = LastJsonLine(r.output);
  EXPECT_EQ(j["workload"], "uniform");
  EXPECT_EQ(j["n_experts"], 16);
  EXPECT_EQ(j["top_k"], 4);
  EXPECT_EQ(j["n_moe_layers"], 4);
  EXPECT_EQ(j["budget_bytes"], 262144);
  EXPECT_EQ(j["budget_bytes_per_layer"], 65536);
  EXPECT_EQ(j["pools"], "FCSE");
  EXPECT_EQ(j["cost"]["source"], "defaults");
  EXPECT_EQ(j["cost"]["n_workers"], 4);
  double ratio_sum = 0, used = 0;
  for (const char* p : {"F", "C", "S", "E"}) {
    ratio_sum += j["ratios"][p].get<double>();
    used += j["capacities"][p].get<double>() * j["bytes_per_expert"][p].get<double>();
  }
  EXPECT_NEAR(ratio_sum, 1.0, 1e-9);
  EXPECT_LE(used, 65536.0);
  EXPECT_GT(j["expected_makespan_us"].get<double>(), 0);
  EXPECT_LE(j["expected_makespan_us"].get<double>(), j["all_miss_makespan_us"].get<double>());
  EXPECT_LE(j["expected_makespan_us"].get<double>(), j["f_only_makespan_us"].get<double>() + 1e-9);

  // A skewed trace, and a profile measured on this machine.
  testing::TempDir tmp;
  std::string trace;
  for (int step = 0; step < 50; ++step) {
    for (int layer = 0; layer < 4; ++layer) {
      ActivationRecord rec = Rec(step, layer, {0, 1, 2, 3 + step % 13});
      trace += FormatTraceLine(rec) + "\n";
    }
  }
  testing::WriteAll(tmp.Sub("trace.jsonl"), trace);
  auto prof = testing::RunCli("profile --model " + dir + " --out " + tmp.Sub("profile.json") + " --tensors 8");
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  auto t = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --trace " + tmp.Sub("trace.jsonl") +
                           " --profile " + tmp.Sub("profile.json") + " --pools FS");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  j = LastJsonLine(t.output);
  EXPECT_EQ(j["workload"], "trace");
  EXPECT_EQ(j["trace_records"], 200);
  EXPECT_EQ(j["rank_freq"][0], 1.0);
  EXPECT_EQ(j["cost"]["source"], tmp.Sub("profile.json"));
  EXPECT_EQ(j["ratios"]["C"], 0.0);
  EXPECT_EQ(j["ratios"]["E"], 0.0);

  auto human = testing::RunCli("plan --model " + dir + " --memory-budget 1MiB");
  ASSERT_EQ(human.exit_code, 0) << human.output;
  EXPECT_NE(human.output.find("uniform f_r = k/N"), std::string::npos) << human.output;
  auto bad = testing::RunCli("plan --model " + dir + " --memory-budget 12parsecs");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("memory-budget"), std::string::npos) << bad.output;
  auto no_batch = testing::RunCli("plan --model " + dir + " --memory-budget 1MiB --batch-size 8 --trace " +
                                  tmp.Sub("trace.jsonl"));
  EXPECT_NE(no_batch.exit_code, 0);
  EXPECT_NE(no_batch.output.find("batch size 8"), std::string::npos) << no_batch.output;
}

// `plan --policy`: what each policy does with the budget, in the runtime's own names.
TEST_F(TinyModelTest, PlanCliNamesEveryPolicysLayout) {
  const std::string dir = TinyCompressed();
  auto zipmoe = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json");
  ASSERT_EQ(zipmoe.exit_code, 0) << zipmoe.output;
  nlohmann::json j = LastJsonLine(zipmoe.output);
  EXPECT_EQ(j["policy"], "zipmoe");
  EXPECT_EQ(j["global_f_experts"], 0);
  const double f_bytes = j["bytes_per_expert"]["F"].get<double>();
  ASSERT_GT(f_bytes, 0);
  const int64_t slots = static_cast<int64_t>(512 * 1024 / static_cast<uint64_t>(f_bytes));
  for (const char* policy : {"lru", "fifo", "lfu", "marking", "smoe", "coserve"}) {
    auto r = testing::RunCli(fmt::format("plan --model {} --memory-budget 512KiB --json --policy {}", dir, policy));
    ASSERT_EQ(r.exit_code, 0) << policy << ": " << r.output;
    j = LastJsonLine(r.output);
    EXPECT_EQ(j["policy"], policy);
    EXPECT_EQ(j["pools"], "F") << policy;
    EXPECT_EQ(j["global_f_experts"], slots) << policy;
    EXPECT_NE(j["policy_layout"].get<std::string>().find(fmt::format("one F pool of {} experts shared", slots)),
              std::string::npos)
        << j["policy_layout"];
    EXPECT_EQ(j["capacities"]["C"], 0) << policy;
  }
  auto dali = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy dali");
  ASSERT_EQ(dali.exit_code, 0) << dali.output;
  EXPECT_NE(dali.output.find(fmt::format("policy     dali: one F pool per MoE layer, {} experts each", slots / 4)),
            std::string::npos)
      << dali.output;
  auto none = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy full-load");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("no cache"), std::string::npos) << none.output;
  auto bad = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy belady");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("cache policy 'belady': unknown (want zipmoe, lru, fifo, lfu, full-load, marking, dali, "
                            "smoe or coserve)"),
            std::string::npos)
      << bad.output;
  // Another policy given pools beyond F gets zipmoe's plan of those pools (issue 17 item 5).
  auto planned = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --policy lru --pools FC");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto zipmoe_fc = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --pools FC");
  ASSERT_EQ(zipmoe_fc.exit_code, 0) << zipmoe_fc.output;
  j = LastJsonLine(planned.output);
  const nlohmann::json jz = LastJsonLine(zipmoe_fc.output);
  EXPECT_EQ(j["pools"], "FC");
  EXPECT_EQ(j["capacities"], jz["capacities"]);
  EXPECT_EQ(j["global_f_experts"], 0);
  EXPECT_NE(j["policy_layout"].get<std::string>().find("per-layer pools FC"), std::string::npos) << j["policy_layout"];
  EXPECT_NE(j["policy_layout"].get<std::string>().find("lru chooses the victim"), std::string::npos)
      << j["policy_layout"];
  auto full = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy full-load --pools FC");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.output.find("full-load policy caches nothing"), std::string::npos) << full.output;
}

}  // namespace
}  // namespace zipmoe::cache_manager
