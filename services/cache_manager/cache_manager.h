// CacheManager: the compression-aware expert cache (ZipMoE §3.2, §3.4). It owns the shared-memory
// arena (common/ipc/slot_arena.h) carved into the pools F (full tensors in the model's expert dtype: BF16,
// F16 or F32, ModelLayout::dtype), C (E-chunks + SM-chunks),
// S (SM-chunks) and E (E-chunks), the residency + pin table, the runtime activation frequency per
// (layer, expert), and the dispatching/eviction policy.
//
// Capacities are per layer (CachePlan, in experts; the planner plans each MoE layer): pool p of
// layer l holds at most capacity[l][p] experts of that layer. The arena has one slot class per pool,
// n_slots = Σ_l capacity[l][p], slot size ModelLayout::slot_bytes(p); the arena never exceeds
// CacheConfig::budget_bytes (checked at Create). One expert lives in at most one pool.
//
// Use, per MoE layer (the runtime integrator's loop):
//   1. Lookup(layer, expert) for each selected expert: counts one activation (frequency), counts a
//      request of the pool it is found in (or a miss), and returns its CompressionState, pointers to
//      the cached bytes, and a SlotLease pinning them. Keep the lease until the layer is done: a
//      pinned slot is never evicted, moved or freed.
//   2. Read/decode/recover whatever the state lacks (compression_state.h: NeedsSmRead, ...).
//   3. Admit(layer, expert, parts, sources) after the expert ran: the expert goes to the first pool
//      i of F ≺ C ≺ S ≺ E (within the enabled set Λ) with rank r < τ_i = Σ_{j ≤ i} S_j + δ whose bytes
//      are available (`parts` plus what it already has cached). A full pool evicts its least
//      frequent unpinned expert (ties: least recently used) if that one ranks behind the newcomer;
//      if none can be evicted (all pinned, or all rank ahead) the next pool is tried — admission
//      never blocks. Experts ranked past every threshold are not cached (and leave their pool).
//      The bytes are copied into the slot outside the lock.
//   4. Drop the leases (SlotLease destructor, or Release()).
// Baseline policies (CachePolicy) use the same calls: lru / fifo / lfu / marking keep full BF16 tensors in a
// single global F pool of floor(budget / F slot bytes) experts (MoE-Infinity-like), full-load
// caches nothing. What differs between policies (admission candidates, victim choice) lives in
// services/cache_manager/policies/, one file per policy, behind CachePolicyRules (policy.h); this
// class is the mechanism they share.
//
// Thread-safety: every method may be called from any thread. One mutex (mu_) guards all tables:
// residency, slot states and pins, arena free lists, frequencies, counters. No I/O and no byte
// copies happen under it. Leases must be released before the CacheManager is destroyed
// (ZM_CHECKed in the destructor).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/compression_state.h"
#include "common/checkpoint/manifest.h"
#include "common/mutex.h"
#include "common/ipc/slot_arena.h"
#include "common/status.h"
#include "kernels/host_registration.h"
#include "services/cache_manager/expert_frequency.h"
#include "services/cache_manager/policies/policy.h"
#include "services/cache_manager/pool_layout.h"

