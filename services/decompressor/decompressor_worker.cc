#include "services/decompressor/decompressor_worker.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/bitfield.h"

namespace zipmoe::decompressor {

namespace msg = messaging;

static_assert(static_cast<int>(msg::DecodeKind::MAX) == static_cast<int>(DecompressOpKind::kRecover) &&
                  static_cast<int>(msg::DecodeKind::RecoverBf16) == static_cast<int>(DecompressOpKind::kRecover),
              "schemas/messages.fbs DecodeKind must mirror decompressor::DecompressOpKind");

msg::DecodeRequest DecodeRequestToWire(const DecompressOp& op, const uint8_t* arena_base, uint32_t attempt) {
  msg::DecodeRequest d;
  d.op_id = op.op_id;
  d.attempt = attempt;
  d.priority = op.priority;
  d.kind = static_cast<msg::DecodeKind>(op.kind);
  d.codec = msg::ToWire(op.codec);
  d.src_offset = static_cast<uint64_t>(op.src - arena_base);
  d.stored_bytes = op.stored_bytes;
  d.sm_offset = op.sm != nullptr ? static_cast<uint64_t>(op.sm - arena_base) : 0;
  d.dst_offset = static_cast<uint64_t>(op.dst - arena_base);
  d.raw_bytes = op.raw_bytes;
  d.expected_xxh64 = op.expected_xxh64;
  d.tensor_name = op.tensor_name;
  d.layer_id = op.layer_id;
  d.expert_id = op.expert_id;
  d.chunk_index = op.chunk_index;
  d.dtype = static_cast<uint8_t>(op.dtype);
  return d;
}

DecompressOp DecodeRequestFromWire(const msg::DecodeRequest& r, uint8_t* arena_base) {
  const bool recover = r.kind == msg::DecodeKind::RecoverBf16;
  DecompressOp op;
  op.op_id = r.op_id;
  op.priority = r.priority;
  op.kind = static_cast<DecompressOpKind>(r.kind);
  op.codec = msg::FromWire(r.codec);
  op.src = arena_base + r.src_offset;
  op.stored_bytes = r.stored_bytes;
  op.sm = recover ? arena_base + r.sm_offset : nullptr;
  op.dst = arena_base + r.dst_offset;
  op.raw_bytes = r.raw_bytes;
  op.expected_xxh64 = r.expected_xxh64;
  op.tensor_name = r.tensor_name;
  op.layer_id = r.layer_id;
  op.expert_id = r.expert_id;
  op.chunk_index = r.chunk_index;
  op.dtype = static_cast<DType>(r.dtype);
  return op;
}

msg::DecodeCompletion DecodeCompletionToWire(const DecompressCompletion& c, uint32_t attempt) {
  msg::DecodeCompletion done;
  done.op_id = c.op_id;
  done.attempt = attempt;
  msg::SetStatus(&done, c.status);
  done.worker_index = c.worker_index;
  done.run_us = c.run_us;
  return done;
}

DecompressCompletion DecodeCompletionFromWire(const msg::DecodeCompletion& done) {
  return DecompressCompletion{done.op_id, msg::StatusOf(done), done.worker_index, done.run_us};
}

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
  config.on_complete = [raw](const DecompressCompletion& c) { raw->OnComplete(c); };
  ZM_ASSIGN_OR_RETURN(w->pool_, DecompressorPool::Create(config));
  return w;
}

void DecompressorWorker::OnComplete(const DecompressCompletion& c) {
  std::vector<msg::DecodeCompletion> out;
  bool recover = false;
  {
    MutexLock lock(&mu_);
    uint32_t attempt = 0;
    ExpertKey expert{-1, -1};
    if (auto it = running_.find(c.op_id); it != running_.end()) {
      attempt = it->second.attempt;
      recover = it->second.recover;
      expert = it->second.expert;
      running_.erase(it);
    }
    out = groups_.Complete(expert, DecodeCompletionToWire(c, attempt), c.status.ok());
  }
  if (options_.on_op && c.worker_index >= 0) options_.on_op(recover, c.run_us * 1e-6);
  std::vector<msg::Body> bodies;
  bodies.reserve(out.size());
  for (msg::DecodeCompletion& done : out) bodies.emplace_back(std::move(done));
  pull_->PostAll(std::move(bodies));
}

void DecompressorWorker::Handle(const msg::Body& body) {
  std::vector<const msg::DecodeRequest*> requests;
  if (const auto* r = std::get_if<msg::DecodeRequest>(&body)) {
    requests.push_back(r);
  } else if (const auto* batch = std::get_if<msg::DecodeRequests>(&body)) {
    for (const std::unique_ptr<msg::DecodeRequest>& r : batch->items) requests.push_back(r.get());
  }  // a ReadRequest is not for us (the scheduler never sends one)
  // Every op of the frame is counted for its expert before any is queued: one that ends before the
  // expert's later ops are queued must still wait for them.
  std::vector<const msg::DecodeRequest*> accepted;
  for (const msg::DecodeRequest* r : requests) {
    if (Accept(*r)) accepted.push_back(r);
  }
  for (const msg::DecodeRequest* r : accepted) {
    Status st = pool_->Add(DecodeRequestFromWire(*r, arena_->data()), /*ready=*/true);
    if (!st.ok()) OnComplete(DecompressCompletion{r->op_id, st, -1, 0});
  }
}

bool DecompressorWorker::Accept(const msg::DecodeRequest& r) {
  const bool recover = r.kind == msg::DecodeKind::RecoverBf16;
  const uint64_t size = arena_->size_bytes();
  auto inside = [size](uint64_t offset, uint64_t bytes) { return offset <= size && bytes <= size - offset; };
  DecompressCompletion reject;
  reject.op_id = r.op_id;
  const auto dtype = static_cast<DType>(r.dtype);
  if (recover && !HasExponentSplit(dtype)) {
    reject.status = Status::InvalidArgument(fmt::format("decode op {} of '{}': recovery of dtype {} (no E/SM split)",
                                                        r.op_id, r.tensor_name, static_cast<int>(r.dtype)));
    pull_->Post(DecodeCompletionToWire(reject, r.attempt));
    return false;
  }
  if (r.raw_bytes > size ||
      !inside(r.src_offset, recover ? EPlaneBytes(dtype, static_cast<int64_t>(r.raw_bytes)) : r.stored_bytes) ||
      !inside(r.dst_offset, recover ? DTypeBytes(dtype, r.raw_bytes) : r.raw_bytes) ||
      (recover && !inside(r.sm_offset, SmPlaneBytes(dtype, static_cast<int64_t>(r.raw_bytes))))) {
    reject.status = Status::InvalidArgument(fmt::format(
        "decode op {} of '{}' reaches outside the arena {} ({} bytes)", r.op_id, r.tensor_name, arena_->name(), size));
    pull_->Post(DecodeCompletionToWire(reject, r.attempt));
    return false;
  }
  MutexLock lock(&mu_);
  if (running_.count(r.op_id) != 0) return false;  // re-issued while still running here
  const ExpertKey expert{r.layer_id, r.expert_id};
  running_[r.op_id] = Running{r.attempt, recover, expert};
  groups_.Register(expert);
  return true;
}

Status DecompressorWorker::Run() {
  Status st = pull_->Run([this](const msg::Body& body) { Handle(body); });
  pool_->Stop();
  return st;
}

void DecompressorWorker::RequestStop() { pull_->RequestStop(); }

}  // namespace zipmoe::decompressor
