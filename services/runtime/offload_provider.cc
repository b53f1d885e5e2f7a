#include "services/runtime/offload_provider.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "common/shm_region.h"
#include "common/slot_arena.h"
#include "common/trace_events.h"
#include "services/decompressor/decompress_op.h"
#include "services/scheduler/lower_bound.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;

namespace {

constexpr const char* kDefaultShmPrefix = "/zipmoe-arena-";

std::string DefaultShmName() {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}{}-{}", kDefaultShmPrefix, static_cast<long>(::getpid()), counter.fetch_add(1));
}

bool ECached(CompressionState s) { return s == CompressionState::kC || s == CompressionState::kE; }
bool SmCached(CompressionState s) { return s == CompressionState::kC || s == CompressionState::kS; }

}  // namespace

uint32_t ChooseStagingSlots(uint64_t budget_bytes, uint64_t staging_slot_bytes, int32_t top_k, bool prefetch) {
  if (staging_slot_bytes == 0) return 1;
  const uint64_t quarter = budget_bytes / 4 / staging_slot_bytes;
  const uint64_t want = static_cast<uint64_t>(std::max(top_k, 1)) * (prefetch ? 2 : 1);
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(quarter, want)));
}

// A lease on one delivered expert; releasing it admits the expert and frees its staging slot.
class OffloadExpertProvider::Lease : public ExpertLease {
 public:
  Lease(OffloadExpertProvider* owner, int32_t expert, ExpertWeightsView view)
      : owner_(owner), expert_(expert), view_(view) {}
  ~Lease() override { owner_->OnLeaseReleased(expert_); }
  const ExpertWeightsView& weights() const override { return view_; }

 private:
  OffloadExpertProvider* owner_;
  int32_t expert_;
  ExpertWeightsView view_;
};

OffloadExpertProvider::OffloadExpertProvider(OffloadConfig config) : config_(std::move(config)) {}

Result<std::unique_ptr<OffloadExpertProvider>> OffloadExpertProvider::Create(const OffloadConfig& config) {
  std::unique_ptr<OffloadExpertProvider> p(new OffloadExpertProvider(config));
  OffloadConfig& cfg = p->config_;
  if (cfg.shm_name.empty()) {
    // Per-process names are never created again, so arenas of killed runs (SIGKILL, a cgroup OOM
    // kill) would stay in /dev/shm, holding memory, unless someone sweeps them.
    ShmRegion::ReclaimStaleAndLog(kDefaultShmPrefix, "runtime");
    cfg.shm_name = DefaultShmName();
  }
  if (cfg.n_workers <= 0) cfg.n_workers = decompressor::DefaultWorkerCount();
  ZM_ASSIGN_OR_RETURN(p->store_, ExpertStore::Open(cfg.model_dir));
  const Manifest& manifest = p->store_->manifest();
  if (cfg.cache) {
    ZM_ASSIGN_OR_RETURN(p->cache_, cfg.cache(&cfg, manifest));
  } else {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<LocalCacheBackend> local, LocalCacheBackend::Create(&cfg, manifest));
    p->cache_ = std::move(local);
  }
  p->arena_base_ = p->cache_->arena_base();
  p->fused_ = cfg.fused_recovery;

  p->cost_ = p->cache_->plan().cost;  // the planner's cost model is the scheduler's
  p->cost_.n_shards = std::max(1, p->cost_.n_shards);
  p->cost_.n_workers = cfg.n_workers;
  ZM_RETURN_IF_ERROR(scheduler::ValidateCostModel(p->cost_));

  OffloadExpertProvider* raw = p.get();
  EngineSetup setup;
  setup.experts_path = p->store_->experts_path();
  setup.page_cache = cfg.page_cache;
  setup.n_workers = cfg.n_workers;
  setup.arena_base = p->cache_->arena_base();
  setup.arena_bytes = p->cache_->arena_bytes();
  setup.arena_name = p->cache_->arena_name();
  setup.on_read = [raw](const storage::ReadCompletion& done) { raw->OnReadComplete(done); };
  setup.on_decode = [raw](const decompressor::DecompressCompletion& done) { raw->OnDecompressComplete(done); };
  ZM_ASSIGN_OR_RETURN(Engines engines, cfg.engines ? cfg.engines(setup) : CreateLocalEngines(setup));
  p->storage_ = std::move(engines.reads);
  p->pool_ = std::move(engines.decodes);

  {
    MutexLock lock(&p->mu_);  // not yet shared (no op submitted); taken so stats_ is only ever touched under it
    p->stats_.per_layer.resize(p->cache_->layout().n_layers());
    p->stats_.staging_slots = p->cache_->staging_slots();
    p->stats_.arena_bytes = p->cache_->arena_bytes();
    p->stats_.budget_bytes = cfg.memory_budget_bytes;
    p->stats_.direct_io = p->storage_->direct_io();
    p->stats_.prefetch_mode = PrefetchModeName(p->prefetch_mode());
  }
  return p;
}

