// End-to-end tests of the executor (services/executor/generator.h) on tiny synthetic models of
// every architecture: prefill vs decode consistency, determinism, HF vs compressed directories,
// provider arrival order, ragged batches, sampling, and the error paths.
#include "services/executor/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "common/resident_expert_provider.h"
#include "common/safetensors.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using testing::TinyCompressedDir;
using testing::TinyModelDir;

constexpr int kThreads = 2;

std::unique_ptr<Generator> MakeGenerator(const std::string& dir, ExpertProvider* provider = nullptr) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  options.expert_provider = provider;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

Status CreateError(const std::string& dir) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  auto g = Generator::Create(options);
  return g.ok() ? Status::Ok() : g.status();
}

const std::vector<int32_t> kPrompt = {5, 17, 300, 1000, 42, 7, 1999, 256, 64, 128, 3, 900};

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Delivers each layer's experts in descending id order (the resident provider delivers ascending).
class ReversingProvider : public ExpertProvider {
 public:
  explicit ReversingProvider(ExpertProvider* inner) : inner_(inner) {}
  Status BeginLayer(const LayerRouting& routing) override {
    ZM_RETURN_IF_ERROR(inner_->BeginLayer(routing));
    pending_.clear();
    for (size_t i = 0; i < routing.expert_ids.size(); ++i) {
      ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, inner_->NextReady());
      pending_.push_back(std::move(lease));
    }
    ++layers_begun;
    return Status::Ok();
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    if (pending_.empty()) return Status::InvalidArgument("ReversingProvider: nothing pending");
    std::unique_ptr<ExpertLease> lease = std::move(pending_.back());
    pending_.pop_back();
    return lease;
  }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  int layers_begun = 0;

 private:
  ExpertProvider* inner_;
  std::vector<std::unique_ptr<ExpertLease>> pending_;
};

class ExecutorArchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExecutorArchTest, PrefillMatchesTokenByTokenDecode) {
  auto g = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g);
  auto prefill = g->ForwardChunks({kPrompt});
  ASSERT_TRUE(prefill.ok()) << prefill.status().ToString();
  std::vector<std::vector<int32_t>> steps;
  for (int32_t id : kPrompt) steps.push_back({id});
  auto decode = g->ForwardChunks(steps);
  ASSERT_TRUE(decode.ok()) << decode.status().ToString();
  const int64_t vocab = g->config().vocab_size;
  ASSERT_EQ(prefill->size(), kPrompt.size() * static_cast<size_t>(vocab));
  ASSERT_EQ(decode->size(), prefill->size());
  float max_abs = 0.0f, max_diff = 0.0f;
  for (size_t i = 0; i < prefill->size(); ++i) {
    ASSERT_TRUE(std::isfinite((*prefill)[i])) << i;
    max_abs = std::max(max_abs, std::fabs((*prefill)[i]));
    max_diff = std::max(max_diff, std::fabs((*prefill)[i] - (*decode)[i]));
  }
  EXPECT_GT(max_abs, 0.0f);
  EXPECT_LE(max_diff, 1e-5f * max_abs) << "max |prefill - decode| " << max_diff << ", max |logit| " << max_abs;
}

TEST_P(ExecutorArchTest, LogitsAreBitIdenticalRunToRun) {
  auto g1 = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g1);
  auto a = g1->ForwardChunks({kPrompt});
  auto b = g1->ForwardChunks({kPrompt});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(BitEqual(*a, *b));
  auto g2 = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g2);
  auto c = g2->ForwardChunks({kPrompt});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(BitEqual(*a, *c));
}

TEST_P(ExecutorArchTest, CompressedDirGivesBitIdenticalLogits) {
  auto hf = MakeGenerator(TinyModelDir(GetParam()));
  auto compressed = MakeGenerator(TinyCompressedDir(GetParam()));
  ASSERT_TRUE(hf && compressed);
  const std::vector<std::vector<int32_t>> chunks = {kPrompt, {11}, {12}};
  auto a = hf->ForwardChunks(chunks);
  auto b = compressed->ForwardChunks(chunks);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(BitEqual(*a, *b));
}

