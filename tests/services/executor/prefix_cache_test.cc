// Prefix reuse across requests (services/executor/prefix_cache.h): a prompt that starts with a finished
// sequence's tokens continues from its kept cache, and what it generates (tokens and every step's
// log-probabilities, bit for bit) equals a run that prefilled the whole prompt; partial prefixes for KV
// caches, whole entries only for the Gated DeltaNet's state; the byte budget and LRU eviction.
#include "services/executor/prefix_cache.h"

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

std::unique_ptr<Generator> MakeCachingGenerator(const std::string& dir, int64_t prefix_cache_bytes) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = test::kThreads;
  options.prefix_cache_bytes = prefix_cache_bytes;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

using test::RunSequence;
using test::SequenceRun;
using test::ExpectSameSampledTokens;

class PrefixReuseTest : public ::testing::TestWithParam<std::string> {};

// A chat's second turn: the history (first prompt + answer) then new tokens.
TEST_P(PrefixReuseTest, SecondTurnContinuesFromTheFirstTurnsCacheWithTheSameLogprobs) {
  const std::string dir = TinyModelDir(GetParam());
  auto cached = MakeCachingGenerator(dir, int64_t{256} << 20);
  auto plain = MakeCachingGenerator(dir, 0);
  ASSERT_TRUE(cached && plain);
  const std::vector<int32_t> turn1 = {5, 17, 300, 1000, 42, 7, 1999, 64, 128, 3, 900, 1500};
  const SequenceRun first = RunSequence(*cached, turn1, 6);
  EXPECT_EQ(first.result.cached_prompt_tokens, 0);
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first.result.generated_ids.begin(), first.result.generated_ids.end());
  const size_t history = turn2.size() - 1;  // the last generated token was never fed
  for (int32_t t : {77, 8, 1234, 56}) turn2.push_back(t);
  const SequenceRun second = RunSequence(*cached, turn2, 8);
  EXPECT_EQ(second.result.cached_prompt_tokens, static_cast<int64_t>(history));
  ExpectSameSampledTokens(second.tokens, RunSequence(*plain, turn2, 8).tokens, GetParam() + " second turn");
  const PrefixCacheCounters stats = cached->prefix_cache_stats();
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.reused_tokens, history);
  // KV caches: the second turn's entry superseded the first's. A recurrent state serves only its exact
  // prefix: both turns' entries stay, with a snapshot after each prompt.
  const bool recurrent = GetParam() == "qwen3_next" || GetParam() == "qwen3_5_moe";
  EXPECT_EQ(stats.entries, recurrent ? 4 : 1);
  EXPECT_GT(stats.bytes, 0);
  EXPECT_FALSE(plain->prefix_cache_stats().enabled);
}

// A prompt sharing only part of an entry: a KV cache is cut there; a Gated DeltaNet state cannot be.
TEST_P(PrefixReuseTest, APartialPrefixIsReusedOnlyWithoutRecurrentState) {
  const std::string dir = TinyModelDir(GetParam());
  auto cached = MakeCachingGenerator(dir, int64_t{256} << 20);
  auto plain = MakeCachingGenerator(dir, 0);
  ASSERT_TRUE(cached && plain);
  const std::vector<int32_t> a = {5, 17, 300, 1000, 42, 7, 1999, 64, 128, 3};
  RunSequence(*cached, a, 4);
  const std::vector<int32_t> b = {5, 17, 300, 1000, 42, 7, 11, 12, 13};  // shares 6 tokens
  const SequenceRun got = RunSequence(*cached, b, 6);
  const bool recurrent = GetParam() == "qwen3_next" || GetParam() == "qwen3_5_moe";
  EXPECT_EQ(got.result.cached_prompt_tokens, recurrent ? 0 : 6);
  ExpectSameSampledTokens(got.tokens, RunSequence(*plain, b, 6).tokens, GetParam() + " partial prefix");
  // The same prompt again: all but its last token come from the cache, never the whole prompt.
  const SequenceRun again = RunSequence(*cached, a, 4);
  EXPECT_LE(again.result.cached_prompt_tokens, static_cast<int64_t>(a.size()) - 1);
  EXPECT_EQ(again.result.cached_prompt_tokens, recurrent ? 0 : static_cast<int64_t>(a.size()) - 1);
  ExpectSameSampledTokens(again.tokens, RunSequence(*plain, a, 4).tokens, GetParam() + " repeated prompt");
  // A next turn whose re-sent answer differs from the generated tokens still starts with the whole prompt:
  // the KV caches cut there, the recurrent models continue from the snapshot taken after the prompt.
  std::vector<int32_t> c = a;
  for (int32_t t : {2047, 2046, 2045}) c.push_back(t);
  const SequenceRun next = RunSequence(*cached, c, 4);
  EXPECT_EQ(next.result.cached_prompt_tokens, static_cast<int64_t>(a.size()));
  ExpectSameSampledTokens(next.tokens, RunSequence(*plain, c, 4).tokens, GetParam() + " prompt snapshot");
}

