// Tests for services/synth: tiny checkpoints of every architecture in the exact Hugging Face layout,
// their tokenizer files, the mini presets, byte-size parsing and the `zipmoe synth` command.
// Checkpoint properties (determinism, sharding, weight statistics, options) have a file of their own.
#include "services/synth/synth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/checkpoint/safetensors.h"
#include "tests/services/synth_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::synth {
namespace {

using nlohmann::json;
using Shape = std::vector<int64_t>;
using testing::ReadAll;
using testing::TempDir;
using test::kMaxTinyBytes;
using test::TinyOptions;
using test::ExpectedTensors;
using test::ExpectedConfigKeys;
using test::DirectoryBytes;

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

// --dtype bf16 (switch_transformers only): the same tensors, every one BF16, torch_dtype "bfloat16";
// the values are the F32 checkpoint's rounded to nearest even. Other archs refuse --dtype.
TEST(SynthDtype, SwitchBf16IsTheF32CheckpointRoundedAndOtherArchsRefuseIt) {
  TempDir tmp;
  SynthOptions f32 = TinyOptions("switch_transformers", tmp.Sub("f32"), 3);
  SynthOptions bf16 = TinyOptions("switch_transformers", tmp.Sub("bf16"), 3);
  bf16.dtype = "bf16";
  ASSERT_TRUE(SynthesizeCheckpoint(f32).ok());
  Result<SynthReport> report = SynthesizeCheckpoint(bf16);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto a = Checkpoint::Open(tmp.Sub("f32"));
  auto b = Checkpoint::Open(tmp.Sub("bf16"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*b)->config()["torch_dtype"], "bfloat16");
  EXPECT_EQ((*a)->names(), (*b)->names());
  for (const std::string& name : (*b)->names()) {
    auto va = (*a)->Find(name);
    auto vb = (*b)->Find(name);
    ASSERT_TRUE(va.ok() && vb.ok()) << name;
    ASSERT_EQ(vb->spec.dtype, DType::kBF16) << name;
    ASSERT_EQ(va->spec.shape, vb->spec.shape) << name;
    const int64_t n = std::min<int64_t>(va->spec.numel(), 64);
    for (int64_t i = 0; i < n; ++i) {
      float x;
      uint16_t h;
      std::memcpy(&x, va->data + 4 * i, 4);
      std::memcpy(&h, vb->data + 2 * i, 2);
      EXPECT_EQ(h, FloatToBf16(x)) << name << "[" << i << "]";
    }
  }
  SynthOptions other = TinyOptions("qwen2_moe", tmp.Sub("q"));
  other.dtype = "bf16";
  Result<SynthReport> refused = SynthesizeCheckpoint(other);
  ASSERT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("switch_transformers takes bf16 or f32"), std::string::npos)
      << refused.status().ToString();
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
