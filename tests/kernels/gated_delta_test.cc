// Gated DeltaNet kernels (kernels/gated_delta.h): the reference recurrence against a float64 naive one;
// every ISA variant compiled in and supported here bit-identical to the reference over shapes (tails
// of every vector and block width, shared key heads, padded strides, head ranges); t tokens in one
// call equal to t calls of one token; the argument checks; the conv1d + SiLU and L2 normalisation
// helpers against float64 naive code.
// Built for the host and, cross-compiled, for AArch64 under qemu-user (tests/kernels/aarch64/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gated_delta.h"
#include "tests/kernels/expect_bits.h"

namespace zipmoe::kernels {
namespace {

using testing::Bits;
using testing::ExpectSameBits;

struct Shape {
  int64_t t, n_k, n_v, dk, dv;
};

std::string Name(const Shape& s) {
  return "t " + std::to_string(s.t) + " n_k " + std::to_string(s.n_k) + " n_v " + std::to_string(s.n_v) + " dk " +
         std::to_string(s.dk) + " dv " + std::to_string(s.dv);
}

// One problem laid out as Qwen3-Next's conv output: q, k and v are column slices of one [t, channels]
// buffer (channels = 2 n_k dk + n_v dv + pad), out has a padded token stride; q and k rows are
// L2-normalised, q scaled by dk^-0.5, g in [-2, 0), beta in (0, 1), a nonzero initial state.
struct Problem {
  Shape shape;
  int64_t channels, out_stride;
  std::vector<float> x, g, beta, state0;

  Problem(const Shape& s, uint32_t seed) : shape(s) {
    channels = 2 * s.n_k * s.dk + s.n_v * s.dv + 3;
    out_stride = s.n_v * s.dv + 2;
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    x.resize(static_cast<size_t>(s.t * channels));
    for (float& v : x) v = normal(rng);
    L2NormalizeHeads(x.data(), s.t, s.n_k, s.dk, channels, 1.0f / std::sqrt(static_cast<float>(s.dk)));
    L2NormalizeHeads(x.data() + s.n_k * s.dk, s.t, s.n_k, s.dk, channels, 1.0f);
    g.resize(static_cast<size_t>(s.t * s.n_v));
    beta.resize(g.size());
    for (float& v : g) v = -2.0f * unit(rng) - 1e-3f;
    for (float& v : beta) v = 0.05f + 0.9f * unit(rng);
    state0.resize(static_cast<size_t>(s.n_v * s.dk * s.dv));
    for (float& v : state0) v = 0.3f * normal(rng);
  }