void OffloadExpertProvider::Shutdown() {
  if (storage_) storage_->Stop();  // every op completes (callbacks take mu_)
  if (pool_) pool_->Stop();
}

OffloadExpertProvider::~OffloadExpertProvider() {
  Shutdown();
  MutexLock lock(&mu_);
  ResetLayerLocked(/*prefetches_too=*/true);
}

uint64_t OffloadExpertProvider::minimum_budget_bytes() const { return cache_->staging_layout().slot_bytes; }

const cm::CacheManager& OffloadExpertProvider::cache() const {
  const cm::CacheManager* manager = cache_->local_manager();
  ZM_CHECK(manager != nullptr) << "cache(): the cache lives in the cache-manager process";
  return *manager;
}

double OffloadExpertProvider::NowUs() const {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - layer_start_).count();
}

std::vector<scheduler::ExpertTask> OffloadExpertProvider::TasksOf(const std::vector<int32_t>& experts) const {
  std::vector<scheduler::ExpertTask> tasks;
  for (int32_t id : experts) {
    const ExpertWork& w = works_.at(id);
    for (int proj = 0; proj < cm::kProjCount; ++proj) {
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
    w.tensors[proj].info = store_->Find(layer_id, expert_id, static_cast<ExpertProj>(proj));
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
        complete = complete && store_->Find(predicted.layer_id, e, static_cast<ExpertProj>(proj)) != nullptr;
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
}

void OffloadExpertProvider::CachedExperts(int32_t layer_id, int32_t n_experts, std::vector<uint8_t>* cached) const {
  cached->assign(static_cast<size_t>(std::max(n_experts, 0)), 0);
  for (int32_t e : cache_->FullResidents(layer_id)) {
    if (e >= 0 && e < n_experts) (*cached)[static_cast<size_t>(e)] = 1;
  }
}

Status OffloadExpertProvider::BeginLayer(const LayerRouting& routing) {
  const trace::TraceSpan span(
      "layer", [&] { return fmt::format("schedule layer {} ({} experts)", routing.layer_id, routing.expert_ids.size()); },
      trace::Activity::kScheduleLayer);
  MutexLock lock(&mu_);
  if (active_) {
    if (error_.ok()) {
      return Status::InvalidArgument(fmt::format("BeginLayer({}): layer {} has not ended", routing.layer_id, layer_id_));
    }
    for (int32_t id : experts_) {
      const ExpertWork& w = works_.at(id);
      if (w.delivered && !w.released) {
        return Status::InvalidArgument(fmt::format(
            "BeginLayer({}): a lease of failed layer {} (expert {}) is still held", routing.layer_id, layer_id_, w.expert_id));
      }
    }
    DrainLocked(&lock);
    ResetLayerLocked();
  }
  if (routing.expert_ids.size() != routing.tokens_per_expert.size()) {
    return Status::InvalidArgument(fmt::format("BeginLayer({}): {} experts but {} token counts", routing.layer_id,
                                               routing.expert_ids.size(), routing.tokens_per_expert.size()));
  }
  for (size_t i = 1; i < routing.expert_ids.size(); ++i) {
    if (routing.expert_ids[i] <= routing.expert_ids[i - 1]) {
      return Status::InvalidArgument(fmt::format("BeginLayer({}): expert ids must be distinct and ascending",
                                                 routing.layer_id));
    }
  }
  for (int32_t e : routing.expert_ids) {
    for (int proj = 0; proj < cm::kProjCount; ++proj) {
      if (store_->Find(routing.layer_id, e, static_cast<ExpertProj>(proj)) == nullptr) {
        return Status::NotFound(fmt::format("{}: layer {} expert {} has no {} tensor", config_.model_dir,
                                            routing.layer_id, e, ExpertProjName(static_cast<ExpertProj>(proj))));
      }
    }
  }
  // The step's router scores first (score-based eviction), then one lookup for the whole layer
  // (one round trip when the cache is remote).
  if (!routing.mean_scores.empty()) cache_->ObserveScores(routing.layer_id, routing.mean_scores);
  std::vector<CachedExpert> found;
  ZM_RETURN_IF_ERROR(cache_->LookupLayer(routing.layer_id, routing.expert_ids, &found));
  stats_.substitution.substituted += static_cast<uint64_t>(std::max(routing.substituted, 0));
  for (int32_t tokens : routing.tokens_per_expert) stats_.substitution.routed += static_cast<uint64_t>(tokens);
  layer_start_ = std::chrono::steady_clock::now();
  next_priority_ = 0;  // every op of earlier layers has completed (prefetches rank apart): ranks restart per layer
  measure_ = LayerMeasure{};
  experts_.clear();
  layer_id_ = routing.layer_id;
  std::vector<int32_t> to_load;
  for (size_t i = 0; i < routing.expert_ids.size(); ++i) {
    const int32_t e = routing.expert_ids[i];
    int32_t id = -1;
    auto pre = prefetch_layer_ == routing.layer_id ? prefetched_.find(e) : prefetched_.end();
    if (pre != prefetched_.end()) {
      ExpertWork& p = works_.at(pre->second);
      // Started, intact, and its cached parts (pinned since) are where the prefetch found them.
      if (p.staging != SlotArena::kNoSlot && !p.failed && found[i].state == p.lookup.state &&
          found[i].slot_offset == p.lookup.slot_offset) {  // adopt it
        id = pre->second;
        prefetched_.erase(pre);
        ++stats_.prefetch.used;
        p.current = true;
        if (p.lookup.lease != kNoLease) cache_->ReleaseLeases({p.lookup.lease});  // found[i]'s pins the same slot
        p.lookup = found[i];
        if (p.done) ready_.push_back(id);
      }
    }
    if (id < 0) {
      id = NewWorkLocked(routing.layer_id, e);
      ExpertWork& w = works_.at(id);
      w.current = true;
      w.lookup = found[i];
      if (w.lookup.state == CompressionState::kF) {
        for (int proj = 0; proj < cm::kProjCount; ++proj) {
          w.tensors[proj].weights = w.lookup.Bf16(static_cast<ExpertProj>(proj));
        }
        ready_.push_back(id);
      } else {
        to_load.push_back(id);
      }
    }
    works_.at(id).n_tokens = routing.tokens_per_expert[i];
    experts_.push_back(id);
  }
  // Prefetches this layer did not adopt (or of another layer) are dropped.
  for (const auto& [expert, work] : prefetched_) DropPrefetchLocked(work);
  prefetched_.clear();
  prefetch_pending_.clear();
  prefetch_layer_ = -1;
  // Tasks of resident experts count in the layer's bound (their compute); loaded ones are added per wave.
  for (int32_t id : experts_) {
    if (works_.at(id).lookup.state == CompressionState::kF) {
      for (const scheduler::ExpertTask& t : TasksOf({id})) measure_.tasks.push_back(t);
    }
  }
  active_ = true;

  // Order the experts to load as Alg. 1 would over the whole layer, so that waves follow it.
  Status st;
  if (to_load.size() > cache_->staging_slots()) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<scheduler::ExpertTask> tasks = TasksOf(to_load);
    Result<scheduler::LayerSchedule> sched =
        config_.scheduler ? scheduler::ScheduleLayer(tasks, cost_) : scheduler::ScheduleLayerBaseline(tasks, cost_);
    stats_.schedule_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!sched.ok()) {
      st = sched.status();
    } else {
      std::vector<bool> seen(to_load.size(), false);
      for (int32_t t : sched->task_order) {
        const size_t e = static_cast<size_t>(t) / cm::kProjCount;
        if (!seen[e]) pending_.push_back(to_load[e]);
        seen[e] = true;
      }
    }
  } else {
    pending_.assign(to_load.begin(), to_load.end());
  }
  if (st.ok()) st = StartPendingLocked();
  if (!st.ok()) FailLocked(st);
  std::vector<uint64_t> cancel;
  cancel.swap(cancel_later_);
  lock.Unlock();
  CancelDecodes(cancel);
  return st;
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
  const std::vector<scheduler::ExpertTask> tasks = TasksOf(wave);
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
      TensorWork& tw = w.tensors[proj];
      const cm::TensorSlotLayout& tl = w.lookup.layout->tensors[proj];
      const ExpertProj ep = static_cast<ExpertProj>(proj);
      uint8_t* base = w.staging_base;
      tw.e_plane = base + sl.e_plane_offset + tl.bf16.offset / 2;
      tw.bf16 = reinterpret_cast<uint16_t*>(base + sl.bf16_offset + tl.bf16.offset);
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
    const int32_t work = wave[d.task / cm::kProjCount];
    const int32_t proj = d.task % cm::kProjCount;
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
    const int32_t work = wave[io.task / cm::kProjCount];
    const int32_t proj = io.task % cm::kProjCount;
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

void OffloadExpertProvider::OnReadComplete(const storage::ReadCompletion& c) {
  std::vector<std::pair<uint64_t, Status>> cancels;
  std::vector<uint64_t> dropped;
  {
    MutexLock lock(&mu_);
    auto it = ops_.find(c.op_id);
    if (it == ops_.end()) return;
    const OpRef ref = it->second;
    ops_.erase(it);
    ExpertWork& w = works_.at(ref.expert);
    const bool current = w.current;  // a prefetch's failures are its own: they fail no layer
    --w.ops;
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
    if (!current) {
      auto left = works_.find(ref.expert);
      if (left != works_.end()) OpDoneLocked(left->second, ref.expert);
    }
    dropped.swap(cancel_later_);
    cv_.NotifyAll();
  }
  for (const auto& [id, status] : cancels) {
    if (!pool_->Cancel(id, status).ok()) continue;  // already completed or stopping: nothing to undo
  }
  CancelDecodes(dropped);
}

void OffloadExpertProvider::OnDecompressComplete(const decompressor::DecompressCompletion& c) {
  std::vector<uint64_t> dropped;
  {
    MutexLock lock(&mu_);
    auto it = ops_.find(c.op_id);
    if (it == ops_.end()) return;
    const OpRef ref = it->second;
    ops_.erase(it);
    ExpertWork& w = works_.at(ref.expert);
    const bool current = w.current;  // a prefetch's failures are its own: they fail no layer
    --w.ops;
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
    if (!current) {
      auto left = works_.find(ref.expert);
      if (left != works_.end()) OpDoneLocked(left->second, ref.expert);
    }
    dropped.swap(cancel_later_);
    cv_.NotifyAll();
  }
  CancelDecodes(dropped);
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
  decompressor::DecompressOp op = decompressor::MakeRecoverBf16Op(*tw.info, id, priority, tw.e_plane, tw.sm, tw.bf16);
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
}

bool OffloadExpertProvider::NextIsReady() const {
  MutexLock lock(&mu_);
  return active_ && delivered_ < experts_.size() && (!error_.ok() || !ready_.empty());
}

Result<std::unique_ptr<ExpertLease>> OffloadExpertProvider::NextReady() {
  MutexLock lock(&mu_);
  if (!active_) return Status::InvalidArgument("NextReady: no layer begun");
  if (delivered_ >= experts_.size()) {
    return Status::InvalidArgument(fmt::format("NextReady: all {} experts of layer {} were delivered", experts_.size(),
                                               layer_id_));
  }
  cv_.Wait(&lock, [&]() ZM_REQUIRES(mu_) { return !error_.ok() || !ready_.empty(); });
  if (!error_.ok()) return error_;
  const int32_t id = ready_.front();
  ready_.pop_front();
  ExpertWork& w = works_.at(id);
  w.delivered = true;
  w.delivered_us = NowUs();
  ++delivered_;
  ExpertWeightsView view;
  view.layer_id = layer_id_;
  view.expert_id = w.expert_id;
  view.dtype = DType::kBF16;
  if (fused_ && w.lookup.state != CompressionState::kF) {
    view.gate_planes = {w.tensors[0].e_plane, w.tensors[0].sm};
    view.up_planes = {w.tensors[1].e_plane, w.tensors[1].sm};
    view.down_planes = {w.tensors[2].e_plane, w.tensors[2].sm};
  } else {
    view.gate = w.tensors[0].weights;
    view.up = w.tensors[1].weights;
    view.down = w.tensors[2].weights;
  }
  view.intermediate = w.tensors[0].info->shape.at(0);
  view.hidden = w.tensors[0].info->shape.at(1);
  return std::unique_ptr<ExpertLease>(new Lease(this, id, view));
}

void OffloadExpertProvider::OnLeaseReleased(int32_t work) {
  CacheAdmitRequest request;
  bool admit = false;
  {
    MutexLock lock(&mu_);
    ExpertWork& w = works_.at(work);
    w.released = true;
    w.released_us = NowUs();
    measure_.compute_us[w.expert_id] = w.released_us - w.delivered_us;
    admit = error_.ok();
    request.layer_id = layer_id_;
    request.expert_id = w.expert_id;
    request.lease = w.lookup.lease;
    if (w.lookup.state == CompressionState::kF) {
      request.parts.bf16 = true;
      for (int proj = 0; proj < cm::kProjCount; ++proj) request.bf16[proj] = OffsetOf(w.tensors[proj].weights);
    } else {
      request.parts.e = request.parts.sm = request.parts.bf16 = true;
      request.bf16_from_planes = fused_;  // then F admission recovers from the planes
      for (int proj = 0; proj < cm::kProjCount; ++proj) {
        const TensorWork& tw = w.tensors[proj];
        for (const uint8_t* e : tw.e_src) request.e_chunks[proj].push_back(OffsetOf(e));
        request.sm[proj] = OffsetOf(tw.sm);
        request.bf16[proj] = OffsetOf(tw.bf16);
        request.e_plane[proj] = OffsetOf(tw.e_plane);
      }
    }
  }
  // Admission copies bytes: outside mu_ (the expert's slot stays pinned and its staging slot held).
  // The backend releases the lease after the admission.
  Status admitted;
  if (admit) {
    admitted = cache_->Admit(request);
  } else if (request.lease != kNoLease) {
    cache_->ReleaseLeases({request.lease});
  }
  std::vector<uint64_t> dropped;
  {
    MutexLock lock(&mu_);
    ExpertWork& w = works_.at(work);
    if (!admitted.ok()) FailLocked(admitted);
    w.lookup.lease = kNoLease;
    if (w.staging != SlotArena::kNoSlot) {
      cache_->ReleaseStaging(w.staging);
      w.staging = SlotArena::kNoSlot;
    }
    if (error_.ok()) {
      Status st = StartPendingLocked();
      if (!st.ok()) FailLocked(st);
    }
    dropped.swap(cancel_later_);
    cv_.NotifyAll();
  }
  CancelDecodes(dropped);
}

Status OffloadExpertProvider::EndLayer(int32_t layer_id) {
  MutexLock lock(&mu_);
  if (!active_ || layer_id != layer_id_) {
    return Status::InvalidArgument(fmt::format("EndLayer({}): the active layer is {}", layer_id,
                                               active_ ? std::to_string(layer_id_) : std::string("none")));
  }
  if (!error_.ok()) return error_;
  for (int32_t id : experts_) {
    const ExpertWork& w = works_.at(id);
    if (!w.delivered || !w.released) {
      return Status::InvalidArgument(fmt::format("EndLayer({}): expert {} was not {}", layer_id, w.expert_id,
                                                    w.delivered ? "released" : "taken with NextReady"));
    }
  }
  const double makespan_us = NowUs();

  // Lemma B.3 bound with this layer's measured operation times (runtime_stats.h).
  scheduler::CostModel measured = cost_;
  if (measure_.sm_reads > 0) measured.sm_read_us = measure_.sm_read_us / measure_.sm_reads;
  if (measure_.e_reads > 0) measured.e_read_us = measure_.e_read_us / measure_.e_reads;
  if (measure_.decodes > 0) measured.decompress_us = measure_.decode_us / measure_.decodes;
  if (measure_.recoveries > 0) measured.recovery_us = measure_.recover_us / measure_.recoveries;
  for (scheduler::ExpertTask& t : measure_.tasks) {
    auto it = measure_.compute_us.find(t.expert_id);
    t.expert_compute_us = it != measure_.compute_us.end() ? it->second : 0.0;
  }
  LayerTotals& totals = stats_.per_layer.at(layer_id);
  ++totals.runs;
  totals.waves += measure_.waves;
  totals.makespan_us += makespan_us;
  Result<scheduler::LowerBound> bound = scheduler::ComputeLowerBound(measure_.tasks, measured);
  if (bound.ok() && bound->bound_us > 0) {
    totals.bound_us += bound->bound_us;
    totals.ratio_sum += makespan_us / bound->bound_us;
    ++totals.ratio_runs;
  }
  if (config_.on_layer_end) config_.on_layer_end(layer_id, makespan_us, bound.ok() ? bound->bound_us : 0.0);
  ResetLayerLocked();
  return Status::Ok();
}

void OffloadExpertProvider::DrainLocked(MutexLock* lock) {
  // Reads whose submission failed left their decodes waiting: cancel those (outside the lock).
  std::vector<uint64_t> waiting;
  for (const auto& [id, ref] : ops_) {
    if (ref.kind == OpKind::kDecode) waiting.push_back(id);
  }
  mu_.Unlock();
  for (uint64_t id : waiting) (void)pool_->Cancel(id, Status::Unavailable("layer failed"));
  mu_.Lock();
  cv_.Wait(lock, [&]() ZM_REQUIRES(mu_) { return ops_.empty(); });
}

void OffloadExpertProvider::ResetLayerLocked(bool prefetches_too) {
  for (int32_t id : experts_) FreeWorkLocked(id);
  experts_.clear();
  pending_.clear();
  ready_.clear();
  delivered_ = 0;
  active_ = false;
  error_ = Status::Ok();
  if (prefetches_too) {  // every operation has completed (Shutdown)
    while (!works_.empty()) FreeWorkLocked(works_.begin()->first);
    prefetched_.clear();
    prefetch_pending_.clear();
    prefetch_layer_ = -1;
    ops_.clear();
    cancel_later_.clear();
  }
}

RuntimeStats OffloadExpertProvider::local_stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

RuntimeStats OffloadExpertProvider::stats() const {
  RuntimeStats s = local_stats();
  Result<cm::CacheCounters> counters = cache_->Counters();
  if (counters.ok()) s.cache = std::move(counters).value();
  const AdmitTotals admits = cache_->admit_totals();
  s.admit_calls = admits.calls;
  for (int o = 0; o < kAdmitOutcomeCount; ++o) {
    if (admits.outcomes[o] > 0) s.admit_outcomes[cm::AdmitOutcomeName(static_cast<cm::AdmitOutcome>(o))] = admits.outcomes[o];
  }
  return s;
}

}  // namespace zipmoe::runtime

