// MXFP4 (gpt-oss's routed experts, issue 41) in common/dtype.h and common/bitfield.h: the dtype's name,
// byte count and value decoders against the OCP MX definitions; SplitMxfp4 / MergeMxfp4 round trips over
// every nibble and every scale byte, with the planes checked against their layout written out here and
// against a block worked by hand; the value check (0xFF scales, fp32 overflow); the scale histogram.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/bitfield.h"
#include "common/dtype.h"

namespace zipmoe {
namespace {

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

// A random MXFP4 tensor of n values (n % 32 == 0): blocks then scales, any byte in either.
std::vector<uint8_t> RandomMxfp4(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, static_cast<uint64_t>(n)));
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  return raw;
}

TEST(Mxfp4DTypeTest, NameSizeAndBytes) {
  EXPECT_EQ(static_cast<int>(DType::kMXFP4), 15);
  EXPECT_STREQ(DTypeName(DType::kMXFP4), "MXFP4");
  auto parsed = ParseDType("MXFP4");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, DType::kMXFP4);
  EXPECT_EQ(DTypeSize(DType::kMXFP4), 0);  // not a whole number of bytes per value
  EXPECT_FALSE(IsSafetensorsDType(DType::kMXFP4));
  EXPECT_TRUE(IsSafetensorsDType(DType::kU8));
  EXPECT_EQ(DTypeBytes(DType::kMXFP4, 32), 17u);  // one block: 16 bytes of nibbles + 1 scale
  EXPECT_EQ(DTypeBytes(DType::kMXFP4, 5760ull * 2880), 5760ull * 2880 / 2 + 5760ull * 2880 / 32);
  EXPECT_EQ(DTypeBytes(DType::kBF16, 10), 20u);
  EXPECT_EQ(DTypeBytes(DType::kF8E4M3, 7), 7u);
  EXPECT_EQ(DTypeBytes(DType::kMXFP4, 0), 0u);
}

// E2M1 by its definition (OCP MX spec, FP4 E2M1: bias 1, subnormal exponent 0, no Inf/NaN), in double.
double E2M1Definition(int code) {
  const int s = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::pow(2.0, e - 1);
  return s != 0 ? -mag : mag;
}

TEST(Mxfp4DTypeTest, EveryE2M1CodeAndE8M0ScaleDecodesToItsDefinition) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 16; ++code) {
    const float got = Fp4E2M1ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(static_cast<double>(got), E2M1Definition(code)) << code;
    EXPECT_EQ(std::fabs(got), magnitudes[code & 7]) << code;
    EXPECT_EQ(std::signbit(got), code >= 8) << code;  // code 8 is -0
    EXPECT_EQ(Bits(Fp4E2M1ToFloat(static_cast<uint8_t>(code | 0xf0))), Bits(got)) << "high bits ignored";
  }
  for (int code = 0; code < 255; ++code) {
    const float got = E8M0ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(static_cast<double>(got), std::pow(2.0, code - 127)) << code;
    if (code > 0) {
      EXPECT_EQ(Bits(got), static_cast<uint32_t>(code) << 23) << code;
    }
  }
  EXPECT_EQ(Bits(E8M0ToFloat(0)), 0x00400000u);  // 2^-127 = 2^22 · 2^-149: a subnormal float32
  EXPECT_EQ(E8M0ToFloat(127), 1.0f);
  EXPECT_TRUE(std::isnan(E8M0ToFloat(0xff)));
}

