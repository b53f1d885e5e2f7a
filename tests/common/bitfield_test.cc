#include "common/bitfield.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/dtype.h"

namespace zipmoe {
namespace {

using Range = std::pair<int64_t, int64_t>;

std::vector<uint16_t> AllBf16Patterns() {
  std::vector<uint16_t> all(65536);
  std::iota(all.begin(), all.end(), uint16_t{0});
  return all;
}

TEST(BitfieldTest, SplitMergeRoundTripsAll65536Patterns) {
  const std::vector<uint16_t> in = AllBf16Patterns();
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<uint8_t> e(n), sm(n);
  std::vector<uint16_t> out(n, 0xdead);
  SplitBf16(in.data(), n, e.data(), sm.data());
  MergeBf16(e.data(), sm.data(), n, out.data());
  ASSERT_EQ(0, std::memcmp(in.data(), out.data(), n * sizeof(uint16_t)));
  // Every (e, sm) pair occurs exactly once: the split is a bijection.
  std::vector<int> seen(65536, 0);
  for (int64_t i = 0; i < n; ++i) ++seen[e[i] << 8 | sm[i]];
  for (int pair = 0; pair < 65536; ++pair) ASSERT_EQ(seen[pair], 1) << "pair " << pair;
}

TEST(BitfieldTest, SplitKnownAnswers) {
  struct Case {
    const char* what;
    uint16_t bf16;
    uint8_t e, sm;
  };
  const Case cases[] = {
      {"1.0", 0x3F80, 0x7F, 0x00},
      {"-2.0", 0xC000, 0x80, 0x80},
      {"+0", 0x0000, 0x00, 0x00},
      {"-0", 0x8000, 0x00, 0x80},
      {"+Inf", 0x7F80, 0xFF, 0x00},
      {"-Inf", 0xFF80, 0xFF, 0x80},
      {"quiet NaN", 0x7FC0, 0xFF, 0x40},
      {"negative NaN payload 1", 0xFF81, 0xFF, 0x81},
      {"smallest subnormal", 0x0001, 0x00, 0x01},
      {"largest negative subnormal", 0x807F, 0x00, 0xFF},
      {"1.5", 0x3FC0, 0x7F, 0x40},
      {"0.02 (rounded)", 0x3CA4, 0x79, 0x24},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    uint8_t e = 0, sm = 0;
    SplitBf16(&c.bf16, 1, &e, &sm);
    EXPECT_EQ(e, c.e);
    EXPECT_EQ(sm, c.sm);
    uint16_t back = 0;
    MergeBf16(&c.e, &c.sm, 1, &back);
    EXPECT_EQ(back, c.bf16);
  }
  EXPECT_EQ(FloatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(FloatToBf16(0.02f), 0x3CA4);
}

TEST(BitfieldTest, SplitMergeHandleUnalignedTails) {
  std::mt19937_64 rng(7);
  std::vector<uint16_t> in(1027);
  for (auto& x : in) x = static_cast<uint16_t>(rng());
  for (int64_t offset : {0, 1, 3}) {
    for (int64_t n : {0, 1, 15, 16, 17, 1000}) {
      std::vector<uint8_t> e(n + 3), sm(n + 3);
      std::vector<uint16_t> out(n + 3);
      SplitBf16(in.data() + offset, n, e.data() + offset, sm.data() + offset);
      MergeBf16(e.data() + offset, sm.data() + offset, n, out.data() + offset);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[offset + i], in[offset + i]) << "offset " << offset << " i " << i;
    }
  }
}

TEST(BitfieldTest, ShardRangesCoverContiguouslyWithBalancedSizes) {
  for (int64_t n : {1, 2, 7, 16, 100, 720896, 720897}) {
    for (int k : {1, 2, 3, 4, 8, 16}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k));
      const auto ranges = ShardRanges(n, k);
      ASSERT_EQ(static_cast<int64_t>(ranges.size()), std::min<int64_t>(k, n));
      int64_t next = 0, min_count = n, max_count = 0;
      for (const auto& [offset, count] : ranges) {
        EXPECT_EQ(offset, next);
        EXPECT_GT(count, 0);
        next = offset + count;
        min_count = std::min(min_count, count);
        max_count = std::max(max_count, count);
      }
      EXPECT_EQ(next, n);
      EXPECT_LE(max_count - min_count, 1);
      for (size_t i = 1; i < ranges.size(); ++i) EXPECT_GE(ranges[i - 1].second, ranges[i].second);  // larger first
    }
  }
}

