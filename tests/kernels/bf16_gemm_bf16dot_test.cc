// The BF16 dot-product variants of the CPU matmuls (kernels/bf16_gemm_avx512bf16.cc, bf16_gemm_amx.cc and
// bf16_gemm_neon_bf16.cc, opt-in): against their scalar models (Bf16GemmBf16DotReference,
// Bf16GemmAmxReference) and a float64 dot product, and the invariances every variant keeps (row split,
// batch, BF16 vs planes). Each instantiation is skipped with a message where its instructions are missing
// (x86 without AVX512_BF16 or AMX-BF16, or a kernel that does not grant the tile state; the Arm one runs
// under qemu-user, tests/kernels/aarch64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "kernels/bf16_gemm.h"
#include "tests/kernels/bf16_values.h"

namespace zipmoe::kernels {
namespace {

using testing::FromBf16;
using testing::ToBf16;

struct Problem {
  int64_t rows, cols, n;
  std::vector<uint16_t> w;
  std::vector<uint8_t> e, sm;
  std::vector<float> x, bias;
  Problem(int64_t r, int64_t c, int64_t tokens, uint32_t seed) : rows(r), cols(c), n(tokens) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    w.resize(static_cast<size_t>(r * c));
    for (auto& v : w) v = ToBf16(normal(rng) * 0.05f);
    e.resize(w.size());
    sm.resize(w.size());
    SplitBf16(w.data(), static_cast<int64_t>(w.size()), e.data(), sm.data());
    x.resize(static_cast<size_t>(tokens * c));
    for (auto& v : x) v = normal(rng);
    bias.resize(static_cast<size_t>(r));
    for (auto& v : bias) v = normal(rng);
  }
  GemmArgs Args(bool planes, std::vector<float>& y, int64_t n_tokens = -1, int64_t token0 = 0) const {
    const int64_t nt = n_tokens < 0 ? n : n_tokens;
    y.assign(static_cast<size_t>(nt * rows), std::numeric_limits<float>::quiet_NaN());
    GemmArgs a;
    a.w.rows = rows;
    a.w.cols = cols;
    if (planes) {
      a.w.e = e.data();
      a.w.sm = sm.data();
    } else {
      a.w.bf16 = w.data();
    }
    a.x = x.data() + token0 * cols;
    a.n = nt;
    a.ldx = cols;
    a.bias = bias.data();
    a.y = y.data();
    a.ldy = rows;
    a.row_begin = 0;
    a.row_end = rows;
    return a;
  }
};

class Bf16DotTest : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void SetUp() override {
    if (!GemmIsaAvailable(GetParam()))
      GTEST_SKIP() << GemmIsaName(GetParam()) << " is not compiled into this binary or not supported by this CPU";
  }
};

// The variant's scalar model.
void ModelOf(GemmIsa isa, const GemmArgs& a) {
  if (isa == GemmIsa::kAmxBf16) {
    Bf16GemmAmxReference(a);
  } else {
    Bf16GemmBf16DotReference(a);
  }
}

// Shapes with and without a 32-column remainder, decode and batches past the 16-token split block; AMX's
// 16-row tiles and a partial one (150 = 9 x 16 + 6), tokens in tiles of 16 (21, 37) and in more than one
// 64-token chunk of them (70).
const int64_t kShapes[][3] = {{13, 64, 1}, {9, 100, 3}, {33, 1024, 1}, {17, 96, 21}, {5, 31, 4}, {40, 2048, 5},
                              {150, 160, 37}, {64, 512, 16}, {21, 96, 70}};

TEST_P(Bf16DotTest, CloseToItsScalarModelAndWithin2Pow15OfFloat64) {
  for (const auto& s : kShapes) {
    const Problem p(s[0], s[1], s[2], 7);
    std::vector<float> got, model;
    ASSERT_TRUE(Bf16GemmWithIsa(GetParam(), p.Args(false, got)).ok());
    ModelOf(GetParam(), p.Args(false, model));
    for (int64_t t = 0; t < p.n; ++t) {
      for (int64_t r = 0; r < p.rows; ++r) {
        double exact = p.bias[static_cast<size_t>(r)], mass = std::abs(exact);
        for (int64_t k = 0; k < p.cols; ++k) {
          const double term = static_cast<double>(FromBf16(p.w[static_cast<size_t>(r * p.cols + k)])) * p.x[static_cast<size_t>(t * p.cols + k)];
          exact += term;
          mass += std::abs(term);
        }
        const size_t i = static_cast<size_t>(t * p.rows + r);
        // The activation's lo half keeps 16 significant bits: each product within 2^-16 (+ fp32 sums).
        EXPECT_LE(std::abs(got[i] - exact), std::ldexp(mass, -15)) << s[0] << "x" << s[1] << " t" << t << " r" << r;
        EXPECT_LE(std::abs(got[i] - model[i]), std::ldexp(mass, -20)) << s[0] << "x" << s[1] << " t" << t << " r" << r;
      }
    }
  }
}

