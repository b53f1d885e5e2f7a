// BF16-weight CPU matmuls (kernels/bf16_gemm.h): every ISA variant compiled in and supported here
// is bit-identical to Bf16GemmReference for every weight encoding (BF16, E/SM planes, F32), at every
// tile remainder, token block, stride and row range; the reference is a dot product (known answers,
// a float64 check); results do not depend on the row split, on the batch a token is in, or on the
// encoding of the same weight values.
// Built for the host and, cross-compiled, for AArch64 under qemu-user (tests/kernels/aarch64/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "common/bitfield.h"
#include "kernels/bf16_gemm.h"
#include "tests/kernels/bf16_values.h"
#include "tests/kernels/expect_bits.h"

namespace zipmoe::kernels {
namespace {

using testing::Bits;
using testing::ExpectSameBits;

using testing::FromBf16;
using testing::ToBf16;

enum class Enc { kBf16, kPlanes, kF32 };
const char* EncName(Enc e) { return e == Enc::kBf16 ? "bf16" : e == Enc::kPlanes ? "planes" : "f32"; }
constexpr Enc kEncodings[] = {Enc::kBf16, Enc::kPlanes, Enc::kF32};

// One problem: W [rows, cols] in all three encodings, x [n, ldx], bias [rows].
struct Problem {
  int64_t rows, cols, n, ldx, ldy;
  std::vector<uint16_t> bf16;
  std::vector<uint8_t> e, sm;
  std::vector<float> f32, x, bias;

  Problem(int64_t rows_, int64_t cols_, int64_t n_, uint32_t seed, int64_t ldx_pad = 0, int64_t ldy_pad = 0)
      : rows(rows_), cols(cols_), n(n_), ldx(cols_ + ldx_pad), ldy(rows_ + ldy_pad) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    bf16.resize(static_cast<size_t>(rows * cols));
    for (uint16_t& w : bf16) w = ToBf16(normal(rng) * 0.05f);
    e.resize(bf16.size());
    sm.resize(bf16.size());
    Encode();
    x.resize(static_cast<size_t>(n * ldx));
    for (float& v : x) v = normal(rng);
    bias.resize(static_cast<size_t>(rows));
    for (float& v : bias) v = normal(rng);
  }

  // The planes and the F32 copy of `bf16` (after changing it).
  void Encode() {
    SplitBf16(bf16.data(), static_cast<int64_t>(bf16.size()), e.data(), sm.data());
    f32.resize(bf16.size());
    for (size_t i = 0; i < bf16.size(); ++i) f32[i] = FromBf16(bf16[i]);
  }

