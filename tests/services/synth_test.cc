// Tests for services/synth: tiny checkpoints in the exact Hugging Face layout, determinism, sharding,
// weight statistics, tokenizer files and the `zipmoe synth` command.
#include "services/synth/synth.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/safetensors.h"
#include "tests/test_util.h"

namespace zipmoe::synth {
namespace {

using nlohmann::json;
using Shape = std::vector<int64_t>;
using testing::ReadAll;
using testing::TempDir;

constexpr uint64_t kMaxTinyBytes = 20ull << 20;

SynthOptions TinyOptions(const std::string& arch, const std::string& dir, uint64_t seed = 0) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.out_dir = dir;
  o.seed = seed;
  o.n_threads = 2;
  return o;
}

// The tensor names/shapes the transformers modules register, written out independently of
// model_layout.cc from the HF modeling files.
std::map<std::string, Shape> ExpectedTensors(const json& c) {
  std::map<std::string, Shape> t;
  const std::string type = c["model_type"];
  const int64_t h = c["hidden_size"], v = c["vocab_size"], layers = c["num_hidden_layers"];
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : h / heads;
  t["model.embed_tokens.weight"] = {v, h};
  t["model.norm.weight"] = {h};
  t["lm_head.weight"] = {v, h};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    t[p + "input_layernorm.weight"] = {h};
    t[p + "post_attention_layernorm.weight"] = {h};
    auto mlp = [&](const std::string& q, int64_t inter) {
      t[q + ".gate_proj.weight"] = {inter, h};
      t[q + ".up_proj.weight"] = {inter, h};
      t[q + ".down_proj.weight"] = {h, inter};
    };
    if (type == "deepseek_v2") {
      const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], vd = c["v_head_dim"];
      const int64_t kvr = c["kv_lora_rank"];
      if (c["q_lora_rank"].is_null()) {
        t[p + "self_attn.q_proj.weight"] = {heads * (nope + rope), h};
      } else {
        const int64_t qr = c["q_lora_rank"];
        t[p + "self_attn.q_a_proj.weight"] = {qr, h};
        t[p + "self_attn.q_a_layernorm.weight"] = {qr};
        t[p + "self_attn.q_b_proj.weight"] = {heads * (nope + rope), qr};
      }
      t[p + "self_attn.kv_a_proj_with_mqa.weight"] = {kvr + rope, h};
      t[p + "self_attn.kv_a_layernorm.weight"] = {kvr};
      t[p + "self_attn.kv_b_proj.weight"] = {heads * (nope + vd), kvr};
      t[p + "self_attn.o_proj.weight"] = {h, heads * vd};
      if (l < c["first_k_dense_replace"].get<int64_t>()) {
        mlp(p + "mlp", c["intermediate_size"]);
      } else {
        const int64_t e_n = c["n_routed_experts"], mi = c["moe_intermediate_size"];
        t[p + "mlp.gate.weight"] = {e_n, h};
        for (int64_t e = 0; e < e_n; ++e) mlp(fmt::format("{}mlp.experts.{}", p, e), mi);
        mlp(p + "mlp.shared_experts", c["n_shared_experts"].get<int64_t>() * mi);
      }
      continue;
    }
    t[p + "self_attn.q_proj.weight"] = {heads * hd, h};
    t[p + "self_attn.k_proj.weight"] = {kv * hd, h};
    t[p + "self_attn.v_proj.weight"] = {kv * hd, h};
    t[p + "self_attn.o_proj.weight"] = {h, heads * hd};
    if (type == "qwen2_moe") {
      t[p + "self_attn.q_proj.bias"] = {heads * hd};
      t[p + "self_attn.k_proj.bias"] = {kv * hd};
      t[p + "self_attn.v_proj.bias"] = {kv * hd};
    }
    if (type == "qwen3_moe") {
      t[p + "self_attn.q_norm.weight"] = {hd};
      t[p + "self_attn.k_norm.weight"] = {hd};
    }
    if (type == "olmoe") {
      t[p + "self_attn.q_norm.weight"] = {h};
      t[p + "self_attn.k_norm.weight"] = {(h / heads) * kv};
    }
    if (type == "mixtral") {
      const int64_t e_n = c["num_local_experts"], f = c["intermediate_size"];
      t[p + "block_sparse_moe.gate.weight"] = {e_n, h};
      for (int64_t e = 0; e < e_n; ++e) {
        const std::string q = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
        t[q + "w1.weight"] = {f, h};
        t[q + "w2.weight"] = {h, f};
        t[q + "w3.weight"] = {f, h};
      }
      continue;
    }
    const int64_t e_n = c["num_experts"];
    const int64_t mi = type == "olmoe" ? c["intermediate_size"] : c["moe_intermediate_size"];
    t[p + "mlp.gate.weight"] = {e_n, h};
    for (int64_t e = 0; e < e_n; ++e) mlp(fmt::format("{}mlp.experts.{}", p, e), mi);
    if (type == "qwen2_moe") {
      mlp(p + "mlp.shared_expert", c["shared_expert_intermediate_size"]);
      t[p + "mlp.shared_expert_gate.weight"] = {1, h};
    }
  }
  return t;
}

