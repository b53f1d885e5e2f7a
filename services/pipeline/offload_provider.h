// OffloadExpertProvider: the ZipMoE runtime in one process (embedded mode): an ExpertProvider
// (common/expert_provider.h) that serves routed experts from a compressed directory under a memory
// budget, bit-identical to ResidentExpertProvider (ZipMoE §3.2–3.4, Fig. 5 data path).
//
// It wires the service libraries together through two seams (the services issue puts each behind
// ZeroMQ): engines.h (reads, decodes) and cache_backend.h (the cache):
//   cache_manager::CacheManager   the arena (one shm region = the budget): F/C/S/E pools sized by the
//                                 planner (plan_builder.h) + staging slots for experts in flight;
//                                 in this process (LocalCacheBackend) or in the cache-manager process
//                                 (remote_cache_backend.h)
//   storage::StorageService       one I/O thread, O_DIRECT reads of E-/SM-chunks into arena slots,
//                                 xxh64-checked (a corrupt chunk fails the layer, naming the tensor)
//   decompressor::DecompressorPool L workers: E-chunk decodes (priority = the scheduler's decode
//                                 rank) and CPU BF16 recovery (checked against the tensor's BF16 hash)
//   scheduler::ScheduleLayer      Algorithm 1: I/O order and decode priorities of each wave
//
// Per MoE layer (BeginLayer → NextReady × n → EndLayer):
//   1. BeginLayer: one CacheBackend::LookupLayer of every selected expert (counts its activation,
//      pins its slot) gives its CompressionState. F hits are ready at once. The others are ordered by the
//      scheduler (Alg. 1 over the whole layer) and started in that order while staging slots are
//      free ("waves": a layer whose experts do not all fit in flight continues as leases are
//      released, so it never deadlocks).
//   2. Starting a wave: ScheduleLayer on the wave's tasks; reads are submitted in io_order (E-chunks
//      before SM-chunks within a block) into the staging slot; a decode op per E-chunk becomes READY
//      when its read completes (at once for cached E-chunks); when a tensor's K decodes are done and
//      its SM plane is present, its recovery op runs (ahead of every decode); when the expert's three
//      tensors are recovered it is ready.
//      With fused_recovery (the CPU executor) there is no recovery op: a tensor is done when its
//      decodes are done and its SM plane is present, and the lease carries the planes instead.
//   3. NextReady: blocks until some expert is ready; hands out a lease on its BF16 weights (staging
//      slot, or the F-pool slot for F hits), in completion order.
//   4. Releasing a lease: CacheManager::Admit places the expert by rank (copying what the pools need
//      from staging), then unpins its cache slot and frees its staging slot, which starts the next
//      wave's expert if any.
//   5. EndLayer: records the layer's measured makespan (BeginLayer → EndLayer wall time) and its
//      Lemma B.3 lower bound computed from the layer's measured operation times (runtime_stats.h).
// Prefetching (OffloadConfig::prefetch, ExpertProvider::Prefetch): the executor's prediction of the
// next MoE layer's experts, best first. Those not in F get a staging slot each, when the active
// layer has none pending, and are read and decoded exactly as a lookup in their state would be
// (M: every chunk read; S/E: the missing part read; C: decodes only), behind every operation of the
// active layer (decode priorities after its ranks). Their cached parts are pinned without an
// activation (CacheManager::Pin); no slot is taken or evicted, so a prefetch never evicts anything,
// pinned or not. BeginLayer of the
// predicted layer adopts the prefetched experts it selected (ready ones are delivered first); the
// others are dropped once their reads and decodes have completed (their bytes are counted as
// wasted). A prefetch that fails (a corrupt chunk) is dropped without failing the active layer; the
// expert is read again, and the error reported, if its layer selects it. With a remote cache (`zipmoe
// up`) the pins are one CacheLookup{pin_only} round trip to the cache-manager, and experts that
// turn out to be in F are released at once.
// Baseline policies (lru/fifo/lfu/full-load) use the same path with a single F pool;
// `scheduler = false` replaces Alg. 1 by the FIFO order (ScheduleLayerBaseline).
//
// Errors surface from NextReady (kCorruption / kIoError naming file, tensor and chunk); the layer is
// then failed: every later call returns the same error until the next BeginLayer, which first waits
// for the failed layer's in-flight operations. Nothing is served from a slot whose bytes failed a
// check: hashes are verified on read (chunks) and after recovery (BF16).
//
// Thread-safety: one thread drives BeginLayer/NextReady/EndLayer (as ExpertProvider requires);
// leases may be released from any thread; stats() from any thread. Internally one mutex (mu_)
// guards the layer state; storage and decompressor callbacks take it; no I/O, decode or copy runs
// under it.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/expert_store.h"
#include "common/mutex.h"
#include "common/status.h"
#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/plan_builder.h"
#include "services/decompressor/decompressor_pool.h"
#include "services/pipeline/cache_backend.h"
#include "services/pipeline/engines.h"
#include "services/pipeline/runtime_stats.h"
#include "services/scheduler/block_scheduler.h"
#include "services/storage/storage_service.h"

