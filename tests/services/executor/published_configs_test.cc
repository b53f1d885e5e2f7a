// The config.json files of released DeepSeek-V3-style checkpoints (issue 40), as published on the
// Hugging Face Hub (key sets and values of moonshotai/Moonlight-16B-A3B, deepseek-ai/DeepSeek-V3,
// zai-org/GLM-4.5-Air, zai-org/GLM-4.7-Flash, openai/gpt-oss-20b, Qwen/Qwen3-Next-80B-A3B-Instruct and
// Qwen/Qwen3.5-35B-A3B, written down by hand; auto_map omitted): each parses
// with the fields that change the computation read as transformers reads them, and a changed field
// zipmoe does not implement is refused naming it.
#include "common/checkpoint/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace zipmoe {
namespace {

using nlohmann::json;

const char kMoonlight[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 163584, "eos_token_id": 163585, "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 11264,
  "kv_lora_rank": 512, "max_position_embeddings": 8192, "model_type": "deepseek_v3",
  "moe_intermediate_size": 1408, "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64,
  "n_shared_experts": 2, "norm_topk_prob": true, "num_attention_heads": 16, "num_experts_per_tok": 6,
  "num_hidden_layers": 27, "num_key_value_heads": 16, "num_nextn_predict_layers": 0, "pretraining_tp": 1,
  "q_lora_rank": null, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 50000.0, "routed_scaling_factor": 2.446, "scoring_func": "sigmoid",
  "seq_aux": true, "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.48.2", "use_cache": true, "v_head_dim": 128,
  "vocab_size": 163840})";

const char kDeepseekV3[] = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3,
  "hidden_act": "silu", "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432,
  "kv_lora_rank": 512, "max_position_embeddings": 163840, "model_type": "deepseek_v3",
  "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                   "original_max_position_embeddings": 4096, "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
  "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280})";

const char kGlm45Air[] = R"({
  "architectures": ["Glm4MoeForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
  "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338], "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "partial_rotary_factor": 0.5, "initializer_range": 0.02, "intermediate_size": 10944,
  "max_position_embeddings": 131072, "model_type": "glm4_moe", "moe_intermediate_size": 1408,
  "norm_topk_prob": true, "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 128,
  "n_shared_experts": 1, "routed_scaling_factor": 1.0, "num_experts_per_tok": 8, "first_k_dense_replace": 1,
  "num_hidden_layers": 46, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 1000000, "num_nextn_predict_layers": 1, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.54.0", "use_cache": true, "use_qk_norm": false,
  "vocab_size": 151552})";

const char kGlm47Flash[] = R"({
  "architectures": ["Glm4MoeLiteForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "pad_token_id": 154820, "eos_token_id": [154820, 154827, 154829], "first_k_dense_replace": 1,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 10240, "kv_lora_rank": 512,
  "max_position_embeddings": 202752, "model_type": "glm4_moe_lite", "moe_intermediate_size": 1536,
  "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 20, "num_experts_per_tok": 4, "num_hidden_layers": 47, "num_key_value_heads": 20,
  "num_nextn_predict_layers": 1, "q_lora_rank": 768, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-05, "rope_interleave": true, "rope_scaling": null, "rope_theta": 1000000,
  "routed_scaling_factor": 1.8, "tie_word_embeddings": false, "topk_group": 1, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "5.0.0.dev0", "use_cache": true, "v_head_dim": 256,
  "vocab_size": 154880})";

const char kErnie45[] = R"({
  "architectures": ["Ernie4_5_MoeForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 2560, "intermediate_size": 12288, "max_position_embeddings": 131072, "model_type": "ernie4_5_moe",
  "num_attention_heads": 20, "num_key_value_heads": 4, "num_hidden_layers": 28, "pad_token_id": 0,
  "rms_norm_eps": 1e-05, "use_cache": false, "vocab_size": 103424, "rope_theta": 500000, "use_bias": false,
  "tie_word_embeddings": true, "moe_num_experts": 64, "moe_num_shared_experts": 2, "moe_layer_start_index": 1,
  "moe_intermediate_size": 1536, "moe_capacity": [64, 64, 64], "moe_gate": "topk", "moe_k": 6,
  "moe_layer_interval": 1, "moe_use_aux_free": true, "torch_dtype": "bfloat16", "num_nextn_predict_layers": 1,
  "multi_token_pred_lambda": 0.3})";

