// End-to-end tests of the executor (services/executor/generator.h) on tiny synthetic models of
// every architecture: prefill vs decode consistency, determinism, HF vs compressed directories,
// provider arrival order, ragged batches, predicted experts, recorded logits, sampling, tied
// embeddings and F32 checkpoints. Error paths and BatchSession have files of their own.
#include "services/executor/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "common/file_util.h"
#include "common/resident_expert_provider.h"
#include "common/checkpoint/safetensors.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using testing::TinyCompressedDir;
using testing::TinyModelDir;
using test::kThreads;
using test::MakeGenerator;
using test::kPrompt;
using test::BitEqual;

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
  // Bit-identical, not merely close: the CPU kernels do not depend on the batch a token runs in, which
  // prefix reuse and preemption (prefix_cache_test.cc, kv_budget_test.cc) rely on.
  EXPECT_EQ(max_diff, 0.0f) << "max |prefill - decode| " << max_diff << ", max |logit| " << max_abs;
  EXPECT_TRUE(BitEqual(*prefill, *decode));
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

// --no-mmap (WeightsMemory::kAnonymous): the files loading reads in full are copied into anonymous
// memory, for the HF and the compressed directory (dense.safetensors), and the logits are those of the
// mapped files, bit for bit.
TEST_P(ExecutorArchTest, AnonymousWeightsGiveTheMappedFilesLogits) {
  for (const std::string& dir : {TinyModelDir(GetParam()), TinyCompressedDir(GetParam())}) {
    GeneratorOptions options;
    options.model_dir = dir;
    options.n_threads = kThreads;
    auto mapped = Generator::Create(options);
    options.weights_memory = WeightsMemory::kAnonymous;
    auto anonymous = Generator::Create(options);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    ASSERT_TRUE(anonymous.ok()) << anonymous.status().ToString();
    EXPECT_EQ((*mapped)->weights_memory().anonymous_bytes, 0) << dir;
    EXPECT_GT((*mapped)->weights_memory().mapped_bytes, 0) << dir;
    EXPECT_EQ((*anonymous)->weights_memory().anonymous_bytes, (*mapped)->weights_memory().mapped_bytes) << dir;
    EXPECT_EQ((*anonymous)->weights_memory().mapped_bytes, 0) << dir;
    EXPECT_EQ((*anonymous)->weights_memory().files_left_mapped, 0) << dir;
    const std::vector<std::vector<int32_t>> chunks = {kPrompt, {11}, {12}};
    auto a = (*mapped)->ForwardChunks(chunks);
    auto b = (*anonymous)->ForwardChunks(chunks);
    ASSERT_TRUE(a.ok() && b.ok()) << dir;
    EXPECT_TRUE(BitEqual(*a, *b)) << dir;
  }
}

TEST(WeightsMemoryTest, TheLineSaysWhatWentWhereAndWhy) {
  EXPECT_EQ(WeightsMemoryLine(WeightsMemoryStats{}), "") << "nothing loaded in full";
  WeightsMemoryStats stats;
  stats.anonymous_bytes = int64_t{7} << 30;
  stats.mapped_bytes = int64_t{3} << 19;  // 1.5 MiB
  EXPECT_EQ(WeightsMemoryLine(stats), "I: weights: 7.00 GiB in anonymous memory, 1.5 MiB mapped from the files\n");
  stats.files_left_mapped = 2;
  EXPECT_NE(WeightsMemoryLine(stats).find("(2 file(s) left mapped: a copy would not leave 1 GiB of memory headroom)"),
            std::string::npos);
  stats.files_left_mapped = 0;
  stats.pending_bytes = int64_t{1} << 30;
  EXPECT_NE(WeightsMemoryLine(stats).find("(1.00 GiB queued for the copy in the background)"), std::string::npos);
  stats.pending_bytes = 0;
  stats.background_seconds = 12.25;
  EXPECT_NE(WeightsMemoryLine(stats).find("(copied in the background in 12.2 s)"), std::string::npos);
}

TEST(WeightsMemoryTest, NamesParseBackAndAnUnknownOneIsNamed) {
  for (WeightsMemory m : {WeightsMemory::kMapped, WeightsMemory::kAnonymous, WeightsMemory::kBackground}) {
    auto parsed = ParseWeightsMemory(WeightsMemoryName(m), "weights_memory");
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  auto bad = ParseWeightsMemory("mmap", "weights_memory");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("weights_memory: 'mmap'"), std::string::npos) << bad.status().ToString();
}

// kBackground: the files are served mapped at once and copied by the background thread while the
// model computes; the logits are the mapped files' bit for bit before, during and after the copy, and
// once it is done every byte read in full is anonymous. A generator destroyed while its copy may still
// run cancels it (nothing outlives the files).
TEST_P(ExecutorArchTest, BackgroundCopyGivesTheMappedFilesLogitsBeforeDuringAndAfter) {
  for (const std::string& dir : {TinyModelDir(GetParam()), TinyCompressedDir(GetParam())}) {
    GeneratorOptions options;
    options.model_dir = dir;
    options.n_threads = kThreads;
    auto mapped = Generator::Create(options);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    EXPECT_TRUE((*mapped)->WaitForWeightsMemory(0)) << "no background copy: done at once";
    options.weights_memory = WeightsMemory::kBackground;
    {
      auto dropped = Generator::Create(options);  // destroyed at once, its copy perhaps still running
      ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
    }
    auto background = Generator::Create(options);
    ASSERT_TRUE(background.ok()) << background.status().ToString();
    const std::vector<std::vector<int32_t>> chunks = {kPrompt, {11}, {12}};
    auto a = (*mapped)->ForwardChunks(chunks);
    auto during = (*background)->ForwardChunks(chunks);
    ASSERT_TRUE((*background)->WaitForWeightsMemory(120.0)) << dir;
    auto after = (*background)->ForwardChunks(chunks);
    ASSERT_TRUE(a.ok() && during.ok() && after.ok()) << dir;
    EXPECT_TRUE(BitEqual(*a, *during)) << dir;
    EXPECT_TRUE(BitEqual(*a, *after)) << dir;
    const WeightsMemoryStats stats = (*background)->weights_memory();
    EXPECT_EQ(stats.pending_bytes, 0) << dir;
    if (MemoryHeadroomBytes() >= (*mapped)->weights_memory().mapped_bytes + kAnonymousWeightsReserveBytes) {
      EXPECT_EQ(stats.anonymous_bytes, (*mapped)->weights_memory().mapped_bytes) << dir;
      EXPECT_EQ(stats.mapped_bytes, 0) << dir;
      EXPECT_EQ(stats.files_left_mapped, 0) << dir;
    } else {
      GTEST_LOG_(INFO) << "less than 1 GiB of memory headroom here: the files may stay mapped";
    }
  }
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

}  // namespace
}  // namespace zipmoe::executor