namespace zipmoe::runtime {

struct OffloadConfig {
  std::string model_dir;              // compressed directory (zipmoe compress)
  uint64_t memory_budget_bytes = 0;   // the whole arena: cache pools + staging slots
  double memory_budget_percent = 0;   // > 0: the budget is this share (%) of the model's expert
                                      // bytes (in their dtype), in (0, 1000]; replaces memory_budget_bytes
  cache_manager::CachePolicy policy = cache_manager::CachePolicy::kZipMoe;
  std::string pools;                  // Λ; "" = the policy's own (zipmoe FCSE, the others F); another
                                      // policy given more than F gets planned per-layer pools
  // zipmoe policy: fixed byte ratios of the pools (ParsePoolRatios text, e.g. "F=0.5,C=0.5");
  // "" = the planner's grid search (Alg. 4) over Λ.
  std::string pool_ratios;
  std::string trace_path;             // planner workload (routing trace); "" = uniform
  std::string profile_path;           // planner delays; "" = model_dir/profile.json or defaults
  int32_t tolerance = 0;              // δ of the rank thresholds
  int n_workers = 0;                  // L decompression workers; 0 = cores - 1 (at least 1)
  uint32_t staging_slots = 0;         // experts in flight at once; 0 = auto (see ChooseStagingSlots)
  bool page_cache = false;            // buffered reads instead of O_DIRECT
  bool scheduler = true;              // Alg. 1 (true) or FIFO order (false)
  bool verify_recovered = true;       // check each recovered tensor against its manifest xxh64
  // CPU executor: a missed expert is served as its planes (ExpertWeightsView::*_planes: decoded E
  // plane + SM plane in staging) as soon as its decodes are done, with no recovery op; the BF16
  // copy is recovered only if the cache admits the expert into F, while copying it there (by the
  // cache-manager process with a remote cache: CacheAdmitItem::bf16_from_planes). Needs an executor
  // that reads planes (executor::ExpertForward on the CPU; under `zipmoe up` ExpertReady carries the
  // plane offsets). Hits in F are served as BF16 either way.
  bool fused_recovery = false;
  // Register the arena with CUDA (cache_manager::CacheConfig::register_with_cuda), so a GPU executor
  // reads planes and BF16 experts in place through their device alias. Embedded mode with a CUDA
  // device; `up` registers the arena in the executor process instead.
  bool register_with_cuda = false;
  // Pool F on the GPU executor's device (issue 36 item 1; CacheConfig::f_on_device): the cache
  // keeps deciding what is in F, but F's bytes are the executor's device slots, indexed by F slot
  // (ExpertProvider::device_f_slots). F hits are delivered without host bytes
  // (ExpertWeightsView::device_slot, device_slot_holds); an expert F takes at its lookup is delivered
  // as usual plus the slot the executor writes it into. The arena then holds C, S, E and staging
  // only. Needs the GPU executor (MoeForwardDevice); a local cache only (`zipmoe up` keeps the
  // executor's own device cache).
  bool device_f_pool = false;
  // device_f_pool on a discrete GPU: pool F's device bytes, apart from memory_budget_bytes (which then
  // holds C, S, E and the staging slots): F gets floor(bytes / F slot) slots shared equally by the MoE
  // layers (the baselines' single F pool: all of them), and the planner plans the host pools
  // without F. device_f_budget_percent > 0: that share (%) of the model's expert bytes, in (0, 100].
  // Neither set (-1, 0): F is planned within memory_budget_bytes (one memory: a Jetson).
  int64_t device_f_budget_bytes = -1;
  double device_f_budget_percent = 0;
  // How the executor predicts the next layer's experts for prefetching (see the file comment);
  // kNone = no prefetching. With prefetching, staging_slots = 0 chooses twice as many slots.
  PrefetchMode prefetch = PrefetchMode::kNone;
  std::string shm_name;               // arena name; "" = "/zipmoe-arena-<pid>-<n>" (stale ones swept first)
  // zipmoe's own ablation without compression: the cache keeps full BF16 tensors only (Λ = {F},
  // ranked by frequency as usual) and the directory must store its exponents raw (`zipmoe compress
  // --codec none`), so every read moves the BF16 bytes. kInvalidArgument for another codec/policy.
  bool no_compression = false;
  // Where reads and decodes run: empty = this process's threads (CreateLocalEngines); `zipmoe service
  // scheduler` passes the ZeroMQ dispatcher to storage/decompressor processes (worker_dispatcher.h).
  EngineFactory engines;
  // Where the cache lives: empty = in this process (LocalCacheBackend::Create: planner + arena);
  // `zipmoe service scheduler` passes the cache-manager process (remote_cache_backend.h).
  CacheBackendFactory cache;
  // Called by EndLayer with the layer's measured makespan and its Lemma B.3 bound (0 = none), in µs
  // (metrics). Must not call back into the provider.
  std::function<void(int32_t layer_id, double makespan_us, double bound_us)> on_layer_end;
};

// Staging slots chosen when OffloadConfig::staging_slots is 0: as many as a decode step selects
// (top_k) while they take at most a quarter of the budget, and at least one.
// With prefetching on, 2 × top_k (one layer in flight, the next one prefetching).
uint32_t ChooseStagingSlots(uint64_t budget_bytes, uint64_t staging_slot_bytes, int32_t top_k, bool prefetch = false);

class OffloadExpertProvider : public ExpertProvider {
 public:
  // Opens the directory, plans the pools, maps the arena, starts the I/O thread and the workers.
  // With the default arena name it first removes the arenas that dead processes left under that
  // prefix (ShmRegion::ReclaimStale), noting them on stderr (a failed sweep is a warning there).
  // Errors: ExpertStore::Open's / BuildPlan's / CacheManager::Create's; kInvalidArgument for a
  // budget percentage outside (0, 1000], or when the budget is below one staging slot ("memory budget X is below the minimum Y: one expert in flight
  // needs Y bytes"), or bad pools/ratios.
  static Result<std::unique_ptr<OffloadExpertProvider>> Create(const OffloadConfig& config);
  ~OffloadExpertProvider() override;  // Shutdown(); leases must be released first
  // Stops the I/O thread and workers (local or remote): every op not completed fails with
  // kUnavailable, so a NextReady blocked on it returns. Idempotent; nothing works afterwards.
  void Shutdown();
  OffloadExpertProvider(const OffloadExpertProvider&) = delete;
  OffloadExpertProvider& operator=(const OffloadExpertProvider&) = delete;

