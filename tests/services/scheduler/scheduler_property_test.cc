// Randomized properties of the scheduler over seeded task sets (Theorem 3.1, Lemma B.3).
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "services/scheduler/block_scheduler.h"

namespace zipmoe::scheduler {
namespace {

constexpr int kCases = 4000;
constexpr double kRelTol = 1e-9;

struct Layer {
  std::vector<ExpertTask> tasks;
  CostModel cost;
};

// Costs log-uniform over four decades so I/O-, decode- and compute-bound layers all occur;
// K in {1, 2, 4, 8}, L in 1..6; 1-24 experts of 1-3 tensors, states per tensor or per expert.
Layer RandomLayer(std::mt19937_64& rng, bool with_recovery) {
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto log_uniform = [&](double a, double b) { return std::exp(uniform(std::log(a), std::log(b))); };
  auto integer = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  const int32_t shards[] = {1, 2, 4, 8};
  Layer layer;
  layer.cost = CostModelFromRatio(log_uniform(1, 1e4), uniform(0.05, 1.0), log_uniform(0.01, 1e4),
                                  with_recovery ? log_uniform(0.01, 1e3) : 0.0, shards[integer(0, 3)], integer(1, 6));
  const int n_experts = integer(1, 24);
  for (int e = 0; e < n_experts; ++e) {
    const double compute_us = integer(0, 5) == 0 ? 0.0 : log_uniform(0.1, 1e4);
    const int32_t n_tokens = integer(1, 64);
    const bool one_state = integer(0, 1) == 1;
    const auto expert_state = static_cast<CompressionState>(integer(0, 4));
    const int n_tensors = integer(1, 3);
    for (int t = 0; t < n_tensors; ++t) {
      const auto state = one_state ? expert_state : static_cast<CompressionState>(integer(0, 4));
      layer.tasks.push_back({2 * e + 1, static_cast<ExpertProj>(t), state, n_tokens, compute_us});
    }
  }
  return layer;
}

// Every task with operations is in exactly one block; per block, its reads are contiguous, E-chunks
// come before SM-chunks and follow the block's task order; decodes follow the block order.
void ExpectWellFormed(const Layer& layer, const LayerSchedule& s) {
  const int32_t k = layer.cost.n_shards;
  std::vector<int> seen(layer.tasks.size(), 0);
  std::vector<IoOp> io;
  std::vector<DecodeOp> decodes;
  for (const Block& b : s.blocks) {
    for (int32_t j : b.tasks) {
      ++seen[j];
      for (int32_t i = 0; i < k && NeedsERead(layer.tasks[j].state); ++i) io.push_back({j, ChunkKind::kE, i});
      for (int32_t i = 0; i < k; ++i) decodes.push_back({j, i});
    }
    for (int32_t j : b.tasks) {
      if (NeedsSmRead(layer.tasks[j].state)) io.push_back({j, ChunkKind::kSm, -1});
    }
  }
  for (size_t j = 0; j < layer.tasks.size(); ++j) {
    EXPECT_EQ(seen[j], NeedsDecode(layer.tasks[j].state) ? 1 : 0) << "task " << j;
  }
  EXPECT_EQ(s.order.io_order, io);
  EXPECT_EQ(s.order.decode_order, decodes);
  for (size_t r = 0; r < s.order.decode_order.size(); ++r) {
    EXPECT_EQ(s.DecodeRank(s.order.decode_order[r].task, s.order.decode_order[r].shard), static_cast<int32_t>(r));
  }
}

TEST(SchedulerPropertyTest, MakespanWithinTheoremBound) {
  std::mt19937_64 rng(20240601);
  const SchedulerOptions variants[] = {
      {BlockFill::kTypeIIOnly, DominanceRule::kAnyLevel, InsertionStart::kAfterHeavierSameType},
      {BlockFill::kTypeIIOnly, DominanceRule::kAllLevels, InsertionStart::kAfterHeavierSameType},
      {BlockFill::kTypeIIThenTypeI, DominanceRule::kAnyLevel, InsertionStart::kAfterHeavierSameType},
      {BlockFill::kTypeIIThenTypeI, DominanceRule::kAnyLevel, InsertionStart::kBlockHead},
  };
  double worst_ratio = 0.0;
  for (int c = 0; c < kCases; ++c) {
    const Layer layer = RandomLayer(rng, /*with_recovery=*/false);
    const double factor = ApproximationFactor(layer.cost.n_workers);
    for (const SchedulerOptions& options : variants) {
      Result<LayerSchedule> s = ScheduleLayer(layer.tasks, layer.cost, options);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      const double bound = s->bound.bound_us;
      ASSERT_GE(s->makespan_us, bound * (1 - kRelTol)) << "case " << c;
      ASSERT_LE(s->makespan_us, factor * bound * (1 + kRelTol)) << "case " << c << " L=" << layer.cost.n_workers;
      if (bound > 0) worst_ratio = std::max(worst_ratio, s->makespan_us / bound / factor);
      if (&options == &variants[0]) ExpectWellFormed(layer, *s);
    }
    Result<LayerSchedule> baseline = ScheduleLayerBaseline(layer.tasks, layer.cost);
    ASSERT_TRUE(baseline.ok()) << baseline.status().ToString();
    ASSERT_GE(baseline->makespan_us, baseline->bound.bound_us * (1 - kRelTol)) << "case " << c;
  }
  RecordProperty("worst_ratio_over_factor", std::to_string(worst_ratio));
}

TEST(SchedulerPropertyTest, BoundHoldsWithRecoveryStage) {
  std::mt19937_64 rng(7);
  for (int c = 0; c < kCases / 4; ++c) {
    const Layer layer = RandomLayer(rng, /*with_recovery=*/true);
    Result<LayerSchedule> s = ScheduleLayer(layer.tasks, layer.cost);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_GE(s->makespan_us, s->bound.bound_us * (1 - kRelTol)) << "case " << c;
  }
}

TEST(SchedulerPropertyTest, NotWorseThanBaselineOnAverage) {
  std::mt19937_64 rng(99);
  double sum_zipmoe = 0.0, sum_baseline = 0.0;
  int n = 0;
  for (int c = 0; c < kCases / 2; ++c) {
    const Layer layer = RandomLayer(rng, /*with_recovery=*/false);
    Result<LayerSchedule> s = ScheduleLayer(layer.tasks, layer.cost);
    Result<LayerSchedule> b = ScheduleLayerBaseline(layer.tasks, layer.cost);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    if (s->bound.bound_us <= 0) continue;
    sum_zipmoe += s->makespan_us / s->bound.bound_us;
    sum_baseline += b->makespan_us / b->bound.bound_us;
    ++n;
  }
  ASSERT_GT(n, 0);
  EXPECT_LE(sum_zipmoe / n, sum_baseline / n);
}

TEST(SchedulerPropertyTest, DeterministicForASeed) {
  std::mt19937_64 a(5), b(5);
  for (int c = 0; c < 50; ++c) {
    const Layer x = RandomLayer(a, false);
    const Layer y = RandomLayer(b, false);
    Result<LayerSchedule> sx = ScheduleLayer(x.tasks, x.cost);
    Result<LayerSchedule> sy = ScheduleLayer(y.tasks, y.cost);
    ASSERT_TRUE(sx.ok()) << sx.status().ToString();
    ASSERT_TRUE(sy.ok()) << sy.status().ToString();
    EXPECT_EQ(sx->order.io_order, sy->order.io_order);
    EXPECT_EQ(sx->makespan_us, sy->makespan_us);
  }
}

}  // namespace
}  // namespace zipmoe::scheduler
