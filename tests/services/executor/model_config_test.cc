// Tests of common/checkpoint/model_config.h (kept beside the executor tests, its only consumer so far).
#include "common/checkpoint/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "services/synth/synth.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;

json Preset(const std::string& arch, int64_t q_lora_rank = 0) {
  auto c = synth::PresetConfig(arch, "tiny", q_lora_rank);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : json::object();
}

TEST(ModelConfigTest, ParsesEveryPreset) {
  for (const char* arch : {"qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe",
                           "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe", "granitemoe",
                           "granitemoeshared", "granitemoehybrid", "lfm2_moe", "afmoe"}) {
    auto c = ParseModelConfig(Preset(arch), "config.json");
    ASSERT_TRUE(c.ok()) << arch << ": " << c.status().ToString();
    EXPECT_EQ(c->model_type, arch);
    EXPECT_EQ(c->hidden_size, 128);
    EXPECT_GT(c->num_experts, 0);
    EXPECT_FALSE(c->eos_token_ids.empty()) << arch;
  }
}

TEST(ModelConfigTest, ArchitectureSpecifics) {
  auto qwen2 = ParseModelConfig(Preset("qwen2_moe"), "config.json");
  ASSERT_TRUE(qwen2.ok());
  EXPECT_TRUE(qwen2->qkv_bias);
  EXPECT_FALSE(qwen2->o_bias);
  EXPECT_FALSE(qwen2->norm_topk_prob);
  EXPECT_EQ(qwen2->shared_expert_intermediate_size, 256);

  auto mixtral = ParseModelConfig(Preset("mixtral"), "config.json");
  ASSERT_TRUE(mixtral.ok());
  EXPECT_TRUE(mixtral->norm_topk_prob);  // always renormalises
  EXPECT_EQ(mixtral->moe_intermediate_size, mixtral->intermediate_size);
  EXPECT_EQ(mixtral->num_key_value_heads, 2);

  auto qwen3 = ParseModelConfig(Preset("qwen3_moe"), "config.json");
  ASSERT_TRUE(qwen3.ok());
  EXPECT_EQ(qwen3->head_dim, 64);  // explicit, != hidden / heads
  EXPECT_TRUE(qwen3->norm_topk_prob);

  auto ds = ParseModelConfig(Preset("deepseek_v2"), "config.json");
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->q_lora_rank, 0);
  EXPECT_EQ(ds->q_head_dim(), 48);
  EXPECT_EQ(ds->rope_dim(), 16);
  EXPECT_EQ(ds->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_FALSE(ds->IsMoeLayer(0));  // first_k_dense_replace = 1
  EXPECT_TRUE(ds->IsMoeLayer(1));
  auto ds_q = ParseModelConfig(Preset("deepseek_v2", 32), "config.json");
  ASSERT_TRUE(ds_q.ok());
  EXPECT_EQ(ds_q->q_lora_rank, 32);
}

TEST(ModelConfigTest, QwenSparseLayerRule) {
  json j = Preset("qwen2_moe");
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  auto c = ParseModelConfig(j, "config.json");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->IsMoeLayer(0));  // (0+1) % 2 != 0
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_FALSE(c->IsMoeLayer(3));  // mlp_only_layers
}

TEST(ModelConfigTest, DeepseekSoftmaxScaleWithMscaleAllDim) {
  auto c = ParseModelConfig(Preset("deepseek_v2"), "config.json");
  ASSERT_TRUE(c.ok());
  // q_head_dim 48; factor 40, mscale_all_dim 0.707: (0.1 * 0.707 * ln 40 + 1)^2 / sqrt(48).
  const double m = 0.1 * 0.707 * std::log(40.0) + 1.0;
  EXPECT_DOUBLE_EQ(c->softmax_scale(), m * m / std::sqrt(48.0));
  auto qwen = ParseModelConfig(Preset("qwen2_moe"), "config.json");
  EXPECT_DOUBLE_EQ(qwen->softmax_scale(), 1.0 / std::sqrt(32.0));
}

