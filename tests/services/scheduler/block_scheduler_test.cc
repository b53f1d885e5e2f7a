#include "services/scheduler/block_scheduler.h"

#include <gtest/gtest.h>

namespace zipmoe::scheduler {
namespace {

using S = CompressionState;
using Tasks = std::vector<int32_t>;

ExpertTask Task(int32_t expert, S state, double compute_us, ExpertProj proj = ExpertProj::kGate) {
  return {expert, proj, state, 1, compute_us};
}

IoOp E(int32_t task, int32_t shard) { return {task, ChunkKind::kE, shard}; }
IoOp Sm(int32_t task) { return {task, ChunkKind::kSm, -1}; }

std::vector<DecodeOp> Decodes(const Tasks& tasks, int32_t k) {
  std::vector<DecodeOp> out;
  for (int32_t j : tasks) {
    for (int32_t s = 0; s < k; ++s) out.push_back({j, s});
  }
  return out;
}

// 2 Type-I + 3 Type-II tasks, one tensor per expert: A (M, p 50), B (E, p 30), X (C, p 40),
// Y (S, p 20), Z (C, p 10). σI = (A, B), σII = (X, Y, Z).
enum { kA = 0, kB = 1, kX = 2, kY = 3, kZ = 4 };
std::vector<ExpertTask> FiveTasks() {
  return {Task(10, S::kMiss, 50), Task(11, S::kE, 30), Task(12, S::kC, 40), Task(13, S::kS, 20), Task(14, S::kC, 10)};
}

// K = 4, L = 2, u = 8, ρ/K·u = 1, c = 4.
CostModel DecodeHeavyCost() { return CostModelFromRatio(8.0, 0.5, 4.0, 0.0, 4, 2); }

TEST(BlockSchedulerTest, HandWorkedBlocks) {
  // Block 1, base A: reads E 1..4, SM at 12; decodes end at 9 and 10: lags -3, -2 < 1, 2.
  //   X (C) at position 0 adds no idle (Δ 3 -> 0): decodes X 0-8, A 8-16; lag 16 - 12 = 4 >= 1·1:
  //   compute-dominant. Block 1 = (X, A).
  // Block 2, base B (E): SM read 0-8, decodes end at 8: lag 0 < 1, not dominant.
  //   Y (S) at position 0: Y's E-chunks at 1..4, SM(B) at 12; decodes B 0-4, Y 4-12, B 12-16 with no
  //   idle; lag 4: dominant. Block 2 = (Y, B).
  // Block 3: σI is empty; Z alone (no reads, decodes end at 8: dominant).
  const std::vector<ExpertTask> tasks = FiveTasks();
  const CostModel cost = DecodeHeavyCost();
  Result<LayerSchedule> s = ScheduleLayer(tasks, cost);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->blocks.size(), 3u);
  EXPECT_EQ(s->blocks[0].tasks, (Tasks{kX, kA}));
  EXPECT_EQ(s->blocks[1].tasks, (Tasks{kY, kB}));
  EXPECT_EQ(s->blocks[2].tasks, (Tasks{kZ}));
  for (const Block& b : s->blocks) EXPECT_TRUE(b.compute_dominant);
  EXPECT_DOUBLE_EQ(s->blocks[0].estimate.io_us, 12.0);
  EXPECT_EQ(s->blocks[0].estimate.worker_end_us, (std::vector<double>{16.0, 16.0}));
  EXPECT_DOUBLE_EQ(s->blocks[0].estimate.decode_idle_us, 0.0);

  EXPECT_EQ(s->task_order, (Tasks{kX, kA, kY, kB, kZ}));
  EXPECT_EQ(s->order.io_order,
            (std::vector<IoOp>{E(kA, 0), E(kA, 1), E(kA, 2), E(kA, 3), Sm(kA), E(kY, 0), E(kY, 1), E(kY, 2), E(kY, 3), Sm(kB)}));
  EXPECT_EQ(s->order.decode_order, Decodes({kX, kA, kY, kB, kZ}, 4));
  EXPECT_EQ(s->DecodeRank(kX, 0), 0);
  EXPECT_EQ(s->DecodeRank(kA, 3), 7);
  EXPECT_EQ(s->DecodeRank(kZ, 3), 19);