Result<ModelConfig> Parse(const char* text) { return ParseModelConfig(json::parse(text), "config.json"); }

// Expects `j` to be refused with a message that contains every one of `words`.
void ExpectRefused(const json& j, std::initializer_list<const char*> words) {
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_FALSE(c.ok()) << j.dump();
  for (const char* w : words) EXPECT_NE(c.status().message().find(w), std::string::npos) << c.status().ToString();
}

const char kGptOss20b[] = R"({
  "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0, "eos_token_id": 200002,
  "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096,
  "initializer_range": 0.02, "intermediate_size": 2880,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention",
    "full_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention"],
  "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
  "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
  "output_router_logits": false, "pad_token_id": 199999,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
    "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
    "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
  "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0", "use_cache": true, "vocab_size": 201088})";

TEST(PublishedConfigs, GptOss20bIsMxfp4WithSinksSlidingLayersAndTheBiasedRouter) {
  auto c = ParseModelConfig(json::parse(kGptOss20b), "gpt-oss-20b/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kGptOss);
  EXPECT_EQ(c->hidden_size, 2880);
  EXPECT_EQ(c->num_hidden_layers, 24);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 4);
  EXPECT_EQ(c->moe_intermediate_size, 2880);
  EXPECT_TRUE(c->qkv_bias && c->o_bias && c->attention_sinks && c->router_logit_bias && c->expert_bias);
  EXPECT_TRUE(c->mxfp4_experts);
  EXPECT_TRUE(c->norm_topk_prob);  // softmax over the selected k
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->swiglu_alpha, 1.702);
  EXPECT_EQ(c->attention_window(0), 128);
  EXPECT_EQ(c->attention_window(1), 0);
  EXPECT_EQ(c->attention_window(22), 128);
  EXPECT_TRUE(c->IsMoeLayer(23));
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->softmax_scale(), 0.125);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{200002});
  // GptOssConfig's defaults: no rope settings -> its YaRN; no layer_types -> sliding first, alternating.
  json bare = json::parse(kGptOss20b);
  bare.erase("rope_scaling");
  bare.erase("layer_types");
  bare.erase("sliding_window");
  auto d = ParseModelConfig(bare, "bare");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_FALSE(d->rope_scaling.truncate);
  EXPECT_EQ(d->attention_window(0), 128);
  EXPECT_EQ(d->attention_window(1), 0);
  // Refused by name.
  const auto refused = [](json j, const char* key) {
    auto r = ParseModelConfig(j, "x/config.json");
    EXPECT_FALSE(r.ok()) << key;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
    }
  };
  json j = json::parse(kGptOss20b);
  j["attention_bias"] = false;
  refused(j, "attention_bias");
  j = json::parse(kGptOss20b);
  j["quantization_config"]["quant_method"] = "gptq";
  refused(j, "gptq");
  j = json::parse(kGptOss20b);
  j["layer_types"][3] = "linear_attention";
  refused(j, "layer_types");
  j = json::parse(kGptOss20b);
  j["layer_types"].erase(0);
  refused(j, "layer_types");
  j = json::parse(kGptOss20b);
  j["sliding_window"] = nullptr;
  refused(j, "sliding_window");
  j = json::parse(kGptOss20b);
  j["num_experts_per_tok"] = 33;
  refused(j, "num_experts_per_tok");
}

TEST(PublishedConfigs, MoonlightIsDeepseekV3WithNoauxTcRouting) {
  auto c = Parse(kMoonlight);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kDeepseekV3);
  EXPECT_TRUE(c->mla());
  EXPECT_TRUE(c->deepseek_moe());
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_TRUE(c->has_selection_bias());
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.446);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->num_experts, 64);
  EXPECT_EQ(c->n_shared_experts, 2);
  EXPECT_EQ(c->q_lora_rank, 0);
  EXPECT_EQ(c->q_head_dim(), 192);
  EXPECT_EQ(c->rope_dim(), 64);
  EXPECT_TRUE(c->rope_interleave);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_TRUE(c->IsMoeLayer(26));
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 1.0 / std::sqrt(192.0));
}