TEST(BitfieldTest, ShardRangesClampK) {
  const auto clamped = ShardRanges(3, 16);  // K clamped to n
  ASSERT_EQ(clamped.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(clamped[i], Range(i, 1));
  const auto empty = ShardRanges(0, 4);  // n = 0: one empty range
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0], Range(0, 0));
  for (int k : {0, -5}) {  // K < 1 means one shard
    const auto one = ShardRanges(10, k);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0], Range(0, 10));
  }
  const auto uneven = ShardRanges(10, 4);  // 3, 3, 2, 2
  ASSERT_EQ(uneven.size(), 4u);
  EXPECT_EQ(uneven[0], Range(0, 3));
  EXPECT_EQ(uneven[1], Range(3, 3));
  EXPECT_EQ(uneven[2], Range(6, 2));
  EXPECT_EQ(uneven[3], Range(8, 2));
}

TEST(BitfieldTest, ShannonEntropyKnownAnswers) {
  uint64_t hist[256] = {};
  EXPECT_EQ(ShannonEntropyBits(hist), 0.0);  // empty
  hist[42] = 1000;
  EXPECT_EQ(ShannonEntropyBits(hist), 0.0);  // single symbol
  uint64_t uniform4[256] = {};
  for (int s : {1, 50, 200, 255}) uniform4[s] = 25;
  EXPECT_DOUBLE_EQ(ShannonEntropyBits(uniform4), 2.0);
  uint64_t uniform256[256];
  for (auto& c : uniform256) c = 3;
  EXPECT_DOUBLE_EQ(ShannonEntropyBits(uniform256), 8.0);
  uint64_t skewed[256] = {};  // p = 1/2, 1/4, 1/4 -> 1.5 bits
  skewed[0] = 2;
  skewed[1] = 1;
  skewed[2] = 1;
  EXPECT_DOUBLE_EQ(ShannonEntropyBits(skewed), 1.5);
}

TEST(BitfieldTest, AccumulateHistogramAddsCounts) {
  uint64_t hist[256] = {};
  hist[9] = 5;  // existing counts are kept
  std::vector<uint8_t> data;
  for (int i = 0; i < 1003; ++i) data.push_back(static_cast<uint8_t>(i % 7 == 0 ? 9 : i % 251));
  AccumulateHistogram(data.data(), static_cast<int64_t>(data.size()), hist);
  uint64_t want[256] = {};
  want[9] = 5;
  for (uint8_t b : data) ++want[b];
  for (int s = 0; s < 256; ++s) ASSERT_EQ(hist[s], want[s]) << "symbol " << s;
  AccumulateHistogram(data.data(), 0, hist);  // n = 0 changes nothing
  for (int s = 0; s < 256; ++s) ASSERT_EQ(hist[s], want[s]) << "symbol " << s;
}

TEST(BitfieldTest, GaussianExponentPlaneEntropyMatchesPaper) {
  // N(0, 0.02^2) BF16 weights: the exponent plane carries ~2.55 bits (ZipMoE Fig. 2: 2.55-2.65).
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(1 << 20);
  for (auto& x : w) x = FloatToBf16(normal(rng));
  std::vector<uint8_t> e(w.size()), sm(w.size());
  SplitBf16(w.data(), static_cast<int64_t>(w.size()), e.data(), sm.data());
  uint64_t hist[256] = {};
  AccumulateHistogram(e.data(), static_cast<int64_t>(e.size()), hist);
  const double h = ShannonEntropyBits(hist);
  EXPECT_GT(h, 2.50);
  EXPECT_LT(h, 2.60);
}

}  // namespace
}  // namespace zipmoe