  // Simulated: decodes X 0-8, A 8-16, Y 16-24 (E-chunks at 13..16), B 24-32, Z 32-40; compute
  // X 8-48, A 48-98 (SM at 12), Y 98-118, B 118-148, Z 148-158.
  EXPECT_DOUBLE_EQ(s->makespan_us, 158.0);
  EXPECT_DOUBLE_EQ(s->bound.io_us, 24.0);
  EXPECT_DOUBLE_EQ(s->bound.decode_us, 40.0);
  EXPECT_DOUBLE_EQ(s->bound.compute_us, 150.0);
  EXPECT_DOUBLE_EQ(s->bound.bound_us, 150.0);
}

TEST(BlockSchedulerTest, HandWorkedBlocksWhenNeverComputeDominant) {
  // c = 2: base A (Δ 3); X at 0 (Δ 0); Y from position 1 (after X, p 40 >= 20) and Z from
  // position 2, Δ staying 0. Decodes end at 16 = F_IO: never dominant. σII is used up, so the block
  // closes (§3.3) and B forms the next block; reads: E(Y), E(A), SM(A), SM(B).
  const std::vector<ExpertTask> tasks = FiveTasks();
  const CostModel cost = CostModelFromRatio(8.0, 0.5, 2.0, 0.0, 4, 2);
  Result<LayerSchedule> s = ScheduleLayer(tasks, cost);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->blocks.size(), 2u);
  EXPECT_EQ(s->blocks[0].tasks, (Tasks{kX, kY, kZ, kA}));
  EXPECT_EQ(s->blocks[1].tasks, (Tasks{kB}));
  EXPECT_FALSE(s->blocks[0].compute_dominant);
  EXPECT_FALSE(s->blocks[1].compute_dominant);
  EXPECT_DOUBLE_EQ(s->blocks[0].estimate.io_us, 16.0);
  EXPECT_EQ(s->blocks[0].estimate.worker_end_us, (std::vector<double>{16.0, 16.0}));
  const std::vector<IoOp> io = {E(kY, 0), E(kY, 1), E(kY, 2), E(kY, 3), E(kA, 0), E(kA, 1),
                                E(kA, 2), E(kA, 3), Sm(kA), Sm(kB)};
  EXPECT_EQ(s->order.io_order, io);

  // Alg. 1's U = (σII, σI) goes on with B (after A: Type-I, p 50 >= 30); decodes end at 20 < 24.
  SchedulerOptions literal;
  literal.fill = BlockFill::kTypeIIThenTypeI;
  Result<LayerSchedule> one = ScheduleLayer(tasks, cost, literal);
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->blocks.size(), 1u);
  EXPECT_EQ(one->blocks[0].tasks, (Tasks{kX, kY, kZ, kA, kB}));
  EXPECT_FALSE(one->blocks[0].compute_dominant);
  EXPECT_DOUBLE_EQ(one->blocks[0].estimate.io_us, 24.0);
  EXPECT_EQ(one->blocks[0].estimate.worker_end_us, (std::vector<double>{20.0, 20.0}));
  EXPECT_EQ(one->order.io_order, io);
}

TEST(BlockSchedulerTest, LiteralEarliestPositionScansFromBlockHead) {
  // As printed (U = (σII, σI), earliest position), each unit goes to position 0 here.
  SchedulerOptions options;
  options.fill = BlockFill::kTypeIIThenTypeI;
  options.insertion_start = InsertionStart::kBlockHead;
  Result<LayerSchedule> s = ScheduleLayer(FiveTasks(), CostModelFromRatio(8.0, 0.5, 2.0, 0.0, 4, 2), options);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->blocks.size(), 1u);
  EXPECT_EQ(s->blocks[0].tasks, (Tasks{kB, kZ, kY, kX, kA}));
}

