// Block-scaled FP8 (F8_E4M3) weights in the CPU matmuls (kernels/bf16_gemm.h GemmWeights::f8): the
// E4M3 decoding against an independent formula on all 256 codes; every ISA variant bit-identical to
// Bf16GemmReference; and the FP8 product bit-identical to the float32 product of the weights
// dequantized beforehand (DeepSeek's weight_dequant: e4m3 * weight_scale_inv, one fp32 rounding), so
// serving FP8 in the inner loop is exactly "dequantize, then compute in fp32".
// Built for the host and, cross-compiled, for AArch64 under qemu-user (tests/kernels/aarch64/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "common/dtype.h"
#include "kernels/bf16_gemm.h"
#include "tests/kernels/expect_bits.h"

namespace zipmoe::kernels {
namespace {

using testing::Bits;
using testing::ExpectSameBits;

// E4M3 by its definition (OCP 8-bit floating point spec, E4M3: bias 7, subnormals, NaN = S.1111.111),
// in double.
double E4M3Definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s != 0 ? -mag : mag;
}

TEST(Fp8Test, EveryCodeDecodesToItsDefinition) {
  for (int code = 0; code < 256; ++code) {
    const double want = E4M3Definition(code);
    const float got = F8E4M3ToFloat(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << code;
      EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << code;  // -0 too
    }
  }
  EXPECT_EQ(F8E4M3ToFloat(0x7e), 448.0f);   // the largest finite value
  EXPECT_EQ(F8E4M3ToFloat(0x38), 1.0f);
  EXPECT_EQ(F8E4M3ToFloat(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(F8E4M3ToFloat(0x08), std::ldexp(1.0f, -6));  // the smallest normal
}

struct Fp8Problem {
  int64_t rows, cols, n, block_rows, block_cols;
  std::vector<uint8_t> f8;
  std::vector<float> scale, dequantized, x, bias;

  Fp8Problem(int64_t rows_, int64_t cols_, int64_t n_, int64_t br, int64_t bc, uint32_t seed, bool with_nan = false)
      : rows(rows_), cols(cols_), n(n_), block_rows(br), block_cols(bc) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    f8.resize(static_cast<size_t>(rows * cols));
    for (uint8_t& b : f8) {
      b = static_cast<uint8_t>(byte(rng));
      if (!with_nan && (b & 0x7f) == 0x7f) b = 0x7e;  // NaN only where asked
    }
    const int64_t srows = (rows + br - 1) / br, scols = (cols + bc - 1) / bc;
    scale.resize(static_cast<size_t>(srows * scols));
    for (float& s : scale) s = std::exp(normal(rng)) * 1e-3f;  // positive, like weight_scale_inv
    dequantized.resize(f8.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k)
        dequantized[static_cast<size_t>(r * cols + k)] =
            F8E4M3ToFloat(f8[static_cast<size_t>(r * cols + k)]) * scale[static_cast<size_t>((r / br) * scols + k / bc)];
    x.resize(static_cast<size_t>(n * cols));
    for (float& v : x) v = normal(rng);
    bias.resize(static_cast<size_t>(rows));
    for (float& v : bias) v = normal(rng);
  }

  GemmArgs Args(bool fp8, bool with_bias, std::vector<float>& y) const {
    y.assign(static_cast<size_t>(n * rows), -1.0f);
    GemmArgs a;
    a.w.rows = rows;
    a.w.cols = cols;
    if (fp8) {
      a.w.f8 = f8.data();
      a.w.f8_scale = scale.data();
      a.w.block_rows = block_rows;
      a.w.block_cols = block_cols;
    } else {
      a.w.f32 = dequantized.data();
    }
    a.x = x.data();
    a.n = n;
    a.ldx = cols;
    a.bias = with_bias ? bias.data() : nullptr;
    a.y = y.data();
    a.ldy = rows;
    a.row_begin = 0;
    a.row_end = rows;
    return a;
  }
};

class Fp8GemmIsaTest : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void SetUp() override {
    if (!GemmIsaAvailable(GetParam()))
      GTEST_SKIP() << GemmIsaName(GetParam()) << " is not compiled into this binary or not supported by this CPU";
  }
};

// Both ways an x86 FP8 row tile meets NaN and subnormal codes (bf16_gemm.h F8TileCheck: a scan before the
// tile, or the NaN check fused into it and the tile computed again where it met one), whatever this CPU's
// default: the same bits under each (variants without the fused check scan under both).
constexpr F8TileCheck kF8Checks[] = {F8TileCheck::kScan, F8TileCheck::kFused};

void ExpectEveryCheckGives(GemmIsa isa, GemmArgs a, const std::vector<float>& want, const std::string& what) {
  for (const F8TileCheck check : kF8Checks) {
    std::fill(a.y, a.y + a.n * a.ldy, -1.0f);
    a.f8_check = check;
    const std::string with = what + " (" + F8TileCheckName(check) + ")";
    ASSERT_TRUE(Bf16GemmWithIsa(isa, a).ok()) << with;
    ExpectSameBits(want, std::vector<float>(a.y, a.y + a.n * a.ldy), with);
  }
}

TEST_P(Fp8GemmIsaTest, BitIdenticalToTheReferenceAndToDequantizedF32) {
  struct Shape {
    int64_t rows, cols, n, block_rows, block_cols;
  };
  // Blocks of released checkpoints (128x128) and small ones; row/column counts off every block and
  // tile multiple; decode (n = 1), small batches and a 64-token block edge.
  const Shape shapes[] = {{1, 16, 1, 128, 128}, {3, 17, 1, 128, 128}, {5, 33, 2, 2, 16},   {8, 64, 3, 4, 32},
                          {9, 100, 1, 4, 48},   {13, 160, 5, 8, 16},  {17, 257, 1, 16, 64}, {33, 96, 65, 16, 32},
                          {64, 512, 1, 128, 128}, {130, 300, 4, 128, 128},
                          // a 4-token tile and 3 leftover tokens in one tile; the dequantised path's likewise
                          {20, 96, 7, 16, 32},    {20, 96, 11, 16, 32}};
  uint32_t seed = 11;
  for (const Shape& s : shapes) {
    const Fp8Problem p(s.rows, s.cols, s.n, s.block_rows, s.block_cols, seed++);
    for (const bool bias : {false, true}) {
      const std::string what = "rows " + std::to_string(s.rows) + " cols " + std::to_string(s.cols) + " n " +
                               std::to_string(s.n) + " blocks " + std::to_string(s.block_rows) + "x" +
                               std::to_string(s.block_cols) + (bias ? " bias" : "");
      std::vector<float> dequantized, reference, got;
      Bf16GemmReference(p.Args(/*fp8=*/false, bias, dequantized));
      Bf16GemmReference(p.Args(/*fp8=*/true, bias, reference));
      ExpectSameBits(dequantized, reference, what + " (FP8 reference vs dequantized F32)");
      ExpectEveryCheckGives(GetParam(), p.Args(true, bias, got), reference, what);
    }
  }
}

TEST_P(Fp8GemmIsaTest, NanCodesGiveNanOutputsAsTheReference) {
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{9}}) {  // decode, tiles, few-token tiles, blocks
    const Fp8Problem p(6, 64, n, 2, 16, 99, /*with_nan=*/true);
    std::vector<float> want, got;
    Bf16GemmReference(p.Args(true, false, want));
    ExpectEveryCheckGives(GetParam(), p.Args(true, false, got), want, "with NaN codes, n " + std::to_string(n));
    bool any_nan = false;
    for (float v : want) any_nan |= std::isnan(v);
    EXPECT_TRUE(any_nan);  // random bytes over 384 weights include 0x7f / 0xff
  }
}

