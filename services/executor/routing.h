// Router top-k selection and weight normalisation of each architecture's MoE block, torch-free
// (the executor computes router_logits = gate(x) in float32 and the scores with ScoreRows, then
// calls this on the CPU copy of the scores).
//
// Selection: the top_k largest scores per token; ties go to the lowest expert index first (the
// order torch.topk produces on the CPU for equal values). Output slots are in descending score.
// Weights, per architecture (transformers / modeling_deepseek.py):
//   mixtral (MixtralSparseMoeBlock): w = p / sum(p) always.
//   qwen2_moe, qwen3_moe, olmoe: w = p / sum(p) if norm_topk_prob, else w = p.
//   deepseek_v2 (MoEGate.forward of DeepSeek-V2; not V3, which uses sigmoid + noaux_tc and scales
//     after normalising):
//       topk_method "greedy": topk over the softmax scores;
//       "group_limited_greedy": group_scores = max score of each of n_group equal groups; keep the
//         topk_group best groups; scores of the other groups are set to 0.0; topk over the result;
//       if top_k > 1 and norm_topk_prob: w = p / (sum(p) + 1e-20)
//       else:                            w = p * routed_scaling_factor
//     i.e. with normalisation the routed_scaling_factor is NOT applied in V2.
//   deepseek_v3, glm4_moe, glm4_moe_lite (DeepseekV3TopkRouter / Glm4MoeMoE.route_tokens_to_experts,
//     topk_method "noaux_tc", sigmoid scores p):
//       choice = p + e_score_correction_bias (selection only); group score = sum of the two largest
//         choice values of each of n_group equal groups; keep the topk_group best groups; choice of
//         the other groups set to 0.0; topk over choice;
//       w = p of the chosen experts; if norm_topk_prob: w = w / (sum(w) + 1e-20); then
//       w = w * routed_scaling_factor (always, unlike V2).
//   ernie4_5_moe (Ernie4_5_MoeSparseMoeBlock): softmax scores p; the same selection on p + bias (one
//     group); w = p / max(sum(p), moe_norm_min); routed_scaling_factor 1.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/checkpoint/model_config.h"

namespace zipmoe::executor {

struct RouterParams {
  ModelArch arch = ModelArch::kQwen2Moe;
  int64_t n_experts = 0;
  int64_t top_k = 0;
  bool norm_topk_prob = false;
  double routed_scaling_factor = 1.0;
  TopkMethod topk_method = TopkMethod::kGreedy;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  ScoringFunc scoring_func = ScoringFunc::kSoftmax;
  // noaux_tc with norm_topk_prob: w / max(sum, norm_min) when norm_min > 0 (ernie4_5_moe), else
  // w / (sum + topk_norm_epsilon): 1e-20 (DeepSeek-V3), 1e-6 (lfm2_moe).
  double norm_min = 0.0;
  double topk_norm_epsilon = 1e-20;
  // noaux_tc: the layer's e_score_correction_bias [n_experts] float32 (null reads as zeros; unused otherwise).
  const float* selection_bias = nullptr;
};

// `selection_bias`: the MoE layer's e_score_correction_bias (models with has_selection_bias()), else null.
RouterParams RouterParamsFor(const ModelConfig& config, const float* selection_bias = nullptr);

// Router logits [n_tokens, n_experts] float32 -> scores in place: softmax over each row (max
// subtracted) or the logistic sigmoid 1 / (1 + exp(-x)) of each value.
void ScoreRows(float* logits, int64_t n_tokens, int64_t n_experts, ScoringFunc scoring);

// scores: [n_tokens, n_experts] float32 router probabilities (ScoreRows), row-major.
// topk_ids: [n_tokens, top_k] out; topk_weights: [n_tokens, top_k] float32 out (combine weights).
void SelectExperts(const float* scores, int64_t n_tokens, const RouterParams& params, int32_t* topk_ids,
                   float* topk_weights);

// The tokens routed to each selected expert, experts ascending (the fixed accumulation order).
struct ExpertAssignment {
  std::vector<int32_t> expert_ids;               // distinct, ascending
  std::vector<std::vector<int64_t>> token_rows;  // per expert: rows of the batch, ascending
  std::vector<std::vector<float>> weights;       // per expert: combine weight of each row
};

// SMoE's expert-cache router (importance-driven-expert-scheduling.txt §IV-B, Algorithm 1): after
// SelectExperts, per token, with S the scores top-k selected from (SelectExperts' own: DeepSeek's
// group-masked ones) and S_{k+1} the (k+1)-th largest:
//   top-score experts: selected with S >= (1 + alpha) S_{k+1}; always kept (over the batch they form
//     the set C, computed anyway);
//   low-score experts: selected with S < (1 + alpha) S_{k+1}; kept when `cached[e]` or e ∈ C,
//     otherwise each may be replaced by a substitute: an expert the token did not select, with
//     S >= (1 - alpha) S_{k+1}, that is cached or in C, highest score first (ties: lower id). With
//     fewer substitutes than such experts, the lowest-scored low-score experts are the ones replaced.
// The token's weights are then recomputed from its new set exactly as SelectExperts computes them
// (normalised per architecture), slots in descending score. alpha = 0 never substitutes (no
// selected expert scores below S_{k+1}): the result is SelectExperts' bit for bit.
// scores: [n_tokens, n_experts] as for SelectExperts; cached: [n_experts], non-zero = the provider
// serves that expert without I/O or decoding (ExpertProvider::CachedExperts); topk_ids/topk_weights:
// SelectExperts' output, rewritten in place. Returns the number of (token, slot) substitutions.
// alpha must be in [0, 1).
int64_t SubstituteExperts(const float* scores, int64_t n_tokens, const RouterParams& params, double alpha,
                          const uint8_t* cached, int32_t* topk_ids, float* topk_weights);

// Groups topk_ids/topk_weights [n_tokens, top_k] by expert.
ExpertAssignment GroupByExpert(const int32_t* topk_ids, const float* topk_weights, int64_t n_tokens,
                               int64_t top_k);

}  // namespace zipmoe::executor