TEST(BlockSchedulerTest, FallbackPlacesAfterHeavierTasks) {
  // K = 1, L = 1, ρ/K·u = 10, u = 1, c = 1. Any placement of an S task next to the M base adds idle
  // (Δ 10 -> 19), so the fallback applies: after the Type-I tasks with larger pₙ ...
  const CostModel cost = CostModelFromRatio(1.0, 10.0, 1.0, 0.0, 1, 1);
  Result<LayerSchedule> light = ScheduleLayer({Task(0, S::kMiss, 5), Task(1, S::kS, 3)}, cost);
  ASSERT_TRUE(light.ok());
  ASSERT_EQ(light->blocks.size(), 1u);
  EXPECT_EQ(light->blocks[0].tasks, (Tasks{0, 1}));
  // ... before them if the Type-II task is heavier ...
  Result<LayerSchedule> heavy = ScheduleLayer({Task(0, S::kMiss, 5), Task(1, S::kS, 8)}, cost);
  ASSERT_TRUE(heavy.ok());
  EXPECT_EQ(heavy->blocks[0].tasks, (Tasks{1, 0}));
  // ... and after the heavier Type-II tasks once the block holds one: (Y 8, Y2 2, A 5).
  Result<LayerSchedule> two = ScheduleLayer({Task(0, S::kMiss, 5), Task(1, S::kS, 8), Task(2, S::kS, 2)}, cost);
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->blocks.size(), 1u);
  EXPECT_EQ(two->blocks[0].tasks, (Tasks{1, 2, 0}));
  EXPECT_FALSE(two->blocks[0].compute_dominant);
}

TEST(BlockSchedulerTest, SortsByExpertComputeAndGroupsExperts) {
  const std::vector<ExpertTask> tasks = {Task(5, S::kMiss, 10, ExpertProj::kUp), Task(2, S::kMiss, 30),
                                         Task(5, S::kMiss, 10, ExpertProj::kGate), Task(3, S::kMiss, 10),
                                         Task(2, S::kMiss, 30, ExpertProj::kDown)};
  EXPECT_EQ(SortByExpertCompute(tasks, {0, 1, 2, 3, 4}), (Tasks{1, 4, 3, 2, 0}));
}

TEST(BlockSchedulerTest, ExpertWithAnySmReadIsTypeI) {
  // Expert 7 has an E tensor (Type-I) and a C tensor: both go with the expert into σI, so the
  // expert's tensors share a block and sit together.
  const CostModel cost = CostModelFromRatio(8.0, 0.5, 4.0, 0.0, 4, 2);
  const std::vector<ExpertTask> tasks = {Task(7, S::kE, 9, ExpertProj::kGate), Task(7, S::kC, 9, ExpertProj::kUp),
                                         Task(8, S::kC, 1)};
  Result<LayerSchedule> s = ScheduleLayer(tasks, cost);
  ASSERT_TRUE(s.ok());
  ASSERT_FALSE(s->blocks.empty());
  const Tasks& first = s->blocks[0].tasks;
  EXPECT_NE(std::find(first.begin(), first.end(), 0), first.end());
  EXPECT_NE(std::find(first.begin(), first.end(), 1), first.end());
}

TEST(BlockSchedulerTest, ComputeDominanceTest) {
  const CostModel cost = CostModelFromRatio(8.0, 0.5, 4.0, 0.0, 4, 2);  // ρ/K·u = 1, levels l = 1, 2
  BlockEstimate e;
  e.io_us = 10.0;
  e.worker_end_us = {11.0, 14.0};  // lags 1 >= 1 and 4 >= 2
  EXPECT_TRUE(IsComputeDominant(e, cost, DominanceRule::kAnyLevel));
  EXPECT_TRUE(IsComputeDominant(e, cost, DominanceRule::kAllLevels));
  e.worker_end_us = {10.5, 14.0};  // only l = 2 holds
  EXPECT_TRUE(IsComputeDominant(e, cost, DominanceRule::kAnyLevel));
  EXPECT_FALSE(IsComputeDominant(e, cost, DominanceRule::kAllLevels));
  e.worker_end_us = {10.5, 11.0};  // 0.5 < 1 and 1 < 2
  EXPECT_FALSE(IsComputeDominant(e, cost, DominanceRule::kAnyLevel));
  // L = 3 > K = 2: only the two earliest workers count; the third's lag does not help.
  const CostModel wide = CostModelFromRatio(8.0, 0.25, 4.0, 0.0, 2, 3);
  e.worker_end_us = {0.0, 10.5, 40.0};
  EXPECT_FALSE(IsComputeDominant(e, wide, DominanceRule::kAnyLevel));
}