  // Args for tokens [s0, s0 + n) and heads [h0, h1), on `state` and `out` (out covers all t tokens).
  GatedDeltaArgs Args(std::vector<float>& state, std::vector<float>& out, int64_t s0, int64_t n, int64_t h0,
                      int64_t h1) const {
    const Shape& s = shape;
    GatedDeltaArgs a;
    a.q = x.data() + s0 * channels;
    a.k = a.q + s.n_k * s.dk;
    a.v = a.k + s.n_k * s.dk;
    a.g = g.data() + s0 * s.n_v;
    a.beta = beta.data() + s0 * s.n_v;
    a.state = state.data();
    a.out = out.data() + s0 * out_stride;
    a.t = n;
    a.n_k = s.n_k;
    a.n_v = s.n_v;
    a.dk = s.dk;
    a.dv = s.dv;
    a.q_token_stride = a.k_token_stride = a.v_token_stride = channels;
    a.out_token_stride = out_stride;
    a.head_begin = h0;
    a.head_end = h1;
    return a;
  }
  GatedDeltaArgs Args(std::vector<float>& state, std::vector<float>& out) const {
    state = state0;
    out.assign(static_cast<size_t>(shape.t * out_stride), std::numeric_limits<float>::quiet_NaN());
    return Args(state, out, 0, shape.t, 0, shape.n_v);
  }
};

// The recurrence in float64 from the same inputs, written from transformers' torch_recurrent_gated_delta_rule
// (whole-matrix steps per token, value head h on key head h / (n_v / n_k)).
void NaiveRecurrent(const Problem& p, std::vector<double>& state, std::vector<double>& out) {
  const Shape& s = p.shape;
  state.assign(p.state0.begin(), p.state0.end());
  out.assign(static_cast<size_t>(s.t * s.n_v * s.dv), 0.0);
  const int64_t group = s.n_v / s.n_k;
  for (int64_t t = 0; t < s.t; ++t) {
    const float* row = p.x.data() + t * p.channels;
    for (int64_t h = 0; h < s.n_v; ++h) {
      const float* q = row + (h / group) * s.dk;
      const float* k = row + s.n_k * s.dk + (h / group) * s.dk;
      const float* v = row + 2 * s.n_k * s.dk + h * s.dv;
      double* S = state.data() + h * s.dk * s.dv;
      const double decay = std::exp(static_cast<double>(p.g[t * s.n_v + h]));
      for (int64_t i = 0; i < s.dk * s.dv; ++i) S[i] *= decay;
      for (int64_t j = 0; j < s.dv; ++j) {
        double kv = 0.0;
        for (int64_t i = 0; i < s.dk; ++i) kv += S[i * s.dv + j] * k[i];
        const double delta = (v[j] - kv) * p.beta[t * s.n_v + h];
        for (int64_t i = 0; i < s.dk; ++i) S[i * s.dv + j] += k[i] * delta;
      }
      for (int64_t j = 0; j < s.dv; ++j) {
        double o = 0.0;
        for (int64_t i = 0; i < s.dk; ++i) o += S[i * s.dv + j] * q[i];
        out[(t * s.n_v + h) * s.dv + j] = o;
      }
    }
  }
}

constexpr Shape kShapes[] = {{1, 1, 1, 16, 16},   {5, 2, 4, 16, 16},   {4, 2, 4, 32, 32}, {3, 2, 4, 128, 128},
                             {6, 1, 2, 24, 40},   {6, 2, 4, 40, 24},   {3, 1, 1, 17, 5},  {2, 2, 4, 8, 1},
                             {4, 1, 2, 16, 65},   {3, 2, 2, 12, 100},  {2, 1, 3, 9, 130}, {7, 2, 4, 16, 63},
                             {2, 1, 1, 128, 257}, {3, 3, 6, 33, 48},   {1, 1, 2, 64, 96}, {9, 1, 1, 5, 31}};

TEST(GatedDeltaReferenceTest, MatchesFloat64NaiveRecurrence) {
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    const Problem p(s, seed++);
    std::vector<float> state, out;
    GatedDeltaRecurrentReference(p.Args(state, out));
    std::vector<double> want_state, want_out;
    NaiveRecurrent(p, want_state, want_out);
    double worst = 0.0;
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t c = 0; c < s.n_v * s.dv; ++c) {
        const double want = want_out[static_cast<size_t>(t * s.n_v * s.dv + c)];
        const double got = out[static_cast<size_t>(t * p.out_stride + c)];
        worst = std::max(worst, std::abs(got - want) / (1.0 + std::abs(want)));
      }
      for (int64_t c = s.n_v * s.dv; c < p.out_stride; ++c)
        EXPECT_TRUE(std::isnan(out[static_cast<size_t>(t * p.out_stride + c)])) << Name(s) << ": padding written";
    }
    for (size_t i = 0; i < state.size(); ++i)
      worst = std::max(worst, std::abs(state[i] - want_state[i]) / (1.0 + std::abs(want_state[i])));
    EXPECT_LT(worst, 1e-6) << Name(s);  // observed <= 7e-8
  }
}

// Known answer, dk = dv = 1: S = 2, q = k = 1, v = 3, g = log(1/2), beta = 1/2:
// S = 1, kv = 1, delta = 1, S = 2, o = 2 (exact but for expf(logf(0.5)) and logf's rounding).
TEST(GatedDeltaReferenceTest, KnownAnswerOneByOne) {
  const float q = 1.0f, k = 1.0f, v = 3.0f, g = std::log(0.5f), beta = 0.5f;
  float state = 2.0f, out = 0.0f;
  GatedDeltaArgs a;
  a.q = &q;
  a.k = &k;
  a.v = &v;
  a.g = &g;
  a.beta = &beta;
  a.state = &state;
  a.out = &out;
  a.t = a.n_k = a.n_v = a.dk = a.dv = 1;
  a.q_token_stride = a.k_token_stride = a.v_token_stride = a.out_token_stride = 1;
  a.head_end = 1;
  GatedDeltaRecurrentReference(a);
  EXPECT_FLOAT_EQ(state, 2.0f);
  EXPECT_FLOAT_EQ(out, 2.0f);
}

struct IsaParam {
  GemmIsa isa;
};
void PrintTo(const IsaParam& p, std::ostream* os) { *os << GemmIsaName(p.isa); }

