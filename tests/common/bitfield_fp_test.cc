// F32 and F16 bit-field split (common/bitfield.h): round trips of every F16 pattern and of F32
// values with NaN payloads, infinities, subnormals and -0; the plane layouts against formulas
// written out here independently; SM plane sizes per dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/bitfield.h"

namespace zipmoe {
namespace {

// F32 bit patterns: the special classes first, then random bits (which are NaNs with random payloads,
// subnormals, ... in proportion), then Gaussian weights.
std::vector<uint32_t> F32Patterns(int64_t n, uint64_t seed) {
  std::vector<uint32_t> v = {0x00000000u, 0x80000000u,                            // +0, -0
                             0x7f800000u, 0xff800000u,                            // +Inf, -Inf
                             0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu,  // quiet/signalling NaN payloads
                             0x00000001u, 0x807fffffu, 0x00400000u,               // subnormals
                             0x00800000u, 0x7f7fffffu, 0x3f800000u, 0xbf800001u};  // min normal, max, 1, ~-1
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  while (static_cast<int64_t>(v.size()) < n) {
    if (v.size() % 2 == 0) {
      v.push_back(static_cast<uint32_t>(rng()));
    } else {
      const float f = normal(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      v.push_back(u);
    }
  }
  v.resize(static_cast<size_t>(n));
  return v;
}

TEST(BitfieldFpTest, F32RoundTripsSpecialAndRandomPatterns) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100003}}) {
    const std::vector<uint32_t> in = F32Patterns(n, 5 + static_cast<uint64_t>(n));
    std::vector<uint8_t> e(static_cast<size_t>(n)), sm(SmPlaneBytes(DType::kF32, n));
    SplitF32(in.data(), n, e.data(), sm.data());
    std::vector<uint32_t> out(static_cast<size_t>(n), 0xdeadbeefu);
    MergeF32(e.data(), sm.data(), n, out.data());
    ASSERT_EQ(out, in) << "n=" << n;
  }
}

TEST(BitfieldFpTest, F32PlaneLayoutKnownAnswers) {
  // -1.5f = 0xbfc00000: sign 1, exponent 0x7f, mantissa 0x400000. NaN 0x7fa5a5a5: exponent 0xff.
  const uint32_t in[2] = {0xbfc00000u, 0x7fa5a5a5u};
  uint8_t e[2], sm[6];
  SplitF32(in, 2, e, sm);
  EXPECT_EQ(e[0], 0x7f);
  EXPECT_EQ(e[1], 0xff);
  // lo plane: [n] uint16 little-endian, mantissa bits 15..0.
  EXPECT_EQ(sm[0], 0x00);
  EXPECT_EQ(sm[1], 0x00);
  EXPECT_EQ(sm[2], 0xa5);
  EXPECT_EQ(sm[3], 0xa5);
  // hi plane: sign << 7 | mantissa bits 22..16.
  EXPECT_EQ(sm[4], 0x80 | 0x40);
  EXPECT_EQ(sm[5], 0x25);
}

TEST(BitfieldFpTest, F16RoundTripsAll65536Patterns) {
  std::vector<uint16_t> in(65536);
  for (int i = 0; i < 65536; ++i) in[i] = static_cast<uint16_t>(i);
  std::shuffle(in.begin(), in.end(), std::mt19937_64(3));
  // Every size up to 17 exercises each position of the last, partial group; then all patterns.
  for (int64_t n = 0; n <= 17; ++n) {
    std::vector<uint8_t> e(static_cast<size_t>(n)), sm(SmPlaneBytes(DType::kF16, n));
    SplitF16(in.data(), n, e.data(), sm.data());
    std::vector<uint16_t> out(static_cast<size_t>(n), 0xbeef);
    MergeF16(e.data(), sm.data(), n, out.data());
    ASSERT_TRUE(std::equal(out.begin(), out.end(), in.begin())) << "n=" << n;
  }
  const int64_t n = 65536;
  std::vector<uint8_t> e(n), sm(SmPlaneBytes(DType::kF16, n));
  SplitF16(in.data(), n, e.data(), sm.data());
  std::vector<uint16_t> out(n, 0);
  MergeF16(e.data(), sm.data(), n, out.data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i]) << "pattern 0x" << std::hex << in[i];
  for (uint8_t x : e) ASSERT_LT(x, 32) << "F16 exponents are 5 bits";
}

