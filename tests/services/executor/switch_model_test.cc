// Tests of switch_transformers support: config parsing (common/checkpoint/model_config.h), the relative position
// buckets and the capacity-limited top-1 router (services/executor/switch_model.h), and generation on a
// tiny synthetic Switch checkpoint (services/synth) through the Generator.
#include "services/executor/switch_model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <numeric>

#include "common/checkpoint/model_config.h"
#include "services/executor/generator.h"
#include "services/synth/synth.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using nlohmann::json;

json SwitchPreset() {
  auto c = synth::PresetConfig("switch_transformers", "tiny");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : json::object();
}

TEST(SwitchConfigTest, MapsFieldsAndGlobalLayers) {
  auto c = ParseModelConfig(SwitchPreset(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->arch, ModelArch::kSwitchTransformers);
  EXPECT_TRUE(c->is_encoder_decoder());
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->intermediate_size, 128);
  EXPECT_EQ(c->moe_intermediate_size, 128);
  EXPECT_EQ(c->num_experts_per_tok, 1);
  EXPECT_EQ(c->num_encoder_layers, 2);
  EXPECT_EQ(c->num_decoder_layers, 2);
  EXPECT_EQ(c->num_hidden_layers, 4);
  EXPECT_EQ(c->expert_capacity, 2);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->decoder_start_token_id, 0);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{1});
  // Sparse step 2: block 1 of each stack (global layers 1 and 3).
  EXPECT_FALSE(c->IsMoeLayer(0));
  EXPECT_TRUE(c->IsMoeLayer(1));
  EXPECT_FALSE(c->IsMoeLayer(2));
  EXPECT_TRUE(c->IsMoeLayer(3));
  EXPECT_FALSE(c->IsMoeLayer(4));
}

TEST(SwitchConfigTest, SparseStepRuleAndDefaults) {
  json j = {{"model_type", "switch_transformers"}, {"num_layers", 12}, {"num_decoder_layers", 6},
            {"encoder_sparse_step", 1}, {"num_sparse_decoder_layers", 2}};
  auto c = ParseModelConfig(j, "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->vocab_size, 32128);  // SwitchTransformersConfig defaults
  EXPECT_EQ(c->intermediate_size, 2048);
  EXPECT_EQ(c->expert_capacity, 64);
  EXPECT_EQ(c->num_experts, 8);
  EXPECT_TRUE(c->tie_word_embeddings);  // PretrainedConfig's default
  for (int64_t l = 0; l < 12; ++l) EXPECT_TRUE(c->IsMoeLayer(l)) << l;  // step 1: every block
  // Decoder step = 6 // 2 = 3: blocks i with i % 3 == 1 -> 1 and 4 (global 13 and 16).
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c->IsMoeLayer(12 + i), i == 1 || i == 4) << i;
  j["encoder_sparse_step"] = 0;  // 0: no sparse block
  c = ParseModelConfig(j, "c.json");
  ASSERT_TRUE(c.ok());
  for (int64_t l = 0; l < 12; ++l) EXPECT_FALSE(c->IsMoeLayer(l)) << l;
}

TEST(SwitchConfigTest, RejectsUnsupportedKeys) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, json>>{
           {"dense_act_fn", "gelu_new"}, {"feed_forward_proj", "gated-gelu"}, {"router_dtype", "bfloat16"},
           {"router_bias", true}, {"expert_capacity", -1}}) {
    json j = SwitchPreset();
    j[key] = value;
    auto c = ParseModelConfig(j, "/m/config.json");
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(c.status().message().find(key), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find("/m/config.json"), std::string::npos) << c.status().ToString();
  }
}

// Known answers worked by hand. Encoder (bidirectional, 32 buckets, max distance 128): 16 buckets per
// sign, max_exact 8; large n: 8 + int(ln(n/8) / ln(16) * 8). Decoder (causal): max_exact 16; large n:
// 16 + int(ln(n/16) / ln(8) * 16).
TEST(SwitchBucketTest, KnownAnswers) {
  const auto enc = [](int64_t rel) { return RelativePositionBucket(rel, true, 32, 128); };
  EXPECT_EQ(enc(0), 0);
  EXPECT_EQ(enc(-1), 1);
  EXPECT_EQ(enc(1), 17);     // positive offsets use the upper half
  EXPECT_EQ(enc(-7), 7);
  EXPECT_EQ(enc(-8), 8);     // ln(1) = 0
  EXPECT_EQ(enc(-20), 10);   // ln(2.5)/ln(16)*8 = 2.64
  EXPECT_EQ(enc(20), 26);
  EXPECT_EQ(enc(-128), 15);  // 8 + 8 = 16, clipped to 15
  EXPECT_EQ(enc(1000), 31);
  const auto dec = [](int64_t rel) { return RelativePositionBucket(rel, false, 32, 128); };
  EXPECT_EQ(dec(5), 0);      // future keys: bucket 0 (masked anyway)
  EXPECT_EQ(dec(0), 0);
  EXPECT_EQ(dec(-3), 3);
  EXPECT_EQ(dec(-15), 15);
  EXPECT_EQ(dec(-16), 16);
  EXPECT_EQ(dec(-40), 23);   // ln(2.5)/ln(8)*16 = 7.05
  EXPECT_EQ(dec(-127), 31);  // 15.94 -> 31
  EXPECT_EQ(dec(-100000), 31);
}

