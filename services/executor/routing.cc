#include "services/executor/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace zipmoe::executor {
namespace {

// NaN sorts below everything, so a broken router never wins a tie-break by accident.
inline float Key(float v) { return std::isnan(v) ? -std::numeric_limits<float>::infinity() : v; }

// Indices of the k largest values of v[0, n): descending value, ties by ascending index.
void TopK(const float* v, int64_t n, int64_t k, std::vector<int32_t>* out) {
  out->resize(static_cast<size_t>(n));
  std::iota(out->begin(), out->end(), 0);
  std::partial_sort(out->begin(), out->begin() + k, out->end(), [v](int32_t a, int32_t b) {
    const float va = Key(v[a]), vb = Key(v[b]);
    return va > vb || (va == vb && a < b);
  });
  out->resize(static_cast<size_t>(k));
}

}  // namespace

RouterParams RouterParamsFor(const ModelConfig& config) {
  RouterParams p;
  p.arch = config.arch;
  p.n_experts = config.num_experts;
  p.top_k = config.num_experts_per_tok;
  p.norm_topk_prob = config.norm_topk_prob;
  p.routed_scaling_factor = config.routed_scaling_factor;
  p.topk_method = config.topk_method;
  p.n_group = config.n_group;
  p.topk_group = config.topk_group;
  return p;
}

void SelectExperts(const float* scores, int64_t n_tokens, const RouterParams& p, int32_t* topk_ids,
                   float* topk_weights) {
  const int64_t e = p.n_experts, k = p.top_k;
  std::vector<int32_t> order;
  std::vector<float> masked;
  std::vector<float> group_scores;
  std::vector<int32_t> group_order;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = scores + t * e;
    const float* select_from = row;
    if (p.arch == ModelArch::kDeepseekV2 && p.topk_method == TopkMethod::kGroupLimitedGreedy) {
      const int64_t per_group = e / p.n_group;
      group_scores.assign(static_cast<size_t>(p.n_group), 0.0f);
      for (int64_t g = 0; g < p.n_group; ++g) {
        float m = row[g * per_group];
        for (int64_t i = 1; i < per_group; ++i) m = std::max(m, row[g * per_group + i]);
        group_scores[static_cast<size_t>(g)] = m;
      }
      TopK(group_scores.data(), p.n_group, p.topk_group, &group_order);
      masked.assign(static_cast<size_t>(e), 0.0f);  // scores.masked_fill(~score_mask, 0.0)
      for (int32_t g : group_order)
        std::copy(row + g * per_group, row + (g + 1) * per_group, masked.begin() + g * per_group);
      select_from = masked.data();
    }
    TopK(select_from, e, k, &order);
    int32_t* ids = topk_ids + t * k;
    float* w = topk_weights + t * k;
    for (int64_t j = 0; j < k; ++j) {
      ids[j] = order[static_cast<size_t>(j)];
      w[j] = select_from[order[static_cast<size_t>(j)]];
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += w[j];
    if (p.arch == ModelArch::kDeepseekV2) {
      if (k > 1 && p.norm_topk_prob) {
        const float denominator = sum + 1e-20f;
        for (int64_t j = 0; j < k; ++j) w[j] = w[j] / denominator;
      } else {
        const float scale = static_cast<float>(p.routed_scaling_factor);
        for (int64_t j = 0; j < k; ++j) w[j] = w[j] * scale;
      }
    } else if (p.arch == ModelArch::kMixtral || p.norm_topk_prob) {
      for (int64_t j = 0; j < k; ++j) w[j] = w[j] / sum;
    }
  }
}

ExpertAssignment GroupByExpert(const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens,
                               int64_t top_k) {
  int32_t max_id = -1;
  for (int64_t i = 0; i < n_tokens * top_k; ++i) max_id = std::max(max_id, topk_ids[i]);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(max_id + 1));
  std::vector<std::vector<float>> weights(static_cast<size_t>(max_id + 1));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t id = topk_ids[t * top_k + j];
      rows[static_cast<size_t>(id)].push_back(t);
      weights[static_cast<size_t>(id)].push_back(topk_weights[t * top_k + j]);
    }
  }
  ExpertAssignment a;
  for (int32_t id = 0; id <= max_id; ++id) {
    if (rows[static_cast<size_t>(id)].empty()) continue;
    a.expert_ids.push_back(id);
    a.token_rows.push_back(std::move(rows[static_cast<size_t>(id)]));
    a.weights.push_back(std::move(weights[static_cast<size_t>(id)]));
  }
  return a;
}

}  // namespace zipmoe::executor