INSTANTIATE_TEST_SUITE_P(Archs, PrefixReuseTest,
                         ::testing::Values("qwen2_moe", "mixtral", "deepseek_v2", "qwen3_next", "qwen3_5_moe"));

// MLA on the CPU caches the latent form (attention.h): a position takes kv_lora_rank + qk_rope_head_dim
// floats a layer (the values are the keys' first kv_lora_rank columns), fewer than its heads' keys and
// values, and a kept cache holds whole positions of it (the KV budget counts pages by bytes_per_position:
// generator.h).
TEST(PrefixReuseTest, MlaCachesHoldTheLatentForm) {
  for (const std::string arch : {"deepseek_v2", "glm4_moe_lite"}) {
    auto g = MakeCachingGenerator(TinyModelDir(arch), int64_t{256} << 20);
    ASSERT_TRUE(g);
    const ModelConfig& c = g->config();
    ASSERT_TRUE(c.mla()) << arch;
    const int64_t latent = c.kv_lora_rank + c.qk_rope_head_dim;
    EXPECT_LT(latent, c.num_attention_heads * (c.q_head_dim() + c.v_dim())) << arch;
    const int64_t per_position = g->kv_budget_stats().bytes_per_position;
    EXPECT_EQ(per_position, c.num_hidden_layers * latent * int64_t{sizeof(float)}) << arch;
    RunSequence(*g, {5, 17, 300, 1000, 42, 7, 1999, 64, 128, 3}, 4);  // 13 positions cached
    const PrefixCacheCounters stats = g->prefix_cache_stats();
    ASSERT_EQ(stats.entries, 1) << arch;
    EXPECT_EQ(stats.bytes % per_position, 0) << arch << ": " << stats.bytes << " bytes";
    EXPECT_GE(stats.bytes / per_position, 13) << arch;
    EXPECT_LE(stats.bytes / per_position, 32) << arch;
  }
}

TEST(PrefixReuseTest, SequencesRecordingLogitsAreFedWhole) {
  auto g = MakeCachingGenerator(TinyModelDir("qwen3_moe"), int64_t{64} << 20);
  ASSERT_TRUE(g);
  const std::vector<int32_t> p = {5, 17, 300, 1000, 42, 7};
  RunSequence(*g, p, 3);
  const SequenceRun r = RunSequence(*g, p, 3, /*record_logits=*/true);
  EXPECT_EQ(r.result.cached_prompt_tokens, 0);
  EXPECT_EQ(r.result.logits_rows, static_cast<int64_t>(p.size()) + 2);
}

TEST(PrefixReuseTest, NegativeBudgetIsRefused) {
  GeneratorOptions options;
  options.model_dir = TinyModelDir("qwen2_moe");
  options.prefix_cache_bytes = -1;
  test::ExpectRefused(options, "prefix cache");
}

