// Tests for services/synth's checkpoints: DeepSeek's q_lora_rank, the same bytes for a seed at any
// thread count, indexed shards, realistic weight statistics, the embedding std, router skew and bad
// options.
#include "services/synth/synth.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
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
using test::TinyOptions;
using test::ExpectedTensors;
using test::ToFloats;
using test::MeanStd;

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

}  // namespace
}  // namespace zipmoe::synth