  Status BeginLayer(const LayerRouting& routing) override;
  Result<std::unique_ptr<ExpertLease>> NextReady() override;
  // True when a recovered (or cache-hit) expert waits in the ready queue, or a failure would be returned.
  bool NextIsReady() const override;
  Status EndLayer(int32_t layer_id) override;
  // The leases' admissions go to the cache together (CacheBackend::HoldAdmits): one CacheAdmit
  // message per batch when the cache is remote. A failed send fails the layer.
  void ReleaseAll(std::vector<std::unique_ptr<ExpertLease>>* leases) override;
  PrefetchMode prefetch_mode() const override;
  int64_t device_f_slots() const override { return cache_->device_f_slots(); }
  void Prefetch(const LayerRouting& predicted) override;
  // Supported (returns true): called at the end of OnReadComplete / OnDecompressComplete, lease
  // releases, Prefetch and BeginLayer when an expert of the active layer became ready or the layer failed.
  bool SetReadyListener(std::function<void()> listener) override;
  // The layer's F-pool residents (CacheBackend::FullResidents; none with a remote cache).
  void CachedExperts(int32_t layer_id, int32_t n_experts, std::vector<uint8_t>* cached) const override;

  // Warm start before the first request (embedded cache only): seeds the cache's frequency ranks
  // from `counts` (counts[layer][expert]: activations in a profiling trace, e.g. the planner's
  // --plan-trace; layers or experts missing count 0) and fills the pools: per MoE layer, its
  // best-ranked experts (count, then lower id), as many as its pools hold (zipmoe: Σ_p capacity of
  // the layer; baselines: the single F pool's slots shared equally by the MoE layers), are read,
  // decoded and admitted through BeginLayer / NextReady / EndLayer like a request, so each lands in
  // the pool its rank selects (ZipMoE §3.4 dispatching). The seeded counts are the preloaded
  // experts' rank order (K - rank for K preloaded, 0 for the others), small enough for the live
  // workload's counts to take over after a few steps. Afterwards the cache's request counters and
  // stats() restart from zero, so hit rates describe requests only; the preload's own work is
  // returned. With pool F on the executor's device (device_f_pool) only C/S/E are preloaded: no
  // executor runs to write F's device slots, so F fills at first use. Errors: kInvalidArgument with
  // a remote cache or a layer begun; BeginLayer /
  // NextReady / EndLayer errors (kCorruption, kIoError naming the chunk).
  struct PreloadStats {
    uint64_t experts = 0;      // experts read and admitted
    uint64_t read_bytes = 0;   // bytes read from storage (incl. padding)
    double seconds = 0;        // wall time
    // "N experts placed by RANKING in S s (M MiB read)": the line the CLI and the cache-manager print.
    std::string Summary(const std::string& ranking) const;
  };
  Result<PreloadStats> Preload(const std::map<int32_t, std::map<int32_t, uint64_t>>& counts);

