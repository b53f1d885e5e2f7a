// Attention's softmax-and-values kernels (kernels/attention_cpu.h): AttentionExp against double-precision
// exp (within 2 ulp, 0 below -87, NaN kept); the reference against a float64 softmax; known answers; every
// ISA variant compiled in and supported here bit-identical to the reference over shapes (every tail of
// the sixteen-lane sum and of the value passes, padded value rows, sinks, extreme and NaN scores); the
// argument checks; SoftmaxValuesRows (several rows, one pass over shared values) bit-identical to the
// reference row by row.
// Built for the host and, cross-compiled, for AArch64 under qemu-user (tests/kernels/aarch64/).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention_cpu.h"
#include "tests/kernels/expect_bits.h"

namespace zipmoe::kernels {
namespace {

using testing::ExpectSameBits;

// Distance in units in the last place between two positive floats.
int64_t UlpDistance(float a, float b) {
  return std::llabs(static_cast<int64_t>(testing::Bits(a)) - static_cast<int64_t>(testing::Bits(b)));
}

TEST(AttentionExpTest, WithinTwoUlpOfDoubleExpAndZeroBelowMinus87) {
  int64_t worst = 0;
  float worst_x = 0.0f;
  // Every 37th float from -87 up to 0, and the integers and half-integers (range-reduction edges).
  std::vector<float> xs;
  for (uint32_t b = testing::Bits(-87.0f); b > testing::Bits(-0.0f); b -= 37) {
    float x;
    std::memcpy(&x, &b, sizeof(x));
    xs.push_back(x);
  }
  for (int i = 0; i <= 174; ++i) xs.push_back(-0.5f * static_cast<float>(i));
  xs.push_back(0.0f);
  xs.push_back(-0.0f);
  for (float x : xs) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    const float got = AttentionExp(x);
    if (want < std::numeric_limits<float>::min()) {  // subnormal: within one subnormal step of 2 ulp scale
      EXPECT_NEAR(got, want, 4.0f * std::numeric_limits<float>::denorm_min() * 8) << x;
      continue;
    }
    const int64_t d = UlpDistance(want, got);
    if (d > worst) worst = d, worst_x = x;
  }
  EXPECT_LE(worst, 2) << "at x = " << worst_x << ": " << AttentionExp(worst_x) << " vs " << std::exp(double{worst_x});
  EXPECT_EQ(AttentionExp(0.0f), 1.0f);
  EXPECT_EQ(AttentionExp(-87.5f), 0.0f);
  EXPECT_EQ(AttentionExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(AttentionExp(std::numeric_limits<float>::quiet_NaN())));
}

struct Shape {
  int64_t n, dv, pad;
  bool sink;
};

std::string Name(const Shape& s) {
  return "n " + std::to_string(s.n) + " dv " + std::to_string(s.dv) + " pad " + std::to_string(s.pad) +
         (s.sink ? " sink" : "");
}

// One row: n scores (spread as q·k is: normal, sd 8), value rows of dv floats with `pad` more between
// rows, an optional sink.
struct Problem {
  Shape shape;
  std::vector<float> scores, v;
  float sink = 0.0f;

  Problem(const Shape& s, uint32_t seed) : shape(s) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    scores.resize(static_cast<size_t>(s.n));
    for (float& x : scores) x = 8.0f * normal(rng);
    v.resize(static_cast<size_t>(s.n * (s.dv + s.pad)));
    for (float& x : v) x = normal(rng);
    sink = 3.0f * normal(rng);
  }
  SoftmaxValuesArgs Args(std::vector<float>& s, std::vector<float>& out) const {
    s = scores;
    out.assign(static_cast<size_t>(shape.dv), -1.0f);
    SoftmaxValuesArgs a;
    a.scores = s.data();
    a.n = shape.n;
    a.scale = 0.125f;
    a.sink = shape.sink ? &sink : nullptr;
    a.v = v.data();
    a.v_row_stride = shape.dv + shape.pad;
    a.dv = shape.dv;
    a.out = out.data();
    return a;
  }
};

