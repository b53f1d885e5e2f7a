// Internal to services/cache_manager: what cache_manager.cc (creation, lookups, statistics) and
// cache_admission.cc (admission, eviction, slot copies) share: pool helpers and the Placement record
// of one admission. Not part of the library's interface.
#pragma once

#include <cstdint>

#include "common/ipc/slot_arena.h"
#include "services/cache_manager/cache_manager.h"

namespace zipmoe::cache_manager::internal {

inline Pool PoolAt(int index) { return static_cast<Pool>(index); }

inline bool Fillable(Pool p, AvailableParts have) {
  return (!PoolHoldsE(p) || have.e) && (!PoolHoldsSm(p) || have.sm) && (!PoolHoldsBf16(p) || have.bf16);
}

inline AvailableParts PartsOf(Pool p) { return AvailableParts{PoolHoldsE(p), PoolHoldsSm(p), PoolHoldsBf16(p)}; }

}  // namespace zipmoe::cache_manager::internal

namespace zipmoe::cache_manager {

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

}  // namespace zipmoe::cache_manager