// The cache itself: LRU eviction under the byte budget, superseded entries, oversized entries.
KvCache FilledCache(int64_t n_layers, int64_t positions) {
  KvCache c(n_layers);
  for (int64_t l = 0; l < n_layers; ++l) {
    const at::Tensor k = at::arange(positions * 4, at::kFloat).view({1, positions, 4});
    c.Append(l, k, k + 1000);
  }
  c.Advance(positions);
  return c;
}

std::vector<int32_t> Tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + static_cast<int32_t>(i);
  return t;
}

TEST(PrefixCacheTest, EvictsLeastRecentlyUsedBeyondTheBudgetAndDropsSupersededEntries) {
  const int64_t one = FilledCache(2, 16).bytes();  // 16 positions x 4 floats x (k + v) x 2 layers
  ASSERT_GT(one, 0);
  PrefixCache cache(3 * one);
  cache.Insert(Tokens(0, 16), FilledCache(2, 16));
  cache.Insert(Tokens(100, 16), FilledCache(2, 16));
  cache.Insert(Tokens(200, 16), FilledCache(2, 16));
  EXPECT_EQ(cache.stats().entries, 3);
  int64_t reused = 0;
  std::vector<int32_t> p = Tokens(0, 10);
  p.push_back(999);
  auto hit = cache.Lookup(p, &reused);  // touches the first entry
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(reused, 10);
  EXPECT_EQ(hit->length(), 10);
  cache.Insert(Tokens(300, 16), FilledCache(2, 16));  // evicts the least recently used: tokens 100..
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_EQ(cache.stats().evicted, 1u);
  EXPECT_FALSE(cache.Lookup(Tokens(100, 8), &reused).has_value());
  EXPECT_EQ(reused, 0);
  EXPECT_TRUE(cache.Lookup(Tokens(200, 8), &reused).has_value());
  EXPECT_EQ(reused, 7);  // one token is always left to feed
  // An entry covering an older one replaces it; being 1.25 entries large, it also evicts the least
  // recently used of the others (tokens 0..: the Lookup of 200.. touched that one later).
  const uint64_t before = cache.stats().evicted;
  cache.Insert(Tokens(200, 16 + 4), FilledCache(2, 20));
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().evicted, before + 2);
  EXPECT_LE(cache.stats().bytes, cache.stats().budget_bytes);
  EXPECT_FALSE(cache.Lookup(Tokens(0, 8), &reused).has_value());
  std::vector<int32_t> longer = Tokens(200, 20);
  longer.push_back(7);
  ASSERT_TRUE(cache.Lookup(longer, &reused).has_value());
  EXPECT_EQ(reused, 20);
  // Larger than the whole budget: not kept, nothing evicted for it.
  const uint64_t evicted = cache.stats().evicted;
  cache.Insert(Tokens(500, 64), FilledCache(2, 64));
  EXPECT_EQ(cache.stats().evicted, evicted);
  EXPECT_FALSE(cache.Lookup(Tokens(500, 8), &reused).has_value());
}

TEST(PrefixCacheTest, APrefixCopyHoldsTheFirstPositionsAndGrowsOnItsOwn) {
  KvCache full = FilledCache(1, 12);
  KvCache part = full.Prefix(5);
  EXPECT_EQ(part.length(), 5);
  const at::Tensor extra = at::full({1, 1, 4}, -1.0f);
  auto [k, v] = part.Append(0, extra, extra);
  part.Advance(1);
  ASSERT_EQ(k.size(1), 6);
  EXPECT_TRUE(at::equal(k.narrow(1, 0, 5), at::arange(20, at::kFloat).view({1, 5, 4})));
  EXPECT_TRUE(at::equal(k.narrow(1, 5, 1), extra));
  // The original is untouched.
  auto [fk, fv] = full.Append(0, extra, extra);
  EXPECT_TRUE(at::equal(fk.narrow(1, 5, 1), at::arange(20, 24, at::kFloat).view({1, 1, 4})));
}

}  // namespace
}  // namespace zipmoe::executor