// The planes of value i, from the raw layout (common/dtype.h) and the plane layout (common/bitfield.h)
// written out independently of SplitMxfp4.
void ExpectPlanesMatchLayout(const std::vector<uint8_t>& raw, int64_t n, const std::vector<uint8_t>& e,
                             const std::vector<uint8_t>& sm) {
  ASSERT_EQ(e.size(), static_cast<size_t>(n + n / 32));
  ASSERT_EQ(sm.size(), static_cast<size_t>(n / 4));
  for (int64_t i = 0; i < n; ++i) {
    const int nibble = (raw[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 15;
    ASSERT_EQ(e[static_cast<size_t>(i)], (nibble >> 1) & 3) << i;
    const int field = (sm[static_cast<size_t>(i / 4)] >> (2 * (i % 4))) & 3;
    ASSERT_EQ(field, (nibble >> 3) << 1 | (nibble & 1)) << i;  // sign in bit 1, mantissa in bit 0
  }
  for (int64_t g = 0; g < n / 32; ++g)  // the scales follow the fields in the E plane
    ASSERT_EQ(e[static_cast<size_t>(n + g)], raw[static_cast<size_t>(n / 2 + g)]) << "scale " << g;
}

TEST(BitfieldMxfp4Test, RoundTripsEveryNibbleAndScaleWithTheDocumentedLayout) {
  // 256 blocks: block g's 16 bytes run through all 256 byte values (every nibble pair, both positions),
  // its scale is g (every E8M0 code, 0xFF included: the split keeps bytes, it does not interpret them).
  const int64_t n = 256 * 32;
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, n));
  for (int64_t j = 0; j < n / 2; ++j) raw[static_cast<size_t>(j)] = static_cast<uint8_t>(j * 7 + j / 256);
  for (int64_t g = 0; g < n / 32; ++g) raw[static_cast<size_t>(n / 2 + g)] = static_cast<uint8_t>(g);
  std::vector<uint8_t> e(EPlaneBytes(DType::kMXFP4, n), 0xaa), sm(SmPlaneBytes(DType::kMXFP4, n), 0xaa),
      out(raw.size(), 0x55);
  SplitMxfp4(raw.data(), n, e.data(), sm.data());
  ExpectPlanesMatchLayout(raw, n, e, sm);
  MergeMxfp4(e.data(), sm.data(), n, out.data());
  EXPECT_EQ(out, raw);
  for (const int64_t size : {int64_t{0}, int64_t{32}, int64_t{64}, int64_t{96}, int64_t{32} * 1001}) {
    const std::vector<uint8_t> r = RandomMxfp4(size, static_cast<uint64_t>(size) + 1);
    std::vector<uint8_t> pe(EPlaneBytes(DType::kMXFP4, size)), ps(SmPlaneBytes(DType::kMXFP4, size)), back(r.size());
    SplitMxfp4(r.data(), size, pe.data(), ps.data());
    ExpectPlanesMatchLayout(r, size, pe, ps);
    MergeMxfp4(pe.data(), ps.data(), size, back.data());
    EXPECT_EQ(back, r) << size;
  }
}

TEST(BitfieldMxfp4Test, OneBlockWorkedByHand) {
  // Byte 0 = 0x21: value 0 = nibble 1 (+0.5: e 0, sign 0, m 1), value 1 = nibble 2 (+1.0: e 1, m 0).
  // Byte 1 = 0xF8: value 2 = nibble 8 (-0: e 0, sign 1, m 0), value 3 = nibble 0xF (-6: e 3, sign 1, m 1).
  // The other 28 values are 0; the scale is 128 (x2).
  std::vector<uint8_t> raw(17, 0);
  raw[0] = 0x21;
  raw[1] = 0xf8;
  raw[16] = 128;
  std::vector<uint8_t> e(EPlaneBytes(DType::kMXFP4, 32)), sm(SmPlaneBytes(DType::kMXFP4, 32));
  ASSERT_EQ(e.size(), 33u);
  ASSERT_EQ(sm.size(), 8u);
  SplitMxfp4(raw.data(), 32, e.data(), sm.data());
  EXPECT_EQ(e[0], 0);
  EXPECT_EQ(e[1], 1);
  EXPECT_EQ(e[2], 0);
  EXPECT_EQ(e[3], 3);
  // Fields t = sign << 1 | m: 1, 0, 2, 3 at bits 0-1, 2-3, 4-5, 6-7 of SM byte 0.
  EXPECT_EQ(sm[0], 1 | 0 << 2 | 2 << 4 | 3 << 6);
  for (int k = 1; k < 8; ++k) EXPECT_EQ(sm[static_cast<size_t>(k)], 0) << k;
  EXPECT_EQ(e[32], 128);  // the scale, verbatim after the n exponent fields
  EXPECT_EQ(Fp4E2M1ToFloat(raw[0] & 15) * E8M0ToFloat(raw[16]), 1.0f);
  EXPECT_EQ(Fp4E2M1ToFloat(raw[1] >> 4) * E8M0ToFloat(raw[16]), -12.0f);
}