namespace zipmoe::cache_manager {

enum class CachePolicy : uint8_t {
  kZipMoe = 0,    // rank-based dispatching over F/C/S/E (ZipMoE §3.4)
  kLru = 1,       // full-tensor cache, evict least recently used
  kFifo = 2,      // full-tensor cache, evict first inserted
  kLfu = 3,       // full-tensor cache, evict least frequently used (ties: least recently used)
  kFullLoad = 4,  // no cache: every request is a miss
  kMarking = 5,   // full-tensor cache, the Marking paging algorithm (Fiat et al. 1991): a request marks
                  // its expert (hit, or miss once admitted); a full cache evicts a uniformly random
                  // unmarked unpinned expert (CacheConfig::marking_seed), and when every resident is
                  // marked, unmarks all first (a new phase)
  kDali = 6,      // DALI's workload-aware cache replacement (dali.txt §4.3, Alg. 2), adapted to
                  // caching after use: one F pool per MoE layer (the F slots shared equally), each
                  // expert's workload score = its activations among the layer's last
                  // CacheConfig::workload_window lookups (w_size tokens × top-k); a full pool gives
                  // its lowest-scored unpinned resident (ties: least recently used) to an expert that
                  // ran and scores higher (or equal and more recent), at most
                  // CacheConfig::replacements_per_window times per window (u_size)
  kSmoe = 7,      // SMoE's score-based eviction (importance-driven-expert-scheduling §IV-B Eq. 3):
                  // one global F pool; a full pool evicts the unpinned resident with the lowest mean
                  // router score over its layer's last CacheConfig::score_window steps (inactive
                  // steps count their score too; ties: least recently used)
  kCoServe = 8,   // CoServe's two-stage eviction (coserve.txt §4.3): one global F pool; a full pool
                  // evicts first among residents no running request depends on (not selected in
                  // its layer's latest step), then among the rest; within a stage the lowest
                  // pre-assessed usage probability per byte (activation count, seeded from the
                  // profiling trace, over the layer's lookups; ties: least recently used)
};
// "zipmoe", "lru", "fifo", "lfu", "full-load", "marking", "dali", "smoe", "coserve".
const char* CachePolicyName(CachePolicy policy);
// Errors: kInvalidArgument naming the text and the accepted names.
Result<CachePolicy> ParseCachePolicy(const std::string& text);
// Λ (CacheConfig::pools) is parsed by ParsePoolSet (services/cache_manager/planner.h).

// The pools a policy runs with, from the --pools text ("" = the policy's own: zipmoe FCSE, the
// others F), and whether the planner sizes them per layer: zipmoe's own, or any other policy given
// pools beyond F (CacheConfig::pools_from_plan). Errors: kInvalidArgument for full-load given pools
// beyond F (it caches nothing).
struct PolicyPools {
  std::string pools;
  bool planned = false;
};
Result<PolicyPools> ResolvePolicyPools(CachePolicy policy, const std::string& pools);

struct CacheConfig {
  CachePolicy policy = CachePolicy::kZipMoe;
  uint64_t budget_bytes = 0;     // arena bytes; the pools' slots must fit (kInvalidArgument if not)
  std::string shm_name;          // arena ShmRegion name ("/zipmoe-arena-<pid>"); "" = unbacked
                                 // (slot accounting only, pointers are nullptr: simulations, tests)
  CachePlan plan;                // kZipMoe or pools_from_plan: capacity[layer][pool] in experts, one row per layer
  std::string pools = "FCSE";    // kZipMoe or pools_from_plan: Λ; pools outside Λ must have capacity 0
  // Any other caching policy: per-layer F/C/S/E pools from `plan` with ZipMoE's rank-based admission
  // (§3.4 Pool Dispatching), the policy choosing the victim within each pool (issue 17 item 5;
  // policies/policy.h PlannedPoolsRules). kFullLoad: kInvalidArgument from Create.
  bool pools_from_plan = false;
  int32_t tolerance = 0;         // δ >= 0, added to every threshold τ_i
  bool register_with_cuda = false;  // cudaHostRegister the arena (kernels/host_registration.h);
                                    // ignored when unbacked; failure fails Create (kUnavailable)
  // In-flight reconstruction buffers ("staging slots", one per expert being read/decoded/recovered
  // at once), carved from the same arena and counted in budget_bytes: each is StagingSlotBytes()
  // (see StagingLayout). The pools get what is left. 0 = none (cache-only uses, tests).
  uint32_t staging_slots = 0;
  uint64_t marking_seed = 0;  // kMarking only: seeds the victim choice (std::mt19937_64), deterministic
  // kDali only: capacity[layer][F] in `plan` (DaliPlan), the sliding window of lookups per layer the
  // workload scores count (w_size × top-k; DALI's w_size = 4), and u_size, the replacements a layer
  // may make per window (≥ 1).
  int32_t workload_window = 16;
  int32_t replacements_per_window = 4;
  // kSmoe only: n, the steps (tokens, or batches) of router scores each expert's eviction score
  // averages (SMoE Eq. 3), >= 1.
  int32_t score_window = 4;
  // Pool F on the device (issue 36 item 1, the GPU executor): this manager keeps deciding what is in
  // F (same capacities, ranks, victims, counters) but F's bytes live in device memory owned by the
  // executor, one device slot per F slot index; the arena carves no bytes for F (C, S, E and the
  // staging slots stay in the arena). An expert enters F only through ReserveDeviceF at its lookup
  // (the executor then writes its BF16 straight into that device slot) and the Admit that commits it;
  // Admit never copies host bytes into F. Lookups of F residents return no F bytes, only
  // ExpertLookup::device_slot.
  bool f_on_device = false;
  // f_on_device with a device budget apart from budget_bytes (a discrete GPU's --device-memory-budget):
  // a global F pool (the baselines) gets device_f_bytes / F slot stride slots instead of what
  // budget_bytes leaves after staging; per-layer plans carry their own F capacities. -1: F is planned
  // within budget_bytes (one memory, a Jetson).
  int64_t device_f_bytes = -1;
};

// kDali's plan: the F slots that fit in `pool_bytes` (slot stride of `layout`), shared equally by
// the layers with experts (the first layers get the remainder), at most a layer's experts each.
CachePlan DaliPlan(const ModelLayout& layout, uint64_t pool_bytes);

// Byte layout of one staging slot (ZipMoE §3.1 Fig. 5 ➎-➐ for one expert in flight). Offsets from
// the slot start; every region 4 KiB-aligned so chunks can be O_DIRECT destinations:
//   [0, e_sm_bytes)            the expert's E-chunks then SM-chunks, exactly as in a C-pool slot
//                              (ExpertSlotLayout offsets; SM part at layout.SmPartOffset(kC))
//   [e_plane_offset, +e)       decoded exponent planes: proj p at e_plane_offset + e_plane.offset
//                              ([numel] uint8 each; pool_layout.h), e = layout.e_plane_slot_bytes()
//   [bf16_offset, +f)          the recovered tensors in the expert dtype: proj p at bf16_offset +
//                              bf16.offset ([numel] uint16 BF16/F16, uint32 F32, uint8 F8_E4M3, or
//                              MXFP4's blocks then scales)
// (f = slot_bytes(F).)
struct StagingLayout {
  uint64_t e_sm_bytes = 0;      // slot_bytes(C)
  uint64_t e_plane_offset = 0;  // = e_sm_bytes
  uint64_t bf16_offset = 0;     // e_plane_offset + AlignSlotBytes(slot_bytes(F) / s)
  uint64_t slot_bytes = 0;      // bf16_offset + slot_bytes(F)
  static StagingLayout ForModel(const ModelLayout& layout);
};

class CacheManager;

// Pins one cache slot while alive (style.md "Pins are leases"). Move-only; empty after a move or
// Release(). Must not outlive its CacheManager.
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(SlotLease&& other) noexcept;
  SlotLease& operator=(SlotLease&& other) noexcept;
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() { Release(); }