TEST(SoftmaxValuesReferenceTest, MatchesFloat64Softmax) {
  uint32_t seed = 1;
  for (const Shape& s : {Shape{1, 8, 0, false}, Shape{37, 64, 3, false}, Shape{2048, 128, 0, true}, Shape{300, 5, 1, true}}) {
    const Problem p(s, seed++);
    std::vector<float> sc, out;
    const SoftmaxValuesArgs a = p.Args(sc, out);
    SoftmaxValuesReference(a);
    double m = s.sink ? p.sink : -1e300;
    for (float x : p.scores) m = std::max(m, 0.125 * x);
    double sum = s.sink ? std::exp(p.sink - m) : 0.0;
    for (float x : p.scores) sum += std::exp(0.125 * x - m);
    for (int64_t d = 0; d < s.dv; ++d) {
      double want = 0.0;
      for (int64_t j = 0; j < s.n; ++j)
        want += std::exp(0.125 * p.scores[static_cast<size_t>(j)] - m) / sum * p.v[static_cast<size_t>(j * (s.dv + s.pad) + d)];
      EXPECT_NEAR(out[static_cast<size_t>(d)], want, 2e-6 * (1.0 + std::abs(want))) << Name(s) << " column " << d;
    }
  }
}

TEST(SoftmaxValuesReferenceTest, KnownAnswers) {
  // One visible key: p = 1, the output is its value row exactly.
  std::vector<float> s = {3.0f}, v = {1.5f, -2.25f, 1e-30f}, out(3);
  SoftmaxValuesArgs a;
  a.scores = s.data();
  a.n = 1;
  a.v = v.data();
  a.v_row_stride = 3;
  a.dv = 3;
  a.out = out.data();
  SoftmaxValuesReference(a);
  EXPECT_EQ(out, v);
  EXPECT_EQ(s[0], 1.0f);
  // Equal scores: equal weights (1/4 each, exact), the mean of the rows.
  s = {2.0f, 2.0f, 2.0f, 2.0f};
  v = {4.0f, 0.0f, 8.0f, 4.0f, 0.0f, 4.0f, 4.0f, 12.0f};
  out.assign(2, 0.0f);
  a.scores = s.data();
  a.n = 4;
  a.v = v.data();
  a.v_row_stride = 2;
  a.dv = 2;
  a.out = out.data();
  SoftmaxValuesReference(a);
  EXPECT_EQ(out, (std::vector<float>{4.0f, 5.0f}));
  // A sink as likely as the one key halves its weight.
  s = {0.5f};
  v = {6.0f};
  const float sink = 0.5f;
  a.scores = s.data();
  a.n = 1;
  a.sink = &sink;
  a.v = v.data();
  a.v_row_stride = 1;
  a.dv = 1;
  SoftmaxValuesReference(a);
  EXPECT_EQ(out[0], 3.0f);
}

// Every value-prefetch scheme a caller can ask for (SoftmaxValuesArgs::prefetch).
constexpr GemvPrefetch kPrefetchSchemes[] = {GemvPrefetch::kAuto, GemvPrefetch::kAhead, GemvPrefetch::kHardware};

struct IsaParam {
  GemmIsa isa;
};
void PrintTo(const IsaParam& p, std::ostream* os) { *os << GemmIsaName(p.isa); }

class SoftmaxValuesIsaTest : public ::testing::TestWithParam<IsaParam> {
 protected:
  void SetUp() override {
    if (!AttentionIsaAvailable(GetParam().isa))
      GTEST_SKIP() << GemmIsaName(GetParam().isa) << " is not compiled into this binary or not supported by this CPU";
  }
};

