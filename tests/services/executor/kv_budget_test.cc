// The KV budget (GeneratorOptions::kv_budget_bytes): caches in pages, admission while pages are free,
// preemption of the most recently admitted sequence when a running one needs a page, and its exact
// resumption (re-prefill of prompt + generated tokens); prompts that cannot fit; sequences that end where
// they alone would not fit.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "services/executor/generator.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;

constexpr int64_t kPage = 8;

std::unique_ptr<Generator> MakeBudgetGenerator(const std::string& dir, int64_t budget_bytes) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = test::kThreads;
  options.kv_budget_bytes = budget_bytes;
  options.kv_page_positions = kPage;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

// The bytes of `positions` cached positions in whole pages (KvBudgetCounters of an unbounded generator).
int64_t SequenceBytes(const KvBudgetCounters& k, int64_t positions) {
  return (positions + kPage - 1) / kPage * kPage * k.bytes_per_position + k.fixed_bytes;
}

using test::RunSession;

class KvBudgetTest : public ::testing::TestWithParam<std::string> {};

// Three sequences that together need more than the budget: admitted as pages free up, preempted when a
// running one needs a page, resumed; every sequence gets its unbounded run's tokens and logprobs.
TEST_P(KvBudgetTest, PreemptedSequencesResumeWithTheirUnboundedTokens) {
  const std::string dir = TinyModelDir(GetParam());
  auto unbounded = test::MakeGenerator(dir);
  ASSERT_TRUE(unbounded);
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 17, 300, 1000, 42, 7, 1999, 64, 128, 3}, {11, 900, 1500, 77, 8, 1234, 56}, {64, 128, 3, 900, 33, 21, 9, 8}};
  constexpr int64_t kNew = 20;
  const std::vector<std::vector<SampledToken>> want = RunSession(*unbounded, prompts, kNew).tokens;
  const KvBudgetCounters shape = unbounded->kv_budget_stats();
  ASSERT_FALSE(shape.enabled);
  ASSERT_GT(shape.bytes_per_position, 0);
  // All three prompts fit (two pages each), but only one more page: growing past 16 positions preempts.
  const int64_t budget = 3 * SequenceBytes(shape, 2 * kPage) + kPage * shape.bytes_per_position;
  auto bounded = MakeBudgetGenerator(dir, budget);
  ASSERT_TRUE(bounded);
  const std::vector<std::vector<SampledToken>> got = RunSession(*bounded, prompts, kNew).tokens;
  for (size_t i = 0; i < prompts.size(); ++i)
    test::ExpectSameSampledTokens(got[i], want[i], GetParam() + " sequence " + std::to_string(i));
  const KvBudgetCounters k = bounded->kv_budget_stats();
  EXPECT_TRUE(k.enabled);
  EXPECT_EQ(k.budget_bytes, budget);
  EXPECT_GT(k.preemptions, 0u) << "the budget was never short: the test does not test preemption";
}

INSTANTIATE_TEST_SUITE_P(Archs, KvBudgetTest, ::testing::Values("qwen2_moe", "deepseek_v2", "mixtral", "qwen3_next"));

TEST(KvBudgetTest, APromptLargerThanTheBudgetIsRefusedAndALongSequenceEndsAtIt) {
  const std::string dir = TinyModelDir("qwen3_moe");
  auto unbounded = test::MakeGenerator(dir);
  ASSERT_TRUE(unbounded);
  const KvBudgetCounters shape = unbounded->kv_budget_stats();
  auto g = MakeBudgetGenerator(dir, SequenceBytes(shape, 3 * kPage));  // 24 positions
  ASSERT_TRUE(g);
  auto session = g->NewSession();
  GenerationParams params;
  params.max_new_tokens = 100;
  params.stop_on_eos = false;
  std::vector<int32_t> too_long(25, 7);
  auto refused = session->AddSequence(too_long, params);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("KV budget"), std::string::npos) << refused.status().message();
  // 10 prompt tokens: generation stops once the next position would not fit (24 positions fed in all).
  const std::vector<int32_t> prompt = {5, 17, 300, 1000, 42, 7, 1999, 64, 128, 3};
  ASSERT_TRUE(session->AddSequence(prompt, params).ok());
  std::vector<BatchSession::Finished> done;
  while (!session->empty())
    for (BatchSession::Finished& f : session->Step()) done.push_back(std::move(f));
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].status.ok()) << done[0].status.ToString();
  EXPECT_EQ(prompt.size() + done[0].result.generated_ids.size() - 1, 24u);
  EXPECT_EQ(g->kv_budget_stats().used_bytes, 0);
}

TEST(KvBudgetTest, BadOptionsAreRefused) {
  for (const auto& [budget, page] : {std::pair<int64_t, int64_t>{-1, 64}, {1 << 20, 0}}) {
    GeneratorOptions options;
    options.model_dir = TinyModelDir("qwen2_moe");
    options.kv_budget_bytes = budget;
    options.kv_page_positions = page;
    test::ExpectRefused(options, "KV budget");
  }
}

}  // namespace
}  // namespace zipmoe::executor
