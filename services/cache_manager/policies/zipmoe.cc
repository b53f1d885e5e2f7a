// ZipMoE's rank-based pool dispatching (§3.4 "Pool Dispatching"): an expert of frequency rank r
// may take pool i of F ≺ C ≺ S ≺ E (within Λ) while r < τ_i = Σ_{j ≤ i} S_j + δ, S_j the layer's
// planned capacity of pool j; a full pool gives up its least frequent resident (ties: least
// recently used), only for a newcomer ranked ahead of it.
#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class ZipMoeRules : public CachePolicyRules {
 public:
  bool per_layer() const override { return true; }

  std::vector<Pool> Candidates(const PolicyView& v, int32_t layer_id, int32_t expert_id, int32_t* rank) const override {
    std::vector<Pool> out;
    *rank = v.frequency.Rank(layer_id, expert_id);
    int64_t tau = 0;
    for (Pool p : kPoolOrder) {
      if (!v.enabled[PoolIndex(p)]) continue;
      tau += v.config.plan.capacity[layer_id][PoolIndex(p)];
      if (*rank < tau + v.config.tolerance) out.push_back(p);  // r < τ_i
    }
    return out;
  }

  VictimChoice PickVictim(const PolicyView& v, int32_t layer_id, int32_t expert_id, Pool /*p*/,
                          const std::vector<ResidentSlot>& residents, bool busy_slots) override {
    // Least frequent (ties: least recently used) of the layer's unpinned residents...
    VictimChoice c = PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      return v.frequency.Ahead(layer_id, b.expert_id, a.expert_id);
    });
    // ...and the newcomer must rank ahead of it, or it does not belong here more than it does.
    if (c.index >= 0 && !v.frequency.Ahead(layer_id, expert_id, residents[static_cast<size_t>(c.index)].expert_id))
      c.index = -1;
    return c;
  }
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeZipMoeRules() { return std::make_unique<ZipMoeRules>(); }

}  // namespace zipmoe::cache_manager
