// SMoE's score-based eviction (importance-driven-expert-scheduling.txt §IV-B, Eq. 3) over one
// global F pool: a full pool evicts the unpinned resident with the lowest mean router score over
// the last n steps of its layer,
//   evicted = argmin_i  Σ_{k = max(1, j−n)}^{j} S_{i,k} / (j − max(1, j−n) + 1),
// where S_{i,k} is expert i's score at step k whether it was selected or not (the executor hands
// every step's scores to the cache through ExpertProvider's BeginLayer → CacheManager::ObserveScores;
// with a batch, the mean over its tokens). Experts that high scores keep near the top-k stay cached
// as substitutes for low-score experts (`--substitution-alpha`, services/executor/routing.h). Ties,
// and experts of layers whose scores never arrived: least recently used first. The paper's
// "protection shield" for the experts of the layer being computed is the cache's pin.
#include <algorithm>
#include <vector>

#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class SmoeRules : public FPoolRules {
 public:
  SmoeRules(int32_t window, int32_t n_layers, int32_t n_experts)
      : window_(std::max(window, 1)),
        n_experts_(n_experts),
        history_(static_cast<size_t>(n_layers)),
        steps_(static_cast<size_t>(n_layers), 0),
        sum_(static_cast<size_t>(n_layers) * n_experts, 0.0) {}

  VictimChoice PickVictim(const PolicyView& v, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    return PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      const double sa = MeanScore(a.layer_id, a.expert_id), sb = MeanScore(b.layer_id, b.expert_id);
      if (sa != sb) return sa < sb;
      return v.frequency.last_use(a.layer_id, a.expert_id) < v.frequency.last_use(b.layer_id, b.expert_id);
    });
  }

  void OnScores(int32_t layer_id, const std::vector<float>& mean_scores) override {
    const size_t l = static_cast<size_t>(layer_id);
    if (l >= history_.size()) return;
    std::vector<float> row(static_cast<size_t>(n_experts_), 0.0f);
    std::copy_n(mean_scores.begin(), std::min(mean_scores.size(), row.size()), row.begin());
    std::vector<std::vector<float>>& h = history_[l];
    if (static_cast<int32_t>(h.size()) == window_) {  // the oldest step leaves the window
      const std::vector<float>& oldest = h[static_cast<size_t>(steps_[l] % window_)];
      for (int32_t e = 0; e < n_experts_; ++e) sum_[Index(layer_id, e)] -= oldest[static_cast<size_t>(e)];
      h[static_cast<size_t>(steps_[l] % window_)] = row;
    } else {
      h.push_back(row);
    }
    for (int32_t e = 0; e < n_experts_; ++e) sum_[Index(layer_id, e)] += row[static_cast<size_t>(e)];
    ++steps_[l];
  }

 private:
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * n_experts_ + expert_id;
  }
  double MeanScore(int32_t layer_id, int32_t expert_id) const {
    const size_t filled = history_[static_cast<size_t>(layer_id)].size();
    return filled == 0 ? 0.0 : sum_[Index(layer_id, expert_id)] / static_cast<double>(filled);
  }

  int32_t window_;
  int32_t n_experts_;
  std::vector<std::vector<std::vector<float>>> history_;  // per layer: ≤ window rows of [n_experts] scores (a ring)
  std::vector<uint64_t> steps_;                           // per layer: steps observed
  std::vector<double> sum_;                               // [n_layers * n_experts]: Σ over the window
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeSmoeRules(int32_t window, int32_t n_layers, int32_t n_experts) {
  return std::make_unique<SmoeRules>(window, n_layers, n_experts);
}

}  // namespace zipmoe::cache_manager