// Scales whose product with 2^120 overflows float32 (>= 2^8: the x86 variants then multiply by 2^120
// and the scale in turn) and subnormal scales give the reference's bits too.
TEST_P(Fp8GemmIsaTest, LargeAndSubnormalScalesAsTheReference) {
  for (const float s : {256.0f, 1000.0f, 3.0e38f, 1.0e-40f, 1.0e-45f}) {
    Fp8Problem p(9, 96, 2, 4, 32, 123);
    for (size_t i = 0; i < p.scale.size(); ++i) p.scale[i] = i % 2 == 0 ? s : 1.0e-3f;
    std::vector<float> want, got;
    Bf16GemmReference(p.Args(true, false, want));
    ExpectEveryCheckGives(GetParam(), p.Args(true, false, got), want, "scale " + std::to_string(s));
    p.n = 1;  // the decode path
    Bf16GemmReference(p.Args(true, false, want));
    ExpectEveryCheckGives(GetParam(), p.Args(true, false, got), want, "decode, scale " + std::to_string(s));
  }
}

// Row tiles with a few subnormal codes (the moved-bits decode, subnormal float32 inputs) and with many
// (the x86 variants' subnormal loads through IEEE half, more than 1 in 1024: gemm_tile::kF8SubnormalShare),
// next to tiles with none, in the first row tile and later ones: every variant gives the reference's bits, for
// decode and a batch, under both F8TileCheck schemes, with
// MXCSR.DAZ / FPCR.FZ as the caller left it.
TEST_P(Fp8GemmIsaTest, RowTilesWithFewAndManySubnormalCodesGiveTheReferenceBits) {
  for (const int64_t n : {int64_t{1}, int64_t{6}, int64_t{70}}) {
    for (const bool rich_first_tile : {false, true}) {
      Fp8Problem p(48, 1024, n, 16, 128, 5);
      for (uint8_t& b : p.f8) {
        if ((b & 0x78) == 0) b |= 0x08;  // no subnormal (or zero) code anywhere yet
      }
      p.f8[5 * 1024 + 7] = 0x03;  // row 5: one subnormal, +3 2^-9
      p.f8[9 * 1024 + 1000] = 0x86;  // row 9: one, -6 2^-9
      for (int64_t k = 0; k < 1024; k += 8) {
        if (rich_first_tile) p.f8[static_cast<size_t>(k + 5)] = 0x02;  // row 0: 1 in 8 (kFused then scans)
        p.f8[static_cast<size_t>(30 * 1024 + k)] = static_cast<uint8_t>((k / 8) % 2 ? 0x81 : 0x07);  // row 30: 1 in 8
        p.f8[static_cast<size_t>(31 * 1024 + k + 3)] = 0x05;  // row 31 too
      }
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t k = 0; k < p.cols; ++k)
          p.dequantized[static_cast<size_t>(r * p.cols + k)] =
              F8E4M3ToFloat(p.f8[static_cast<size_t>(r * p.cols + k)]) *
              p.scale[static_cast<size_t>((r / p.block_rows) * (p.cols / p.block_cols) + k / p.block_cols)];
      std::vector<float> want, got, f32;
      Bf16GemmReference(p.Args(true, true, want));
      const std::string what = "n = " + std::to_string(n) + (rich_first_tile ? ", row 0 rich in subnormals" : "");
      ExpectEveryCheckGives(GetParam(), p.Args(true, true, got), want, what);
      Bf16GemmReference(p.Args(false, true, f32));
      ExpectSameBits(want, f32, "dequantized, " + what);
    }
  }
}