TEST_P(SoftmaxValuesIsaTest, BitIdenticalToReference) {
  const GemmIsa isa = GetParam().isa;
  uint32_t seed = 100;
  std::vector<Shape> shapes;
  for (int64_t n : {1, 3, 4, 7, 15, 16, 17, 31, 33, 64, 100, 513, 2049})
    for (int64_t dv : {1, 3, 4, 8, 17, 32, 64, 65, 128, 129, 200, 512}) shapes.push_back({n, dv, (n + dv) % 3, n % 2 == 0});
  for (const Shape& s : shapes) {
    const Problem p(s, seed++);
    std::vector<float> want_s, want, got_s, got;
    SoftmaxValuesReference(p.Args(want_s, want));
    // The value rows' prefetch changes the speed only (kAuto: this CPU's scheme).
    for (const GemvPrefetch prefetch : kPrefetchSchemes) {
      SoftmaxValuesArgs a = p.Args(got_s, got);
      a.prefetch = prefetch;
      const std::string name = Name(s) + " prefetch " + GemvPrefetchName(prefetch);
      ASSERT_TRUE(SoftmaxValuesWithIsa(isa, a).ok()) << name;
      ExpectSameBits(want, got, name + " out");
      ExpectSameBits(want_s, got_s, name + " p");
    }
  }
}

// A BF16 KV cache's values: the same bits as the float32 values they widen to, on every variant.
TEST_P(SoftmaxValuesIsaTest, Bf16ValuesEqualTheirFloat32Widening) {
  const GemmIsa isa = GetParam().isa;
  uint32_t seed = 300;
  for (const Shape& s : {Shape{1, 8, 0, false}, Shape{17, 129, 2, true}, Shape{100, 128, 0, false},
                         Shape{2049, 64, 1, true}, Shape{33, 3, 0, false}}) {
    Problem p(s, seed++);
    std::vector<uint16_t> bf16(p.v.size());
    for (size_t i = 0; i < p.v.size(); ++i) {
      bf16[i] = static_cast<uint16_t>(testing::Bits(p.v[i]) >> 16);  // truncated: any BF16 pattern will do
      const uint32_t widened = static_cast<uint32_t>(bf16[i]) << 16;
      std::memcpy(&p.v[i], &widened, sizeof(float));
    }
    std::vector<float> want_s, want, got_s, got;
    SoftmaxValuesReference(p.Args(want_s, want));
    for (const GemvPrefetch prefetch : kPrefetchSchemes) {
      SoftmaxValuesArgs a = p.Args(got_s, got);
      a.v = nullptr;
      a.v_bf16 = bf16.data();
      a.prefetch = prefetch;
      ASSERT_TRUE(SoftmaxValuesWithIsa(isa, a).ok()) << Name(s);
      ExpectSameBits(want, got, Name(s) + " bf16 values, prefetch " + GemvPrefetchName(prefetch));
    }
  }
}

TEST_P(SoftmaxValuesIsaTest, ExtremeScoresAndNaN) {
  const GemmIsa isa = GetParam().isa;
  Problem p({40, 24, 1, false}, 9);
  // Keys far below the maximum (exp underflows to 0 past -87), huge and tiny magnitudes, signed zeros.
  for (size_t j = 0; j < p.scores.size(); ++j)
    p.scores[j] = j % 5 == 0 ? -1e6f : j % 5 == 1 ? 700.0f + static_cast<float>(j) : j % 5 == 2 ? -0.0f : 1e-30f;
  std::vector<float> want_s, want, got_s, got;
  SoftmaxValuesReference(p.Args(want_s, want));
  ASSERT_TRUE(SoftmaxValuesWithIsa(isa, p.Args(got_s, got)).ok());
  ExpectSameBits(want, got, "extreme scores");
  for (float x : got) EXPECT_TRUE(std::isfinite(x));
  // One NaN score: every output NaN (the executor fails such a sequence).
  p.scores[17] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(SoftmaxValuesWithIsa(isa, p.Args(got_s, got)).ok());
  for (float x : got) EXPECT_TRUE(std::isnan(x));
}