TEST_P(ExecutorArchTest, ExpertArrivalOrderDoesNotChangeLogits) {
  auto ckpt = Checkpoint::Open(TinyModelDir(GetParam()));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto resident = ResidentExpertProvider::FromCheckpoint(**ckpt);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  ReversingProvider reversing(resident->get());
  auto reversed = MakeGenerator(TinyModelDir(GetParam()), &reversing);
  auto normal = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(reversed && normal);
  auto a = normal->ForwardChunks({kPrompt, {9}});
  auto b = reversed->ForwardChunks({kPrompt, {9}});
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_TRUE(BitEqual(*a, *b));
  EXPECT_GT(reversing.layers_begun, 0);
}

TEST_P(ExecutorArchTest, RaggedBatchGivesTheSameGreedyTokensAsEachAlone) {
  auto g = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g);
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 300, 1000, 42, 7, 1999},
                                                     {64, 128},
                                                     {3, 900, 1500, 77, 8}};
  GenerationParams params;
  params.max_new_tokens = 6;
  params.stop_on_eos = false;
  auto batch = g->Generate(prompts, params);
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  ASSERT_EQ(batch->size(), 3u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = g->Generate({prompts[i]}, params);
    ASSERT_TRUE(alone.ok()) << alone.status().ToString();
    EXPECT_EQ((*batch)[i].prompt_ids, prompts[i]);
    EXPECT_EQ((*batch)[i].generated_ids.size(), 6u);
    EXPECT_EQ((*batch)[i].generated_ids, alone->front().generated_ids) << "prompt " << i;
  }
}

// CoServe's dependency estimate (request grouping): per MoE layer the union over the prompt's
// distinct tokens of that layer's router top-k on the token's embedding; dense layers predict nothing.
TEST_P(ExecutorArchTest, PredictedExpertsAreTheUnionOfEachTokensTopK) {
  auto g = MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g);
  const ModelConfig& c = g->config();
  auto all = g->PredictExperts(kPrompt);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->size(), static_cast<size_t>(c.num_hidden_layers));
  std::vector<std::set<int32_t>> unions(all->size());
  for (int32_t token : kPrompt) {
    auto one = g->PredictExperts({token, token});  // a repeated token counts once
    ASSERT_TRUE(one.ok()) << one.status().ToString();
    for (size_t l = 0; l < one->size(); ++l) {
      const std::vector<int32_t>& experts = (*one)[l];
      if (c.IsMoeLayer(static_cast<int64_t>(l))) {
        EXPECT_EQ(experts.size(), static_cast<size_t>(c.num_experts_per_tok)) << "layer " << l << " token " << token;
      }
      unions[l].insert(experts.begin(), experts.end());
    }
  }
  int moe_layers = 0;
  for (size_t l = 0; l < all->size(); ++l) {
    const std::vector<int32_t>& experts = (*all)[l];
    EXPECT_EQ(experts, std::vector<int32_t>(unions[l].begin(), unions[l].end())) << "layer " << l;
    if (!c.IsMoeLayer(static_cast<int64_t>(l))) {
      EXPECT_TRUE(experts.empty()) << "dense layer " << l;
      continue;
    }
    ++moe_layers;
    for (int32_t e : experts) EXPECT_TRUE(e >= 0 && e < c.num_experts) << e;
  }
  EXPECT_GT(moe_layers, 0);
  auto again = g->PredictExperts(kPrompt);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *all);
  const Status bad = g->PredictExperts({5, static_cast<int32_t>(c.vocab_size)}).status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
}

