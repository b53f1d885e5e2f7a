#include "services/scheduler/lower_bound.h"

#include <gtest/gtest.h>

#include "services/scheduler/block_scheduler.h"
#include "services/scheduler/schedule_sim.h"

namespace zipmoe::scheduler {
namespace {

using S = CompressionState;

ExpertTask Task(int32_t expert, ExpertProj proj, S state, double compute_us) {
  return {expert, proj, state, 1, compute_us};
}

// u = 8, ρ = 0.5, K = 4 (ρ/K·u = 1), c = 2, L = 2.
CostModel SmallCost() { return CostModelFromRatio(8.0, 0.5, 2.0, 0.0, 4, 2); }

TEST(LowerBoundTest, TaskIoPerState) {
  const CostModel cost = SmallCost();
  EXPECT_DOUBLE_EQ(TaskIoUs(S::kMiss, cost), 12.0);  // (1+ρ)u
  EXPECT_DOUBLE_EQ(TaskIoUs(S::kE, cost), 8.0);      // u
  EXPECT_DOUBLE_EQ(TaskIoUs(S::kS, cost), 4.0);      // ρu
  EXPECT_DOUBLE_EQ(TaskIoUs(S::kC, cost), 0.0);
  EXPECT_DOUBLE_EQ(TaskIoUs(S::kF, cost), 0.0);
}

TEST(LowerBoundTest, KnownAnswer) {
  // Expert 0: gate M, up S (p 10); expert 1: E (p 5); expert 2: C (p 7); expert 3: F (p 3).
  const std::vector<ExpertTask> tasks = {
      Task(0, ExpertProj::kGate, S::kMiss, 10), Task(0, ExpertProj::kUp, S::kS, 10),
      Task(1, ExpertProj::kGate, S::kE, 5), Task(2, ExpertProj::kGate, S::kC, 7), Task(3, ExpertProj::kGate, S::kF, 3)};
  Result<LowerBound> lb = ComputeLowerBound(tasks, SmallCost());
  ASSERT_TRUE(lb.ok()) << lb.status().ToString();
  EXPECT_DOUBLE_EQ(lb->io_us, 12 + 4 + 8);           // I
  EXPECT_DOUBLE_EQ(lb->decode_us, 4 * 4 * 2.0 / 2);  // C/L: 4 decoded tasks x K x c / L
  EXPECT_DOUBLE_EQ(lb->compute_us, 10 + 5 + 7 + 3);  // P: each expert once
  // z(M) = max{D = max_i(i + ceil((5-i)/2)*2) = 6, v = 12} + 10 = 22.
  EXPECT_DOUBLE_EQ(lb->critical_path_us, 22.0);
  EXPECT_DOUBLE_EQ(lb->recover_us, 0.0);
  EXPECT_DOUBLE_EQ(lb->bound_us, 25.0);
}

TEST(LowerBoundTest, CriticalPathPerState) {
  const CostModel cost = SmallCost();
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kS, 10, cost), 16.0);  // D = 6
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kE, 5, cost), 13.0);   // max{ceil(4/2)*2, u} + p
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kC, 7, cost), 11.0);   // ceil(4/2)*2 + p
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kF, 3, cost), 3.0);
  CostModel with_recovery = cost;
  with_recovery.recovery_us = 1.5;
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kC, 7, with_recovery), 12.5);
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kF, 3, with_recovery), 3.0);
}

TEST(LowerBoundTest, PaperCriticalPathOverestimatesPipelinedDecode) {
  // A lone S task: E-chunks arrive at 1, 2, 3, 4 and decode (c = 2, L = 2) at 1-3, 2-4, 3-5, 4-6,
  // so it is ready at 6 and done at 16. Definition B.2 as printed gives ρu + Kc/min(K,L) + p = 18.
  const CostModel cost = SmallCost();
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kS, 10)};
  Result<LayerSchedule> schedule = ScheduleLayer(tasks, cost);
  ASSERT_TRUE(schedule.ok());
  EXPECT_DOUBLE_EQ(schedule->makespan_us, 16.0);
  EXPECT_DOUBLE_EQ(TaskCriticalPathUs(S::kS, 10, cost), 16.0);
  EXPECT_DOUBLE_EQ(PaperCriticalPathUs(S::kS, 10, cost), 18.0);
  // Where decode does not pipeline past the SM read, both agree: M gives ρu + u + p.
  EXPECT_DOUBLE_EQ(PaperCriticalPathUs(S::kMiss, 10, cost), TaskCriticalPathUs(S::kMiss, 10, cost));
}

TEST(LowerBoundTest, RecoveryStreamTerm) {
  CostModel cost = SmallCost();
  cost.recovery_us = 100;
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kC, 1), Task(0, ExpertProj::kUp, S::kC, 1),
                                         Task(1, ExpertProj::kGate, S::kF, 1)};
  Result<LowerBound> lb = ComputeLowerBound(tasks, cost);
  ASSERT_TRUE(lb.ok());
  EXPECT_DOUBLE_EQ(lb->recover_us, 200.0);  // two recoveries on one stream; F needs none
  EXPECT_DOUBLE_EQ(lb->bound_us, 200.0);
}

TEST(LowerBoundTest, EmptyAndAllResident) {
  Result<LowerBound> empty = ComputeLowerBound({}, SmallCost());
  ASSERT_TRUE(empty.ok());
  EXPECT_DOUBLE_EQ(empty->bound_us, 0.0);
  Result<LowerBound> resident =
      ComputeLowerBound({Task(0, ExpertProj::kGate, S::kF, 4), Task(1, ExpertProj::kGate, S::kF, 5)}, SmallCost());
  ASSERT_TRUE(resident.ok());
  EXPECT_DOUBLE_EQ(resident->compute_us, 9.0);
  EXPECT_DOUBLE_EQ(resident->bound_us, 9.0);
}

TEST(LowerBoundTest, ApproximationFactor) {
  EXPECT_DOUBLE_EQ(ApproximationFactor(1), 2.0);
  EXPECT_DOUBLE_EQ(ApproximationFactor(4), 2.75);
}

TEST(LowerBoundTest, RejectsInvalidCost) {
  CostModel cost = SmallCost();
  cost.sm_read_us = -1;
  Result<LowerBound> lb = ComputeLowerBound({}, cost);
  ASSERT_FALSE(lb.ok());
  EXPECT_EQ(lb.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lb.status().message().find("sm_read_us"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::scheduler
