// Tests for services/synth's hybrid archs qwen3_next (Qwen3-Next-80B-A3B) and qwen3_5_moe (Qwen3.5-35B-A3B's
// text model): the tiny checkpoints load with LoadModelConfig and hold every tensor of
// tests/reference/moe_reference_qwen3_next.py's expected_shapes (written out again here, independently of
// model_layout.cc), plus only MTP / vision tensors; the config key sets; the Gated DeltaNet and norm
// initialisations; tokenizer / generation ids; the mini presets' size; router skew.
#include "services/synth/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checkpoint/model_config.h"
#include "common/checkpoint/safetensors.h"
#include "services/synth/model_layout.h"
#include "tests/services/synth_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::synth {
namespace {

using nlohmann::json;
using Shape = std::vector<int64_t>;
using testing::ReadAll;
using testing::TempDir;
using test::MeanStd;
using test::TinyOptions;
using test::ToFloats;

// expected_shapes of moe_reference_qwen3_next.py for a config (qwen3_5_moe: its text_config).
std::map<std::string, Shape> ReferenceShapes(const json& config) {
  const bool v35 = config["model_type"] == "qwen3_5_moe";
  const json& c = v35 ? config["text_config"] : config;
  const std::string P = v35 ? "model.language_model." : "model.";
  const int64_t H = c["hidden_size"], V = c["vocab_size"], L = c["num_hidden_layers"];
  const int64_t nk = c["linear_num_key_heads"], nv = c["linear_num_value_heads"];
  const int64_t kd = nk * c["linear_key_head_dim"].get<int64_t>(), vd = nv * c["linear_value_head_dim"].get<int64_t>();
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"], hd = c["head_dim"];
  const int64_t E = c["num_experts"], I = c["moe_intermediate_size"], S = c["shared_expert_intermediate_size"];
  std::map<std::string, Shape> out = {{P + "embed_tokens.weight", {V, H}}, {P + "norm.weight", {H}},
                                      {"lm_head.weight", {V, H}}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = fmt::format("{}layers.{}.", P, i);
    out[p + "input_layernorm.weight"] = {H};
    out[p + "post_attention_layernorm.weight"] = {H};
    const bool linear = c.contains("layer_types") ? c["layer_types"][i] == "linear_attention" : (i + 1) % 4 != 0;
    if (linear) {
      const std::string a = p + "linear_attn.";
      if (!v35) {
        out[a + "in_proj_qkvz.weight"] = {2 * kd + 2 * vd, H};
        out[a + "in_proj_ba.weight"] = {2 * nv, H};
      } else {
        out[a + "in_proj_qkv.weight"] = {2 * kd + vd, H};
        out[a + "in_proj_z.weight"] = {vd, H};
        out[a + "in_proj_b.weight"] = {nv, H};
        out[a + "in_proj_a.weight"] = {nv, H};
      }
      out[a + "conv1d.weight"] = {2 * kd + vd, 1, c["linear_conv_kernel_dim"].get<int64_t>()};
      out[a + "dt_bias"] = {nv};
      out[a + "A_log"] = {nv};
      out[a + "norm.weight"] = {c["linear_value_head_dim"].get<int64_t>()};
      out[a + "out_proj.weight"] = {H, vd};
    } else {
      const std::string a = p + "self_attn.";
      out[a + "q_proj.weight"] = {2 * heads * hd, H};
      out[a + "k_proj.weight"] = {kv * hd, H};
      out[a + "v_proj.weight"] = {kv * hd, H};
      out[a + "o_proj.weight"] = {H, heads * hd};
      out[a + "q_norm.weight"] = {hd};
      out[a + "k_norm.weight"] = {hd};
    }
    out[p + "mlp.gate.weight"] = {E, H};
    if (v35) {
      out[p + "mlp.experts.gate_up_proj"] = {E, 2 * I, H};
      out[p + "mlp.experts.down_proj"] = {E, H, I};
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = fmt::format("{}mlp.experts.{}.", p, e);
        out[x + "gate_proj.weight"] = {I, H};
        out[x + "up_proj.weight"] = {I, H};
        out[x + "down_proj.weight"] = {H, I};
      }
    }
    out[p + "mlp.shared_expert.gate_proj.weight"] = {S, H};
    out[p + "mlp.shared_expert.up_proj.weight"] = {S, H};
    out[p + "mlp.shared_expert.down_proj.weight"] = {H, S};
    out[p + "mlp.shared_expert_gate.weight"] = {1, H};
  }
  return out;
}