INSTANTIATE_TEST_SUITE_P(AllArchs, ExecutorArchTest, ::testing::ValuesIn(testing::ExecutorVariants()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(ExecutorTest, RecordedLogitsCoverEveryFedPosition) {
  auto g = MakeGenerator(TinyModelDir("qwen3_moe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 4;
  params.stop_on_eos = false;
  params.record_logits = true;
  auto r = g->Generate({kPrompt}, params);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const GenerationResult& res = r->front();
  ASSERT_EQ(res.generated_ids.size(), 4u);
  EXPECT_EQ(res.logits_rows, static_cast<int64_t>(kPrompt.size()) + 3);
  const int64_t vocab = g->config().vocab_size;
  ASSERT_EQ(res.logits.size(), static_cast<size_t>(res.logits_rows * vocab));
  // Rows equal feeding prompt + the first three generated tokens; greedy picks each row's argmax.
  std::vector<std::vector<int32_t>> chunks = {kPrompt};
  for (int i = 0; i < 3; ++i) chunks.push_back({res.generated_ids[static_cast<size_t>(i)]});
  auto fed = g->ForwardChunks(chunks);
  ASSERT_TRUE(fed.ok());
  EXPECT_TRUE(BitEqual(res.logits, *fed));
  for (int i = 0; i < 4; ++i) {
    const int64_t row = static_cast<int64_t>(kPrompt.size()) - 1 + i;
    EXPECT_EQ(res.generated_ids[static_cast<size_t>(i)], Argmax(res.logits.data() + row * vocab, vocab));
  }
  // max_new_tokens 0: exactly the prompt's logits.
  params.max_new_tokens = 0;
  auto prompt_only = g->Generate({kPrompt}, params);
  ASSERT_TRUE(prompt_only.ok());
  EXPECT_TRUE(prompt_only->front().generated_ids.empty());
  EXPECT_EQ(prompt_only->front().logits_rows, static_cast<int64_t>(kPrompt.size()));
}

// A provider that holds nothing (every expert costs I/O): what is at hand is what the latest step used.
class NothingCachedProvider : public ExpertProvider {
 public:
  explicit NothingCachedProvider(ExpertProvider* inner) : inner_(inner) {}
  Status BeginLayer(const LayerRouting& routing) override { return inner_->BeginLayer(routing); }
  Result<std::unique_ptr<ExpertLease>> NextReady() override { return inner_->NextReady(); }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  void CachedExperts(int32_t, int32_t n_experts, std::vector<uint8_t>* cached) const override {
    cached->assign(static_cast<size_t>(n_experts), 0);
  }

 private:
  ExpertProvider* inner_;
};

TEST(ExecutorTest, ExpertsAtHandAreTheCachedOnesAndTheLatestStepsChoice) {
  const std::string dir = TinyModelDir("qwen2_moe");
  auto resident = MakeGenerator(dir);
  ASSERT_TRUE(resident);
  const ModelConfig& c = resident->config();
  const std::vector<std::vector<int32_t>> everything = resident->ExpertsAtHand();
  ASSERT_EQ(everything.size(), static_cast<size_t>(c.num_hidden_layers));
  for (size_t l = 0; l < everything.size(); ++l) {
    EXPECT_EQ(everything[l].size(), c.IsMoeLayer(static_cast<int64_t>(l)) ? static_cast<size_t>(c.num_experts) : 0u);
  }

  auto checkpoint = Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
  auto experts = ResidentExpertProvider::FromCheckpoint(**checkpoint);
  ASSERT_TRUE(experts.ok()) << experts.status().ToString();
  NothingCachedProvider nothing((*experts).get());
  std::map<int32_t, std::vector<int32_t>> latest;
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  options.expert_provider = &nothing;
  options.on_routing = [&latest](const LayerRouting& r) { latest[r.layer_id] = r.expert_ids; };
  auto g = Generator::Create(options);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const std::vector<int32_t>& layer : (*g)->ExpertsAtHand()) EXPECT_TRUE(layer.empty()) << "nothing ran yet";
  GenerationParams params;
  params.max_new_tokens = 3;
  params.stop_on_eos = false;
  ASSERT_TRUE((*g)->Generate({kPrompt}, params).ok());
  const std::vector<std::vector<int32_t>> at_hand = (*g)->ExpertsAtHand();
  ASSERT_FALSE(latest.empty());
  for (size_t l = 0; l < at_hand.size(); ++l) {
    const auto it = latest.find(static_cast<int32_t>(l));
    EXPECT_EQ(at_hand[l], it == latest.end() ? std::vector<int32_t>{} : it->second) << "layer " << l;
  }
}

TEST(ExecutorTest, StopsOnEos) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 3;
  params.stop_on_eos = false;
  auto r = g->Generate({kPrompt}, params);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->front().stopped_on_eos);
  // Declare the first greedy token an EOS id: generation must stop right after it.
  const int32_t first = r->front().generated_ids[0];
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("olmoe"), tmp.Sub("m"), [&](nlohmann::json& c) { c["eos_token_id"] = first; });
  std::filesystem::remove(tmp.Sub("m") + "/generation_config.json");
  auto g2 = MakeGenerator(tmp.Sub("m"));
  ASSERT_TRUE(g2);
  params.stop_on_eos = true;
  auto r2 = g2->Generate({kPrompt}, params);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->front().generated_ids, std::vector<int32_t>{first});
  EXPECT_TRUE(r2->front().stopped_on_eos);
}

