// OffloadExpertProvider (offload_provider.h): creation, the layer protocol (BeginLayer / NextReady /
// leases / EndLayer) and statistics. The I/O and decode pipeline is offload_pipeline.cc, Preload
// offload_preload.cc.
#include "services/pipeline/offload_provider.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "common/ipc/shm_region.h"
#include "common/ipc/slot_arena.h"
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
  ~Lease() override { owner_->OnLeaseReleased(expert_, !abandoned_); }
  const ExpertWeightsView& weights() const override { return view_; }
  void Abandon() override { abandoned_ = true; }

 private:
  OffloadExpertProvider* owner_;
  int32_t expert_;
  ExpertWeightsView view_;
  bool abandoned_ = false;
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
  // F32/F16 experts are recovered before compute: the executor's fused kernels read BF16 planes only.
  p->dtype_ = p->cache_->layout().dtype();
  p->fused_ = cfg.fused_recovery && p->dtype_ == DType::kBF16;
  p->gated_ = p->cache_->layout().gated();

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

OffloadExpertProvider::~OffloadExpertProvider() { ShutdownAndForgetWork(); }

void OffloadExpertProvider::ShutdownAndForgetWork() {
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

Status OffloadExpertProvider::BeginLayer(const LayerRouting& routing) {
  const trace::TraceSpan span(
      "layer", [&] { return fmt::format("schedule layer {} ({} experts)", routing.layer_id, routing.expert_ids.size()); },
      trace::Activity::kScheduleLayer);
  MutexLock lock(&mu_);
  if (active_) {
    for (int32_t id : experts_) {
      const ExpertWork& w = works_.at(id);
      if (w.delivered && !w.released) {
        return Status::InvalidArgument(fmt::format("BeginLayer({}): a lease of {} layer {} (expert {}) is still held",
                                                   routing.layer_id, error_.ok() ? "unfinished" : "failed", layer_id_,
                                                   w.expert_id));
      }
    }
    if (error_.ok()) {
      // The executor gave the layer up (an error of its own: a failed device write, a torch error)
      // and released what it took: the experts it never took are dropped without admission, as a
      // failed layer's, so one failed request does not leave the runtime refusing every next one.
      error_ = Status::Unavailable(fmt::format("layer {} given up by the executor", layer_id_));
      ++stats_.abandoned_layers;
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
      if (HasProj(proj) && store_->Find(routing.layer_id, e, static_cast<ExpertProj>(proj)) == nullptr) {
        return Status::NotFound(fmt::format("{}: layer {} expert {} has no {} tensor", config_.model_dir,
                                            routing.layer_id, e, ExpertProjName(static_cast<ExpertProj>(proj))));
      }
    }
  }
  // The step's router scores first (score-based eviction), then one lookup for the whole layer
  // (one round trip when the cache is remote).
  if (!routing.mean_scores.empty()) cache_->ObserveScores(routing.layer_id, routing.mean_scores);
  if (routing.device_epoch != 0) cache_->SetDeviceEpoch(routing.device_epoch);
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
          if (HasProj(proj)) w.tensors[proj].weights = w.lookup.Full(static_cast<ExpertProj>(proj));
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
    std::vector<std::pair<int32_t, int32_t>> task_refs;
    const std::vector<scheduler::ExpertTask> tasks = TasksOf(to_load, &task_refs);
    Result<scheduler::LayerSchedule> sched =
        config_.scheduler ? scheduler::ScheduleLayer(tasks, cost_) : scheduler::ScheduleLayerBaseline(tasks, cost_);
    stats_.schedule_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!sched.ok()) {
      st = sched.status();
    } else {
      std::vector<bool> seen(to_load.size(), false);
      for (int32_t t : sched->task_order) {
        const size_t e = static_cast<size_t>(task_refs.at(static_cast<size_t>(t)).first);
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
  if (!ready_.empty() || !error_.ok()) listener_due_ = true;  // cache hits, an adopted prefetch
  lock.Unlock();
  CancelDecodes(cancel);
  CallListenerIfDue();
  return st;
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
  view.dtype = dtype_;
  const TensorWork& gate = w.tensors[static_cast<int>(ExpertProj::kGate)];
  const TensorWork& up = w.tensors[static_cast<int>(ExpertProj::kUp)];
  const TensorWork& down = w.tensors[static_cast<int>(ExpertProj::kDown)];
  view.gated = gated_;  // a gate-less expert leaves gate / gate_planes null
  if (fused_ && w.lookup.state != CompressionState::kF) {
    if (gated_) view.gate_planes = {gate.e_plane, gate.sm};
    view.up_planes = {up.e_plane, up.sm};
    view.down_planes = {down.e_plane, down.sm};
  } else {
    if (gated_) view.gate = gate.weights;
    view.up = up.weights;
    view.down = down.weights;
  }
  view.device_slot = w.lookup.device_slot;  // pool F on the executor's device (device_f_pool)
  view.device_slot_holds = w.lookup.device_slot >= 0 && !w.lookup.device_fill;
  view.intermediate = up.info->shape.at(0);  // up: [intermediate, hidden]
  view.hidden = up.info->shape.at(1);
  return std::unique_ptr<ExpertLease>(new Lease(this, id, view));
}

void OffloadExpertProvider::OnLeaseReleased(int32_t work, bool used) {
  CacheAdmitRequest request;
  bool admit = false;
  {
    MutexLock lock(&mu_);
    ExpertWork& w = works_.at(work);
    w.released = true;
    w.released_us = NowUs();
    measure_.compute_us[w.expert_id] = w.released_us - w.delivered_us;
    admit = error_.ok() && used;
    request.layer_id = layer_id_;
    request.expert_id = w.expert_id;
    request.lease = w.lookup.lease;
    if (w.lookup.state == CompressionState::kF && w.lookup.device_slot >= 0) {
      // An F hit on the executor's device: no host bytes; the admission only re-ranks it.
    } else if (w.lookup.state == CompressionState::kF) {
      request.parts.bf16 = true;
      for (int proj = 0; proj < cm::kProjCount; ++proj)
        if (HasProj(proj)) request.bf16[proj] = OffsetOf(w.tensors[proj].weights);
    } else {
      request.parts.e = request.parts.sm = request.parts.bf16 = true;
      request.bf16_from_planes = fused_;  // then F admission recovers from the planes
      for (int proj = 0; proj < cm::kProjCount; ++proj) {
        if (!HasProj(proj)) continue;  // an absent gate: no parts (offsets stay 0, the cache skips it)
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
    NotifyWaitersLocked();
  }
  CancelDecodes(dropped);
  CallListenerIfDue();
}

void OffloadExpertProvider::ReleaseAll(std::vector<std::unique_ptr<ExpertLease>>* leases) {
  cache_->HoldAdmits();
  leases->clear();  // OnLeaseReleased each: admission (held), staging slot, next wave
  const Status sent = cache_->FlushAdmits();
  if (!sent.ok()) {
    MutexLock lock(&mu_);
    FailLocked(sent);
    NotifyWaitersLocked();
  }
  CallListenerIfDue();
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
