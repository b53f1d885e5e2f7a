// CacheBackend: what OffloadExpertProvider (offload_provider.h) needs from the expert cache (ZipMoE
// §3.2/§3.4: F/C/S/E pools, residency + pins, frequencies, admission/eviction, staging slots), so
// that the cache can live in this process (LocalCacheBackend: embedded `generate`/`serve`, and the
// cache-manager process itself) or in the cache-manager process (remote_cache_backend.h: `zipmoe up`,
// compose). Mirrors engines.h, which does the same for reads and decodes.
//
// Per MoE layer the provider makes one LookupLayer call (all selected experts; remote: one round
// trip), one Admit per released expert (remote: one-way) and staging acquire/release (remote: local,
// over the slots granted at connect). Every byte address crosses the interface as an *arena offset*
// (bytes from the arena base, the same in every process that maps the arena); CachedExpert also
// gives the pointers in this process's mapping.
//
// Leases: LookupLayer pins each cached expert's slot and returns a lease id; the slot is never
// evicted, moved or freed until Admit (which releases it after the admission) or ReleaseLeases.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/compression_state.h"
#include "common/checkpoint/manifest.h"
#include "common/mutex.h"
#include "common/status.h"
#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/plan_builder.h"

namespace zipmoe::runtime {

struct OffloadConfig;  // offload_provider.h

inline constexpr uint64_t kNoLease = 0;
// AdmitOutcome values are 0 .. kAdmitOutcomeCount - 1 (cache_manager.h).
inline constexpr int kAdmitOutcomeCount = static_cast<int>(cache_manager::AdmitOutcome::kBusy) + 1;

// One expert found by LookupLayer. Pointers lie in this process's arena mapping and stay valid while
// the lease is held; nullptr for parts the state does not cache.
struct CachedExpert {
  CompressionState state = CompressionState::kMiss;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  const cache_manager::ExpertSlotLayout* layout = nullptr;  // owned by the backend
  uint64_t slot_offset = 0;   // cache slot start from the arena base (state != kMiss)
  uint8_t* e_part = nullptr;  // C/E: E part (E-chunk j of proj p at its layout offset)
  uint8_t* sm_part = nullptr; // C/S: SM part
  uint8_t* f_part = nullptr;  // F: F part (full tensors in the layout's dtype)
  uint64_t lease = kNoLease;  // kNoLease for a miss without a device F reservation
  // Pool F on the device (OffloadConfig::device_f_pool, CacheConfig::f_on_device): the executor's
  // device slot of this expert, -1 for none. device_fill false: state kF, the slot holds the expert
  // (no host bytes: f_part is nullptr). device_fill true: F was reserved for it at this lookup
  // (CacheManager::ReserveDeviceF): the executor writes the expert it is served into that slot; Admit
  // commits the reservation, ReleaseLeases of `lease` cancels it.
  int32_t device_slot = -1;
  bool device_fill = false;

  const uint8_t* EChunk(ExpertProj proj, int shard) const;  // [stored bytes] or nullptr
  const uint8_t* Sm(ExpertProj proj) const;                 // [SmPlaneBytes(dtype, numel)] or nullptr
  const uint8_t* Full(ExpertProj proj) const;               // [numel] values of layout dtype, or nullptr
};

// Admission of one expert after it ran (CacheManager::Admit), sources as arena offsets, then the
// release of its lease.
struct CacheAdmitRequest {
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  uint64_t lease = kNoLease;          // released after the admission
  cache_manager::AvailableParts parts;
  std::array<std::vector<uint64_t>, cache_manager::kProjCount> e_chunks;  // [K] per proj
  std::array<uint64_t, cache_manager::kProjCount> sm{};                   // per proj
  std::array<uint64_t, cache_manager::kProjCount> bf16{};                 // per proj: full tensor, layout dtype
  // Fused recovery (OffloadConfig::fused_recovery, BF16 experts only): no recovered BF16 exists; with
  // parts.bf16 the BF16 part is recovered from the decoded exponent planes at `e_plane` and the SM planes at `sm`
  // while it is copied into F (ExpertSources::e_plane); in `zipmoe up` the cache-manager process does
  // it (CacheAdmitItem.bf16_from_planes, services/links/cache_wire.h).
  bool bf16_from_planes = false;
  std::array<uint64_t, cache_manager::kProjCount> e_plane{};              // per proj
};

// Admissions done so far (RuntimeStats::admit_calls / admit_outcomes).
struct AdmitTotals {
  uint64_t calls = 0;
  std::array<uint64_t, kAdmitOutcomeCount> outcomes{};  // by AdmitOutcome value
};

class CacheBackend {
 public:
  virtual ~CacheBackend() = default;