TEST(BitfieldMxfp4Test, PlaneSizesAndEntropyBound) {
  EXPECT_TRUE(HasExponentSplit(DType::kMXFP4));
  EXPECT_EQ(SmPlaneBytes(DType::kMXFP4, 32), 8u);
  EXPECT_EQ(SmPlaneBytes(DType::kMXFP4, 2880 * 5760), 2880u * 5760 / 4);
  EXPECT_EQ(SmPlaneBytes(DType::kMXFP4, 0), 0u);
  EXPECT_EQ(SmPlaneBytes(DType::kMXFP4, 48), 0u);  // no layout for partial blocks
  EXPECT_EQ(EPlaneBytes(DType::kMXFP4, 32), 33u);
  EXPECT_EQ(EPlaneBytes(DType::kMXFP4, 2880 * 5760), 2880u * 5760 + 2880u * 5760 / 32);
  EXPECT_EQ(EPlaneBytes(DType::kMXFP4, 48), 0u);
  EXPECT_EQ(EPlaneBytes(DType::kMXFP4, 0), 0u);
  EXPECT_EQ(EPlaneBytes(DType::kBF16, 7), 7u);
  EXPECT_EQ(EPlaneBytes(DType::kF8E4M3, 7), 7u);
  EXPECT_EQ(EPlaneBytes(DType::kU8, 7), 0u);  // no split
  EXPECT_EQ(SmBitsPerValue(DType::kMXFP4), 2);
  EXPECT_EQ(RawBitsPerValue(DType::kMXFP4), 4.25);
  EXPECT_EQ(SmBitsPerValue(DType::kF16), 11);
  EXPECT_EQ(RawBitsPerValue(DType::kBF16), 16.0);
  // SmBitsPerValue is exact for whole blocks; the raw tensor is the planes' bits less the exponent
  // fields' unused 6 bits a value.
  EXPECT_EQ(static_cast<double>(SmPlaneBytes(DType::kMXFP4, 3200)) * 8 / 3200, SmBitsPerValue(DType::kMXFP4));
  EXPECT_EQ(static_cast<double>(SmPlaneBytes(DType::kMXFP4, 3200) + EPlaneBytes(DType::kMXFP4, 3200)) * 8,
            (RawBitsPerValue(DType::kMXFP4) + 6) * 3200);
}

TEST(BitfieldMxfp4Test, EChunkRangesPutTheScalesInAChunkOfTheirOwn) {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  // K - 1 ranges over the n fields (ShardRanges), then [n, n + n/32).
  EXPECT_EQ(EChunkRanges(DType::kMXFP4, 3200, 4), (Ranges{{0, 1067}, {1067, 1067}, {2134, 1066}, {3200, 100}}));
  EXPECT_EQ(EChunkRanges(DType::kMXFP4, 32, 2), (Ranges{{0, 32}, {32, 1}}));
  // Other dtypes: ShardRanges over the n exponent bytes.
  EXPECT_EQ(EChunkRanges(DType::kBF16, 10, 4), ShardRanges(10, 4));
  EXPECT_EQ(EChunkRanges(DType::kF8E4M3, 3200, 4), ShardRanges(3200, 4));
  // Together they cover the E plane exactly.
  for (const int k : {2, 3, 5, 16}) {
    int64_t next = 0;
    for (const auto& [offset, count] : EChunkRanges(DType::kMXFP4, 32 * 77, k)) {
      EXPECT_EQ(offset, next);
      next += count;
    }
    EXPECT_EQ(static_cast<uint64_t>(next), EPlaneBytes(DType::kMXFP4, 32 * 77)) << k;
  }
}

TEST(BitfieldMxfp4DeathTest, PartialBlocksAreABug) {
  std::vector<uint8_t> raw(64), e(64), sm(64);
  EXPECT_DEATH(SplitMxfp4(raw.data(), 48, e.data(), sm.data()), "whole blocks of 32");
  EXPECT_DEATH(MergeMxfp4(e.data(), sm.data(), 33, raw.data()), "whole blocks of 32");
  EXPECT_DEATH(EChunkRanges(DType::kMXFP4, 64, 1), "at least 2");  // compress refuses K = 1 for MXFP4
  EXPECT_DEATH(EChunkRanges(DType::kMXFP4, 48, 4), "multiple of 32");
}