// One NaN code (0x7f or 0xff) in otherwise finite rows, at the first and last code of a row tile's vector
// part, in the second half of a 32-code pair, in a lone 16-code block (16-column scale blocks: no pairs) and
// in the scalar tail: its row gives NaN and every other row the reference's bits, for decode, 2- and
// 3-token tiles and a batch, under both F8TileCheck schemes (the fused one computes that tile again).
TEST_P(Fp8GemmIsaTest, ALoneNanCodeAnywhereGivesTheReferenceBits) {
  struct Case {
    int64_t block_cols, row, col;
    uint8_t code;
  };
  const int64_t rows = 12, cols = 272;  // 17 blocks of 16 columns, no tail; cols 280 below has one
  const Case cases[] = {{128, 0, 0, 0x7f},   {128, 5, 255, 0xff}, {128, 7, 16 + 32 * 3, 0x7f},
                        {16, 3, 16 * 5 + 9, 0xff}, {16, 11, 271, 0x7f}, {32, 6, 272 + 3, 0xff}};
  for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{9}}) {
    for (const Case& c : cases) {
      const int64_t width = c.col >= cols ? cols + 8 : cols;  // 280: 17 blocks and an 8-column tail
      Fp8Problem p(rows, width, n, 4, c.block_cols, 31);
      p.f8[static_cast<size_t>(c.row * width + c.col)] = c.code;
      const std::string what = "n " + std::to_string(n) + " block_cols " + std::to_string(c.block_cols) + " NaN at (" +
                               std::to_string(c.row) + ", " + std::to_string(c.col) + ")";
      std::vector<float> want, got;
      Bf16GemmReference(p.Args(true, true, want));
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(std::isnan(want[static_cast<size_t>(t * rows + r)]), r == c.row) << what << " row " << r;
      }
      ExpectEveryCheckGives(GetParam(), p.Args(true, true, got), want, what);
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
// The x86 variants read E4M3 subnormals as float32 subnormals: a caller's MXCSR.DAZ (denormal inputs
// read as zero, e.g. torch.set_flush_denormal) must not change the product, and comes back as it was.
TEST_P(Fp8GemmIsaTest, DenormalsAreZeroModeDoesNotChangeTheProduct) {
  const Fp8Problem p(17, 257, 1, 16, 64, 77);  // random bytes: 1 in 16 has exponent 0
  std::vector<float> want, got;
  Bf16GemmReference(p.Args(true, false, want));
  const unsigned csr = _mm_getcsr();
  _mm_setcsr(csr | (1u << 6));
  const Status status = Bf16GemmWithIsa(GetParam(), p.Args(true, false, got));
  const unsigned after = _mm_getcsr();
  _mm_setcsr(csr);
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(after, csr | (1u << 6));
  ExpectSameBits(want, got, "with MXCSR.DAZ set");
}
#elif defined(__aarch64__)
// NEON reads E4M3 subnormals as float32 subnormals: a caller's FPCR.FZ (flush-to-zero) must not change
// the product, and comes back as it was.
TEST_P(Fp8GemmIsaTest, FlushToZeroModeDoesNotChangeTheProduct) {
  const Fp8Problem p(17, 257, 1, 16, 64, 77);  // random bytes: 1 in 16 has exponent 0
  std::vector<float> want, got;
  Bf16GemmReference(p.Args(true, false, want));
  uint64_t fpcr;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(fpcr));
  const uint64_t fz = fpcr | (uint64_t{1} << 24);
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fz));
  const Status status = Bf16GemmWithIsa(GetParam(), p.Args(true, false, got));
  uint64_t after;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(after));
  __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr));
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(after, fz);
  ExpectSameBits(want, got, "with FPCR.FZ set");
}
#endif