  void Release();  // unpins now; idempotent
  bool valid() const { return manager_ != nullptr; }
  Pool pool() const { return pool_; }
  uint32_t slot() const { return slot_; }

 private:
  friend class CacheManager;
  SlotLease(CacheManager* manager, Pool pool, uint32_t slot) : manager_(manager), pool_(pool), slot_(slot) {}
  CacheManager* manager_ = nullptr;
  Pool pool_ = Pool::kF;
  uint32_t slot_ = SlotArena::kNoSlot;
};

// What Lookup found for one expert. The byte pointers stay valid while `lease` is held; they are
// nullptr for parts the state does not cache, and always in an unbacked arena.
struct ExpertLookup {
  CompressionState state = CompressionState::kMiss;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  const ExpertSlotLayout* layout = nullptr;  // chunk offsets; owned by the manager (lives as long)
  uint8_t* e_part = nullptr;     // C/E: start of the E part (E-chunk j of proj p at layout offset)
  uint8_t* sm_part = nullptr;    // C/S: start of the SM part
  uint8_t* f_part = nullptr;     // F: start of the F part (full tensors, layout dtype)
  uint64_t slot_offset = 0;      // slot start from the arena base (for processes that Attach it)
  // CacheConfig::f_on_device, state kF: the F slot index, i.e. the executor's device slot that holds
  // the expert (f_part is nullptr then). -1 otherwise.
  int32_t device_slot = -1;
  SlotLease lease;               // empty for a miss

