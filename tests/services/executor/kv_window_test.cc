// Sliding-window layers whose cache holds only their window (KvCache::set_trim_windows, the CPU executor's
// default; GeneratorOptions::kv_window_full turns it off): the rows a trimmed layer keeps and drops, the
// attention over a cache that starts past position 0, the same logits bit for bit as a cache of every
// position (gpt_oss, afmoe, a mixtral with a short window; prefill, decode, prompts in pieces, a BF16
// cache), fewer bytes counted by the KV budget, and prefix reuse only where the windows are whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/executor/attention.h"
#include "services/executor/cpu_ops.h"
#include "services/executor/generator.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;

constexpr int64_t kHeads = 2, kDk = 4, kDv = 3;

// The key row of head h at position p, element i (values: the same + 0.5): distinct and exact in float32.
float KeyAt(int64_t p, int64_t h, int64_t i) { return static_cast<float>(p * 100 + h * 10 + i); }

// Appends positions [from, to) to layer 0 of `cache` in one Append (window `window`) and advances it.
std::pair<at::Tensor, at::Tensor> AppendRange(KvCache& cache, int64_t from, int64_t to, int64_t window) {
  at::Tensor k = at::empty({kHeads, to - from, kDk});
  at::Tensor v = at::empty({kHeads, to - from, kDv});
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t p = from; p < to; ++p) {
      for (int64_t i = 0; i < kDk; ++i) k[h][p - from][i] = KeyAt(p, h, i);
      for (int64_t i = 0; i < kDv; ++i) v[h][p - from][i] = KeyAt(p, h, i) + 0.5f;
    }
  auto views = cache.Append(0, k, v, window);
  cache.Advance(to - from);
  return views;
}

// Every row the layer's views hold is the position it stands for.
void ExpectRows(const KvCache& cache, const std::pair<at::Tensor, at::Tensor>& views, const std::string& what) {
  const int64_t first = cache.first_position(0);
  ASSERT_EQ(views.first.size(1), cache.length() - first) << what;
  for (int64_t h = 0; h < kHeads; ++h)
    for (int64_t r = 0; r < views.first.size(1); ++r) {
      ASSERT_EQ(views.first[h][r][kDk - 1].item<float>(), KeyAt(first + r, h, kDk - 1)) << what << " row " << r;
      ASSERT_EQ(views.second[h][r][0].item<float>(), KeyAt(first + r, h, 0) + 0.5f) << what << " row " << r;
    }
}

TEST(KvWindowCacheTest, ATrimmedLayerKeepsItsWindowInBoundedRows) {
  constexpr int64_t kWindow = 8;
  KvCache cache(1);
  cache.set_trim_windows(true);
  const int64_t room = KvCache::WindowCapacity(kWindow, 1, 0);
  EXPECT_EQ(room, kWindow - 1 + 1 + 64);
  const int64_t row_bytes = kHeads * (kDk + kDv) * 4;
  int64_t most_bytes = 0;
  for (int64_t p = 0; p < 400; ++p) {
    const auto views = AppendRange(cache, p, p + 1, kWindow);
    ExpectRows(cache, views, "decode " + std::to_string(p));
    // Every key the query at the appended position sees is held.
    EXPECT_LE(cache.first_position(0), std::max<int64_t>(0, p - (kWindow - 1)));
    most_bytes = std::max(most_bytes, cache.bytes());
  }
  EXPECT_GT(cache.first_position(0), 300);
  EXPECT_EQ(most_bytes, room * row_bytes) << "the rows stopped growing at WindowCapacity";
  // A prefill of 100 positions holds the window before it and all of them; the next decode step
  // shrinks back.
  ExpectRows(cache, AppendRange(cache, 400, 500, kWindow), "prefill");
  EXPECT_EQ(cache.bytes(), KvCache::WindowCapacity(kWindow, 100, 0) * row_bytes);
  ExpectRows(cache, AppendRange(cache, 500, 501, kWindow), "after the prefill");
  EXPECT_EQ(cache.bytes(), room * row_bytes);
  EXPECT_EQ(cache.length_bytes(), (501 - cache.first_position(0)) * row_bytes);

  // A prefix is cut only where the window of its next query is whole.
  const int64_t earliest = cache.earliest_prefix();
  EXPECT_EQ(earliest, cache.first_position(0) + kWindow - 1);
  EXPECT_THROW(cache.Prefix(earliest - 1), c10::Error);
  KvCache cut = cache.Prefix(earliest);
  EXPECT_EQ(cut.length(), earliest);
  EXPECT_EQ(cut.first_position(0), cache.first_position(0));
  // The copy grows on its own from there, with the same rows as a cache of every position.
  ExpectRows(cut, AppendRange(cut, earliest, earliest + 3, kWindow), "the cut copy");
  EXPECT_THROW(AppendRange(cut, earliest + 3, earliest + 4, kWindow + 1), c10::Error) << "a window that changes";
}

