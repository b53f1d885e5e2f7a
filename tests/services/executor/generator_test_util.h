// Helpers of the executor tests (generator_test.cc, generator_errors_test.cc,
// generator_batch_test.cc, prefix_cache_test.cc, kv_budget_test.cc, kv_window_test.cc,
// prefill_chunk_test.cc): a generator on a model directory, the error of one that fails to load or is
// refused its options, fixed and generated prompts, one sequence or several run through a session, and
// bit-exact comparisons of logits and of sampled tokens.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "services/executor/generator.h"

namespace zipmoe::executor::test {

inline constexpr int kThreads = 2;

inline std::unique_ptr<Generator> MakeGenerator(const std::string& dir, ExpertProvider* provider = nullptr) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  options.expert_provider = provider;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

inline Status CreateError(const std::string& dir) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  auto g = Generator::Create(options);
  return g.ok() ? Status::Ok() : g.status();
}

// Generator::Create refuses `options` with kInvalidArgument, its message naming `what`.
inline void ExpectRefused(const GeneratorOptions& options, const std::string& what) {
  auto g = Generator::Create(options);
  ASSERT_FALSE(g.ok()) << what;
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << g.status().ToString();
  EXPECT_NE(g.status().message().find(what), std::string::npos) << g.status().message();
}

inline const std::vector<int32_t> kPrompt = {5, 17, 300, 1000, 42, 7, 1999, 256, 64, 128, 3, 900};

// n prompt ids in [1, vocab - 1], a different sequence for each seed (long prompts for the executor tests).
inline std::vector<int32_t> PromptIds(int64_t n, int64_t seed, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>((seed + 7919 * i) % (vocab - 1)) + 1;
  return p;
}

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct SequenceRun {
  GenerationResult result;
  std::vector<SampledToken> tokens;  // with the top-5 log-probabilities of every step
};

// One sequence through a new session of `g`: greedy, EOS ignored, the top-5 log-probabilities of every step.
inline SequenceRun RunSequence(Generator& g, const std::vector<int32_t>& prompt, int64_t max_new,
                               bool record_logits = false) {
  SequenceRun run;
  auto session = g.NewSession();
  GenerationParams params;
  params.max_new_tokens = max_new;
  params.stop_on_eos = false;
  params.logprobs = 5;
  params.record_logits = record_logits;
  auto id = session->AddSequence(prompt, params, 0, [&run](const SampledToken& t) {
    run.tokens.push_back(t);
    return true;
  });
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  while (id.ok() && !session->empty()) {
    for (BatchSession::Finished& f : session->Step()) {
      EXPECT_TRUE(f.status.ok()) << f.status.ToString();
      run.result = std::move(f.result);
    }
  }
  return run;
}

struct SessionRun {
  std::vector<std::vector<SampledToken>> tokens;  // per sequence, with the top-3 log-probabilities
  std::vector<GenerationResult> results;          // per sequence
  int64_t steps = 0;
};

// Every prompt queued in one session of `g` first, then steps until all end; greedy, EOS ignored, the top-3
// log-probabilities of every step. Checks after every step that a KV budget holds, and at the end that the
// session holds none of it.
inline SessionRun RunSession(Generator& g, const std::vector<std::vector<int32_t>>& prompts, int64_t max_new,
                             bool record_logits = false) {
  SessionRun run;
  run.tokens.resize(prompts.size());
  run.results.resize(prompts.size());
  auto session = g.NewSession();
  std::map<BatchSession::SequenceId, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationParams params;
    params.max_new_tokens = max_new;
    params.stop_on_eos = false;
    params.logprobs = 3;
    params.record_logits = record_logits;
    auto id = session->AddSequence(prompts[i], params, 0, [&run, i](const SampledToken& t) {
      run.tokens[i].push_back(t);
      return true;
    });
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (id.ok()) index[*id] = i;
  }
  while (!session->empty()) {
    for (BatchSession::Finished& f : session->Step()) {
      EXPECT_TRUE(f.status.ok()) << f.status.ToString();
      run.results[index[f.id]] = std::move(f.result);
    }
    const KvBudgetCounters k = g.kv_budget_stats();
    if (k.enabled) {
      EXPECT_LE(k.used_bytes, k.budget_bytes);
    }
    ++run.steps;
  }
  EXPECT_EQ(g.kv_budget_stats().used_bytes, 0);
  return run;
}

// Every sampled token and every log-probability (the sampled one's and the top candidates') equal, bit
// for bit: what a run continued from a prefix-cache hit or resumed after a preemption must reproduce.
inline void ExpectSameSampledTokens(const std::vector<SampledToken>& got, const std::vector<SampledToken>& want,
                                    const std::string& what) {
  const auto same = [](float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; };
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << what << " step " << i;
    EXPECT_TRUE(same(got[i].logprob, want[i].logprob)) << what << " step " << i;
    ASSERT_EQ(got[i].top.size(), want[i].top.size()) << what << " step " << i;
    for (size_t k = 0; k < got[i].top.size(); ++k) {
      EXPECT_EQ(got[i].top[k].id, want[i].top[k].id) << what << " step " << i << " candidate " << k;
      EXPECT_TRUE(same(got[i].top[k].logprob, want[i].top[k].logprob)) << what << " step " << i << " candidate " << k;
    }
  }
}

}  // namespace zipmoe::executor::test