class GatedDeltaIsaTest : public ::testing::TestWithParam<IsaParam> {
 protected:
  void SetUp() override {
    if (!GatedDeltaIsaAvailable(GetParam().isa))
      GTEST_SKIP() << GemmIsaName(GetParam().isa) << " is not compiled into this binary or not supported by this CPU";
  }
};

TEST_P(GatedDeltaIsaTest, BitIdenticalToReference) {
  const GemmIsa isa = GetParam().isa;
  uint32_t seed = 100;
  for (const Shape& s : kShapes) {
    const Problem p(s, seed++);
    std::vector<float> want_state, want_out, state, out;
    GatedDeltaRecurrentReference(p.Args(want_state, want_out));
    ASSERT_TRUE(GatedDeltaRecurrentWithIsa(isa, p.Args(state, out)).ok()) << Name(s);
    ExpectSameBits(want_out, out, Name(s) + " out");
    ExpectSameBits(want_state, state, Name(s) + " state");
  }
}

TEST_P(GatedDeltaIsaTest, HeadRangesComposeBitForBit) {
  const GemmIsa isa = GetParam().isa;
  const Problem p({4, 2, 6, 24, 40}, 7);
  std::vector<float> want_state, want_out, state, out;
  GatedDeltaRecurrentReference(p.Args(want_state, want_out));
  p.Args(state, out);
  for (const auto& [h0, h1] : {std::pair<int64_t, int64_t>{0, 1}, {1, 4}, {4, 4}, {4, 6}})
    ASSERT_TRUE(GatedDeltaRecurrentWithIsa(isa, p.Args(state, out, 0, p.shape.t, h0, h1)).ok());
  ExpectSameBits(want_out, out, "heads in 4 calls, out");
  ExpectSameBits(want_state, state, "heads in 4 calls, state");
}

