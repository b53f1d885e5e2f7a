#include "services/decompressor/decompressor_worker.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::decompressor {

namespace msg = messaging;

Result<std::unique_ptr<DecompressorWorker>> DecompressorWorker::Create(zmq::context_t& context, const ShmRegion& arena,
                                                                       DecompressorWorkerOptions options) {
  if (options.n_threads < 1) {
    return Status::InvalidArgument(fmt::format("decompressor: threads = {} (must be >= 1)", options.n_threads));
  }
  std::unique_ptr<DecompressorWorker> w(new DecompressorWorker());
  w->arena_ = &arena;
  options.pull.role = msg::kRoleDecompressor;
  options.pull.n_threads = options.n_threads;
  options.pull.credits = std::max(options.n_threads, options.queue_depth);
  options.pull.arena_name = arena.name();
  options.pull.arena_bytes = arena.size_bytes();
  w->options_ = options;
  ZM_ASSIGN_OR_RETURN(w->pull_, msg::PullWorker::Create(context, options.pull));
  DecompressorWorker* raw = w.get();
  DecompressorConfig config;
  config.n_workers = options.n_threads;
  config.on_complete = [raw](const DecompressCompletion& c) {
    msg::DecodeCompletion done;
    done.op_id = c.op_id;
    done.status = c.status;
    done.worker_index = c.worker_index;
    done.run_us = c.run_us;
    bool recover = false;
    {
      MutexLock lock(&raw->mu_);
      auto it = raw->running_.find(c.op_id);
      if (it != raw->running_.end()) {
        done.attempt = it->second.attempt;
        recover = it->second.recover;
        raw->running_.erase(it);
      }
    }
    if (raw->options_.on_op && c.worker_index >= 0) raw->options_.on_op(recover, c.run_us * 1e-6);
    raw->pull_->Post(std::move(done));
  };
  ZM_ASSIGN_OR_RETURN(w->pool_, DecompressorPool::Create(config));
  return w;
}

void DecompressorWorker::Handle(const msg::Body& body) {
  const auto* r = std::get_if<msg::DecodeRequest>(&body);
  if (r == nullptr) return;  // a ReadRequest is not for us (the scheduler never sends one)
  const bool recover = r->kind == msg::DecodeKind::kRecoverBf16;
  const uint64_t size = arena_->size_bytes();
  auto inside = [size](uint64_t offset, uint64_t bytes) { return offset <= size && bytes <= size - offset; };
  msg::DecodeCompletion reject;
  reject.op_id = r->op_id;
  reject.attempt = r->attempt;
  if (!inside(r->src_offset, recover ? r->raw_bytes : r->stored_bytes) ||
      !inside(r->dst_offset, recover ? 2 * r->raw_bytes : r->raw_bytes) || (recover && !inside(r->sm_offset, r->raw_bytes)) ||
      r->raw_bytes > size) {
    reject.status = Status::InvalidArgument(fmt::format(
        "decode op {} of '{}' reaches outside the arena {} ({} bytes)", r->op_id, r->tensor_name, arena_->name(), size));
    pull_->Post(std::move(reject));
    return;
  }
  {
    MutexLock lock(&mu_);
    if (running_.count(r->op_id) != 0) return;  // re-issued while still running here
    running_[r->op_id] = Running{r->attempt, recover};
  }
  uint8_t* base = arena_->data();
  DecompressOp op;
  op.op_id = r->op_id;
  op.priority = r->priority;
  op.kind = recover ? DecompressOpKind::kRecoverBf16 : DecompressOpKind::kDecodeEChunk;
  op.codec = r->codec;
  op.src = base + r->src_offset;
  op.stored_bytes = r->stored_bytes;
  op.sm = recover ? base + r->sm_offset : nullptr;
  op.dst = base + r->dst_offset;
  op.raw_bytes = r->raw_bytes;
  op.expected_xxh64 = r->expected_xxh64;
  op.tensor_name = r->tensor_name;
  op.layer_id = r->layer_id;
  op.expert_id = r->expert_id;
  op.chunk_index = r->chunk_index;
  Status st = pool_->Add(std::move(op), /*ready=*/true);
  if (!st.ok()) {
    {
      MutexLock lock(&mu_);
      running_.erase(r->op_id);
    }
    reject.status = st;
    pull_->Post(std::move(reject));
  }
}

Status DecompressorWorker::Run() {
  Status st = pull_->Run([this](const msg::Body& body) { Handle(body); });
  pool_->Stop();
  return st;
}

void DecompressorWorker::RequestStop() { pull_->RequestStop(); }

}  // namespace zipmoe::decompressor