// The real config.json key sets (Qwen1.5-MoE-A2.7B, Mixtral-8x7B-v0.1, Qwen3-30B-A3B,
// OLMoE-1B-7B-0924, DeepSeek-V2-Lite); qwen2_moe adds mlp_only_layers, a Qwen2MoeConfig default.
std::set<std::string> ExpectedConfigKeys(const std::string& arch) {
  const std::map<std::string, std::set<std::string>> keys = {
      {"qwen2_moe",
       {"architectures", "attention_dropout", "bos_token_id", "decoder_sparse_step", "eos_token_id", "hidden_act",
        "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "max_window_layers",
        "mlp_only_layers", "model_type", "moe_intermediate_size", "norm_topk_prob", "num_attention_heads",
        "num_experts", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "output_router_logits",
        "rms_norm_eps", "rope_theta", "router_aux_loss_coef", "shared_expert_intermediate_size", "sliding_window",
        "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache", "use_sliding_window",
        "vocab_size"}},
      {"mixtral",
       {"architectures", "attention_dropout", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size",
        "initializer_range", "intermediate_size", "max_position_embeddings", "model_type", "num_attention_heads",
        "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "num_local_experts",
        "output_router_logits", "rms_norm_eps", "rope_theta", "router_aux_loss_coef", "sliding_window",
        "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache", "vocab_size"}},
      {"qwen3_moe",
       {"architectures", "attention_bias", "attention_dropout", "bos_token_id", "decoder_sparse_step",
        "eos_token_id", "head_dim", "hidden_act", "hidden_size", "initializer_range", "intermediate_size",
        "max_position_embeddings", "max_window_layers", "mlp_only_layers", "model_type", "moe_intermediate_size",
        "norm_topk_prob", "num_attention_heads", "num_experts", "num_experts_per_tok", "num_hidden_layers",
        "num_key_value_heads", "output_router_logits", "rms_norm_eps", "rope_scaling", "rope_theta",
        "router_aux_loss_coef", "sliding_window", "tie_word_embeddings", "torch_dtype", "transformers_version",
        "use_cache", "use_sliding_window", "vocab_size"}},
      {"olmoe",
       {"architectures", "attention_bias", "attention_dropout", "clip_qkv", "eos_token_id", "hidden_act",
        "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "model_type",
        "norm_topk_prob", "num_attention_heads", "num_experts", "num_experts_per_tok", "num_hidden_layers",
        "num_key_value_heads", "output_router_logits", "pad_token_id", "rms_norm_eps", "rope_scaling",
        "rope_theta", "router_aux_loss_coef", "tie_word_embeddings", "torch_dtype", "transformers_version",
        "use_cache", "vocab_size"}},
      {"deepseek_v2",
       {"architectures", "attention_bias", "attention_dropout", "auto_map", "aux_loss_alpha", "bos_token_id",
        "eos_token_id", "ep_size", "first_k_dense_replace", "hidden_act", "hidden_size", "initializer_range",
        "intermediate_size", "kv_lora_rank", "max_position_embeddings", "model_type", "moe_intermediate_size",
        "moe_layer_freq", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
        "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
        "pretraining_tp", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "rms_norm_eps", "rope_scaling",
        "rope_theta", "routed_scaling_factor", "scoring_func", "seq_aux", "tie_word_embeddings", "topk_group",
        "topk_method", "torch_dtype", "transformers_version", "use_cache", "v_head_dim", "vocab_size"}},
  };
  return keys.at(arch);
}

uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) total += e.file_size();
  return total;
}

std::vector<float> ToFloats(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.spec.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, v.data + 2 * i, 2);
    out[i] = Bf16ToFloat(bits);
  }
  return out;
}

