// OffloadExpertProvider's I/O and decode pipeline (offload_provider.h): the per-expert work
// records, prefetches, staging waves, and the storage / decompressor completions that advance them.
#include "services/pipeline/offload_provider.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/ipc/slot_arena.h"
#include "common/trace_events.h"
#include "services/decompressor/decompress_op.h"
#include "services/scheduler/lower_bound.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;

namespace {

bool ECached(CompressionState s) { return s == CompressionState::kC || s == CompressionState::kE; }
bool SmCached(CompressionState s) { return s == CompressionState::kC || s == CompressionState::kS; }

}  // namespace

std::vector<scheduler::ExpertTask> OffloadExpertProvider::TasksOf(
    const std::vector<int32_t>& experts, std::vector<std::pair<int32_t, int32_t>>* task_refs) const {
  std::vector<scheduler::ExpertTask> tasks;
  if (task_refs != nullptr) task_refs->clear();
  for (size_t i = 0; i < experts.size(); ++i) {
    const ExpertWork& w = works_.at(experts[i]);
    for (int proj = 0; proj < cm::kProjCount; ++proj) {
      if (!HasProj(proj)) continue;
      if (task_refs != nullptr) task_refs->emplace_back(static_cast<int32_t>(i), proj);
      scheduler::ExpertTask t;
      t.expert_id = w.expert_id;
      t.proj = static_cast<ExpertProj>(proj);
      t.state = w.lookup.state;
      t.n_tokens = w.n_tokens;
      t.expert_compute_us = cache_->plan().cost.expert_compute_us * std::max(1, w.n_tokens);
      tasks.push_back(t);
    }
  }
  return tasks;
}

int32_t OffloadExpertProvider::NewWorkLocked(int32_t layer_id, int32_t expert_id) {
  const int32_t id = next_work_id_;
  next_work_id_ = next_work_id_ == std::numeric_limits<int32_t>::max() ? 0 : next_work_id_ + 1;
  ExpertWork& w = works_[id];
  w = ExpertWork{};
  w.layer_id = layer_id;
  w.expert_id = expert_id;
  for (int proj = 0; proj < cm::kProjCount; ++proj) {
    if (HasProj(proj)) w.tensors[proj].info = store_->Find(layer_id, expert_id, static_cast<ExpertProj>(proj));
  }
  return id;
}

void OffloadExpertProvider::FreeWorkLocked(int32_t work) {
  auto it = works_.find(work);
  if (it == works_.end()) return;
  ExpertWork& w = it->second;
  if (w.prefetch) (w.dropped ? stats_.prefetch.wasted_bytes : stats_.prefetch.used_bytes) += w.read_bytes;
  if (w.lookup.lease != kNoLease) cache_->ReleaseLeases({w.lookup.lease});
  if (w.staging != SlotArena::kNoSlot) cache_->ReleaseStaging(w.staging);
  works_.erase(it);
}

void OffloadExpertProvider::DropPrefetchLocked(int32_t work) {
  ExpertWork& w = works_.at(work);
  if (!w.dropped && !w.failed && w.staging != SlotArena::kNoSlot) ++stats_.prefetch.wasted;
  w.dropped = true;
  for (const auto& [id, ref] : ops_) {
    if (ref.expert == work && ref.kind == OpKind::kDecode) cancel_later_.push_back(id);
  }
  if (w.ops == 0) FreeWorkLocked(work);
}

void OffloadExpertProvider::FailPrefetchLocked(int32_t work) {
  ExpertWork& w = works_.at(work);
  if (w.failed || w.dropped) return;
  ++stats_.prefetch.failed;
  w.failed = true;
  auto it = prefetched_.find(w.expert_id);
  if (it != prefetched_.end() && it->second == work) prefetched_.erase(it);
  DropPrefetchLocked(work);  // may free w
}

void OffloadExpertProvider::OpDoneLocked(ExpertWork& w, int32_t work) {
  if (w.ops > 0 || !w.dropped) return;
  FreeWorkLocked(work);  // its staging slot may start waiting work
  Status st = StartPendingLocked();
  if (!st.ok()) FailLocked(st);
}

void OffloadExpertProvider::CancelDecodes(const std::vector<uint64_t>& ids) {
  for (uint64_t id : ids) (void)pool_->Cancel(id, Status::Unavailable("prefetch dropped"));
}

PrefetchMode OffloadExpertProvider::prefetch_mode() const { return config_.prefetch; }

