// FIFO over one global F pool: the first inserted unpinned resident leaves.
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class FifoRules : public FPoolRules {
 public:
  VictimChoice PickVictim(const PolicyView&, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    return PickFirstBest(residents, busy_slots,
                         [](const ResidentSlot& a, const ResidentSlot& b) { return a.inserted_tick < b.inserted_tick; });
  }
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeFifoRules() { return std::make_unique<FifoRules>(); }

}  // namespace zipmoe::cache_manager
