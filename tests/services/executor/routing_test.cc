// Known-answer tests of the router selection and weight rules (services/executor/routing.h).
#include "services/executor/routing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zipmoe::executor {
namespace {

struct Routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

Routed Route(const std::vector<float>& scores, const RouterParams& p) {
  const int64_t n = static_cast<int64_t>(scores.size()) / p.n_experts;
  Routed r;
  r.ids.resize(static_cast<size_t>(n * p.top_k));
  r.weights.resize(r.ids.size());
  SelectExperts(scores.data(), n, p, r.ids.data(), r.weights.data());
  return r;
}

RouterParams Params(ModelArch arch, int64_t n_experts, int64_t top_k, bool norm) {
  RouterParams p;
  p.arch = arch;
  p.n_experts = n_experts;
  p.top_k = top_k;
  p.norm_topk_prob = norm;
  return p;
}

TEST(RoutingTest, TiesGoToTheLowestIndex) {
  const Routed r = Route({0.1f, 0.3f, 0.3f, 0.3f}, Params(ModelArch::kQwen2Moe, 4, 2, false));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
}

TEST(RoutingTest, QwenWithoutNormKeepsProbabilities) {
  const Routed r = Route({0.1f, 0.5f, 0.15f, 0.25f}, Params(ModelArch::kQwen2Moe, 4, 2, false));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.weights, (std::vector<float>{0.5f, 0.25f}));
}

TEST(RoutingTest, MixtralAlwaysRenormalises) {
  const Routed r = Route({0.1f, 0.5f, 0.15f, 0.25f}, Params(ModelArch::kMixtral, 4, 2, false));
  const float sum = 0.5f + 0.25f;
  EXPECT_EQ(r.weights, (std::vector<float>{0.5f / sum, 0.25f / sum}));
}

TEST(RoutingTest, Qwen3AndOlmoeRenormaliseWhenAsked) {
  for (ModelArch arch : {ModelArch::kQwen3Moe, ModelArch::kOlmoe}) {
    const Routed r = Route({0.1f, 0.5f, 0.15f, 0.25f}, Params(arch, 4, 2, true));
    EXPECT_FLOAT_EQ(r.weights[0] + r.weights[1], 1.0f);
  }
}

TEST(RoutingTest, DeepseekScalesWithoutNormAndNormalisesWithout) {
  RouterParams p = Params(ModelArch::kDeepseekV2, 4, 2, false);
  p.routed_scaling_factor = 16.0;
  Routed r = Route({0.1f, 0.5f, 0.15f, 0.25f}, p);
  EXPECT_EQ(r.weights, (std::vector<float>{0.5f * 16.0f, 0.25f * 16.0f}));
  // norm_topk_prob with top_k > 1: p / (sum + 1e-20); routed_scaling_factor not applied (V2).
  p.norm_topk_prob = true;
  r = Route({0.1f, 0.5f, 0.15f, 0.25f}, p);
  const float denominator = (0.5f + 0.25f) + 1e-20f;
  EXPECT_EQ(r.weights, (std::vector<float>{0.5f / denominator, 0.25f / denominator}));
  // top_k == 1: the else branch (scaling) even with norm_topk_prob.
  p.top_k = 1;
  r = Route({0.1f, 0.5f, 0.15f, 0.25f}, p);
  EXPECT_EQ(r.weights, (std::vector<float>{0.5f * 16.0f}));
}

TEST(RoutingTest, DeepseekGroupLimitedGreedy) {
  // 8 experts in 4 groups of 2; group maxima 0.20, 0.19, 0.18, 0.05 -> keep groups 0 and 1.
  RouterParams p = Params(ModelArch::kDeepseekV2, 8, 3, false);
  p.topk_method = TopkMethod::kGroupLimitedGreedy;
  p.n_group = 4;
  p.topk_group = 2;
  const std::vector<float> scores = {0.20f, 0.01f, 0.19f, 0.17f, 0.18f, 0.18f, 0.05f, 0.02f};
  const Routed r = Route(scores, p);
  // Greedy would pick 0, 2, 4; group-limited excludes group 2 (experts 4, 5).
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 3}));
  p.topk_method = TopkMethod::kGreedy;
  EXPECT_EQ(Route(scores, p).ids, (std::vector<int32_t>{0, 2, 4}));
}

