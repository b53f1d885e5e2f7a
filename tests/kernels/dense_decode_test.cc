// The GPU decode-step kernels (kernels/dense_decode.h): their CPU references against independent
// double-precision formulas (HF's RMSNorm, apply_rotary_pos_emb, softmax attention with repeat_kv),
// known answers, argument checks, and the device kernels against the references (skipped without a
// CUDA device).
#include "kernels/dense_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/recovery.h"
#include "tests/kernels/bf16_values.h"

namespace zipmoe::kernels {
namespace {

using testing::FromBf16;
using testing::ToBf16;

std::vector<uint16_t> RandomBf16(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = ToBf16(normal(rng));
  return v;
}

// Distance in BF16 units of the last place between two finite BF16 values of the same sign (or zero).
int UlpDistance(uint16_t a, uint16_t b) {
  auto key = [](uint16_t v) { return (v & 0x8000u) ? -static_cast<int>(v & 0x7fffu) : static_cast<int>(v); };
  return std::abs(key(a) - key(b));
}

// In the test body: GTEST_SKIP ends only the function it is written in.
#define SKIP_WITHOUT_DEVICE() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device (built with CUDA: " << BuiltWithCuda() << ")"

// ---- RMSNorm

struct NormCase {
  int64_t rows, d;
  std::vector<uint16_t> x, w, y;
  NormCase(int64_t r, int64_t dim, uint64_t seed)
      : rows(r), d(dim), x(RandomBf16(static_cast<size_t>(r * dim), 1.5f, seed)),
        w(RandomBf16(static_cast<size_t>(dim), 1.0f, seed + 1)), y(static_cast<size_t>(r * dim), 0xffffu) {}
  RmsNormBf16Args Args() {
    RmsNormBf16Args a;
    a.x = x.data();
    a.weight = w.data();
    a.y = y.data();
    a.rows = rows;
    a.d = d;
    a.eps = 1e-6f;
    return a;
  }
};

class RmsNormTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(RmsNormTest, ReferenceWithinOneBf16UlpOfTheDoubleFormula) {
  NormCase c(5, GetParam(), 7);
  ASSERT_TRUE(RmsNormBf16Reference(c.Args()).ok());
  int exact = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < c.d; ++j) ss += static_cast<double>(FromBf16(c.x[r * c.d + j])) * FromBf16(c.x[r * c.d + j]);
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c.d) + 1e-6);
    for (int64_t j = 0; j < c.d; ++j) {
      const uint16_t normed = ToBf16(static_cast<float>(FromBf16(c.x[r * c.d + j]) * inv));
      const uint16_t want = ToBf16(static_cast<float>(static_cast<double>(FromBf16(c.w[j])) * FromBf16(normed)));
      const uint16_t got = c.y[static_cast<size_t>(r * c.d + j)];
      ASSERT_LE(UlpDistance(got, want), 1) << "row " << r << " col " << j;
      exact += got == want;
    }
  }
  EXPECT_GT(exact, static_cast<int>(0.97 * static_cast<double>(c.rows * c.d)));
}

TEST_P(RmsNormTest, DeviceMatchesReferenceBitForBit) {
  SKIP_WITHOUT_DEVICE();
  NormCase ref(33, GetParam(), 11);
  NormCase dev = ref;
  ASSERT_TRUE(RmsNormBf16Reference(ref.Args()).ok());
  const Status st = RmsNormBf16OnDevice(dev.Args());
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(dev.y, ref.y);
}

// 1024 / 2048: hidden sizes (whole blocks); 896 and 7: ragged; 128: one head (q/k norm).
INSTANTIATE_TEST_SUITE_P(Widths, RmsNormTest, ::testing::Values<int64_t>(1024, 2048, 896, 128, 7));

TEST(RmsNormKnownAnswer, ConstantRowNormsToTheWeight) {
  // x = 3 everywhere: mean(x²) = 9, x * (1 / sqrt(9 + 0)) = 1 exactly, y = w.
  std::vector<uint16_t> x(300, ToBf16(3.0f)), w = RandomBf16(300, 1.0f, 3), y(300);
  RmsNormBf16Args a;
  a.x = x.data();
  a.weight = w.data();
  a.y = y.data();
  a.rows = 1;
  a.d = 300;
  a.eps = 0.0f;
  ASSERT_TRUE(RmsNormBf16Reference(a).ok());
  EXPECT_EQ(y, w);
}

// ---- Rotary

