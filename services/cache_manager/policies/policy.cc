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

std::unique_ptr<CachePolicyRules> MakeCachePolicyRules(CachePolicy policy, const CacheConfig& config,
                                                       int32_t n_layers, int32_t n_experts) {
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

}  // namespace zipmoe::cache_manager
