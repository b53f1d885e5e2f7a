// CacheManager (cache_manager.h): policy names, leases and lookups, creation from the manifest and the
// plan, staging slots, lookups / pins, frequencies and statistics. Admission and eviction are
// cache_admission.cc.
#include "services/cache_manager/cache_manager.h"

#include "kernels/recovery.h"
#include "services/cache_manager/cache_manager_internal.h"
#include "services/cache_manager/planner.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::cache_manager {

using internal::Fillable;
using internal::PartsOf;
using internal::PoolAt;

namespace {

constexpr int kStateCount = 5;  // CompressionState values kMiss..kF

}  // namespace

const char* CachePolicyName(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kZipMoe: return "zipmoe";
    case CachePolicy::kLru: return "lru";
    case CachePolicy::kFifo: return "fifo";
    case CachePolicy::kLfu: return "lfu";
    case CachePolicy::kFullLoad: return "full-load";
    case CachePolicy::kMarking: return "marking";
    case CachePolicy::kDali: return "dali";
    case CachePolicy::kSmoe: return "smoe";
    case CachePolicy::kCoServe: return "coserve";
  }
  return "?";
}

Result<CachePolicy> ParseCachePolicy(const std::string& text) {
  for (CachePolicy p : {CachePolicy::kZipMoe, CachePolicy::kLru, CachePolicy::kFifo, CachePolicy::kLfu,
                        CachePolicy::kFullLoad, CachePolicy::kMarking, CachePolicy::kDali, CachePolicy::kSmoe,
                        CachePolicy::kCoServe}) {
    if (text == CachePolicyName(p)) return p;
  }
  return Status::InvalidArgument(
      fmt::format("cache policy '{}': unknown (want zipmoe, lru, fifo, lfu, full-load, marking, dali, smoe or coserve)", text));
}

Result<PolicyPools> ResolvePolicyPools(CachePolicy policy, const std::string& pools) {
  PolicyPools out;
  out.pools = !pools.empty() ? pools : policy == CachePolicy::kZipMoe ? "FCSE" : "F";
  out.planned = policy == CachePolicy::kZipMoe || out.pools != "F";
  if (out.planned && policy == CachePolicy::kFullLoad) {
    return Status::InvalidArgument(fmt::format("--pools {}: the full-load policy caches nothing", out.pools));
  }
  return out;
}


const char* AdmitOutcomeName(AdmitOutcome outcome) {
  switch (outcome) {
    case AdmitOutcome::kPlaced: return "placed";
    case AdmitOutcome::kMoved: return "moved";
    case AdmitOutcome::kStayed: return "stayed";
    case AdmitOutcome::kRemoved: return "removed";
    case AdmitOutcome::kDropped: return "dropped";
    case AdmitOutcome::kBusy: return "busy";
  }
  return "?";
}

uint64_t CacheCounters::HitsTotal() const {
  uint64_t hits = 0;
  for (const PoolCounters& p : pools) hits += p.requests;
  return hits;
}

// ---- SlotLease ----

SlotLease::SlotLease(SlotLease&& other) noexcept
    : manager_(std::exchange(other.manager_, nullptr)), pool_(other.pool_), slot_(other.slot_) {}

SlotLease& SlotLease::operator=(SlotLease&& other) noexcept {
  if (this != &other) {
    Release();
    manager_ = std::exchange(other.manager_, nullptr);
    pool_ = other.pool_;
    slot_ = other.slot_;
  }
  return *this;
}

void SlotLease::Release() {
  if (manager_ == nullptr) return;
  {
    MutexLock lock(&manager_->mu_);
    manager_->UnpinLocked(pool_, slot_);
  }
  manager_ = nullptr;
}

// ---- ExpertLookup ----

const uint8_t* ExpertLookup::EChunk(ExpertProj proj, int shard) const {
  if (e_part == nullptr || layout == nullptr) return nullptr;
  const TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  if (!t.present || shard < 0 || shard >= static_cast<int>(t.e_chunks.size())) return nullptr;
  return e_part + t.e_chunks[shard].offset;
}

const uint8_t* ExpertLookup::Sm(ExpertProj proj) const {
  if (sm_part == nullptr || layout == nullptr) return nullptr;
  const TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  return t.present ? sm_part + t.sm.offset : nullptr;
}

const uint8_t* ExpertLookup::Full(ExpertProj proj) const {
  if (f_part == nullptr || layout == nullptr) return nullptr;
  const TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  return t.present ? f_part + t.bf16.offset : nullptr;
}

// ---- CacheManager ----