// SubstituteExperts (SMoE Algorithm 1) on scores worked by hand.
struct Substituted {
  Routed routed;
  int64_t count = 0;
};

Substituted Substitute(const std::vector<float>& scores, const RouterParams& p, double alpha,
                       const std::vector<int32_t>& cached_ids) {
  Substituted s;
  s.routed = Route(scores, p);
  std::vector<uint8_t> cached(static_cast<size_t>(p.n_experts), 0);
  for (int32_t e : cached_ids) cached[static_cast<size_t>(e)] = 1;
  const int64_t n = static_cast<int64_t>(scores.size()) / p.n_experts;
  s.count = SubstituteExperts(scores.data(), n, p, alpha, cached.data(), s.routed.ids.data(), s.routed.weights.data());
  return s;
}

// DeepSeek-V3 / GLM-4.5 noaux_tc (Glm4MoeMoE.route_tokens_to_experts), hand-computed.
RouterParams Noaux(int64_t n_experts, int64_t top_k, int64_t n_group, int64_t topk_group, bool norm, double scale,
                   const float* bias) {
  RouterParams p = Params(ModelArch::kDeepseekV3, n_experts, top_k, norm);
  p.topk_method = TopkMethod::kNoauxTc;
  p.scoring_func = ScoringFunc::kSigmoid;
  p.n_group = n_group;
  p.topk_group = topk_group;
  p.routed_scaling_factor = scale;
  p.selection_bias = bias;
  return p;
}

TEST(RoutingTest, NoauxTcSelectsOnBiasedScoresButWeighsTheUnbiasedOnes) {
  // Unbiased top-2 would be experts 0 and 1; the bias lifts expert 3 above expert 1.
  const std::vector<float> scores = {0.9f, 0.6f, 0.5f, 0.4f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.05f, 0.3f};  // choice: 0.9, 0.6, 0.55, 0.7
  const Routed r = Route(scores, Noaux(4, 2, 1, 1, /*norm=*/true, /*scale=*/2.5, bias.data()));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 3}));
  // weights from the sigmoid scores 0.9 and 0.4: normalised (sum + 1e-20), then x 2.5.
  EXPECT_FLOAT_EQ(r.weights[0], 0.9f / (0.9f + 0.4f + 1e-20f) * 2.5f);
  EXPECT_FLOAT_EQ(r.weights[1], 0.4f / (0.9f + 0.4f + 1e-20f) * 2.5f);
  // Without norm_topk_prob the scaling still applies (V2 would not scale a normalised one either way).
  const Routed u = Route(scores, Noaux(4, 2, 1, 1, /*norm=*/false, 2.5, bias.data()));
  EXPECT_EQ(u.ids, (std::vector<int32_t>{0, 3}));
  EXPECT_FLOAT_EQ(u.weights[0], 0.9f * 2.5f);
  EXPECT_FLOAT_EQ(u.weights[1], 0.4f * 2.5f);
}

