#include "services/cache_manager/cache_manager.h"

#include "kernels/recovery.h"
#include "services/cache_manager/planner.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::cache_manager {

namespace {

constexpr int kStateCount = 5;  // CompressionState values kMiss..kF

Pool PoolAt(int index) { return static_cast<Pool>(index); }

bool Fillable(Pool p, AvailableParts have) {
  return (!PoolHoldsE(p) || have.e) && (!PoolHoldsSm(p) || have.sm) && (!PoolHoldsBf16(p) || have.bf16);
}

AvailableParts PartsOf(Pool p) { return AvailableParts{PoolHoldsE(p), PoolHoldsSm(p), PoolHoldsBf16(p)}; }

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

const uint16_t* ExpertLookup::Bf16(ExpertProj proj) const {
  if (f_part == nullptr || layout == nullptr) return nullptr;
  const TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  return t.present ? reinterpret_cast<const uint16_t*>(f_part + t.bf16.offset) : nullptr;
}

// ---- CacheManager ----

// An admission decided under the lock: the slot to fill and where its bytes come from.
struct CacheManager::Placement {
  AdmitResult result;
  bool fill = false;  // a slot was taken: copy, then commit
  Pool pool = Pool::kF;
  uint32_t slot = SlotArena::kNoSlot;
  uint8_t* dst = nullptr;
  int old_pool = -1;  // the expert's previous slot (pinned during the copy), -1 if none
  uint32_t old_slot = SlotArena::kNoSlot;
  uint8_t* old_base = nullptr;
  AvailableParts from_caller;  // parts copied from the caller's sources (others from the old slot)
  const ExpertSlotLayout* layout = nullptr;
};

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
  for (int32_t l = 0; l < n_layers; ++l) {
    for (int32_t e = 0; e < layout.n_experts(); ++e) m->experts_in_layer_[l] += layout.Find(l, e) != nullptr;
  }

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
      n_slots[PoolIndex(Pool::kF)] =
          static_cast<uint32_t>(std::min((config.budget_bytes - staging_bytes) / stride, experts));
    }
  }

  std::vector<SlotPoolSpec> specs;
  for (Pool p : kPoolOrder) {
    specs.push_back({std::string(1, PoolLetter(p)), layout.slot_bytes(p), n_slots[PoolIndex(p)]});
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
    m->counters_.pools[PoolIndex(p)].capacity_bytes = m->arena_->reserved_bytes(PoolIndex(p));
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
  s.bf16_offset = s.e_plane_offset + AlignSlotBytes(layout.slot_bytes(Pool::kF) / 2);
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

void CacheManager::UnpinLocked(Pool p, uint32_t slot) {
  SlotInfo& s = slots_[PoolIndex(p)][slot];
  ZM_CHECK(s.pins > 0 && live_pins_ > 0) << "unpin of an unpinned slot: pool " << PoolLetter(p) << " slot " << slot;
  --s.pins;
  --live_pins_;
  if (s.pins == 0 && s.state == SlotState::kRetired) ReleaseSlotLocked(p, slot);
}

bool CacheManager::HasRoomLocked(int32_t layer_id, Pool p) const {
  if (Global()) return arena_->n_free(PoolIndex(p)) > 0;
  return occupancy_[layer_id][PoolIndex(p)] < config_.plan.capacity[layer_id][PoolIndex(p)];
}

uint32_t CacheManager::PickVictimLocked(int32_t layer_id, int32_t expert_id, Pool p, bool* pinned_blocked) {
  const int pi = PoolIndex(p);
  std::vector<ResidentSlot> residents;
  bool busy = false;
  if (!Global()) {  // the pool's residents of this layer, by expert id
    int32_t resident = 0;
    for (int32_t e = 0; e < layout_.n_experts(); ++e) {
      const Entry& entry = EntryOf(layer_id, e);
      if (entry.pool != pi) continue;
      const SlotInfo& info = slots_[pi][entry.slot];
      residents.push_back({entry.slot, layer_id, e, info.pins > 0, true, info.inserted_tick});
      ++resident;
    }
    busy = occupancy_[layer_id][pi] > resident;  // slots being filled or retired
  } else {  // every resident of the pool, in slot order
    for (uint32_t s = 0; s < slots_[pi].size(); ++s) {
      const SlotInfo& info = slots_[pi][s];
      if (info.state == SlotState::kFree) continue;
      const bool resident = info.state == SlotState::kResident;
      busy |= !resident;
      residents.push_back({s, info.layer_id, info.expert_id, !resident || info.pins > 0, resident, info.inserted_tick});
    }
  }
  const VictimChoice c = rules_->PickVictim(View(), layer_id, expert_id, p, residents, busy);
  *pinned_blocked = c.index < 0 && c.pinned_blocked;
  if (c.index < 0) return SlotArena::kNoSlot;
  const ResidentSlot& victim = residents.at(static_cast<size_t>(c.index));
  ZM_CHECK(!victim.pinned) << "policy " << CachePolicyName(config_.policy) << " chose a pinned victim";
  return victim.slot;
}

void CacheManager::ReleaseSlotLocked(Pool p, uint32_t slot) {
  SlotInfo& s = slots_[PoolIndex(p)][slot];
  ZM_CHECK(s.pins == 0 && s.state != SlotState::kFree) << "pool " << PoolLetter(p) << " slot " << slot;
  --occupancy_[s.layer_id][PoolIndex(p)];
  s = SlotInfo{};
  arena_->Free(PoolIndex(p), slot);
}

void CacheManager::EvictLocked(Pool p, uint32_t slot) {
  const SlotInfo& s = slots_[PoolIndex(p)][slot];
  // The invariant this whole class exists for: a pinned slot is never evicted.
  ZM_CHECK(s.pins == 0 && s.state == SlotState::kResident) << "evicting pool " << PoolLetter(p) << " slot " << slot
                                                           << " with " << s.pins << " pins";
  Entry& entry = EntryOf(s.layer_id, s.expert_id);
  ZM_CHECK(entry.pool == PoolIndex(p) && entry.slot == slot) << "layer " << s.layer_id << " expert " << s.expert_id;
  entry.pool = -1;
  entry.slot = SlotArena::kNoSlot;
  --counters_.pools[PoolIndex(p)].resident_experts;
  ++counters_.pools[PoolIndex(p)].evictions;
  ReleaseSlotLocked(p, slot);
}

void CacheManager::DetachLocked(int32_t layer_id, int32_t expert_id) {
  Entry& entry = EntryOf(layer_id, expert_id);
  const Pool p = PoolAt(entry.pool);
  const uint32_t slot = entry.slot;
  entry.pool = -1;
  entry.slot = SlotArena::kNoSlot;
  --counters_.pools[PoolIndex(p)].resident_experts;
  ++counters_.pools[PoolIndex(p)].removals;
  SlotInfo& s = slots_[PoolIndex(p)][slot];
  if (s.pins == 0) {
    ReleaseSlotLocked(p, slot);
  } else {
    s.state = SlotState::kRetired;  // freed by the last UnpinLocked
  }
}

uint32_t CacheManager::TakeSlotLocked(Pool p, int32_t layer_id, int32_t expert_id) {
  Result<uint32_t> slot = arena_->Allocate(PoolIndex(p));
  ZM_CHECK(slot.ok()) << "pool " << PoolLetter(p) << " has room but the arena has no free slot: "
                      << slot.status().ToString();
  SlotInfo& s = slots_[PoolIndex(p)][*slot];
  s.state = SlotState::kFilling;
  s.layer_id = layer_id;
  s.expert_id = expert_id;
  s.pins = 1;  // the admission's own pin, dropped at commit
  s.inserted_tick = ++insert_seq_;
  rules_->OnPlaced(layer_id, expert_id);
  ++live_pins_;
  ++occupancy_[layer_id][PoolIndex(p)];
  return *slot;
}

Status CacheManager::DecideLocked(int32_t layer_id, int32_t expert_id, AvailableParts parts, Placement* out) {
  Entry& entry = EntryOf(layer_id, expert_id);
  AdmitResult& result = out->result;
  if (entry.admitting) {
    result.outcome = AdmitOutcome::kBusy;
    result.state = entry.pool < 0 ? CompressionState::kMiss : PoolState(PoolAt(entry.pool));
    return Status::Ok();
  }
  const int cur = entry.pool;
  result.state = cur < 0 ? CompressionState::kMiss : PoolState(PoolAt(cur));
  AvailableParts have = parts;
  if (cur >= 0) {
    const AvailableParts cached = PartsOf(PoolAt(cur));
    have.e |= cached.e;
    have.sm |= cached.sm;
    have.bf16 |= cached.bf16;
  }

  // Candidate pools, in hierarchy order (the policy's admission rule).
  const std::vector<Pool> candidates = rules_->Candidates(View(), layer_id, expert_id, &result.rank);
  if (candidates.empty()) {  // not cached after this use (e.g. ranked past every threshold)
    if (cur >= 0) {
      DetachLocked(layer_id, expert_id);
      result.outcome = AdmitOutcome::kRemoved;
      result.state = CompressionState::kMiss;
    } else {
      result.outcome = AdmitOutcome::kDropped;
      ++counters_.drops;
    }
    return Status::Ok();
  }

  for (Pool p : candidates) {
    if (cur == PoolIndex(p)) {
      result.outcome = AdmitOutcome::kStayed;
      return Status::Ok();
    }
    if (!Fillable(p, have)) continue;
    if (!HasRoomLocked(layer_id, p)) {
      bool pinned_blocked = false;
      const uint32_t victim = PickVictimLocked(layer_id, expert_id, p, &pinned_blocked);
      if (victim == SlotArena::kNoSlot) {
        if (pinned_blocked) {
          ++result.pinned_skips;
          ++counters_.pinned_skips;
        }
        continue;
      }
      EvictLocked(p, victim);
      ++result.evictions;
    }
    out->fill = true;
    out->pool = p;
    out->slot = TakeSlotLocked(p, layer_id, expert_id);
    out->dst = arena_->SlotData(PoolIndex(p), out->slot);
    out->layout = layout_.Find(layer_id, expert_id);
    out->from_caller = AvailableParts{PoolHoldsE(p) && parts.e, PoolHoldsSm(p) && parts.sm, PoolHoldsBf16(p) && parts.bf16};
    if (cur >= 0) {  // pin the old slot: it is a copy source and must survive until the commit
      out->old_pool = cur;
      out->old_slot = entry.slot;
      out->old_base = arena_->SlotData(cur, entry.slot);
      ++slots_[cur][entry.slot].pins;
      ++live_pins_;
    }
    entry.admitting = true;
    return Status::Ok();
  }
  // No pool took it: a cached expert keeps its place, an uncached one is dropped.
  result.outcome = cur >= 0 ? AdmitOutcome::kStayed : AdmitOutcome::kDropped;
  if (cur < 0) ++counters_.drops;
  return Status::Ok();
}

void CacheManager::CopyParts(const Placement& pl, const ExpertSources& sources) const {
  if (pl.dst == nullptr) return;  // unbacked arena: accounting only
  const ExpertSlotLayout& layout = *pl.layout;
  const Pool old = pl.old_pool >= 0 ? PoolAt(pl.old_pool) : Pool::kF;
  for (int proj = 0; proj < kProjCount; ++proj) {
    const TensorSlotLayout& t = layout.tensors[proj];
    if (!t.present) continue;
    if (PoolHoldsE(pl.pool)) {
      for (size_t j = 0; j < t.e_chunks.size(); ++j) {
        const SlotExtent& c = t.e_chunks[j];
        const uint8_t* src = pl.from_caller.e ? sources.e_chunks[proj][j] : pl.old_base + c.offset;
        std::memcpy(pl.dst + c.offset, src, c.bytes);
      }
    }
    if (PoolHoldsSm(pl.pool)) {
      const uint8_t* src = pl.from_caller.sm ? sources.sm[proj] : pl.old_base + layout.SmPartOffset(old) + t.sm.offset;
      std::memcpy(pl.dst + layout.SmPartOffset(pl.pool) + t.sm.offset, src, t.sm.bytes);
    }
    if (PoolHoldsBf16(pl.pool)) {  // only from the caller: an F expert is never moved into F
      if (sources.bf16[proj] != nullptr) {
        std::memcpy(pl.dst + t.bf16.offset, sources.bf16[proj], t.bf16.bytes);
      } else {
        kernels::RecoverBf16Cpu(sources.e_plane[proj], sources.sm[proj],
                                reinterpret_cast<uint16_t*>(pl.dst + t.bf16.offset),
                                static_cast<int64_t>(t.bf16.bytes / 2));
      }
    }
  }
}

Result<AdmitResult> CacheManager::Admit(int32_t layer_id, int32_t expert_id, AvailableParts parts,
                                        const ExpertSources& sources) {
  const ExpertSlotLayout* layout = layout_.Find(layer_id, expert_id);
  if (layout == nullptr) {
    return Status::InvalidArgument(fmt::format("cache admit: layer {} expert {} is not in the manifest", layer_id,
                                               expert_id));
  }
  if (arena_->backed()) {
    for (int proj = 0; proj < kProjCount; ++proj) {
      const TensorSlotLayout& t = layout->tensors[proj];
      if (!t.present) continue;
      const bool has_bf16 =
          sources.bf16[proj] != nullptr || (sources.e_plane[proj] != nullptr && sources.sm[proj] != nullptr);
      bool ok = !(parts.sm && sources.sm[proj] == nullptr) && !(parts.bf16 && !has_bf16);
      if (parts.e) {
        ok = ok && sources.e_chunks[proj].size() == t.e_chunks.size();
        for (const uint8_t* p : sources.e_chunks[proj]) ok = ok && p != nullptr;
      }
      if (!ok) {
        return Status::InvalidArgument(fmt::format(
            "cache admit: layer {} expert {} {}: a part flagged available has no source pointer (or not {} E-chunks)",
            layer_id, expert_id, ExpertProjName(static_cast<ExpertProj>(proj)), t.e_chunks.size()));
      }
    }
  }

  Placement pl;
  {
    MutexLock lock(&mu_);
    ZM_RETURN_IF_ERROR(DecideLocked(layer_id, expert_id, parts, &pl));
  }
  if (!pl.fill) return pl.result;

  CopyParts(pl, sources);  // outside the lock: the new slot is kFilling, the old one pinned

  MutexLock lock(&mu_);
  Entry& entry = EntryOf(layer_id, expert_id);
  SlotInfo& s = slots_[PoolIndex(pl.pool)][pl.slot];
  s.state = SlotState::kResident;
  --s.pins;
  --live_pins_;
  if (pl.old_pool >= 0) {
    ZM_CHECK(entry.pool == pl.old_pool && entry.slot == pl.old_slot) << "layer " << layer_id << " expert " << expert_id;
    UnpinLocked(PoolAt(pl.old_pool), pl.old_slot);
    DetachLocked(layer_id, expert_id);
  }
  entry.pool = static_cast<int8_t>(PoolIndex(pl.pool));
  entry.slot = pl.slot;
  entry.admitting = false;
  ++counters_.pools[PoolIndex(pl.pool)].resident_experts;
  ++counters_.pools[PoolIndex(pl.pool)].admissions;
  pl.result.outcome = pl.old_pool >= 0 ? AdmitOutcome::kMoved : AdmitOutcome::kPlaced;
  pl.result.state = PoolState(pl.pool);
  return pl.result;
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