TEST(ModelConfigTest, UnsupportedModelTypeNamesItAndTheSupportedList) {
  json j = Preset("mixtral");
  j["model_type"] = "llama";
  auto c = ParseModelConfig(j, "/models/x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'llama'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("deepseek_v2"), std::string::npos);
  EXPECT_NE(c.status().message().find("/models/x/config.json"), std::string::npos);
}

TEST(ModelConfigTest, MissingAndMistypedKeysNameKeyAndFile) {
  json j = Preset("olmoe");
  j.erase("hidden_size");
  auto c = ParseModelConfig(j, "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("'hidden_size'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos);

  j = Preset("olmoe");
  j["num_experts_per_tok"] = "eight";
  c = ParseModelConfig(j, "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'num_experts_per_tok'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("string"), std::string::npos);

  j = Preset("deepseek_v2");
  j["topk_method"] = "noaux_tc";
  c = ParseModelConfig(j, "/m/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("noaux_tc"), std::string::npos);
}

// Values no released model has, which would make the executor allocate without bound or compute
// garbage, are refused naming the key (issue 37).
TEST(ModelConfigTest, OutOfRangeSizesAndConstantsAreRefusedNamingTheKey) {
  const std::pair<const char*, json> cases[] = {
      {"num_hidden_layers", 1000000000}, {"vocab_size", int64_t{1} << 30}, {"hidden_size", int64_t{1} << 20},
      {"max_position_embeddings", int64_t{1} << 40}, {"rope_theta", -1e308}, {"rope_theta", 1e308},
      {"rms_norm_eps", 1e308}, {"rms_norm_eps", 0.0}, {"num_experts", 1 << 20}, {"moe_intermediate_size", 1 << 24},
  };
  for (const auto& [key, value] : cases) {
    json j = Preset("qwen2_moe");
    j[key] = value;
    auto c = ParseModelConfig(j, "/m/config.json");
    ASSERT_FALSE(c.ok()) << key << " = " << value.dump();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(c.status().message().find(std::string("'") + key + "'"), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos);
  }
  // Real models' extremes load: a 1e7 rope_theta (Qwen3-Next), a 262144-token context, 512 experts.
  json big = Preset("qwen2_moe");
  big["rope_theta"] = 1e7;
  big["max_position_embeddings"] = 262144;
  big["num_experts"] = 512;
  EXPECT_TRUE(ParseModelConfig(big, "/m/config.json").ok());
}

TEST(ModelConfigTest, EosIdsFromIntListAndGenerationConfig) {
  testing::TempDir dir;
  json j = Preset("qwen3_moe");
  j["eos_token_id"] = 7;
  testing::WriteAll(dir.Sub("config.json"), j.dump());
  testing::WriteAll(dir.Sub("generation_config.json"), json{{"eos_token_id", {9, 7}}}.dump());
  auto c = LoadModelConfig(dir.path());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{7, 9}));
  EXPECT_TRUE(c->IsEos(9));
  EXPECT_FALSE(c->IsEos(8));

  testing::TempDir empty;
  auto missing = LoadModelConfig(empty.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace zipmoe

namespace zipmoe {
namespace {

// transformers 5 writes rope settings under `rope_parameters` instead of rope_theta/rope_scaling.
TEST(ModelConfigTest, RopeParametersOfTransformers5) {
  nlohmann::json v4 = Preset("deepseek_v2");
  ASSERT_TRUE(v4.contains("rope_scaling"));
  nlohmann::json v5 = v4;
  nlohmann::json params = v4["rope_scaling"];
  params["rope_type"] = params.value("type", "yarn");
  params.erase("type");
  params["rope_theta"] = 12345.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5["rope_parameters"] = params;
  auto a = ParseModelConfig(v4, "config.json");
  auto b = ParseModelConfig(v5, "config.json");
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_EQ(b->rope_theta, 12345.0);
  EXPECT_EQ(b->rope_scaling.type, RopeScaling::Type::kYarn);
  EXPECT_EQ(b->rope_scaling.factor, a->rope_scaling.factor);
  EXPECT_EQ(b->rope_scaling.mscale_all_dim, a->rope_scaling.mscale_all_dim);
  EXPECT_DOUBLE_EQ(b->softmax_scale(), a->softmax_scale());

  nlohmann::json qwen = Preset("qwen2_moe");
  qwen.erase("rope_theta");
  qwen["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  auto q = ParseModelConfig(qwen, "config.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->rope_theta, 1000000.0);
  EXPECT_EQ(q->rope_scaling.type, RopeScaling::Type::kNone);

  qwen["rope_parameters"] = 3;
  auto bad = ParseModelConfig(qwen, "config.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("rope_parameters"), std::string::npos) << bad.status().ToString();
}

// ibm-granite/granite-3.0-1b-a400m-instruct's config.json as published: every multiplier honoured, the
// attention scale replaced by attention_multiplier, JetMoe's top-k softmax as a renormalised top-k.
TEST(ModelConfigTest, GraniteMoePublishedConfig) {
  const json published = json::parse(R"({
    "architectures": ["GraniteMoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attention_multiplier": 0.015625, "bos_token_id": 0, "embedding_multiplier": 12.0, "eos_token_id": 0,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 512,
    "logits_scaling": 6.0, "max_position_embeddings": 4096, "model_type": "granitemoe", "num_attention_heads": 16,
    "num_experts_per_tok": 8, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
    "output_router_logits": false, "pad_token_id": 0, "residual_multiplier": 0.22, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 10000, "router_aux_loss_coef": 0.0, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.46.0.dev0", "use_cache": true, "vocab_size": 49155})");
  auto c = ParseModelConfig(published, "granite/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kGraniteMoe);
  EXPECT_TRUE(c->granite());
  EXPECT_EQ(c->num_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->moe_intermediate_size, 512);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->shared_expert_intermediate_size, 0);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c->embedding_multiplier, 12.0);
  EXPECT_DOUBLE_EQ(c->residual_multiplier, 0.22);
  EXPECT_DOUBLE_EQ(c->logits_scaling, 6.0);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.015625);  // not 64^-0.5 = 0.125
  for (int64_t l : {0, 11, 23}) EXPECT_TRUE(c->IsMoeLayer(l));
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{0});

  // GraniteMoeConfig's defaults for what a file leaves out; another model keeps 1 and q_head_dim^-0.5.
  json bare = published;
  for (const char* key : {"attention_multiplier", "embedding_multiplier", "logits_scaling", "residual_multiplier",
                          "num_local_experts", "num_experts_per_tok", "tie_word_embeddings"})
    bare.erase(key);
  auto d = ParseModelConfig(bare, "granite/config.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_experts, 8);
  EXPECT_EQ(d->num_experts_per_tok, 2);
  EXPECT_FALSE(d->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(d->softmax_scale(), 1.0);
  EXPECT_DOUBLE_EQ(d->residual_multiplier, 1.0);
  auto mixtral = ParseModelConfig(Preset("mixtral"), "config.json");
  ASSERT_TRUE(mixtral.ok());
  EXPECT_DOUBLE_EQ(mixtral->softmax_scale(), 1.0 / std::sqrt(32.0));
  EXPECT_DOUBLE_EQ(mixtral->logits_scaling, 1.0);

  // granitemoeshared: the shared MLP's width; 0 (the default) = none.
  json shared = published;
  shared["model_type"] = "granitemoeshared";
  shared["shared_intermediate_size"] = 1024;
  auto s = ParseModelConfig(shared, "granite/config.json");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->arch, ModelArch::kGraniteMoeShared);
  EXPECT_EQ(s->shared_expert_intermediate_size, 1024);
  shared.erase("shared_intermediate_size");
  auto s0 = ParseModelConfig(shared, "granite/config.json");
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(s0->shared_expert_intermediate_size, 0);
}

TEST(ModelConfigTest, GraniteMoeBadValuesAreRefusedByKey) {
  const json good = Preset("granitemoe");
  const auto refused = [&](const char* key, const json& value, const std::string& words) {
    json c = good;
    c[key] = value;
    auto r = ParseModelConfig(c, "granite/config.json");
    ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("granite/config.json"), std::string::npos) << r.status().ToString();
  };
  refused("residual_multiplier", 0.0, "residual_multiplier");
  refused("embedding_multiplier", -12.0, "embedding_multiplier");
  refused("logits_scaling", "6", "logits_scaling");
  refused("attention_multiplier", 0.0, "attention_multiplier");
  refused("num_local_experts", 0, "num_local_experts");
  refused("num_experts_per_tok", 40, "num_experts_per_tok");
  refused("hidden_act", "gelu", "hidden_act");
  refused("rope_scaling", json{{"type", "dynamic"}, {"factor", 2.0}}, "dynamic");
  json shared = Preset("granitemoeshared");
  shared["shared_intermediate_size"] = -1;
  auto r = ParseModelConfig(shared, "granite/config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("shared_intermediate_size"), std::string::npos) << r.status().ToString();
}

// ibm-granite/granite-4.0-h-tiny's config.json as published (as far as it could be reconstructed: 40 layers,
// attention at 5, 15, 25, 35): Mamba2 layers in linear_layers, their sizes, no positional embedding, the
// MoE with a shared MLP and Granite's multipliers.
TEST(ModelConfigTest, GraniteMoeHybridPublishedConfig) {
  json types = json::array();
  for (int l = 0; l < 40; ++l) types.push_back(l % 10 == 5 ? "attention" : "mamba");
  json published = json::parse(R"({
    "architectures": ["GraniteMoeHybridForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "attention_multiplier": 0.0078125, "bos_token_id": 100257, "embedding_multiplier": 12, "eos_token_id": 100257,
    "hidden_act": "silu", "hidden_size": 1536, "init_method": "mup", "initializer_range": 0.1,
    "intermediate_size": 512, "logits_scaling": 6, "mamba_chunk_size": 256, "mamba_conv_bias": true,
    "mamba_d_conv": 4, "mamba_d_head": 64, "mamba_d_state": 128, "mamba_expand": 2, "mamba_n_groups": 1,
    "mamba_n_heads": 48, "mamba_proj_bias": false, "max_position_embeddings": 131072,
    "model_type": "granitemoehybrid", "normalization_function": "rmsnorm", "num_attention_heads": 12,
    "num_experts_per_tok": 6, "num_hidden_layers": 40, "num_key_value_heads": 4, "num_local_experts": 64,
    "output_router_logits": false, "pad_token_id": 100256, "position_embedding_type": "nope",
    "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000,
    "router_aux_loss_coef": 0.0, "shared_intermediate_size": 1024, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 100352})");
  published["layer_types"] = types;
  auto c = ParseModelConfig(published, "h-tiny/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kGraniteMoeHybrid);
  EXPECT_TRUE(c->granite());
  EXPECT_TRUE(c->mamba());
  EXPECT_FALSE(c->hybrid_linear_attention());  // not a Gated DeltaNet model
  EXPECT_TRUE(c->no_rope);
  EXPECT_EQ(c->mamba_n_heads, 48);
  EXPECT_EQ(c->mamba_head_dim, 64);
  EXPECT_EQ(c->mamba_d_inner(), 3072);
  EXPECT_EQ(c->mamba_conv_dim(), 3072 + 2 * 128);
  EXPECT_EQ(c->mamba_d_conv, 4);
  EXPECT_TRUE(c->mamba_conv_bias);
  EXPECT_FALSE(c->mamba_proj_bias);
  for (int64_t l = 0; l < 40; ++l) {
    EXPECT_EQ(c->IsLinearAttentionLayer(l), l % 10 != 5) << l;
    EXPECT_TRUE(c->IsMoeLayer(l)) << l;
  }
  EXPECT_EQ(c->num_experts, 64);
  EXPECT_EQ(c->num_experts_per_tok, 6);
  EXPECT_EQ(c->moe_intermediate_size, 512);
  EXPECT_EQ(c->shared_expert_intermediate_size, 1024);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.0078125);
  EXPECT_DOUBLE_EQ(c->residual_multiplier, 0.22);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{100257});

  // GraniteMoeHybridConfig's defaults: every layer mamba, d_head "auto", shared MLP 1024; "rope" turns rotary on.
  json bare = published;
  for (const char* key : {"layer_types", "mamba_d_head", "shared_intermediate_size", "mamba_conv_bias"}) bare.erase(key);
  bare["position_embedding_type"] = "rope";
  auto d = ParseModelConfig(bare, "h-tiny/config.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->no_rope);
  EXPECT_EQ(d->mamba_head_dim, 64);  // 2 x 1536 / 48
  EXPECT_EQ(d->shared_expert_intermediate_size, 1024);
  for (int64_t l = 0; l < 40; ++l) EXPECT_TRUE(d->IsLinearAttentionLayer(l));
  bare["position_embedding_type"] = nullptr;
  auto e = ParseModelConfig(bare, "h-tiny/config.json");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->no_rope);

  const auto refused = [&](const char* key, const json& value, const std::string& words) {
    json bad = published;
    bad[key] = value;
    auto r = ParseModelConfig(bad, "h-tiny/config.json");
    ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("h-tiny/config.json"), std::string::npos) << r.status().ToString();
  };
  refused("layer_types", json::array({"mamba", "attention"}), "layer_types");
  json wrong_type = types;
  wrong_type[3] = "linear_attention";
  refused("layer_types", wrong_type, "layer_types[3]");
  refused("mamba_d_head", 60, "mamba_d_head");
  refused("mamba_n_groups", 5, "mamba_n_groups");
  refused("mamba_n_heads", 7, "mamba_n_heads");
  refused("position_embedding_type", "alibi", "position_embedding_type");
  refused("num_local_experts", 0, "dense Granite 4.0-H");
}

// LiquidAI/LFM2-8B-A1B's config.json as released (transformers 4.57): conv / full_attention layer types, the
// original tie_embedding key, the expert bias and the first two layers dense.
TEST(ModelConfigTest, Lfm2MoePublishedConfig) {
  json types = json::array();
  for (int l = 0; l < 24; ++l)
    types.push_back(l == 2 || l == 6 || l == 10 || l == 14 || l == 18 || l == 21 ? "full_attention" : "conv");
  json published = json::parse(R"({
    "architectures": ["Lfm2MoeForCausalLM"], "bos_token_id": 1, "conv_L_cache": 3, "conv_bias": false,
    "dtype": "bfloat16", "eos_token_id": 7, "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 7168, "max_position_embeddings": 128000, "model_type": "lfm2_moe",
    "moe_intermediate_size": 1792, "norm_eps": 1e-05, "norm_topk_prob": true, "num_attention_heads": 32,
    "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4, "num_hidden_layers": 24,
    "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0, "routed_scaling_factor": 1.0,
    "tie_embedding": true, "transformers_version": "4.57.0.dev0", "use_cache": true, "use_expert_bias": true,
    "vocab_size": 65536})");
  published["layer_types"] = types;
  auto c = ParseModelConfig(published, "lfm2/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kLfm2Moe);
  EXPECT_TRUE(c->short_conv());
  EXPECT_FALSE(c->mamba());
  EXPECT_FALSE(c->hybrid_linear_attention());
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_TRUE(c->use_qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->linear_conv_kernel_dim, 3);
  EXPECT_FALSE(c->short_conv_bias);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  for (int64_t l = 0; l < 24; ++l) {
    const bool attention = l == 2 || l == 6 || l == 10 || l == 14 || l == 18 || l == 21;
    EXPECT_EQ(c->IsLinearAttentionLayer(l), !attention) << l;
    EXPECT_EQ(c->IsMoeLayer(l), l >= 2) << l;
  }
  EXPECT_EQ(c->num_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 4);
  EXPECT_EQ(c->moe_intermediate_size, 1792);
  EXPECT_EQ(c->intermediate_size, 7168);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_TRUE(c->has_selection_bias());
  EXPECT_DOUBLE_EQ(c->topk_norm_epsilon, 1e-6);
  EXPECT_TRUE(c->norm_topk_prob);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{7});
  EXPECT_DOUBLE_EQ(c->softmax_scale(), 0.125);

  // Lfm2MoeConfig's defaults, the older full_attn_idxs, tie_embedding over tie_word_embeddings, no expert bias,
  // transformers 5's rope_parameters.
  json bare = json::parse(R"({"model_type": "lfm2_moe", "full_attn_idxs": [1], "num_hidden_layers": 3,
    "tie_word_embeddings": true, "tie_embedding": false, "use_expert_bias": false, "conv_bias": true,
    "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0}, "head_dim": 96})");
  auto d = ParseModelConfig(bare, "lfm2/config.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->vocab_size, 65536);
  EXPECT_EQ(d->hidden_size, 2048);
  EXPECT_EQ(d->head_dim, 96);
  EXPECT_FALSE(d->tie_word_embeddings);
  EXPECT_FALSE(d->has_selection_bias());
  EXPECT_TRUE(d->short_conv_bias);
  EXPECT_DOUBLE_EQ(d->rope_theta, 5e6);
  EXPECT_EQ(d->num_experts, 32);
  EXPECT_EQ(d->num_experts_per_tok, 4);
  EXPECT_TRUE(d->IsLinearAttentionLayer(0));
  EXPECT_FALSE(d->IsLinearAttentionLayer(1));
  EXPECT_TRUE(d->IsLinearAttentionLayer(2));
  EXPECT_FALSE(d->IsMoeLayer(1));
  EXPECT_TRUE(d->IsMoeLayer(2));

  const auto refused = [&](const char* key, const json& value, const std::string& words) {
    json bad = published;
    if (value.is_null()) {
      bad.erase(key);
    } else {
      bad[key] = value;
    }
    auto r = ParseModelConfig(bad, "lfm2/config.json");
    ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("lfm2/config.json"), std::string::npos) << r.status().ToString();
  };
  refused("layer_types", json::array({"conv", "full_attention"}), "layer_types");
  json wrong_type = types;
  wrong_type[4] = "short_conv";
  refused("layer_types", wrong_type, "layer_types[4]");
  refused("layer_types", nullptr, "layer_types");
  refused("num_experts_per_tok", 33, "num_experts_per_tok");
  refused("num_key_value_heads", 5, "num_key_value_heads");
  refused("hidden_act", "gelu", "hidden_act");
  refused("conv_L_cache", 0, "conv_L_cache");
}

// arcee-ai/Trinity-Nano's config.json as released (transformers 4.57): the router keys AfmoeConfig does not read,
// mup, the sliding / full layer pattern (NoPE on full layers), dense first layers, shared experts.
TEST(ModelConfigTest, AfmoePublishedConfig) {
  json published = json::parse(R"({
    "architectures": ["AfmoeForCausalLM"], "attention_dropout": 0.0, "dtype": "bfloat16",
    "global_attn_every_n_layers": 4, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 131072, "model_type": "afmoe",
    "moe_intermediate_size": 256, "mup_enabled": true, "n_group": 1, "num_attention_heads": 8, "num_dense_layers": 2,
    "num_expert_groups": 1, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 56,
    "num_key_value_heads": 2, "num_limited_groups": 1, "num_shared_experts": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000, "route_norm": true, "route_scale": 2.826, "score_func": "sigmoid",
    "sliding_window": 2048, "tie_word_embeddings": false, "topk_group": 1, "transformers_version": "4.57.3",
    "use_cache": true, "use_grouped_mm": true, "vocab_size": 200192})");
  auto c = ParseModelConfig(published, "trinity/config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kAfmoe);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_TRUE(c->use_qk_norm);
  EXPECT_TRUE(c->attn_gate_proj);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_FALSE(c->attn_output_gate);  // not qwen3_next's interleaved gate
  EXPECT_DOUBLE_EQ(c->embedding_multiplier, 32.0);  // sqrt(1024)
  EXPECT_FALSE(c->tie_word_embeddings);
  for (int64_t l = 0; l < 56; ++l) {
    const bool full = (l + 1) % 4 == 0;
    EXPECT_EQ(c->attention_window(l), full ? 0 : 2048) << l;
    EXPECT_EQ(c->LayerHasRope(l), !full) << l;
    EXPECT_FALSE(c->IsLinearAttentionLayer(l)) << l;
    EXPECT_EQ(c->IsMoeLayer(l), l >= 2) << l;
  }
  EXPECT_EQ(c->num_experts, 128);
  EXPECT_EQ(c->num_experts_per_tok, 8);
  EXPECT_EQ(c->n_shared_experts, 1);
  EXPECT_EQ(c->moe_intermediate_size, 256);
  EXPECT_DOUBLE_EQ(c->routed_scaling_factor, 2.826);
  EXPECT_EQ(c->topk_method, TopkMethod::kNoauxTc);
  EXPECT_EQ(c->scoring_func, ScoringFunc::kSigmoid);
  EXPECT_TRUE(c->has_selection_bias());
  EXPECT_DOUBLE_EQ(c->topk_norm_epsilon, 1e-20);
  EXPECT_TRUE(c->norm_topk_prob);

  // AfmoeConfig's defaults; explicit layer_types win over global_attn_every_n_layers.
  json bare = json::parse(R"({"model_type": "afmoe", "num_hidden_layers": 3,
    "layer_types": ["full_attention", "sliding_attention", "full_attention"]})");
  auto d = ParseModelConfig(bare, "trinity/config.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->hidden_size, 2048);
  EXPECT_EQ(d->num_key_value_heads, 16);  // = heads when absent
  EXPECT_EQ(d->num_experts, 64);
  EXPECT_EQ(d->num_experts_per_tok, 6);
  EXPECT_EQ(d->n_shared_experts, 2);
  EXPECT_DOUBLE_EQ(d->embedding_multiplier, 1.0);  // mup off
  EXPECT_FALSE(d->LayerHasRope(0));
  EXPECT_TRUE(d->LayerHasRope(1));
  EXPECT_EQ(d->attention_window(1), 1024);
  EXPECT_FALSE(d->IsMoeLayer(0));
  EXPECT_TRUE(d->IsMoeLayer(1));

  const auto refused = [&](const char* key, const json& value, const std::string& words) {
    json bad = published;
    bad[key] = value;
    auto r = ParseModelConfig(bad, "trinity/config.json");
    ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("trinity/config.json"), std::string::npos) << r.status().ToString();
  };
  refused("route_norm", false, "route_norm");
  refused("score_func", "softmax", "score_func");
  refused("n_group", 2, "n_group");
  refused("topk_group", 4, "topk_group");
  refused("layer_types", json::array({"full_attention"}), "layer_types");
  json wrong = json::array();
  for (int l = 0; l < 56; ++l) wrong.push_back("sliding_attention");
  wrong[9] = "chunked_attention";
  refused("layer_types", wrong, "layer_types[9]");
  refused("num_key_value_heads", 3, "num_key_value_heads");
  refused("attention_bias", true, "attention_bias");
  refused("sliding_window", nullptr, "sliding_window");
}

}  // namespace
}  // namespace zipmoe
