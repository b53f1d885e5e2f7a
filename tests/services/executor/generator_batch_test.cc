// Tests of the executor's BatchSession (continuous batching, services/executor/generator.h):
// sequences joining mid-generation, per-sequence ends, refused sequences, forward failures,
// logprobs, the penalties and logit_bias.
#include "services/executor/generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <set>

#include "common/resident_expert_provider.h"
#include "common/checkpoint/safetensors.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;
using test::MakeGenerator;
using test::kPrompt;
using test::BitEqual;

// ---------------------------------------------------------------------------------------------
// BatchSession (continuous batching)

// Fails BeginLayer while `fail` is set; otherwise forwards to the inner provider.
class SwitchableFailingProvider : public ExpertProvider {
 public:
  explicit SwitchableFailingProvider(ExpertProvider* inner) : inner_(inner) {}
  Status BeginLayer(const LayerRouting& routing) override {
    if (transient_failures > 0) {
      --transient_failures;
      return Status::DeadlineExceeded("injected: the scheduler did not answer");
    }
    if (fail) return Status::IoError("injected provider failure");
    return inner_->BeginLayer(routing);
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override { return inner_->NextReady(); }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  bool fail = false;
  int transient_failures = 0;  // the next this many BeginLayer calls fail with kDeadlineExceeded

 private:
  ExpertProvider* inner_;
};

// The tiny OLMoE with every expert resident behind a SwitchableFailingProvider.
struct FailableOlmoe {
  FailableOlmoe() {
    const std::string dir = TinyModelDir("olmoe");
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    if (!ckpt.ok()) return;
    checkpoint = std::move(ckpt).value();
    auto r = ResidentExpertProvider::FromCheckpoint(*checkpoint);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return;
    resident = std::move(r).value();
    failing = std::make_unique<SwitchableFailingProvider>(resident.get());
    generator = MakeGenerator(dir, failing.get());
  }
  bool ok() const { return generator != nullptr; }
  std::unique_ptr<Checkpoint> checkpoint;
  std::unique_ptr<ResidentExpertProvider> resident;
  std::unique_ptr<SwitchableFailingProvider> failing;
  std::unique_ptr<Generator> generator;
};

std::vector<int32_t> AloneGreedy(Generator& g, const std::vector<int32_t>& prompt, int64_t n) {
  GenerationParams params;
  params.max_new_tokens = n;
  params.stop_on_eos = false;
  auto r = g.Generate({prompt}, params);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r->front().generated_ids : std::vector<int32_t>{};
}

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
  FailableOlmoe olmoe;
  ASSERT_TRUE(olmoe.ok());
  SwitchableFailingProvider& failing = *olmoe.failing;
  Generator* g = olmoe.generator.get();
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

// A transient failure (the pipeline lost a process: kDeadlineExceeded / kUnavailable) costs the step's
// sequences their caches, not their requests: they re-prefill prompt + generated tokens and go on to
// the tokens of an undisturbed run; past kMaxTransientRetries failures they end with the status.
TEST(BatchSessionTest, TransientForwardFailuresRePrefillAndContinueWithTheSameTokens) {
  FailableOlmoe olmoe;
  ASSERT_TRUE(olmoe.ok());
  SwitchableFailingProvider& failing = *olmoe.failing;
  Generator* g = olmoe.generator.get();
  GenerationParams params;
  params.max_new_tokens = 6;
  params.stop_on_eos = false;
  const std::vector<int32_t> want_a = AloneGreedy(*g, kPrompt, 6);
  const std::vector<int32_t> want_b = AloneGreedy(*g, {64, 128}, 6);
  auto session = g->NewSession();
  ASSERT_TRUE(session->AddSequence(kPrompt, params).ok());
  ASSERT_TRUE(session->AddSequence({64, 128}, params).ok());
  EXPECT_TRUE(session->Step().empty());
  EXPECT_TRUE(session->Step().empty());
  failing.transient_failures = 2;  // two failed steps in a row, then the pipeline is back
  std::vector<BatchSession::Finished> done;
  while (!session->empty()) {
    for (auto& f : session->Step()) done.push_back(std::move(f));
  }
  ASSERT_EQ(done.size(), 2u);
  for (const auto& f : done) {
    EXPECT_TRUE(f.status.ok()) << f.status.ToString();
    EXPECT_EQ(f.result.transient_retries, 2);
    EXPECT_EQ(f.result.generated_ids, f.result.prompt_ids == kPrompt ? want_a : want_b);
  }
  // A pipeline that stays down: the retries run out and the sequence ends with the status.
  ASSERT_TRUE(session->AddSequence(kPrompt, params).ok());
  failing.transient_failures = 1000;
  std::vector<BatchSession::Finished> failed;
  for (int i = 0; i < 10 && !session->empty(); ++i) {
    for (auto& f : session->Step()) failed.push_back(std::move(f));
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(failed[0].result.transient_retries, BatchSession::kMaxTransientRetries);
  failing.transient_failures = 0;
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

// repetition_penalty (vLLM / transformers): each greedy token is the argmax of its step's raw logits
// (recorded) with every token of the prompt and of the tokens before it penalised once, as transformers'
// RepetitionPenaltyLogitsProcessor computes it (written out here); the penalty changes the answer.
TEST(BatchSessionTest, RepetitionPenaltyCountsThePromptAndTheGeneratedTokens) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  const int64_t vocab = g->config().vocab_size;
  GenerationParams params;
  params.max_new_tokens = 24;
  params.stop_on_eos = false;
  params.record_logits = true;
  auto plain = g->Generate({kPrompt}, params);
  params.sampling.repetition_penalty = 1.5f;
  auto penalized = g->Generate({kPrompt}, params);
  ASSERT_TRUE(plain.ok() && penalized.ok());
  const GenerationResult& r = (*penalized)[0];
  ASSERT_EQ(r.generated_ids.size(), 24u);
  ASSERT_EQ(r.logits_rows, static_cast<int64_t>(kPrompt.size() + r.generated_ids.size()) - 1);
  std::set<int32_t> seen(kPrompt.begin(), kPrompt.end());
  for (size_t i = 0; i < r.generated_ids.size(); ++i) {
    std::vector<float> row(r.logits.begin() + static_cast<int64_t>(kPrompt.size() - 1 + i) * vocab,
                           r.logits.begin() + static_cast<int64_t>(kPrompt.size() + i) * vocab);
    for (int32_t t : seen) {
      float& x = row[static_cast<size_t>(t)];
      x = x > 0.0f ? x / 1.5f : x * 1.5f;
    }
    EXPECT_EQ(r.generated_ids[i], Argmax(row.data(), vocab)) << "token " << i;
    seen.insert(r.generated_ids[i]);
  }
  EXPECT_NE((*plain)[0].generated_ids, r.generated_ids) << "the penalty changed nothing: weak test";
  // Out of range: refused when the sequence is added.
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity()}) {
    params.sampling.repetition_penalty = bad;
    EXPECT_EQ(g->Generate({kPrompt}, params).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  params.sampling.repetition_penalty = 1.0f;
  params.sampling.min_p = 1.5f;
  EXPECT_EQ(g->Generate({kPrompt}, params).status().code(), StatusCode::kInvalidArgument);
}

// stop_token_ids end a sequence as EOS does (ignore_eos or not); min_new_tokens keeps them and EOS from
// being sampled before that many tokens: a bias that forces EOS then gives it at the first token allowed.
TEST(BatchSessionTest, StopTokenIdsAndMinNewTokens) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 12;
  params.stop_on_eos = false;
  auto plain = g->Generate({kPrompt}, params);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const std::vector<int32_t> a = (*plain)[0].generated_ids;
  ASSERT_EQ(a.size(), 12u);
  // The first token after the first that did not occur before it.
  size_t i = 1;
  while (i < a.size() && std::find(a.begin(), a.begin() + static_cast<int64_t>(i), a[i]) != a.begin() + static_cast<int64_t>(i)) ++i;
  ASSERT_LT(i, a.size());
  params.stop_token_ids = {a[i]};
  auto stopped = g->Generate({kPrompt}, params);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ((*stopped)[0].generated_ids, std::vector<int32_t>(a.begin(), a.begin() + static_cast<int64_t>(i) + 1));
  EXPECT_TRUE((*stopped)[0].stopped_on_eos);
  // Not before min_new_tokens: a[i] cannot be token i, so the run leaves the plain one there.
  params.min_new_tokens = static_cast<int64_t>(i) + 1;
  auto later = g->Generate({kPrompt}, params);
  ASSERT_TRUE(later.ok());
  const std::vector<int32_t>& b = (*later)[0].generated_ids;
  ASSERT_GT(b.size(), i + 1);
  EXPECT_EQ(std::vector<int32_t>(b.begin(), b.begin() + static_cast<int64_t>(i)),
            std::vector<int32_t>(a.begin(), a.begin() + static_cast<int64_t>(i)));
  EXPECT_NE(b[i], a[i]);
  for (size_t k = i + 1; k + 1 < b.size(); ++k) EXPECT_NE(b[k], a[i]) << "a stop token did not stop at " << k;
  // EOS forced by a bias comes at the first step min_new_tokens allows, and stops there.
  const int32_t eos = g->config().eos_token_ids.at(0);
  GenerationParams forced;
  forced.max_new_tokens = 12;
  forced.sampling.logit_bias = {{eos, 100.0f}};
  auto first = g->Generate({kPrompt}, forced);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ((*first)[0].generated_ids, std::vector<int32_t>{eos});
  forced.min_new_tokens = 5;
  auto fifth = g->Generate({kPrompt}, forced);
  ASSERT_TRUE(fifth.ok());
  ASSERT_EQ((*fifth)[0].generated_ids.size(), 6u);
  EXPECT_EQ((*fifth)[0].generated_ids.back(), eos);
  EXPECT_TRUE((*fifth)[0].stopped_on_eos);
  for (size_t k = 0; k < 5; ++k) EXPECT_FALSE(g->config().IsEos((*fifth)[0].generated_ids[k])) << k;
  forced.min_new_tokens = -1;
  EXPECT_EQ(g->Generate({kPrompt}, forced).status().code(), StatusCode::kInvalidArgument);
}

// logit_bias (OpenAI): +100 on a token greedy decoding would not pick makes it every token; -100 on
// the tokens an unbiased run picks bans them; an empty list changes nothing.
TEST(BatchSessionTest, LogitBiasForcesAndBansTokens) {
  auto g = MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  GenerationParams params;
  params.max_new_tokens = 8;
  params.stop_on_eos = false;
  auto plain = g->Generate({kPrompt}, params);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const std::vector<int32_t>& a = (*plain)[0].generated_ids;
  ASSERT_EQ(a.size(), 8u);
  const int32_t forced = a[0] == 7 ? 8 : 7;
  params.sampling.logit_bias = {{forced, 100.0f}};
  auto biased = g->Generate({kPrompt}, params);
  ASSERT_TRUE(biased.ok()) << biased.status().ToString();
  EXPECT_EQ((*biased)[0].generated_ids, std::vector<int32_t>(8, forced));
  params.sampling.logit_bias.clear();
  for (int32_t t : std::set<int32_t>(a.begin(), a.end())) params.sampling.logit_bias.emplace_back(t, -100.0f);
  auto banned = g->Generate({kPrompt}, params);
  ASSERT_TRUE(banned.ok()) << banned.status().ToString();
  for (int32_t t : (*banned)[0].generated_ids) EXPECT_EQ(std::count(a.begin(), a.end(), t), 0) << "token " << t;
}

}  // namespace
}  // namespace zipmoe::executor
