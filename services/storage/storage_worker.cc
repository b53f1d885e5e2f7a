#include "services/storage/storage_worker.h"

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace zipmoe::storage {

namespace msg = messaging;

msg::ChunkRead ChunkReadToWire(const ReadOp& op, const uint8_t* arena_base, uint32_t attempt) {
  msg::ChunkRead r;
  r.op_id = op.op_id;
  r.attempt = attempt;
  r.file_offset = op.file_offset;
  r.stored_bytes = op.stored_bytes;
  r.dst_offset = static_cast<uint64_t>(op.dst - arena_base);
  r.dst_capacity_bytes = op.dst_capacity_bytes;
  r.xxh64 = op.xxh64;
  r.tensor_name = op.tensor_name;
  r.layer_id = op.layer_id;
  r.expert_id = op.expert_id;
  r.kind = msg::ToWire(op.kind);
  r.chunk_index = op.chunk_index;
  return r;
}

ReadOp ChunkReadFromWire(const msg::ChunkRead& r, uint8_t* arena_base) {
  ReadOp op;
  op.op_id = r.op_id;
  op.file_offset = r.file_offset;
  op.stored_bytes = r.stored_bytes;
  op.dst = arena_base + r.dst_offset;
  op.dst_capacity_bytes = r.dst_capacity_bytes;
  op.xxh64 = r.xxh64;
  op.tensor_name = r.tensor_name;
  op.layer_id = r.layer_id;
  op.expert_id = r.expert_id;
  op.kind = msg::FromWire(r.kind);
  op.chunk_index = r.chunk_index;
  return op;
}

msg::ReadCompletion ReadCompletionToWire(const ReadCompletion& c, uint32_t attempt) {
  msg::ReadCompletion done;
  done.op_id = c.op_id;
  done.attempt = attempt;
  msg::SetStatus(&done, c.status);
  done.kind = msg::ToWire(c.kind);
  done.stored_bytes = c.stored_bytes;
  done.read_bytes = c.read_bytes;
  done.read_us = c.read_us;
  done.verify_us = c.verify_us;
  return done;
}

ReadCompletion ReadCompletionFromWire(const msg::ReadCompletion& done) {
  ReadCompletion c;
  c.op_id = done.op_id;
  c.status = msg::StatusOf(done);
  c.kind = msg::FromWire(done.kind);
  c.stored_bytes = done.stored_bytes;
  c.read_bytes = done.read_bytes;
  c.read_us = done.read_us;
  c.verify_us = done.verify_us;
  return c;
}

Result<std::unique_ptr<StorageWorker>> StorageWorker::Create(zmq::context_t& context, const ShmRegion& arena,
                                                             StorageWorkerOptions options) {
  if (options.queue_depth < 1) {
    return Status::InvalidArgument(fmt::format("storage: queue depth {} (must be >= 1)", options.queue_depth));
  }
  std::unique_ptr<StorageWorker> w(new StorageWorker());
  w->arena_ = &arena;
  options.pull.role = msg::kRoleStorage;
  options.pull.n_threads = 1;
  options.pull.credits = options.queue_depth;
  options.pull.arena_name = arena.name();
  options.pull.arena_bytes = arena.size_bytes();
  w->options_ = options;
  ZM_ASSIGN_OR_RETURN(w->pull_, msg::PullWorker::Create(context, options.pull));
  StorageWorker* raw = w.get();
  StorageConfig config;
  config.path = options.experts_path;
  config.page_cache = options.page_cache;
  // No I/O thread: the PullWorker's thread reads each request's chunks itself (Handle -> RunQueued),
  // one wake-up less per request than handing them to a second thread. A read's completions are
  // collected there and posted together when the read is done (one frame for a coalesced read's
  // chunks: pull_worker.h BatchCompletions), so the scheduler hears of each read as it finishes.
  config.io_thread = false;
  config.on_complete = [raw](const ReadCompletion& c) {
    uint32_t attempt = 0;
    {
      MutexLock lock(&raw->mu_);
      auto it = raw->in_flight_.find(c.op_id);
      if (it != raw->in_flight_.end()) {
        attempt = it->second;
        raw->in_flight_.erase(it);
      }
    }
    if (raw->options_.on_read) raw->options_.on_read(c.kind, c.stored_bytes, c.read_us * 1e-6, c.status.ok());
    raw->read_done_.emplace_back(ReadCompletionToWire(c, attempt));
  };
  config.on_read_done = [raw] { raw->pull_->PostAll(std::exchange(raw->read_done_, {})); };
  ZM_ASSIGN_OR_RETURN(w->service_, StorageService::Create(config));
  return w;
}

uint64_t StorageWorker::queued() const {
  MutexLock lock(&mu_);
  return in_flight_.size();
}

void StorageWorker::Handle(const msg::Body& body) {
  const auto* request = std::get_if<msg::ReadRequest>(&body);
  if (request == nullptr) return;  // a DecodeRequest is not for us
  const uint64_t size = arena_->size_bytes();
  std::vector<ReadOp> ops;
  for (const std::unique_ptr<msg::ChunkRead>& read : request->ops) {
    const msg::ChunkRead& r = *read;
    const bool inside = r.dst_offset <= size && r.dst_capacity_bytes <= size - r.dst_offset &&
                        r.stored_bytes <= r.dst_capacity_bytes && r.dst_offset % kChunkAlignmentBytes == 0;
    if (!inside) {
      ReadCompletion reject;
      reject.op_id = r.op_id;
      reject.kind = msg::FromWire(r.kind);
      reject.status = Status::InvalidArgument(fmt::format(
          "read op {} of '{}': destination [{}, +{}) is not a 4 KiB-aligned range of the arena {} ({} bytes)", r.op_id,
          r.tensor_name, r.dst_offset, r.dst_capacity_bytes, arena_->name(), size));
      pull_->Post(ReadCompletionToWire(reject, r.attempt));
      continue;
    }
    {
      MutexLock lock(&mu_);
      if (in_flight_.count(r.op_id) != 0) continue;  // re-issued while still queued here
      in_flight_[r.op_id] = r.attempt;
    }
    ops.push_back(ChunkReadFromWire(r, arena_->data()));
  }
  // Submit the request's ops together, so RunQueued finds them all queued and reads chunks that
  // continue each other in the file with one preadv. Submit is all-or-nothing: when it refuses the
  // batch, submit one by one, so that a bad op (e.g. offset not aligned in the file) fails alone.
  if (ops.empty()) return;
  if (!service_->Submit(ops).ok()) {
    for (ReadOp& op : ops) {
      const uint64_t id = op.op_id;
      const ChunkKind kind = op.kind;
      std::vector<ReadOp> one;
      one.push_back(std::move(op));
      Status st = service_->Submit(std::move(one));
      if (!st.ok()) {
        uint32_t attempt = 0;
        {
          MutexLock lock(&mu_);
          attempt = in_flight_[id];
          in_flight_.erase(id);
        }
        ReadCompletion reject;
        reject.op_id = id;
        reject.kind = kind;
        reject.status = st;
        pull_->Post(ReadCompletionToWire(reject, attempt));
      }
    }
  }
  service_->RunQueued();  // on this thread: no I/O thread to wake
}

Status StorageWorker::Run() {
  Status st = pull_->Run([this](const msg::Body& body) { Handle(body); });
  service_->Stop();
  return st;
}

void StorageWorker::RequestStop() { pull_->RequestStop(); }

}  // namespace zipmoe::storage