  // Looks up every expert of `expert_ids` (one activation each, in order), pinning the cached ones.
  // *out gets one entry per id, in order. On error nothing stays pinned.
  // Errors: kInvalidArgument (an expert not in the manifest); remote: kDeadlineExceeded /
  // kUnavailable (cache-manager), or an admission of an earlier layer that failed there.
  virtual Status LookupLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                             std::vector<CachedExpert>* out) = 0;
  // As LookupLayer for a prefetch (CacheManager::Pin): pins the cached experts without recording an
  // activation or counting a request. Default (a remote cache): kUnavailable.
  virtual Status PinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, std::vector<CachedExpert>* out) {
    (void)layer_id;
    (void)expert_ids;
    (void)out;
    return Status::Unavailable("PinLayer: the cache lives in another process");
  }
  // Admits the expert (sources must stay untouched until the admission is done: local, on return;
  // remote, when a later round trip is answered — AcquireStaging takes care of staging slots), then
  // releases request.lease. Errors: local, CacheManager::Admit's (kInvalidArgument); remote: send errors.
  virtual Status Admit(const CacheAdmitRequest& request) = 0;
  // Releases leases without admitting (a failed layer). Unknown ids are ignored.
  virtual void ReleaseLeases(const std::vector<uint64_t>& leases) = 0;
  // Admissions between HoldAdmits and the matching FlushAdmits may go to the cache together (remote:
  // one CacheAdmit message instead of one per expert); every other message to the cache, and the
  // outermost FlushAdmits, sends them first, so their order and the staging-slot rule are unchanged.
  // Calls nest. Default (a local cache, which admits on the call): nothing to hold.
  // FlushAdmits errors: remote send errors (the held admissions are lost with the session).
  virtual void HoldAdmits() {}
  virtual Status FlushAdmits() { return Status::Ok(); }

  // Staging slots (cache_manager::StagingLayout), one per expert in flight. kUnavailable when all
  // are taken. A slot handed out holds no pending admission source.
  virtual Result<uint32_t> AcquireStaging() = 0;
  virtual void ReleaseStaging(uint32_t slot) = 0;
  virtual uint64_t StagingOffset(uint32_t slot) const = 0;  // arena offset of the slot
  virtual const cache_manager::StagingLayout& staging_layout() const = 0;
  virtual uint32_t staging_slots() const = 0;

  virtual uint8_t* arena_base() const = 0;  // this process's mapping
  virtual uint64_t arena_bytes() const = 0;
  virtual const std::string& arena_name() const = 0;
  virtual const cache_manager::ModelLayout& layout() const = 0;
  // The plan (remote: only `cost` is filled, from the cache-manager).
  virtual const cache_manager::PlanBuild& plan() const = 0;

  // Errors: remote round trip errors.
  virtual Result<cache_manager::CacheCounters> Counters() = 0;
  virtual AdmitTotals admit_totals() const = 0;
  // The CacheManager when it lives in this process (nullptr for a remote backend).
  virtual const cache_manager::CacheManager* local_manager() const { return nullptr; }
  // The batch's mean router scores of MoE layer `layer_id` ([n_experts]), before its lookups: the
  // input of score-based eviction (CacheManager::ObserveScores). Default (a remote cache): ignored.
  virtual void ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores) {
    (void)layer_id;
    (void)mean_scores;
  }
  // Slots of pool F when they live on the executor's device (CacheConfig::f_on_device), else -1.
  virtual int64_t device_f_slots() const { return -1; }
  // The device epoch of the executor this cache's lookups now serve (LayerRouting::device_epoch; 0:
  // none): a remote cache sends it with every CacheLookup, and the cache-manager empties F when it
  // changes (the slots are another executor's memory: CacheManager::ClearDeviceF). Default (a cache
  // in the executor's own process, whose slots live as long as it): ignored.
  virtual void SetDeviceEpoch(uint64_t epoch) { (void)epoch; }
  // Experts of `layer_id` now in the F pool (served without I/O or decoding), ascending; SMoE
  // substitution's "cached" set. Default (a remote cache): none.
  virtual std::vector<int32_t> FullResidents(int32_t layer_id) const {
    (void)layer_id;
    return {};
  }
};

