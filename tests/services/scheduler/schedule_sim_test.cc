#include "services/scheduler/schedule_sim.h"

#include <gtest/gtest.h>

namespace zipmoe::scheduler {
namespace {

using S = CompressionState;

ExpertTask Task(int32_t expert, ExpertProj proj, S state, double compute_us) {
  return {expert, proj, state, 1, compute_us};
}

CostModel Cost(double u, double e, double c, double recover, int32_t k, int32_t l) {
  CostModel cost;
  cost.sm_read_us = u;
  cost.e_read_us = e;
  cost.decompress_us = c;
  cost.recovery_us = recover;
  cost.n_shards = k;
  cost.n_workers = l;
  return cost;
}

IoOp E(int32_t task, int32_t shard) { return {task, ChunkKind::kE, shard}; }
IoOp Sm(int32_t task) { return {task, ChunkKind::kSm, -1}; }

TEST(ScheduleSimTest, SingleMissTask) {
  // E-chunk 0-3, SM-chunk 3-13; decode 3-8; recover at max(8, 13) = 13 until 15; compute 15-22.
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kMiss, 7)};
  ScheduleOrder order{{E(0, 0), Sm(0)}, {{0, 0}}};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(10, 3, 5, 2, 1, 1), order);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_DOUBLE_EQ(sim->makespan_us, 22.0);
  EXPECT_DOUBLE_EQ(sim->io_end_us, 13.0);
  EXPECT_DOUBLE_EQ(sim->decode_end_us, 8.0);
  EXPECT_DOUBLE_EQ(sim->decode_idle_us, 3.0);
  ASSERT_EQ(sim->io_timeline.size(), 2u);
  EXPECT_DOUBLE_EQ(sim->io_timeline[1].start_us, 3.0);
  EXPECT_DOUBLE_EQ(sim->io_timeline[1].end_us, 13.0);
  ASSERT_EQ(sim->recover_timeline.size(), 1u);
  EXPECT_DOUBLE_EQ(sim->recover_timeline[0].start_us, 13.0);
  EXPECT_DOUBLE_EQ(sim->tensor_ready_us[0], 15.0);
  ASSERT_EQ(sim->compute_timeline.size(), 1u);
  EXPECT_DOUBLE_EQ(sim->compute_timeline[0].start_us, 15.0);
}

TEST(ScheduleSimTest, DecodePriorityDecidesComputeOrder) {
  // One worker, two C experts (K = 2, c = 1). Expert 1 (p 10) first: ready at 2, computes 2-12;
  // expert 0 (p 1) ready at 4 runs 12-13. The reverse priority gives 2-3 then 4-14.
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kC, 1), Task(1, ExpertProj::kGate, S::kC, 10)};
  const CostModel cost = Cost(0, 0, 1, 0, 2, 1);
  Result<SimResult> heavy_first = SimulateSchedule(tasks, cost, {{}, {{1, 0}, {1, 1}, {0, 0}, {0, 1}}});
  ASSERT_TRUE(heavy_first.ok());
  EXPECT_DOUBLE_EQ(heavy_first->makespan_us, 13.0);
  Result<SimResult> light_first = SimulateSchedule(tasks, cost, {{}, {{0, 0}, {0, 1}, {1, 0}, {1, 1}}});
  ASSERT_TRUE(light_first.ok());
  EXPECT_DOUBLE_EQ(light_first->makespan_us, 14.0);
  ASSERT_EQ(light_first->compute_timeline.size(), 2u);
  EXPECT_EQ(light_first->compute_timeline[0].expert_id, 0);
  EXPECT_DOUBLE_EQ(light_first->compute_timeline[1].start_us, 4.0);
}

TEST(ScheduleSimTest, WorkersTakeHighestPriorityReadyOp) {
  // Task 0 (S, higher priority) has its E-chunk at 5; the idle worker takes task 1's cached op at 0
  // instead of waiting, then decodes task 0's at 5.
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kS, 0), Task(1, ExpertProj::kGate, S::kC, 0)};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(0, 5, 1, 0, 1, 1), {{E(0, 0)}, {{0, 0}, {1, 0}}});
  ASSERT_TRUE(sim.ok());
  ASSERT_EQ(sim->worker_timelines.size(), 1u);
  const std::vector<TimedOp>& w = sim->worker_timelines[0];
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].task, 1);
  EXPECT_DOUBLE_EQ(w[0].start_us, 0.0);
  EXPECT_EQ(w[1].task, 0);
  EXPECT_DOUBLE_EQ(w[1].start_us, 5.0);
  EXPECT_DOUBLE_EQ(sim->decode_idle_us, 4.0);  // the gap 1-5
  EXPECT_DOUBLE_EQ(sim->makespan_us, 6.0);
}

TEST(ScheduleSimTest, ParallelWorkersAndFreeWorkerOrder) {
  // K = 4 cached chunks, L = 3, c = 2: rounds at 0 (workers 0, 1, 2) and 2 (worker 0).
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kC, 1)};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(0, 0, 2, 0, 4, 3), {{}, {{0, 0}, {0, 1}, {0, 2}, {0, 3}}});
  ASSERT_TRUE(sim.ok());
  EXPECT_EQ(sim->worker_timelines[0].size(), 2u);
  EXPECT_EQ(sim->worker_timelines[1].size(), 1u);
  EXPECT_EQ(sim->worker_timelines[2].size(), 1u);
  EXPECT_DOUBLE_EQ(sim->worker_timelines[0][1].start_us, 2.0);
  EXPECT_DOUBLE_EQ(sim->makespan_us, 5.0);
}

