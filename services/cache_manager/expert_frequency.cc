#include "services/cache_manager/expert_frequency.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "common/status.h"

namespace zipmoe::cache_manager {

ExpertFrequency::ExpertFrequency(int32_t n_layers, int32_t n_experts)
    : n_layers_(n_layers),
      n_experts_(n_experts),
      counts_(static_cast<size_t>(n_layers) * n_experts, 0),
      last_use_(static_cast<size_t>(n_layers) * n_experts, 0) {}

void ExpertFrequency::Record(int32_t layer_id, int32_t expert_id, uint64_t tick) {
  ZM_CHECK(layer_id >= 0 && layer_id < n_layers_ && expert_id >= 0 && expert_id < n_experts_)
      << "layer " << layer_id << " expert " << expert_id;
  const size_t i = Index(layer_id, expert_id);
  ++counts_[i];
  last_use_[i] = std::max(last_use_[i], tick);
}

bool ExpertFrequency::Ahead(int32_t layer_id, int32_t a, int32_t b) const {
  const size_t ia = Index(layer_id, a), ib = Index(layer_id, b);
  if (counts_[ia] != counts_[ib]) return counts_[ia] > counts_[ib];
  if (last_use_[ia] != last_use_[ib]) return last_use_[ia] > last_use_[ib];
  return a < b;
}

int32_t ExpertFrequency::Rank(int32_t layer_id, int32_t expert_id) const {
  int32_t rank = 0;
  for (int32_t e = 0; e < n_experts_; ++e) {
    if (e != expert_id && Ahead(layer_id, e, expert_id)) ++rank;
  }
  return rank;
}

std::vector<int32_t> ExpertFrequency::RankOrder(int32_t layer_id) const {
  std::vector<int32_t> order(n_experts_);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return a != b && Ahead(layer_id, a, b); });
  return order;
}

std::vector<uint64_t> ExpertFrequency::SortedCounts(int32_t layer_id) const {
  std::vector<uint64_t> counts(counts_.begin() + Index(layer_id, 0), counts_.begin() + Index(layer_id, 0) + n_experts_);
  std::sort(counts.begin(), counts.end(), std::greater<uint64_t>());
  return counts;
}

void ExpertFrequency::Seed(int32_t layer_id, int32_t expert_id, uint64_t count) {
  ZM_CHECK(layer_id >= 0 && layer_id < n_layers_ && expert_id >= 0 && expert_id < n_experts_)
      << "layer " << layer_id << " expert " << expert_id;
  counts_[Index(layer_id, expert_id)] = count;
  last_use_[Index(layer_id, expert_id)] = 0;
}

void ExpertFrequency::Reset() {
  std::fill(counts_.begin(), counts_.end(), 0);
  std::fill(last_use_.begin(), last_use_.end(), 0);
}

}  // namespace zipmoe::cache_manager