TEST(BlockSchedulerTest, EstimateBlockReadsEChunksFirst) {
  // (A: M, Y: S) with K = 1, ρ/K·u = 1, u = 8, c = 1, L = 1: E(A) 0-1, E(Y) 1-2, SM(A) 2-10.
  const CostModel cost = CostModelFromRatio(8.0, 0.125, 1.0, 0.0, 1, 1);
  const BlockEstimate e = EstimateBlock({Task(0, S::kMiss, 1), Task(1, S::kS, 1)}, cost, {0, 1});
  EXPECT_DOUBLE_EQ(e.io_us, 10.0);
  EXPECT_EQ(e.worker_end_us, (std::vector<double>{3.0}));  // decodes 1-2, 2-3
  EXPECT_DOUBLE_EQ(e.decode_idle_us, 1.0);
}

TEST(BlockSchedulerTest, BaselineIsFifoByExpertWithInterleavedChunks) {
  const std::vector<ExpertTask> tasks = {Task(4, S::kMiss, 1), Task(1, S::kS, 1, ExpertProj::kUp),
                                         Task(1, S::kE, 1, ExpertProj::kGate), Task(2, S::kF, 1)};
  const CostModel cost = CostModelFromRatio(8.0, 0.5, 1.0, 0.0, 2, 2);
  Result<LayerSchedule> s = ScheduleLayerBaseline(tasks, cost);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->blocks.empty());
  EXPECT_EQ(s->task_order, (Tasks{2, 1, 0}));
  EXPECT_EQ(s->resident_tasks, (Tasks{3}));
  EXPECT_EQ(s->order.io_order, (std::vector<IoOp>{Sm(2), E(1, 0), E(1, 1), E(0, 0), E(0, 1), Sm(0)}));
  EXPECT_EQ(s->order.decode_order, Decodes({2, 1, 0}, 2));
  EXPECT_EQ(s->DecodeRank(3, 0), -1);
  EXPECT_GE(s->makespan_us, s->bound.bound_us);
}

TEST(BlockSchedulerTest, ResidentTasksAreInNoBlock) {
  const std::vector<ExpertTask> tasks = {Task(0, S::kF, 3), Task(1, S::kF, 4, ExpertProj::kUp), Task(1, S::kF, 4)};
  Result<LayerSchedule> s = ScheduleLayer(tasks, CostModelFromRatio(8.0, 0.5, 1.0, 0.0, 4, 2));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->blocks.empty());
  EXPECT_TRUE(s->order.io_order.empty());
  EXPECT_EQ(s->resident_tasks, (Tasks{0, 1, 2}));
  EXPECT_DOUBLE_EQ(s->makespan_us, 7.0);
  EXPECT_DOUBLE_EQ(s->bound.bound_us, 7.0);
}

TEST(BlockSchedulerTest, EmptyLayer) {
  Result<LayerSchedule> s = ScheduleLayer({}, CostModelFromRatio(8.0, 0.5, 1.0, 0.0, 4, 2));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->blocks.empty());
  EXPECT_DOUBLE_EQ(s->makespan_us, 0.0);
}

TEST(BlockSchedulerTest, InvalidInputsNameTheField) {
  const std::vector<ExpertTask> tasks = FiveTasks();
  CostModel cost = DecodeHeavyCost();
  cost.n_workers = 0;
  Result<LayerSchedule> s = ScheduleLayer(tasks, cost);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("n_workers"), std::string::npos);

  cost = DecodeHeavyCost();
  cost.n_shards = 0;
  s = ScheduleLayerBaseline(tasks, cost);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("n_shards"), std::string::npos);

  cost = DecodeHeavyCost();
  cost.decompress_us = -1.0;
  s = ScheduleLayer(tasks, cost);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("decompress_us"), std::string::npos);

  std::vector<ExpertTask> bad = tasks;
  bad[2].expert_compute_us = -5.0;
  s = ScheduleLayer(bad, DecodeHeavyCost());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("expert_compute_us"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::scheduler