  // The warm start of the cache-manager service (`zipmoe up`, config `preload`): the cache there is
  // served to the scheduler, so it is filled before the server binds. Creates a runtime with its own
  // LocalCacheBackend from `config` (`config.cache` must be empty), runs Preload(counts) exactly as
  // embedded mode does (same plan, same ranks, same pools), stops its I/O thread and workers and hands
  // the cache over, filled, with the runtime's resolved config (budget, policy, pools). The runtime is
  // gone afterwards; the arena (config.shm_name) stays with the cache. Errors: Create's and Preload's;
  // kInvalidArgument when `config.cache` names another backend.
  struct PreloadedCache {
    std::unique_ptr<LocalCacheBackend> cache;
    OffloadConfig config;  // as resolved by Create (what LocalCacheBackend::Create would leave in *config)
    PreloadStats stats;
  };
  static Result<PreloadedCache> CreatePreloadedCache(const OffloadConfig& config,
                                                     const std::map<int32_t, std::map<int32_t, uint64_t>>& counts);

  // Smallest budget that works for this model: one staging slot (one expert in flight, no cache).
  uint64_t minimum_budget_bytes() const;
  RuntimeStats stats() const;
  // stats() without the cache's counters (no round trip to a remote cache-manager).
  RuntimeStats local_stats() const;
  // The CacheManager; embedded mode only (ZM_CHECK: the cache is in this process).
  const cache_manager::CacheManager& cache() const;
  CacheBackend& cache_backend() const { return *cache_; }
  // Remote cache: only `cost` is filled.
  const cache_manager::PlanBuild& plan() const { return cache_->plan(); }
  const OffloadConfig& config() const { return config_; }