// A continuing copy (a prefix-cache hit) of a trimmed layer holds only the window - 1 rows before its
// length; a plain copy every row from the layer's first; an untrimmed cache every row either way.
TEST(KvWindowCacheTest, AContinuingCopyHoldsOnlyTheWindowBeforeIt) {
  constexpr int64_t kWindow = 8;
  const int64_t row_bytes = kHeads * (kDk + kDv) * 4;
  KvCache cache(1), full(1);
  cache.set_trim_windows(true);
  AppendRange(cache, 0, 100, kWindow);  // one prefill: every row held, from 0
  AppendRange(full, 0, 100, kWindow);
  ASSERT_EQ(cache.first_position(0), 0);
  KvCache plain = cache.Prefix(60);
  EXPECT_EQ(plain.first_position(0), 0);
  EXPECT_EQ(plain.bytes(), 60 * row_bytes);
  EXPECT_EQ(plain.earliest_prefix(), 1);
  KvCache next = cache.Prefix(60, /*continuing=*/true);
  EXPECT_EQ(next.length(), 60);
  EXPECT_EQ(next.first_position(0), 60 - (kWindow - 1));
  EXPECT_EQ(next.bytes(), (kWindow - 1) * row_bytes);
  EXPECT_EQ(next.earliest_prefix(), 60) << "it serves its own length only";
  // It goes on with the rows a cache of every position has there, a position and a prefill at a time.
  ExpectRows(next, AppendRange(next, 60, 61, kWindow), "a decode step after the copy");
  ExpectRows(next, AppendRange(next, 61, 90, kWindow), "a prefill after the copy");
  EXPECT_EQ(next.first_position(0), 61 - (kWindow - 1));
  // Shorter than the window: nothing to drop.
  EXPECT_EQ(cache.Prefix(5, true).first_position(0), 0);
  EXPECT_EQ(cache.Prefix(5, true).bytes(), 5 * row_bytes);
  // An untrimmed cache (GPU, --swa-full) copies every row.
  KvCache full_next = full.Prefix(60, true);
  EXPECT_EQ(full_next.first_position(0), 0);
  EXPECT_EQ(full_next.bytes(), 60 * row_bytes);
}

TEST(KvWindowCacheTest, PagesAndUntrimmedCaches) {
  KvCache paged(1);
  paged.set_trim_windows(true);
  paged.set_page_positions(64);
  for (int64_t p = 0; p < 300; ++p) AppendRange(paged, p, p + 1, 128);
  EXPECT_EQ(KvCache::WindowCapacity(128, 1, 64), 192);  // 127 + 1 + 64, three whole pages
  EXPECT_EQ(KvCache::WindowCapacity(128, 2, 64), 256);  // one more row: a fourth page
  EXPECT_EQ(paged.bytes(), 192 * kHeads * (kDk + kDv) * 4);
  EXPECT_GT(paged.first_position(0), 0);
  // Off (the default of a bare KvCache), or no window: every position from 0.
  KvCache full(1), no_window(1);
  no_window.set_trim_windows(true);
  for (int64_t p = 0; p < 300; p += 30) {
    ExpectRows(full, AppendRange(full, p, p + 30, 8), "full");
    ExpectRows(no_window, AppendRange(no_window, p, p + 30, 0), "no window");
  }
  EXPECT_EQ(full.first_position(0), 0);
  EXPECT_EQ(no_window.first_position(0), 0);
  EXPECT_EQ(full.earliest_prefix(), 1);
}

