// Inputs of the cache-affinity scheduler (ZipMoE §3.3): the reconstruction tasks of one MoE layer
// and the offline-profiled cost model they are scheduled under.
//
// One task is one tensor (gate/up/down) of one routed expert; its compression state (§3.2) decides
// which operations it needs (services/scheduler/task_dag.h). Times are microseconds, doubles.
// Plain value types; the functions here are pure and callable from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/compression_state.h"
#include "common/cost_model.h"
#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe::scheduler {

// Reconstruction task of one expert tensor in one MoE layer (ZipMoE §3.2 "task granularity is
// defined at the tensor level"). The tasks of one expert share n_tokens and expert_compute_us.
struct ExpertTask {
  int32_t expert_id = 0;
  ExpertProj proj = ExpertProj::kGate;               // which of the expert's tensors
  CompressionState state = CompressionState::kMiss;  // what the cache holds for this tensor
  int32_t n_tokens = 0;                              // tokens routed to the expert
  double expert_compute_us = 0.0;                    // pₙ: GPU time of the expert over its tokens
};

// Task partition of §3.3: Type-I tasks read their SM-chunk (states M, E) and so block the I/O thread;
// Type-II tasks have their SM-chunk in memory (states S, C; F has no operations at all).
enum class TaskType : uint8_t { kTypeI = 0, kTypeII = 1 };

inline TaskType TaskTypeOf(CompressionState state) {
  return NeedsSmRead(state) ? TaskType::kTypeI : TaskType::kTypeII;
}
const char* TaskTypeName(TaskType type);  // "Type-I" / "Type-II"

// Offline-profiled costs (ZipMoE §3.3, Appendix A): the one cost model of common/cost_model.h. The
// scheduler reads u, ρ/K·u, c, the recovery time, K and L (expert compute times come per task).
using zipmoe::CostModel;

// Upper limits on K and L, far above real deployments, so a corrupt config cannot size huge tables.
inline constexpr int32_t kMaxShards = 4096;
inline constexpr int32_t kMaxWorkers = 4096;

// A CostModel from the paper's symbols: e_read_us = compress_ratio · sm_read_us / n_shards.
CostModel CostModelFromRatio(double sm_read_us, double compress_ratio, double decompress_us,
                             double recovery_us, int32_t n_shards, int32_t n_workers);

// Errors: kInvalidArgument naming the field (e.g. "CostModel.n_workers (L) must be in [1, 4096], got
// 0") for K or L out of range, or a negative / non-finite cost.
Status ValidateCostModel(const CostModel& cost);

// Errors: kInvalidArgument naming the task index and field for a negative expert_id or n_tokens, a
// negative / non-finite expert_compute_us, an invalid state or proj, two tasks for the same
// (expert, proj), or tasks of one expert that disagree on n_tokens or expert_compute_us.
Status ValidateTasks(const std::vector<ExpertTask>& tasks);

}  // namespace zipmoe::scheduler
