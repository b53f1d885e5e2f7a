#include "services/storage/storage_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/hash.h"
#include "common/thread_name.h"
#include "common/thread_priority.h"
#include "common/trace_events.h"
#include "services/storage/aligned_buffer.h"

namespace zipmoe::storage {
namespace {

uint64_t MicrosSince(std::chrono::steady_clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count());
}

const char* ChunkKindName(ChunkKind kind) { return kind == ChunkKind::kE ? "E-chunk" : "SM-chunk"; }

// "E-chunk 2 of 'model.layers.0.mlp.experts.1.up_proj.weight' (layer 0, expert 1)"
std::string ChunkLabel(const ReadOp& op) {
  return fmt::format("{} {} of '{}' (layer {}, expert {})", ChunkKindName(op.kind), op.chunk_index, op.tensor_name,
                     op.layer_id, op.expert_id);
}

// The completion of `op` with `status`; the caller fills in what it measured.
ReadCompletion CompletionOf(const ReadOp& op, Status status) {
  ReadCompletion c;
  c.op_id = op.op_id;
  c.kind = op.kind;
  c.stored_bytes = op.stored_bytes;
  c.status = std::move(status);
  return c;
}

}  // namespace

ReadOp MakeChunkReadOp(const ExpertTensorInfo& t, int chunk_index, uint64_t op_id, uint8_t* dst,
                       uint64_t dst_capacity_bytes) {
  const ChunkInfo& c = t.chunks.at(static_cast<size_t>(chunk_index));
  ReadOp op;
  op.op_id = op_id;
  op.file_offset = c.file_offset;
  op.stored_bytes = c.stored_bytes;
  op.dst = dst;
  op.dst_capacity_bytes = dst_capacity_bytes;
  op.xxh64 = c.xxh64;
  op.tensor_name = t.name;
  op.layer_id = t.layer_id;
  op.expert_id = t.expert_id;
  op.kind = c.kind;
  op.chunk_index = chunk_index;
  return op;
}

StorageService::StorageService(StorageConfig config, ChunkFile file)
    : config_(std::move(config)), file_(std::move(file)) {}

Result<std::unique_ptr<StorageService>> StorageService::Create(const StorageConfig& config) {
  ZM_ASSIGN_OR_RETURN(ChunkFile file, ChunkFile::Open(config.path, config.page_cache));
  std::unique_ptr<StorageService> service(new StorageService(config, std::move(file)));
  if (config.io_thread) {
    service->io_thread_ = std::thread([s = service.get()] {
      SetCurrentThreadName("zm-io");
      RaisePipelineThread();
      s->IoLoop();
    });
  }
  return service;
}

StorageService::~StorageService() { Stop(); }

Status StorageService::Submit(std::vector<ReadOp> ops) {
  std::unordered_set<uint64_t> batch_ids;
  for (const ReadOp& op : ops) {
    const auto where = [&] { return fmt::format("{}: read op {} ({})", path(), op.op_id, ChunkLabel(op)); };
    if (op.file_offset % kChunkAlignmentBytes != 0)
      return Status::InvalidArgument(fmt::format("{}: file offset {} is not a multiple of {}", where(), op.file_offset,
                                                 kChunkAlignmentBytes));
    if (op.dst == nullptr || reinterpret_cast<uintptr_t>(op.dst) % kChunkAlignmentBytes != 0)
      return Status::InvalidArgument(fmt::format("{}: destination {} is not {}-byte aligned", where(),
                                                 static_cast<const void*>(op.dst), kChunkAlignmentBytes));
    if (op.dst_capacity_bytes < RoundUpBytes(op.stored_bytes))
      return Status::InvalidArgument(fmt::format("{}: destination holds {} bytes, needs {} ({} rounded up to {})",
                                                 where(), op.dst_capacity_bytes, RoundUpBytes(op.stored_bytes),
                                                 op.stored_bytes, kChunkAlignmentBytes));
    if (!batch_ids.insert(op.op_id).second)
      return Status::InvalidArgument(where() + ": op id appears twice in one Submit");
  }
  {
    MutexLock lock(&mu_);
    if (stopping_) return Status::Unavailable(path() + ": storage service stopped");
    for (const ReadOp& op : ops) {
      if (in_flight_.count(op.op_id) != 0 || completions_.count(op.op_id) != 0)
        return Status::InvalidArgument(
            fmt::format("{}: read op {} ({}): op id already in use", path(), op.op_id, ChunkLabel(op)));
    }
    for (ReadOp& op : ops) {
      in_flight_.insert(op.op_id);
      queue_.push_back(std::move(op));
    }
  }
  queue_cv_.NotifyOne();
  return Status::Ok();
}

