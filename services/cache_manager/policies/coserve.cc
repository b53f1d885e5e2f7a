// CoServe's dependency-aware expert management (coserve.txt §4.3), for an MoE language model, over
// one global F pool. CoServe evicts in two stages: first experts no request in the queue depends
// on, then the rest, each stage by ascending pre-assessed usage probability per unit of memory.
// Here:
//   - "depends on": a decoding request will route its next token much like its last one, so the
//     experts the running batch selected in its latest step of their layer (the step about to be
//     looked up counts for its own layer) are the ones it depends on; every other resident goes
//     first;
//   - usage probability: the expert's activation count over the lookups of its layer. The counts
//     start from the profiling trace's when the runtime preloads (OffloadExpertProvider::Preload
//     seeds them: CoServe's offline assessment) and keep counting online. In one F pool every slot
//     has the same bytes, so probability per byte orders as probability;
//   - ties: least recently used.
// Steps are told apart by CacheManager::ObserveScores (the executor announces every layer it
// begins); without scores (a remote executor), a lookup of another layer than the previous one
// starts a step.
#include <algorithm>
#include <vector>

#include "services/cache_manager/policies/policy.h"

namespace zipmoe::cache_manager {
namespace {

class CoServeRules : public FPoolRules {
 public:
  CoServeRules(int32_t n_layers, int32_t n_experts)
      : n_experts_(n_experts),
        step_(static_cast<size_t>(n_layers), 0),
        used_in_(static_cast<size_t>(n_layers) * n_experts, 0),
        lookups_(static_cast<size_t>(n_layers), 0) {}

  VictimChoice PickVictim(const PolicyView& v, int32_t, int32_t, Pool, const std::vector<ResidentSlot>& residents,
                          bool busy_slots) override {
    return PickFirstBest(residents, busy_slots, [&](const ResidentSlot& a, const ResidentSlot& b) {
      const bool da = DependedOn(a.layer_id, a.expert_id), db = DependedOn(b.layer_id, b.expert_id);
      if (da != db) return !da;  // stage 1: experts nobody depends on leave first
      const double pa = Probability(v, a.layer_id, a.expert_id), pb = Probability(v, b.layer_id, b.expert_id);
      if (pa != pb) return pa < pb;
      return v.frequency.last_use(a.layer_id, a.expert_id) < v.frequency.last_use(b.layer_id, b.expert_id);
    });
  }

  void OnScores(int32_t layer_id, const std::vector<float>&) override {
    scored_ = true;
    ++step_[static_cast<size_t>(layer_id)];
  }

  void OnActivation(int32_t layer_id, int32_t expert_id) override {
    const size_t l = static_cast<size_t>(layer_id);
    if (!scored_ && layer_id != last_layer_) ++step_[l];
    last_layer_ = layer_id;
    used_in_[Index(layer_id, expert_id)] = step_[l];
    ++lookups_[l];
  }

 private:
  size_t Index(int32_t layer_id, int32_t expert_id) const {
    return static_cast<size_t>(layer_id) * n_experts_ + expert_id;
  }
  bool DependedOn(int32_t layer_id, int32_t expert_id) const {
    const uint64_t step = step_[static_cast<size_t>(layer_id)];
    return step > 0 && used_in_[Index(layer_id, expert_id)] == step;
  }
  double Probability(const PolicyView& v, int32_t layer_id, int32_t expert_id) const {
    // Counts include the seeded ones (the profile's assessment), lookups only this run's: the ratio
    // orders experts across layers by how often their layer used them, not an exact probability.
    const uint64_t total = std::max<uint64_t>(lookups_[static_cast<size_t>(layer_id)], 1);
    return static_cast<double>(v.frequency.count(layer_id, expert_id)) / static_cast<double>(total);
  }

  int32_t n_experts_;
  bool scored_ = false;       // steps come from OnScores
  int32_t last_layer_ = -1;   // layer of the previous activation (steps without scores)
  std::vector<uint64_t> step_;     // per layer: the latest step, 1-based (0 = none yet)
  std::vector<uint64_t> used_in_;  // [n_layers * n_experts]: the step that last selected the expert
  std::vector<uint64_t> lookups_;  // per layer: activations counted
};

}  // namespace

std::unique_ptr<CachePolicyRules> MakeCoServeRules(int32_t n_layers, int32_t n_experts) {
  return std::make_unique<CoServeRules>(n_layers, n_experts);
}

}  // namespace zipmoe::cache_manager