TEST(PublishedConfigs, DeepseekV3AsReleasedIsFp8WithGroupedRouting) {
  json j = json::parse(kDeepseekV3);
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->fp8());
  EXPECT_EQ(c->fp8_block_rows, 128);
  EXPECT_EQ(c->fp8_block_cols, 128);
  j["quantization_config"]["fmt"] = "e5m2";
  ExpectRefused(j, {"quantization_config", "fmt", "e5m2"});
  j["quantization_config"]["fmt"] = "e4m3";
  j["quantization_config"]["activation_scheme"] = "static";
  ExpectRefused(j, {"activation_scheme", "static"});
  j["quantization_config"]["activation_scheme"] = "dynamic";
  j["quantization_config"]["weight_block_size"] = {128, 100};
  ExpectRefused(j, {"weight_block_size", "multiple of 16"});
  j["quantization_config"].erase("weight_block_size");
  ExpectRefused(j, {"weight_block_size"});
  EXPECT_EQ(c->n_group, 8);
  EXPECT_EQ(c->topk_group, 4);
  EXPECT_EQ(c->q_lora_rank, 1536);
  EXPECT_EQ(c->num_nextn_predict_layers, 1);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_TRUE(c->IsMoeLayer(3));
  // yarn_get_mscale(40, 1.0)^2 on the softmax scale, as DeepseekV3Attention.
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 1.0 / std::sqrt(192.0) * m * m);
}

// moonshotai/Kimi-K2's config.json has DeepSeek-V3's architecture and keys under model_type "kimi_k2"
// (its README has users rename it): read as deepseek_v3, with every value as given.
TEST(PublishedConfigs, KimiK2ModelTypeIsDeepseekV3) {
  json j = json::parse(kDeepseekV3);
  j["model_type"] = "kimi_k2";
  j["n_routed_experts"] = 384;
  j["n_group"] = 1;
  j["topk_group"] = 1;
  j["routed_scaling_factor"] = 2.827;
  j["first_k_dense_replace"] = 1;
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kDeepseekV3);
  EXPECT_EQ(c->num_experts, 384);
  EXPECT_TRUE(c->fp8());
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  j["model_type"] = "kimi_k3";
  ExpectRefused(j, {"model_type", "kimi_k3"});
}

TEST(PublishedConfigs, Glm45AirIsGqaWithPartialRotaryAndTheNoauxTcRouter) {
  auto c = Parse(kGlm45Air);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kGlm4Moe);
  EXPECT_FALSE(c->mla());
  EXPECT_TRUE(c->deepseek_moe());
  EXPECT_EQ(c->head_dim, 128);  // explicit: 96 * 128 != 4096
  EXPECT_EQ(c->rope_dim(), 64);  // partial_rotary_factor 0.5
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);  // Glm4MoeAttention.o_proj has no bias
  EXPECT_FALSE(c->use_qk_norm);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);  // the default: GLM's config does not name it
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->n_shared_experts, 1);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(45));
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{151329, 151336, 151338}));
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 1.0 / std::sqrt(128.0));
  // Without the key, Glm4MoeConfig's default 0.5 applies; transformers 5 puts it in rope_parameters.
  json j = json::parse(kGlm45Air);
  j.erase("partial_rotary_factor");
  EXPECT_EQ(ParseModelConfig(j, "config.json")->rope_dim(), 64);
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000}, {"partial_rotary_factor", 0.25}};
  EXPECT_EQ(ParseModelConfig(j, "config.json")->rope_dim(), 32);
}