TEST(BitfieldMxfp4Test, CheckMxfp4ValuesRefusesNanScalesAndOverflowNamingTheBlock) {
  const int64_t n = 4 * 32;
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, n), 0x77);  // every nibble +6
  uint8_t* scales = raw.data() + n / 2;
  for (int g = 0; g < 4; ++g) scales[g] = static_cast<uint8_t>(250 + g);  // 250..253: 253 overflows with 6
  Status st = CheckMxfp4Values(raw.data(), n);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block 3 (values [96, 128))"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("nibble 0x7 at scale 253"), std::string::npos) << st.message();
  // 6 * 2^125 and 3 * 2^126 are finite; 1.5 * 2^127 too; 2 * 2^127 and -4 * 2^126 are not.
  scales[3] = 252;
  EXPECT_TRUE(CheckMxfp4Values(raw.data(), n).ok());
  std::memset(raw.data() + 48, 0x55, 16);  // block 3: +3.0 everywhere
  scales[3] = 253;
  EXPECT_TRUE(CheckMxfp4Values(raw.data(), n).ok());
  std::memset(raw.data() + 48, 0x33, 16);  // +1.5
  scales[3] = 254;
  EXPECT_TRUE(CheckMxfp4Values(raw.data(), n).ok());
  raw[63] = 0x43;  // value 127: +2.0 at 2^127
  EXPECT_FALSE(CheckMxfp4Values(raw.data(), n).ok());
  raw[63] = 0x33;
  raw[50] = 0xe3;  // value 101: -4.0
  scales[3] = 253;
  st = CheckMxfp4Values(raw.data(), n);
  EXPECT_NE(st.message().find("nibble 0xe at scale 253"), std::string::npos) << st.message();
  raw[50] = 0x33;
  scales[1] = 0xff;
  st = CheckMxfp4Values(raw.data(), n);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block 1 (values [32, 64)): scale 0xFF is NaN"), std::string::npos) << st.message();
  EXPECT_EQ(CheckMxfp4Values(raw.data(), 48).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(CheckMxfp4Values(nullptr, 0).ok());
}

TEST(BitfieldMxfp4Test, ScaleAndExponentHistograms) {
  const int64_t n = 64 * 32;
  std::vector<uint8_t> raw = RandomMxfp4(n, 9);
  uint64_t scales[256] = {}, want[256] = {};
  for (int64_t g = 0; g < n / 32; ++g) ++want[raw[static_cast<size_t>(n / 2 + g)]];
  AccumulateMxfp4ScaleHistogram(raw.data(), n, scales);
  for (int s = 0; s < 256; ++s) EXPECT_EQ(scales[s], want[s]) << s;
  AccumulateMxfp4ScaleHistogram(raw.data(), 40, scales);  // not whole blocks: nothing added
  for (int s = 0; s < 256; ++s) EXPECT_EQ(scales[s], want[s]) << s;

  std::vector<uint8_t> e(EPlaneBytes(DType::kMXFP4, n)), sm(SmPlaneBytes(DType::kMXFP4, n));
  SplitMxfp4(raw.data(), n, e.data(), sm.data());
  uint64_t in_plane[256] = {};  // the scales as the E plane carries them
  AccumulateHistogram(e.data() + n, n / 32, in_plane);
  for (int s = 0; s < 256; ++s) EXPECT_EQ(in_plane[s], want[s]) << s;
  uint64_t exponents[256] = {};
  AccumulateHistogram(e.data(), n, exponents);
  uint64_t total = 0;
  for (int s = 0; s < 4; ++s) total += exponents[s];
  EXPECT_EQ(total, static_cast<uint64_t>(n));  // only 0..3
  EXPECT_NEAR(ShannonEntropyBits(exponents), 2.0, 0.02);  // random nibbles: uniform exponents
}

}  // namespace
}  // namespace zipmoe