void MeanStd(const std::vector<float>& x, double* mean, double* std) {
  double s = 0, s2 = 0;
  for (float v : x) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  *mean = s / x.size();
  *std = std::sqrt(s2 / x.size() - *mean * *mean);
}

class SynthTinyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SynthTinyTest, MatchesHuggingFaceLayout) {
  const std::string arch = GetParam();
  TempDir tmp;
  Result<SynthReport> report = SynthesizeCheckpoint(TinyOptions(arch, tmp.path()));
  ASSERT_TRUE(report.ok()) << report.status().ToString();

  Result<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  const json& config = (*ckpt)->config();
  std::set<std::string> keys;
  for (const auto& [k, v] : config.items()) keys.insert(k);
  EXPECT_EQ(keys, ExpectedConfigKeys(arch));
  EXPECT_EQ(config["model_type"], arch);
  EXPECT_EQ(config["torch_dtype"], "bfloat16");
  EXPECT_EQ(config["tie_word_embeddings"], false);

  const std::map<std::string, Shape> expected = ExpectedTensors(config);
  std::map<std::string, Shape> got;
  int64_t expert_tensors = 0;
  for (const std::string& name : (*ckpt)->names()) {
    Result<TensorView> view = (*ckpt)->Find(name);
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    EXPECT_EQ(view->spec.dtype, DType::kBF16) << name;
    got[name] = view->spec.shape;
    expert_tensors += name.find(".experts.") != std::string::npos;
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(report->n_tensors, static_cast<int64_t>(expected.size()));

  // Routed-expert tensors: MoE layers x experts x 3.
  int64_t moe_layers = config["num_hidden_layers"];
  int64_t n_experts = 0;
  if (arch == "mixtral") n_experts = config["num_local_experts"];
  else if (arch == "deepseek_v2") n_experts = config["n_routed_experts"];
  else n_experts = config["num_experts"];
  if (arch == "deepseek_v2") moe_layers -= config["first_k_dense_replace"].get<int64_t>();
  EXPECT_EQ(expert_tensors, moe_layers * n_experts * 3);

  EXPECT_LE(DirectoryBytes(tmp.path()), kMaxTinyBytes);
  EXPECT_EQ(report->total_bytes, DirectoryBytes(tmp.path()));
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(tmp.Sub(f))) << f;
  }
}

TEST_P(SynthTinyTest, TokenizerFilesAreConsistentWithConfig) {
  const std::string arch = GetParam();
  TempDir tmp;
  ASSERT_TRUE(SynthesizeCheckpoint(TinyOptions(arch, tmp.path())).ok());
  const json config = json::parse(ReadAll(tmp.Sub("config.json")));
  const json tok = json::parse(ReadAll(tmp.Sub("tokenizer.json")));
  const json tok_config = json::parse(ReadAll(tmp.Sub("tokenizer_config.json")));
  const json gen = json::parse(ReadAll(tmp.Sub("generation_config.json")));
  const int64_t vocab_size = config["vocab_size"];

  const json& vocab = tok["model"]["vocab"];
  const json& added = tok["added_tokens"];
  ASSERT_EQ(static_cast<int64_t>(vocab.size() + added.size()), vocab_size);
  std::vector<int> seen(static_cast<size_t>(vocab_size), 0);
  std::map<std::string, int64_t> special_ids;
  for (const auto& [token, id] : vocab.items()) ++seen.at(id.get<size_t>());
  for (const json& a : added) {
    ++seen.at(a["id"].get<size_t>());
    special_ids[a["content"]] = a["id"];
    EXPECT_TRUE(a["special"].get<bool>());
    EXPECT_EQ(vocab.count(a["content"].get<std::string>()), 0u) << "special token inside the BPE vocab";
  }
  for (int64_t id = 0; id < vocab_size; ++id) EXPECT_EQ(seen[id], 1) << "id " << id;

  for (const json& m : tok["model"]["merges"]) {
    const std::string merge = m;
    const size_t space = merge.find(' ');
    ASSERT_NE(space, std::string::npos) << merge;
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    EXPECT_TRUE(vocab.contains(left) && vocab.contains(right) && vocab.contains(left + right)) << merge;
  }
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"],
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+");
  EXPECT_EQ(tok["decoder"]["type"], "ByteLevel");

  // bos/eos of config, generation_config and tokenizer_config name the same tokens.
  const std::string eos = tok_config["eos_token"];
  EXPECT_EQ(special_ids.at(eos), config["eos_token_id"].get<int64_t>());
  if (config.contains("bos_token_id")) {
    EXPECT_EQ(gen["bos_token_id"], config["bos_token_id"]);
    if (tok_config["bos_token"].is_string()) {
      EXPECT_EQ(special_ids.at(tok_config["bos_token"].get<std::string>()), config["bos_token_id"].get<int64_t>());
    }
  }
  if (arch == "qwen3_moe") {
    EXPECT_EQ(gen["eos_token_id"], json({config["eos_token_id"], config["bos_token_id"]}));
  } else {
    EXPECT_EQ(gen["eos_token_id"], config["eos_token_id"]);
  }
  if (arch == "qwen2_moe" || arch == "qwen3_moe") {
    EXPECT_EQ(special_ids.count("<|im_start|>"), 1u);
    EXPECT_EQ(special_ids.count("<|im_end|>"), 1u);
    EXPECT_NE(tok_config["chat_template"].get<std::string>().find("<|im_start|>"), std::string::npos);
    EXPECT_EQ(tok_config["tokenizer_class"], "Qwen2Tokenizer");
  }
  if (arch == "mixtral") {
    EXPECT_EQ(special_ids, (std::map<std::string, int64_t>{{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}}));
    EXPECT_EQ(tok["post_processor"]["type"], "TemplateProcessing");
  }
  if (arch == "olmoe") {
    EXPECT_EQ(special_ids.at("<|padding|>"), config["pad_token_id"].get<int64_t>());
  }
  EXPECT_TRUE(tok_config.contains("chat_template"));
}

