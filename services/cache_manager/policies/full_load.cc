// full-load: no cache at all; every lookup misses and every expert is read again (the baseline
// that bounds the I/O from above).
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class FullLoadRules : public CachePolicyRules {
 public:
  bool caches() const override { return false; }
  std::vector<Pool> Candidates(const PolicyView&, int32_t, int32_t, int32_t* rank) const override {
    *rank = -1;
    return {};
  }
  VictimChoice PickVictim(const PolicyView&, int32_t, int32_t, Pool, const std::vector<ResidentSlot>&,
                          bool) override {
    return {};
  }
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeFullLoadRules() { return std::make_unique<FullLoadRules>(); }

}  // namespace zipmoe::cache_manager
