// FP8 E4M3 block-scaled -> BF16 (kernels/fp8_dequant.h), the GPU executor's FP8 path: the CPU
// reference against the formula computed independently (all 256 codes, scale edges, block edges,
// NaN), MXFP4 likewise, and the CUDA kernel bit-identical to the reference (skipped without a device).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/fp8_dequant.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

// E4M3 by its definition (OCP FP8: bias 7, subnormals, S.1111.111 NaN), in double.
double E4M3(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? (m / 8.0) * std::ldexp(1.0, -6) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s != 0 ? -mag : mag;
}

// The BF16 pattern nearest to float f (ties to the even pattern), by comparing the two neighbours in
// double; NaN -> 0x7FC0.
uint16_t NearestBf16(float f) {
  if (std::isnan(f)) return 0x7fc0;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if ((u & 0xffffu) == 0) return lo;
  const auto value = [](uint16_t b) {
    const uint32_t w = static_cast<uint32_t>(b) << 16;
    float v;
    std::memcpy(&v, &w, 4);
    return static_cast<double>(v);
  };
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // the next pattern away from zero (inf at the top)
  const double dlo = std::fabs(static_cast<double>(f) - value(lo)), dhi = std::fabs(value(hi) - static_cast<double>(f));
  if (dlo < dhi) return lo;
  if (dhi < dlo) return hi;
  return (lo & 1u) == 0 ? lo : hi;
}

// Expected output for code c times scale s: the float32 product (exact in double, rounded once), to BF16.
uint16_t Expected(int code, float s) {
  const double e = E4M3(code);
  return NearestBf16(static_cast<float>(e * static_cast<double>(s)));
}

struct Problem {
  int64_t rows, cols, br, bc;
  std::vector<uint8_t> q;
  std::vector<float> scale;
};

Problem Random(int64_t rows, int64_t cols, int64_t br, int64_t bc, uint32_t seed) {
  Problem p{rows, cols, br, bc, {}, {}};
  std::mt19937 rng(seed);
  p.q.resize(static_cast<size_t>(rows * cols));
  for (uint8_t& b : p.q) b = static_cast<uint8_t>(rng());
  const int64_t sr = (rows + br - 1) / br, sc = (cols + bc - 1) / bc;
  std::normal_distribution<float> normal(0.0f, 2.0f);
  p.scale.resize(static_cast<size_t>(sr * sc));
  for (float& s : p.scale) s = std::exp(normal(rng)) * 1e-3f;
  return p;
}

TEST(Fp8DequantTest, EveryCodeAtEdgeScalesIsTheNearestBf16OfTheFloat32Product) {
  const float scales[] = {1.0f, 1e-3f, 0.0123f, 3.0e38f, 1e-40f, -2.5f, 0.0f, std::numeric_limits<float>::infinity(),
                          std::nanf("")};
  std::vector<uint8_t> q(256);
  for (int c = 0; c < 256; ++c) q[static_cast<size_t>(c)] = static_cast<uint8_t>(c);
  for (const float s : scales) {
    std::vector<uint16_t> out(256, 0xdead);
    DequantizeF8E4M3ToBf16Reference(q.data(), &s, 1, 256, 128, 256, out.data());
    std::vector<float> f(256);
    DequantizeF8E4M3ToFloatReference(q.data(), &s, 1, 256, 128, 256, f.data());
    for (int c = 0; c < 256; ++c) {
      EXPECT_EQ(out[static_cast<size_t>(c)], Expected(c, s)) << "code " << c << " scale " << s;
      const double want = E4M3(c) * static_cast<double>(s);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(f[static_cast<size_t>(c)])) << c;
      } else {
        EXPECT_EQ(f[static_cast<size_t>(c)], static_cast<float>(want)) << "code " << c << " scale " << s;
      }
    }
  }
}

TEST(Fp8DequantTest, EachElementTakesItsBlocksScale) {
  // Blocks of 2 x 3 over 5 x 7: every element's block (r / 2, k / 3), the last ones partial.
  const int64_t rows = 5, cols = 7, br = 2, bc = 3;
  std::vector<uint8_t> q(rows * cols, 0x38);  // 1.0
  std::vector<float> scale(3 * 3);
  for (size_t i = 0; i < scale.size(); ++i) scale[i] = static_cast<float>(i + 1);
  std::vector<uint16_t> out(rows * cols);
  DequantizeF8E4M3ToBf16Reference(q.data(), scale.data(), rows, cols, br, bc, out.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k)
      EXPECT_EQ(out[static_cast<size_t>(r * cols + k)], NearestBf16(scale[static_cast<size_t>((r / br) * 3 + k / bc)]))
          << r << "," << k;
  DequantizeF8E4M3ToBf16Reference(q.data(), scale.data(), 0, cols, br, bc, nullptr);  // nothing to do
}

// MXFP4 (zipmoe's raw layout: nibbles, then one E8M0 scale per 32 values of a row): every nibble at
// scales 2^-127 (a subnormal), 2^0, 2^127 and NaN, the low nibble being the even column.
TEST(Fp8DequantTest, Mxfp4EveryNibbleTimesItsBlocksScale) {
  const float e2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  const int64_t rows = 4, cols = 64;  // two blocks per row
  std::vector<uint8_t> raw(static_cast<size_t>(rows * cols / 2 + rows * cols / 32));
  for (int64_t i = 0; i < rows * cols / 2; ++i) raw[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 37 + 11) & 0xff);
  const uint8_t codes[8] = {0, 127, 254, 255, 126, 128, 1, 100};
  for (int i = 0; i < 8; ++i) raw[static_cast<size_t>(rows * cols / 2 + i)] = codes[i];
  std::vector<float> out(static_cast<size_t>(rows * cols));
  DequantizeMxfp4ToFloatReference(raw.data(), rows, cols, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) {
      const uint8_t byte = raw[static_cast<size_t>((r * cols + k) / 2)];
      const int nibble = k % 2 == 0 ? byte & 15 : byte >> 4;
      const uint8_t code = codes[r * 2 + k / 32];
      const double want = code == 255 ? std::nan("") : e2m1[nibble] * std::ldexp(1.0, code - 127);
      const float got = out[static_cast<size_t>(r * cols + k)];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << r << "," << k;
      } else {
        EXPECT_EQ(static_cast<double>(got), static_cast<double>(static_cast<float>(want))) << r << "," << k;
        EXPECT_EQ(std::signbit(got), nibble >= 8) << r << "," << k;
      }
    }
  }
}

