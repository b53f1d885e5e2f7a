// LRU over one global F pool: the least recently used unpinned resident leaves.
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class LruRules : public FPoolRules {
 public:
  VictimChoice PickVictim(const PolicyView& v, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    return PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      return v.frequency.last_use(a.layer_id, a.expert_id) < v.frequency.last_use(b.layer_id, b.expert_id);
    });
  }
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeLruRules() { return std::make_unique<LruRules>(); }

}  // namespace zipmoe::cache_manager