TEST(ExecutorTest, SamplingIsReproducibleAndSeedDependent) {
  auto g = MakeGenerator(TinyModelDir("mixtral"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 16;
  params.stop_on_eos = false;
  params.sampling.temperature = 1.5f;
  params.sampling.top_p = 0.95f;
  params.sampling.seed = 1234;
  auto a = g->Generate({kPrompt}, params);
  auto b = g->Generate({kPrompt}, params);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->front().generated_ids, b->front().generated_ids);
  params.sampling.seed = 99;
  auto c = g->Generate({kPrompt}, params);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->front().generated_ids, c->front().generated_ids);
}

// Rewrites the weights of model copy `dir` (from `src`): lm_head.weight := embed_tokens bytes, or
// dropped when `drop_lm_head`.
void RewriteLmHead(const std::string& src, const std::string& dir, bool drop_lm_head) {
  auto ckpt = Checkpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<TensorSpec> specs;
  for (const std::string& name : (*ckpt)->names()) {
    if (drop_lm_head && name == "lm_head.weight") continue;
    specs.push_back((*ckpt)->Find(name)->spec);
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors" || entry.path().filename() == "model.safetensors.index.json")
      std::filesystem::remove(entry.path());
  const Status st = WriteCheckpointWeights(dir, specs, 1ull << 40, [&](const TensorSpec& spec, uint8_t* out) {
    const std::string from = spec.name == "lm_head.weight" ? "model.embed_tokens.weight" : spec.name;
    ZM_ASSIGN_OR_RETURN(TensorView v, (*ckpt)->Find(from));
    std::memcpy(out, v.data, spec.size_bytes());
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

TEST(ExecutorTest, TiedWordEmbeddingsUseTheEmbeddingAsLmHead) {
  testing::TempDir tmp;
  const std::string src = TinyModelDir("qwen2_moe");
  // Untied, but lm_head.weight holds the embedding's bytes.
  testing::CopyModelWithConfig(src, tmp.Sub("copy"), [](nlohmann::json&) {});
  RewriteLmHead(src, tmp.Sub("copy"), /*drop_lm_head=*/false);
  // Tied, without an lm_head.weight tensor at all.
  testing::CopyModelWithConfig(src, tmp.Sub("tied"), [](nlohmann::json& c) { c["tie_word_embeddings"] = true; });
  RewriteLmHead(src, tmp.Sub("tied"), /*drop_lm_head=*/true);
  auto untied = MakeGenerator(tmp.Sub("copy"));
  auto tied = MakeGenerator(tmp.Sub("tied"));
  auto original = MakeGenerator(src);
  ASSERT_TRUE(untied && tied && original);
  auto a = untied->ForwardChunks({kPrompt});
  auto b = tied->ForwardChunks({kPrompt});
  auto c = original->ForwardChunks({kPrompt});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << b.status().ToString();
  EXPECT_TRUE(BitEqual(*a, *b));
  EXPECT_FALSE(BitEqual(*a, *c));  // the original lm_head differs from the embedding
}

TEST(ExecutorErrorTest, UnsupportedModelTypeNamesIt) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("mixtral"), tmp.Sub("m"), [](nlohmann::json& c) { c["model_type"] = "gpt_oss"; });
  const Status st = CreateError(tmp.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gpt_oss"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2"), std::string::npos);
}

TEST(ExecutorErrorTest, MissingTensorNamesTensorAndDirectory) {
  for (const std::string& src : {TinyModelDir("qwen2_moe"), TinyCompressedDir("qwen2_moe")}) {
    testing::TempDir tmp;
    // One layer more than the weights hold: layer 4's tensors are missing.
    testing::CopyModelWithConfig(src, tmp.Sub("m"), [](nlohmann::json& c) { c["num_hidden_layers"] = 5; });
    const Status st = CreateError(tmp.Sub("m"));
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find("model.layers.4."), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(tmp.Sub("m")), std::string::npos) << st.message();
  }
}