Result<std::unique_ptr<CacheManager>> CacheManager::Create(const Manifest& manifest, const CacheConfig& config) {
  std::unique_ptr<CacheManager> m(new CacheManager());
  m->config_ = config;
  ZM_ASSIGN_OR_RETURN(m->layout_, ModelLayout::FromManifest(manifest));
  const ModelLayout& layout = m->layout_;
  if (config.pools_from_plan && config.policy == CachePolicy::kFullLoad) {
    return Status::InvalidArgument("cache config: the full-load policy caches nothing, so it has no pools to plan");
  }
  m->rules_ = MakeCachePolicyRules(config.policy, config, layout.n_layers(), layout.n_experts());
  const int32_t n_layers = layout.n_layers();
  if (config.tolerance < 0) {
    return Status::InvalidArgument(fmt::format("cache config: tolerance δ = {} must be >= 0", config.tolerance));
  }
  m->experts_in_layer_.assign(n_layers, 0);
  for (int32_t l = 0; l < n_layers; ++l) m->experts_in_layer_[l] = layout.ExpertsInLayer(l);

  m->staging_layout_ = StagingLayout::ForModel(layout);
  const uint64_t staging_bytes = static_cast<uint64_t>(config.staging_slots) * m->staging_layout_.slot_bytes;
  if (staging_bytes > config.budget_bytes) {
    return Status::InvalidArgument(fmt::format(
        "cache config: {} staging slot(s) of {} bytes need {} bytes, more than the budget of {} bytes",
        config.staging_slots, m->staging_layout_.slot_bytes, staging_bytes, config.budget_bytes));
  }
  std::array<uint32_t, kPoolCount> n_slots{};
  if (m->rules_->per_layer()) {
    ZM_ASSIGN_OR_RETURN(m->enabled_, ParsePoolSet(config.pools));
    if (static_cast<int32_t>(config.plan.capacity.size()) != n_layers) {
      return Status::InvalidArgument(fmt::format("cache plan: {} layer rows, the model has {} layers",
                                                 config.plan.capacity.size(), n_layers));
    }
    for (int32_t l = 0; l < n_layers; ++l) {
      int64_t total = 0;
      for (Pool p : kPoolOrder) {
        const int32_t cap = config.plan.capacity[l][PoolIndex(p)];
        if (cap < 0 || (cap > 0 && !m->enabled_[PoolIndex(p)]) || (cap > 0 && !layout.LayerHasExperts(l))) {
          return Status::InvalidArgument(fmt::format(
              "cache plan: layer {} pool {}: capacity {} (negative, pool not in Λ = '{}', or layer without experts)",
              l, PoolLetter(p), cap, config.pools));
        }
        total += cap;
        n_slots[PoolIndex(p)] += static_cast<uint32_t>(cap);
      }
      if (total > m->experts_in_layer_[l]) {
        return Status::InvalidArgument(fmt::format("cache plan: layer {}: pools hold {} experts, the layer has {}", l,
                                                   total, m->experts_in_layer_[l]));
      }
    }
  } else {
    m->enabled_[PoolIndex(Pool::kF)] = m->rules_->caches();
    const uint64_t stride = AlignSlotBytes(layout.slot_bytes(Pool::kF));
    if (m->enabled_[PoolIndex(Pool::kF)] && stride > 0) {
      uint64_t experts = 0;
      for (int32_t count : m->experts_in_layer_) experts += static_cast<uint64_t>(count);
      const uint64_t f_bytes = config.f_on_device && config.device_f_bytes >= 0
                                   ? static_cast<uint64_t>(config.device_f_bytes)
                                   : config.budget_bytes - staging_bytes;
      n_slots[PoolIndex(Pool::kF)] = static_cast<uint32_t>(std::min(f_bytes / stride, experts));
    }
  }

  std::vector<SlotPoolSpec> specs;
  for (Pool p : kPoolOrder) {
    specs.push_back({std::string(1, PoolLetter(p)), layout.slot_bytes(p), n_slots[PoolIndex(p)],
                     /*bytes_elsewhere=*/p == Pool::kF && config.f_on_device});
  }
  specs.push_back({"staging", m->staging_layout_.slot_bytes, config.staging_slots});
  ZM_ASSIGN_OR_RETURN(m->arena_, SlotArena::Create(config.shm_name, config.budget_bytes, specs));
  if (config.register_with_cuda && m->arena_->backed()) {
    ZM_ASSIGN_OR_RETURN(kernels::HostRegistration reg,
                        kernels::HostRegistration::Register(m->arena_->base(), m->arena_->mapped_bytes()));
    m->registration_ = std::make_unique<kernels::HostRegistration>(std::move(reg));
  }

  MutexLock lock(&m->mu_);  // not yet shared; taken so the tables are only ever touched under it
  for (Pool p : kPoolOrder) {
    m->slots_[PoolIndex(p)].resize(n_slots[PoolIndex(p)]);
    m->counters_.pools[PoolIndex(p)].capacity_bytes =  // device bytes for F on the device
        static_cast<uint64_t>(n_slots[PoolIndex(p)]) * m->arena_->slot_stride(PoolIndex(p));
  }
  m->entries_.resize(static_cast<size_t>(n_layers) * layout.n_experts());
  m->occupancy_.assign(n_layers, std::array<int32_t, kPoolCount>{});
  m->frequency_ = ExpertFrequency(n_layers, layout.n_experts());
  m->counters_.layer_requests.assign(n_layers, std::array<uint64_t, kStateCount>{});
  return m;
}

