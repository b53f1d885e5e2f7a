#include "common/checkpoint/expert_names.h"

#include <gtest/gtest.h>

namespace zipmoe {
namespace {

TEST(ExpertNamesTest, ParsesEveryArchitecture) {
  auto q = ParseExpertTensorName("model.layers.12.mlp.experts.59.down_proj.weight", 0);
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->layer_id, 12);
  EXPECT_EQ(q->expert_id, 59);
  EXPECT_EQ(q->proj, ExpertProj::kDown);

  auto m1 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w1.weight", 0);
  auto m2 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w2.weight", 0);
  auto m3 = ParseExpertTensorName("model.layers.0.block_sparse_moe.experts.7.w3.weight", 0);
  ASSERT_TRUE(m1 && m2 && m3);
  EXPECT_EQ(m1->proj, ExpertProj::kGate);
  EXPECT_EQ(m2->proj, ExpertProj::kDown);
  EXPECT_EQ(m3->proj, ExpertProj::kUp);
  EXPECT_EQ(m3->expert_id, 7);

  // LFM2-MoE: feed_forward.experts.E.w1 / w3 / w2 (the dense layers' feed_forward.w1 is not an expert).
  auto l1 = ParseExpertTensorName("model.layers.5.feed_forward.experts.31.w1.weight", 0);
  auto l2 = ParseExpertTensorName("model.layers.5.feed_forward.experts.31.w2.weight", 0);
  auto l3 = ParseExpertTensorName("model.layers.5.feed_forward.experts.31.w3.weight", 0);
  ASSERT_TRUE(l1 && l2 && l3);
  EXPECT_EQ(l1->proj, ExpertProj::kGate);
  EXPECT_EQ(l2->proj, ExpertProj::kDown);
  EXPECT_EQ(l3->proj, ExpertProj::kUp);
  EXPECT_EQ(l3->layer_id, 5);
  EXPECT_EQ(l3->expert_id, 31);
}

TEST(ExpertNamesTest, RejectsNonRoutedTensors) {
  for (const char* name : {
           "model.layers.1.mlp.shared_expert.gate_proj.weight",
           "model.layers.1.mlp.shared_experts.up_proj.weight",
           "model.layers.1.mlp.shared_expert_gate.weight",
           "model.layers.1.mlp.gate.weight",
           "model.layers.0.mlp.gate_proj.weight",
           "model.layers.1.block_sparse_moe.gate.weight",
           "model.layers.0.feed_forward.w1.weight",
           "model.layers.3.feed_forward.gate.weight",
           "model.layers.3.feed_forward.expert_bias",
           "model.layers.1.mlp.experts.3.gate_proj.bias",
           "model.layers.1.mlp.experts.x.gate_proj.weight",
           "model.layers.1.mlp.experts.3.fc1.weight",
           "model.embed_tokens.weight",
           "lm_head.weight",
       }) {
    EXPECT_FALSE(ParseExpertTensorName(name, 0).has_value()) << name;
  }
}

// Switch Transformers: wi = up, wo = down, no gate; decoder blocks follow the encoder's in one
// global layer numbering (num_encoder_layers = 12 here).
TEST(ExpertNamesTest, SwitchTransformersGlobalLayerIds) {
  auto enc = ParseExpertTensorName("encoder.block.3.layer.1.mlp.experts.expert_7.wi.weight", 12);
  ASSERT_TRUE(enc.has_value());
  EXPECT_EQ(enc->layer_id, 3);
  EXPECT_EQ(enc->expert_id, 7);
  EXPECT_EQ(enc->proj, ExpertProj::kUp);
  auto dec = ParseExpertTensorName("decoder.block.3.layer.2.mlp.experts.expert_127.wo.weight", 12);
  ASSERT_TRUE(dec.has_value());
  EXPECT_EQ(dec->layer_id, 15);
  EXPECT_EQ(dec->expert_id, 127);
  EXPECT_EQ(dec->proj, ExpertProj::kDown);
  for (const char* name : {
           "encoder.block.1.layer.1.mlp.router.classifier.weight",
           "encoder.block.1.layer.1.mlp.wi.weight",
           "encoder.block.1.layer.2.mlp.experts.expert_0.wi.weight",  // the encoder's FF is layer.1
           "decoder.block.1.layer.1.mlp.experts.expert_0.wi.weight",  // the decoder's FF is layer.2
           "decoder.block.1.layer.2.mlp.experts.expert_0.wi.bias",
           "decoder.block.1.layer.2.mlp.experts.0.wi.weight",
       }) {
    EXPECT_FALSE(ParseExpertTensorName(name, 12).has_value()) << name;
  }
}

TEST(ExpertNamesTest, EncoderLayerCountOnlyForSwitch) {
  EXPECT_EQ(EncoderLayerCount(nlohmann::json{{"model_type", "switch_transformers"}, {"num_layers", 12}}), 12);
  EXPECT_EQ(EncoderLayerCount(nlohmann::json{{"model_type", "qwen2_moe"}, {"num_layers", 12}}), 0);
  EXPECT_EQ(EncoderLayerCount(nlohmann::json{{"model_type", "switch_transformers"}}), 0);
}

}  // namespace
}  // namespace zipmoe