// Several rows: each row's nibbles and its own scales (at rows * cols / 2 + r * cols / 32), rounded
// to BF16 (exact here: at most two significant bits; scale 0xFF -> 0x7FC0).
TEST(Fp8DequantTest, Mxfp4ToBf16TakesEachRowsScales) {
  const int64_t rows = 5, cols = 96;
  std::vector<uint8_t> raw(static_cast<size_t>(rows * cols / 2 + rows * cols / 32));
  std::mt19937 rng(9);
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  raw[static_cast<size_t>(rows * cols / 2 + 4)] = 0xff;  // one NaN block
  std::vector<float> f(static_cast<size_t>(rows * cols));
  DequantizeMxfp4ToFloatReference(raw.data(), rows, cols, f.data());
  std::vector<uint16_t> got(f.size(), 0xdead);
  DequantizeMxfp4ToBf16Reference(raw.data(), rows, cols, got.data());
  for (size_t i = 0; i < f.size(); ++i) EXPECT_EQ(got[i], NearestBf16(f[i])) << i;
  if (BuiltWithCuda())
    EXPECT_EQ(LaunchDequantizeMxfp4ToBf16(raw.data(), 1, 33, got.data(), nullptr).code(), StatusCode::kInvalidArgument);
  else
    EXPECT_EQ(LaunchDequantizeMxfp4ToBf16(raw.data(), 1, 32, got.data(), nullptr).code(), StatusCode::kUnavailable);
}

TEST(Fp8DequantGpuTest, Mxfp4KernelIsBitIdenticalToTheReference) {
  if (!BuiltWithCuda() || CudaDeviceCount() <= 0) GTEST_SKIP() << "no CUDA device";
  for (const int64_t rows : {1, 7, 2880}) {
    const int64_t cols = rows == 2880 ? 2880 : 96;  // gpt-oss-20b's down projection, and small ones
    std::vector<uint8_t> raw(static_cast<size_t>(rows * cols / 2 + rows * cols / 32));
    std::mt19937 rng(static_cast<uint32_t>(rows));
    for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
    std::vector<uint16_t> want(static_cast<size_t>(rows * cols)), got(want.size(), 0xdead);
    DequantizeMxfp4ToBf16Reference(raw.data(), rows, cols, want.data());
    ASSERT_TRUE(DequantizeMxfp4ToBf16OnDevice(raw.data(), rows, cols, got.data()).ok());
    EXPECT_EQ(want, got) << rows << "x" << cols;
  }
}

TEST(Fp8DequantTest, LauncherValidatesOrReportsNoCuda) {
  const uint8_t q[4] = {};
  const float s = 1.0f;
  uint16_t out[4];
  if (!BuiltWithCuda()) {
    EXPECT_EQ(LaunchDequantizeF8E4M3ToBf16(q, &s, 1, 4, 128, 128, out, nullptr).code(), StatusCode::kUnavailable);
    EXPECT_EQ(DequantizeF8E4M3ToBf16OnDevice(q, &s, 1, 4, 128, 128, out).code(), StatusCode::kUnavailable);
    return;
  }
  EXPECT_EQ(LaunchDequantizeF8E4M3ToBf16(q, &s, -1, 4, 128, 128, out, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchDequantizeF8E4M3ToBf16(q, &s, 1, 4, 0, 128, out, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LaunchDequantizeF8E4M3ToBf16(nullptr, &s, 1, 4, 128, 128, out, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(LaunchDequantizeF8E4M3ToBf16(q, &s, 0, 4, 128, 128, out, nullptr).ok());
}

TEST(Fp8DequantGpuTest, KernelIsBitIdenticalToTheReference) {
  if (!BuiltWithCuda() || CudaDeviceCount() <= 0) GTEST_SKIP() << "no CUDA device";
  struct Shape {
    int64_t rows, cols, br, bc;
  };
  // Released blocks (128x128) on an expert's shape, partial blocks, rows not a multiple of 4 columns.
  const Shape shapes[] = {{1, 1, 128, 128}, {3, 5, 2, 2}, {17, 130, 16, 64}, {256, 384, 128, 128}, {1408, 2048, 128, 128}};
  uint32_t seed = 3;
  for (const Shape& sh : shapes) {
    const Problem p = Random(sh.rows, sh.cols, sh.br, sh.bc, seed++);
    std::vector<uint16_t> want(p.q.size()), got(p.q.size(), 0xdead);
    DequantizeF8E4M3ToBf16Reference(p.q.data(), p.scale.data(), p.rows, p.cols, p.br, p.bc, want.data());
    ASSERT_TRUE(DequantizeF8E4M3ToBf16OnDevice(p.q.data(), p.scale.data(), p.rows, p.cols, p.br, p.bc, got.data()).ok());
    EXPECT_EQ(want, got) << sh.rows << "x" << sh.cols;
  }
}

}  // namespace
}  // namespace zipmoe::kernels