TEST_P(GatedDeltaIsaTest, TokensInOneCallEqualOneCallPerToken) {
  const GemmIsa isa = GetParam().isa;
  uint32_t seed = 200;
  for (const Shape& s : {Shape{8, 2, 4, 128, 128}, Shape{6, 1, 2, 24, 40}, Shape{5, 3, 3, 17, 70}}) {
    const Problem p(s, seed++);
    std::vector<float> want_state, want_out, state, out;
    ASSERT_TRUE(GatedDeltaRecurrentWithIsa(isa, p.Args(want_state, want_out)).ok());
    p.Args(state, out);
    for (int64_t t = 0; t < s.t; ++t)
      ASSERT_TRUE(GatedDeltaRecurrentWithIsa(isa, p.Args(state, out, t, 1, 0, s.n_v)).ok());
    ExpectSameBits(want_out, out, Name(s) + " one token per call, out");
    ExpectSameBits(want_state, state, Name(s) + " one token per call, state");
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, GatedDeltaIsaTest,
                         ::testing::Values(IsaParam{GemmIsa::kScalar}, IsaParam{GemmIsa::kAvx2},
                                           IsaParam{GemmIsa::kAvx512}, IsaParam{GemmIsa::kNeon}),
                         [](const ::testing::TestParamInfo<IsaParam>& info) { return GemmIsaName(info.param.isa); });

TEST(GatedDeltaDispatchTest, DispatchedVariantIsAvailableAndBitIdentical) {
  EXPECT_TRUE(GatedDeltaIsaAvailable(GatedDeltaIsa())) << GemmIsaName(GatedDeltaIsa());
  const Problem p({3, 2, 4, 128, 128}, 11);
  std::vector<float> want_state, want_out, state, out;
  GatedDeltaRecurrentReference(p.Args(want_state, want_out));
  GatedDeltaRecurrent(p.Args(state, out));
  ExpectSameBits(want_out, out, std::string("dispatched ") + GemmIsaName(GatedDeltaIsa()));
  ExpectSameBits(want_state, state, std::string("dispatched state ") + GemmIsaName(GatedDeltaIsa()));
}

TEST(GatedDeltaValidateTest, RejectsBadArgumentsNamingTheField) {
  const Problem p({2, 2, 4, 16, 16}, 3);
  std::vector<float> state, out;
  const GatedDeltaArgs good = p.Args(state, out);
  ASSERT_TRUE(ValidateGatedDeltaArgs(good).ok());
  struct Case {
    const char* needle;
    void (*edit)(GatedDeltaArgs&);
  };
  const Case cases[] = {
      {"negative size", [](GatedDeltaArgs& a) { a.dk = -1; }},
      {"not a multiple of n_k", [](GatedDeltaArgs& a) { a.n_k = 3; }},
      {"not a multiple of n_k", [](GatedDeltaArgs& a) { a.n_k = 0; }},
      {"head range", [](GatedDeltaArgs& a) { a.head_end = 5; }},
      {"head range", [](GatedDeltaArgs& a) {
         a.head_begin = 3;
         a.head_end = 2;
       }},
      {"q_token_stride", [](GatedDeltaArgs& a) { a.q_token_stride = 31; }},
      {"k_token_stride", [](GatedDeltaArgs& a) { a.k_token_stride = 0; }},
      {"v_token_stride", [](GatedDeltaArgs& a) { a.v_token_stride = 63; }},
      {"out_token_stride", [](GatedDeltaArgs& a) { a.out_token_stride = 1; }},
      {"beta is null", [](GatedDeltaArgs& a) { a.beta = nullptr; }},
      {"state is null", [](GatedDeltaArgs& a) { a.state = nullptr; }},
  };
  for (const Case& c : cases) {
    GatedDeltaArgs a = good;
    c.edit(a);
    const Status st = GatedDeltaRecurrentWithIsa(GemmIsa::kScalar, a);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.needle;
    EXPECT_NE(st.message().find(c.needle), std::string::npos) << st.message();
  }
  // Nothing to do: null pointers are fine.
  GatedDeltaArgs empty = good;
  empty.t = 0;
  empty.q = nullptr;
  EXPECT_TRUE(ValidateGatedDeltaArgs(empty).ok());
  empty = good;
  empty.head_begin = empty.head_end = 2;
  empty.out = nullptr;
  EXPECT_TRUE(ValidateGatedDeltaArgs(empty).ok());
}

TEST(GatedDeltaValidateTest, BfloatDotIsasHaveNoVariant) {
  const Problem p({1, 1, 1, 16, 16}, 5);
  std::vector<float> state, out;
  for (const GemmIsa isa : {GemmIsa::kAvx512Bf16, GemmIsa::kNeonBf16, GemmIsa::kAmxBf16}) {
    EXPECT_FALSE(GatedDeltaIsaAvailable(isa)) << GemmIsaName(isa);
    EXPECT_EQ(GatedDeltaRecurrentWithIsa(isa, p.Args(state, out)).code(), StatusCode::kUnavailable);
  }
}

// The conv in float64: xx = state rows then inputs, out = silu(bias[c] + sum_j w[c, j] xx[s + j, c]) (no silu
// when `silu` is false; bias 0 when empty).
void NaiveConv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& state, int64_t t,
               int64_t channels, int64_t kernel, std::vector<double>& out, std::vector<double>& new_state,
               const std::vector<float>& bias = {}, bool silu = true) {
  std::vector<double> xx(state.begin(), state.end());
  xx.insert(xx.end(), x.begin(), x.end());
  out.assign(static_cast<size_t>(t * channels), 0.0);
  for (int64_t s = 0; s < t; ++s) {
    for (int64_t c = 0; c < channels; ++c) {
      double acc = bias.empty() ? 0.0 : bias[static_cast<size_t>(c)];
      for (int64_t j = 0; j < kernel; ++j) acc += w[c * kernel + j] * xx[(s + j) * channels + c];
      out[s * channels + c] = silu ? acc / (1.0 + std::exp(-acc)) : acc;
    }
  }
  new_state.assign(xx.end() - (kernel - 1) * channels, xx.end());
}