TEST(PublishedConfigs, Glm47FlashIsMlaWithTheGlmRouter) {
  auto c = Parse(kGlm47Flash);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kGlm4MoeLite);
  EXPECT_TRUE(c->mla());
  EXPECT_EQ(c->num_key_value_heads, 20);
  EXPECT_EQ(c->q_lora_rank, 768);
  EXPECT_EQ(c->q_head_dim(), 256);
  EXPECT_EQ(c->v_dim(), 256);
  EXPECT_EQ(c->rope_dim(), 64);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 1.8);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  // mlp_layer_types (transformers 5) decides per layer when present.
  json j = json::parse(kGlm47Flash);
  json types = json::array();
  for (int i = 0; i < 47; ++i) types.push_back(i % 2 == 0 ? "dense" : "sparse");
  j["mlp_layer_types"] = types;
  auto t = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->IsMoeLayer(2));
  EXPECT_TRUE(t->IsMoeLayer(3));
  types.erase(types.begin());
  j["mlp_layer_types"] = types;
  ExpectRefused(j, {"mlp_layer_types", "46", "47"});
  types.push_back("moe");
  j["mlp_layer_types"] = types;
  ExpectRefused(j, {"mlp_layer_types", "moe"});
}

TEST(PublishedConfigs, Ernie45IsGqaWithTheBiasedSoftmaxRouter) {
  auto c = Parse(kErnie45);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kErnie45Moe);
  EXPECT_EQ(c->num_experts, 64);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_EQ(c->n_shared_experts, 2);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->num_key_value_heads, 4);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSoftmax);
  EXPECT_TRUE(c->has_selection_bias());
  EXPECT_DOUBLE_EQ(c->norm_min, 1e-12);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 1.0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_TRUE(c->IsMoeLayer(27));  // moe_layer_end_index -1 = the last layer
  json j = json::parse(kErnie45);
  j["moe_layer_interval"] = 2;
  j["moe_layer_end_index"] = 20;
  auto e = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->IsMoeLayer(2));
  EXPECT_TRUE(e->IsMoeLayer(3));
  EXPECT_TRUE(e->IsMoeLayer(19));
  EXPECT_FALSE(e->IsMoeLayer(21));
  j = json::parse(kErnie45);
  j["use_bias"] = true;
  ExpectRefused(j, {"use_bias", "ernie4_5_moe"});
  j = json::parse(kErnie45);
  j["moe_gate"] = "top2";
  ExpectRefused(j, {"moe_gate", "top2"});
  j = json::parse(kErnie45);
  j.erase("moe_k");
  j["num_experts_per_tok"] = 4;  // the attribute_map alias
  EXPECT_EQ(ParseModelConfig(j, "config.json")->num_experts_per_tok, 4);
}

