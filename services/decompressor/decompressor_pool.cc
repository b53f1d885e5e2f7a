#include "services/decompressor/decompressor_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/cpu_topology.h"
#include "common/thread_name.h"
#include "common/thread_priority.h"
#include "common/trace_events.h"

namespace zipmoe::decompressor {

int DefaultWorkerCount() {
  return std::max(1, AllowedCpuCount() - 1);
}

DecompressorPool::DecompressorPool(DecompressorConfig config) : config_(std::move(config)) {}

Result<std::unique_ptr<DecompressorPool>> DecompressorPool::Create(const DecompressorConfig& config) {
  if (config.n_workers < 0)
    return Status::InvalidArgument(fmt::format("decompressor pool: n_workers {} < 0", config.n_workers));
  const int n = config.n_workers == 0 ? DefaultWorkerCount() : config.n_workers;
  std::unique_ptr<DecompressorPool> pool(new DecompressorPool(config));
  pool->workers_.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    pool->workers_.emplace_back([p = pool.get(), i] {
      SetCurrentThreadName("zm-decode-" + std::to_string(i));
      RaisePipelineThread();
      p->WorkerLoop(i);
    });
  }
  return pool;
}

DecompressorPool::~DecompressorPool() { Stop(); }

Status DecompressorPool::Add(DecompressOp op, bool ready) {
  ZM_RETURN_IF_ERROR(ValidateOp(op));
  {
    MutexLock lock(&mu_);
    if (stopping_)
      return Status::Unavailable(fmt::format("decompressor pool stopped; op {} ({}) not added", op.op_id, DescribeOp(op)));
    const uint64_t id = op.op_id;
    if (pending_.count(id) != 0 || running_.count(id) != 0 || completions_.count(id) != 0)
      return Status::InvalidArgument(fmt::format("decompress op {} ({}): op id already in use", id, DescribeOp(op)));
    const uint64_t seq = next_seq_++;
    if (ready) ready_.emplace(op.priority, seq, id);
    pending_.emplace(id, Pending{std::move(op), seq, ready});
  }
  if (ready) work_cv_.NotifyOne();
  return Status::Ok();
}

Status DecompressorPool::MarkReady(uint64_t op_id) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return Status::Unavailable(fmt::format("decompressor pool stopped; op {} not marked ready", op_id));
    auto it = pending_.find(op_id);
    if (it == pending_.end())
      return Status::NotFound(fmt::format("decompress op {}: not pending (unknown, running or completed)", op_id));
    if (it->second.ready) return Status::Ok();
    it->second.ready = true;
    ready_.emplace(it->second.op.priority, it->second.seq, op_id);
  }
  work_cv_.NotifyOne();
  return Status::Ok();
}

Status DecompressorPool::Cancel(uint64_t op_id, Status reason) {
  if (reason.ok())
    return Status::InvalidArgument(fmt::format("decompress op {}: Cancel needs a non-OK reason", op_id));
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(op_id);
    if (it == pending_.end())
      return Status::NotFound(fmt::format("decompress op {}: not pending (unknown, running or completed)", op_id));
    if (it->second.ready) ready_.erase(ReadyKey(it->second.op.priority, it->second.seq, op_id));
    pending_.erase(it);
    running_.insert(op_id);  // hidden from WaitFor's "not found" until published
    ++stats_.ops_cancelled;
  }
  DecompressCompletion c;
  c.op_id = op_id;
  c.status = std::move(reason);
  Complete(c);
  return Status::Ok();
}

void DecompressorPool::WorkerLoop(int worker_index) {
  for (;;) {
    DecompressOp op;
    {
      MutexLock lock(&mu_);
      work_cv_.Wait(&lock, [this]() ZM_REQUIRES(mu_) { return stopping_ || !ready_.empty(); });
      if (stopping_) return;  // pending ops are completed by Stop()
      const uint64_t id = std::get<2>(*ready_.begin());
      ready_.erase(ready_.begin());
      auto it = pending_.find(id);
      ZM_CHECK(it != pending_.end()) << "ready op " << id << " not pending";
      op = std::move(it->second.op);
      pending_.erase(it);
      running_.insert(id);
    }
    const auto start = std::chrono::steady_clock::now();
    DecompressCompletion c;
    c.op_id = op.op_id;
    c.worker_index = worker_index;
    {
      const trace::TraceSpan span("decode", [&] {
        return trace::SpanText(fmt::format("decode {} chunk {}", op.tensor_name, op.chunk_index),
                               fmt::format(R"({{"raw_bytes": {}, "worker": {}}})", op.raw_bytes, worker_index));
      }, trace::Activity::kDecode);
      c.status = RunDecompressOp(op);
    }
    c.run_us = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
    {
      MutexLock lock(&mu_);
      ++(c.status.ok() ? stats_.ops_ok : stats_.ops_failed);
      stats_.run_us += c.run_us;
    }
    Complete(c);
  }
}

void DecompressorPool::Complete(const DecompressCompletion& c) {
  // The callback runs first, so a WaitFor() caller that returns knows the callback has run.
  if (config_.on_complete) config_.on_complete(c);
  {
    MutexLock lock(&mu_);
    running_.erase(c.op_id);
    if (config_.retain_completions) completions_[c.op_id] = c;
  }
  done_cv_.NotifyAll();
}

Result<DecompressCompletion> DecompressorPool::WaitFor(uint64_t op_id) {
  if (!config_.retain_completions)
    return Status::InvalidArgument("decompressor pool: WaitFor needs DecompressorConfig::retain_completions");
  MutexLock lock(&mu_);
  done_cv_.Wait(&lock, [&]() ZM_REQUIRES(mu_) { return pending_.count(op_id) == 0 && running_.count(op_id) == 0; });
  auto it = completions_.find(op_id);
  if (it == completions_.end())
    return Status::NotFound(fmt::format("decompress op {}: never added, or already waited for", op_id));
  DecompressCompletion c = std::move(it->second);
  completions_.erase(it);
  return c;
}

void DecompressorPool::RequestStop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  work_cv_.NotifyAll();
}

void DecompressorPool::Stop() {
  for (const std::thread& w : workers_)
    ZM_CHECK(std::this_thread::get_id() != w.get_id()) << "DecompressorPool::Stop called on a worker";
  MutexLock stop_lock(&stop_mu_);
  if (joined_) return;
  RequestStop();
  for (std::thread& w : workers_) w.join();
  // Nothing runs now; complete what is left: READY ops by priority, then waiting ops in Add order.
  using LeftKey = std::tuple<bool, int32_t, uint64_t>;  // (waiting, priority if READY, seq)
  std::vector<std::pair<LeftKey, DecompressOp>> left;
  {
    MutexLock lock(&mu_);
    for (auto& [id, p] : pending_) {
      left.emplace_back(LeftKey(!p.ready, p.ready ? p.op.priority : 0, p.seq), std::move(p.op));
      running_.insert(id);
    }
    pending_.clear();
    ready_.clear();
    stats_.ops_unavailable += left.size();
  }
  std::sort(left.begin(), left.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [key, op] : left) {
    DecompressCompletion c;
    c.op_id = op.op_id;
    c.status = Status::Unavailable(
        fmt::format("decompressor pool stopped before op {} ({}) ran", op.op_id, DescribeOp(op)));
    Complete(c);
  }
  joined_ = true;
}

DecompressorStats DecompressorPool::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace zipmoe::decompressor