TEST(ExecutorErrorTest, ShapeMismatchNamesTensorAndShapes) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("deepseek_v2"), tmp.Sub("m"), [](nlohmann::json& c) { c["vocab_size"] = 2047; });
  Status st = CreateError(tmp.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("model.embed_tokens.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2048, 128]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2047, 128]"), std::string::npos) << st.message();

  // An expert whose width differs from moe_intermediate_size (compressed dir: from the manifest).
  testing::TempDir tmp2;
  testing::CopyModelWithConfig(TinyCompressedDir("qwen3_moe"), tmp2.Sub("m"),
                               [](nlohmann::json& c) { c["moe_intermediate_size"] = 32; });
  st = CreateError(tmp2.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("mlp.experts.0.gate_proj.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[64, 128]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[32, 128]"), std::string::npos) << st.message();
}

TEST(ExecutorErrorTest, PromptLongerThanMaxPositionsNamesBothLengths) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("qwen2_moe"), tmp.Sub("m"),
                               [](nlohmann::json& c) { c["max_position_embeddings"] = 8; });
  auto g = MakeGenerator(tmp.Sub("m"));
  ASSERT_TRUE(g);
  auto r = g->Generate({kPrompt}, GenerationParams{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("12 tokens"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("max_position_embeddings 8"), std::string::npos) << r.status().message();
  // A prompt that fits generates until the positions run out.
  GenerationParams params;
  params.max_new_tokens = 10;
  params.stop_on_eos = false;
  auto ok = g->Generate({{1, 2, 3, 4, 5, 6}}, params);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->front().generated_ids.size(), 3u);  // fed positions 6 and 7, then full
}

TEST(ExecutorErrorTest, TokenOutsideVocabularyAndEmptyPrompt) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  auto r = g->Generate({{1, 2, 5000}}, GenerationParams{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("5000"), std::string::npos);
  auto e = g->Generate({{}}, GenerationParams{});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  // The generator stays usable after an error.
  EXPECT_TRUE(g->ForwardChunks({{1, 2}}).ok());
}

