#include "common/expert_names.h"

#include <gtest/gtest.h>

namespace zipmoe {
namespace {

TEST(ExpertNamesTest, ParsesEveryArchitecture) {
  auto q = ParseExpertTensorName("model.layers.12.mlp.experts.59.down_proj.weight");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->layer_id, 12);
  EXPECT_EQ(q->expert_id, 59);
  EXPECT_EQ(q->proj, ExpertProj::kDown);

  auto m1 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w1.weight");
  auto m2 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w2.weight");
  auto m3 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w3.weight");
  ASSERT_TRUE(m1 && m2 && m3);
  EXPECT_EQ(m1->proj, ExpertProj::kGate);
  EXPECT_EQ(m2->proj, ExpertProj::kDown);
  EXPECT_EQ(m3->proj, ExpertProj::kUp);
  EXPECT_EQ(m3->expert_id, 7);
}

TEST(ExpertNamesTest, RejectsNonRoutedTensors) {
  for (const char* name : {
           "model.layers.1.mlp.shared_expert.gate_proj.weight",
           "model.layers.1.mlp.shared_experts.up_proj.weight",
           "model.layers.1.mlp.shared_expert_gate.weight",
           "model.layers.1.mlp.gate.weight",
           "model.layers.0.mlp.gate_proj.weight",
           "model.layers.1.block_sparse_moe.gate.weight",
           "model.layers.1.mlp.experts.3.gate_proj.bias",
           "model.layers.1.mlp.experts.x.gate_proj.weight",
           "model.layers.1.mlp.experts.3.fc1.weight",
           "model.embed_tokens.weight",
           "lm_head.weight",
       }) {
    EXPECT_FALSE(ParseExpertTensorName(name).has_value()) << name;
  }
}

}  // namespace
}  // namespace zipmoe