struct RotaryCase {
  int64_t n, qh, kh, hd, rd;
  std::vector<uint16_t> q, k;
  std::vector<float> cos, sin;
  RotaryCase(int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim, uint64_t seed)
      : n(tokens), qh(q_heads), kh(k_heads), hd(head_dim), rd(rotary_dim),
        q(RandomBf16(static_cast<size_t>(tokens * q_heads * head_dim), 1.0f, seed)),
        k(RandomBf16(static_cast<size_t>(tokens * k_heads * head_dim), 1.0f, seed + 1)) {
    // HF's rotary: inv_freq_i = theta^(-2i/rd), emb = cat(freqs, freqs), positions 0, 7, 14, ...
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = 0; j < rd; ++j) {
        const double inv_freq = std::pow(10000.0, -2.0 * static_cast<double>(j % (rd / 2)) / static_cast<double>(rd));
        const double angle = static_cast<double>(7 * t) * inv_freq;
        cos.push_back(static_cast<float>(std::cos(angle)));
        sin.push_back(static_cast<float>(std::sin(angle)));
      }
    }
  }
  RotaryBf16Args Args() {
    RotaryBf16Args a;
    a.a = q.data();
    a.a_heads = qh;
    a.b = kh > 0 ? k.data() : nullptr;
    a.b_heads = kh;
    a.n = n;
    a.head_dim = hd;
    a.rotary_dim = rd;
    a.cos = cos.data();
    a.sin = sin.data();
    return a;
  }
};

TEST(RotaryTest, ReferenceMatchesTheRotateHalfFormula) {
  for (const int64_t rd : {64, 32}) {  // full and partial rotary (glm4_moe)
    RotaryCase c(3, 4, 2, 64, rd, 5);
    const RotaryCase before = c;
    ASSERT_TRUE(RotaryBf16Reference(c.Args()).ok());
    const int64_t half = rd / 2;
    for (int which = 0; which < 2; ++which) {
      const std::vector<uint16_t>& in = which == 0 ? before.q : before.k;
      const std::vector<uint16_t>& out = which == 0 ? c.q : c.k;
      const int64_t heads = which == 0 ? c.qh : c.kh;
      for (int64_t t = 0; t < c.n; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const size_t base = static_cast<size_t>((t * heads + h) * c.hd);
          for (int64_t i = 0; i < c.hd; ++i) {
            const uint16_t got = out[base + static_cast<size_t>(i)];
            if (i >= rd) {  // pass-through dims
              ASSERT_EQ(got, in[base + static_cast<size_t>(i)]);
              continue;
            }
            const bool first_half = i < half;
            const double x = FromBf16(in[base + static_cast<size_t>(i)]);
            const double other = FromBf16(in[base + static_cast<size_t>(first_half ? i + half : i - half)]);
            const double c0 = c.cos[static_cast<size_t>(t * rd + i)], s0 = c.sin[static_cast<size_t>(t * rd + i)];
            const double want = first_half ? x * c0 - other * s0 : x * c0 + other * s0;
            ASSERT_LE(UlpDistance(got, ToBf16(static_cast<float>(want))), 1) << "t " << t << " h " << h << " i " << i;
          }
        }
      }
    }
  }
}

TEST(RotaryTest, PositionZeroLeavesHeadsUnchanged) {
  RotaryCase c(1, 3, 1, 48, 48, 9);  // token 0 sits at position 0: cos 1, sin 0
  const RotaryCase before = c;
  ASSERT_TRUE(RotaryBf16Reference(c.Args()).ok());
  EXPECT_EQ(c.q, before.q);
  EXPECT_EQ(c.k, before.k);
}

TEST(RotaryTest, DeviceMatchesReferenceBitForBit) {
  SKIP_WITHOUT_DEVICE();
  for (const int64_t rd : {128, 64}) {
    RotaryCase ref(5, 16, 4, 128, rd, 21);
    RotaryCase dev = ref;
    ASSERT_TRUE(RotaryBf16Reference(ref.Args()).ok());
    const Status st = RotaryBf16OnDevice(dev.Args());
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(dev.q, ref.q);
    EXPECT_EQ(dev.k, ref.k);
  }
}

// ---- Decode attention