// Several rows at once (a causal prefill's consecutive rows): each row's p and out bit-identical to the
// reference row by row, whether the rows share their value rows (one joint pass; the n differ as a causal
// block's do, or are equal, or the first row is the longest) or not (different value rows, strides or dv:
// row by row), in f32 and BF16.
TEST_P(SoftmaxValuesIsaTest, RowsBitIdenticalToTheReferenceRowByRow) {
  const GemmIsa isa = GetParam().isa;
  uint32_t seed = 500;
  struct Case {
    std::vector<int64_t> n;  // per row
    int64_t dv, pad;
    bool sink, same_values, bf16;
  };
  std::vector<Case> cases;
  for (int64_t dv : {1, 7, 16, 64, 65, 100, 128, 200})
    for (bool bf16 : {false, true}) {
      cases.push_back({{5, 6, 7, 8}, dv, dv % 3, dv % 2 == 0, true, bf16});  // a causal block's rows
      cases.push_back({{1, 2}, dv, 0, false, true, bf16});
      cases.push_back({{300, 300, 300}, dv, 1, true, true, bf16});
      cases.push_back({{1000, 17, 999, 33}, dv, 0, false, true, bf16});  // the first the longest
      cases.push_back({{40, 41, 42, 43}, dv, 2, true, false, bf16});     // other value rows each
      cases.push_back({{2049}, dv, 0, true, true, bf16});
      cases.push_back({{260, 300, 257, 400}, dv, 1, false, true, bf16});  // several key blocks together, then tails
      cases.push_back({{64, 65, 66, 67, 68, 69, 70, 71}, dv, 0, true, true, bf16});  // kSoftmaxValuesMaxRows
      cases.push_back({{9, 3, 12, 12, 1, 30}, dv, 1, false, true, bf16});
      cases.push_back({{20, 21, 22, 23, 24, 25, 26}, dv, 0, false, false, bf16});
    }
  for (const Case& c : cases) {
    const int count = static_cast<int>(c.n.size());
    const int64_t max_n = *std::max_element(c.n.begin(), c.n.end());
    std::mt19937 rng(seed++);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t stride = c.dv + c.pad;
    // Value rows: one shared matrix, or one per row.
    std::vector<std::vector<float>> v(static_cast<size_t>(c.same_values ? 1 : count));
    std::vector<std::vector<uint16_t>> vb(v.size());
    for (size_t m = 0; m < v.size(); ++m) {
      v[m].resize(static_cast<size_t>(max_n * stride));
      vb[m].resize(v[m].size());
      for (size_t i = 0; i < v[m].size(); ++i) {
        v[m][i] = normal(rng);
        vb[m][i] = static_cast<uint16_t>(testing::Bits(v[m][i]) >> 16);
      }
    }
    std::vector<std::vector<float>> scores(static_cast<size_t>(count));
    for (auto& row : scores) {
      row.resize(static_cast<size_t>(max_n));
      for (float& x : row) x = 8.0f * normal(rng);
    }
    const float sink = 1.5f;
    const std::string name = "count " + std::to_string(count) + " n0 " + std::to_string(c.n[0]) + " dv " +
                             std::to_string(c.dv) + (c.same_values ? " shared" : " separate") + (c.bf16 ? " bf16" : "");
    const auto args = [&](std::vector<std::vector<float>>& s, std::vector<std::vector<float>>& out) {
      s = scores;
      out.assign(static_cast<size_t>(count), std::vector<float>(static_cast<size_t>(c.dv), -1.0f));
      std::vector<SoftmaxValuesArgs> rows(static_cast<size_t>(count));
      for (int r = 0; r < count; ++r) {
        const size_t m = c.same_values ? 0 : static_cast<size_t>(r);
        SoftmaxValuesArgs& a = rows[static_cast<size_t>(r)];
        a.scores = s[static_cast<size_t>(r)].data();
        a.n = c.n[static_cast<size_t>(r)];
        a.scale = 0.125f;
        a.sink = c.sink ? &sink : nullptr;
        if (c.bf16) {
          a.v_bf16 = vb[m].data();
        } else {
          a.v = v[m].data();
        }
        a.v_row_stride = stride;
        a.dv = c.dv;
        a.out = out[static_cast<size_t>(r)].data();
      }
      return rows;
    };
    std::vector<std::vector<float>> want_s, want, got_s, got;
    for (const SoftmaxValuesArgs& a : args(want_s, want)) SoftmaxValuesReference(a);
    for (const GemvPrefetch prefetch : kPrefetchSchemes) {
      std::vector<SoftmaxValuesArgs> rows = args(got_s, got);
      for (SoftmaxValuesArgs& a : rows) a.prefetch = prefetch;
      const std::string named = name + " prefetch " + GemvPrefetchName(prefetch);
      ASSERT_TRUE(SoftmaxValuesRowsWithIsa(isa, rows.data(), count).ok()) << named;
      for (int r = 0; r < count; ++r) {
        ExpectSameBits(want[static_cast<size_t>(r)], got[static_cast<size_t>(r)], named + " row " + std::to_string(r) + " out");
        ExpectSameBits(want_s[static_cast<size_t>(r)], got_s[static_cast<size_t>(r)], named + " row " + std::to_string(r) + " p");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, SoftmaxValuesIsaTest,
                         ::testing::Values(IsaParam{GemmIsa::kScalar}, IsaParam{GemmIsa::kAvx2},
                                           IsaParam{GemmIsa::kAvx512}, IsaParam{GemmIsa::kNeon}),
                         [](const ::testing::TestParamInfo<IsaParam>& info) { return GemmIsaName(info.param.isa); });

TEST(SoftmaxValuesDispatchTest, DispatchedVariantIsAvailableAndBitIdentical) {
  EXPECT_TRUE(AttentionIsaAvailable(AttentionIsa())) << GemmIsaName(AttentionIsa());
  const Problem p({777, 128, 0, true}, 11);
  std::vector<float> want_s, want, got_s, got;
  SoftmaxValuesReference(p.Args(want_s, want));
  SoftmaxValues(p.Args(got_s, got));
  ExpectSameBits(want, got, std::string("dispatched ") + GemmIsaName(AttentionIsa()));
}

TEST(SoftmaxValuesValidateTest, RejectsBadArgumentsNamingTheField) {
  const Problem p({4, 8, 0, false}, 3);
  std::vector<float> s, out;
  const auto check = [&](auto mutate, const std::string& field) {
    SoftmaxValuesArgs a = p.Args(s, out);
    mutate(a);
    const Status st = SoftmaxValuesWithIsa(GemmIsa::kScalar, a);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.ToString();
  };
  check([](SoftmaxValuesArgs& a) { a.n = 0; }, "n 0");
  check([](SoftmaxValuesArgs& a) { a.dv = 0; }, "dv 0");
  check([](SoftmaxValuesArgs& a) { a.v_row_stride = 7; }, "v_row_stride 7");
  check([](SoftmaxValuesArgs& a) { a.scores = nullptr; }, "scores is null");
  check([](SoftmaxValuesArgs& a) { a.v = nullptr; }, "v is null");
  check([](SoftmaxValuesArgs& a) { a.out = nullptr; }, "out is null");
  for (GemmIsa isa : {GemmIsa::kAvx512Bf16, GemmIsa::kAmxBf16, GemmIsa::kNeonBf16})
    EXPECT_EQ(SoftmaxValuesWithIsa(isa, p.Args(s, out)).code(), StatusCode::kUnavailable) << GemmIsaName(isa);
  // SoftmaxValuesRows: the count's range, and each row's checks naming the row.
  std::vector<float> s1, out1;
  SoftmaxValuesArgs rows[2] = {p.Args(s, out), p.Args(s1, out1)};
  for (int count : {0, kSoftmaxValuesMaxRows + 1}) {
    const Status st = SoftmaxValuesRowsWithIsa(GemmIsa::kScalar, rows, count);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << count;
    EXPECT_NE(st.message().find("count " + std::to_string(count)), std::string::npos) << st.ToString();
  }
  rows[1].dv = 0;
  const Status st = SoftmaxValuesRowsWithIsa(GemmIsa::kScalar, rows, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rows[1]: SoftmaxValues: dv 0"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace zipmoe::kernels
