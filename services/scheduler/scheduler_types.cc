#include "services/scheduler/scheduler_types.h"

#include <cmath>
#include <map>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::scheduler {
namespace {

Status CheckCost(const char* field, double value) {
  if (!std::isfinite(value) || value < 0.0) {
    return Status::InvalidArgument(
        fmt::format("CostModel.{} must be finite and >= 0, got {}", field, value));
  }
  return Status::Ok();
}

}  // namespace

const char* TaskTypeName(TaskType type) {
  return type == TaskType::kTypeI ? "Type-I" : "Type-II";
}

CostModel CostModelFromRatio(double sm_read_us, double compress_ratio, double decompress_us,
                             double recovery_us, int32_t n_shards, int32_t n_workers) {
  CostModel cost;
  cost.sm_read_us = sm_read_us;
  cost.e_read_us = n_shards > 0 ? compress_ratio * sm_read_us / n_shards : 0.0;
  cost.decompress_us = decompress_us;
  cost.recovery_us = recovery_us;
  cost.n_shards = n_shards;
  cost.n_workers = n_workers;
  return cost;
}

Status ValidateCostModel(const CostModel& cost) {
  if (cost.n_shards < 1 || cost.n_shards > kMaxShards) {
    return Status::InvalidArgument(fmt::format("CostModel.n_shards (K) must be in [1, {}], got {}",
                                               kMaxShards, cost.n_shards));
  }
  if (cost.n_workers < 1 || cost.n_workers > kMaxWorkers) {
    return Status::InvalidArgument(fmt::format("CostModel.n_workers (L) must be in [1, {}], got {}",
                                               kMaxWorkers, cost.n_workers));
  }
  ZM_RETURN_IF_ERROR(CheckCost("sm_read_us (u)", cost.sm_read_us));
  ZM_RETURN_IF_ERROR(CheckCost("e_read_us (rho/K*u)", cost.e_read_us));
  ZM_RETURN_IF_ERROR(CheckCost("decompress_us (c)", cost.decompress_us));
  ZM_RETURN_IF_ERROR(CheckCost("recovery_us", cost.recovery_us));
  return Status::Ok();
}

Status ValidateTasks(const std::vector<ExpertTask>& tasks) {
  std::map<std::pair<int32_t, int>, size_t> seen;  // (expert, proj) -> task index
  std::map<int32_t, size_t> first_of_expert;       // expert -> first task index
  for (size_t i = 0; i < tasks.size(); ++i) {
    const ExpertTask& t = tasks[i];
    if (t.expert_id < 0) {
      return Status::InvalidArgument(fmt::format("task {}: expert_id must be >= 0, got {}", i, t.expert_id));
    }
    if (static_cast<int>(t.proj) > static_cast<int>(ExpertProj::kDown)) {
      return Status::InvalidArgument(fmt::format("task {} (expert {}): invalid proj {}", i, t.expert_id,
                                                 static_cast<int>(t.proj)));
    }
    if (static_cast<int>(t.state) > static_cast<int>(CompressionState::kF)) {
      return Status::InvalidArgument(fmt::format("task {} (expert {}): invalid state {}", i, t.expert_id,
                                                 static_cast<int>(t.state)));
    }
    if (t.n_tokens < 0) {
      return Status::InvalidArgument(
          fmt::format("task {} (expert {}): n_tokens must be >= 0, got {}", i, t.expert_id, t.n_tokens));
    }
    if (!std::isfinite(t.expert_compute_us) || t.expert_compute_us < 0.0) {
      return Status::InvalidArgument(fmt::format(
          "task {} (expert {}): expert_compute_us (p_n) must be finite and >= 0, got {}", i, t.expert_id,
          t.expert_compute_us));
    }
    auto [it, inserted] = seen.emplace(std::make_pair(t.expert_id, static_cast<int>(t.proj)), i);
    if (!inserted) {
      return Status::InvalidArgument(fmt::format("task {}: duplicate of task {} (expert {}, {})", i,
                                                 it->second, t.expert_id, ExpertProjName(t.proj)));
    }
    auto [first, is_first] = first_of_expert.emplace(t.expert_id, i);
    if (!is_first) {
      const ExpertTask& f = tasks[first->second];
      if (f.n_tokens != t.n_tokens || f.expert_compute_us != t.expert_compute_us) {
        return Status::InvalidArgument(fmt::format(
            "task {} (expert {}, {}): n_tokens {} / expert_compute_us {} differ from task {} ({}): {} / {}",
            i, t.expert_id, ExpertProjName(t.proj), t.n_tokens, t.expert_compute_us, first->second,
            ExpertProjName(f.proj), f.n_tokens, f.expert_compute_us));
      }
    }
  }
  return Status::Ok();
}

}  // namespace zipmoe::scheduler