INSTANTIATE_TEST_SUITE_P(AllArchs, SynthTinyTest,
                         ::testing::Values("qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2"));

TEST(SynthCheckpoint, DeepseekQLoraRankSelectsLowRankQuery) {
  TempDir tmp;
  SynthOptions o = TinyOptions("deepseek_v2", tmp.path());
  o.q_lora_rank = 48;
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  Result<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->config()["q_lora_rank"], 48);
  std::map<std::string, Shape> got;
  for (const std::string& name : (*ckpt)->names()) got[name] = (*ckpt)->Find(name)->spec.shape;
  EXPECT_EQ(got, ExpectedTensors((*ckpt)->config()));
  EXPECT_EQ(got.at("model.layers.0.self_attn.q_a_proj.weight"), (Shape{48, 128}));
  EXPECT_EQ(got.at("model.layers.0.self_attn.q_b_proj.weight"), (Shape{4 * 48, 48}));
  EXPECT_EQ(got.count("model.layers.0.self_attn.q_proj.weight"), 0u);
}

TEST(SynthCheckpoint, SameSeedSameBytesAnyThreadCount) {
  TempDir a, b, c;
  SynthOptions oa = TinyOptions("qwen2_moe", a.path(), 7);
  oa.router_skew = 1.0;
  SynthOptions ob = oa;
  ob.out_dir = b.path();
  ob.n_threads = 1;
  SynthOptions oc = oa;
  oc.out_dir = c.path();
  oc.seed = 8;
  ASSERT_TRUE(SynthesizeCheckpoint(oa).ok());
  ASSERT_TRUE(SynthesizeCheckpoint(ob).ok());
  ASSERT_TRUE(SynthesizeCheckpoint(oc).ok());
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors"}) {
    EXPECT_EQ(ReadAll(a.Sub(f)), ReadAll(b.Sub(f))) << f;
  }
  EXPECT_NE(ReadAll(a.Sub("model.safetensors")), ReadAll(c.Sub("model.safetensors")));
  EXPECT_EQ(ReadAll(a.Sub("tokenizer.json")), ReadAll(c.Sub("tokenizer.json")));  // seed-independent
}

