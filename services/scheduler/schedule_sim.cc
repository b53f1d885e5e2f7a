#include "services/scheduler/schedule_sim.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <queue>
#include <tuple>

#include <fmt/format.h>

namespace zipmoe::scheduler {
namespace {

// Checks that `order` lists exactly the reads and decodes the tasks' DAGs need (task_dag.h):
// E-chunk reads for M/S, the SM-chunk read for M/E, K decodes for all but F.
Status ValidateOrder(const std::vector<ExpertTask>& tasks, const CostModel& cost, const ScheduleOrder& order) {
  const int32_t n = static_cast<int32_t>(tasks.size());
  const int32_t k = cost.n_shards;
  std::vector<uint8_t> e_read(static_cast<size_t>(n) * k, 0), sm_read(n, 0), decoded(static_cast<size_t>(n) * k, 0);
  for (size_t i = 0; i < order.io_order.size(); ++i) {
    const IoOp& op = order.io_order[i];
    if (op.task < 0 || op.task >= n) {
      return Status::InvalidArgument(fmt::format("io_order[{}]: task {} out of range [0, {})", i, op.task, n));
    }
    const ExpertTask& t = tasks[op.task];
    const char state = CompressionStateLetter(t.state);
    if (op.chunk == ChunkKind::kE) {
      if (!NeedsERead(t.state)) {
        return Status::InvalidArgument(fmt::format(
            "io_order[{}]: task {} (expert {}, state {}) reads no E-chunk", i, op.task, t.expert_id, state));
      }
      if (op.shard < 0 || op.shard >= k) {
        return Status::InvalidArgument(
            fmt::format("io_order[{}]: E-chunk shard {} out of range [0, {})", i, op.shard, k));
      }
      uint8_t& seen = e_read[static_cast<size_t>(op.task) * k + op.shard];
      if (seen) {
        return Status::InvalidArgument(
            fmt::format("io_order[{}]: E-chunk {} of task {} listed twice", i, op.shard, op.task));
      }
      seen = 1;
    } else if (op.chunk == ChunkKind::kSm) {
      if (!NeedsSmRead(t.state)) {
        return Status::InvalidArgument(fmt::format(
            "io_order[{}]: task {} (expert {}, state {}) reads no SM-chunk", i, op.task, t.expert_id, state));
      }
      if (op.shard != -1) {
        return Status::InvalidArgument(fmt::format("io_order[{}]: SM-chunk read with shard {} (want -1)", i, op.shard));
      }
      if (sm_read[op.task]) {
        return Status::InvalidArgument(fmt::format("io_order[{}]: SM-chunk of task {} listed twice", i, op.task));
      }
      sm_read[op.task] = 1;
    } else {
      return Status::InvalidArgument(fmt::format("io_order[{}]: invalid chunk kind {}", i, static_cast<int>(op.chunk)));
    }
  }
  for (size_t i = 0; i < order.decode_order.size(); ++i) {
    const DecodeOp& op = order.decode_order[i];
    if (op.task < 0 || op.task >= n) {
      return Status::InvalidArgument(fmt::format("decode_order[{}]: task {} out of range [0, {})", i, op.task, n));
    }
    if (!NeedsDecode(tasks[op.task].state)) {
      return Status::InvalidArgument(
          fmt::format("decode_order[{}]: task {} (expert {}, state F) decodes nothing", i, op.task,
                      tasks[op.task].expert_id));
    }
    if (op.shard < 0 || op.shard >= k) {
      return Status::InvalidArgument(fmt::format("decode_order[{}]: shard {} out of range [0, {})", i, op.shard, k));
    }
    uint8_t& seen = decoded[static_cast<size_t>(op.task) * k + op.shard];
    if (seen) {
      return Status::InvalidArgument(fmt::format("decode_order[{}]: decode {} of task {} listed twice", i, op.shard, op.task));
    }
    seen = 1;
  }
  for (int32_t j = 0; j < n; ++j) {
    const ExpertTask& t = tasks[j];
    for (int32_t s = 0; s < k; ++s) {
      const size_t idx = static_cast<size_t>(j) * k + s;
      if (NeedsERead(t.state) && !e_read[idx]) {
        return Status::InvalidArgument(fmt::format("io_order misses E-chunk {} of task {} (expert {}, {})", s, j,
                                                   t.expert_id, ExpertProjName(t.proj)));
      }
      if (NeedsDecode(t.state) && !decoded[idx]) {
        return Status::InvalidArgument(fmt::format("decode_order misses decode {} of task {} (expert {}, {})", s, j,
                                                   t.expert_id, ExpertProjName(t.proj)));
      }
    }
    if (NeedsSmRead(t.state) && !sm_read[j]) {
      return Status::InvalidArgument(fmt::format("io_order misses the SM-chunk of task {} (expert {}, {})", j,
                                                 t.expert_id, ExpertProjName(t.proj)));
    }
  }
  return Status::Ok();
}

}  // namespace

DecodeRun RunDecodeWorkers(const std::vector<double>& ready_us, double decompress_us, int32_t n_workers,
                           double max_idle_us) {
  const size_t n = ready_us.size();
  DecodeRun run;
  run.start_us.assign(n, 0.0);
  run.worker.assign(n, -1);
  run.worker_end_us.assign(n_workers, 0.0);
  // Ops not yet ready, by (ready time, priority); ready ops by priority (index).
  // Cached chunks (ready at 0) first; the rest is usually already in read order, so sort only if not.
  std::vector<int32_t> pending;
  pending.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (ready_us[i] <= 0.0) pending.push_back(static_cast<int32_t>(i));
  }
  const size_t n_cached = pending.size();
  for (size_t i = 0; i < n; ++i) {
    if (ready_us[i] > 0.0) pending.push_back(static_cast<int32_t>(i));
  }
  auto by_ready = [&](int32_t a, int32_t b) { return ready_us[a] < ready_us[b]; };
  if (!std::is_sorted(pending.begin() + n_cached, pending.end(), by_ready)) {
    std::stable_sort(pending.begin() + n_cached, pending.end(), by_ready);
  }
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready;
  size_t next_pending = 0;
  for (size_t done = 0; done < n; ++done) {
    double t = *std::min_element(run.worker_end_us.begin(), run.worker_end_us.end());
    while (next_pending < n && ready_us[pending[next_pending]] <= t) ready.push(pending[next_pending++]);
    if (ready.empty()) {  // every free worker waits for the next E-chunk
      t = ready_us[pending[next_pending]];
      while (next_pending < n && ready_us[pending[next_pending]] <= t) ready.push(pending[next_pending++]);
    }
    int32_t w = 0;
    while (run.worker_end_us[w] > t) ++w;  // lowest-index free worker
    const int32_t op = ready.top();
    ready.pop();
    run.idle_us += t - run.worker_end_us[w];
    if (run.idle_us > max_idle_us) {
      run.stopped_early = true;
      return run;
    }
    run.start_us[op] = t;
    run.worker[op] = w;
    run.worker_end_us[w] = t + decompress_us;
    run.end_us = std::max(run.end_us, t + decompress_us);
  }
  return run;
}