TEST(PublishedConfigs, FieldsThatChangeTheComputationAreRefusedByName) {
  json j = json::parse(kMoonlight);
  j["scoring_func"] = "softmax";
  ExpectRefused(j, {"scoring_func", "softmax", "deepseek_v3"});
  j = json::parse(kMoonlight);
  j["topk_method"] = "group_limited_greedy";
  ExpectRefused(j, {"topk_method", "group_limited_greedy"});
  j = json::parse(kMoonlight);
  j["n_group"] = 5;  // 64 experts in 5 groups
  ExpectRefused(j, {"n_group"});
  j = json::parse(kMoonlight);
  j["partial_rotary_factor"] = 0.5;  // q_pe is qk_rope_head_dim wide on MLA
  ExpectRefused(j, {"partial_rotary_factor", "deepseek_v3"});
  j = json::parse(kMoonlight);
  j["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  ExpectRefused(j, {"rope_scaling", "dynamic"});
  j = json::parse(kGlm45Air);
  j["moe_layer_freq"] = 2;
  ExpectRefused(j, {"moe_layer_freq", "glm4_moe"});
  j = json::parse(kGlm45Air);
  j["rope_interleave"] = true;
  ExpectRefused(j, {"rope_interleave", "glm4_moe"});
  j = json::parse(kGlm45Air);
  j["hidden_act"] = "gelu";
  ExpectRefused(j, {"hidden_act", "gelu"});
  j = json::parse(kGlm45Air);
  j["quantization_config"] = {{"quant_method", "mxfp4"}};
  ExpectRefused(j, {"quantization_config", "mxfp4"});
  // deepseek_v2 keeps its own rules: softmax scores, no rope_interleave = false.
  json v2 = json::parse(kMoonlight);
  v2["model_type"] = "deepseek_v2";
  ExpectRefused(v2, {"scoring_func", "sigmoid", "deepseek_v2"});
  v2["scoring_func"] = "softmax";
  v2["topk_method"] = "greedy";
  v2["rope_interleave"] = false;
  ExpectRefused(v2, {"rope_interleave", "deepseek_v2"});
  // Other models keep refusing a partial rotary factor they would ignore.
  json qwen = json::parse(kGlm45Air);
  qwen["model_type"] = "qwen3_moe";
  qwen["num_experts"] = 128;
  ExpectRefused(qwen, {"partial_rotary_factor", "qwen3_moe"});
}

// Qwen/Qwen3-Next-80B-A3B-Instruct (transformers 4.57).
const char kQwen3Next80b[] = R"({
  "architectures": ["Qwen3NextForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4,
  "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 5120,
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
  "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
  "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": true, "num_attention_heads": 16,
  "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
  "output_router_logits": false, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.57.0.dev0", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

// Qwen/Qwen3.5-35B-A3B (the text settings nest in text_config; vision_config abridged).
const char kQwen35_35b[] = R"({
  "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
  "image_token_id": 248056, "video_token_id": 248057, "vision_start_token_id": 248053,
  "vision_end_token_id": 248054, "tie_word_embeddings": false,
  "text_config": {
    "model_type": "qwen3_5_moe_text", "attention_bias": false, "attention_dropout": 0.0, "attn_output_gate": true,
    "eos_token_id": 248044, "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "layer_types": [
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention",
    "linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
    "max_position_embeddings": 262144, "moe_intermediate_size": 512, "mtp_num_hidden_layers": 1,
    "mtp_use_dedicated_embeddings": false, "num_attention_heads": 16, "num_experts": 256,
    "num_experts_per_tok": 8, "num_hidden_layers": 40, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_parameters": {"mrope_interleaved": true, "mrope_section": [11, 11, 10], "rope_type": "default",
                        "rope_theta": 10000000, "partial_rotary_factor": 0.25},
    "shared_expert_intermediate_size": 512, "tie_word_embeddings": false, "vocab_size": 248320},
  "vision_config": {"depth": 27, "hidden_size": 1152, "out_hidden_size": 2048, "patch_size": 16}})";

TEST(PublishedConfigs, Qwen3Next80bIsHybridWithGatedAttentionAndASharedExpert) {
  auto c = ParseModelConfig(json::parse(kQwen3Next80b), "Qwen3-Next-80B-A3B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kQwen3Next);
  EXPECT_EQ(c->weight_prefix, "model.");
  EXPECT_EQ(c->num_hidden_layers, 48);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->rope_dim(), 64);  // 256 x 0.25
  EXPECT_EQ(c->rope_theta, 1e7);
  EXPECT_TRUE(c->attn_output_gate && c->zero_centered_norms && c->use_qk_norm);
  EXPECT_FALSE(c->qkv_bias || c->o_bias);
  EXPECT_EQ(c->linear_num_key_heads, 16);
  EXPECT_EQ(c->linear_num_value_heads, 32);
  EXPECT_EQ(c->linear_key_head_dim, 128);
  EXPECT_EQ(c->linear_value_head_dim, 128);
  EXPECT_EQ(c->linear_conv_kernel_dim, 4);
  int full = 0;
  for (int64_t l = 0; l < 48; ++l) {
    EXPECT_EQ(c->IsLinearAttentionLayer(l), (l + 1) % 4 != 0) << l;
    full += c->IsLinearAttentionLayer(l) ? 0 : 1;
    EXPECT_TRUE(c->IsMoeLayer(l)) << l;
  }
  EXPECT_EQ(full, 12);
  EXPECT_EQ(c->num_experts, 512);
  EXPECT_EQ(c->num_experts_per_tok, 10);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->shared_expert_intermediate_size, 512);
  EXPECT_EQ(c->intermediate_size, 5120);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{151645});
  // mlp_only_layers make dense layers; layer_types (legacy names too) override the interval.
  json j = json::parse(kQwen3Next80b);
  j["mlp_only_layers"] = {0};
  j["num_hidden_layers"] = 4;
  j["layer_types"] = {"mamba", "full_attention", "linear_attention", "attention"};
  auto d = ParseModelConfig(j, "x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->IsMoeLayer(0));
  EXPECT_TRUE(d->IsMoeLayer(1));
  EXPECT_TRUE(d->IsLinearAttentionLayer(0));
  EXPECT_FALSE(d->IsLinearAttentionLayer(1));
  EXPECT_TRUE(d->IsLinearAttentionLayer(2));
  EXPECT_FALSE(d->IsLinearAttentionLayer(3));
  // Qwen3NextConfig's defaults for a bare file.
  auto e = ParseModelConfig(json{{"model_type", "qwen3_next"}}, "bare");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->hidden_size, 2048);
  EXPECT_EQ(e->num_hidden_layers, 48);
  EXPECT_EQ(e->rope_dim(), 64);
  EXPECT_EQ(e->intermediate_size, 5632);
  // Refused by name.
  const auto refused = [](json k, const char* key) {
    auto r = ParseModelConfig(k, "x/config.json");
    EXPECT_FALSE(r.ok()) << key;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
    }
  };
  j = json::parse(kQwen3Next80b);
  j["attn_output_gate"] = false;
  refused(j, "attn_output_gate");
  j = json::parse(kQwen3Next80b);
  j["layer_types"] = json::array();
  for (int i = 0; i < 48; ++i) j["layer_types"].push_back(i == 5 ? "sliding_attention" : "full_attention");
  refused(j, "layer_types");
  j = json::parse(kQwen3Next80b);
  j["linear_num_value_heads"] = 24;
  refused(j, "linear_num_value_heads");
  j = json::parse(kQwen3Next80b);
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  refused(j, "yarn");
  j = json::parse(kQwen3Next80b);
  j["hidden_act"] = "gelu";
  refused(j, "hidden_act");
  j = json::parse(kQwen3Next80b);
  j["use_sliding_window"] = true;
  refused(j, "use_sliding_window");
}