void StorageService::IoLoop() {
  std::vector<ReadOp> group;
  bool stopped = false;
  while (TakeGroup(/*wait=*/true, &group, &stopped)) RunGroup(group, stopped);
}

void StorageService::RunQueued() {
  if (config_.io_thread) return;
  MutexLock run_lock(&run_mu_);
  std::vector<ReadOp> group;
  bool stopped = false;
  while (TakeGroup(/*wait=*/false, &group, &stopped)) RunGroup(group, stopped);
}

bool StorageService::TakeGroup(bool wait, std::vector<ReadOp>* group, bool* stopped) {
  group->clear();
  MutexLock lock(&mu_);
  if (wait) queue_cv_.Wait(&lock, [this]() ZM_REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
  if (queue_.empty()) return false;  // stopping_ and nothing left, or nothing queued
  group->push_back(std::move(queue_.front()));
  queue_.pop_front();
  *stopped = stopping_;
  uint64_t end = group->front().file_offset + RoundUpBytes(group->front().stored_bytes);
  uint64_t bytes = RoundUpBytes(group->front().stored_bytes);
  // Buffered reads (page cache) go one by one: the kernel's readahead already merges them there.
  while (!*stopped && file_.direct_io() && !queue_.empty() && group->size() < kMaxCoalescedChunks) {
    const ReadOp& next = queue_.front();
    const uint64_t len = RoundUpBytes(next.stored_bytes);
    if (next.file_offset != end || bytes + len > kMaxCoalescedBytes) break;
    end += len;
    bytes += len;
    group->push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return true;
}

void StorageService::RunGroup(const std::vector<ReadOp>& group, bool stopped) {
  if (stopped) {
    const ReadOp& op = group.front();
    Complete(CompletionOf(op, Status::Unavailable(fmt::format("{}@{}: {}: storage service stopped before the read",
                                                              path(), op.file_offset, ChunkLabel(op)))));
    if (config_.on_read_done) config_.on_read_done();
    return;
  }
  trace::TraceSpan span("io", [&] {
    const std::string what = group.size() == 1 ? ChunkLabel(group.front())
                                               : fmt::format("{} chunks from {}", group.size(), ChunkLabel(group.front()));
    uint64_t bytes = 0;
    for (const ReadOp& op : group) bytes += op.stored_bytes;
    return trace::SpanText(fmt::format("read {}", what), fmt::format(R"({{"bytes": {}}})", bytes));
  }, trace::Activity::kRead);
  uint64_t reads = 1;
  std::vector<ReadCompletion> done = group.size() == 1 ? std::vector<ReadCompletion>{Execute(group.front())}
                                                       : ExecuteCoalesced(group, &reads);
  span.End();
  {
    MutexLock lock(&mu_);
    stats_.reads += reads;
  }
  for (const ReadCompletion& c : done) Complete(c);
  if (config_.on_read_done) config_.on_read_done();
}

ReadCompletion StorageService::Execute(const ReadOp& op) {
  const auto read_start = std::chrono::steady_clock::now();
  Result<uint64_t> read = file_.ReadAt(op.file_offset, op.stored_bytes, op.dst, op.dst_capacity_bytes);
  const uint64_t read_us = MicrosSince(read_start);
  if (!read.ok()) {
    ReadCompletion c = CompletionOf(op, read.status().WithContext(ChunkLabel(op)));
    c.read_us = read_us;
    return c;
  }
  return Finish(op, *read, read_us);
}

std::vector<ReadCompletion> StorageService::ExecuteCoalesced(const std::vector<ReadOp>& group, uint64_t* reads) {
  std::vector<struct iovec> parts;
  uint64_t group_bytes = 0;
  for (const ReadOp& op : group) {
    parts.push_back({op.dst, RoundUpBytes(op.stored_bytes)});
    group_bytes += parts.back().iov_len;
  }
  const auto read_start = std::chrono::steady_clock::now();
  Result<uint64_t> read = file_.ReadVAt(group.front().file_offset, parts);
  const uint64_t read_us = MicrosSince(read_start);
  std::vector<ReadCompletion> done;
  *reads = 1;
  if (!read.ok()) {  // read each chunk on its own: an error then names the chunk, and the others still arrive
    for (const ReadOp& op : group) done.push_back(Execute(op));
    *reads += group.size();
    return done;
  }
  uint64_t at = 0;  // where this op's bytes begin in the group's range
  for (size_t i = 0; i < group.size(); ++i) {
    const uint64_t len = parts[i].iov_len;
    const uint64_t got = *read > at ? std::min(*read - at, len) : 0;
    // The group's read time, shared by bytes (the per-chunk read time u of §3.3 stays comparable).
    done.push_back(Finish(group[i], got, read_us * len / std::max<uint64_t>(group_bytes, 1)));
    at += len;
  }
  return done;
}

ReadCompletion StorageService::Finish(const ReadOp& op, uint64_t read_bytes, uint64_t read_us) {
  ReadCompletion c = CompletionOf(op, Status::Ok());
  c.read_us = read_us;
  c.read_bytes = read_bytes;
  if (c.read_bytes < op.stored_bytes) {
    c.status = Status::Corruption(fmt::format("{}@{}: {}: unexpected end of file after {} of {} bytes (truncated?)",
                                              path(), op.file_offset, ChunkLabel(op), c.read_bytes, op.stored_bytes));
    return c;
  }
  const auto verify_start = std::chrono::steady_clock::now();
  const uint64_t got = Xxh64(op.dst, op.stored_bytes);
  c.verify_us = MicrosSince(verify_start);
  if (got != op.xxh64) {
    c.status = Status::Corruption(fmt::format("{}@{}: {}: xxh64 {:016x}, manifest {:016x}", path(), op.file_offset,
                                              ChunkLabel(op), got, op.xxh64));
  }
  return c;
}

void StorageService::Complete(const ReadCompletion& c) {
  // The callback runs first, so a WaitFor() caller that returns knows the callback has run.
  if (config_.on_complete) config_.on_complete(c);
  {
    MutexLock lock(&mu_);
    if (c.status.ok()) {
      ++stats_.ops_ok;
      (c.kind == ChunkKind::kE ? stats_.io_bytes_e : stats_.io_bytes_sm) += c.stored_bytes;
    } else if (c.status.code() == StatusCode::kUnavailable) {
      ++stats_.ops_unavailable;
    } else {
      ++stats_.ops_failed;
    }
    stats_.read_us += c.read_us;
    stats_.verify_us += c.verify_us;
    in_flight_.erase(c.op_id);
    if (config_.retain_completions) completions_[c.op_id] = c;
  }
  done_cv_.NotifyAll();
}

Result<ReadCompletion> StorageService::WaitFor(uint64_t op_id) {
  if (!config_.retain_completions)
    return Status::InvalidArgument(path() + ": WaitFor needs StorageConfig::retain_completions");
  RunQueued();
  MutexLock lock(&mu_);
  done_cv_.Wait(&lock, [&]() ZM_REQUIRES(mu_) { return in_flight_.count(op_id) == 0; });
  auto it = completions_.find(op_id);
  if (it == completions_.end())
    return Status::NotFound(fmt::format("{}: read op {} was never submitted or was already waited for", path(), op_id));
  ReadCompletion c = std::move(it->second);
  completions_.erase(it);
  return c;
}

void StorageService::RequestStop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  queue_cv_.NotifyAll();
}

void StorageService::Stop() {
  ZM_CHECK(std::this_thread::get_id() != io_thread_.get_id()) << "StorageService::Stop called on its I/O thread";
  MutexLock stop_lock(&stop_mu_);
  if (joined_) return;
  RequestStop();
  if (io_thread_.joinable()) io_thread_.join();
  RunQueued();  // without an I/O thread: what is still queued completes with kUnavailable
  joined_ = true;
}

StorageStats StorageService::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace zipmoe::storage