// Two sequences, 3 experts, capacity 2: each sequence's cumsum is its own; the third token of a
// sequence sent to expert 0 is dropped (-1), with its max probability kept.
TEST(SwitchRouterTest, CapacityDropKnownAnswer) {
  const std::vector<float> probs = {
      0.7f, 0.2f, 0.1f,  // seq 0: e0
      0.6f, 0.3f, 0.1f,  //        e0
      0.1f, 0.8f, 0.1f,  //        e1
      0.5f, 0.4f, 0.1f,  //        e0 -> dropped (3rd)
      0.4f, 0.4f, 0.2f,  // seq 1: tie -> e0 (first maximum)
      0.9f, 0.05f, 0.05f,  //      e0
      0.1f, 0.1f, 0.8f,  //        e2
  };
  const SwitchRoute r = RouteTop1WithCapacity(probs.data(), 3, {0, 4}, {4, 3}, 2);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{0, 0, 1, -1, 0, 0, 2}));
  EXPECT_EQ(r.prob, (std::vector<float>{0.7f, 0.6f, 0.8f, 0.5f, 0.4f, 0.9f, 0.8f}));
  const SwitchRoute none = RouteTop1WithCapacity(probs.data(), 3, {0, 4}, {4, 3}, 0);
  EXPECT_EQ(none.expert, std::vector<int32_t>(7, -1));
}

class SwitchModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new zipmoe::testing::TempDir();
    synth::SynthOptions o;
    o.arch = "switch_transformers";
    o.preset = "tiny";
    o.seed = 3;
    o.out_dir = dir_->Sub("hf");
    o.n_threads = 2;
    auto r = synth::SynthesizeCheckpoint(o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  // Generator::Create's error for a copy of the tiny model whose config.json `edit` changed.
  static Status CreateWithConfig(const std::function<void(json&)>& edit) {
    zipmoe::testing::TempDir tmp;
    std::filesystem::copy(dir_->Sub("hf"), tmp.Sub("m"), std::filesystem::copy_options::recursive);
    EXPECT_FALSE(std::filesystem::exists(tmp.Sub("m") + "/model.safetensors.index.json"));  // tiny: one file
    json config = json::parse(zipmoe::testing::ReadAll(tmp.Sub("m") + "/config.json"));
    edit(config);
    zipmoe::testing::WriteAll(tmp.Sub("m") + "/config.json", config.dump(2));
    GeneratorOptions o;
    o.model_dir = tmp.Sub("m");
    auto g = Generator::Create(o);
    return g.ok() ? Status::Ok() : g.status();
  }
  static std::unique_ptr<Generator> Make(const std::string& dir, std::vector<LayerRouting>* log = nullptr) {
    GeneratorOptions o;
    o.model_dir = dir;
    o.n_threads = 2;
    if (log != nullptr) o.on_routing = [log](const LayerRouting& r) { log->push_back(r); };
    auto g = Generator::Create(o);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? std::move(*g) : nullptr;
  }
  static zipmoe::testing::TempDir* dir_;
};
zipmoe::testing::TempDir* SwitchModelTest::dir_ = nullptr;

// A 12-token encoder input over 8 experts with capacity 2 must drop tokens in the encoder's sparse
// layer (global layer 1); the decoder's sparse layer (global layer 3) sees one token per step.
TEST_F(SwitchModelTest, GenerateDropsOverCapacityAndIsDeterministic) {
  std::vector<LayerRouting> log;
  auto g = Make(dir_->Sub("hf"), &log);
  ASSERT_TRUE(g);
  const std::vector<int32_t> prompt = {5, 9, 9, 9, 9, 9, 9, 9, 9, 9, 40, 1};
  GenerationParams p;
  p.max_new_tokens = 6;
  p.stop_on_eos = false;
  p.record_logits = true;
  auto r = g->Generate({prompt}, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->front().generated_ids.size(), 6u);
  EXPECT_EQ(r->front().logits_rows, 1 + 5);  // start token + 5 fed-back tokens
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.front().layer_id, 1);
  const int32_t kept = std::accumulate(log.front().tokens_per_expert.begin(), log.front().tokens_per_expert.end(), 0);
  EXPECT_LT(kept, 12);  // token 9 repeated 9 times: at most 2 kept per expert
  for (int32_t n : log.front().tokens_per_expert) EXPECT_LE(n, 2);
  for (size_t i = 1; i < log.size(); ++i) {
    EXPECT_EQ(log[i].layer_id, 3);
    EXPECT_EQ(log[i].expert_ids.size(), 1u);
  }
  auto again = g->Generate({prompt}, p);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->front().generated_ids, r->front().generated_ids);
  EXPECT_EQ(again->front().logits, r->front().logits);
  // A ragged batch gives each sequence the logits of its lone run.
  const std::vector<int32_t> other = {7, 8, 1};
  auto batch = g->Generate({other, prompt}, p);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->at(1).generated_ids, r->front().generated_ids);
}

TEST_F(SwitchModelTest, MissingTensorIsNamed) {
  // Untied: lm_head.weight is then required, and the tiny model's one file lacks it.
  const Status st = CreateWithConfig([](json& config) { config["tie_word_embeddings"] = false; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("lm_head.weight"), std::string::npos) << st.ToString();
}

TEST_F(SwitchModelTest, UnsupportedActivationIsRejectedAtLoad) {
  const Status st = CreateWithConfig([](json& config) { config["dense_act_fn"] = "gelu"; });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("dense_act_fn"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace zipmoe::executor