  GemmArgs Args(Enc enc, bool with_bias, std::vector<float>& y) const {
    y.assign(static_cast<size_t>(n * ldy), std::numeric_limits<float>::quiet_NaN());
    GemmArgs a;
    a.w.rows = rows;
    a.w.cols = cols;
    if (enc == Enc::kPlanes) {
      a.w.e = e.data();
      a.w.sm = sm.data();
    } else if (enc == Enc::kF32) {
      a.w.f32 = f32.data();
    } else {
      a.w.bf16 = bf16.data();
    }
    a.x = x.data();
    a.n = n;
    a.ldx = ldx;
    a.bias = with_bias ? bias.data() : nullptr;
    a.y = y.data();
    a.ldy = ldy;
    a.row_begin = 0;
    a.row_end = rows;
    return a;
  }
};

// Bitwise equality of the written outputs (NaN == NaN whatever the payload).
struct IsaParam {
  GemmIsa isa;
};
void PrintTo(const IsaParam& p, std::ostream* os) { *os << GemmIsaName(p.isa); }

class Bf16GemmIsaTest : public ::testing::TestWithParam<IsaParam> {
 protected:
  void SetUp() override {
    if (!GemmIsaAvailable(GetParam().isa))
      GTEST_SKIP() << GemmIsaName(GetParam().isa) << " is not compiled into this binary or not supported by this CPU";
  }
};

TEST_P(Bf16GemmIsaTest, BitIdenticalToReferenceOverShapesAndEncodings) {
  const GemmIsa isa = GetParam().isa;
  struct Shape {
    int64_t rows, cols, n, ldx_pad, ldy_pad;
  };
  // Rows off every tile multiple, cols with and without a tail (< 16, = 16, 16k + r), tokens across
  // tile remainders and the 64-token block, padded strides; rows of one chain group (<= 256 columns), of
  // a second group cut short (597: 37 blocks + 5), of a third (647: 40 blocks + 7); batches over several
  // row blocks of kernels' kRowBlockBytes (150 x 1000: 2 or more blocks in every encoding, the last one
  // cut short with rows off the tile multiple; 37 tokens: 9 full 4-token tiles and a leftover token;
  // 19 and 18: 4 full tiles and 3 or 2 leftover tokens in one tile each, gemm_tile::LeftoverTokens;
  // 2, 3 and 4 tokens over 150 rows: x86's one-row tiles of a whole small batch, prefetched ahead across
  // row ends, gemm_tile::kStreamedTokens, up to gemm_tile::kStreamedXBytes of activations).
  const Shape shapes[] = {{150, 1000, 37, 1, 2}, {150, 1000, 16, 0, 0}, {150, 1000, 19, 0, 1}, {150, 1000, 18, 2, 0},
                          {150, 1000, 2, 1, 0},  {150, 1000, 3, 0, 1},  {150, 1000, 4, 0, 0},  {1, 1, 1, 0, 0},    {1, 15, 1, 0, 0},   {3, 16, 1, 0, 0},   {5, 17, 2, 1, 0},
                          {7, 33, 3, 0, 2},   {8, 64, 4, 0, 0},   {9, 100, 5, 3, 1},  {13, 48, 7, 0, 0},
                          {17, 257, 1, 0, 0}, {6, 31, 64, 0, 0},  {10, 80, 65, 2, 3}, {4, 128, 130, 0, 0},
                          {33, 96, 11, 0, 0}, {2, 1024, 9, 0, 0}, {64, 512, 1, 0, 0}, {5, 597, 3, 0, 0},
                          {9, 647, 17, 1, 2}, {6, 647, 1, 0, 0},
                          // just over kStreamedXBytes of activations: 2, 3 and 4 tokens in multi-row tiles
                          {7, 2100, 2, 1, 0}, {9, 1400, 3, 0, 1}, {6, 1030, 4, 0, 0}};
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const Problem p(s.rows, s.cols, s.n, seed++, s.ldx_pad, s.ldy_pad);
    for (const bool bias : {false, true}) {
      std::vector<float> bf16_reference;
      Bf16GemmReference(p.Args(Enc::kBf16, bias, bf16_reference));
      for (const Enc enc : kEncodings) {
        const std::string what = "rows " + std::to_string(s.rows) + " cols " + std::to_string(s.cols) + " n " +
                                 std::to_string(s.n) + " " + EncName(enc) + (bias ? " bias" : "");
        std::vector<float> want, got;
        Bf16GemmReference(p.Args(enc, bias, want));
        ExpectSameBits(bf16_reference, want, what + " (reference vs the bf16 reference)");
        // Both weight prefetch schemes of the one-row tiles (GemvPrefetch): speed only, the same bits.
        for (const GemvPrefetch prefetch : {GemvPrefetch::kAhead, GemvPrefetch::kHardware}) {
          GemmArgs args = p.Args(enc, bias, got);
          args.prefetch = prefetch;
          ASSERT_TRUE(Bf16GemmWithIsa(isa, args).ok()) << what;
          ExpectSameBits(want, got, what + " prefetch " + GemvPrefetchName(prefetch));
        }
      }
    }
  }
}

TEST_P(Bf16GemmIsaTest, DecodeRowsGiveTheReferenceBitsWhereverTheyStart) {
  // A decode token's rows of BF16 weights with the weights prefetched ahead (GemvPrefetch::kAhead): rows that
  // start a cache line (weights in 2 MiB pages) and rows 32 bytes off one (a safetensors data section starts at
  // 8-byte alignment), row ranges starting mid-matrix and ending at its last rows (whose prefetches would pass
  // the matrix's end), whole chain groups, a second group cut short (1056 columns: 66 blocks; 800: 50, two of
  // them in the second chain) and one group (32-256 columns): the reference's bits everywhere.
  const GemmIsa isa = GetParam().isa;
  const int64_t cols_list[] = {32, 64, 256, 704, 800, 1024, 1056, 2816};
  uint32_t seed = 100;
  for (const int64_t cols : cols_list) {
    const int64_t rows = 40;
    const Problem p(rows, cols, 1, seed++, 0, 0);
    for (const int64_t misalign : {int64_t{0}, int64_t{16}}) {  // in BF16 values: 0 or 32 bytes
      std::vector<uint16_t> storage(static_cast<size_t>(rows * cols + 64));
      uint16_t* base = storage.data();
      while ((reinterpret_cast<uintptr_t>(base) & 63) != 0) ++base;
      base += misalign;
      std::memcpy(base, p.bf16.data(), p.bf16.size() * sizeof(uint16_t));
      for (const bool bias : {false, true}) {
        std::vector<float> want, got;
        Bf16GemmReference(p.Args(Enc::kBf16, bias, want));
        for (const auto& [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 29}, {29, rows}}) {
          GemmArgs a = p.Args(Enc::kBf16, bias, got);
          a.w.bf16 = base;
          a.prefetch = GemvPrefetch::kAhead;
          a.row_begin = r0;
          a.row_end = r1;
          ASSERT_TRUE(Bf16GemmWithIsa(isa, a).ok());
          const std::string what = "cols " + std::to_string(cols) + (misalign ? " off a line" : " aligned") +
                                   (bias ? " bias" : "") + " rows " + std::to_string(r0) + "-" + std::to_string(r1);
          for (int64_t r = r0; r < r1; ++r)
            EXPECT_EQ(Bits(want[static_cast<size_t>(r)]), Bits(got[static_cast<size_t>(r)])) << what << " row " << r;
        }
      }
    }
  }
}