INSTANTIATE_TEST_SUITE_P(AllIsas, Fp8GemmIsaTest,
                         ::testing::Values(GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kNeon,
                                           GemmIsa::kAvx512Bf16, GemmIsa::kNeonBf16, GemmIsa::kAmxBf16),
                         [](const auto& info) { return std::string(GemmIsaName(info.param)); });

TEST(Fp8GemmValidateTest, ScalesAndBlocksAreRequired) {
  const Fp8Problem p(4, 32, 1, 2, 16, 5);
  std::vector<float> y;
  GemmArgs a = p.Args(true, false, y);
  a.w.f8_scale = nullptr;
  EXPECT_NE(ValidateGemmArgs(a).message().find("no scales"), std::string::npos);
  a = p.Args(true, false, y);
  a.w.block_cols = 24;  // not a multiple of 16
  EXPECT_NE(ValidateGemmArgs(a).message().find("multiple of 16"), std::string::npos);
  a = p.Args(true, false, y);
  a.w.block_rows = 0;
  EXPECT_FALSE(ValidateGemmArgs(a).ok());
  EXPECT_TRUE(ValidateGemmArgs(p.Args(true, false, y)).ok());
  a = p.Args(true, false, y);
  a.f8_check = static_cast<F8TileCheck>(5);
  const Status s = ValidateGemmArgs(a);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("f8_check 5"), std::string::npos) << s.ToString();
}

TEST(F8TileCheckTest, TheProcessSchemeIsAConcreteOneAndTheDefaultFollowsTheVendor) {
  // ActiveF8TileCheck resolves kAuto once (ZIPMOE_F8_TILE_CHECK or the CPU vendor's default).
  const F8TileCheck active = ActiveF8TileCheck();
  EXPECT_TRUE(active == F8TileCheck::kScan || active == F8TileCheck::kFused) << static_cast<int>(active);
  EXPECT_STREQ(F8TileCheckName(F8TileCheck::kAuto), "auto");
  EXPECT_STREQ(F8TileCheckName(F8TileCheck::kScan), "scan");
  EXPECT_STREQ(F8TileCheckName(F8TileCheck::kFused), "fused");
  EXPECT_STREQ(F8TileCheckName(static_cast<F8TileCheck>(9)), "unknown");
  // Fused where subnormal inputs cost no microcode assist (AMD, measured on Zen 2), the scan elsewhere.
  EXPECT_EQ(DefaultF8TileCheckFor("AuthenticAMD"), F8TileCheck::kFused);
  EXPECT_EQ(DefaultF8TileCheckFor("HygonGenuine"), F8TileCheck::kFused);
  EXPECT_EQ(DefaultF8TileCheckFor("GenuineIntel"), F8TileCheck::kScan);
  EXPECT_EQ(DefaultF8TileCheckFor(""), F8TileCheck::kScan);
}

}  // namespace
}  // namespace zipmoe::kernels
