#include "services/cache_manager/policies/policy.h"

#include "common/status.h"
#include "services/cache_manager/cache_manager.h"

namespace zipmoe::cache_manager {

// One factory per policy file.
std::unique_ptr<CachePolicyRules> MakeZipMoeRules();
std::unique_ptr<CachePolicyRules> MakeLruRules();
std::unique_ptr<CachePolicyRules> MakeFifoRules();
std::unique_ptr<CachePolicyRules> MakeLfuRules();
std::unique_ptr<CachePolicyRules> MakeMarkingRules(uint64_t seed, int32_t n_layers, int32_t n_experts);
std::unique_ptr<CachePolicyRules> MakeFullLoadRules();
std::unique_ptr<CachePolicyRules> MakeDaliRules(int32_t window, int32_t replacements, int32_t n_layers,
                                                int32_t n_experts);
std::unique_ptr<CachePolicyRules> MakeSmoeRules(int32_t window, int32_t n_layers, int32_t n_experts);
std::unique_ptr<CachePolicyRules> MakeCoServeRules(int32_t n_layers, int32_t n_experts);

namespace {

// Issue 17 item 5: a policy over the planner's per-layer F/C/S/E pools. Which pools an expert may take
// is ZipMoE's rank-based dispatching (the planned capacities are what it is sized for); which resident
// leaves a full pool is the wrapped policy's choice, among that pool's residents of the layer.
class PlannedPoolsRules : public CachePolicyRules {
 public:
  explicit PlannedPoolsRules(std::unique_ptr<CachePolicyRules> eviction)
      : dispatch_(MakeZipMoeRules()), eviction_(std::move(eviction)) {}
  bool per_layer() const override { return true; }
  std::vector<Pool> Candidates(const PolicyView& view, int32_t layer_id, int32_t expert_id,
                               int32_t* rank) const override {
    return dispatch_->Candidates(view, layer_id, expert_id, rank);
  }
  VictimChoice PickVictim(const PolicyView& view, int32_t layer_id, int32_t expert_id, Pool p,
                          const std::vector<ResidentSlot>& residents, bool busy_slots) override {
    return eviction_->PickVictim(view, layer_id, expert_id, p, residents, busy_slots);
  }
  void OnActivation(int32_t layer_id, int32_t expert_id) override { eviction_->OnActivation(layer_id, expert_id); }
  void OnHit(int32_t layer_id, int32_t expert_id) override { eviction_->OnHit(layer_id, expert_id); }
  void OnPlaced(int32_t layer_id, int32_t expert_id) override { eviction_->OnPlaced(layer_id, expert_id); }
  void OnScores(int32_t layer_id, const std::vector<float>& mean_scores) override {
    eviction_->OnScores(layer_id, mean_scores);
  }

 private:
  std::unique_ptr<CachePolicyRules> dispatch_;
  std::unique_ptr<CachePolicyRules> eviction_;
};

std::unique_ptr<CachePolicyRules> MakeOwnRules(CachePolicy policy, const CacheConfig& config, int32_t n_layers,
                                               int32_t n_experts) {
  switch (policy) {
    case CachePolicy::kZipMoe: return MakeZipMoeRules();
    case CachePolicy::kLru: return MakeLruRules();
    case CachePolicy::kFifo: return MakeFifoRules();
    case CachePolicy::kLfu: return MakeLfuRules();
    case CachePolicy::kMarking: return MakeMarkingRules(config.marking_seed, n_layers, n_experts);
    case CachePolicy::kFullLoad: return MakeFullLoadRules();
    case CachePolicy::kDali:
      return MakeDaliRules(config.workload_window, config.replacements_per_window, n_layers, n_experts);
    case CachePolicy::kSmoe: return MakeSmoeRules(config.score_window, n_layers, n_experts);
    case CachePolicy::kCoServe: return MakeCoServeRules(n_layers, n_experts);
  }
  ZM_CHECK(false) << "unknown cache policy " << static_cast<int>(policy);
  return nullptr;
}

}  // namespace

std::unique_ptr<CachePolicyRules> MakeCachePolicyRules(CachePolicy policy, const CacheConfig& config,
                                                       int32_t n_layers, int32_t n_experts) {
  std::unique_ptr<CachePolicyRules> own = MakeOwnRules(policy, config, n_layers, n_experts);
  if (!config.pools_from_plan || policy == CachePolicy::kZipMoe || !own->caches()) return own;
  return std::make_unique<PlannedPoolsRules>(std::move(own));
}

}  // namespace zipmoe::cache_manager
