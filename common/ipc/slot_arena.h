// SlotArena: one shared-memory region (ShmRegion) sized to a memory budget and carved into pools of
// fixed-size slots (ZipMoE §4: "pre-allocates cache pools as contiguous memory regions to reduce
// memory fragmentation"). Each pool is one slot class: `n_slots` slots of `slot_bytes` each, laid
// out back to back; a slot is allocated and freed whole, so the arena never fragments.
//
// Layout (offsets from the region start, all multiples of kSlotAlignmentBytes = 4 KiB so a slot can
// be an O_DIRECT destination):
//   pool 0: [n_slots_0 × stride_0] | pool 1: [n_slots_1 × stride_1] | ...
//   stride_p = slot_bytes_p rounded up to 4 KiB; slot s of pool p starts at base_p + s · stride_p.
// Accounting: mapped bytes = Σ_p n_slots_p · stride_p ≤ budget_bytes (checked by Create, which
// maps exactly that sum, not the whole budget). Allocate() never maps more: it only hands out
// slots of the fixed pools, and fails with kUnavailable when a pool is full.
//
// Unbacked arenas: Create() with an empty shm name does the same slot accounting without any memory
// (SlotData() returns nullptr) — for cache simulations and tests that need no bytes.
//
// Thread-safety: thread-compatible (no internal lock); the cache manager guards it with its mutex.
// Slot *bytes* may be used from any thread/process by whoever holds the slot.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/ipc/shm_region.h"
#include "common/status.h"

namespace zipmoe {

inline constexpr uint64_t kSlotAlignmentBytes = 4096;

// Rounds `bytes` up to a multiple of kSlotAlignmentBytes.
inline uint64_t AlignSlotBytes(uint64_t bytes) {
  return (bytes + kSlotAlignmentBytes - 1) / kSlotAlignmentBytes * kSlotAlignmentBytes;
}

struct SlotPoolSpec {
  std::string name;         // for messages, e.g. "F"
  uint64_t slot_bytes = 0;  // usable bytes per slot (rounded up to 4 KiB in the layout)
  uint32_t n_slots = 0;     // 0 = empty pool (allowed; every Allocate fails)
  // The slots are accounted here but their bytes live elsewhere (the GPU executor's device F slots,
  // issue 36): the pool maps no memory and counts nothing against the budget; SlotData() is nullptr
  // and SlotOffset() is the pool's (empty) base for every slot.
  bool bytes_elsewhere = false;
};

class SlotArena {
 public:
  // Sentinel for "no slot" in callers' tables.
  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // shm_name: ShmRegion name ("/zipmoe-arena-<pid>"), or "" for an unbacked arena.
  // Errors: kInvalidArgument (Σ reservations > budget_bytes, i.e. the pools do not fit; a pool with
  // n_slots > 0 and slot_bytes 0; overflow), plus ShmRegion::Create's errors.
  static Result<std::unique_ptr<SlotArena>> Create(const std::string& shm_name, uint64_t budget_bytes,
                                                   const std::vector<SlotPoolSpec>& pools);

  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  // Takes a free slot of `pool`, lowest index first after creation. Errors: kUnavailable (pool
  // full), kInvalidArgument (no such pool).
  Result<uint32_t> Allocate(int pool);
  // Returns `slot` to its pool. ZM_CHECK: the slot exists and is allocated (double free is a bug).
  void Free(int pool, uint32_t slot);
  bool IsAllocated(int pool, uint32_t slot) const;

  // Start of the slot's bytes (nullptr in an unbacked arena); valid until the arena is destroyed.
  uint8_t* SlotData(int pool, uint32_t slot) const;
  // Offset of the slot from the region start: what peers that Attach() the region add to their base.
  uint64_t SlotOffset(int pool, uint32_t slot) const;

  int n_pools() const { return static_cast<int>(pools_.size()); }
  const std::string& pool_name(int pool) const { return pools_[pool].name; }
  uint64_t slot_bytes(int pool) const { return pools_[pool].slot_bytes; }    // as requested
  uint64_t slot_stride(int pool) const { return pools_[pool].stride_bytes; }  // 4 KiB multiple
  uint32_t n_slots(int pool) const { return pools_[pool].n_slots; }
  uint32_t n_free(int pool) const { return static_cast<uint32_t>(pools_[pool].free_list.size()); }
  uint32_t n_allocated(int pool) const { return n_slots(pool) - n_free(pool); }
  // Arena bytes the pool maps (0 for a bytes_elsewhere pool).
  uint64_t reserved_bytes(int pool) const {
    return pools_[pool].elsewhere ? 0 : pools_[pool].stride_bytes * pools_[pool].n_slots;
  }
  bool bytes_elsewhere(int pool) const { return pools_[pool].elsewhere; }

  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t mapped_bytes() const { return mapped_bytes_; }  // Σ reserved_bytes(p) ≤ budget_bytes()
  bool backed() const { return region_ != nullptr; }
  uint8_t* base() const { return region_ ? region_->data() : nullptr; }
  const ShmRegion* region() const { return region_.get(); }

 private:
  struct Pool {
    std::string name;
    uint64_t slot_bytes = 0;
    uint64_t stride_bytes = 0;
    uint32_t n_slots = 0;
    uint64_t base_offset = 0;
    bool elsewhere = false;            // SlotPoolSpec::bytes_elsewhere
    std::vector<uint32_t> free_list;   // stack; back() is handed out next
    std::vector<uint8_t> allocated;    // [n_slots] 1 while allocated
  };

  SlotArena() = default;
  bool ValidSlot(int pool, uint32_t slot) const;

  uint64_t budget_bytes_ = 0;
  uint64_t mapped_bytes_ = 0;
  std::unique_ptr<ShmRegion> region_;  // null when unbacked
  std::vector<Pool> pools_;
};

}  // namespace zipmoe
