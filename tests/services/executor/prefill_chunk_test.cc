// Chunked prefill (GeneratorOptions::prefill_chunk): a prompt longer than the chunk is fed a chunk a step;
// the tokens, log-probabilities and recorded logits are those of a whole prefill bit for bit (plain
// attention, MLA, sliding windows, a Gated DeltaNet state); the other sequences of the session decode
// between its chunks; under a KV budget a partly fed prompt can be preempted and resumes exactly; a
// negative chunk is refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "services/executor/generator.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;

std::unique_ptr<Generator> Make(const std::string& dir, int64_t chunk, int64_t budget_bytes = 0) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = test::kThreads;
  options.prefill_chunk = chunk;
  options.kv_budget_bytes = budget_bytes;
  options.kv_page_positions = 8;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

using test::RunSession;
using test::SessionRun;

class PrefillChunkTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefillChunkTest, TheSameTokensLogprobsAndLogitsAsAWholePrefill) {
  const std::string dir = TinyModelDir(GetParam());
  auto whole = Make(dir, 0);
  ASSERT_TRUE(whole);
  const int64_t vocab = whole->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {test::PromptIds(150, 17, vocab), test::PromptIds(9, 3, vocab),
                                                     test::PromptIds(64, 5, vocab)};
  const SessionRun want = RunSession(*whole, prompts, 6, /*record_logits=*/true);
  for (int64_t chunk : {7, 64, 2048}) {
    auto chunked = Make(dir, chunk);
    ASSERT_TRUE(chunked);
    const SessionRun got = RunSession(*chunked, prompts, 6, /*record_logits=*/true);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string what = GetParam() + " chunk " + std::to_string(chunk) + " sequence " + std::to_string(i);
      test::ExpectSameSampledTokens(got.tokens[i], want.tokens[i], what);
      EXPECT_EQ(got.results[i].logits_rows, want.results[i].logits_rows) << what;
      EXPECT_TRUE(test::BitEqual(got.results[i].logits, want.results[i].logits)) << what;
    }
    // 150 tokens in chunks of 7 take 22 steps before the first sample, then 5 more.
    if (chunk == 7) {
      EXPECT_EQ(got.steps, (150 + 6) / 7 + 5);
    } else if (chunk == 2048) {
      EXPECT_EQ(got.steps, want.steps);
    }
  }
}

// Plain attention, MLA, sliding windows with sinks, a Gated DeltaNet state.
INSTANTIATE_TEST_SUITE_P(Archs, PrefillChunkTest,
                         ::testing::Values("qwen2_moe", "deepseek_v2", "gpt_oss", "qwen3_next"));

// A decoding sequence gets a token at every step of a long prompt's prefill.
TEST(PrefillChunkTest, OtherSequencesDecodeBetweenTheChunks) {
  const std::string dir = TinyModelDir("qwen3_moe");
  auto g = Make(dir, 16);
  ASSERT_TRUE(g);
  const int64_t vocab = g->config().vocab_size;
  auto session = g->NewSession();
  GenerationParams params;
  params.max_new_tokens = 40;
  params.stop_on_eos = false;
  int64_t a_tokens = 0, b_tokens = 0;
  ASSERT_TRUE(session->AddSequence(test::PromptIds(5, 1, vocab), params, 0, [&](const SampledToken&) {
                       ++a_tokens;
                       return true;
                     }).ok());
  session->Step();  // a's prefill: its first token
  ASSERT_EQ(a_tokens, 1);
  ASSERT_TRUE(session->AddSequence(test::PromptIds(160, 2, vocab), params, 0, [&](const SampledToken&) {
                       ++b_tokens;
                       return true;
                     }).ok());
  int64_t steps = 0;
  while (b_tokens == 0) {
    EXPECT_EQ(session->queued(), 1u) << "b counts as queued until its prompt is fed";
    session->Step();
    ++steps;
  }
  EXPECT_EQ(steps, 10) << "160 tokens in chunks of 16";
  EXPECT_EQ(a_tokens, 1 + 10) << "a decoded a token at each of them";
  EXPECT_EQ(session->queued(), 0u);
}

// Under a KV budget two long prompts fed in chunks preempt one another (a partly fed prompt is the most
// recently admitted one) and every sequence still gets its unbounded run's tokens and logprobs.
TEST(PrefillChunkTest, APartlyFedPromptIsPreemptedAndResumesExactly) {
  const std::string dir = TinyModelDir("qwen2_moe");
  auto unbounded = Make(dir, 0);
  ASSERT_TRUE(unbounded);
  const int64_t vocab = unbounded->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {test::PromptIds(90, 7, vocab), test::PromptIds(100, 8, vocab),
                                                     test::PromptIds(20, 9, vocab)};
  const SessionRun want = RunSession(*unbounded, prompts, 12);
  const KvBudgetCounters shape = unbounded->kv_budget_stats();
  auto bounded = Make(dir, 16, 160 * shape.bytes_per_position + 3 * shape.fixed_bytes);  // 160 positions
  ASSERT_TRUE(bounded);
  const SessionRun got = RunSession(*bounded, prompts, 12);
  for (size_t i = 0; i < prompts.size(); ++i)
    test::ExpectSameSampledTokens(got.tokens[i], want.tokens[i], "sequence " + std::to_string(i));
  EXPECT_GT(bounded->kv_budget_stats().preemptions, 0u) << "the budget was never short";
}

// Generate's statistics: TTFT ends at the step that samples the first tokens (the last chunk), decode steps
// are the ones after it, whatever the chunk.
TEST(PrefillChunkTest, GenerateCountsTheChunksAsPrefill) {
  const std::string dir = TinyModelDir("qwen3_moe");
  GenerationParams params;
  params.max_new_tokens = 5;
  params.stop_on_eos = false;
  std::vector<std::vector<int32_t>> generated;
  for (int64_t chunk : {0, 16}) {
    auto g = Make(dir, chunk);
    ASSERT_TRUE(g);
    GenerationStats stats;
    auto r = g->Generate({test::PromptIds(100, 4, g->config().vocab_size), {5, 6, 7}}, params, {}, &stats);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(stats.prefill_tokens, 103) << chunk;
    EXPECT_EQ(stats.decode_steps, 4) << chunk;
    EXPECT_GT(stats.ttft_seconds, 0.0) << chunk;
    generated.push_back((*r)[0].generated_ids);
  }
  EXPECT_EQ(generated[0], generated[1]);
}

TEST(PrefillChunkTest, ANegativeChunkIsRefused) {
  GeneratorOptions options;
  options.model_dir = TinyModelDir("qwen3_moe");
  options.prefill_chunk = -1;
  test::ExpectRefused(options, "prefill chunk");
}

}  // namespace
}  // namespace zipmoe::executor