TEST(SynthCheckpoint, SmallShardSizeWritesIndexedShardsWithSameBytes) {
  TempDir single, sharded;
  ASSERT_TRUE(SynthesizeCheckpoint(TinyOptions("mixtral", single.path(), 3)).ok());
  SynthOptions o = TinyOptions("mixtral", sharded.path(), 3);
  o.shard_size_bytes = 2ull << 20;
  Result<SynthReport> report = SynthesizeCheckpoint(o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(std::filesystem::exists(sharded.Sub("model.safetensors.index.json")));
  EXPECT_FALSE(std::filesystem::exists(sharded.Sub("model.safetensors")));
  int shards = 0;
  for (const SynthFile& f : report->files) shards += f.name.find("-of-") != std::string::npos;
  EXPECT_GE(shards, 5);

  auto a = Checkpoint::Open(single.path());
  auto b = Checkpoint::Open(sharded.path());
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GE((*b)->files().size(), 5u);
  ASSERT_EQ((*a)->names(), (*b)->names());
  for (const std::string& name : (*a)->names()) {
    TensorView va = *(*a)->Find(name), vb = *(*b)->Find(name);
    ASSERT_EQ(va.size_bytes(), vb.size_bytes()) << name;
    EXPECT_EQ(std::memcmp(va.data, vb.data, va.size_bytes()), 0) << name;
  }

  // Re-synthesising unsharded into the same directory removes the stale shards.
  o.shard_size_bytes = 1ull << 30;
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  EXPECT_FALSE(std::filesystem::exists(sharded.Sub("model.safetensors.index.json")));
  EXPECT_TRUE(Checkpoint::Open(sharded.path()).ok());
}

TEST(SynthCheckpoint, WeightStatisticsAreRealistic) {
  TempDir tmp;
  ASSERT_TRUE(SynthesizeCheckpoint(TinyOptions("qwen2_moe", tmp.path(), 11)).ok());
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<float> proj, norms, biases, embed;
  for (const std::string& name : (*ckpt)->names()) {
    const std::vector<float> v = ToFloats(*(*ckpt)->Find(name));
    std::vector<float>* bucket = &proj;
    if (name.find("norm") != std::string::npos) bucket = &norms;
    else if (name.find(".bias") != std::string::npos) bucket = &biases;
    else if (name.find("embed_tokens") != std::string::npos) bucket = &embed;
    bucket->insert(bucket->end(), v.begin(), v.end());
  }
  double mean, std;
  MeanStd(proj, &mean, &std);
  EXPECT_NEAR(std, 0.02, 0.002);
  EXPECT_NEAR(mean, 0.0, 0.0005);
  MeanStd(embed, &mean, &std);
  EXPECT_NEAR(std, 1.0, 0.1);  // SynthOptions::embedding_std (docs/synth.md "Embedding scale")
  MeanStd(norms, &mean, &std);
  EXPECT_NEAR(mean, 1.0, 0.005);
  EXPECT_NEAR(std, 0.02, 0.004);
  MeanStd(biases, &mean, &std);
  EXPECT_NEAR(std, 0.01, 0.002);
}

TEST(SynthCheckpoint, EmbeddingStdScalesOnlyTheEmbeddingAndIsValidated) {
  TempDir a, b;
  SynthOptions o = TinyOptions("mixtral", a.path(), 4);
  o.embedding_std = 0.02;
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  o.out_dir = b.path();
  o.embedding_std = 0.5;
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  auto ca = Checkpoint::Open(a.path());
  auto cb = Checkpoint::Open(b.path());
  ASSERT_TRUE(ca.ok() && cb.ok());
  for (const std::string& name : (*ca)->names()) {
    const std::vector<float> va = ToFloats(*(*ca)->Find(name));
    const std::vector<float> vb = ToFloats(*(*cb)->Find(name));
    if (name.find("embed_tokens") == std::string::npos) {
      EXPECT_EQ(va, vb) << name;  // every other tensor is unchanged
      continue;
    }
    double mean, sa, sb;
    MeanStd(va, &mean, &sa);
    MeanStd(vb, &mean, &sb);
    EXPECT_NEAR(sa, 0.02, 0.002);
    EXPECT_NEAR(sb, 0.5, 0.05);
  }
  o.embedding_std = 0.0;
  const Status bad = SynthesizeCheckpoint(o).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("--embedding-std"), std::string::npos) << bad.ToString();
}

TEST(SynthCheckpoint, RouterSkewKeepsExpertWeightsGaussian) {
  TempDir tmp;
  SynthOptions o = TinyOptions("olmoe", tmp.path(), 5);
  o.router_skew = 4.0;
  ASSERT_TRUE(SynthesizeCheckpoint(o).ok());
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  std::vector<float> experts, routers;
  for (const std::string& name : (*ckpt)->names()) {
    std::vector<float>* bucket = name.find(".experts.") != std::string::npos ? &experts
                                 : name.find("mlp.gate.") != std::string::npos ? &routers
                                                                               : nullptr;
    if (bucket == nullptr) continue;
    const std::vector<float> v = ToFloats(*(*ckpt)->Find(name));
    bucket->insert(bucket->end(), v.begin(), v.end());
  }
  double mean, std;
  MeanStd(experts, &mean, &std);
  EXPECT_NEAR(std, 0.02, 0.002);
  MeanStd(routers, &mean, &std);
  EXPECT_NEAR(std, 0.02, 0.004);  // the rank-1 skew term is small next to the row noise
}