// Builds the cache of one runtime from its (partly resolved) config and the model's manifest; may
// resolve fields of *config (budget percentage, staging_slots, pools, policy). OffloadConfig::cache;
// empty = CreateLocalCacheBackend.
using CacheBackendFactory =
    std::function<Result<std::unique_ptr<CacheBackend>>(OffloadConfig* config, const Manifest& manifest)>;

// The cache in this process: a CacheManager plus its lease table.
class LocalCacheBackend : public CacheBackend {
 public:
  // Resolves the budget (percentage), checks --no-compression, chooses the staging slots, plans the
  // pools (plan_builder.h, Alg. 4) and creates the CacheManager with its arena (config->shm_name).
  // Errors: kInvalidArgument (budget below one staging slot, percentage outside (0, 1000], bad
  // pools/ratios/no-compression), BuildPlan's, CacheManager::Create's.
  static Result<std::unique_ptr<LocalCacheBackend>> Create(OffloadConfig* config, const Manifest& manifest);
  ~LocalCacheBackend() override;  // releases the leases still held

  Status LookupLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                     std::vector<CachedExpert>* out) override;
  Status PinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, std::vector<CachedExpert>* out) override;
  // Also checks every source range lies in the arena (kInvalidArgument: peers send offsets).
  Status Admit(const CacheAdmitRequest& request) override;
  // As Admit, with the outcome.
  Result<cache_manager::AdmitResult> AdmitWithResult(const CacheAdmitRequest& request);
  void ReleaseLeases(const std::vector<uint64_t>& leases) override;
  Result<uint32_t> AcquireStaging() override { return manager_->AcquireStaging(); }
  void ReleaseStaging(uint32_t slot) override { manager_->ReleaseStaging(slot); }
  uint64_t StagingOffset(uint32_t slot) const override;
  const cache_manager::StagingLayout& staging_layout() const override { return manager_->staging_layout(); }
  uint32_t staging_slots() const override { return manager_->staging_slots(); }
  uint8_t* arena_base() const override { return manager_->arena_base(); }
  uint64_t arena_bytes() const override { return manager_->arena_bytes(); }
  const std::string& arena_name() const override { return manager_->config().shm_name; }
  const cache_manager::ModelLayout& layout() const override { return manager_->layout(); }
  const cache_manager::PlanBuild& plan() const override { return plan_; }
  Result<cache_manager::CacheCounters> Counters() override { return manager_->Counters(); }
  AdmitTotals admit_totals() const override;
  const cache_manager::CacheManager* local_manager() const override { return manager_.get(); }
  void ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores) override {
    manager_->ObserveScores(layer_id, mean_scores);
  }
  std::vector<int32_t> FullResidents(int32_t layer_id) const override {
    return manager_->Residents(layer_id, cache_manager::Pool::kF);
  }
  int64_t device_f_slots() const override {
    return manager_->config().f_on_device ? static_cast<int64_t>(manager_->pool_slots(cache_manager::Pool::kF)) : -1;
  }
  cache_manager::CacheManager& manager() { return *manager_; }
  // Whether LookupLayer reserves device F slots (CacheConfig::f_on_device; on by default). Off while
  // the runtime preloads without an executor: nothing would write those slots.
  void set_reserve_device_f(bool on) { reserve_device_f_.store(on); }
  uint64_t leases_held() const;
  // Warm start (OffloadExpertProvider::Preload): CacheManager::SeedFrequencies.
  Status SeedFrequencies(int32_t layer_id, const std::vector<uint64_t>& counts) {
    return manager_->SeedFrequencies(layer_id, counts);
  }
  // Zeroes the cache's request/admission counters and the admission totals (not residency).
  void ResetCounters();

 private:
  LocalCacheBackend() = default;
  Status LookupOrPinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, bool activation,
                          std::vector<CachedExpert>* out);

  cache_manager::PlanBuild plan_;
  std::unique_ptr<cache_manager::CacheManager> manager_;  // outlives leases_ (declared first)
  std::atomic<bool> reserve_device_f_{true};
  mutable Mutex mu_;  // guards leases_, next_lease_, totals_
  std::unordered_map<uint64_t, cache_manager::SlotLease> leases_ ZM_GUARDED_BY(mu_);
  // Lease ids of device F reservations (CachedExpert::device_fill) -> (layer, expert): committed by
  // Admit, cancelled by ReleaseLeases.
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> reservations_ ZM_GUARDED_BY(mu_);
  uint64_t next_lease_ ZM_GUARDED_BY(mu_) = 1;
  AdmitTotals totals_ ZM_GUARDED_BY(mu_);
};

}  // namespace zipmoe::runtime