// The three uses: Gated DeltaNet (SiLU, no bias), Mamba2 (bias, SiLU), LFM2's short convolution (bias or none, no
// activation); each against float64, out of place, in place and token by token.
TEST(CausalConv1dTest, MatchesFloat64NaiveInPlaceAndTokenByToken) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [t, channels, kernel, variant] :
       {std::tuple<int64_t, int64_t, int64_t, int>{1, 7, 4, 0}, {2, 5, 4, 0}, {3, 33, 4, 0}, {9, 16, 4, 0}, {4, 3, 1, 0},
        {5, 8, 2, 0}, {6, 12, 6, 0}, {3, 9, 4, 1}, {7, 16, 4, 1}, {1, 5, 3, 2}, {8, 24, 3, 2}, {5, 7, 3, 3},
        {4, 6, 1, 3}}) {
    const bool with_bias = variant == 1 || variant == 3, silu = variant <= 1;
    const std::string what = "t " + std::to_string(t) + " channels " + std::to_string(channels) + " kernel " +
                             std::to_string(kernel) + (with_bias ? " bias" : "") + (silu ? " silu" : "");
    std::vector<float> x(static_cast<size_t>(t * channels)), w(static_cast<size_t>(channels * kernel)),
        state0(static_cast<size_t>((kernel - 1) * channels)), bias;
    for (float& v : x) v = normal(rng);
    for (float& v : w) v = 0.5f * normal(rng);
    for (float& v : state0) v = normal(rng);
    if (with_bias) {
      bias.resize(static_cast<size_t>(channels));
      for (float& v : bias) v = normal(rng);
    }
    std::vector<double> want_out, want_state;
    NaiveConv(x, w, state0, t, channels, kernel, want_out, want_state, bias, silu);

    CausalConvArgs a;
    a.bias = with_bias ? bias.data() : nullptr;
    a.silu = silu;
    a.w = w.data();
    a.t = t;
    a.channels = channels;
    a.kernel = kernel;
    // Out of place, with a padded output stride.
    std::vector<float> state = state0, out(static_cast<size_t>(t * (channels + 1)), -7.0f);
    a.x = x.data();
    a.x_token_stride = channels;
    a.state = state.data();
    a.out = out.data();
    a.out_token_stride = channels + 1;
    CausalConv1d(a);
    for (int64_t s = 0; s < t; ++s) {
      for (int64_t c = 0; c < channels; ++c) {
        const double want = want_out[s * channels + c];
        EXPECT_NEAR(out[s * (channels + 1) + c], want, 1e-5 * (1 + std::abs(want))) << what << " s " << s << " c " << c;
      }
      EXPECT_EQ(out[s * (channels + 1) + channels], -7.0f) << what << ": padding written";
    }
    for (size_t i = 0; i < state.size(); ++i) EXPECT_EQ(state[i], static_cast<float>(want_state[i])) << what;

    // In place: the same bits.
    std::vector<float> inplace = x, state_inplace = state0;
    a.x = a.out = inplace.data();
    a.out_token_stride = channels;
    a.state = state_inplace.data();
    CausalConv1d(a);
    for (int64_t s = 0; s < t; ++s) {
      for (int64_t c = 0; c < channels; ++c)
        EXPECT_EQ(Bits(inplace[s * channels + c]), Bits(out[s * (channels + 1) + c])) << what << " in place";
    }
    // One token per call: the same bits and state.
    std::vector<float> state_steps = state0, out_steps(x.size());
    for (int64_t s = 0; s < t; ++s) {
      a.x = x.data() + s * channels;
      a.out = out_steps.data() + s * channels;
      a.state = state_steps.data();
      a.t = 1;
      CausalConv1d(a);
    }
    ExpectSameBits(inplace, out_steps, what + " token by token");
    ExpectSameBits(state, state_steps, what + " token by token, state");
  }
}

TEST(L2NormalizeHeadsTest, KnownAnswerAndFloat64) {
  // [3, 4] -> [0.6, 0.8] up to the 1e-6 epsilon; scale 2 doubles it.
  std::vector<float> r = {3.0f, 4.0f, 0.0f, 0.0f};
  L2NormalizeHeads(r.data(), 1, 2, 2, 4, 2.0f);
  EXPECT_FLOAT_EQ(r[0], 1.2f);
  EXPECT_FLOAT_EQ(r[1], 1.6f);
  EXPECT_EQ(r[2], 0.0f);  // a zero row stays zero (the epsilon keeps the norm finite)
  EXPECT_EQ(r[3], 0.0f);

  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t t = 3, n_heads = 4, dim = 128, stride = n_heads * dim + 5;
  std::vector<float> x(static_cast<size_t>(t * stride));
  for (float& v : x) v = normal(rng);
  const std::vector<float> x0 = x;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  L2NormalizeHeads(x.data(), t, n_heads, dim, stride, scale);
  for (int64_t s = 0; s < t; ++s) {
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* in = x0.data() + s * stride + h * dim;
      double sum = 0.0;
      for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(in[i]) * in[i];
      for (int64_t i = 0; i < dim; ++i) {
        const double want = in[i] / std::sqrt(sum + 1e-6) * scale;
        EXPECT_NEAR(x[s * stride + h * dim + i], want, 1e-6 * (1 + std::abs(want)));
      }
    }
    for (int64_t c = n_heads * dim; c < stride; ++c) EXPECT_EQ(x[s * stride + c], x0[s * stride + c]) << "padding";
  }
}

}  // namespace
}  // namespace zipmoe::kernels
