// LFU over one global F pool: the least frequently used unpinned resident leaves (ties: least
// recently used).
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class LfuRules : public FPoolRules {
 public:
  VictimChoice PickVictim(const PolicyView& v, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    return PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      const uint64_t ca = v.frequency.count(a.layer_id, a.expert_id), cb = v.frequency.count(b.layer_id, b.expert_id);
      if (ca != cb) return ca < cb;
      return v.frequency.last_use(a.layer_id, a.expert_id) < v.frequency.last_use(b.layer_id, b.expert_id);
    });
  }
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeLfuRules() { return std::make_unique<LfuRules>(); }

}  // namespace zipmoe::cache_manager