TEST(ExecutorErrorTest, NotAModelDirectory) {
  testing::TempDir tmp;
  const Status st = CreateError(tmp.path());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find(tmp.path()), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::executor

namespace zipmoe::executor {
namespace {

// Every BF16 tensor of `src` widened exactly to F32 (as OLMoE's release stores its weights).
void WriteF32Copy(const std::string& src, const std::string& dst) {
  auto ckpt = Checkpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<TensorSpec> specs;
  for (const auto& name : (*ckpt)->names()) {
    TensorSpec spec = (*ckpt)->Find(name)->spec;
    spec.dtype = DType::kF32;
    specs.push_back(spec);
  }
  ASSERT_TRUE(WriteCheckpointWeights(dst, specs, uint64_t{1} << 40, [&](const TensorSpec& spec, uint8_t* out) {
                auto v = (*ckpt)->Find(spec.name);
                for (int64_t i = 0; i < spec.numel(); ++i) {
                  uint16_t b;
                  std::memcpy(&b, v->data + 2 * i, 2);
                  const float f = Bf16ToFloat(b);
                  std::memcpy(out + 4 * i, &f, 4);
                }
                return Status::Ok();
              }).ok());
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(src + "/" + f, dst + "/" + f);
}

TEST(ExecutorTest, F32CheckpointGivesTheSameLogitsAsItsBf16Original) {
  testing::TempDir tmp;
  const std::string src = testing::TinyModelDir("olmoe");
  WriteF32Copy(src, tmp.Sub("f32"));
  auto bf16 = MakeGenerator(src);
  auto f32 = MakeGenerator(tmp.Sub("f32"));
  ASSERT_TRUE(bf16 && f32);
  auto a = bf16->ForwardChunks({kPrompt});
  auto b = f32->ForwardChunks({kPrompt});
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_TRUE(BitEqual(*a, *b)) << "fp32 math on exactly widened weights must not change a bit";
}

// ---------------------------------------------------------------------------------------------
// BatchSession (continuous batching)

namespace {

// Fails BeginLayer while `fail` is set; otherwise forwards to the inner provider.
class SwitchableFailingProvider : public ExpertProvider {
 public:
  explicit SwitchableFailingProvider(ExpertProvider* inner) : inner_(inner) {}
  Status BeginLayer(const LayerRouting& routing) override {
    if (fail) return Status::IoError("injected provider failure");
    return inner_->BeginLayer(routing);
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override { return inner_->NextReady(); }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  bool fail = false;

 private:
  ExpertProvider* inner_;
};

std::vector<int32_t> AloneGreedy(Generator& g, const std::vector<int32_t>& prompt, int64_t n) {
  GenerationParams params;
  params.max_new_tokens = n;
  params.stop_on_eos = false;
  auto r = g.Generate({prompt}, params);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->front().generated_ids : std::vector<int32_t>{};
}

}  // namespace

TEST(BatchSessionTest, SequencesJoiningMidGenerationGetTheirAloneTokens) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  const std::vector<int32_t> a = {5, 17, 300, 1000, 42, 7, 1999};
  const std::vector<int32_t> b = {64, 128};
  const std::vector<int32_t> c = {3, 900, 1500, 77, 8};
  GenerationParams params;
  params.stop_on_eos = false;
  auto session = g->NewSession();
  std::map<BatchSession::SequenceId, std::vector<int32_t>> streamed;
  auto add = [&](const std::vector<int32_t>& prompt, int64_t n) {
    params.max_new_tokens = n;
    auto holder = std::make_shared<BatchSession::SequenceId>(0);
    auto id = session->AddSequence(prompt, params, 0, [&streamed, holder](const SampledToken& t) {
      streamed[*holder].push_back(t.id);
      return true;
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    *holder = *id;
    return *id;
  };
  std::map<BatchSession::SequenceId, GenerationResult> done;
  auto step = [&] {
    for (auto& f : session->Step()) {
      EXPECT_TRUE(f.status.ok()) << f.status.ToString();
      EXPECT_FALSE(f.cancelled);
      done[f.id] = std::move(f.result);
    }
  };
  const auto id_a = add(a, 8);
  EXPECT_EQ(session->queued(), 1u);
  step();  // prefill a
  step();  // decode a
  EXPECT_EQ(session->running(), 1u);
  const auto id_b = add(b, 3);  // b's prefill joins a's third step
  EXPECT_EQ(session->queued(), 1u);
  step();
  const auto id_c = add(c, 5);
  while (!session->empty()) step();
  ASSERT_EQ(done.size(), 3u);
  EXPECT_EQ(done[id_a].generated_ids, AloneGreedy(*g, a, 8));
  EXPECT_EQ(done[id_b].generated_ids, AloneGreedy(*g, b, 3));
  EXPECT_EQ(done[id_c].generated_ids, AloneGreedy(*g, c, 5));
  EXPECT_EQ(done[id_a].prompt_ids, a);
  for (auto id : {id_a, id_b, id_c}) EXPECT_EQ(streamed[id], done[id].generated_ids);
  // a ran 8 steps alone or with others; b and c joined without extra steps: 8 steps in all.
  EXPECT_EQ(session->steps(), 8);
}

TEST(BatchSessionTest, CallbackFalseEndsOnlyThatSequence) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 6;
  params.stop_on_eos = false;
  auto session = g->NewSession();
  int seen = 0;
  auto stopper = session->AddSequence(kPrompt, params, 0, [&seen](const SampledToken&) { return ++seen < 2; });
  auto other = session->AddSequence({64, 128}, params);
  ASSERT_TRUE(stopper.ok() && other.ok());
  std::map<BatchSession::SequenceId, BatchSession::Finished> done;
  while (!session->empty()) {
    for (auto& f : session->Step()) done[f.id] = std::move(f);
  }
  EXPECT_TRUE(done[*stopper].cancelled);
  EXPECT_EQ(done[*stopper].result.generated_ids.size(), 2u);
  EXPECT_FALSE(done[*other].cancelled);
  EXPECT_EQ(done[*other].result.generated_ids, AloneGreedy(*g, {64, 128}, 6));
}

TEST(BatchSessionTest, ZeroNewTokensEndsAfterPrefillWithLogits) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 0;
  params.record_logits = true;
  auto session = g->NewSession();
  ASSERT_TRUE(session->AddSequence(kPrompt, params).ok());
  auto finished = session->Step();
  ASSERT_EQ(finished.size(), 1u);
  EXPECT_TRUE(finished[0].result.generated_ids.empty());
  EXPECT_EQ(finished[0].result.logits_rows, static_cast<int64_t>(kPrompt.size()));
  auto whole = g->ForwardChunks({kPrompt});
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(BitEqual(finished[0].result.logits, *whole));
  EXPECT_TRUE(session->empty());
}

TEST(BatchSessionTest, BadSequencesAreRefusedWithoutQueueing) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  auto session = g->NewSession();
  GenerationParams params;
  auto bad_id = session->AddSequence({1, 2, 5000}, params);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_id.status().message().find("5000"), std::string::npos);
  EXPECT_EQ(session->AddSequence({}, params).status().code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> huge(static_cast<size_t>(g->config().max_position_embeddings) + 1, 1);
  EXPECT_EQ(session->AddSequence(huge, params).status().code(), StatusCode::kInvalidArgument);
  params.max_new_tokens = -1;
  EXPECT_EQ(session->AddSequence({1, 2}, params).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(session->empty());
  EXPECT_TRUE(session->Step().empty());
  EXPECT_EQ(session->steps(), 0);
}

TEST(BatchSessionTest, ForwardFailureEndsEverySequenceOfTheStepAndTheSessionGoesOn) {
  const std::string dir = TinyModelDir("olmoe");
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto resident = ResidentExpertProvider::FromCheckpoint(**ckpt);
  ASSERT_TRUE(resident.ok()) << resident.status().ToString();
  SwitchableFailingProvider failing(resident->get());
  auto g = MakeGenerator(dir, &failing);
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 4;
  params.stop_on_eos = false;
  auto session = g->NewSession();
  ASSERT_TRUE(session->AddSequence(kPrompt, params).ok());
  ASSERT_TRUE(session->AddSequence({64, 128}, params).ok());
  EXPECT_TRUE(session->Step().empty());  // both prefilled, both running
  failing.fail = true;
  auto failed = session->Step();
  ASSERT_EQ(failed.size(), 2u);
  for (const auto& f : failed) {
    EXPECT_EQ(f.status.code(), StatusCode::kIoError);
    EXPECT_NE(f.status.message().find("injected"), std::string::npos);
    EXPECT_EQ(f.result.generated_ids.size(), 1u);  // the prefill's token stays
  }
  EXPECT_TRUE(session->empty());
  failing.fail = false;
  auto again = session->AddSequence({64, 128}, params);
  ASSERT_TRUE(again.ok());
  std::vector<BatchSession::Finished> done;
  while (!session->empty()) {
    for (auto& f : session->Step()) done.push_back(std::move(f));
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok());
  EXPECT_EQ(done[0].result.generated_ids, AloneGreedy(*g, {64, 128}, 4));
}

// Logprobs are log_softmax of the recorded raw logits of the same step (known answer), the top list
// is sorted and starts with the greedy token.
TEST(BatchSessionTest, LogprobsAreLogSoftmaxOfTheStepsLogits) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 3;
  params.stop_on_eos = false;
  params.record_logits = true;
  params.logprobs = 5;
  auto session = g->NewSession();
  std::vector<SampledToken> seen;
  ASSERT_TRUE(session->AddSequence(kPrompt, params, 0, [&seen](const SampledToken& t) {
                       seen.push_back(t);
                       return true;
                     }).ok());
  GenerationResult result;
  while (!session->empty())
    for (auto& f : session->Step()) result = std::move(f.result);
  ASSERT_EQ(seen.size(), 3u);
  const int64_t vocab = g->config().vocab_size;
  for (size_t i = 0; i < seen.size(); ++i) {
    // Row of the position that produced token i: last prompt position, then each fed-back token.
    const int64_t row = static_cast<int64_t>(kPrompt.size()) - 1 + static_cast<int64_t>(i);
    const float* l = result.logits.data() + row * vocab;
    double mx = l[0];
    for (int64_t v = 0; v < vocab; ++v) mx = std::max(mx, static_cast<double>(l[v]));
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(l[v]) - mx);
    const double expected = static_cast<double>(l[seen[i].id]) - mx - std::log(sum);
    EXPECT_NEAR(seen[i].logprob, expected, 1e-5);
    EXPECT_EQ(seen[i].id, result.generated_ids[i]);
    ASSERT_EQ(seen[i].top.size(), 5u);
    EXPECT_EQ(seen[i].top[0].id, seen[i].id);  // greedy: the sampled token is the most likely
    EXPECT_FLOAT_EQ(seen[i].top[0].logprob, seen[i].logprob);
    for (size_t k = 1; k < 5; ++k) EXPECT_GE(seen[i].top[k - 1].logprob, seen[i].top[k].logprob);
    EXPECT_LE(seen[i].logprob, 0.0f);
  }
}

// A large frequency penalty forbids repeating a generated token; without it greedy decoding of the
// tiny random model repeats. The first token (no history yet) is the same either way.
TEST(BatchSessionTest, FrequencyPenaltyStopsRepeatsAndLeavesTheFirstTokenAlone) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 40;
  params.stop_on_eos = false;
  auto plain = g->Generate({kPrompt}, params);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  params.sampling.frequency_penalty = 1000.0f;
  auto penalized = g->Generate({kPrompt}, params);
  ASSERT_TRUE(penalized.ok()) << penalized.status().ToString();
  const std::vector<int32_t>& a = (*plain)[0].generated_ids;
  const std::vector<int32_t>& b = (*penalized)[0].generated_ids;
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 40u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_LT(std::set<int32_t>(a.begin(), a.end()).size(), a.size()) << "greedy run without repeats: weak test";
  EXPECT_EQ(std::set<int32_t>(b.begin(), b.end()).size(), b.size());
}

}  // namespace
}  // namespace zipmoe::executor