TEST(ScheduleSimTest, RecoveryIsSerialAndComputeStartsWhileOthersInFlight) {
  // Two C experts decoded at 0-1 on two workers; recoveries 1-11 and 11-21 on one stream; expert 0
  // computes at 11-12 while expert 1 is still recovering.
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kC, 1), Task(1, ExpertProj::kGate, S::kC, 1)};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(0, 0, 1, 10, 1, 2), {{}, {{0, 0}, {1, 0}}});
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->tensor_ready_us[0], 11.0);
  EXPECT_DOUBLE_EQ(sim->tensor_ready_us[1], 21.0);
  ASSERT_EQ(sim->compute_timeline.size(), 2u);
  EXPECT_DOUBLE_EQ(sim->compute_timeline[0].start_us, 11.0);
  EXPECT_DOUBLE_EQ(sim->makespan_us, 22.0);
}

TEST(ScheduleSimTest, ExpertWaitsForAllItsTensors) {
  // Expert 0: gate is F (ready at 0), up is S (E-chunk 0-4, decode 4-5); compute 5-8.
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kF, 3), Task(0, ExpertProj::kUp, S::kS, 3)};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(0, 4, 1, 0, 1, 1), {{E(1, 0)}, {{1, 0}}});
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->tensor_ready_us[0], 0.0);
  EXPECT_DOUBLE_EQ(sim->makespan_us, 8.0);
}

TEST(ScheduleSimTest, AllResidentIsSumOfCompute) {
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kF, 3), Task(0, ExpertProj::kUp, S::kF, 3),
                                         Task(1, ExpertProj::kGate, S::kF, 4), Task(2, ExpertProj::kDown, S::kF, 5)};
  Result<SimResult> sim = SimulateSchedule(tasks, Cost(9, 9, 9, 9, 4, 2), {});
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->makespan_us, 12.0);
  EXPECT_DOUBLE_EQ(sim->io_end_us, 0.0);
  EXPECT_TRUE(sim->recover_timeline.empty());
}

TEST(ScheduleSimTest, EmptyLayer) {
  Result<SimResult> sim = SimulateSchedule({}, Cost(1, 1, 1, 0, 1, 1), {});
  ASSERT_TRUE(sim.ok());
  EXPECT_DOUBLE_EQ(sim->makespan_us, 0.0);
}

TEST(ScheduleSimTest, RejectsOrdersThatDoNotMatchTheDags) {
  const std::vector<ExpertTask> tasks = {Task(0, ExpertProj::kGate, S::kMiss, 1), Task(1, ExpertProj::kGate, S::kS, 1),
                                         Task(2, ExpertProj::kGate, S::kF, 1)};
  const CostModel cost = Cost(1, 1, 1, 0, 1, 1);
  const std::vector<DecodeOp> decodes = {{0, 0}, {1, 0}};
  struct Case {
    ScheduleOrder order;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{E(0, 0), E(1, 0)}, decodes}, "misses the SM-chunk of task 0"},
      {{{E(0, 0), Sm(0)}, decodes}, "misses E-chunk 0 of task 1"},
      {{{E(0, 0), Sm(0), E(1, 0), Sm(1)}, decodes}, "reads no SM-chunk"},
      {{{E(0, 0), E(0, 0), Sm(0), E(1, 0)}, decodes}, "listed twice"},
      {{{E(0, 1), Sm(0), E(1, 0)}, decodes}, "out of range"},
      {{{E(0, 0), Sm(0), E(1, 0)}, {{0, 0}}}, "decode_order misses decode 0 of task 1"},
      {{{E(0, 0), Sm(0), E(1, 0)}, {{0, 0}, {1, 0}, {2, 0}}}, "decodes nothing"},
      {{{E(0, 0), Sm(0), E(7, 0)}, decodes}, "task 7 out of range"},
  };
  for (const Case& c : cases) {
    Result<SimResult> sim = SimulateSchedule(tasks, cost, c.order);
    ASSERT_FALSE(sim.ok()) << c.message;
    EXPECT_EQ(sim.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(sim.status().message().find(c.message), std::string::npos) << sim.status().message();
  }
}

TEST(ScheduleSimTest, RejectsInvalidCost) {
  Result<SimResult> sim = SimulateSchedule({}, Cost(1, 1, 1, 0, 1, 0), {});
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("n_workers"), std::string::npos);
}

TEST(RunDecodeWorkersTest, WorkConservingListSchedule) {
  // Ops in priority order, ready at 3, 0, 0; two workers, c = 2.
  // t=0: op1 (w0), op2 (w1); t=2: op0 not ready until 3 -> w0 at 3.
  const DecodeRun run = RunDecodeWorkers({3.0, 0.0, 0.0}, 2.0, 2);
  EXPECT_EQ(run.worker, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_DOUBLE_EQ(run.start_us[0], 3.0);
  EXPECT_DOUBLE_EQ(run.end_us, 5.0);
  EXPECT_DOUBLE_EQ(run.idle_us, 1.0);
  EXPECT_EQ(run.worker_end_us, (std::vector<double>{5.0, 2.0}));
}

TEST(RunDecodeWorkersTest, StopsOnceIdleExceedsCap) {
  // One worker, ops ready at 2 and 10, c = 1: idle 2 before the first, 7 before the second.
  const DecodeRun full = RunDecodeWorkers({2.0, 10.0}, 1.0, 1);
  EXPECT_FALSE(full.stopped_early);
  EXPECT_DOUBLE_EQ(full.idle_us, 9.0);
  EXPECT_FALSE(RunDecodeWorkers({2.0, 10.0}, 1.0, 1, 9.0).stopped_early);
  const DecodeRun capped = RunDecodeWorkers({2.0, 10.0}, 1.0, 1, 8.5);
  EXPECT_TRUE(capped.stopped_early);
  EXPECT_EQ(capped.worker[1], -1);
}

}  // namespace
}  // namespace zipmoe::scheduler