Result<SimResult> SimulateSchedule(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                                   const ScheduleOrder& order) {
  ZM_RETURN_IF_ERROR(ValidateCostModel(cost));
  ZM_RETURN_IF_ERROR(ValidateTasks(tasks));
  ZM_RETURN_IF_ERROR(ValidateOrder(tasks, cost, order));
  const int32_t n = static_cast<int32_t>(tasks.size());
  const int32_t k = cost.n_shards;
  SimResult sim;

  // I/O thread: back to back in io_order.
  std::vector<double> e_ready(static_cast<size_t>(n) * k, 0.0), sm_ready(n, 0.0);
  double t_io = 0.0;
  sim.io_timeline.reserve(order.io_order.size());
  for (const IoOp& op : order.io_order) {
    const double start = t_io;
    if (op.chunk == ChunkKind::kE) {
      t_io += cost.e_read_us;
      e_ready[static_cast<size_t>(op.task) * k + op.shard] = t_io;
    } else {
      t_io += cost.sm_read_us;
      sm_ready[op.task] = t_io;
    }
    sim.io_timeline.push_back({op.task, op.shard, start, t_io});
  }
  sim.io_end_us = t_io;

  // Decode workers: work-conserving, highest priority (earliest in decode_order) ready op first.
  const size_t n_ops = order.decode_order.size();
  std::vector<double> op_ready(n_ops);
  std::vector<int32_t> task_priority(n, n);  // position of the task's first decode in decode_order
  for (size_t i = 0; i < n_ops; ++i) {
    const DecodeOp& op = order.decode_order[i];
    op_ready[i] = e_ready[static_cast<size_t>(op.task) * k + op.shard];  // 0 when cached
    task_priority[op.task] = std::min<int32_t>(task_priority[op.task], static_cast<int32_t>(i));
  }
  const DecodeRun run = RunDecodeWorkers(op_ready, cost.decompress_us, cost.n_workers);
  sim.decode_end_us = run.end_us;
  sim.decode_idle_us = run.idle_us;
  sim.worker_timelines.assign(cost.n_workers, {});
  std::vector<double> decode_done(n, 0.0);
  std::vector<size_t> by_start(n_ops);
  std::iota(by_start.begin(), by_start.end(), 0);
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](size_t a, size_t b) { return run.start_us[a] < run.start_us[b]; });
  for (size_t i : by_start) {
    const DecodeOp& op = order.decode_order[i];
    const double end = run.start_us[i] + cost.decompress_us;
    sim.worker_timelines[run.worker[i]].push_back({op.task, op.shard, run.start_us[i], end});
    decode_done[op.task] = std::max(decode_done[op.task], end);
  }

  // Recovery stream: FIFO by readiness.
  sim.tensor_ready_us.assign(n, 0.0);
  std::vector<std::tuple<double, int32_t, int32_t>> to_recover;  // (ready, priority, task)
  for (int32_t j = 0; j < n; ++j) {
    if (!NeedsDecode(tasks[j].state)) continue;
    to_recover.emplace_back(std::max(decode_done[j], sm_ready[j]), task_priority[j], j);
  }
  std::sort(to_recover.begin(), to_recover.end());
  double t_rec = 0.0;
  for (const auto& [ready, priority, j] : to_recover) {
    const double start = std::max(t_rec, ready);
    t_rec = start + cost.recovery_us;
    sim.tensor_ready_us[j] = t_rec;
    sim.recover_timeline.push_back({j, -1, start, t_rec});
  }

  // GPU: an expert runs once all its tensors are recovered, FIFO by readiness.
  struct ExpertState {
    double ready_us = 0.0;
    int32_t priority = 0;
    double compute_us = 0.0;
  };
  std::map<int32_t, ExpertState> experts;
  for (int32_t j = 0; j < n; ++j) {
    auto [it, inserted] = experts.try_emplace(tasks[j].expert_id);
    ExpertState& e = it->second;
    if (inserted) e = {0.0, n, tasks[j].expert_compute_us};
    e.ready_us = std::max(e.ready_us, sim.tensor_ready_us[j]);
    e.priority = std::min(e.priority, task_priority[j]);
  }
  std::vector<std::tuple<double, int32_t, int32_t>> to_compute;  // (ready, priority, expert)
  for (const auto& [expert, e] : experts) to_compute.emplace_back(e.ready_us, e.priority, expert);
  std::sort(to_compute.begin(), to_compute.end());
  double t_gpu = 0.0;
  for (const auto& [ready, priority, expert] : to_compute) {
    const double start = std::max(t_gpu, ready);
    t_gpu = start + experts[expert].compute_us;
    sim.compute_timeline.push_back({expert, start, t_gpu});
  }
  sim.makespan_us = t_gpu;
  return sim;
}

}  // namespace zipmoe::scheduler
