// CacheManager's admission and eviction (cache_manager.h): the policy's decision under the lock
// (DecideLocked: victim choice, pinned slots, compression-state transitions), the copy of an expert's
// parts into its slot outside the lock, and the commit (Admit). Creation, lookups and statistics are
// cache_manager.cc.
#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "kernels/recovery.h"
#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/cache_manager_internal.h"

namespace zipmoe::cache_manager {

using internal::Fillable;
using internal::PartsOf;
using internal::PoolAt;

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

bool CacheManager::MakeRoomLocked(int32_t layer_id, int32_t expert_id, Pool p, AdmitResult* result) {
  if (HasRoomLocked(layer_id, p)) return true;
  bool pinned_blocked = false;
  const uint32_t victim = PickVictimLocked(layer_id, expert_id, p, &pinned_blocked);
  if (victim == SlotArena::kNoSlot) {
    if (pinned_blocked) {
      ++result->pinned_skips;
      ++counters_.pinned_skips;
    }
    return false;
  }
  EvictLocked(p, victim);
  ++result->evictions;
  return true;
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
    if (p == Pool::kF && config_.f_on_device) continue;  // entered by ReserveDeviceF only
    if (!Fillable(p, have)) continue;
    if (!MakeRoomLocked(layer_id, expert_id, p, &result)) continue;
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
        // The dtype was checked when the layout was built (ModelLayout::FromManifest): cannot fail.
        const Status st = kernels::RecoverCpu(layout_.dtype(), sources.e_plane[proj], sources.sm[proj],
                                              pl.dst + t.bf16.offset, static_cast<int64_t>(t.e_plane.bytes));
        ZM_CHECK(st.ok()) << st.ToString();
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
    Entry& entry = EntryOf(layer_id, expert_id);
    if (entry.reserved_f != SlotArena::kNoSlot) return CommitDeviceFLocked(layer_id, expert_id);
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

Result<int32_t> CacheManager::ReserveDeviceF(int32_t layer_id, int32_t expert_id) {
  if (!Known(layer_id, expert_id)) {
    return Status::InvalidArgument(fmt::format("device F reservation: layer {} expert {} is not in the manifest",
                                               layer_id, expert_id));
  }
  if (!config_.f_on_device) return Status::InvalidArgument("device F reservation: pool F is not on the device (CacheConfig::f_on_device)");
  MutexLock lock(&mu_);
  Entry& entry = EntryOf(layer_id, expert_id);
  if (entry.admitting || entry.pool == PoolIndex(Pool::kF)) return -1;
  int32_t rank = -1;
  const std::vector<Pool> candidates = rules_->Candidates(View(), layer_id, expert_id, &rank);
  if (std::find(candidates.begin(), candidates.end(), Pool::kF) == candidates.end()) return -1;
  AdmitResult counted;  // the admission that commits it reports its own outcome
  if (!MakeRoomLocked(layer_id, expert_id, Pool::kF, &counted)) return -1;
  entry.reserved_f = TakeSlotLocked(Pool::kF, layer_id, expert_id);
  entry.admitting = true;
  return static_cast<int32_t>(entry.reserved_f);
}

AdmitResult CacheManager::CommitDeviceFLocked(int32_t layer_id, int32_t expert_id) {
  Entry& entry = EntryOf(layer_id, expert_id);
  const uint32_t slot = entry.reserved_f;
  SlotInfo& s = slots_[PoolIndex(Pool::kF)][slot];
  ZM_CHECK(s.state == SlotState::kFilling && s.pins > 0) << "layer " << layer_id << " expert " << expert_id;
  s.state = SlotState::kResident;
  --s.pins;  // the reservation's own pin
  --live_pins_;
  AdmitResult result;
  result.rank = frequency_.Rank(layer_id, expert_id);
  result.outcome = entry.pool >= 0 ? AdmitOutcome::kMoved : AdmitOutcome::kPlaced;
  if (entry.pool >= 0) DetachLocked(layer_id, expert_id);  // its C/S/E slot: freed once unpinned
  entry.pool = static_cast<int8_t>(PoolIndex(Pool::kF));
  entry.slot = slot;
  entry.reserved_f = SlotArena::kNoSlot;
  entry.admitting = false;
  ++counters_.pools[PoolIndex(Pool::kF)].resident_experts;
  ++counters_.pools[PoolIndex(Pool::kF)].admissions;
  result.state = CompressionState::kF;
  return result;
}

void CacheManager::CancelDeviceF(int32_t layer_id, int32_t expert_id) {
  if (!Known(layer_id, expert_id)) return;
  MutexLock lock(&mu_);
  CancelReservationLocked(EntryOf(layer_id, expert_id));
}

void CacheManager::CancelReservationLocked(Entry& entry) {
  if (entry.reserved_f == SlotArena::kNoSlot) return;
  const uint32_t slot = entry.reserved_f;
  entry.reserved_f = SlotArena::kNoSlot;
  entry.admitting = false;
  UnpinLocked(Pool::kF, slot);
  ReleaseSlotLocked(Pool::kF, slot);
}

int64_t CacheManager::ClearDeviceF() {
  if (!config_.f_on_device) return 0;
  MutexLock lock(&mu_);
  const int f = PoolIndex(Pool::kF);
  int64_t cleared = 0;
  for (int32_t layer = 0; layer < layout_.n_layers(); ++layer) {
    for (int32_t expert = 0; expert < layout_.n_experts(); ++expert) {
      if (!Known(layer, expert)) continue;
      Entry& entry = EntryOf(layer, expert);
      CancelReservationLocked(entry);
      if (entry.pool == f) {
        DetachLocked(layer, expert);
        ++cleared;
      }
    }
  }
  return cleared;
}

}  // namespace zipmoe::cache_manager