struct AttentionCase {
  int64_t n_heads, n_kv, dk, dv, capacity, total, pos, window;
  std::vector<uint16_t> q, k, v, out;
  std::vector<float> scores, sinks;
  bool with_sinks;
  AttentionCase(int64_t heads, int64_t kv, int64_t dim_k, int64_t dim_v, int64_t tot, int64_t win, bool sink,
                uint64_t seed)
      : n_heads(heads), n_kv(kv), dk(dim_k), dv(dim_v), capacity(tot + 5), total(tot), pos(tot - 1), window(win),
        q(RandomBf16(static_cast<size_t>(heads * dim_k), 1.0f, seed)),
        k(RandomBf16(static_cast<size_t>(kv * (tot + 5) * dim_k), 1.0f, seed + 1)),
        v(RandomBf16(static_cast<size_t>(kv * (tot + 5) * dim_v), 1.0f, seed + 2)),
        out(static_cast<size_t>(heads * dim_v), 0xffffu), scores(static_cast<size_t>(heads * tot), NAN),
        with_sinks(sink) {
    std::mt19937_64 rng(seed + 3);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t h = 0; h < heads; ++h) sinks.push_back(normal(rng));
  }
  DecodeAttentionBf16Args Args() {
    DecodeAttentionBf16Args a;
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.k_head_stride = capacity * dk;  // a KV cache with room for 5 more positions
    a.v_head_stride = capacity * dv;
    a.n_heads = n_heads;
    a.n_kv = n_kv;
    a.dk = dk;
    a.dv = dv;
    a.total = total;
    a.pos = pos;
    a.window = window;
    a.scale = 1.0f / std::sqrt(static_cast<float>(dk));
    a.sinks = with_sinks ? sinks.data() : nullptr;
    a.scores = scores.data();
    a.out = out.data();
    return a;
  }
};

// softmax(q k_j / sqrt(dk)) v over the visible keys in double (repeat_kv grouping; gpt_oss's sink in
// the denominator); out [n_heads * dv] as doubles.
std::vector<double> AttentionInDouble(const AttentionCase& c) {
  std::vector<double> out;
  const int64_t group = c.n_heads / c.n_kv;
  const int64_t first = c.window > 0 ? std::max<int64_t>(0, c.pos - c.window + 1) : 0;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    const int64_t g = h / group;
    std::vector<double> s;
    double m = -INFINITY;
    for (int64_t j = first; j <= c.pos; ++j) {
      double dot = 0;
      for (int64_t d = 0; d < c.dk; ++d)
        dot += static_cast<double>(FromBf16(c.q[static_cast<size_t>(h * c.dk + d)])) *
               FromBf16(c.k[static_cast<size_t>((g * c.capacity + j) * c.dk + d)]);
      s.push_back(dot / std::sqrt(static_cast<double>(c.dk)));
      m = std::max(m, s.back());
    }
    if (c.with_sinks) m = std::max(m, static_cast<double>(c.sinks[static_cast<size_t>(h)]));
    double sum = c.with_sinks ? std::exp(c.sinks[static_cast<size_t>(h)] - m) : 0.0;
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int64_t d = 0; d < c.dv; ++d) {
      double o = 0;
      for (size_t i = 0; i < s.size(); ++i)
        o += s[i] / sum * FromBf16(c.v[static_cast<size_t>((g * c.capacity + first + static_cast<int64_t>(i)) * c.dv + d)]);
      out.push_back(o);
    }
  }
  return out;
}

struct AttentionShape {
  int64_t n_heads, n_kv, dk, dv, total, window;
  bool sinks;
};

class DecodeAttentionTest : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(DecodeAttentionTest, ReferenceMatchesSoftmaxAttentionInDouble) {
  const AttentionShape s = GetParam();
  AttentionCase c(s.n_heads, s.n_kv, s.dk, s.dv, s.total, s.window, s.sinks, 31);
  ASSERT_TRUE(DecodeAttentionBf16Reference(c.Args()).ok());
  const std::vector<double> want = AttentionInDouble(c);
  for (size_t i = 0; i < want.size(); ++i) {
    // fp32 accumulation, then one BF16 rounding: within a BF16 ulp of the double result (+ fp32 noise).
    const double got = FromBf16(c.out[i]);
    ASSERT_LE(std::abs(got - want[i]), std::abs(want[i]) * (1.0 / 128) + 1e-5) << "element " << i;
  }
}

TEST_P(DecodeAttentionTest, DeviceMatchesReference) {
  SKIP_WITHOUT_DEVICE();
  const AttentionShape s = GetParam();
  AttentionCase ref(s.n_heads, s.n_kv, s.dk, s.dv, s.total, s.window, s.sinks, 41);
  AttentionCase dev = ref;
  ASSERT_TRUE(DecodeAttentionBf16Reference(ref.Args()).ok());
  const Status st = DecodeAttentionBf16OnDevice(dev.Args());
  ASSERT_TRUE(st.ok()) << st.ToString();
  // The same order; CUDA's expf and std::exp may differ by an ulp, so the probabilities within a few
  // fp32 ulps and each output within one BF16 ulp (nearly always equal).
  int equal = 0;
  for (size_t i = 0; i < ref.out.size(); ++i) {
    ASSERT_LE(UlpDistance(dev.out[i], ref.out[i]), 1) << "element " << i;
    equal += dev.out[i] == ref.out[i];
  }
  EXPECT_GT(equal, static_cast<int>(0.95 * static_cast<double>(ref.out.size())));
  const int64_t first = s.window > 0 ? std::max<int64_t>(0, ref.pos - s.window + 1) : 0;
  for (int64_t h = 0; h < s.n_heads; ++h)
    for (int64_t j = first; j <= ref.pos; ++j) {
      const float a = dev.scores[static_cast<size_t>(h * s.total + j)], b = ref.scores[static_cast<size_t>(h * s.total + j)];
      ASSERT_NEAR(a, b, 4e-7 * std::max(1.0f, std::abs(b))) << "head " << h << " key " << j;
    }
}