TEST_P(Bf16DotTest, SameBitsWhateverTheRowSplitTheBatchAndTheEncoding) {
  const Problem p(150, 200, 70, 3);
  std::vector<float> all;
  ASSERT_TRUE(Bf16GemmWithIsa(GetParam(), p.Args(false, all)).ok());
  std::vector<float> planes;
  ASSERT_TRUE(Bf16GemmWithIsa(GetParam(), p.Args(true, planes)).ok());
  EXPECT_EQ(0, std::memcmp(all.data(), planes.data(), all.size() * sizeof(float)));
  // Row ranges of 5 and tokens one at a time.
  std::vector<float> split(all.size(), std::numeric_limits<float>::quiet_NaN());
  for (int64_t t = 0; t < p.n; ++t) {
    for (int64_t r0 = 0; r0 < p.rows; r0 += 5) {
      std::vector<float> y;
      GemmArgs a = p.Args(false, y, 1, t);
      a.row_begin = r0;
      a.row_end = std::min<int64_t>(p.rows, r0 + 5);
      ASSERT_TRUE(Bf16GemmWithIsa(GetParam(), a).ok());
      for (int64_t r = a.row_begin; r < a.row_end; ++r)
        split[static_cast<size_t>(t * p.rows + r)] = y[static_cast<size_t>(r)];
    }
  }
  EXPECT_EQ(0, std::memcmp(all.data(), split.data(), all.size() * sizeof(float)));
}

INSTANTIATE_TEST_SUITE_P(DotIsas, Bf16DotTest,
                         ::testing::Values(GemmIsa::kAvx512Bf16, GemmIsa::kNeonBf16, GemmIsa::kAmxBf16),
                         [](const ::testing::TestParamInfo<GemmIsa>& info) { return std::string(GemmIsaName(info.param)); });

// One row of BF16 weights times one token: the arguments of a 1 x cols product into y[0].
GemmArgs OneRow(const std::vector<uint16_t>& w, const std::vector<float>& x, std::vector<float>& y) {
  y.assign(1, std::numeric_limits<float>::quiet_NaN());
  GemmArgs a;
  a.w.bf16 = w.data();
  a.w.rows = 1;
  a.w.cols = static_cast<int64_t>(w.size());
  a.x = x.data();
  a.n = 1;
  a.ldx = a.w.cols;
  a.y = y.data();
  a.ldy = 1;
  a.row_end = 1;
  return a;
}

TEST(Bf16DotModelTest, KnownAnswerForExactlyRepresentableInputs) {
  // x = 1 + 2^-10 needs more than BF16's 8 bits: hi = 1, lo = 2^-10; the models recover it exactly.
  const std::vector<uint16_t> w(32, ToBf16(2.0f));
  const std::vector<float> x(32, 1.0f + std::ldexp(1.0f, -10));
  std::vector<float> y;
  Bf16GemmBf16DotReference(OneRow(w, x, y));
  EXPECT_EQ(y[0], 64.0f + std::ldexp(64.0f, -10));
  Bf16GemmAmxReference(OneRow(w, x, y));
  EXPECT_EQ(y[0], 64.0f + std::ldexp(64.0f, -10));
}

TEST(Bf16DotModelTest, TheAmxModelIsOneChainInPairOrder) {
  // Columns 0, 2, 4 carry 2^24, 1, -2^24. In one chain (the AMX model) 2^24 + 1 rounds to 2^24 (a tie, to
  // even) before column 4 cancels it: 0. The 16-lane model keeps them in lanes 0, 1, 2 (pairs 0-1, 2-3,
  // 4-5) and its tree adds lane 0 to lane 2 first, then lane 1: 1.
  std::vector<uint16_t> w(32, ToBf16(0.0f));
  w[0] = ToBf16(16777216.0f);
  w[2] = ToBf16(1.0f);
  w[4] = ToBf16(-16777216.0f);
  const std::vector<float> x(32, 1.0f);
  std::vector<float> y;
  Bf16GemmAmxReference(OneRow(w, x, y));
  EXPECT_EQ(y[0], 0.0f);
  Bf16GemmBf16DotReference(OneRow(w, x, y));
  EXPECT_EQ(y[0], 1.0f);
}

}  // namespace
}  // namespace zipmoe::kernels