  // Cached bytes of one chunk / tensor, or nullptr when not cached here (or proj absent).
  const uint8_t* EChunk(ExpertProj proj, int shard) const;   // [stored bytes]
  const uint8_t* Sm(ExpertProj proj) const;                  // [numel] sign|mantissa
  const uint8_t* Full(ExpertProj proj) const;                // [numel] values of the expert dtype
};

// Which parts of an expert (all its tensors) are in memory after it ran, and where. In a backed
// arena every flagged part needs its pointers for each present projection (kInvalidArgument
// otherwise); in an unbacked arena the flags alone suffice.
struct AvailableParts {
  bool e = false;     // all E-chunks (stored, compressed bytes)
  bool sm = false;    // all SM-chunks
  bool bf16 = false;  // the recovered full tensors (expert dtype; named when all were BF16)
};
struct ExpertSources {
  std::array<std::vector<const uint8_t*>, kProjCount> e_chunks;  // [K] per proj: stored bytes
  std::array<const uint8_t*, kProjCount> sm{};                   // [numel] per proj
  std::array<const void*, kProjCount> bf16{};                    // [numel] per proj, expert dtype
  // [numel] per proj: the decoded exponent plane. Where bf16[proj] is null, the full tensor is
  // recovered from e_plane + sm (the dtype's CPU fast path, kernels::RecoverCpu) while it is copied
  // into the F pool (fused recovery: the CPU executor computed from the planes, so no recovered copy
  // exists; BF16 only in practice).
  std::array<const uint8_t*, kProjCount> e_plane{};
};

enum class AdmitOutcome : uint8_t {
  kPlaced,   // was not cached; now in `pool`
  kMoved,    // was cached in another pool; now in `pool` (the old slot is freed once unpinned)
  kStayed,   // already in the pool its rank selects, or no better placement is possible
  kRemoved,  // ranked past every threshold: taken out of its pool (freed once unpinned)
  kDropped,  // not cached before or after (past every threshold, or no pool could take it)
  kBusy,     // another Admit of the same expert is in flight; nothing done
};
const char* AdmitOutcomeName(AdmitOutcome outcome);

struct AdmitResult {
  AdmitOutcome outcome = AdmitOutcome::kDropped;
  CompressionState state = CompressionState::kMiss;  // after the call
  int32_t rank = -1;        // frequency rank used (kZipMoe), -1 for baselines
  int32_t evictions = 0;    // experts evicted to make room
  int32_t pinned_skips = 0; // pools skipped because every evictable candidate was pinned
};

struct PoolCounters {
  uint64_t requests = 0;          // Lookups served from this pool (hits)
  uint64_t admissions = 0;        // experts placed into this pool (new or moved in)
  uint64_t evictions = 0;         // experts evicted from this pool to make room
  uint64_t removals = 0;          // experts leaving by rank (moved out or ranked past all τ)
  uint64_t resident_experts = 0;  // now, linked to their (layer, expert)
  uint64_t resident_bytes = 0;    // now: allocated slots × slot stride (incl. filling/retired)
  uint64_t capacity_bytes = 0;    // arena bytes reserved for the pool
};