TEST(SynthCheckpoint, RejectsBadOptions) {
  TempDir tmp;
  SynthOptions o = TinyOptions("gpt2", tmp.path());
  EXPECT_EQ(SynthesizeCheckpoint(o).status().code(), StatusCode::kInvalidArgument);
  o = TinyOptions("mixtral", tmp.path());
  o.preset = "huge";
  EXPECT_EQ(SynthesizeCheckpoint(o).status().code(), StatusCode::kInvalidArgument);
  o.preset = "tiny";
  o.q_lora_rank = 16;
  Status s = SynthesizeCheckpoint(o).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("deepseek_v2"), std::string::npos) << s.ToString();
  o.q_lora_rank = 0;
  o.router_skew = -1.0;
  EXPECT_EQ(SynthesizeCheckpoint(o).status().code(), StatusCode::kInvalidArgument);
  o.router_skew = 0.0;
  o.shard_size_bytes = 0;
  EXPECT_EQ(SynthesizeCheckpoint(o).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(tmp.Sub("config.json")));
}

TEST(SynthPresets, MiniPresetsAreHalfWidthAndAtMostAboutEightGigabytes) {
  for (const char* arch : {"qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2"}) {
    Result<json> config = PresetConfig(arch, "mini");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    const int64_t h = (*config)["hidden_size"];
    EXPECT_EQ(h, std::string(arch) == "mixtral" ? 2048 : 1024) << arch;
    uint64_t bytes = 0;
    for (const auto& [name, shape] : ExpectedTensors(*config)) {
      uint64_t n = 2;
      for (int64_t d : shape) n *= static_cast<uint64_t>(d);
      bytes += n;
    }
    EXPECT_GT(bytes, 3ull << 30) << arch;
    EXPECT_LT(bytes, 8700ull << 20) << arch;
  }
  Result<json> qwen = PresetConfig("qwen2_moe", "mini");
  EXPECT_EQ((*qwen)["num_experts"], 60);
  EXPECT_EQ((*qwen)["num_hidden_layers"], 24);
  EXPECT_EQ((*qwen)["moe_intermediate_size"], 704);
  EXPECT_EQ((*qwen)["shared_expert_intermediate_size"], 2816);
  EXPECT_EQ((*qwen)["vocab_size"], 151936);
  EXPECT_EQ((*qwen)["eos_token_id"], 151936 - 3);
}

TEST(SynthParseByteSize, AcceptsSuffixesAndRejectsGarbage) {
  EXPECT_EQ(*ParseByteSize("2147483648"), 2147483648ull);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("2G"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("2g"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("2GiB"), 2ull << 30);
  EXPECT_EQ(*ParseByteSize("64KB"), 64ull << 10);
  EXPECT_EQ(*ParseByteSize("1.5K"), 1536ull);
  EXPECT_EQ(*ParseByteSize("100B"), 100ull);
  for (const char* bad : {"", "G", "abc", "1.2.3", "12X", "0.3", "5 G", "-1"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SynthCli, WritesCheckpointAndReportsErrors) {
  TempDir tmp;
  const std::string out = tmp.Sub("olmoe");
  testing::CommandResult r =
      testing::RunCli("synth --arch olmoe --preset tiny --out " + out + " --threads 2 --shard-size 1M");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("model.safetensors.index.json"), std::string::npos) << r.output;
  EXPECT_TRUE(Checkpoint::Open(out).ok());

  r = testing::RunCli("synth --arch mixtral --preset tiny --out " + tmp.Sub("m") + " --q-lora-rank 8");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: InvalidArgument"), std::string::npos) << r.output;

  r = testing::RunCli("synth --arch mixtral --preset tiny --out " + tmp.Sub("m") + " --shard-size lots");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("error: InvalidArgument"), std::string::npos) << r.output;

  r = testing::RunCli("synth --arch gpt2 --preset tiny --out " + tmp.Sub("g"));
  EXPECT_NE(r.exit_code, 0) << r.output;

  r = testing::RunCli("synth --arch qwen3_moe --preset tiny --measure-only --router-skew 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("top-10% share"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zipmoe::synth