 private:
  class Lease;
  struct TensorWork {
    const ExpertTensorInfo* info = nullptr;  // null: the expert has no tensor for this projection
    std::vector<const uint8_t*> e_src;       // [K] stored E-chunk bytes (cache slot or staging)
    const uint8_t* sm = nullptr;             // [SmPlaneBytes(dtype, numel)] SM plane (cache slot or staging)
    uint8_t* e_plane = nullptr;              // [numel] in staging
    uint8_t* bf16 = nullptr;                 // [numel] values of the expert dtype: recovery output in staging
    const void* weights = nullptr;           // [numel] what the lease serves: bf16, or the F slot
    int decodes_left = 0;
    bool sm_ready = false;
    bool recovering = false;
  };
  // One expert being loaded or served: of the active layer (`current`), or prefetched for a later one.
  struct ExpertWork {
    int32_t layer_id = 0;
    int32_t expert_id = 0;
    int32_t n_tokens = 0;
    CachedExpert lookup;                     // state + lease
    uint32_t staging = SlotArena::kNoSlot;
    uint8_t* staging_base = nullptr;
    std::array<TensorWork, 3> tensors;  // by ExpertProj; tensors[kGate] unused (info null) when !gated_
    int tensors_left = 0;
    bool delivered = false;
    bool released = false;
    bool current = false;   // of the active layer: delivered through NextReady, its errors fail the layer
    bool prefetch = false;  // started by Prefetch (adopted by BeginLayer, or dropped)
    bool done = false;      // every tensor ready
    bool failed = false;    // a prefetch whose op failed: never adopted
    bool dropped = false;   // an unused prefetch: freed when its last op completes
    int32_t ops = 0;        // reads/decodes/recoveries in flight for it
    uint64_t read_bytes = 0;  // bytes read for it (wasted when a prefetch is dropped)
    double delivered_us = 0, released_us = 0;  // since BeginLayer: the lease's hold time is pₙ
  };
  enum class OpKind : uint8_t { kReadE, kReadSm, kDecode, kRecover };
  struct OpRef {
    int32_t expert = 0;  // work id (works_)
    int32_t proj = 0;
    int32_t shard = -1;
    OpKind kind = OpKind::kReadE;
    uint64_t decode_op = 0;  // kReadE: the decode op waiting for this read
  };