void OffloadExpertProvider::Prefetch(const LayerRouting& predicted) {
  const cm::CacheManager* manager = cache_->local_manager();  // null: the cache is remote (no Peek)
  if (config_.prefetch == PrefetchMode::kNone) return;
  std::vector<uint64_t> cancel;
  {
    MutexLock lock(&mu_);
    if (active_ && predicted.layer_id == layer_id_) return;
    if (prefetch_layer_ != predicted.layer_id) {
      for (const auto& [expert, work] : prefetched_) DropPrefetchLocked(work);
      prefetched_.clear();
      prefetch_pending_.clear();
      prefetch_layer_ = predicted.layer_id;
    }
    stats_.prefetch.predicted += predicted.expert_ids.size();
    // Experts not yet in F (F hits are ready at once), best first, as many as staging slots.
    std::vector<int32_t> wanted;
    const size_t limit = cache_->staging_slots();
    for (int32_t e : predicted.expert_ids) {
      if (prefetched_.size() + wanted.size() >= limit) break;
      if (prefetched_.count(e) > 0) continue;
      if (manager != nullptr && manager->Peek(predicted.layer_id, e) == CompressionState::kF) continue;
      if (std::find(wanted.begin(), wanted.end(), e) != wanted.end()) continue;
      bool complete = true;
      for (int proj = 0; proj < cm::kProjCount; ++proj) {
        complete = complete && (!HasProj(proj) || store_->Find(predicted.layer_id, e, static_cast<ExpertProj>(proj)) != nullptr);
      }
      if (complete) wanted.push_back(e);  // else not an expert of this model: nothing to fetch
    }
    // Their cached parts (C/S/E) are pinned without counting an activation: the slot cannot move
    // before the layer runs, and a wrong prediction changes no rank.
    std::vector<CachedExpert> found;
    if (!wanted.empty() && !cache_->PinLayer(predicted.layer_id, wanted, &found).ok()) found.clear();
    for (const CachedExpert& f : found) {
      if (f.state == CompressionState::kF) {  // ready at once (a remote cache is not peeked first)
        if (f.lease != kNoLease) cache_->ReleaseLeases({f.lease});
        continue;
      }
      const int32_t id = NewWorkLocked(predicted.layer_id, f.expert_id);
      ExpertWork& w = works_.at(id);
      w.prefetch = true;
      w.n_tokens = 1;
      w.lookup = f;
      prefetched_[f.expert_id] = id;
      prefetch_pending_.push_back(id);
    }
    Status st = StartPendingLocked();
    if (!st.ok()) FailLocked(st);
    cancel.swap(cancel_later_);
  }
  CancelDecodes(cancel);
  CallListenerIfDue();
}

void OffloadExpertProvider::CachedExperts(int32_t layer_id, int32_t n_experts, std::vector<uint8_t>* cached) const {
  cached->assign(static_cast<size_t>(std::max(n_experts, 0)), 0);
  for (int32_t e : cache_->FullResidents(layer_id)) {
    if (e >= 0 && e < n_experts) (*cached)[static_cast<size_t>(e)] = 1;
  }
}

std::vector<int32_t> OffloadExpertProvider::TakeStagingLocked(std::deque<int32_t>* queue) {
  std::vector<int32_t> wave;
  while (!queue->empty()) {
    Result<uint32_t> slot = cache_->AcquireStaging();
    if (!slot.ok()) break;
    ExpertWork& w = works_.at(queue->front());
    w.staging = *slot;
    w.staging_base = arena_base_ + cache_->StagingOffset(*slot);
    wave.push_back(queue->front());
    queue->pop_front();
  }
  return wave;
}

Status OffloadExpertProvider::StartPendingLocked() {
  const std::vector<int32_t> wave = TakeStagingLocked(&pending_);
  if (!wave.empty()) ZM_RETURN_IF_ERROR(StartWaveLocked(wave, /*prefetch=*/false));
  // Prefetches only take slots the active layer does not wait for.
  if (!pending_.empty() || (active_ && !error_.ok())) return Status::Ok();
  const std::vector<int32_t> prefetch = TakeStagingLocked(&prefetch_pending_);
  stats_.prefetch.issued += prefetch.size();
  if (prefetch.empty()) return Status::Ok();
  Status st = StartWaveLocked(prefetch, /*prefetch=*/true);
  if (!st.ok()) {  // a prefetch that cannot start is dropped; the layer that selects the expert reads it
    // (its decodes waiting for reads never submitted are cancelled by the caller, cancel_later_)
    for (int32_t id : prefetch) FailPrefetchLocked(id);
  }
  return Status::Ok();
}

