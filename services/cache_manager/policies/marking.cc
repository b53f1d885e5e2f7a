// The Marking paging algorithm (Fiat et al. 1991) over one global F pool: a request marks its
// expert (a hit, or a miss once placed); a full pool evicts a uniformly random unmarked unpinned
// resident (std::mt19937_64 seeded with CacheConfig::marking_seed), and when every resident is
// marked it first unmarks them all (a new phase).
#include <random>

#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class MarkingRules : public FPoolRules {
 public:
  MarkingRules(uint64_t seed, int32_t n_layers, int32_t n_experts)
      : rng_(seed), n_experts_(n_experts), marked_(static_cast<size_t>(n_layers) * n_experts, false) {}


  VictimChoice PickVictim(const PolicyView&, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    std::vector<int> unmarked;
    bool any_unmarked = false, any_pinned = false;
    auto collect = [&] {
      unmarked.clear();
      any_unmarked = any_pinned = false;
      for (size_t i = 0; i < residents.size(); ++i) {
        const bool m = marked_[Index(residents[i])];
        any_unmarked |= residents[i].resident && !m;
        if (residents[i].pinned) {
          any_pinned = true;
        } else if (!m) {
          unmarked.push_back(static_cast<int>(i));
        }
      }
    };
    collect();
    if (!any_unmarked) {  // every resident is marked: a new phase begins (slots in flight unmarked too)
      for (const ResidentSlot& r : residents) marked_[Index(r)] = false;
      collect();
    }
    VictimChoice c;
    if (unmarked.empty()) {
      c.pinned_blocked = any_pinned || busy_slots;
      return c;
    }
    c.index = unmarked[rng_() % unmarked.size()];
    return c;
  }

  void OnHit(int32_t layer_id, int32_t expert_id) override { marked_[Index(layer_id, expert_id)] = true; }
  // The requested page is marked on its miss too, once placed.
  void OnPlaced(int32_t layer_id, int32_t expert_id) override { marked_[Index(layer_id, expert_id)] = true; }

 private:
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * n_experts_ + expert_id;
  }
  size_t Index(const ResidentSlot& r) const { return Index(r.layer_id, r.expert_id); }
  std::mt19937_64 rng_;
  int32_t n_experts_;
  std::vector<bool> marked_;  // [n_layers * n_experts]: requested in the current phase
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeMarkingRules(uint64_t seed, int32_t n_layers, int32_t n_experts) {
  return std::make_unique<MarkingRules>(seed, n_layers, n_experts);
}

}  // namespace zipmoe::cache_manager
