// Cache planner (ZipMoE §3.4, App. C Alg. 3-4): makespan known answers and expectation against
// enumeration, grid-search behaviour, budgets, pool sets and argument errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

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
using test::RandomRankFreq;
using test::TestCost;

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

TEST(PlanPoolsTest, PlansQwen3NextAndQwen35ExpertCounts) {
  // Qwen3-Next (512 experts, top-10) and Qwen3.5 (256, top-8): one layer's plan at a 25 % budget, Zipf-like
  // popularity. The planner runs once per layer at start-up: its time and memory must stay small at these counts.
  for (const auto& [n, k] : {std::pair<int, int>{512, 10}, {256, 8}}) {
    std::vector<double> w(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) w[static_cast<size_t>(r)] = 1.0 / (1.0 + r);
    const auto f = NormalizeInclusion(w, k).value();
    const PoolCosts costs = TestPoolCosts();
    const uint64_t budget = static_cast<uint64_t>(n / 4) * 6000;
    const auto t0 = std::chrono::steady_clock::now();
    auto plan = PlanPools(f, k, budget, costs, TestCost());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_LT(seconds, 20.0) << n << " experts";
    std::printf("PlanPools: %d experts, top-%d: %.3f s, %lld grid points, expected makespan %.0f of %.0f us all-miss\n", n,
                k, seconds, static_cast<long long>(plan->grid_points), plan->expected_makespan_us,
                plan->all_miss_makespan_us);
    EXPECT_LT(plan->expected_makespan_us, plan->all_miss_makespan_us);
    ExpectWithinBudget(*plan, budget, costs, n);
  }
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

// Pool F on a discrete GPU's device with a budget of its own (issue 36 item 1): F's capacity is fixed,
// the grid plans the host pools for the ranks after F's, so every candidate's hit model counts F's
// hits. Against planning the host pools as if F did not exist (then F prepended, the rest clipped:
// what the runtime did before), the joint plan's expected makespan is never worse, and here better.
TEST(PlanPoolsTest, AFixedDeviceFPlansTheHostPoolsAroundIt) {
  const int n = 32, k = 4;
  std::vector<double> w(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) w[static_cast<size_t>(r)] = 1.0 / (1.0 + r);
  const auto f = NormalizeInclusion(w, k).value();
  const PoolCosts costs = TestPoolCosts();
  CostModel c = TestCost();
  c.expert_compute_us = 5;
  const auto q = FitSelectionProbabilities(f, k).value().q;
  int strictly_better = 0;
  for (int32_t fixed : {0, 3, 6, 12}) {
    for (uint64_t host : {uint64_t{4 * 4600}, uint64_t{10 * 3000}, uint64_t{20 * 1600}}) {
      SCOPED_TRACE(::testing::Message() << "F " << fixed << " host " << host);
      PlanOptions joint;
      joint.fixed_f_capacity = fixed;
      auto plan = PlanPools(f, k, host, costs, c, joint);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->capacities[kPoolF], fixed);
      EXPECT_EQ(plan->ratios[kPoolF], 0.0);
      EXPECT_EQ(plan->bytes[kPoolF], static_cast<uint64_t>(fixed * 6000));
      double host_used = 0, ratio_sum = 0;
      int32_t cached = 0;
      for (int p = 0; p < kPoolCount; ++p) {
        cached += plan->capacities[p];
        ratio_sum += plan->ratios[p];
        if (p != kPoolF) host_used += plan->capacities[p] * costs.bytes_per_expert[p];
      }
      EXPECT_LE(host_used, static_cast<double>(host));
      EXPECT_LE(cached, n);
      EXPECT_EQ(plan->miss_capacity, n - cached);
      EXPECT_NEAR(ratio_sum, 1.0, 1e-12);
      // The host pools planned without F, then F in front and the later pools clipped to the experts left.
      PlanOptions host_only;
      host_only.pools = ParsePoolSet("CSE").value();
      auto apart = PlanPools(f, k, host, costs, c, host_only);
      ASSERT_TRUE(apart.ok());
      std::array<int32_t, kPoolCount> cap = apart->capacities;
      cap[kPoolF] = fixed;
      int32_t left = n - fixed;
      for (int p : {kPoolC, kPoolS, kPoolE}) {
        cap[p] = std::min(cap[p], left);
        left -= cap[p];
      }
      const double apart_makespan = ExpectedMakespan(HitModel(q, k, cap), c).makespan_us;
      EXPECT_LE(plan->expected_makespan_us, apart_makespan + 1e-9);
      strictly_better += plan->expected_makespan_us < apart_makespan - 1e-6;
      // The joint plan's own figure is its hit model's.
      EXPECT_NEAR(plan->expected_makespan_us, ExpectedMakespan(HitModel(q, k, plan->capacities), c).makespan_us, 1e-9);
    }
  }
  EXPECT_GT(strictly_better, 0) << "knowing F's ranks changes some host plan";
  // Every expert in F: nothing left to plan, compute-only makespan; no host bytes at all is allowed.
  PlanOptions all;
  all.fixed_f_capacity = n + 5;  // clipped to n
  auto full = PlanPools(f, k, 0, costs, c, all);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_EQ(full->capacities[kPoolF], n);
  EXPECT_EQ(full->grid_points, 1);
  EXPECT_NEAR(full->expected_makespan_us, k * 5.0, 1e-9);
  // F fixed without F in Λ is refused by name.
  PlanOptions bad;
  bad.pools = ParsePoolSet("CS").value();
  bad.fixed_f_capacity = 2;
  auto refused = PlanPools(f, k, 10000, costs, c, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fixed_f_capacity"), std::string::npos) << refused.status().ToString();
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

}  // namespace
}  // namespace zipmoe::cache_manager