// qwen2_moe mini (8 heads, 128 dims), GQA 4:1 with a sliding window and gpt_oss's sinks, a long
// context (more keys than threads), one key, and ragged dims (dk 72, dv 40) with MLA-like dk != dv.
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttentionTest,
                         ::testing::Values(AttentionShape{8, 8, 128, 128, 17, 0, false},
                                           AttentionShape{16, 4, 64, 64, 300, 128, true},
                                           AttentionShape{4, 2, 128, 128, 1, 0, false},
                                           AttentionShape{6, 3, 72, 40, 131, 0, false},
                                           AttentionShape{2, 1, 192, 128, 1000, 0, true}),
                         [](const ::testing::TestParamInfo<AttentionShape>& info) {
                           const AttentionShape& s = info.param;
                           return "h" + std::to_string(s.n_heads) + "_kv" + std::to_string(s.n_kv) + "_dk" +
                                  std::to_string(s.dk) + "_dv" + std::to_string(s.dv) + "_t" + std::to_string(s.total) +
                                  "_w" + std::to_string(s.window) + (s.sinks ? "_sinks" : "");
                         });

TEST(DecodeAttentionKnownAnswer, OneVisibleKeyReturnsItsValue) {
  // A window of 1 hides every key but the query's own: p = 1, out = v_pos exactly (BF16 in, BF16 out).
  AttentionCase c(4, 2, 32, 16, 9, 1, false, 51);
  ASSERT_TRUE(DecodeAttentionBf16Reference(c.Args()).ok());
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 16; ++d)
      ASSERT_EQ(c.out[static_cast<size_t>(h * 16 + d)], c.v[static_cast<size_t>(((h / 2) * c.capacity + 8) * 16 + d)]);
}

TEST(DenseDecodeArgsTest, RejectsBadSizesNamingTheField) {
  AttentionCase c(4, 3, 32, 16, 9, 0, false, 1);  // 4 heads over 3 kv heads
  Status st = DecodeAttentionBf16Reference(c.Args());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("n_kv"), std::string::npos) << st.ToString();
  AttentionCase p(4, 2, 32, 16, 9, 0, false, 1);
  DecodeAttentionBf16Args a = p.Args();
  a.pos = a.total;
  st = DecodeAttentionBf16Reference(a);
  EXPECT_NE(st.message().find("pos"), std::string::npos) << st.ToString();
  a = p.Args();
  a.k_head_stride = a.total * a.dk - 1;
  EXPECT_NE(DecodeAttentionBf16Reference(a).message().find("k_head_stride"), std::string::npos);
  RotaryCase r(1, 2, 0, 16, 10, 1);
  RotaryBf16Args ra = r.Args();
  ra.rotary_dim = 7;
  EXPECT_NE(RotaryBf16Reference(ra).message().find("rotary_dim"), std::string::npos);
  ra.rotary_dim = 18;
  EXPECT_NE(RotaryBf16Reference(ra).message().find("rotary_dim"), std::string::npos);
  NormCase n(1, 8, 1);
  RmsNormBf16Args na = n.Args();
  na.d = 0;
  EXPECT_NE(RmsNormBf16Reference(na).message().find("d 0"), std::string::npos);
}

TEST(DenseDecodeArgsTest, LaunchesWithoutCudaAreUnavailable) {
  if (BuiltWithCuda()) GTEST_SKIP() << "built with CUDA: the launches are the device's (DeviceMatchesReference)";
  NormCase n(2, 8, 1);
  EXPECT_EQ(LaunchRmsNormBf16(n.Args(), nullptr).code(), StatusCode::kUnavailable);
  RotaryCase r(1, 2, 1, 16, 16, 1);
  EXPECT_EQ(LaunchRotaryBf16(r.Args(), nullptr).code(), StatusCode::kUnavailable);
  AttentionCase c(2, 1, 16, 16, 3, 0, false, 1);
  EXPECT_EQ(LaunchDecodeAttentionBf16(c.Args(), nullptr).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace zipmoe::kernels
