// MXFP4 weights in the CPU matmuls (kernels/bf16_gemm.h GemmWeights::mxfp4, issue 41): known answers
// worked by hand (every nibble code in both nibble positions, scales 127, 0 (a subnormal 2^-127), 1 and
// 254, -0, the overflow to inf, the 0xFF NaN scale); every ISA variant bit-identical to Bf16GemmReference
// on random shapes, batches, row ranges, strides and biases; and the MXFP4 product bit-identical to the
// float32 product of weights dequantized beforehand by the OCP definition (ldexp), so serving MXFP4 in
// the inner loop is exactly "dequantize, then compute in fp32".
// Built for the host and, cross-compiled, for AArch64 under qemu-user (tests/kernels/aarch64/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/bf16_gemm.h"
#include "tests/kernels/expect_bits.h"

namespace zipmoe::kernels {
namespace {

using testing::Bits;
using testing::ExpectSameBits;

// The OCP MX definitions, in double: E2M1 (bias 1, exponent 0 subnormal) times 2^(scale - 127).
double E2M1Definition(int code) {
  const int e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::ldexp(1.0, e - 1);
  return (code & 8) != 0 ? -mag : mag;
}
float DequantizedDefinition(int code, int scale) {
  if (scale == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(std::ldexp(E2M1Definition(code), scale - 127));  // exact, or +-inf past FLT_MAX
}

// One MXFP4 matrix [rows, cols] (HF's *_blocks / *_scales of one expert), its dequantization, activations.
struct Mxfp4Problem {
  int64_t rows, cols, n, ldx, ldy;
  std::vector<uint8_t> blocks, scales;  // [rows, cols/2], [rows, cols/32]
  std::vector<float> dequantized, x, bias;

  Mxfp4Problem(int64_t rows_, int64_t cols_, int64_t n_) : rows(rows_), cols(cols_), n(n_), ldx(cols_), ldy(rows_) {
    blocks.assign(static_cast<size_t>(rows * cols / 2), 0);
    scales.assign(static_cast<size_t>(rows * cols / 32), 127);
    x.assign(static_cast<size_t>(n * ldx), 0.0f);
    bias.assign(static_cast<size_t>(rows), 0.0f);
  }
  // Random nibbles (every code); scales mostly in [112, 142] with the specials 0, 1, 2 and 250..252 (all
  // finite), except every fourth row, whose scales are all 0..3 (subnormal and tiny weights, which would
  // vanish next to ordinary blocks); activations and bias N(0, 1); strides wider than the matrix when
  // `strided`.
  static Mxfp4Problem Random(int64_t rows, int64_t cols, int64_t n, uint32_t seed, bool strided = false) {
    Mxfp4Problem p(rows, cols, n);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (uint8_t& b : p.blocks) b = static_cast<uint8_t>(rng());
    const uint8_t specials[] = {0, 1, 2, 250, 251, 252};
    for (size_t i = 0; i < p.scales.size(); ++i) {
      uint8_t& s = p.scales[i];
      if ((i / static_cast<size_t>(cols / 32)) % 4 == 3) {
        s = static_cast<uint8_t>(rng() % 4);
      } else {
        s = rng() % 8 == 0 ? specials[rng() % 6] : static_cast<uint8_t>(112 + rng() % 31);
      }
    }
    if (strided) {
      p.ldx = cols + 5;
      p.ldy = rows + 3;
    }
    p.x.resize(static_cast<size_t>(n * p.ldx));
    for (float& v : p.x) v = normal(rng);
    for (float& v : p.bias) v = normal(rng);
    p.Dequantize();
    return p;
  }
  void SetNibble(int64_t r, int64_t k, int code) {
    uint8_t& b = blocks[static_cast<size_t>((r * cols + k) / 2)];
    b = static_cast<uint8_t>(k % 2 == 0 ? (b & 0xf0) | code : (b & 0x0f) | code << 4);
  }
  void Dequantize() {
    dequantized.resize(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) {
        const int code = (blocks[static_cast<size_t>((r * cols + k) / 2)] >> (4 * (k % 2))) & 15;
        dequantized[static_cast<size_t>(r * cols + k)] =
            DequantizedDefinition(code, scales[static_cast<size_t>(r * (cols / 32) + k / 32)]);
      }
  }

  GemmArgs Args(bool mxfp4, bool with_bias, std::vector<float>& y, int64_t row_begin = 0,
                int64_t row_end = -1) const {
    y.assign(static_cast<size_t>(n * ldy), -1.0f);
    GemmArgs a;
    a.w.rows = rows;
    a.w.cols = cols;
    if (mxfp4) {
      a.w.mxfp4 = blocks.data();
      a.w.mxfp4_scales = scales.data();
    } else {
      a.w.f32 = dequantized.data();
    }
    a.x = x.data();
    a.n = n;
    a.ldx = ldx;
    a.bias = with_bias ? bias.data() : nullptr;
    a.y = y.data();
    a.ldy = ldy;
    a.row_begin = row_begin;
    a.row_end = row_end < 0 ? rows : row_end;
    return a;
  }
};

class Mxfp4GemmIsaTest : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void SetUp() override {
    if (!GemmIsaAvailable(GetParam()))
      GTEST_SKIP() << GemmIsaName(GetParam()) << " is not compiled into this binary or not supported by this CPU";
  }
  // The variant's result of `a` (validated), in a fresh copy of y.
  std::vector<float> Run(const Mxfp4Problem& p, bool with_bias = false) {
    std::vector<float> y;
    const Status st = Bf16GemmWithIsa(GetParam(), p.Args(true, with_bias, y));
    EXPECT_TRUE(st.ok()) << st.ToString();
    return y;
  }
};

// Hand rows, 32 columns, read one weight at a time with one-hot tokens (token t: x[t] = 1, else 0):
// y[t, r] = W[r, t] + 0 exactly. Row r holds code (t + r) % 16 in column t, so every code sits in both
// nibble positions; the scales are 127 (x1), 0 (2^-127: the values are subnormal floats), 1 (2^-126)
// and 254 (2^127) with magnitudes <= 1.5 there (2 * 2^127 overflows: next test).
TEST_P(Mxfp4GemmIsaTest, KnownAnswersForEveryCodeAtScales127_0_1_254) {
  const int scales[] = {127, 0, 1, 254, 127, 0};
  Mxfp4Problem p(6, 32, 32);
  for (int64_t r = 0; r < 6; ++r) {
    p.scales[static_cast<size_t>(r)] = static_cast<uint8_t>(scales[r]);
    for (int64_t k = 0; k < 32; ++k) {
      int code = static_cast<int>((k + r) % 16);
      if (scales[r] == 254) code &= 0xb;  // magnitude codes 0..3 only
      p.SetNibble(r, k, code);
    }
  }
  for (int64_t t = 0; t < 32; ++t) p.x[static_cast<size_t>(t * 32 + t)] = 1.0f;
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const std::vector<float> y = Run(p);
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t t = 0; t < 32; ++t) {
      int code = static_cast<int>((t + r) % 16);
      if (scales[r] == 254) code &= 0xb;
      const float mag = std::ldexp(magnitudes[code & 7], scales[r] - 127);
      const float want = (code & 8) != 0 && mag != 0.0f ? -mag : mag;  // -0 * 1 + 0 = +0
      EXPECT_EQ(Bits(y[static_cast<size_t>(t * 6 + r)]), Bits(want))
          << "row " << r << " (scale " << scales[r] << ") column " << t << " code " << code;
    }
  }
  // A few of them spelled out (y[t * 6 + r]; row r, column t holds code (t + r) % 16).
  EXPECT_EQ(y[2 * 6 + 0], 1.0f);                     // row 0 (x1), code 2
  EXPECT_EQ(y[15 * 6 + 0], -6.0f);                   // row 0, code 15
  EXPECT_EQ(Bits(y[0 * 6 + 1]), 0x00200000u);        // row 1 (2^-127), code 1: 0.5 * 2^-127 = 2^-128
  EXPECT_EQ(y[6 * 6 + 1], std::ldexp(6.0f, -127));   // row 1, code 7
  EXPECT_EQ(y[5 * 6 + 2], std::ldexp(6.0f, -126));   // row 2 (2^-126), code 7
  EXPECT_EQ(y[3 * 6 + 3], std::ldexp(1.0f, 127));    // row 3 (2^127), code 6 & 0xb = 2
  EXPECT_EQ(y[8 * 6 + 3], std::ldexp(-1.5f, 127));   // row 3, code 11
}