TEST_P(Bf16GemmIsaTest, RowRangeWritesOnlyItsColumns) {
  const Problem p(11, 40, 6, 7, 0, 0);
  std::vector<float> full, part;
  Bf16GemmReference(p.Args(Enc::kBf16, true, full));
  GemmArgs a = p.Args(Enc::kBf16, true, part);
  a.row_begin = 3;
  a.row_end = 9;
  ASSERT_TRUE(Bf16GemmWithIsa(GetParam().isa, a).ok());
  for (int64_t t = 0; t < p.n; ++t) {
    for (int64_t r = 0; r < p.rows; ++r) {
      const float got = part[static_cast<size_t>(t * p.ldy + r)];
      if (r >= 3 && r < 9) {
        EXPECT_EQ(Bits(full[static_cast<size_t>(t * p.ldy + r)]), Bits(got)) << "t " << t << " r " << r;
      } else {
        EXPECT_TRUE(std::isnan(got)) << "row " << r << " outside the range was written";
      }
    }
  }
}

TEST_P(Bf16GemmIsaTest, SplitRowsAndSingleTokensGiveTheSameBits) {
  // The executor splits rows across threads and batches tokens of different sequences: neither may
  // change a bit of any output.
  const GemmIsa isa = GetParam().isa;
  const Problem p(37, 200, 9, 11, 0, 0);
  std::vector<float> whole, split, single;
  ASSERT_TRUE(Bf16GemmWithIsa(isa, p.Args(Enc::kPlanes, true, whole)).ok());
  GemmArgs a = p.Args(Enc::kPlanes, true, split);
  for (int64_t r0 : {0, 5, 6, 19, 30}) {
    a.row_begin = r0;
    a.row_end = r0 == 0 ? 5 : r0 == 5 ? 6 : r0 == 6 ? 19 : r0 == 19 ? 30 : 37;
    ASSERT_TRUE(Bf16GemmWithIsa(isa, a).ok());
  }
  ExpectSameBits(whole, split, "row split");
  for (int64_t t = 0; t < p.n; ++t) {
    GemmArgs one = p.Args(Enc::kPlanes, true, single);
    one.x = p.x.data() + t * p.ldx;
    one.n = 1;
    ASSERT_TRUE(Bf16GemmWithIsa(isa, one).ok());
    for (int64_t r = 0; r < p.rows; ++r)
      EXPECT_EQ(Bits(whole[static_cast<size_t>(t * p.ldy + r)]), Bits(single[static_cast<size_t>(r)]))
          << "token " << t << " row " << r;
  }
}