struct CacheCounters {
  uint64_t lookups = 0;
  uint64_t misses = 0;
  uint64_t drops = 0;           // Admits that left the expert uncached
  uint64_t pinned_skips = 0;    // admissions into a pool skipped because of pins
  std::array<PoolCounters, kPoolCount> pools{};  // by PoolIndex
  // Per layer: requests by CompressionState value (index 0 = miss, then E, S, C, F).
  std::vector<std::array<uint64_t, 5>> layer_requests;
  uint64_t HitsTotal() const;
};

class CacheManager {
 public:
  // Builds the layout from `manifest`, validates the plan (one row per layer; capacity 0 outside Λ
  // and on layers without experts; Σ_p capacity ≤ experts of the layer; non-negative) and maps the
  // arena. Errors: kInvalidArgument (plan, Λ, tolerance, budget too small), ShmRegion/HostRegistration
  // errors (kIoError, kUnavailable, ...).
  static Result<std::unique_ptr<CacheManager>> Create(const Manifest& manifest, const CacheConfig& config);
  ~CacheManager();  // ZM_CHECK: no live SlotLease
  CacheManager(const CacheManager&) = delete;
  CacheManager& operator=(const CacheManager&) = delete;

  // One activation of (layer, expert) + its cached form, pinned. Errors: kInvalidArgument
  // (unknown layer/expert).
  Result<ExpertLookup> Lookup(int32_t layer_id, int32_t expert_id);
  // As Lookup, for a prefetch: pins the cached slot (if any) but records no activation (frequency,
  // last use, marking) and counts no request, so a wrong prediction changes no policy decision.
  // Errors: kInvalidArgument (unknown layer/expert).
  Result<ExpertLookup> Pin(int32_t layer_id, int32_t expert_id);
  // The batch's mean router scores of every expert of `layer_id` ([n_experts] float32 softmax
  // probabilities) for the step about to look its experts up: handed to the policy (score-based
  // eviction, CachePolicyRules::OnScores). Ignored for unknown layers.
  void ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores);
  // Current state; no counters, no frequency, no pin. kMiss for unknown experts.
  CompressionState Peek(int32_t layer_id, int32_t expert_id) const;
  // Places the expert by rank after it ran (see the file comment). Copies from `sources` (or from
  // its current slot) into the new slot without holding the lock. Errors: kInvalidArgument (unknown
  // expert; flagged part without pointers in a backed arena).
  Result<AdmitResult> Admit(int32_t layer_id, int32_t expert_id, AvailableParts parts,
                            const ExpertSources& sources = {});

  // CacheConfig::f_on_device only: decides at the expert's lookup (after Lookup counted its
  // activation, before it runs) whether it enters F, with Admit's rule for pool F alone: F among the
  // policy's candidates for it, and room or a victim the policy gives up (evicted now). Returns the
  // F slot taken (kFilling, pinned until the commit; the executor writes the expert's BF16 into that
  // device slot while computing it), or -1 when F does not take it now (already in F, another
  // admission in flight, F not a candidate, or no victim): its Admit then places it in C/S/E as
  // usual. The next Admit of the expert commits the reservation whatever its parts (the expert leaves
  // its old pool: kMoved, or kPlaced); CancelDeviceF drops it (a failed layer). Errors:
  // kInvalidArgument (unknown expert), kInvalidArgument (f_on_device is off).
  Result<int32_t> ReserveDeviceF(int32_t layer_id, int32_t expert_id);
  // Drops a reservation of ReserveDeviceF that will not be committed; no-op when there is none.
  void CancelDeviceF(int32_t layer_id, int32_t expert_id);
  // CacheConfig::f_on_device only: F's device slots no longer hold what F records (they belonged to
  // an executor that was replaced: new process, new device memory; `zipmoe up`, CacheLookup.
  // device_epoch). Every F resident leaves F (a removal; a pinned one's slot is freed when unpinned)
  // and every pending reservation is cancelled, so no lookup names a slot as holding an expert before
  // the new executor wrote it. Returns the experts taken out of F. 0 without f_on_device.
  int64_t ClearDeviceF();

  // Frequency statistics (copies, under the lock).
  uint64_t Frequency(int32_t layer_id, int32_t expert_id) const;
  int32_t Rank(int32_t layer_id, int32_t expert_id) const;
  std::vector<uint64_t> SortedCounts(int32_t layer_id) const;
  // τ_i of layer `layer_id` (kZipMoe): Σ_{j ≤ i, j ∈ Λ} S_j + δ; 0 for pools outside Λ.
  std::array<int32_t, kPoolCount> Thresholds(int32_t layer_id) const;
  // Experts of `layer_id` now resident in `p`, ascending id.
  std::vector<int32_t> Residents(int32_t layer_id, Pool p) const;

  CacheCounters Counters() const;
  void ResetCounters();  // zeroes request/admission/eviction counts (not residency, not frequency)
  // Warm start of the rank order (OffloadExpertProvider::Preload): the activation count of expert e
  // of `layer_id` becomes counts[e] for every e < counts.size(), its last use 0. Residency is not
  // touched. Errors: kInvalidArgument (layer outside the layout, more counts than experts).
  Status SeedFrequencies(int32_t layer_id, const std::vector<uint64_t>& counts);
  uint64_t LivePins() const;

  const ModelLayout& layout() const { return layout_; }
  const CacheConfig& config() const { return config_; }
  // The arena's base and size (nullptr / 0 when unbacked); ShmRegion name in config().shm_name.
  uint8_t* arena_base() const { return arena_->base(); }
  uint64_t arena_bytes() const { return arena_->mapped_bytes(); }
  // Slots of pool p over all layers (with f_on_device, F's are the executor's device slots).
  uint32_t pool_slots(Pool p) const { return arena_->n_slots(PoolIndex(p)); }
  // Capacity of pool p for layer l (global baselines: the whole pool, for any l).
  int32_t Capacity(int32_t layer_id, Pool p) const;
  // True when capacities are per layer (zipmoe, dali), false for one global pool (the baselines).
  bool per_layer_pools() const { return !Global(); }
  // Staging slots (CacheConfig::staging_slots, StagingLayout). Acquire/Release are O(1) under mu_.
  const StagingLayout& staging_layout() const { return staging_layout_; }
  uint32_t staging_slots() const { return config_.staging_slots; }
  // Errors: kUnavailable when every staging slot is taken.
  Result<uint32_t> AcquireStaging();
  void ReleaseStaging(uint32_t slot);  // ZM_CHECK: slot was acquired
  uint8_t* StagingData(uint32_t slot) const;  // nullptr when unbacked
  // Non-null when register_with_cuda succeeded: device aliases of arena pointers (DevicePointerOf).
  const kernels::HostRegistration* host_registration() const { return registration_.get(); }

 private:
  friend class SlotLease;
  enum class SlotState : uint8_t { kFree, kFilling, kResident, kRetired };
  struct SlotInfo {
    SlotState state = SlotState::kFree;
    int32_t layer_id = -1;
    int32_t expert_id = -1;
    uint32_t pins = 0;
    uint64_t inserted_tick = 0;  // FIFO order
  };
  struct Entry {
    int8_t pool = -1;  // PoolIndex of the resident slot, -1 = not cached
    uint32_t slot = SlotArena::kNoSlot;
    bool admitting = false;  // an Admit is copying bytes for this expert (or a device F slot is reserved)
    uint32_t reserved_f = SlotArena::kNoSlot;  // ReserveDeviceF's slot until committed or cancelled
  };
  struct Placement;  // decided under the lock, carried out of it

  CacheManager() = default;
  Result<ExpertLookup> LookupOrPin(int32_t layer_id, int32_t expert_id, bool activation);
  bool Known(int32_t layer_id, int32_t expert_id) const;
  Entry& EntryOf(int32_t layer_id, int32_t expert_id) ZM_REQUIRES(mu_) { return entries_[Index(layer_id, expert_id)]; }
  const Entry& EntryOf(int32_t layer_id, int32_t expert_id) const ZM_REQUIRES(mu_) { return entries_[Index(layer_id, expert_id)]; }
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * layout_.n_experts() + expert_id;
  }
  bool Global() const { return !rules_->per_layer(); }
  PolicyView View() const ZM_REQUIRES(mu_) { return PolicyView{frequency_, config_, enabled_}; }

  // All *Locked methods require mu_ held.
  void UnpinLocked(Pool p, uint32_t slot) ZM_REQUIRES(mu_);
  bool HasRoomLocked(int32_t layer_id, Pool p) const ZM_REQUIRES(mu_);
  // Victim in pool p for (layer, expert) or kNoSlot (rules_->PickVictim over the scope's residents);
  // sets *pinned_blocked when a pin prevented one.
  uint32_t PickVictimLocked(int32_t layer_id, int32_t expert_id, Pool p, bool* pinned_blocked) ZM_REQUIRES(mu_);
  void EvictLocked(Pool p, uint32_t slot) ZM_REQUIRES(mu_);         // unpinned resident: unlink + free
  // Whether pool p has room for (layer, expert), after evicting the policy's victim if it is full;
  // counts an eviction, or a pinned skip when pins blocked every victim, in *result and counters_.
  bool MakeRoomLocked(int32_t layer_id, int32_t expert_id, Pool p, AdmitResult* result) ZM_REQUIRES(mu_);
  void DetachLocked(int32_t layer_id, int32_t expert_id) ZM_REQUIRES(mu_);  // unlink; free now or when unpinned
  uint32_t TakeSlotLocked(Pool p, int32_t layer_id, int32_t expert_id) ZM_REQUIRES(mu_);  // kFilling, pinned once
  void ReleaseSlotLocked(Pool p, uint32_t slot) ZM_REQUIRES(mu_);   // back to the arena
  Status DecideLocked(int32_t layer_id, int32_t expert_id, AvailableParts have, Placement* out) ZM_REQUIRES(mu_);
  void CopyParts(const Placement& placement, const ExpertSources& sources) const;  // no lock
  // Admit of an expert holding a ReserveDeviceF slot: that slot becomes its F residence.
  AdmitResult CommitDeviceFLocked(int32_t layer_id, int32_t expert_id) ZM_REQUIRES(mu_);
  // Drops the entry's ReserveDeviceF slot (CancelDeviceF, ClearDeviceF); no-op without one.
  void CancelReservationLocked(Entry& entry) ZM_REQUIRES(mu_);

  // Constant after Create.
  CacheConfig config_;
  ModelLayout layout_;
  std::array<bool, kPoolCount> enabled_{};
  std::vector<int32_t> experts_in_layer_;  // [n_layers] experts with tensors in the manifest
  std::unique_ptr<SlotArena> arena_;  // pool index = PoolIndex(p); bytes used outside mu_ under pins
  std::unique_ptr<CachePolicyRules> rules_;  // the policy's decisions; called under mu_ only
  std::unique_ptr<kernels::HostRegistration> registration_;
  StagingLayout staging_layout_;

  mutable Mutex mu_;  // guards everything below
  std::vector<Entry> entries_ ZM_GUARDED_BY(mu_);  // [layers*experts]
  std::array<std::vector<SlotInfo>, kPoolCount> slots_ ZM_GUARDED_BY(mu_);  // [n_slots]
  std::vector<std::array<int32_t, kPoolCount>> occupancy_ ZM_GUARDED_BY(mu_);  // slots per layer
  ExpertFrequency frequency_ ZM_GUARDED_BY(mu_);
  uint64_t tick_ ZM_GUARDED_BY(mu_) = 0;  // Lookup clock
  uint64_t insert_seq_ ZM_GUARDED_BY(mu_) = 0;  // FIFO clock
  uint64_t live_pins_ ZM_GUARDED_BY(mu_) = 0;
  CacheCounters counters_ ZM_GUARDED_BY(mu_);
};

}  // namespace zipmoe::cache_manager