TEST(RoutingTest, NoauxTcScoresGroupsByTheSumOfTheirTwoBest) {
  // 3 groups of 3. Group maxima: g0 0.95, g1 0.7, g2 0.72 -> a max rule (V2) keeps g0 and g2;
  // top-2 sums: g0 0.95 + 0.1 = 1.05, g1 0.7 + 0.69 = 1.39, g2 0.72 + 0.2 = 0.92 -> keeps g1 and g0.
  const std::vector<float> scores = {0.95f, 0.1f, 0.05f, 0.7f, 0.69f, 0.3f, 0.72f, 0.2f, 0.1f};
  const std::vector<float> zero(9, 0.0f);
  const Routed r = Route(scores, Noaux(9, 3, 3, 2, true, 1.0, zero.data()));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 3, 4}));  // 0.72 of the dropped group 2 is not eligible
  const float sum = 0.95f + 0.7f + 0.69f;
  EXPECT_FLOAT_EQ(r.weights[0], 0.95f / (sum + 1e-20f));
  // A null bias reads as zeros: the same selection.
  EXPECT_EQ(Route(scores, Noaux(9, 3, 3, 2, true, 1.0, nullptr)).ids, r.ids);
  // The group choice uses the biased scores too: +0.7 on expert 8 (choice 0.8) makes group 2's pair
  // 0.8 + 0.72 = 1.52: groups 2 and 1 are kept, group 0 (1.05) with the best score 0.95 is dropped.
  std::vector<float> bias(9, 0.0f);
  bias[8] = 0.7f;
  const Routed b = Route(scores, Noaux(9, 3, 3, 2, true, 1.0, bias.data()));
  EXPECT_EQ(b.ids, (std::vector<int32_t>{8, 6, 3}));
  EXPECT_FLOAT_EQ(b.weights[0], 0.1f / (0.1f + 0.72f + 0.7f + 1e-20f));  // expert 8 weighs its own 0.1
}