TEST_P(Bf16GemmIsaTest, SpecialWeightValuesMatchTheReference) {
  // Inf, NaN, -0, subnormal and the largest finite BF16 weights, in the body and in the tail.
  const uint16_t specials[] = {0x7f80, 0xff80, 0x7fc1, 0x8000, 0x0001, 0x807f, 0x7f7f, 0x3f80};
  for (const uint16_t special : specials) {
    Problem p(3, 35, 2, 3, 0, 0);
    p.bf16[5] = special;   // row 0, body
    p.bf16[67] = special;  // row 1, tail (col 32)
    p.Encode();
    for (const Enc enc : kEncodings) {
      std::vector<float> want, got;
      Bf16GemmReference(p.Args(enc, false, want));
      ASSERT_TRUE(Bf16GemmWithIsa(GetParam().isa, p.Args(enc, false, got)).ok());
      ExpectSameBits(want, got, "special 0x" + std::to_string(special) + " " + EncName(enc));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Bf16GemmIsaTest,
                         ::testing::Values(IsaParam{GemmIsa::kScalar}, IsaParam{GemmIsa::kAvx2},
                                           IsaParam{GemmIsa::kAvx512}, IsaParam{GemmIsa::kNeon}),
                         [](const ::testing::TestParamInfo<IsaParam>& info) {
                           return std::string(GemmIsaName(info.param.isa));
                         });

// One token through every row of the BF16 matrix w ([rows, x.size()], row-major) into y ([rows]); no bias.
GemmArgs OneTokenArgs(const std::vector<uint16_t>& w, int64_t rows, const std::vector<float>& x, std::vector<float>& y) {
  GemmArgs a;
  a.w.bf16 = w.data();
  a.w.rows = rows;
  a.w.cols = static_cast<int64_t>(x.size());
  a.x = x.data();
  a.n = 1;
  a.ldx = a.w.cols;
  a.y = y.data();
  a.ldy = rows;
  a.row_end = rows;
  return a;
}

TEST(Bf16GemmReferenceTest, KnownAnswer) {
  // W = [[1, 2, ..., 20], [-0.5 x 20]], x = [1 x 20] (all exact in BF16 and fp32):
  // row 0 = 210, row 1 = -10; with bias [0.25, 4] -> 210.25, -6.
  std::vector<uint16_t> w(40);
  for (int k = 0; k < 20; ++k) {
    w[static_cast<size_t>(k)] = ToBf16(static_cast<float>(k + 1));
    w[static_cast<size_t>(20 + k)] = ToBf16(-0.5f);
  }
  const std::vector<float> x(20, 1.0f), bias = {0.25f, 4.0f};
  std::vector<float> y(2);
  GemmArgs a = OneTokenArgs(w, 2, x, y);
  a.bias = bias.data();
  Bf16GemmReference(a);
  EXPECT_EQ(y[0], 210.25f);
  EXPECT_EQ(y[1], -6.0f);
  Bf16Gemm(a);  // the dispatched variant
  EXPECT_EQ(y[0], 210.25f);
  EXPECT_EQ(y[1], -6.0f);
}

TEST(Bf16GemmReferenceTest, KnownAnswerOfTheTwoChains) {
  // One row of 512 columns (two chain groups of 256, kernels/bf16_gemm.h), x = 1: column 0 = 2^24 (group 0,
  // chain 0), columns 256 and 272 = 1 (group 1, chain 1; lane 0 of blocks 16 and 17), the rest 0. In the
  // documented order chain 1 sums 1 + 1 = 2 and the chains' sum is 2^24 + 2, exact; one chain over the row
  // would round 2^24 + 1 to 2^24 twice (ties to even) and give 2^24.
  std::vector<uint16_t> w(512, 0);
  w[0] = ToBf16(16777216.0f);
  w[256] = ToBf16(1.0f);
  w[272] = ToBf16(1.0f);
  ASSERT_EQ(kGemmChainGroupBlocks, 16);
  const std::vector<float> x(512, 1.0f);
  std::vector<float> y(1);
  const GemmArgs a = OneTokenArgs(w, 1, x, y);
  Bf16GemmReference(a);
  EXPECT_EQ(y[0], 16777218.0f);
  Bf16Gemm(a);  // the dispatched variant
  EXPECT_EQ(y[0], 16777218.0f);
}

TEST(Bf16GemmReferenceTest, CloseToAFloat64DotProduct) {
  const Problem p(9, 1000, 3, 5, 0, 0);
  std::vector<float> y;
  Bf16GemmReference(p.Args(Enc::kBf16, true, y));
  for (int64_t t = 0; t < p.n; ++t) {
    for (int64_t r = 0; r < p.rows; ++r) {
      double dot = p.bias[static_cast<size_t>(r)], mag = std::fabs(dot);
      for (int64_t k = 0; k < p.cols; ++k) {
        const double term = static_cast<double>(FromBf16(p.bf16[static_cast<size_t>(r * p.cols + k)])) *
                            p.x[static_cast<size_t>(t * p.ldx + k)];
        dot += term;
        mag += std::fabs(term);
      }
      EXPECT_NEAR(y[static_cast<size_t>(t * p.ldy + r)], dot, 1e-6 * mag) << "t " << t << " r " << r;
    }
  }
}

TEST(Bf16GemmValidateTest, RejectsBadArgumentsNamingTheField) {
  const Problem p(4, 32, 2, 1, 0, 0);
  std::vector<float> y;
  const GemmArgs good = p.Args(Enc::kBf16, false, y);
  EXPECT_TRUE(ValidateGemmArgs(good).ok());

  GemmArgs a = good;
  a.x = nullptr;
  Status s = ValidateGemmArgs(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x is null"), std::string::npos) << s.ToString();

  a = good;
  a.row_end = 5;
  s = ValidateGemmArgs(a);
  EXPECT_NE(s.message().find("row range [0, 5)"), std::string::npos) << s.ToString();

  a = good;
  a.ldx = 31;
  s = ValidateGemmArgs(a);
  EXPECT_NE(s.message().find("ldx 31 < cols 32"), std::string::npos) << s.ToString();

  a = good;
  a.w.bf16 = nullptr;
  a.w.e = p.e.data();  // sm missing
  s = ValidateGemmArgs(a);
  EXPECT_NE(s.message().find("neither BF16, F32, FP8 nor MXFP4 data nor both E and SM planes"), std::string::npos)
      << s.ToString();
  EXPECT_EQ(Bf16GemmWithIsa(GemmIsa::kScalar, a).code(), StatusCode::kInvalidArgument);

  a = good;
  a.prefetch = static_cast<GemvPrefetch>(7);
  s = ValidateGemmArgs(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("prefetch 7"), std::string::npos) << s.ToString();
}

TEST(GemvPrefetchTest, TheProcessSchemeIsAConcreteOneAndNamed) {
  // ActiveGemvPrefetch resolves kAuto once (ZIPMOE_GEMV_PREFETCH or the CPU vendor's default); the CLI test
  // (GenerateCliTest.GemvPrefetchFollowsTheEnvironment) checks the environment override in a child process.
  const GemvPrefetch active = ActiveGemvPrefetch();
  EXPECT_TRUE(active == GemvPrefetch::kAhead || active == GemvPrefetch::kHardware) << static_cast<int>(active);
  EXPECT_EQ(ActiveGemvPrefetch(), active);
  EXPECT_STREQ(GemvPrefetchName(GemvPrefetch::kAuto), "auto");
  EXPECT_STREQ(GemvPrefetchName(GemvPrefetch::kAhead), "ahead");
  EXPECT_STREQ(GemvPrefetchName(GemvPrefetch::kHardware), "hardware");
  EXPECT_STREQ(GemvPrefetchName(static_cast<GemvPrefetch>(9)), "unknown");
}

TEST(GemvPrefetchTest, TheDefaultFollowsTheVendorAndTheFamilyMeasured) {
  // Zen 4 measured faster without software prefetch (Zen 5 assumed alike), Zen 2, Zen 3 and Intel with it (bf16_gemm.h
  // GemvPrefetch). Family 0x19 holds both Zen 3 and Zen 4: the model tells them apart.
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0x01), GemvPrefetch::kAhead);     // Zen 3 Milan
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0x21), GemvPrefetch::kAhead);     // Zen 3 Vermeer
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0x50), GemvPrefetch::kAhead);     // Zen 3 Cezanne
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0x11), GemvPrefetch::kHardware);  // Zen 4 Genoa
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0x61), GemvPrefetch::kHardware);  // Zen 4 Raphael
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x19, 0xA0), GemvPrefetch::kHardware);  // Zen 4c Bergamo
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x1A, 0x02), GemvPrefetch::kHardware);  // Zen 5
  EXPECT_EQ(DefaultGemvPrefetchFor("AuthenticAMD", 0x17, 0x31), GemvPrefetch::kAhead);     // Zen 2 Rome
  EXPECT_EQ(DefaultGemvPrefetchFor("HygonGenuine", 0x18, 0x00), GemvPrefetch::kAhead);     // Zen 1 derivative
  EXPECT_EQ(DefaultGemvPrefetchFor("GenuineIntel", 6, 0x8F), GemvPrefetch::kAhead);
  EXPECT_EQ(DefaultGemvPrefetchFor("GenuineIntel", 0x13, 0x01), GemvPrefetch::kAhead);
  EXPECT_EQ(DefaultGemvPrefetchFor("", 0, 0), GemvPrefetch::kAhead);
}

TEST(Bf16GemmValidateTest, UnavailableIsaIsAnError) {
  const Problem p(2, 16, 1, 1, 0, 0);
  std::vector<float> y;
  for (GemmIsa isa : {GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kNeon}) {
    if (GemmIsaAvailable(isa)) continue;
    const Status s = Bf16GemmWithIsa(isa, p.Args(Enc::kBf16, false, y));
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << GemmIsaName(isa);
    EXPECT_NE(s.message().find(GemmIsaName(isa)), std::string::npos) << s.ToString();
  }
  EXPECT_TRUE(GemmIsaAvailable(GemmIsa::kScalar));
  EXPECT_TRUE(GemmIsaAvailable(BestGemmIsa()));
}

}  // namespace
}  // namespace zipmoe::kernels
