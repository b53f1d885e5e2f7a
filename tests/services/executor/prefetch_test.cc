// Prefetch prediction (RankPredictedExperts, moe_block.h) and DALI's residual file
// (prefetch_residuals.h): known answers and failure paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "services/executor/moe_block.h"
#include "services/executor/prefetch_residuals.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using testing::TempDir;

ModelConfig Qwen(int64_t n_experts, int64_t top_k) {
  ModelConfig c;
  c.arch = ModelArch::kQwen2Moe;
  c.num_experts = n_experts;
  c.num_experts_per_tok = top_k;
  return c;
}

TEST(RankPredictedExperts, OneTokenRanksItsTopKByProbability) {
  const std::vector<float> scores = {0.05f, 0.40f, 0.10f, 0.30f, 0.15f};
  const LayerRouting r = RankPredictedExperts(Qwen(5, 3), 7, scores.data(), 1);
  EXPECT_EQ(r.layer_id, 7);
  EXPECT_EQ(r.expert_ids, (std::vector<int32_t>{1, 3, 4}));
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int32_t>{1, 1, 1}));
}

TEST(RankPredictedExperts, ABatchRanksByWorkloadThenProbabilityMass) {
  // Token 0 picks {0, 1}, token 1 picks {1, 2}, token 2 picks {3, 1}: expert 1 has 3 tokens; of the
  // one-token experts, 3 (0.45) > 0 (0.40) > 2 (0.35).
  const std::vector<float> scores = {0.40f, 0.35f, 0.15f, 0.10f,   //
                                     0.10f, 0.45f, 0.35f, 0.10f,   //
                                     0.05f, 0.40f, 0.10f, 0.45f};
  const LayerRouting r = RankPredictedExperts(Qwen(4, 2), 2, scores.data(), 3);
  EXPECT_EQ(r.expert_ids, (std::vector<int32_t>{1, 3, 0, 2}));
  EXPECT_EQ(r.tokens_per_expert, (std::vector<int32_t>{3, 1, 1, 1}));
}

TEST(PrefetchResidualsFile, RoundTripsExactly) {
  TempDir tmp;
  PrefetchResiduals r;
  r.hidden = 3;
  r.by_layer[0] = {0.5f, -1.25f, 3e-8f};
  r.by_layer[4] = {1.0f, 2.0f, -0.0f};
  r.calibration_tokens = 1234;
  r.calibration_prompts = 7;
  r.source = "prompts.txt";
  const std::string path = tmp.Sub(kPrefetchResidualsFileName);
  ASSERT_TRUE(WritePrefetchResiduals(path, r).ok());
  auto back = ReadPrefetchResiduals(path, 3, 6);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->by_layer, r.by_layer);
  EXPECT_EQ(back->calibration_tokens, 1234);
  EXPECT_EQ(back->calibration_prompts, 7);
  EXPECT_EQ(back->source, "prompts.txt");
}

TEST(PrefetchResidualsFile, BadFilesAreNamed) {
  TempDir tmp;
  // Missing: the error says how to make one.
  auto missing = ReadPrefetchResiduals(tmp.Sub("none.safetensors"), 3, 4);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--prefetch-residuals"), std::string::npos);
  // Wrong hidden size for this model.
  PrefetchResiduals r;
  r.hidden = 3;
  r.by_layer[1] = {1, 2, 3};
  const std::string path = tmp.Sub("r.safetensors");
  ASSERT_TRUE(WritePrefetchResiduals(path, r).ok());
  auto shape = ReadPrefetchResiduals(path, 4, 4);
  EXPECT_EQ(shape.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(shape.status().message().find("layers.1.prefetch_residual"), std::string::npos) << shape.status().ToString();
  // A layer the model does not have.
  auto layer = ReadPrefetchResiduals(path, 3, 1);
  EXPECT_EQ(layer.status().code(), StatusCode::kInvalidArgument);
  // A foreign tensor.
  const std::string other = tmp.Sub("o.safetensors");
  ASSERT_TRUE(WriteSafetensors(other, {TensorSpec{"lm_head.weight", DType::kF32, {3}}},
                               [](const TensorSpec&, uint8_t* out) {
                                 std::fill(out, out + 12, uint8_t{0});
                                 return Status::Ok();
                               })
                  .ok());
  auto foreign = ReadPrefetchResiduals(other, 3, 4);
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find("lm_head.weight"), std::string::npos);
  // A layer number past INT64_MAX: refused as beyond the model (std::stoll threw out_of_range before).
  const std::string huge = tmp.Sub("h.safetensors");
  ASSERT_TRUE(WriteSafetensors(huge, {TensorSpec{"layers.99999999999999999999999.prefetch_residual", DType::kF32, {3}}},
                               [](const TensorSpec&, uint8_t* out) {
                                 std::fill(out, out + 12, uint8_t{0});
                                 return Status::Ok();
                               })
                  .ok());
  auto beyond = ReadPrefetchResiduals(huge, 3, 4);
  EXPECT_EQ(beyond.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(beyond.status().message().find("beyond the model"), std::string::npos) << beyond.status().ToString();
  // Truncated: the safetensors reader's corruption error.
  const std::string bytes = testing::ReadAll(path);
  testing::WriteAll(path, bytes.substr(0, bytes.size() - 5));
  EXPECT_EQ(ReadPrefetchResiduals(path, 3, 4).status().code(), StatusCode::kCorruption);
  // Writing a vector of the wrong size is refused, and nothing is written.
  r.by_layer[2] = {1, 2};
  const std::string refused = tmp.Sub("refused.safetensors");
  EXPECT_EQ(WritePrefetchResiduals(refused, r).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(FileExists(refused));
}

}  // namespace
}  // namespace zipmoe::executor