CachePlan DaliPlan(const ModelLayout& layout, uint64_t pool_bytes) {
  CachePlan plan;
  plan.capacity.assign(layout.n_layers(), std::array<int32_t, kPoolCount>{});
  const uint64_t stride = AlignSlotBytes(layout.slot_bytes(Pool::kF));
  std::vector<int32_t> moe;
  for (int32_t l = 0; l < layout.n_layers(); ++l) {
    if (layout.LayerHasExperts(l)) moe.push_back(l);
  }
  if (moe.empty() || stride == 0) return plan;
  const uint64_t slots = pool_bytes / stride;
  for (size_t i = 0; i < moe.size(); ++i) {
    const uint64_t share = slots / moe.size() + (i < slots % moe.size() ? 1 : 0);
    plan.capacity[moe[i]][PoolIndex(Pool::kF)] =
        static_cast<int32_t>(std::min<uint64_t>(share, static_cast<uint64_t>(layout.n_experts())));
  }
  return plan;
}

StagingLayout StagingLayout::ForModel(const ModelLayout& layout) {
  StagingLayout s;
  s.e_sm_bytes = AlignSlotBytes(layout.slot_bytes(Pool::kC));
  s.e_plane_offset = s.e_sm_bytes;
  s.bf16_offset = s.e_plane_offset + layout.e_plane_slot_bytes();
  s.slot_bytes = s.bf16_offset + AlignSlotBytes(layout.slot_bytes(Pool::kF));
  return s;
}

Result<uint32_t> CacheManager::AcquireStaging() {
  MutexLock lock(&mu_);
  Result<uint32_t> slot = arena_->Allocate(kPoolCount);
  if (!slot.ok()) {
    return Status::Unavailable(fmt::format("all {} staging slots are in use", config_.staging_slots));
  }
  return slot;
}

void CacheManager::ReleaseStaging(uint32_t slot) {
  MutexLock lock(&mu_);
  arena_->Free(kPoolCount, slot);
}

uint8_t* CacheManager::StagingData(uint32_t slot) const { return arena_->SlotData(kPoolCount, slot); }

CacheManager::~CacheManager() {
  MutexLock lock(&mu_);
  ZM_CHECK(live_pins_ == 0) << live_pins_ << " SlotLease(s) outlive their CacheManager";
}

bool CacheManager::Known(int32_t layer_id, int32_t expert_id) const {
  return layout_.Find(layer_id, expert_id) != nullptr;
}

int32_t CacheManager::Capacity(int32_t layer_id, Pool p) const {
  if (Global()) return static_cast<int32_t>(arena_->n_slots(PoolIndex(p)));
  if (layer_id < 0 || layer_id >= layout_.n_layers()) return 0;
  return config_.plan.capacity[layer_id][PoolIndex(p)];
}

Result<ExpertLookup> CacheManager::Lookup(int32_t layer_id, int32_t expert_id) {
  return LookupOrPin(layer_id, expert_id, /*activation=*/true);
}

Result<ExpertLookup> CacheManager::Pin(int32_t layer_id, int32_t expert_id) {
  return LookupOrPin(layer_id, expert_id, /*activation=*/false);
}

Result<ExpertLookup> CacheManager::LookupOrPin(int32_t layer_id, int32_t expert_id, bool activation) {
  if (!Known(layer_id, expert_id)) {
    return Status::InvalidArgument(fmt::format("cache {}: layer {} expert {} is not in the manifest",
                                               activation ? "lookup" : "pin", layer_id, expert_id));
  }
  ExpertLookup out;
  out.layer_id = layer_id;
  out.expert_id = expert_id;
  out.layout = layout_.Find(layer_id, expert_id);
  MutexLock lock(&mu_);
  if (activation) {
    frequency_.Record(layer_id, expert_id, ++tick_);
    rules_->OnActivation(layer_id, expert_id);
    ++counters_.lookups;
  }
  const Entry& entry = EntryOf(layer_id, expert_id);
  if (entry.pool < 0) {
    if (activation) {
      ++counters_.misses;
      ++counters_.layer_requests[layer_id][static_cast<int>(CompressionState::kMiss)];
    }
    return out;
  }
  const Pool p = PoolAt(entry.pool);
  SlotInfo& slot = slots_[entry.pool][entry.slot];
  ZM_CHECK(slot.state == SlotState::kResident) << "layer " << layer_id << " expert " << expert_id;
  ++slot.pins;
  ++live_pins_;
  out.state = PoolState(p);
  if (activation) {
    rules_->OnHit(layer_id, expert_id);
    ++counters_.pools[entry.pool].requests;
    ++counters_.layer_requests[layer_id][static_cast<int>(out.state)];
  }
  uint8_t* base = arena_->SlotData(entry.pool, entry.slot);
  out.slot_offset = arena_->SlotOffset(entry.pool, entry.slot);
  if (p == Pool::kF && config_.f_on_device) out.device_slot = static_cast<int32_t>(entry.slot);
  if (base != nullptr) {
    if (PoolHoldsE(p)) out.e_part = base;
    if (PoolHoldsSm(p)) out.sm_part = base + out.layout->SmPartOffset(p);
    if (PoolHoldsBf16(p)) out.f_part = base;
  }
  out.lease = SlotLease(this, p, entry.slot);
  return out;
}

