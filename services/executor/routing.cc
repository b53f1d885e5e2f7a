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

RouterParams RouterParamsFor(const ModelConfig& config, const float* selection_bias) {
  RouterParams p;
  p.scoring_func = config.scoring_func;
  p.selection_bias = selection_bias;
  p.norm_min = config.norm_min;
  p.topk_norm_epsilon = config.topk_norm_epsilon;
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

void ScoreRows(float* x, int64_t n, int64_t d, ScoringFunc scoring) {
  if (scoring == ScoringFunc::kSigmoid) {
    for (int64_t i = 0; i < n * d; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
    return;
  }
  for (int64_t t = 0; t < n; ++t) {  // softmax: exp(x - max) / sum
    float* r = x + t * d;
    const float m = *std::max_element(r, r + d);
    float sum = 0.0f;
    for (int64_t i = 0; i < d; ++i) sum += r[i] = std::exp(r[i] - m);
    for (int64_t i = 0; i < d; ++i) r[i] /= sum;
  }
}

namespace {

// Per-token scratch of SelectionScores (reused across tokens: no allocation after the first).
struct Scratch {
  std::vector<float> masked, group_scores;
  std::vector<int32_t> group_order, order;
  std::vector<uint8_t> keep;
};

// The scores top-k selects from for one token: the row itself, DeepSeek-V2's group-limited masking
// of it, or noaux_tc's biased and group-masked copy (into s->masked).
const float* SelectionScores(const float* row, const RouterParams& p, Scratch* s) {
  const bool noaux = p.topk_method == TopkMethod::kNoauxTc;
  const bool v2_groups = p.arch == ModelArch::kDeepseekV2 && p.topk_method == TopkMethod::kGroupLimitedGreedy;
  if (!noaux && !v2_groups) return row;
  const int64_t e = p.n_experts;
  s->masked.assign(row, row + e);
  if (noaux) {  // scores_for_choice = scores + e_score_correction_bias
    if (p.selection_bias != nullptr)
      for (int64_t i = 0; i < e; ++i) s->masked[static_cast<size_t>(i)] += p.selection_bias[i];
    if (p.n_group <= 1 || p.topk_group >= p.n_group) return s->masked.data();  // every group kept: no mask
  }
  const float* choice = s->masked.data();
  const int64_t per_group = e / p.n_group;
  s->group_scores.assign(static_cast<size_t>(p.n_group), 0.0f);
  for (int64_t g = 0; g < p.n_group; ++g) {
    const float* v = choice + g * per_group;
    if (noaux) {  // .topk(2, dim=-1)[0].sum(dim=-1): the two largest, largest first
      float a = Key(v[0]), b = Key(v[1]);
      if (b > a) std::swap(a, b);
      for (int64_t i = 2; i < per_group; ++i) {
        const float x = Key(v[i]);
        if (x > a) {
          b = a;
          a = x;
        } else if (x > b) {
          b = x;
        }
      }
      s->group_scores[static_cast<size_t>(g)] = a + b;
    } else {
      float m = v[0];
      for (int64_t i = 1; i < per_group; ++i) m = std::max(m, v[i]);
      s->group_scores[static_cast<size_t>(g)] = m;
    }
  }
  TopK(s->group_scores.data(), p.n_group, p.topk_group, &s->group_order);
  // masked_fill(~score_mask, 0.0): the groups not kept are zeroed in place.
  s->keep.assign(static_cast<size_t>(p.n_group), 0);
  for (int32_t g : s->group_order) s->keep[static_cast<size_t>(g)] = 1;
  for (int64_t g = 0; g < p.n_group; ++g)
    if (s->keep[static_cast<size_t>(g)] == 0)
      std::fill(s->masked.begin() + g * per_group, s->masked.begin() + (g + 1) * per_group, 0.0f);
  return s->masked.data();
}

// The combine weights of one token's k selected experts ids[0, k) (descending selection score),
// per architecture (see routing.h): from the selection scores, or for noaux_tc from the unbiased
// scores `row`.
void Weigh(const float* row, const float* select_from, const int32_t* ids, const RouterParams& p, float* w) {
  const int64_t k = p.top_k;
  if (p.topk_method == TopkMethod::kNoauxTc) {
    for (int64_t j = 0; j < k; ++j) w[j] = row[ids[j]];
    if (p.norm_topk_prob) {
      float sum = 0.0f;
      for (int64_t j = 0; j < k; ++j) sum += w[j];
      const float denominator = p.norm_min > 0.0 ? std::max(sum, static_cast<float>(p.norm_min))
                                                 : sum + static_cast<float>(p.topk_norm_epsilon);
      for (int64_t j = 0; j < k; ++j) w[j] = w[j] / denominator;
    }
    const float scale = static_cast<float>(p.routed_scaling_factor);
    for (int64_t j = 0; j < k; ++j) w[j] = w[j] * scale;
    return;
  }
  for (int64_t j = 0; j < k; ++j) w[j] = select_from[ids[j]];
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

// a before b: higher score, ties lower id (TopK's order).
bool Before(const float* v, int32_t a, int32_t b) {
  const float va = Key(v[a]), vb = Key(v[b]);
  return va > vb || (va == vb && a < b);
}

}  // namespace

void SelectExperts(const float* scores, int64_t n_tokens, const RouterParams& p, int32_t* topk_ids,
                   float* topk_weights) {
  const int64_t e = p.n_experts, k = p.top_k;
  Scratch s;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* select_from = SelectionScores(scores + t * e, p, &s);
    TopK(select_from, e, k, &s.order);
    std::copy(s.order.begin(), s.order.begin() + k, topk_ids + t * k);
    Weigh(scores + t * e, select_from, topk_ids + t * k, p, topk_weights + t * k);
  }
}

int64_t SubstituteExperts(const float* scores, int64_t n_tokens, const RouterParams& p, double alpha,
                          const uint8_t* cached, int32_t* topk_ids, float* topk_weights) {
  const int64_t e = p.n_experts, k = p.top_k;
  if (alpha <= 0.0 || k >= e || k <= 0) return 0;
  Scratch scratch;
  std::vector<int32_t>& order = scratch.order;
  // S_{k+1} per token, and C: every token's top-score experts.
  std::vector<float> next_score(static_cast<size_t>(n_tokens));
  std::vector<uint8_t> top_score(static_cast<size_t>(e), 0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* s = SelectionScores(scores + t * e, p, &scratch);
    TopK(s, e, k + 1, &order);
    const float sk1 = Key(s[order[static_cast<size_t>(k)]]);
    next_score[static_cast<size_t>(t)] = sk1;
    const float high = static_cast<float>((1.0 + alpha) * sk1);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = topk_ids[t * k + j];
      if (Key(s[id]) >= high) top_score[static_cast<size_t>(id)] = 1;
    }
  }
  auto available = [&](int32_t id) { return cached[id] != 0 || top_score[static_cast<size_t>(id)] != 0; };
  int64_t substituted = 0;
  std::vector<int32_t> replace, substitutes;
  std::vector<uint8_t> selected(static_cast<size_t>(e));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* s = SelectionScores(scores + t * e, p, &scratch);
    const float sk1 = next_score[static_cast<size_t>(t)];
    const float high = static_cast<float>((1.0 + alpha) * sk1);
    const float low = static_cast<float>((1.0 - alpha) * sk1);
    int32_t* ids = topk_ids + t * k;
    std::fill(selected.begin(), selected.end(), 0);
    replace.clear();
    for (int64_t j = 0; j < k; ++j) {
      selected[static_cast<size_t>(ids[j])] = 1;
      if (Key(s[ids[j]]) < high && !available(ids[j])) replace.push_back(static_cast<int32_t>(j));
    }
    if (replace.empty()) continue;
    substitutes.clear();
    for (int32_t id = 0; id < e; ++id) {
      if (!selected[static_cast<size_t>(id)] && Key(s[id]) >= low && s[id] > 0.0f && available(id))
        substitutes.push_back(id);
    }
    if (substitutes.empty()) continue;
    std::sort(substitutes.begin(), substitutes.end(), [s](int32_t a, int32_t b) { return Before(s, a, b); });
    // Replace the lowest-scored low-score experts first (ids[] is in descending score).
    std::reverse(replace.begin(), replace.end());
    const size_t n = std::min(replace.size(), substitutes.size());
    for (size_t i = 0; i < n; ++i) ids[replace[i]] = substitutes[i];
    substituted += static_cast<int64_t>(n);
    std::sort(ids, ids + k, [s](int32_t a, int32_t b) { return Before(s, a, b); });
    Weigh(scores + t * e, s, ids, p, topk_weights + t * k);
  }
  return substituted;
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