// ERNIE-4.5 (Ernie4_5_MoeSparseMoeBlock): softmax probabilities, selection on p + bias, weights
// p / max(sum, moe_norm_min), no scaling.
TEST(RoutingTest, ErnieSelectsOnBiasedProbabilitiesAndClampsTheNormaliser) {
  const std::vector<float> scores = {0.4f, 0.3f, 0.2f, 0.1f};
  const std::vector<float> bias = {0.0f, 0.0f, 0.15f, 0.0f};  // choice 0.4, 0.3, 0.35, 0.1
  RouterParams p = Noaux(4, 2, 1, 1, /*norm=*/true, /*scale=*/1.0, bias.data());
  p.arch = ModelArch::kErnie45Moe;
  p.scoring_func = ScoringFunc::kSoftmax;
  p.norm_min = 1e-12;
  const Routed r = Route(scores, p);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_FLOAT_EQ(r.weights[0], 0.4f / (0.4f + 0.2f));
  EXPECT_FLOAT_EQ(r.weights[1], 0.2f / (0.4f + 0.2f));
  // A sum below moe_norm_min divides by moe_norm_min instead.
  const std::vector<float> tiny = {4e-13f, 3e-13f, 2e-13f, 1e-13f};
  p.selection_bias = nullptr;
  const Routed t = Route(tiny, p);
  EXPECT_EQ(t.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_FLOAT_EQ(t.weights[0], 4e-13f / 1e-12f);
}

TEST(RoutingTest, ScoreRowsSigmoidAndSoftmax) {
  std::vector<float> x = {0.0f, 2.0f, -1.0f};
  ScoreRows(x.data(), 1, 3, ScoringFunc::kSigmoid);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_NEAR(x[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-7);
  EXPECT_NEAR(x[2], 1.0 / (1.0 + std::exp(1.0)), 1e-7);
  std::vector<float> y = {0.0f, std::log(3.0f)};
  ScoreRows(y.data(), 1, 2, ScoringFunc::kSoftmax);
  EXPECT_NEAR(y[0], 0.25, 1e-7);
  EXPECT_NEAR(y[1], 0.75, 1e-7);
}

TEST(RoutingTest, SubstitutionReplacesALowScoreExpertByACachedOneWithACloseScore) {
  // top-2 of 6: 0 (0.30) and 1 (0.20); S_3 = 0.19. alpha 0.2: top-score >= 0.228, substitutes >= 0.152.
  const std::vector<float> scores = {0.30f, 0.20f, 0.19f, 0.17f, 0.10f, 0.04f};
  const RouterParams qwen = Params(ModelArch::kQwen2Moe, 6, 2, false);
  Substituted s = Substitute(scores, qwen, 0.2, {3});
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.routed.ids, (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(s.routed.weights, (std::vector<float>{0.30f, 0.17f}));
  // The best cached candidate wins; a low-score expert that is cached stays; nothing cached in
  // range (4 scores 0.10 < 0.152): no change; alpha 0 is the exact selection.
  EXPECT_EQ(Substitute(scores, qwen, 0.2, {2, 3}).routed.ids, (std::vector<int32_t>{0, 2}));
  for (const Substituted& same : {Substitute(scores, qwen, 0.2, {1, 3}), Substitute(scores, qwen, 0.2, {4}),
                                  Substitute(scores, qwen, 0.0, {2, 3})}) {
    EXPECT_EQ(same.count, 0);
    EXPECT_EQ(same.routed.ids, (std::vector<int32_t>{0, 1}));
    EXPECT_EQ(same.routed.weights, (std::vector<float>{0.30f, 0.20f}));
  }
  // Mixtral renormalises over the new set.
  s = Substitute(scores, Params(ModelArch::kMixtral, 6, 2, false), 0.2, {3});
  EXPECT_EQ(s.routed.ids, (std::vector<int32_t>{0, 3}));
  EXPECT_FLOAT_EQ(s.routed.weights[0], 0.30f / (0.30f + 0.17f));
  EXPECT_FLOAT_EQ(s.routed.weights[1], 0.17f / (0.30f + 0.17f));
  // A small alpha: 1 (0.20) is top-score against 1.05 × 0.19 = 0.1995.
  EXPECT_EQ(Substitute(scores, qwen, 0.05, {3}).count, 0);
}

TEST(RoutingTest, SubstitutesComeFromOtherTokensTopScoreExpertsAndReplaceTheLowestFirst) {
  const RouterParams qwen = Params(ModelArch::kQwen2Moe, 6, 2, false);
  // Token A's top-score experts (3, 4 >= 1.2 × 0.10) are computed anyway: token B's low-score
  // expert 1 (0.20 < 1.2 × 0.19) takes 3 (0.19, the best in range), with nothing cached.
  const std::vector<float> two = {0.05f, 0.05f, 0.05f, 0.60f, 0.15f, 0.10f,
                                  0.30f, 0.20f, 0.05f, 0.19f, 0.17f, 0.09f};
  Substituted s = Substitute(two, qwen, 0.2, {});
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.routed.ids, (std::vector<int32_t>{3, 4, 0, 3}));
  // top-3 of 8 with two low-score experts (1: 0.20, 2: 0.19 < 1.2 × 0.18) and one substitute (3):
  // the lower one (2) is replaced.
  const RouterParams top3 = Params(ModelArch::kQwen2Moe, 8, 3, false);
  s = Substitute({0.25f, 0.20f, 0.19f, 0.18f, 0.10f, 0.05f, 0.02f, 0.01f}, top3, 0.2, {3});
  EXPECT_EQ(s.count, 1);
  EXPECT_EQ(s.routed.ids, (std::vector<int32_t>{0, 1, 3}));
}

TEST(RoutingTest, GroupByExpertIsAscendingWithTokenRows) {
  const std::vector<int32_t> ids = {3, 1, 1, 0, 3, 2};  // 3 tokens x top-2
  const std::vector<float> w = {0.6f, 0.4f, 0.7f, 0.3f, 0.9f, 0.1f};
  const ExpertAssignment a = GroupByExpert(ids.data(), w.data(), 3, 2);
  EXPECT_EQ(a.expert_ids, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(a.token_rows[1], (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(a.weights[1], (std::vector<float>{0.4f, 0.7f}));
  EXPECT_EQ(a.token_rows[3], (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(a.weights[3], (std::vector<float>{0.6f, 0.9f}));
}

}  // namespace
}  // namespace zipmoe::executor