  explicit OffloadExpertProvider(OffloadConfig config);
  double NowUs() const ZM_REQUIRES(mu_);  // since BeginLayer
  // Starts pending experts while staging slots are free. Requires mu_; submits under it.
  // Then prefetches (when the active layer has nothing pending).
  Status StartPendingLocked() ZM_REQUIRES(mu_);
  Status StartWaveLocked(const std::vector<int32_t>& wave, bool prefetch) ZM_REQUIRES(mu_);
  int32_t NewWorkLocked(int32_t layer_id, int32_t expert_id) ZM_REQUIRES(mu_);  // work id; tensors found in the store
  // Marks an unused prefetch dropped; frees it now when nothing is in flight for it, and queues its
  // decodes still waiting for a read in cancel_later_.
  void DropPrefetchLocked(int32_t work) ZM_REQUIRES(mu_);
  void FailPrefetchLocked(int32_t work) ZM_REQUIRES(mu_);  // counted as failed, then dropped
  void FreeWorkLocked(int32_t work) ZM_REQUIRES(mu_);  // staging slot + lease released, work erased
  void OpDoneLocked(ExpertWork& w, int32_t work) ZM_REQUIRES(mu_);  // an op of w completed: frees a dropped work
  // A storage / decompressor completion's op: removed from ops_ and counted off its work's ops;
  // nullopt when unknown (already cancelled or never ours).
  std::optional<OpRef> TakeOpLocked(uint64_t op_id) ZM_REQUIRES(mu_);
  // After a completion was handled: a prefetch's op done (frees it once dropped and idle), the
  // decodes to cancel outside mu_ moved to *dropped, waiters woken.
  void EndCompletionLocked(const OpRef& ref, bool current, std::vector<uint64_t>* dropped) ZM_REQUIRES(mu_);
  void CancelDecodes(const std::vector<uint64_t>& ids) ZM_EXCLUDES(mu_);  // without mu_
  void OnReadComplete(const storage::ReadCompletion& c) ZM_EXCLUDES(mu_);
  void OnDecompressComplete(const decompressor::DecompressCompletion& c) ZM_EXCLUDES(mu_);
  void TensorProgressLocked(int32_t expert, int32_t proj) ZM_REQUIRES(mu_);  // recovery or readiness when inputs are in
  // One tensor of w is ready (recovered, or its planes complete): the last one makes w done and,
  // in the active layer without a failure, ready for NextReady.
  void TensorDoneLocked(ExpertWork& w, int32_t work) ZM_REQUIRES(mu_);
  // Gives the works at the front of *queue a staging slot each while slots are free; returns them.
  std::vector<int32_t> TakeStagingLocked(std::deque<int32_t>* queue) ZM_REQUIRES(mu_);
  void FailLocked(const Status& status) ZM_REQUIRES(mu_);
  // Wakes cv_'s waiters only when what they wait for holds: NextReady (an expert ready or an
  // error) and Drain (no op left). A chunk's completion that changes neither wakes nobody: with
  // ~15 chunks per missed expert, waking NextReady's caller for each one cost a context switch per
  // chunk (docs/benchmarks.md (h), "context switches").
  void NotifyWaitersLocked() ZM_REQUIRES(mu_);
  // Calls the ready listener when NotifyWaitersLocked / FailLocked found something for it since the
  // last call. Every method that takes mu_ and may make an expert ready calls it after releasing mu_.
  void CallListenerIfDue() ZM_EXCLUDES(mu_);
  // used false: the executor abandoned the lease (ExpertLease::Abandon): released without admission.
  void OnLeaseReleased(int32_t expert, bool used) ZM_EXCLUDES(mu_);
  // Waits for in-flight ops (failed layer); releases and retakes mu_ (held by the caller's `lock`).
  void DrainLocked(MutexLock* lock) ZM_REQUIRES(mu_);
  void ResetLayerLocked(bool prefetches_too = false) ZM_REQUIRES(mu_);
  // Shutdown(), then every work and prefetch forgotten (their staging slots and leases handed back to
  // the cache): what the destructor does, and CreatePreloadedCache before it takes the cache away.
  void ShutdownAndForgetWork();
  uint64_t OffsetOf(const void* p) const { return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - arena_base_); }
  // One task per projection the experts have (gate/up/down, or up/down when !gated_), expert by
  // expert. *task_refs (optional) gets, per task, its expert's index in `experts` and its projection.
  std::vector<scheduler::ExpertTask> TasksOf(const std::vector<int32_t>& experts,
                                             std::vector<std::pair<int32_t, int32_t>>* task_refs = nullptr) const
      ZM_REQUIRES(mu_);
  // Whether the experts have projection `proj` (ExpertProj value): all three, or up/down when gate-less.
  bool HasProj(int proj) const { return gated_ || proj != static_cast<int>(ExpertProj::kGate); }

