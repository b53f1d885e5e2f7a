#include "common/ipc/slot_arena.h"

#include <limits>
#include <utility>

#include <fmt/format.h>

namespace zipmoe {

Result<std::unique_ptr<SlotArena>> SlotArena::Create(const std::string& shm_name, uint64_t budget_bytes,
                                                     const std::vector<SlotPoolSpec>& pools) {
  std::unique_ptr<SlotArena> arena(new SlotArena());
  arena->budget_bytes_ = budget_bytes;
  uint64_t offset = 0;
  for (const SlotPoolSpec& spec : pools) {
    if (spec.n_slots > 0 && spec.slot_bytes == 0) {
      return Status::InvalidArgument(fmt::format("slot arena: pool '{}' has {} slots of 0 bytes", spec.name,
                                                 spec.n_slots));
    }
    Pool pool;
    pool.name = spec.name;
    pool.slot_bytes = spec.slot_bytes;
    pool.stride_bytes = AlignSlotBytes(spec.slot_bytes);
    pool.n_slots = spec.n_slots;
    pool.base_offset = offset;
    pool.elsewhere = spec.bytes_elsewhere;
    if (pool.stride_bytes < spec.slot_bytes ||
        (pool.n_slots > 0 && pool.stride_bytes > std::numeric_limits<uint64_t>::max() / pool.n_slots)) {
      return Status::InvalidArgument(fmt::format("slot arena: pool '{}' size overflows", spec.name));
    }
    const uint64_t reserved = pool.elsewhere ? 0 : pool.stride_bytes * pool.n_slots;
    if (reserved > budget_bytes - offset) {  // offset <= budget_bytes holds by induction
      return Status::InvalidArgument(fmt::format(
          "slot arena: pools need more than the budget of {} bytes: pool '{}' ({} slots × {} bytes) "
          "starts at {} and would end at {}",
          budget_bytes, spec.name, pool.n_slots, pool.stride_bytes, offset, offset + reserved));
    }
    offset += reserved;
    pool.allocated.assign(pool.n_slots, 0);
    pool.free_list.reserve(pool.n_slots);
    for (uint32_t s = pool.n_slots; s > 0; --s) pool.free_list.push_back(s - 1);  // slot 0 on top
    arena->pools_.push_back(std::move(pool));
  }
  arena->mapped_bytes_ = offset;
  if (!shm_name.empty() && offset > 0) {
    ZM_ASSIGN_OR_RETURN(ShmRegion region, ShmRegion::Create(shm_name, offset));
    arena->region_ = std::make_unique<ShmRegion>(std::move(region));
  }
  return arena;
}

bool SlotArena::ValidSlot(int pool, uint32_t slot) const {
  return pool >= 0 && pool < n_pools() && slot < pools_[pool].n_slots;
}

Result<uint32_t> SlotArena::Allocate(int pool) {
  if (pool < 0 || pool >= n_pools()) {
    return Status::InvalidArgument(fmt::format("slot arena: no pool {} (have {})", pool, n_pools()));
  }
  Pool& p = pools_[pool];
  if (p.free_list.empty()) {
    return Status::Unavailable(fmt::format("slot arena: pool '{}' full ({} slots)", p.name, p.n_slots));
  }
  const uint32_t slot = p.free_list.back();
  p.free_list.pop_back();
  ZM_CHECK(p.allocated[slot] == 0) << "pool " << p.name << " slot " << slot;
  p.allocated[slot] = 1;
  return slot;
}

void SlotArena::Free(int pool, uint32_t slot) {
  ZM_CHECK(ValidSlot(pool, slot)) << "pool " << pool << " slot " << slot;
  Pool& p = pools_[pool];
  ZM_CHECK(p.allocated[slot] == 1) << "double free: pool " << p.name << " slot " << slot;
  p.allocated[slot] = 0;
  p.free_list.push_back(slot);
}

bool SlotArena::IsAllocated(int pool, uint32_t slot) const {
  return ValidSlot(pool, slot) && pools_[pool].allocated[slot] == 1;
}

uint64_t SlotArena::SlotOffset(int pool, uint32_t slot) const {
  ZM_CHECK(ValidSlot(pool, slot)) << "pool " << pool << " slot " << slot;
  if (pools_[pool].elsewhere) return pools_[pool].base_offset;
  return pools_[pool].base_offset + static_cast<uint64_t>(slot) * pools_[pool].stride_bytes;
}

uint8_t* SlotArena::SlotData(int pool, uint32_t slot) const {
  const uint64_t offset = SlotOffset(pool, slot);
  return region_ && !pools_[pool].elsewhere ? region_->data() + offset : nullptr;
}

}  // namespace zipmoe
