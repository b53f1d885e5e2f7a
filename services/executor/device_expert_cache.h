// The GPU executor's device F slots (issue 36 item 1): fully recovered BF16 routed experts kept in
// device memory between layers and steps, owned by the executor, under a device-memory budget.
// On a discrete GPU this is where hot experts live: a hit costs no host->device traffic and no
// provider call (the executor asks the provider only for the experts it does not hold, and tells
// it which it served itself: LayerRouting::device_resident). An expert the provider delivers is
// written into a slot once, by the recovery kernel from its E/SM planes or by one copy of its BF16
// bytes, and computed from there (kernels/grouped_expert.h).
//
// One slot = one expert: a [3 · inter · hidden] BF16 tensor on the device, gate | up | down in
// that order, each row-major as in the checkpoint. Slots are allocated by `allocate` (torch's
// caching allocator on the device; a CPU tensor stands in for it in tests).
// Replacement: least recently used among the entries not used by the open layer. A layer needs all
// of its experts at once, so when every entry is in use the cache grows past its capacity for that
// layer (those extra slots are staging) and EndLayer trims it back, least recently used first.
// capacity 0 keeps nothing between layers: every expert is staged per use (integrated GPUs by
// default, where host memory is device memory and the provider's arena is read in place).
//
// Slots the provider's cache decides (issue 36 item 1: the cache manager tracks F slots, the
// executor owns their memory): with SetManagedSlots(n), n more slots indexed 0..n-1 hold what the
// provider's pool F holds (ExpertWeightsView::device_slot); the executor reads or writes the one a
// lease names and never chooses their residency itself. The LRU entries above are then staging only
// (capacity 0). A managed slot is allocated on first use and kept.
//
// Internal to services/executor (includes ATen). Not thread-safe: driven by the executor thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <list>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zipmoe::executor {

struct DeviceExpertCacheStats {
  uint64_t hits = 0;       // selected experts found in a slot
  uint64_t misses = 0;     // selected experts the provider delivered into a slot
  uint64_t evictions = 0;  // entries dropped to make room (or trimmed at EndLayer)
  uint64_t staged = 0;     // slots made beyond capacity for a layer
  uint64_t managed_hits = 0;    // leases naming a managed slot that holds the expert
  uint64_t managed_fills = 0;   // leases naming a managed slot to write
};

class DeviceExpertCache {
 public:
  // capacity: experts kept between layers (>= 0); allocate: a new slot tensor.
  DeviceExpertCache(int64_t capacity, std::function<at::Tensor()> allocate)
      : capacity_(capacity < 0 ? 0 : capacity), allocate_(std::move(allocate)) {}

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const DeviceExpertCacheStats& stats() const { return stats_; }

  // Starts a layer: no entry is in use.
  void BeginLayer();
  // The slot of (layer, expert), marked in use by the open layer and most recently used; nullptr
  // when absent. Counts a hit when found.
  at::Tensor* Find(int32_t layer, int32_t expert);
  // A new slot for (layer, expert), which must be absent (checked: returns the existing one and
  // counts nothing if present), in use and most recently used. Evicts the least recently used
  // entry not in use when the cache is full; grows past capacity when every entry is in use.
  // Counts a miss. The slot's contents are undefined until the caller fills it.
  at::Tensor& Insert(int32_t layer, int32_t expert);
  // Drops (layer, expert) if present (a fill that failed).
  void Erase(int32_t layer, int32_t expert);
  // Ends the layer: trims the cache to its capacity, least recently used first.
  void EndLayer();
  // Provider-managed slots (see the file comment): n >= 0 slots, none allocated yet. Replaces any
  // earlier set (their tensors are freed).
  void SetManagedSlots(int64_t n) { managed_.assign(static_cast<size_t>(n < 0 ? 0 : n), at::Tensor()); }
  int64_t managed_slots() const { return static_cast<int64_t>(managed_.size()); }
  int64_t managed_allocated() const;
  // Managed slot `s` (allocated on first use; stable address); nullptr when s is out of range.
  // holds: the provider says the slot already holds the expert (counts a managed hit; else a fill).
  at::Tensor* ManagedSlot(int32_t s, bool holds);
  // Whether (layer, expert) has a slot (no side effects).
  bool Contains(int32_t layer, int32_t expert) const { return entries_.count(Key(layer, expert)) != 0; }

 private:
  static uint64_t Key(int32_t layer, int32_t expert) {
    return static_cast<uint64_t>(static_cast<uint32_t>(layer)) << 32 | static_cast<uint32_t>(expert);
  }
  struct Entry {
    at::Tensor slot;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front = most recent)
    bool in_use = false;
  };
  // Drops the least recently used entry (not in use, with only_unused); false when none qualifies.
  bool EvictOne(bool only_unused);

  int64_t capacity_;
  std::function<at::Tensor()> allocate_;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;
  std::vector<at::Tensor> managed_;  // provider-managed slots by index (undefined until first use)
  DeviceExpertCacheStats stats_;
};

}  // namespace zipmoe::executor
