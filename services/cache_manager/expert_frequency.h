// Runtime activation statistics per (layer, expert) and the frequency rank used by pool dispatching
// (ZipMoE §3.4 "Pool Dispatching": "a runtime frequency list to record the actual activation counts
// of each expert").
//
// count(l, e): steps in which expert e of layer l was selected (one Record per selection).
// last_use(l, e): the caller's logical clock at the latest Record (0 = never used).
// Rank order within a layer, best first: higher count, then more recent use, then lower expert id.
// The rank of e is the number of experts of its layer ahead of it (0 = most frequent); eviction
// picks the opposite end (least frequent, ties least recently used), so both agree.
//
// Thread-compatible: the cache manager guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zipmoe::cache_manager {

class ExpertFrequency {
 public:
  ExpertFrequency() = default;
  ExpertFrequency(int32_t n_layers, int32_t n_experts);

  // Counts one activation of (layer, expert) at logical time `tick` (> 0, non-decreasing).
  void Record(int32_t layer_id, int32_t expert_id, uint64_t tick);
  uint64_t count(int32_t layer_id, int32_t expert_id) const { return counts_[Index(layer_id, expert_id)]; }
  uint64_t last_use(int32_t layer_id, int32_t expert_id) const { return last_use_[Index(layer_id, expert_id)]; }

  // True if expert `a` ranks ahead of expert `b` in `layer_id` (a != b; a total order).
  bool Ahead(int32_t layer_id, int32_t a, int32_t b) const;
  // Experts of the layer ahead of `expert_id`: its 0-based rank. O(n_experts).
  int32_t Rank(int32_t layer_id, int32_t expert_id) const;
  // Expert ids of the layer, best rank first. O(n_experts log n_experts).
  std::vector<int32_t> RankOrder(int32_t layer_id) const;
  // Activation counts of the layer in non-increasing order: count at rank r (divide by the number of
  // steps for the planner's inclusion probabilities f_r).
  std::vector<uint64_t> SortedCounts(int32_t layer_id) const;
  void Reset();
  // Sets the count of (layer, expert) and clears its last use: a warm start of the ranks from a
  // profiling trace (CacheManager::SeedFrequencies). ZM_CHECKs the ids like Record.
  void Seed(int32_t layer_id, int32_t expert_id, uint64_t count);

  int32_t n_layers() const { return n_layers_; }
  int32_t n_experts() const { return n_experts_; }

 private:
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * n_experts_ + expert_id;
  }
  int32_t n_layers_ = 0;
  int32_t n_experts_ = 0;
  std::vector<uint64_t> counts_;    // [n_layers * n_experts]
  std::vector<uint64_t> last_use_;  // [n_layers * n_experts]
};

}  // namespace zipmoe::cache_manager