bool IsExtra(const std::string& name) { return name.rfind("mtp.", 0) == 0 || name.rfind("model.visual.", 0) == 0; }

std::set<std::string> Keys(const json& j) {
  std::set<std::string> k;
  for (const auto& [key, v] : j.items()) k.insert(key);
  return k;
}

class SynthHybridTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthHybridTest, LoadsAndMatchesTheReferenceLayout) {
  const std::string arch = GetParam();
  const bool v35 = arch == "qwen3_5_moe";
  TempDir tmp;
  Result<SynthReport> report = SynthesizeCheckpoint(TinyOptions(arch, tmp.path(), 7));
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_LE(test::DirectoryBytes(tmp.path()), test::kMaxTinyBytes);

  Result<ModelConfig> mc = LoadModelConfig(tmp.path());
  ASSERT_TRUE(mc.ok()) << mc.status().ToString();
  EXPECT_EQ(mc->model_type, arch);
  EXPECT_EQ(mc->hidden_size, 128);
  EXPECT_EQ(mc->num_hidden_layers, 4);
  EXPECT_EQ(mc->linear_layers, (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_TRUE(mc->zero_centered_norms);
  EXPECT_TRUE(mc->attn_output_gate);
  EXPECT_EQ(mc->weight_prefix, v35 ? "model.language_model." : "model.");
  EXPECT_EQ(mc->head_dim, 64);
  EXPECT_DOUBLE_EQ(mc->partial_rotary_factor, 0.25);
  EXPECT_EQ(mc->linear_num_key_heads, 2);
  EXPECT_EQ(mc->linear_num_value_heads, 4);
  EXPECT_EQ(mc->linear_key_head_dim, 32);
  EXPECT_EQ(mc->linear_value_head_dim, 32);
  EXPECT_EQ(mc->linear_conv_kernel_dim, 4);
  EXPECT_EQ(mc->num_experts, 16);
  EXPECT_EQ(mc->num_experts_per_tok, 4);
  EXPECT_EQ(mc->moe_intermediate_size, 64);
  EXPECT_EQ(mc->shared_expert_intermediate_size, 64);
  EXPECT_TRUE(mc->norm_topk_prob);
  EXPECT_DOUBLE_EQ(mc->rope_theta, 1e7);
  // <|im_end|>: the vocabulary's last id (qwen3_next: <|endoftext|>, <|im_start|>, <|im_end|> at the end),
  // qwen3_5_moe 11 below it (its 14 specials end with the vision ones); <|endoftext|> two below.
  const int32_t im_end = v35 ? 2048 - 12 : 2047;
  EXPECT_TRUE(mc->IsEos(im_end));
  EXPECT_TRUE(mc->IsEos(im_end - 2));

  Result<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const json& config = (*ckpt)->config();
  const std::map<std::string, Shape> want = ReferenceShapes(config);
  std::map<std::string, Shape> got;
  int64_t mtp = 0, visual = 0;
  for (const std::string& name : (*ckpt)->names()) {
    Result<TensorView> v = (*ckpt)->Find(name);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(v->spec.dtype, DType::kBF16) << name;
    if (IsExtra(name)) {
      mtp += name.rfind("mtp.", 0) == 0;
      visual += name.rfind("model.visual.", 0) == 0;
      continue;
    }
    got[name] = v->spec.shape;
  }
  EXPECT_EQ(got, want);
  // One MTP layer as released (loaders must skip it), with its routed experts; qwen3_5_moe's vision tower.
  EXPECT_GT(mtp, 10);
  const std::string mtp_expert = v35 ? "mtp.layers.0.mlp.experts.gate_up_proj" : "mtp.layers.0.mlp.experts.0.gate_proj.weight";
  EXPECT_TRUE((*ckpt)->Find(mtp_expert).ok()) << mtp_expert;
  EXPECT_TRUE((*ckpt)->Find("mtp.fc.weight").ok());
  EXPECT_EQ(visual, v35 ? 2 : 0);
  if (v35) {
    EXPECT_TRUE((*ckpt)->Find("model.visual.patch_embed.proj.weight").ok());
  }

  // The published key sets (tests/reference/check_logits_selftest_qwen3_next.py QWEN3_NEXT_80B / QWEN3_5_35B).
  if (v35) {
    EXPECT_EQ(Keys(config), (std::set<std::string>{"architectures", "image_token_id", "model_type", "text_config",
                                                   "tie_word_embeddings", "transformers_version", "video_token_id",
                                                   "vision_config", "vision_end_token_id", "vision_start_token_id"}));
    EXPECT_EQ(config["architectures"], json({"Qwen3_5MoeForConditionalGeneration"}));
    const json& t = config["text_config"];
    EXPECT_EQ(Keys(t),
              (std::set<std::string>{"attention_bias", "attention_dropout", "attn_output_gate", "dtype", "eos_token_id",
                                     "full_attention_interval", "head_dim", "hidden_act", "hidden_size",
                                     "initializer_range", "layer_types", "linear_conv_kernel_dim", "linear_key_head_dim",
                                     "linear_num_key_heads", "linear_num_value_heads", "linear_value_head_dim",
                                     "mamba_ssm_dtype", "max_position_embeddings", "model_type", "moe_intermediate_size",
                                     "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "num_attention_heads",
                                     "num_experts", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
                                     "rms_norm_eps", "rope_parameters", "shared_expert_intermediate_size",
                                     "tie_word_embeddings", "use_cache", "vocab_size"}));
    EXPECT_EQ(t["model_type"], "qwen3_5_moe_text");
    EXPECT_EQ(t["layer_types"], json({"linear_attention", "linear_attention", "linear_attention", "full_attention"}));
    EXPECT_EQ(t["rope_parameters"], json({{"mrope_interleaved", true}, {"mrope_section", {3, 3, 2}},
                                          {"partial_rotary_factor", 0.25}, {"rope_theta", 10000000},
                                          {"rope_type", "default"}}));
    EXPECT_TRUE(config["vision_config"].is_object());
  } else {
    EXPECT_EQ(Keys(config),
              (std::set<std::string>{"architectures", "attention_bias", "attention_dropout", "bos_token_id",
                                     "decoder_sparse_step", "eos_token_id", "full_attention_interval", "head_dim",
                                     "hidden_act", "hidden_size", "initializer_range", "intermediate_size",
                                     "linear_conv_kernel_dim", "linear_key_head_dim", "linear_num_key_heads",
                                     "linear_num_value_heads", "linear_value_head_dim", "max_position_embeddings",
                                     "mlp_only_layers", "model_type", "moe_intermediate_size", "mtp_num_hidden_layers",
                                     "mtp_use_dedicated_embeddings", "norm_topk_prob", "num_attention_heads",
                                     "num_experts", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
                                     "output_router_logits", "partial_rotary_factor", "rms_norm_eps", "rope_scaling",
                                     "rope_theta", "router_aux_loss_coef", "shared_expert_intermediate_size",
                                     "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache",
                                     "use_sliding_window", "vocab_size"}));
    EXPECT_EQ(config["architectures"], json({"Qwen3NextForCausalLM"}));
    EXPECT_EQ(config["intermediate_size"], 256);
  }
}

// Zero-centred norms near 0 (the model applies 1 + w), the gated norm near 1, exp(A_log) in [1, 16],
// softplus(dt_bias) in [0.001, 0.1], the conv1d std 0.3, the projections std 0.02.
TEST_P(SynthHybridTest, WeightInitialisation) {
  const std::string arch = GetParam();
  TempDir tmp;
  ASSERT_TRUE(SynthesizeCheckpoint(TinyOptions(arch, tmp.path(), 3)).ok());
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<float> zc, gated, conv, proj, a_log, dt_bias;
  for (const std::string& name : (*ckpt)->names()) {
    const std::vector<float> v = ToFloats(*(*ckpt)->Find(name));
    std::vector<float>* bucket = nullptr;
    if (name.find("linear_attn.norm.weight") != std::string::npos) bucket = &gated;
    else if (name.find("norm") != std::string::npos) bucket = &zc;
    else if (name.find("conv1d") != std::string::npos) bucket = &conv;
    else if (name.find("A_log") != std::string::npos) bucket = &a_log;
    else if (name.find("dt_bias") != std::string::npos) bucket = &dt_bias;
    else if (name.find("_proj") != std::string::npos && name.find("visual") == std::string::npos) bucket = &proj;
    if (bucket != nullptr) bucket->insert(bucket->end(), v.begin(), v.end());
  }
  double mean, std;
  MeanStd(zc, &mean, &std);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std, 0.1, 0.01);
  MeanStd(gated, &mean, &std);
  EXPECT_NEAR(mean, 1.0, 0.01);
  MeanStd(conv, &mean, &std);
  EXPECT_NEAR(std, 0.3, 0.02);
  MeanStd(proj, &mean, &std);
  EXPECT_NEAR(std, 0.02, 0.002);
  ASSERT_EQ(a_log.size(), 3u * 4u);  // 3 linear layers x 4 value heads
  ASSERT_EQ(dt_bias.size(), a_log.size());
  for (float v : a_log) {
    EXPECT_GE(std::exp(v), 0.99);
    EXPECT_LE(std::exp(v), 16.1);
  }
  for (float v : dt_bias) {
    const double dt = std::log1p(std::exp(static_cast<double>(v)));
    EXPECT_GE(dt, 0.00099);
    EXPECT_LE(dt, 0.101);
  }
}

TEST_P(SynthHybridTest, TokenizerAndGenerationIds) {
  const std::string arch = GetParam();
  const bool v35 = arch == "qwen3_5_moe";
  TempDir tmp;
  ASSERT_TRUE(SynthesizeCheckpoint(TinyOptions(arch, tmp.path())).ok());
  const json config = json::parse(ReadAll(tmp.Sub("config.json")));
  const json tok = json::parse(ReadAll(tmp.Sub("tokenizer.json")));
  const json tok_config = json::parse(ReadAll(tmp.Sub("tokenizer_config.json")));
  const json gen = json::parse(ReadAll(tmp.Sub("generation_config.json")));
  std::map<std::string, int64_t> special;
  for (const json& a : tok["added_tokens"]) special[a["content"]] = a["id"];
  EXPECT_EQ(static_cast<int64_t>(tok["model"]["vocab"].size() + tok["added_tokens"].size()), 2048);
  EXPECT_EQ(tok_config["eos_token"], "<|im_end|>");
  EXPECT_EQ(tok_config["tokenizer_class"], "Qwen2Tokenizer");
  EXPECT_NE(tok_config["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
  const int64_t im_end = special.at("<|im_end|>"), end_of_text = special.at("<|endoftext|>");
  if (v35) {
    EXPECT_EQ(config["text_config"]["eos_token_id"], end_of_text);  // as the real 248044
    EXPECT_EQ(config["image_token_id"], special.at("<|image_pad|>"));
    EXPECT_EQ(config["video_token_id"], special.at("<|video_pad|>"));
    EXPECT_EQ(config["vision_start_token_id"], special.at("<|vision_start|>"));
    EXPECT_EQ(config["vision_end_token_id"], special.at("<|vision_end|>"));
    // The real offsets from <|endoftext|> (248044): vision_start 248053, image_pad 248056, video_pad 248057.
    EXPECT_EQ(special.at("<|vision_start|>") - end_of_text, 9);
    EXPECT_EQ(special.at("<|video_pad|>") - end_of_text, 13);
    EXPECT_FALSE(config.contains("eos_token_id"));
  } else {
    EXPECT_EQ(config["eos_token_id"], im_end);
    EXPECT_EQ(config["bos_token_id"], end_of_text);
  }
  EXPECT_EQ(gen["eos_token_id"], json({im_end, end_of_text}));
}

TEST_P(SynthHybridTest, RouterSkewConcentratesRouting) {
  SynthOptions o = TinyOptions(GetParam(), "");
  Result<RouterShareReport> flat = MeasureSynthRouterTopShare(o, 2000, 1);
  o.router_skew = 3.0;
  Result<RouterShareReport> skewed = MeasureSynthRouterTopShare(o, 2000, 1);
  ASSERT_TRUE(flat.ok() && skewed.ok()) << flat.status().ToString() << skewed.status().ToString();
  EXPECT_EQ(skewed->layer_ids, (std::vector<int32_t>{0, 1, 2, 3}));  // not the MTP layer's router
  EXPECT_LT(flat->mean_top_share, 0.3);
  EXPECT_GT(skewed->mean_top_share, 0.45);
}

// --dtype fp8: qwen3_next's *_proj.weight become F8_E4M3 (experts, attention, the DeltaNet's out_proj; not
// its in_proj_qkvz / in_proj_ba, whose names do not end so); qwen3_5_moe refuses it.
TEST(SynthHybridDtype, Fp8ForQwen3NextOnly) {
  TempDir tmp;
  SynthOptions o = TinyOptions("qwen3_next", tmp.Sub("n"), 7);
  o.dtype = "fp8";
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  auto ckpt = Checkpoint::Open(tmp.Sub("n"));
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ((*ckpt)->Find("model.layers.0.linear_attn.out_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_EQ((*ckpt)->Find("model.layers.0.linear_attn.in_proj_qkvz.weight")->spec.dtype, DType::kBF16);
  EXPECT_EQ((*ckpt)->Find("model.layers.3.self_attn.q_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_EQ((*ckpt)->Find("model.layers.0.mlp.experts.3.down_proj.weight")->spec.dtype, DType::kF8E4M3);
  EXPECT_TRUE((*ckpt)->Find("model.layers.0.mlp.experts.3.down_proj.weight_scale_inv").ok());
  EXPECT_EQ((*ckpt)->Find("model.layers.0.linear_attn.conv1d.weight")->spec.dtype, DType::kBF16);
  o = TinyOptions("qwen3_5_moe", tmp.Sub("v"), 7);
  o.dtype = "fp8";
  const Status refused = SynthesizeCheckpoint(o).status();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("fused experts"), std::string::npos) << refused.ToString();
}

INSTANTIATE_TEST_SUITE_P(Hybrids, SynthHybridTest, ::testing::Values("qwen3_next", "qwen3_5_moe"));

// mini: hidden 1024, 12 layers (9 linear + 3 full), 128 experts; under 4 GB of BF16 with the MTP layer.
TEST(SynthHybridPresets, MiniIsHalfWidthUnderFourGigabytes) {
  for (const char* arch : {"qwen3_next", "qwen3_5_moe"}) {
    Result<json> config = PresetConfig(arch, "mini");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    Result<ModelLayout> layout = BuildModelLayout(*config);
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_EQ(layout->hidden_size, 1024) << arch;
    EXPECT_EQ(layout->n_experts, 128) << arch;
    EXPECT_GT(layout->total_bytes(), 3000ull * 1000 * 1000) << arch;
    EXPECT_LT(layout->total_bytes(), 4000ull * 1000 * 1000) << arch;
    std::map<std::string, Shape> specs;
    for (const TensorSpec& s : layout->Specs())
      if (!IsExtra(s.name)) specs[s.name] = s.shape;
    EXPECT_EQ(specs, ReferenceShapes(*config)) << arch;
  }
}

}  // namespace
}  // namespace zipmoe::synth
