// DALI's Workload-Aware Cache Replacement (dali.txt §4.3, Algorithm 2), adapted to a cache filled
// after use. DALI keeps cache_size experts per MoE layer and, every w_size tokens, swaps the u_size
// highest-scored uncached experts for the u_size lowest-scored cached ones, the score s_k being
// expert k's workload summed over the window (Eq. 12). Here:
//   - one F pool per layer of equal size (DaliPlan);
//   - s_k = activations of k among the layer's last W lookups (CacheConfig::workload_window =
//     w_size tokens × top-k: a sliding window rather than a reset one);
//   - an expert that just ran takes a free slot, or replaces the unpinned resident with the lowest
//     score (ties: least recently used) when it ranks ahead of it by (score, last use), at most
//     u_size (CacheConfig::replacements_per_window) times per W lookups of the layer.
// Proactive transfers of uncached high-workload experts are the prefetcher's job
// (ExpertProvider::Prefetch, `--prefetch residual` is DALI's own).
#include <algorithm>
#include <deque>

#include "services/cache_manager/cache_manager.h"
#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class DaliRules : public FPoolRules {
 public:
  DaliRules(int32_t window, int32_t replacements, int32_t n_layers, int32_t n_experts)
      : window_(std::max(window, 1)),
        replacements_(std::max(replacements, 1)),
        n_experts_(n_experts),
        score_(static_cast<size_t>(n_layers) * n_experts, 0),
        recent_(static_cast<size_t>(n_layers)),
        lookups_(static_cast<size_t>(n_layers), 0),
        replaced_(static_cast<size_t>(n_layers), 0) {}

  bool per_layer() const override { return true; }

  VictimChoice PickVictim(const PolicyView& v, int32_t layer_id, int32_t expert_id, Pool,
                          const std::vector<ResidentSlot>& residents, bool busy_slots) override {
    auto worse = [&](int32_t a, int32_t b) {  // a is a better victim than b: lower score, then older use
      if (Score(layer_id, a) != Score(layer_id, b)) return Score(layer_id, a) < Score(layer_id, b);
      return v.frequency.last_use(layer_id, a) < v.frequency.last_use(layer_id, b);
    };
    VictimChoice c = PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      return worse(a.expert_id, b.expert_id);
    });
    if (c.index < 0) return c;
    // Only an expert with more recent workload replaces, and only u_size times per window.
    if (replaced_[static_cast<size_t>(layer_id)] >= replacements_ ||
        !worse(residents[static_cast<size_t>(c.index)].expert_id, expert_id)) {
      c.index = -1;
      return c;
    }
    ++replaced_[static_cast<size_t>(layer_id)];
    return c;
  }

  void OnActivation(int32_t layer_id, int32_t expert_id) override {
    const size_t l = static_cast<size_t>(layer_id);
    std::deque<int32_t>& recent = recent_[l];
    recent.push_back(expert_id);
    ++score_[Index(layer_id, expert_id)];
    if (static_cast<int32_t>(recent.size()) > window_) {
      --score_[Index(layer_id, recent.front())];
      recent.pop_front();
    }
    if (++lookups_[l] % static_cast<uint64_t>(window_) == 0) replaced_[l] = 0;  // a new window
  }

 private:
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * n_experts_ + expert_id;
  }
  int32_t Score(int32_t layer_id, int32_t expert_id) const { return score_[Index(layer_id, expert_id)]; }

  int32_t window_;
  int32_t replacements_;
  int32_t n_experts_;
  std::vector<int32_t> score_;              // [n_layers * n_experts]: activations in the window
  std::vector<std::deque<int32_t>> recent_;  // per layer: the window's lookups, oldest first
  std::vector<uint64_t> lookups_;           // per layer
  std::vector<int32_t> replaced_;           // per layer: replacements in the current window
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeDaliRules(int32_t window, int32_t replacements, int32_t n_layers,
                                                int32_t n_experts) {
  return std::make_unique<DaliRules>(window, replacements, n_layers, n_experts);
}

}  // namespace zipmoe::cache_manager