// Every scale code whose values stay finite (0..252: 6 x 2^125 < FLT_MAX; 253..255 are the next test's),
// every nibble code in both nibble positions, each weight read alone with one-hot tokens, against the OCP
// definition: the variants that look a scale code's values up in a table built ahead (AVX-512's
// LoadMxfp4Block) get every entry checked, in decode (one token a call) and in batches of 32 tokens.
TEST_P(Mxfp4GemmIsaTest, KnownAnswersForEveryFiniteScaleCode) {
  constexpr int64_t kCodes = 253;
  Mxfp4Problem p(kCodes, 32, 32);
  for (int64_t r = 0; r < kCodes; ++r) {
    p.scales[static_cast<size_t>(r)] = static_cast<uint8_t>(r);
    for (int64_t k = 0; k < 32; ++k) p.SetNibble(r, k, static_cast<int>((k + r) % 16));
  }
  for (int64_t t = 0; t < 32; ++t) p.x[static_cast<size_t>(t * 32 + t)] = 1.0f;
  p.Dequantize();
  const std::vector<float> batch = Run(p);
  for (int64_t t = 0; t < 32; ++t) {
    std::vector<float> one(static_cast<size_t>(kCodes), -1.0f);
    GemmArgs a = p.Args(true, false, one);
    a.x = p.x.data() + t * p.ldx;
    a.n = 1;
    a.y = one.data();
    ASSERT_TRUE(Bf16GemmWithIsa(GetParam(), a).ok());
    for (int64_t r = 0; r < kCodes; ++r) {
      const float want = p.dequantized[static_cast<size_t>(r * 32 + t)] + 0.0f;  // -0 * 1 + 0 = +0
      ASSERT_EQ(Bits(one[static_cast<size_t>(r)]), Bits(want))
          << "decode: scale code " << r << ", column " << t << ", nibble code " << (t + r) % 16;
      ASSERT_EQ(Bits(batch[static_cast<size_t>(t * kCodes + r)]), Bits(want))
          << "batch: scale code " << r << ", column " << t << ", nibble code " << (t + r) % 16;
    }
  }
}