namespace zipmoe::runtime {

Result<OffloadExpertProvider::PreloadStats> OffloadExpertProvider::Preload(
    const std::map<int32_t, std::map<int32_t, uint64_t>>& counts) {
  auto* local = dynamic_cast<LocalCacheBackend*>(cache_.get());
  if (local == nullptr)
    return Status::InvalidArgument("preload needs the cache in this process (embedded mode, not `zipmoe up`)");
  {
    MutexLock lock(&mu_);
    if (active_) return Status::InvalidArgument(fmt::format("preload while layer {} is begun", layer_id_));
  }
  const auto start = std::chrono::steady_clock::now();
  std::map<int32_t, std::vector<int32_t>> layers;  // MoE layer -> its experts, ascending
  for (const ExpertTensorInfo& t : store_->manifest().expert_tensors) {
    std::vector<int32_t>& ids = layers[t.layer_id];
    if (ids.empty() || ids.back() != t.expert_id) ids.push_back(t.expert_id);
  }
  const cm::CacheManager& manager = local->manager();
  const bool global_pool = !manager.per_layer_pools();
  const int64_t global_slots = global_pool ? manager.Capacity(0, cm::Pool::kF) : 0;
  PreloadStats out;
  const uint64_t read_before = stats().io_read_bytes;
  int64_t layer_index = 0;
  for (const auto& [layer_id, experts] : layers) {
    int64_t capacity = 0;
    if (global_pool) {
      const int64_t n = static_cast<int64_t>(layers.size());
      capacity = global_slots / n + (layer_index < global_slots % n ? 1 : 0);
    } else {
      for (cm::Pool p : {cm::Pool::kF, cm::Pool::kC, cm::Pool::kS, cm::Pool::kE}) capacity += manager.Capacity(layer_id, p);
    }
    ++layer_index;
    capacity = std::min<int64_t>(capacity, static_cast<int64_t>(experts.size()));
    if (capacity <= 0) continue;
    const auto layer_counts = counts.find(layer_id);
    const auto count_of = [&](int32_t e) -> uint64_t {
      if (layer_counts == counts.end()) return 0;
      const auto it = layer_counts->second.find(e);
      return it == layer_counts->second.end() ? 0 : it->second;
    };
    std::vector<int32_t> order = experts;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return count_of(a) > count_of(b); });
    order.resize(static_cast<size_t>(capacity));
    const int32_t max_expert = *std::max_element(experts.begin(), experts.end());
    std::vector<uint64_t> seed(static_cast<size_t>(max_expert) + 1, 0);
    for (size_t r = 0; r < order.size(); ++r) seed[static_cast<size_t>(order[r])] = order.size() - r;
    ZM_RETURN_IF_ERROR(local->SeedFrequencies(layer_id, seed));
    std::sort(order.begin(), order.end());
    LayerRouting routing;
    routing.layer_id = layer_id;
    routing.expert_ids = order;
    routing.tokens_per_expert.assign(order.size(), 1);
    ZM_RETURN_IF_ERROR(BeginLayer(routing));
    for (size_t i = 0; i < order.size(); ++i) {
      Result<std::unique_ptr<ExpertLease>> lease = NextReady();
      if (!lease.ok()) {
        (void)EndLayer(layer_id);
        return Status(lease.status().code(), fmt::format("preload: {}", lease.status().message()));
      }
    }  // each lease released at once: admitted by rank, its staging slot starts the next wave
    ZM_RETURN_IF_ERROR(EndLayer(layer_id));
    out.experts += order.size();
  }
  out.read_bytes = stats().io_read_bytes - read_before;
  {
    MutexLock lock(&mu_);
    RuntimeStats fresh;  // what Create set, nothing counted
    fresh.per_layer.resize(stats_.per_layer.size());
    fresh.staging_slots = stats_.staging_slots;
    fresh.arena_bytes = stats_.arena_bytes;
    fresh.budget_bytes = stats_.budget_bytes;
    fresh.direct_io = stats_.direct_io;
    fresh.prefetch_mode = stats_.prefetch_mode;
    stats_ = std::move(fresh);
  }
  local->ResetCounters();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

}  // namespace zipmoe::runtime
