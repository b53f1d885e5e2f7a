// A BF16 KV cache (GeneratorOptions::kv_cache_bf16): half the bytes per cached position; logits within
// BF16 rounding of the float32 cache's (the same greedy tokens on a prompt of 300 positions); the same
// bits for a prompt fed whole or in pieces, in a batch or alone; a float32 cache's logits unchanged when
// the option is off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "services/executor/generator.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;

std::unique_ptr<Generator> Make(const std::string& dir, bool bf16) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = test::kThreads;
  options.kv_cache_bf16 = bf16;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

std::vector<int32_t> LongPrompt(int64_t n, int32_t vocab) { return test::PromptIds(n, 17, vocab); }

class KvCacheBf16Test : public ::testing::TestWithParam<std::string> {};

TEST_P(KvCacheBf16Test, HalfTheBytesLogitsWithinBf16RoundingAndBatchInvariant) {
  const std::string dir = TinyModelDir(GetParam());
  auto f32 = Make(dir, false);
  auto bf16 = Make(dir, true);
  ASSERT_TRUE(f32 && bf16);
  // Positions cost half the bytes (the Gated DeltaNet state, float32 either way, is not per position).
  EXPECT_EQ(bf16->kv_budget_stats().bytes_per_position * 2, f32->kv_budget_stats().bytes_per_position);
  EXPECT_EQ(bf16->kv_budget_stats().fixed_bytes, f32->kv_budget_stats().fixed_bytes);
  const std::vector<int32_t> prompt = LongPrompt(300, static_cast<int32_t>(f32->config().vocab_size));
  // A prefill, then decode steps: every position's logits.
  std::vector<std::vector<int32_t>> chunks = {prompt};
  for (int32_t t : {5, 900, 17, 3}) chunks.push_back({t});
  auto want = f32->ForwardChunks(chunks);
  auto got = bf16->ForwardChunks(chunks);
  ASSERT_TRUE(want.ok() && got.ok());
  ASSERT_EQ(want->size(), got->size());
  const int64_t vocab = f32->config().vocab_size, rows = static_cast<int64_t>(want->size()) / vocab;
  double max_logit = 0, max_diff = 0;
  int64_t same_argmax = 0;
  bool differs = false;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = want->data() + r * vocab;
    const float* b = got->data() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) {
      max_logit = std::max(max_logit, static_cast<double>(std::abs(a[i])));
      max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
      differs = differs || a[i] != b[i];
    }
    same_argmax += std::max_element(a, a + vocab) - a == std::max_element(b, b + vocab) - b;
  }
  EXPECT_TRUE(differs) << "the BF16 cache changed nothing: is it used?";
  EXPECT_LT(max_diff, 2e-2 * max_logit) << GetParam();
  EXPECT_GE(same_argmax, rows * 95 / 100) << GetParam() << ": " << same_argmax << " of " << rows;
  // The same bits whether the prompt is fed whole or in pieces, and in a batch or alone.
  std::vector<std::vector<int32_t>> pieces = {std::vector<int32_t>(prompt.begin(), prompt.begin() + 100),
                                              std::vector<int32_t>(prompt.begin() + 100, prompt.begin() + 299),
                                              {prompt[299]}};
  for (int32_t t : {5, 900, 17, 3}) pieces.push_back({t});
  auto pieced = bf16->ForwardChunks(pieces);
  ASSERT_TRUE(pieced.ok());
  EXPECT_TRUE(test::BitEqual(*pieced, *got)) << GetParam() << ": pieces against one prefill";
  GenerationParams params;
  params.max_new_tokens = 6;
  params.stop_on_eos = false;
  params.logprobs = 3;
  auto alone = bf16->Generate({prompt}, params);
  auto batch = bf16->Generate({LongPrompt(40, static_cast<int32_t>(vocab)), prompt, {7, 8, 9}}, params);
  ASSERT_TRUE(alone.ok() && batch.ok());
  EXPECT_EQ((*alone)[0].generated_ids, (*batch)[1].generated_ids) << GetParam();
}

// Plain attention (qwen2_moe), MLA (deepseek_v2), a sliding window (mixtral), sinks and windows
// (gpt_oss), the hybrid's full-attention layers (qwen3_next).
INSTANTIATE_TEST_SUITE_P(Archs, KvCacheBf16Test,
                         ::testing::Values("qwen2_moe", "deepseek_v2", "mixtral", "gpt_oss", "qwen3_next"));

TEST(KvCacheBf16Test, OffLeavesTheFloat32CacheAsItWas) {
  const std::string dir = TinyModelDir("qwen3_moe");
  auto plain = test::MakeGenerator(dir);
  auto off = Make(dir, false);
  ASSERT_TRUE(plain && off);
  auto a = plain->ForwardChunks({test::kPrompt, {5}});
  auto b = off->ForwardChunks({test::kPrompt, {5}});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(test::BitEqual(*a, *b));
}

}  // namespace
}  // namespace zipmoe::executor
