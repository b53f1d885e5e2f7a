#include "services/scheduler/lower_bound.h"

#include <algorithm>
#include <map>

namespace zipmoe::scheduler {
namespace {

// Rounds of decode needed for n ops on L workers, times c.
double DecodeRoundsUs(int64_t n_ops, const CostModel& cost) {
  const int64_t rounds = (n_ops + cost.n_workers - 1) / cost.n_workers;
  return static_cast<double>(rounds) * cost.decompress_us;
}

}  // namespace

double TaskIoUs(CompressionState state, const CostModel& cost) {
  double us = 0.0;
  if (NeedsERead(state)) us += cost.all_e_read_us();
  if (NeedsSmRead(state)) us += cost.sm_read_us;
  return us;
}

double TaskCriticalPathUs(CompressionState state, double expert_compute_us, const CostModel& cost) {
  if (!NeedsDecode(state)) return expert_compute_us;
  const int32_t k = cost.n_shards;
  double decode_done_us = 0.0;
  if (NeedsERead(state)) {
    for (int32_t i = 1; i <= k; ++i) {
      decode_done_us = std::max(decode_done_us, i * cost.e_read_us + DecodeRoundsUs(k - i + 1, cost));
    }
  } else {
    decode_done_us = DecodeRoundsUs(k, cost);
  }
  const double ready_us = std::max(decode_done_us, TaskIoUs(state, cost));
  return ready_us + cost.recovery_us + expert_compute_us;
}

double PaperCriticalPathUs(CompressionState state, double expert_compute_us, const CostModel& cost) {
  if (!NeedsDecode(state)) return expert_compute_us;
  const double k = cost.n_shards;
  const double parallel = std::min(cost.n_shards, cost.n_workers);
  const double rho_u = NeedsERead(state) ? cost.all_e_read_us() : 0.0;
  const double sm_us = NeedsSmRead(state) ? cost.sm_read_us : 0.0;
  return rho_u + std::max(k * cost.decompress_us / parallel, sm_us) + expert_compute_us;
}

Result<LowerBound> ComputeLowerBound(const std::vector<ExpertTask>& tasks, const CostModel& cost) {
  ZM_RETURN_IF_ERROR(ValidateCostModel(cost));
  ZM_RETURN_IF_ERROR(ValidateTasks(tasks));
  LowerBound lb;
  std::map<int32_t, double> compute_by_expert;
  double decode_work_us = 0.0;
  for (const ExpertTask& t : tasks) {
    lb.io_us += TaskIoUs(t.state, cost);
    if (NeedsDecode(t.state)) {
      decode_work_us += cost.n_shards * cost.decompress_us;
      lb.recover_us += cost.recovery_us;
    }
    compute_by_expert[t.expert_id] = t.expert_compute_us;
    lb.critical_path_us = std::max(lb.critical_path_us, TaskCriticalPathUs(t.state, t.expert_compute_us, cost));
  }
  lb.decode_us = decode_work_us / cost.n_workers;
  for (const auto& [expert, us] : compute_by_expert) lb.compute_us += us;
  lb.bound_us = std::max({lb.io_us, lb.decode_us, lb.compute_us, lb.critical_path_us, lb.recover_us});
  return lb;
}

}  // namespace zipmoe::scheduler