void CacheManager::ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores) {
  if (layer_id < 0 || layer_id >= layout_.n_layers()) return;
  MutexLock lock(&mu_);
  rules_->OnScores(layer_id, mean_scores);
}

CompressionState CacheManager::Peek(int32_t layer_id, int32_t expert_id) const {
  if (!Known(layer_id, expert_id)) return CompressionState::kMiss;
  MutexLock lock(&mu_);
  const Entry& entry = EntryOf(layer_id, expert_id);
  return entry.pool < 0 ? CompressionState::kMiss : PoolState(PoolAt(entry.pool));
}

Status CacheManager::SeedFrequencies(int32_t layer_id, const std::vector<uint64_t>& counts) {
  if (layer_id < 0 || layer_id >= layout_.n_layers() || counts.size() > static_cast<size_t>(layout_.n_experts()))
    return Status::InvalidArgument(fmt::format("SeedFrequencies: layer {} with {} counts (layout: {} layers, {} experts)",
                                               layer_id, counts.size(), layout_.n_layers(), layout_.n_experts()));
  MutexLock lock(&mu_);
  for (size_t e = 0; e < counts.size(); ++e) frequency_.Seed(layer_id, static_cast<int32_t>(e), counts[e]);
  return Status::Ok();
}

uint64_t CacheManager::Frequency(int32_t layer_id, int32_t expert_id) const {
  if (!Known(layer_id, expert_id)) return 0;
  MutexLock lock(&mu_);
  return frequency_.count(layer_id, expert_id);
}

int32_t CacheManager::Rank(int32_t layer_id, int32_t expert_id) const {
  if (!Known(layer_id, expert_id)) return -1;
  MutexLock lock(&mu_);
  return frequency_.Rank(layer_id, expert_id);
}

std::vector<uint64_t> CacheManager::SortedCounts(int32_t layer_id) const {
  if (layer_id < 0 || layer_id >= layout_.n_layers()) return {};
  MutexLock lock(&mu_);
  return frequency_.SortedCounts(layer_id);
}

std::array<int32_t, kPoolCount> CacheManager::Thresholds(int32_t layer_id) const {
  std::array<int32_t, kPoolCount> tau{};
  if (Global() || layer_id < 0 || layer_id >= layout_.n_layers()) return tau;
  int32_t sum = 0;
  for (Pool p : kPoolOrder) {
    if (!enabled_[PoolIndex(p)]) continue;
    sum += config_.plan.capacity[layer_id][PoolIndex(p)];
    tau[PoolIndex(p)] = sum + config_.tolerance;
  }
  return tau;
}

std::vector<int32_t> CacheManager::Residents(int32_t layer_id, Pool p) const {
  std::vector<int32_t> out;
  if (layer_id < 0 || layer_id >= layout_.n_layers()) return out;
  MutexLock lock(&mu_);
  for (int32_t e = 0; e < layout_.n_experts(); ++e) {
    if (EntryOf(layer_id, e).pool == PoolIndex(p)) out.push_back(e);
  }
  return out;
}

CacheCounters CacheManager::Counters() const {
  MutexLock lock(&mu_);
  CacheCounters c = counters_;
  for (Pool p : kPoolOrder) {
    c.pools[PoolIndex(p)].resident_bytes =
        static_cast<uint64_t>(arena_->n_allocated(PoolIndex(p))) * arena_->slot_stride(PoolIndex(p));
  }
  return c;
}

void CacheManager::ResetCounters() {
  MutexLock lock(&mu_);
  counters_.lookups = counters_.misses = counters_.drops = counters_.pinned_skips = 0;
  for (PoolCounters& p : counters_.pools) p.requests = p.admissions = p.evictions = p.removals = 0;
  for (auto& layer : counters_.layer_requests) layer.fill(0);
}

uint64_t CacheManager::LivePins() const {
  MutexLock lock(&mu_);
  return live_pins_;
}

}  // namespace zipmoe::cache_manager