Status OffloadExpertProvider::StartWaveLocked(const std::vector<int32_t>& wave, bool prefetch) {
  std::vector<std::pair<int32_t, int32_t>> task_refs;  // per task: index in `wave`, projection
  const std::vector<scheduler::ExpertTask> tasks = TasksOf(wave, &task_refs);
  const auto start = std::chrono::steady_clock::now();
  ZM_ASSIGN_OR_RETURN(scheduler::LayerSchedule sched, config_.scheduler ? scheduler::ScheduleLayer(tasks, cost_)
                                                                       : scheduler::ScheduleLayerBaseline(tasks, cost_));
  stats_.schedule_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!prefetch) {
    ++measure_.waves;
    measure_.tasks.insert(measure_.tasks.end(), tasks.begin(), tasks.end());
  }

  const cm::StagingLayout& sl = cache_->staging_layout();
  for (int32_t id : wave) {
    ExpertWork& w = works_.at(id);
    const CompressionState s = w.lookup.state;
    for (int proj = 0; proj < cm::kProjCount; ++proj) {
      if (!HasProj(proj)) continue;
      TensorWork& tw = w.tensors[proj];
      const cm::TensorSlotLayout& tl = w.lookup.layout->tensors[proj];
      const ExpertProj ep = static_cast<ExpertProj>(proj);
      uint8_t* base = w.staging_base;
      tw.e_plane = base + sl.e_plane_offset + tl.e_plane.offset;
      tw.bf16 = base + sl.bf16_offset + tl.bf16.offset;
      tw.weights = tw.bf16;
      tw.e_src.resize(tl.e_chunks.size());
      for (size_t i = 0; i < tl.e_chunks.size(); ++i) {
        tw.e_src[i] = ECached(s) ? w.lookup.EChunk(ep, static_cast<int>(i)) : base + tl.e_chunks[i].offset;
      }
      tw.sm = SmCached(s) ? w.lookup.Sm(ep) : base + w.lookup.layout->SmPartOffset(cm::Pool::kC) + tl.sm.offset;
      tw.sm_ready = SmCached(s);
      tw.decodes_left = static_cast<int>(tl.e_chunks.size());
      ++w.tensors_left;
    }
  }
  const auto add_op = [&](uint64_t id, const OpRef& ref) ZM_REQUIRES(mu_) {
    ops_[id] = ref;
    ++works_.at(ref.expert).ops;
  };
  const auto remove_op = [&](uint64_t id) ZM_REQUIRES(mu_) {
    auto it = ops_.find(id);
    if (it == ops_.end()) return;
    --works_.at(it->second.expert).ops;
    ops_.erase(it);
  };

  // Decode ops first (READY when their E-chunk is cached), then the reads that make the others READY.
  // A prefetch's decodes rank after every decode of the active layer.
  int32_t base_priority = next_priority_;
  if (prefetch) {
    base_priority = kPrefetchPriority + next_prefetch_priority_;
    next_prefetch_priority_ = (next_prefetch_priority_ + static_cast<int32_t>(sched.order.decode_order.size())) % (1 << 28);
  } else {
    next_priority_ += static_cast<int32_t>(sched.order.decode_order.size());
  }
  std::vector<uint64_t> decode_id(tasks.size() * sched.n_shards, 0);
  std::vector<std::pair<decompressor::DecompressOp, bool>> decodes;
  for (size_t rank = 0; rank < sched.order.decode_order.size(); ++rank) {
    const scheduler::DecodeOp& d = sched.order.decode_order[rank];
    const auto& [position, proj] = task_refs.at(static_cast<size_t>(d.task));
    const int32_t work = wave[static_cast<size_t>(position)];
    TensorWork& tw = works_.at(work).tensors[proj];
    const uint64_t id = next_op_id_++;
    decode_id[static_cast<size_t>(d.task) * sched.n_shards + d.shard] = id;
    decodes.emplace_back(decompressor::MakeDecodeEChunkOp(*tw.info, d.shard, id, base_priority + static_cast<int32_t>(rank),
                                                          tw.e_src[d.shard], tw.e_plane),
                         ECached(works_.at(work).lookup.state));
    add_op(id, OpRef{work, proj, d.shard, OpKind::kDecode, 0});
  }
  std::vector<storage::ReadOp> reads;
  for (const scheduler::IoOp& io : sched.order.io_order) {
    const auto& [position, proj] = task_refs.at(static_cast<size_t>(io.task));
    const int32_t work = wave[static_cast<size_t>(position)];
    ExpertWork& w = works_.at(work);
    TensorWork& tw = w.tensors[proj];
    const cm::TensorSlotLayout& tl = w.lookup.layout->tensors[proj];
    const uint64_t id = next_op_id_++;
    if (io.chunk == ChunkKind::kE) {
      const cm::SlotExtent& ext = tl.e_chunks[io.shard];
      reads.push_back(storage::MakeChunkReadOp(*tw.info, io.shard, id, w.staging_base + ext.offset, ext.read_bytes));
      add_op(id, OpRef{work, proj, io.shard, OpKind::kReadE,
                       decode_id[static_cast<size_t>(io.task) * sched.n_shards + io.shard]});
    } else {
      reads.push_back(storage::MakeChunkReadOp(*tw.info, tw.info->n_shards, id, const_cast<uint8_t*>(tw.sm),
                                               tl.sm.read_bytes));
      add_op(id, OpRef{work, proj, -1, OpKind::kReadSm, 0});
    }
  }
  for (auto& [op, ready] : decodes) {
    const uint64_t id = op.op_id;
    Status st = pool_->Add(std::move(op), ready);
    if (!st.ok()) {
      remove_op(id);
      return st;
    }
  }
  if (!reads.empty()) {
    std::vector<uint64_t> ids;
    for (const storage::ReadOp& r : reads) ids.push_back(r.op_id);
    Status st = storage_->Submit(std::move(reads));
    if (!st.ok()) {
      for (uint64_t id : ids) remove_op(id);  // their decodes stay waiting until cancelled (DrainLocked / a drop)
      return st;
    }
  }
  // C-state tensors with every input in memory still wait for their decodes; nothing else to kick.
  return Status::Ok();
}

