#include "services/scheduler/block_scheduler.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

namespace zipmoe::scheduler {
namespace {

// Absolute slack when comparing estimated times, so summation order cannot flip a decision.
double Slack(double scale_us) { return 1e-9 * (1.0 + scale_us); }

// Consecutive tasks of one expert in σI or σII: the unit Algorithm 1 moves (header, step 2).
struct Unit {
  std::vector<int32_t> tasks;
  TaskType type = TaskType::kTypeI;
  double compute_us = 0.0;  // pₙ
};

std::vector<Unit> GroupByExpert(const std::vector<ExpertTask>& tasks, const std::vector<int32_t>& sigma,
                                TaskType type) {
  std::vector<Unit> units;
  for (int32_t j : sigma) {
    if (units.empty() || tasks[units.back().tasks.front()].expert_id != tasks[j].expert_id) {
      units.push_back({{}, type, tasks[j].expert_compute_us});
    }
    units.back().tasks.push_back(j);
  }
  return units;
}

std::vector<int32_t> Flatten(const std::vector<Unit>& units) {
  std::vector<int32_t> out;
  for (const Unit& u : units) out.insert(out.end(), u.tasks.begin(), u.tasks.end());
  return out;
}

// 1 + index of the last unit of `type` with pₙ >= compute_us, or 0.
size_t AfterLastHeavier(const std::vector<Unit>& block, TaskType type, double compute_us) {
  for (size_t q = block.size(); q > 0; --q) {
    if (block[q - 1].type == type && block[q - 1].compute_us >= compute_us) return q;
  }
  return 0;
}

bool HasType(const std::vector<Unit>& block, TaskType type) {
  return std::any_of(block.begin(), block.end(), [&](const Unit& u) { return u.type == type; });
}

// Step 4 estimate; nullopt as soon as Δ exceeds max_idle_us.
std::optional<BlockEstimate> EstimateBlockWithin(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                                                 const std::vector<int32_t>& block_tasks, double max_idle_us) {
  const int32_t k = cost.n_shards;
  std::vector<double> ready;  // decode ops in priority order
  double t_io = 0.0;
  for (int32_t j : block_tasks) {
    const CompressionState state = tasks[j].state;
    if (!NeedsDecode(state)) continue;
    for (int32_t s = 0; s < k; ++s) {
      if (NeedsERead(state)) t_io += cost.e_read_us;  // E-chunks first, in block order
      ready.push_back(NeedsERead(state) ? t_io : 0.0);
    }
  }
  for (int32_t j : block_tasks) {
    if (NeedsSmRead(tasks[j].state)) t_io += cost.sm_read_us;  // then SM-chunks
  }
  const DecodeRun run = RunDecodeWorkers(ready, cost.decompress_us, cost.n_workers, max_idle_us);
  if (run.stopped_early) return std::nullopt;
  BlockEstimate estimate;
  estimate.io_us = t_io;
  estimate.worker_end_us = run.worker_end_us;
  std::sort(estimate.worker_end_us.begin(), estimate.worker_end_us.end());
  estimate.decode_idle_us = run.idle_us;
  return estimate;
}

// Fills decode_rank, runs the simulation and the bound.
Result<LayerSchedule> Finish(const std::vector<ExpertTask>& tasks, const CostModel& cost, LayerSchedule schedule) {
  schedule.n_shards = cost.n_shards;
  schedule.decode_rank.assign(tasks.size() * cost.n_shards, -1);
  for (size_t i = 0; i < schedule.order.decode_order.size(); ++i) {
    const DecodeOp& op = schedule.order.decode_order[i];
    schedule.decode_rank[static_cast<size_t>(op.task) * cost.n_shards + op.shard] = static_cast<int32_t>(i);
  }
  for (size_t j = 0; j < tasks.size(); ++j) {
    if (!NeedsDecode(tasks[j].state)) schedule.resident_tasks.push_back(static_cast<int32_t>(j));
  }
  ZM_ASSIGN_OR_RETURN(SimResult sim, SimulateSchedule(tasks, cost, schedule.order));
  schedule.makespan_us = sim.makespan_us;
  ZM_ASSIGN_OR_RETURN(schedule.bound, ComputeLowerBound(tasks, cost));
  return schedule;
}

}  // namespace

std::vector<int32_t> SortByExpertCompute(const std::vector<ExpertTask>& tasks, std::vector<int32_t> indices) {
  std::stable_sort(indices.begin(), indices.end(), [&](int32_t a, int32_t b) {
    const ExpertTask& x = tasks[a];
    const ExpertTask& y = tasks[b];
    if (x.expert_compute_us != y.expert_compute_us) return x.expert_compute_us > y.expert_compute_us;
    if (x.expert_id != y.expert_id) return x.expert_id < y.expert_id;
    return x.proj < y.proj;
  });
  return indices;
}

BlockEstimate EstimateBlock(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                            const std::vector<int32_t>& block_tasks) {
  return *EstimateBlockWithin(tasks, cost, block_tasks, std::numeric_limits<double>::infinity());
}

bool IsComputeDominant(const BlockEstimate& estimate, const CostModel& cost, DominanceRule rule) {
  const int32_t levels = std::min(cost.n_workers, cost.n_shards);
  const double slack = Slack(estimate.io_us);
  for (int32_t l = 1; l <= levels; ++l) {
    const double lag_us = estimate.worker_end_us[l - 1] - estimate.io_us;
    const bool holds = lag_us >= l * cost.e_read_us - slack;
    if (rule == DominanceRule::kAnyLevel && holds) return true;
    if (rule == DominanceRule::kAllLevels && !holds) return false;
  }
  return rule == DominanceRule::kAllLevels;
}

std::vector<Block> BuildBlocks(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                               const SchedulerOptions& options) {
  // Partition per expert: Type-I if any of the expert's tensors reads its SM-chunk.
  std::map<int32_t, TaskType> expert_type;
  for (const ExpertTask& t : tasks) {
    if (!NeedsDecode(t.state)) continue;
    auto [it, inserted] = expert_type.try_emplace(t.expert_id, TaskType::kTypeII);
    if (TaskTypeOf(t.state) == TaskType::kTypeI) it->second = TaskType::kTypeI;
  }
  std::vector<int32_t> type1, type2;
  for (int32_t j = 0; j < static_cast<int32_t>(tasks.size()); ++j) {
    if (!NeedsDecode(tasks[j].state)) continue;  // F: nothing to schedule
    (expert_type[tasks[j].expert_id] == TaskType::kTypeI ? type1 : type2).push_back(j);
  }
  const std::vector<Unit> sigma1 = GroupByExpert(tasks, SortByExpertCompute(tasks, type1), TaskType::kTypeI);
  const std::vector<Unit> sigma2 = GroupByExpert(tasks, SortByExpertCompute(tasks, type2), TaskType::kTypeII);
  size_t next1 = 0, next2 = 0;

  std::vector<Block> blocks;
  while (next1 < sigma1.size() || next2 < sigma2.size()) {
    std::vector<Unit> units;
    units.push_back(next1 < sigma1.size() ? sigma1[next1++] : sigma2[next2++]);  // the block's base
    BlockEstimate estimate = EstimateBlock(tasks, cost, Flatten(units));
    bool dominant = IsComputeDominant(estimate, cost, options.dominance);
    auto more_to_insert = [&] {
      return next2 < sigma2.size() || (options.fill == BlockFill::kTypeIIThenTypeI && next1 < sigma1.size());
    };
    while (!dominant && more_to_insert()) {
      const Unit unit = next2 < sigma2.size() ? sigma2[next2++] : sigma1[next1++];  // head of U = (σII, σI)
      const size_t first = options.insertion_start == InsertionStart::kBlockHead
                               ? 0
                               : AfterLastHeavier(units, unit.type, unit.compute_us);
      bool placed = false;
      for (size_t q = first; q <= units.size() && !placed; ++q) {
        std::vector<Unit> candidate = units;
        candidate.insert(candidate.begin() + q, unit);
        const double max_idle_us = estimate.decode_idle_us + Slack(estimate.decode_idle_us + estimate.io_us);
        std::optional<BlockEstimate> e = EstimateBlockWithin(tasks, cost, Flatten(candidate), max_idle_us);
        if (e) {  // no idle time added
          units = std::move(candidate);
          estimate = std::move(*e);
          placed = true;
        }
      }
      if (!placed) {  // after the heavier Type-II units (Type-I if the block has no Type-II unit)
        const TaskType ref = HasType(units, TaskType::kTypeII) ? TaskType::kTypeII : TaskType::kTypeI;
        units.insert(units.begin() + AfterLastHeavier(units, ref, unit.compute_us), unit);
        estimate = EstimateBlock(tasks, cost, Flatten(units));
      }
      dominant = IsComputeDominant(estimate, cost, options.dominance);
    }
    blocks.push_back({Flatten(units), std::move(estimate), dominant});
  }
  return blocks;
}

ScheduleOrder OrderFromBlocks(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                              const std::vector<Block>& blocks) {
  ScheduleOrder order;
  for (const Block& block : blocks) {
    for (int32_t j : block.tasks) {
      const CompressionState state = tasks[j].state;
      for (int32_t s = 0; s < cost.n_shards && NeedsDecode(state); ++s) {
        if (NeedsERead(state)) order.io_order.push_back({j, ChunkKind::kE, s});
        order.decode_order.push_back({j, s});
      }
    }
    for (int32_t j : block.tasks) {
      if (NeedsSmRead(tasks[j].state)) order.io_order.push_back({j, ChunkKind::kSm, -1});
    }
  }
  return order;
}

Result<LayerSchedule> ScheduleLayer(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                                    const SchedulerOptions& options) {
  ZM_RETURN_IF_ERROR(ValidateCostModel(cost));
  ZM_RETURN_IF_ERROR(ValidateTasks(tasks));
  LayerSchedule schedule;
  schedule.blocks = BuildBlocks(tasks, cost, options);
  for (const Block& b : schedule.blocks) {
    schedule.task_order.insert(schedule.task_order.end(), b.tasks.begin(), b.tasks.end());
  }
  schedule.order = OrderFromBlocks(tasks, cost, schedule.blocks);
  return Finish(tasks, cost, std::move(schedule));
}

Result<LayerSchedule> ScheduleLayerBaseline(const std::vector<ExpertTask>& tasks, const CostModel& cost) {
  ZM_RETURN_IF_ERROR(ValidateCostModel(cost));
  ZM_RETURN_IF_ERROR(ValidateTasks(tasks));
  LayerSchedule schedule;
  for (int32_t j = 0; j < static_cast<int32_t>(tasks.size()); ++j) {
    if (NeedsDecode(tasks[j].state)) schedule.task_order.push_back(j);
  }
  std::stable_sort(schedule.task_order.begin(), schedule.task_order.end(), [&](int32_t a, int32_t b) {
    if (tasks[a].expert_id != tasks[b].expert_id) return tasks[a].expert_id < tasks[b].expert_id;
    return tasks[a].proj < tasks[b].proj;
  });
  for (int32_t j : schedule.task_order) {  // per task: its E-chunks, then its SM-chunk
    const CompressionState state = tasks[j].state;
    for (int32_t s = 0; s < cost.n_shards; ++s) {
      if (NeedsERead(state)) schedule.order.io_order.push_back({j, ChunkKind::kE, s});
      schedule.order.decode_order.push_back({j, s});
    }
    if (NeedsSmRead(state)) schedule.order.io_order.push_back({j, ChunkKind::kSm, -1});
  }
  return Finish(tasks, cost, std::move(schedule));
}

}  // namespace zipmoe::scheduler