TEST(PublishedConfigs, Qwen35_35bReadsTextConfigUnderTheLanguageModelPrefix) {
  auto c = ParseModelConfig(json::parse(kQwen35_35b), "Qwen3.5-35B-A3B/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kQwen35Moe);
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  EXPECT_EQ(c->num_hidden_layers, 40);
  EXPECT_EQ(c->vocab_size, 248320);
  EXPECT_EQ(c->rope_theta, 1e7);
  EXPECT_EQ(c->rope_dim(), 64);
  EXPECT_EQ(c->rope_scaling.type, RopeScaling::Type::kNone);  // mrope with equal t/h/w rows for text
  EXPECT_EQ(c->num_experts, 256);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_TRUE(c->norm_topk_prob);
  for (int64_t l = 0; l < 40; ++l) {
    EXPECT_EQ(c->IsLinearAttentionLayer(l), (l + 1) % 4 != 0) << l;
    EXPECT_TRUE(c->IsMoeLayer(l)) << l;
  }
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{248044});
  EXPECT_EQ(c->UnusedParts(), "1 multi-token-prediction layer and the vision tower");
  const auto refused = [](json k, const char* key) {
    auto r = ParseModelConfig(k, "x/config.json");
    EXPECT_FALSE(r.ok()) << key;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find(key), std::string::npos) << r.status().message();
    }
  };
  json j = json::parse(kQwen35_35b);
  j.erase("text_config");
  refused(j, "text_config");
  j = json::parse(kQwen35_35b);
  j["text_config"]["model_type"] = "qwen3_next";
  refused(j, "text_config");
  j = json::parse(kQwen35_35b);
  j["tie_word_embeddings"] = true;
  refused(j, "tie_word_embeddings");
  j = json::parse(kQwen35_35b);
  j["text_config"]["norm_topk_prob"] = false;
  refused(j, "norm_topk_prob");
  j = json::parse(kQwen35_35b);
  j["text_config"]["mlp_only_layers"] = {3};
  refused(j, "mlp_only_layers");
  // A tie flag only at the top level is the text model's.
  j = json::parse(kQwen35_35b);
  j["text_config"].erase("tie_word_embeddings");
  j["tie_word_embeddings"] = true;
  auto t = ParseModelConfig(j, "x");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->tie_word_embeddings);
}

}  // namespace
}  // namespace zipmoe
