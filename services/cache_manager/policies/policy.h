// The decisions that tell cache policies apart (issue 17), behind one interface: which pools an
// expert that ran may occupy (admission), and which resident leaves a full pool (eviction).
// CacheManager (cache_manager.h) keeps the mechanism every policy shares: arena slots, residency,
// pins, byte copies and counters; it calls its CachePolicyRules under its mutex, so rules need no
// locking of their own. One file per policy in this folder:
//   zipmoe.cc     rank-based dispatching over F ≺ C ≺ S ≺ E (ZipMoE §3.4): per-layer capacities
//                 from the plan, the least frequent (ties least recently used) resident leaves,
//                 only for a newcomer ranked ahead of it
//   lru.cc, fifo.cc, lfu.cc   one global F pool (MoE-Infinity-like baselines): least recently
//                 used / first inserted / least frequently used (ties least recently used) leaves
//   marking.cc    the Marking paging algorithm (Fiat et al. 1991), one global F pool
//   dali.cc       DALI's workload-aware replacement (dali.txt §4.3), one F pool per layer
//   smoe.cc       SMoE's score-based eviction (importance-driven-expert-scheduling §IV-B Eq. 3),
//                 one global F pool
//   coserve.cc    CoServe's two-stage eviction (coserve.txt §4.3), one global F pool
//   full_load.cc  caches nothing
// A prefetcher is not a cache rule: predictions reach the runtime through ExpertProvider::Prefetch
// (common/expert_provider.h) and never evict (services/pipeline/offload_provider.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "services/cache_manager/expert_frequency.h"
#include "services/cache_manager/pool_layout.h"

namespace zipmoe::cache_manager {

enum class CachePolicy : uint8_t;
struct CacheConfig;

// One occupied slot of the scope a victim is chosen from (global policies: every occupied slot of
// the pool, in slot order; per-layer policies: the pool's residents of the newcomer's layer, by
// expert id).
struct ResidentSlot {
  uint32_t slot = 0;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  bool pinned = false;         // a lease holds it, or it is not resident: never a victim
  bool resident = true;        // false: being filled or retired
  uint64_t inserted_tick = 0;  // admission order (FIFO), larger = later
};

// What rules may read, under the manager's lock.
struct PolicyView {
  const ExpertFrequency& frequency;  // activation counts, last uses, ranks
  const CacheConfig& config;         // plan (per-layer capacities), Λ text, tolerance δ
  const std::array<bool, kPoolCount>& enabled;
};

struct VictimChoice {
  int index = -1;               // into the residents given; -1 = no victim
  bool pinned_blocked = false;  // with index -1: pinned or in-flight slots prevented one
};

class CachePolicyRules {
 public:
  virtual ~CachePolicyRules() = default;
  // True: pool capacities are per layer, from CacheConfig::plan. False: one F pool of the whole
  // budget shared by every layer.
  virtual bool per_layer() const { return false; }
  // False: no pool at all (every lookup misses).
  virtual bool caches() const { return true; }
  // The pools, in hierarchy order, that (layer, expert) may take after it ran; empty = it must not
  // stay cached (it leaves its pool). *rank: the frequency rank used, -1 when none.
  virtual std::vector<Pool> Candidates(const PolicyView& view, int32_t layer_id, int32_t expert_id,
                                       int32_t* rank) const = 0;
  // The resident of pool p that leaves for the newcomer (layer, expert), or none. `busy_slots`:
  // the scope also has slots being filled or retired (never victims; listed in `residents` with
  // resident = false by global scopes only).
  virtual VictimChoice PickVictim(const PolicyView& view, int32_t layer_id, int32_t expert_id, Pool p,
                                  const std::vector<ResidentSlot>& residents, bool busy_slots) = 0;
  // A lookup counted an activation of (layer, expert) (hit or miss), before OnHit.
  virtual void OnActivation(int32_t layer_id, int32_t expert_id) { (void)layer_id, (void)expert_id; }
  // A lookup that counted an activation found (layer, expert) resident.
  virtual void OnHit(int32_t layer_id, int32_t expert_id) { (void)layer_id, (void)expert_id; }
  // (layer, expert) was given a slot (it becomes resident when its bytes are in).
  virtual void OnPlaced(int32_t layer_id, int32_t expert_id) { (void)layer_id, (void)expert_id; }
  // The batch's mean router scores of every expert of `layer_id` ([n_experts]) for the step about
  // to look its experts up (CacheManager::ObserveScores), before that step's OnActivation calls.
  virtual void OnScores(int32_t layer_id, const std::vector<float>& mean_scores) {
    (void)layer_id, (void)mean_scores;
  }
};

// Policies whose every expert that ran may take the F pool (lru, fifo, lfu, marking, dali): the
// victim choice alone tells them apart.
class FPoolRules : public CachePolicyRules {
 public:
  std::vector<Pool> Candidates(const PolicyView&, int32_t, int32_t, int32_t* rank) const override {
    *rank = -1;
    return {Pool::kF};
  }
};

// The rules of `policy` for a model of n_layers × n_experts. With config.pools_from_plan, a caching
// policy other than zipmoe is wrapped so that admission is ZipMoE's rank-based dispatching over the
// planned per-layer pools and the policy picks the victim within each pool. ZM_CHECKs the enum value.
std::unique_ptr<CachePolicyRules> MakeCachePolicyRules(CachePolicy policy, const CacheConfig& config,
                                                       int32_t n_layers, int32_t n_experts);

// The victim among unpinned residents: the first in `residents` order for which no other is
// `better_victim` (a strict weak order). Shared by every policy's PickVictim.
template <typename Better>
VictimChoice PickFirstBest(const std::vector<ResidentSlot>& residents, bool busy_slots, Better better_victim) {
  VictimChoice c;
  bool any_pinned = false;
  for (size_t i = 0; i < residents.size(); ++i) {
    if (residents[i].pinned) {
      any_pinned = true;
      continue;
    }
    if (c.index < 0 || better_victim(residents[i], residents[static_cast<size_t>(c.index)])) c.index = static_cast<int>(i);
  }
  if (c.index < 0) c.pinned_blocked = any_pinned || busy_slots;
  return c;
}

}  // namespace zipmoe::cache_manager