std::optional<OffloadExpertProvider::OpRef> OffloadExpertProvider::TakeOpLocked(uint64_t op_id) {
  auto it = ops_.find(op_id);
  if (it == ops_.end()) return std::nullopt;
  const OpRef ref = it->second;
  ops_.erase(it);
  --works_.at(ref.expert).ops;
  return ref;
}

void OffloadExpertProvider::EndCompletionLocked(const OpRef& ref, bool current, std::vector<uint64_t>* dropped) {
  if (!current) {  // the work may be gone (a failed prefetch frees it)
    auto left = works_.find(ref.expert);
    if (left != works_.end()) OpDoneLocked(left->second, ref.expert);
  }
  dropped->swap(cancel_later_);
  NotifyWaitersLocked();
}

void OffloadExpertProvider::NotifyWaitersLocked() {
  if (!error_.ok() || !ready_.empty() || ops_.empty()) cv_.NotifyAll();
  if (active_ && (!error_.ok() || !ready_.empty())) listener_due_ = true;
}

void OffloadExpertProvider::CallListenerIfDue() {
  {
    MutexLock lock(&mu_);
    if (!listener_due_) return;
    listener_due_ = false;
  }
  std::lock_guard<std::recursive_mutex> listener_lock(listener_mu_);
  if (ready_listener_) ready_listener_();
}

bool OffloadExpertProvider::SetReadyListener(std::function<void()> listener) {
  std::lock_guard<std::recursive_mutex> listener_lock(listener_mu_);
  ready_listener_ = std::move(listener);
  return true;
}

void OffloadExpertProvider::OnReadComplete(const storage::ReadCompletion& c) {
  std::vector<std::pair<uint64_t, Status>> cancels;
  std::vector<uint64_t> dropped;
  {
    MutexLock lock(&mu_);
    const std::optional<OpRef> taken = TakeOpLocked(c.op_id);
    if (!taken.has_value()) return;
    const OpRef ref = *taken;
    ExpertWork& w = works_.at(ref.expert);
    const bool current = w.current;  // a prefetch's failures are its own: they fail no layer
    w.read_bytes += c.read_bytes;
    ++stats_.io_ops;
    stats_.io_read_bytes += c.read_bytes;
    stats_.io_seconds += c.read_us * 1e-6;
    if (!c.status.ok()) {
      if (current) {
        FailLocked(c.status);
        if (ref.kind == OpKind::kReadE) cancels.emplace_back(ref.decode_op, c.status);
      } else {
        FailPrefetchLocked(ref.expert);  // cancels its waiting decodes; may free w
      }
    } else if (!current && w.dropped) {
      if (ref.kind == OpKind::kReadE) cancel_later_.push_back(ref.decode_op);  // its decode need not run
    } else if (ref.kind == OpKind::kReadE) {
      stats_.io_bytes_e += c.stored_bytes;
      if (current) {
        ++measure_.e_reads;
        measure_.e_read_us += static_cast<double>(c.read_us);
      }
      Status st = pool_->MarkReady(ref.decode_op);
      if (!st.ok() && current) {
        FailLocked(st);
      } else if (!st.ok()) {
        FailPrefetchLocked(ref.expert);
      }
    } else {
      stats_.io_bytes_sm += c.stored_bytes;
      if (current) {
        ++measure_.sm_reads;
        measure_.sm_read_us += static_cast<double>(c.read_us);
      }
      w.tensors[ref.proj].sm_ready = true;
      TensorProgressLocked(ref.expert, ref.proj);
    }
    EndCompletionLocked(ref, current, &dropped);
  }
  for (const auto& [id, status] : cancels) {
    if (!pool_->Cancel(id, status).ok()) continue;  // already completed or stopping: nothing to undo
  }
  CancelDecodes(dropped);
  CallListenerIfDue();
}