// cpu::AttendCausal over rows that start at key_begin gives the bits of the same rows in a cache from 0.
TEST(KvWindowCacheTest, AttentionFromAFirstPositionEqualsTheWholeCache) {
  constexpr int64_t n_heads = 4, n_kv = 2, dk = 16, dv = 8, total = 90, t = 5, window = 12, pos0 = total - t;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> q(n_heads * t * dk), k(n_kv * total * dk), v(n_kv * total * dv);
  for (float& x : q) x = normal(rng);
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  const auto run = [&](int64_t key_begin, const std::vector<float>& sinks) {
    std::vector<float> kk, vv;  // rows [key_begin, total) only
    for (int64_t h = 0; h < n_kv; ++h) {
      kk.insert(kk.end(), k.begin() + (h * total + key_begin) * dk, k.begin() + (h + 1) * total * dk);
      vv.insert(vv.end(), v.begin() + (h * total + key_begin) * dv, v.begin() + (h + 1) * total * dv);
    }
    std::vector<float> out(t * n_heads * dv);
    cpu::AttentionArgs a;
    a.q = q.data();
    a.n_heads = n_heads;
    a.t = t;
    a.dk = dk;
    a.k = kk.data();
    a.v = vv.data();
    a.k_head_stride = (total - key_begin) * dk;
    a.v_head_stride = (total - key_begin) * dv;
    a.n_kv = n_kv;
    a.total = total;
    a.dv = dv;
    a.pos0 = pos0;
    a.scale = 0.25f;
    a.window = window;
    a.key_begin = key_begin;
    a.sinks = sinks.empty() ? nullptr : sinks.data();
    a.out = out.data();
    cpu::AttendCausal(a);
    return out;
  };
  for (const std::vector<float>& sinks : {std::vector<float>{}, std::vector<float>{0.5f, -1.0f, 2.0f, 0.0f}}) {
    const std::vector<float> whole = run(0, sinks);
    for (int64_t key_begin : {int64_t{1}, pos0 - window - 3, pos0 - window + 1})
      EXPECT_TRUE(test::BitEqual(run(key_begin, sinks), whole)) << "key_begin " << key_begin;
  }
  EXPECT_THROW(run(pos0 - window + 2, {}), std::invalid_argument) << "a key the first query sees is missing";
}

std::unique_ptr<Generator> Make(const std::string& dir, bool full, bool bf16 = false, int64_t prefix_bytes = 0) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = test::kThreads;
  options.kv_window_full = full;
  options.kv_cache_bf16 = bf16;
  options.prefix_cache_bytes = prefix_bytes;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

// A model directory of `arch` with sliding windows: gpt_oss and afmoe as synth writes them (window 8 on
// their sliding layers), mixtral with sliding_window 16 on every layer.
std::string WindowedModelDir(const std::string& arch) {
  if (arch != "mixtral") return TinyModelDir(arch);
  const std::string dir = ::testing::TempDir() + "/kv_window_mixtral16";
  std::filesystem::remove_all(dir);
  testing::CopyModelWithConfig(TinyModelDir("mixtral"), dir, [](nlohmann::json& c) { c["sliding_window"] = 16; });
  return dir;
}

class KvWindowModelTest : public ::testing::TestWithParam<std::string> {};