  // Constant after Create.
  OffloadConfig config_;
  bool fused_ = false;  // config_.fused_recovery and BF16 experts (the fused kernels read BF16 planes only)
  bool gated_ = true;   // the manifest's experts have a gate (false: switch_transformers' wi/wo = up/down)
  DType dtype_ = DType::kBF16;  // the experts' dtype (cache_->layout().dtype()), what leases carry
  std::unique_ptr<ExpertStore> store_;
  uint8_t* arena_base_ = nullptr;  // cache_->arena_base()
  scheduler::CostModel cost_;
  std::unique_ptr<CacheBackend> cache_;  // declared before the engines: destroyed last
  std::unique_ptr<ReadEngine> storage_;
  std::unique_ptr<DecodeEngine> pool_;

  // The ready listener (SetReadyListener). Held while it runs, so removing it waits for a running call;
  // recursive: the listener's own NextReady / lease releases call CallListenerIfDue again.
  std::recursive_mutex listener_mu_;
  std::function<void()> ready_listener_;  // guarded by listener_mu_

  mutable Mutex mu_;  // guards everything below: the layer state, prefetches, stats
  CondVar cv_;  // waits on mu_: an expert became ready, the last op completed, or the layer failed
  bool listener_due_ ZM_GUARDED_BY(mu_) = false;  // an expert became ready / the layer failed since the last call
  bool active_ ZM_GUARDED_BY(mu_) = false;         // between BeginLayer and EndLayer
  int32_t layer_id_ ZM_GUARDED_BY(mu_) = -1;
  std::unordered_map<int32_t, ExpertWork> works_ ZM_GUARDED_BY(mu_);  // by work id: the active layer's and prefetches
  int32_t next_work_id_ ZM_GUARDED_BY(mu_) = 0;
  std::vector<int32_t> experts_ ZM_GUARDED_BY(mu_);          // the active layer's works, ascending expert id
  std::deque<int32_t> pending_ ZM_GUARDED_BY(mu_);           // not started, scheduler order
  std::deque<int32_t> ready_ ZM_GUARDED_BY(mu_);             // ready, not delivered
  int32_t prefetch_layer_ ZM_GUARDED_BY(mu_) = -1;           // the layer of prefetched_
  std::map<int32_t, int32_t> prefetched_ ZM_GUARDED_BY(mu_);  // expert id -> work id, started or in prefetch_pending_
  std::deque<int32_t> prefetch_pending_ ZM_GUARDED_BY(mu_);  // prefetches waiting for a staging slot, best first
  // Decode ops of dropped prefetches to cancel; every method that takes mu_ and may drop one cancels
  // them after releasing it (the pool's completion callback takes mu_).
  std::vector<uint64_t> cancel_later_ ZM_GUARDED_BY(mu_);
  size_t delivered_ ZM_GUARDED_BY(mu_) = 0;
  std::unordered_map<uint64_t, OpRef> ops_ ZM_GUARDED_BY(mu_);  // in-flight reads/decodes/recoveries by op id
  uint64_t next_op_id_ ZM_GUARDED_BY(mu_) = 1;
  int32_t next_priority_ ZM_GUARDED_BY(mu_) = 0;
  // Decode priorities of prefetches: kPrefetchPriority + a counter, after every active-layer rank.
  static constexpr int32_t kPrefetchPriority = 1 << 29;
  int32_t next_prefetch_priority_ ZM_GUARDED_BY(mu_) = 0;
  Status error_ ZM_GUARDED_BY(mu_);                          // first failure of the layer
  std::chrono::steady_clock::time_point layer_start_ ZM_GUARDED_BY(mu_);
  LayerMeasure measure_ ZM_GUARDED_BY(mu_);                  // the layer's operation times
  RuntimeStats stats_ ZM_GUARDED_BY(mu_);
};

}  // namespace zipmoe::runtime