void OffloadExpertProvider::OnDecompressComplete(const decompressor::DecompressCompletion& c) {
  std::vector<uint64_t> dropped;
  {
    MutexLock lock(&mu_);
    const std::optional<OpRef> taken = TakeOpLocked(c.op_id);
    if (!taken.has_value()) return;
    const OpRef ref = *taken;
    ExpertWork& w = works_.at(ref.expert);
    const bool current = w.current;  // a prefetch's failures are its own: they fail no layer
    if (!c.status.ok()) {
      if (current) {
        FailLocked(c.status);
      } else if (!w.dropped) {
        FailPrefetchLocked(ref.expert);  // may free w
      }
    } else if (ref.kind == OpKind::kDecode) {
      ++stats_.decode_ops;
      stats_.decode_seconds += c.run_us * 1e-6;
      if (current) {
        ++measure_.decodes;
        measure_.decode_us += static_cast<double>(c.run_us);
      }
      --w.tensors[ref.proj].decodes_left;
      TensorProgressLocked(ref.expert, ref.proj);
    } else {
      ++stats_.recover_ops;
      stats_.recover_seconds += c.run_us * 1e-6;
      if (current) {
        ++measure_.recoveries;
        measure_.recover_us += static_cast<double>(c.run_us);
      }
      TensorDoneLocked(w, ref.expert);
    }
    EndCompletionLocked(ref, current, &dropped);
  }
  CancelDecodes(dropped);
  CallListenerIfDue();
}

void OffloadExpertProvider::TensorDoneLocked(ExpertWork& w, int32_t work) {
  if (--w.tensors_left > 0 || (w.current && !error_.ok())) return;
  w.done = true;
  if (w.current) ready_.push_back(work);  // a prefetch waits for its layer to adopt it
}

void OffloadExpertProvider::TensorProgressLocked(int32_t work, int32_t proj) {
  ExpertWork& w = works_.at(work);
  TensorWork& tw = w.tensors[proj];
  if (tw.decodes_left > 0 || !tw.sm_ready || tw.recovering) return;
  if (w.current ? !error_.ok() : (w.failed || w.dropped)) return;
  tw.recovering = true;
  if (fused_) {  // the executor multiplies straight from the planes: nothing to recover
    TensorDoneLocked(w, work);
    cv_.NotifyAll();
    return;
  }
  const uint64_t id = next_op_id_++;
  // Recovery unblocks an expert's computation: it runs ahead of every decode (lowest priority
  // value); a prefetch's only ahead of the prefetches' decodes.
  const int32_t priority = w.current ? std::numeric_limits<int32_t>::min() + static_cast<int32_t>(id % (1u << 30))
                                     : kPrefetchPriority - 1;
  decompressor::DecompressOp op = decompressor::MakeRecoverOp(*tw.info, id, priority, tw.e_plane, tw.sm, tw.bf16);
  if (!config_.verify_recovered) op.expected_xxh64.reset();
  ops_[id] = OpRef{work, proj, -1, OpKind::kRecover, 0};
  ++w.ops;
  Status st = pool_->Add(std::move(op), /*ready=*/true);
  if (!st.ok()) {
    ops_.erase(id);
    --w.ops;
    if (w.current) {
      FailLocked(st);
    } else {
      FailPrefetchLocked(work);
    }
  }
}

void OffloadExpertProvider::FailLocked(const Status& status) {
  if (error_.ok()) {
    error_ = Status(status.code(), fmt::format("layer {}: {}", layer_id_, status.message()));
  }
  cv_.NotifyAll();
  if (active_) listener_due_ = true;
}


}  // namespace zipmoe::runtime