TEST(BitfieldFpTest, F16PlaneLayoutKnownAnswers) {
  // Nine values: one full group of 8 plus one in a partial group.
  // 0xfc00 = -Inf (s1 e31 m0); 0x83ff = -largest subnormal (s1 e0 m0x3ff); 0x3c00 = 1.0 (e15);
  // 0x7e01 = NaN with payload (s0 e31 m0x201).
  const uint16_t in[9] = {0xfc00, 0x83ff, 0x3c00, 0x7e01, 0x0000, 0x8000, 0x0001, 0x7bff, 0xc200};
  uint8_t e[9], sm[9 + 6];
  SplitF16(in, 9, e, sm);
  const uint8_t want_e[9] = {31, 0, 15, 31, 0, 0, 0, 30, 16};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(e[i], want_e[i]) << i;
  for (int i = 0; i < 9; ++i) EXPECT_EQ(sm[i], in[i] & 0xff) << i;  // lo plane: mantissa bits 7..0
  // t = sign << 2 | mantissa bits 9..8, eight per 3-byte little-endian group.
  const uint32_t t[9] = {4, 4 | 3, 0, 2, 0, 4, 0, 3, 4 | 2};
  uint32_t w0 = 0;
  for (int j = 0; j < 8; ++j) w0 |= t[j] << (3 * j);
  EXPECT_EQ(sm[9] | sm[10] << 8 | sm[11] << 16, static_cast<int>(w0));
  EXPECT_EQ(sm[12], t[8]);  // the partial group: unused fields are zero
  EXPECT_EQ(sm[13], 0);
  EXPECT_EQ(sm[14], 0);
}

// F8_E4M3 (DeepSeek-V3 / GLM FP8 experts): every one of the 256 patterns round-trips, at every
// position parity; the planes against the layout written out independently.
TEST(BitfieldFpTest, F8E4M3RoundTripsAll256PatternsAndKnownLayout) {
  for (const int64_t n : {int64_t{256}, int64_t{255}, int64_t{1}}) {
    std::vector<uint8_t> in(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) in[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
    std::vector<uint8_t> e(in.size()), sm(SmPlaneBytes(DType::kF8E4M3, n), 0xaa), out(in.size());
    SplitF8E4M3(in.data(), n, e.data(), sm.data());
    MergeF8E4M3(e.data(), sm.data(), n, out.data());
    EXPECT_EQ(out, in) << n;
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t x = in[static_cast<size_t>(i)];
      EXPECT_EQ(e[static_cast<size_t>(i)], (x >> 3) & 0xf) << i;
      const int nibble = (sm[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 0xf;
      EXPECT_EQ(nibble, ((x >> 7) << 3) | (x & 7)) << i;  // sign, then the 3 mantissa bits
    }
    if (n % 2 == 1) {
      EXPECT_EQ(sm.back() >> 4, 0) << "the unused high nibble of an odd tail is 0";
    }
  }
  std::vector<uint8_t> all(256), e(256), sm(128), out(256);
  for (int i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  SplitF8E4M3(all.data(), 256, e.data(), sm.data());
  MergeF8E4M3(e.data(), sm.data(), 256, out.data());
  EXPECT_EQ(out, all);
  EXPECT_EQ(SmPlaneBytes(DType::kF8E4M3, 7), 4u);
  EXPECT_EQ(SmBitsPerValue(DType::kF8E4M3), 4);
  EXPECT_TRUE(HasExponentSplit(DType::kF8E4M3));
  EXPECT_FALSE(HasExponentSplit(DType::kF8E5M2));
}

TEST(BitfieldFpTest, SmPlaneBytesPerDType) {
  EXPECT_EQ(SmPlaneBytes(DType::kBF16, 10), 10u);
  EXPECT_EQ(SmPlaneBytes(DType::kF32, 10), 30u);
  EXPECT_EQ(SmPlaneBytes(DType::kF16, 8), 8u + 3);
  EXPECT_EQ(SmPlaneBytes(DType::kF16, 9), 9u + 6);
  EXPECT_EQ(SmPlaneBytes(DType::kF16, 0), 0u);
  EXPECT_EQ(SmPlaneBytes(DType::kF64, 10), 0u);
  EXPECT_EQ(SmBitsPerValue(DType::kBF16), 8);
  EXPECT_EQ(SmBitsPerValue(DType::kF16), 11);
  EXPECT_EQ(SmBitsPerValue(DType::kF32), 24);
  EXPECT_TRUE(HasExponentSplit(DType::kF16));
  EXPECT_FALSE(HasExponentSplit(DType::kI8));
  // Large F16 tensors: exactly 11 bits per value when n is a multiple of 8.
  EXPECT_EQ(SmPlaneBytes(DType::kF16, 8 << 20) * 8, uint64_t{11} * (8 << 20));
}

}  // namespace
}  // namespace zipmoe