// A row of -0 (code 8) contributes +0; 2.0 and -4.0 at scale 254 overflow to +-inf and the outputs are
// +-inf (x all ones, so no inf * 0); a 0xFF scale makes its block NaN and the output NaN.
TEST_P(Mxfp4GemmIsaTest, NegativeZeroOverflowAndNanScale) {
  Mxfp4Problem p(5, 64, 1);
  for (int64_t k = 0; k < 64; ++k) {
    p.SetNibble(0, k, 8);                  // -0 everywhere
    p.SetNibble(1, k, k < 32 ? 4 : 1);     // block 0: 2.0 at 2^127 = inf; block 1: 0.5
    p.SetNibble(2, k, k < 32 ? 0xe : 0);   // -4.0 at 2^126: -inf
    p.SetNibble(3, k, 2);                  // 1.0, but block 1's scale is 0xFF
    p.SetNibble(4, k, 3);                  // 1.5 at 2^127: the largest finite value MXFP4 reaches here
  }
  const uint8_t scales[5][2] = {{127, 127}, {254, 127}, {253, 127}, {127, 0xff}, {254, 254}};
  for (int r = 0; r < 5; ++r) {
    p.scales[static_cast<size_t>(2 * r)] = scales[r][0];
    p.scales[static_cast<size_t>(2 * r + 1)] = scales[r][1];
  }
  for (float& v : p.x) v = 1.0f;
  const std::vector<float> y = Run(p);
  EXPECT_EQ(Bits(y[0]), 0u);  // +0
  EXPECT_EQ(y[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(y[2], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(y[4], std::numeric_limits<float>::infinity());  // 64 * 1.5 * 2^127 overflows in the sum
  p.x.assign(p.x.size(), 0.0f);
  p.x[1] = 1.0f;  // one-hot on column 1: row 4 is 1.5 * 2^127 exactly, row 1 is inf * 0 = NaN
  const std::vector<float> one = Run(p);
  EXPECT_EQ(one[4], std::ldexp(1.5f, 127));
  EXPECT_TRUE(std::isnan(one[1]));
  std::vector<float> want;
  Bf16GemmReference(p.Args(true, false, want));
  ExpectSameBits(want, one, "specials vs the reference");
}

TEST_P(Mxfp4GemmIsaTest, BitIdenticalToTheReferenceAndToDequantizedF32) {
  struct Shape {
    int64_t rows, cols, n;
  };
  // Tile and block edges: rows off every tile multiple, decode (n = 1), pairs, the tile widths, the
  // batches dequantized once (AVX2 from n = 6, kMxfp4DequantMinTokens: BF16 row blocks of 128 KiB,
  // gemm_tile::RowsThroughBf16; several blocks, the last one short, at 2048 and 4096 columns) and those
  // below them, the 64-token block edge and one token past it; AVX2's lane-ordered x (gemm_tile::Run) on
  // the stack (n x cols <= 8192) and on the heap (n x cols > 8192, one token of 8224 columns too).
  std::vector<Shape> shapes = {{1, 32, 1},   {2, 64, 1},   {3, 96, 2},    {4, 128, 3},      {5, 160, 4},
                               {7, 32, 5},   {8, 256, 6},  {9, 512, 7},   {13, 64, 8},      {16, 1024, 1},
                               {17, 992, 9}, {33, 96, 20}, {67, 320, 2},  {64, 2880 / 2, 1}, {19, 64, 65},
                               {6, 1024, 15}, {5, 64, 16}, {9, 96, 17},   {3, 8224, 1},     {11, 1024, 12},
                               {70, 2048, 10}, {40, 4096, 66}};
  std::mt19937 rng(2024);
  for (int i = 0; i < 12; ++i)  // random shapes: rows 1..67, cols 32..1024, n 1..20
    shapes.push_back({1 + static_cast<int64_t>(rng() % 67), 32 * (1 + static_cast<int64_t>(rng() % 32)),
                      1 + static_cast<int64_t>(rng() % 20)});
  uint32_t seed = 11;
  for (const Shape& s : shapes) {
    const bool strided = seed % 3 == 0;
    const Mxfp4Problem p = Mxfp4Problem::Random(s.rows, s.cols, s.n, seed++, strided);
    for (const bool bias : {false, true}) {
      // The whole matrix, and a row range inside it as a thread's share.
      const int64_t rb = s.rows > 2 ? static_cast<int64_t>(rng() % (s.rows / 2)) : 0;
      const int64_t re = rb + 1 + static_cast<int64_t>(rng() % (s.rows - rb));
      for (const auto& [row_begin, row_end] : {std::pair<int64_t, int64_t>{0, s.rows}, {rb, re}}) {
        const std::string what = "rows " + std::to_string(s.rows) + " cols " + std::to_string(s.cols) + " n " +
                                 std::to_string(s.n) + " range [" + std::to_string(row_begin) + ", " +
                                 std::to_string(row_end) + ")" + (bias ? " bias" : "") + (strided ? " strided" : "");
        std::vector<float> dequantized, reference, got;
        Bf16GemmReference(p.Args(/*mxfp4=*/false, bias, dequantized, row_begin, row_end));
        Bf16GemmReference(p.Args(/*mxfp4=*/true, bias, reference, row_begin, row_end));
        ExpectSameBits(dequantized, reference, what + " (MXFP4 reference vs dequantized F32)");
        const Status st = Bf16GemmWithIsa(GetParam(), p.Args(true, bias, got, row_begin, row_end));
        ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
        ExpectSameBits(reference, got, what);  // rows outside the range stay -1 in both
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Mxfp4GemmIsaTest,
                         ::testing::Values(GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kNeon,
                                           GemmIsa::kAvx512Bf16, GemmIsa::kNeonBf16, GemmIsa::kAmxBf16),
                         [](const auto& info) { return std::string(GemmIsaName(info.param)); });

TEST(Mxfp4GemmTest, DispatchedPathIsTheReference) {
  const Mxfp4Problem p = Mxfp4Problem::Random(37, 288, 3, 77);
  std::vector<float> want, got;
  Bf16GemmReference(p.Args(true, true, want));
  const GemmArgs a = p.Args(true, true, got);
  ASSERT_TRUE(ValidateGemmArgs(a).ok());
  Bf16Gemm(a);
  ExpectSameBits(want, got, std::string("dispatched ") + GemmIsaName(BestGemmIsa()));
}

TEST(Mxfp4GemmValidateTest, ScalesAndWholeBlocksAreRequired) {
  const Mxfp4Problem p = Mxfp4Problem::Random(4, 64, 1, 5);
  std::vector<float> y;
  GemmArgs a = p.Args(true, false, y);
  EXPECT_TRUE(a.w.is_mxfp4());
  EXPECT_FALSE(a.w.planes());
  EXPECT_TRUE(ValidateGemmArgs(a).ok());
  a.w.mxfp4_scales = nullptr;
  Status st = ValidateGemmArgs(a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("no scales"), std::string::npos) << st.message();
  a = p.Args(true, false, y);
  a.w.cols = 48;  // not whole blocks (ldx 64 still covers it)
  st = ValidateGemmArgs(a);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("multiple of 32 (got cols 48)"), std::string::npos) << st.message();
  EXPECT_EQ(Bf16GemmWithIsa(GemmIsa::kScalar, a).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe::kernels
