#include "services/executor/device_expert_cache.h"

namespace zipmoe::executor {

void DeviceExpertCache::BeginLayer() {
  for (auto& [key, e] : entries_) e.in_use = false;
}

at::Tensor* DeviceExpertCache::Find(int32_t layer, int32_t expert) {
  auto it = entries_.find(Key(layer, expert));
  if (it == entries_.end()) return nullptr;
  Entry& e = it->second;
  lru_.splice(lru_.begin(), lru_, e.lru);
  e.in_use = true;
  ++stats_.hits;
  return &e.slot;
}

at::Tensor& DeviceExpertCache::Insert(int32_t layer, int32_t expert) {
  const uint64_t key = Key(layer, expert);
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.in_use = true;
    return it->second.slot;
  }
  // Full: the least recently used entry the layer does not use makes room; none left = staging.
  if (size() >= capacity_ && !EvictOne(/*only_unused=*/true)) ++stats_.staged;
  lru_.push_front(key);
  Entry& e = entries_[key];
  e.slot = allocate_();
  e.lru = lru_.begin();
  e.in_use = true;
  ++stats_.misses;
  return e.slot;
}

void DeviceExpertCache::Erase(int32_t layer, int32_t expert) {
  auto it = entries_.find(Key(layer, expert));
  if (it == entries_.end()) return;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void DeviceExpertCache::EndLayer() {
  while (size() > capacity_) EvictOne(/*only_unused=*/false);
  for (auto& [key, e] : entries_) e.in_use = false;
}

bool DeviceExpertCache::EvictOne(bool only_unused) {
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    auto entry = entries_.find(*it);
    if (only_unused && entry->second.in_use) continue;
    lru_.erase(std::next(it).base());
    entries_.erase(entry);
    ++stats_.evictions;
    return true;
  }
  return false;
}

int64_t DeviceExpertCache::managed_allocated() const {
  int64_t n = 0;
  for (const at::Tensor& t : managed_) n += t.defined();
  return n;
}

at::Tensor* DeviceExpertCache::ManagedSlot(int32_t s, bool holds) {
  if (s < 0 || static_cast<size_t>(s) >= managed_.size()) return nullptr;
  at::Tensor& slot = managed_[static_cast<size_t>(s)];
  if (!slot.defined()) slot = allocate_();
  ++(holds ? stats_.managed_hits : stats_.managed_fills);
  return &slot;
}

}  // namespace zipmoe::executor