// Prefill, many decode steps (the rows moved to the front again and again), then pieces: every position's
// logits equal a cache of every position's, bit for bit.
TEST_P(KvWindowModelTest, TheSameLogitsAsACacheOfEveryPosition) {
  const std::string dir = WindowedModelDir(GetParam());
  for (bool bf16 : {false, true}) {
    auto trimmed = Make(dir, false, bf16);
    auto full = Make(dir, true, bf16);
    ASSERT_TRUE(trimmed && full);
    const int64_t vocab = trimmed->config().vocab_size;
    std::vector<std::vector<int32_t>> chunks = {test::PromptIds(150, 17, vocab)};
    for (int32_t i = 0; i < 160; ++i) chunks.push_back({static_cast<int32_t>((i * 37) % (vocab - 1) + 1)});
    chunks.push_back(test::PromptIds(40, 5, vocab));
    for (int32_t i = 0; i < 20; ++i) chunks.push_back({static_cast<int32_t>((i * 101) % (vocab - 1) + 1)});
    auto want = full->ForwardChunks(chunks);
    auto got = trimmed->ForwardChunks(chunks);
    ASSERT_TRUE(want.ok() && got.ok()) << want.status().ToString() << got.status().ToString();
    EXPECT_TRUE(test::BitEqual(*got, *want)) << GetParam() << (bf16 ? " bf16" : " f32");
    // The budget counts the windowed layers' rows (gpt_oss: half the layers; afmoe: three in four; mixtral: all).
    EXPECT_EQ(trimmed->kv_budget_stats().bytes_per_position, full->kv_budget_stats().bytes_per_position);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, KvWindowModelTest, ::testing::Values("gpt_oss", "afmoe", "mixtral"));

// Under a KV budget that holds 256 positions of every layer, a sequence of the trimmed cache goes on
// further (its sliding layers stop growing), with the same tokens as far as the full one went.
TEST(KvWindowBudgetTest, ASequenceGoesFurtherInTheSameBudget) {
  const std::string dir = TinyModelDir("gpt_oss");
  auto trimmed = Make(dir, false);
  auto full = Make(dir, true);
  ASSERT_TRUE(trimmed && full);
  const KvBudgetCounters counters = full->kv_budget_stats();
  const int64_t budget = 256 * counters.bytes_per_position + counters.fixed_bytes;
  ASSERT_TRUE(trimmed->set_kv_budget_bytes(budget).ok());
  ASSERT_TRUE(full->set_kv_budget_bytes(budget).ok());
  const std::vector<int32_t> prompt = test::PromptIds(20, 3, trimmed->config().vocab_size);
  const GenerationResult a = test::RunSequence(*full, prompt, 600).result;
  const GenerationResult b = test::RunSequence(*trimmed, prompt, 600).result;
  EXPECT_EQ(static_cast<int64_t>(prompt.size() + a.generated_ids.size()), 256 + 1) << "the full cache's stop";
  // Half of gpt_oss's layers slide (window 8: 128 rows in pages of 64): 256 = p/2 + 128/2 -> p = 384.
  EXPECT_EQ(static_cast<int64_t>(prompt.size() + b.generated_ids.size()), 384 + 1) << "the trimmed cache's stop";
  ASSERT_LT(a.generated_ids.size(), b.generated_ids.size());
  EXPECT_TRUE(std::equal(a.generated_ids.begin(), a.generated_ids.end(), b.generated_ids.begin()));
}

// Prefix reuse: a next turn continues from the finished cache where its windows are whole, a prompt that
// shares only the first prompt (gpt-oss drops a turn's reasoning from the history) from the copy kept
// after that prompt; the same tokens and log-probabilities as a run without a prefix cache.
TEST(KvWindowPrefixTest, ReusedWhereTheWindowsAreWhole) {
  const std::string dir = TinyModelDir("gpt_oss");
  auto cached = Make(dir, false, false, int64_t{256} << 20);
  auto plain = Make(dir, false);
  ASSERT_TRUE(cached && plain);
  const int64_t vocab = cached->config().vocab_size;
  const std::vector<int32_t> turn1 = test::PromptIds(100, 11, vocab);
  const GenerationResult first = test::RunSequence(*cached, turn1, 150).result;
  ASSERT_EQ(first.generated_ids.size(), 150u);
  const auto check = [&](const std::vector<int32_t>& prompt, int64_t reused, const std::string& what) {
    const test::SequenceRun got = test::RunSequence(*cached, prompt, 6);
    EXPECT_EQ(got.result.cached_prompt_tokens, reused) << what;
    test::ExpectSameSampledTokens(got.tokens, test::RunSequence(*plain, prompt, 6).tokens, what);
  };
  // The next turn: history = the prompt and the answer but its last token, then new tokens.
  std::vector<int32_t> turn2 = turn1;
  turn2.insert(turn2.end(), first.generated_ids.begin(), first.generated_ids.end());
  const auto history = static_cast<int64_t>(turn2.size()) - 1;
  for (int32_t t : {77, 8, 1234}) turn2.push_back(t);
  check(turn2, history, "next turn");
  // The first prompt and other tokens: from the snapshot after the first prompt.
  std::vector<int32_t> other = turn1;
  for (int32_t t : {2047, 2046, 2045}) other.push_back(t);
  check(other, static_cast<int64_t>(turn1.size()), "the first prompt, another answer");
  // Part of the first prompt: the snapshot (100 positions, not trimmed yet) is cut there.
  std::vector<int32_t> part(turn1.begin(), turn1.begin() + 50);
  part.push_back(9);
  check(part, 50, "part of the first prompt");
  // Within the answer, before where the finished cache's windows are whole: from the snapshot only.
  std::vector<int32_t> mid = turn1;
  mid.insert(mid.end(), first.generated_ids.begin(), first.generated_ids.begin() + 20);
  mid.push_back(9);
  check(mid, static_cast<int64_t>(turn1.size()), "within the answer");
}

}  // namespace
}  // namespace zipmoe::executor
