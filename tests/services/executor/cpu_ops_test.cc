// The executor's float32 CPU loops (services/executor/cpu_ops.h) against known answers and against
// the same computation composed from the kernels' scalar reference: bit for bit, whatever the thread
// count and whichever products share a parallel region.
#include "services/executor/cpu_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "services/executor/attention.h"
#include "services/executor/rope.h"
#include "services/executor/torch_util.h"
#include "services/executor/work_pool.h"

namespace zipmoe::executor {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> v(n);
  const std::vector<float> f = Random(n, seed, 0.05f);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    v[i] = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

// BF16 weights [rows, cols] over `w`'s bit patterns.
kernels::GemmWeights Bf16Weights(const std::vector<uint16_t>& w, int64_t rows, int64_t cols) {
  kernels::GemmWeights gw;
  gw.bf16 = w.data();
  gw.rows = rows;
  gw.cols = cols;
  return gw;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Attention of n_heads query heads over n_kv cached heads (grouped), t queries from position pos0 on,
// keys and values laid out per head with room for `capacity` positions, written into `out`.
cpu::AttentionArgs AttentionOf(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                               int64_t n_heads, int64_t n_kv, int64_t t, int64_t dk, int64_t dv, int64_t capacity,
                               int64_t pos0, float scale, std::vector<float>& out) {
  cpu::AttentionArgs a;
  a.q = q.data();
  a.n_heads = n_heads;
  a.t = t;
  a.dk = dk;
  a.k = k.data();
  a.v = v.data();
  a.k_head_stride = capacity * dk;
  a.v_head_stride = capacity * dv;
  a.n_kv = n_kv;
  a.total = pos0 + t;
  a.dv = dv;
  a.pos0 = pos0;
  a.scale = scale;
  a.out = out.data();
  return a;
}

TEST(CpuOpsTest, RmsNormKnownAnswer) {
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, -4.0f, 0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<float> w = {1.0f, 2.0f, 0.5f, -1.0f};
  std::vector<float> y(8);
  cpu::RmsNorm(x.data(), 2, 4, w.data(), 1e-6f, y.data());
  const double inv0 = 1.0 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6), inv1 = 1.0 / std::sqrt(0.25 + 1e-6);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(y[i], w[i] * x[i] * inv0, 1e-6) << i;
    EXPECT_NEAR(y[4 + i], w[i] * x[4 + i] * inv1, 1e-6) << i;
  }
}

TEST(CpuOpsTest, SiluMulKnownAnswer) {
  const std::vector<float> g = {0.0f, 1.0f, -3.0f, 20.0f}, u = {5.0f, 2.0f, 1.0f, -0.5f};
  std::vector<float> act(4);
  cpu::SiluMul(g.data(), u.data(), 4, act.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(act[i], g[i] / (1.0 + std::exp(-g[i])) * u[i], 1e-6) << i;
}

TEST(CpuOpsTest, RotateHalfMatchesTheTorchRotaryEmbedding) {
  const int64_t n = 3, heads = 2, d = 8;
  ModelConfig c;
  c.arch = ModelArch::kQwen2Moe;
  c.head_dim = d;
  c.rope_theta = 10000.0;
  const RotaryEmbedding rope(c, at::kCPU);
  auto [cos, sin] = rope.CosSin(at::tensor(std::vector<int64_t>{0, 7, 300}));
  cos = cos.contiguous();
  sin = sin.contiguous();
  std::vector<float> x = Random(static_cast<size_t>(n * heads * d), 1);
  const at::Tensor want = RotaryEmbedding::Apply(at::from_blob(x.data(), {n, heads, d}).clone(), cos, sin, false);
  cpu::RotateHalf(x.data(), n, heads, d, d, cos.data_ptr<float>(), sin.data_ptr<float>());
  for (int64_t i = 0; i < n * heads * d; ++i) EXPECT_NEAR(x[i], want.view({-1})[i].item<float>(), 1e-6) << i;
}

// Two MLPs of different shapes (one over 3 tokens, one over a gathered single token) and a plain
// product in the same regions give the bits of each product computed alone by the scalar reference.
TEST(CpuOpsTest, MlpRegionsAreBitIdenticalToTheReferenceAtAnyThreadCount) {
  const int64_t hidden = 72, i0 = 40, i1 = 24;
  const std::vector<uint16_t> g0 = RandomBf16(i0 * hidden, 2), u0 = RandomBf16(i0 * hidden, 3),
                              d0 = RandomBf16(hidden * i0, 4), g1 = RandomBf16(i1 * hidden, 5),
                              u1 = RandomBf16(i1 * hidden, 6), d1 = RandomBf16(hidden * i1, 7),
                              router = RandomBf16(9 * hidden, 8);
  const std::vector<float> x = Random(3 * hidden, 9);
  const auto reference = [](const kernels::GemmWeights& w, const float* in, int64_t n, std::vector<float>& out) {
    out.assign(static_cast<size_t>(n * w.rows), 0.0f);
    kernels::GemmArgs a;
    a.w = w;
    a.x = in;
    a.n = n;
    a.ldx = w.cols;
    a.y = out.data();
    a.ldy = w.rows;
    a.row_end = w.rows;
    kernels::Bf16GemmReference(a);
  };
  // Reference: expert 0 on tokens 0..2, expert 1 on token 1, router on tokens 0..2.
  std::vector<float> rg0, ru0, ry0, rg1, ru1, ry1, rr;
  reference(Bf16Weights(g0, i0, hidden), x.data(), 3, rg0);
  reference(Bf16Weights(u0, i0, hidden), x.data(), 3, ru0);
  cpu::SiluMul(rg0.data(), ru0.data(), 3 * i0, rg0.data());
  reference(Bf16Weights(d0, hidden, i0), rg0.data(), 3, ry0);
  reference(Bf16Weights(g1, i1, hidden), x.data() + hidden, 1, rg1);
  reference(Bf16Weights(u1, i1, hidden), x.data() + hidden, 1, ru1);
  cpu::SiluMul(rg1.data(), ru1.data(), i1, rg1.data());
  reference(Bf16Weights(d1, hidden, i1), rg1.data(), 1, ry1);
  reference(Bf16Weights(router, 9, hidden), x.data(), 3, rr);

  const int threads_before = WorkPool::Shared().threads();
  for (int threads : {1, 2, 3}) {
    WorkPool::SetSharedThreads(threads);
    std::vector<float> act0(3 * i0), up0(3 * i0), y0(3 * hidden), act1(i1), up1(i1), y1(hidden), logits(3 * 9);
    std::vector<cpu::MlpJob> jobs(2);
    jobs[0] = {Bf16Weights(g0, i0, hidden), Bf16Weights(u0, i0, hidden), Bf16Weights(d0, hidden, i0), x.data(), 3, hidden,
               act0.data(), up0.data(), y0.data(), hidden};
    jobs[1] = {Bf16Weights(g1, i1, hidden), Bf16Weights(u1, i1, hidden), Bf16Weights(d1, hidden, i1), x.data() + hidden, 1, hidden,
               act1.data(), up1.data(), y1.data(), hidden};
    kernels::GemmArgs r;
    r.w = Bf16Weights(router, 9, hidden);
    r.x = x.data();
    r.n = 3;
    r.ldx = hidden;
    r.y = logits.data();
    r.ldy = 9;
    cpu::MlpGateUp(jobs, {r});
    cpu::MlpDown(jobs);
    EXPECT_TRUE(SameBits(act0, rg0)) << threads << " threads";
    EXPECT_TRUE(SameBits(y0, ry0)) << threads << " threads";
    EXPECT_TRUE(SameBits(act1, rg1)) << threads << " threads";
    EXPECT_TRUE(SameBits(y1, ry1)) << threads << " threads";
    EXPECT_TRUE(SameBits(logits, rr)) << threads << " threads";
  }
  WorkPool::SetSharedThreads(threads_before);
}

// MlpGateUp's work for the caller (a decode step's router and routing beside the shared expert,
// moe_block.cc): it runs exactly once, on the calling thread, whether the helpers join, are held off or
// do not exist, and neither it nor the region's products lose a bit to the other.
TEST(CpuOpsTest, WorkForTheCallerRunsOnceOnItsThreadInsideTheRegion) {
  const int64_t hidden = 256, inter = 512, experts = 60;
  const std::vector<uint16_t> g = RandomBf16(inter * hidden, 21), u = RandomBf16(inter * hidden, 22),
                              d = RandomBf16(hidden * inter, 23), router = RandomBf16(experts * hidden, 24);
  const std::vector<float> x = Random(hidden, 25);
  const auto product = [&](const kernels::GemmWeights& w, const float* in, float* out) {
    kernels::GemmArgs a;
    a.w = w;
    a.x = in;
    a.n = 1;
    a.ldx = w.cols;
    a.y = out;
    a.ldy = w.rows;
    a.row_end = w.rows;
    return a;
  };
  std::vector<float> rg(inter), ru(inter), rr(experts);
  kernels::Bf16GemmReference(product(Bf16Weights(g, inter, hidden), x.data(), rg.data()));
  kernels::Bf16GemmReference(product(Bf16Weights(u, inter, hidden), x.data(), ru.data()));
  cpu::SiluMul(rg.data(), ru.data(), inter, rg.data());
  kernels::Bf16GemmReference(product(Bf16Weights(router, experts, hidden), x.data(), rr.data()));

  const int threads_before = WorkPool::Shared().threads();
  for (int threads : {1, 2, 3}) {
    WorkPool::SetSharedThreads(threads);
    for (bool hold : {false, true}) {
      WorkPool::Shared().HoldHelpersForTest(hold);
      std::vector<float> act(inter), up(inter), y(hidden), logits(experts);
      std::vector<cpu::MlpJob> jobs(1);
      jobs[0] = {Bf16Weights(g, inter, hidden), Bf16Weights(u, inter, hidden), Bf16Weights(d, hidden, inter), x.data(), 1, hidden,
                 act.data(), up.data(), y.data(), hidden};
      int calls = 0;
      std::thread::id ran_on;
      cpu::MlpGateUp(jobs, {}, [&] {
        ++calls;
        ran_on = std::this_thread::get_id();
        kernels::Bf16Gemm(product(Bf16Weights(router, experts, hidden), x.data(), logits.data()));
      });
      WorkPool::Shared().HoldHelpersForTest(false);
      EXPECT_EQ(calls, 1) << threads << " threads, hold " << hold;
      EXPECT_EQ(ran_on, std::this_thread::get_id()) << threads << " threads, hold " << hold;
      EXPECT_TRUE(SameBits(act, rg)) << threads << " threads, hold " << hold;
      EXPECT_TRUE(SameBits(logits, rr)) << threads << " threads, hold " << hold;
    }
  }
  WorkPool::SetSharedThreads(threads_before);
}

// Causal attention with grouped heads, a cache longer than the sequence (keys strided by the
// capacity) and a sliding window, against a direct float64 evaluation of softmax(q k^T s) v: three
// queries, and a prefill of 150 that starts mid-sequence and crosses the 64-row score blocks.
TEST(CpuOpsTest, AttendCausalMatchesAFloat64Evaluation) {
  struct Case {
    int64_t t, capacity, pos0;
    std::vector<int64_t> windows;
  };
  for (const Case& c : {Case{3, 10, 4, {0, 3}}, Case{150, 260, 100, {0, 70, 1}}}) {
    const int64_t n_heads = 4, n_kv = 2, t = c.t, dk = 20, dv = 12, capacity = c.capacity, pos0 = c.pos0,
                  total = pos0 + t;
    const std::vector<float> q = Random(static_cast<size_t>(n_heads * t * dk), 11);
    const std::vector<float> k = Random(static_cast<size_t>(n_kv * capacity * dk), 12);
    const std::vector<float> v = Random(static_cast<size_t>(n_kv * capacity * dv), 13);
    for (int64_t window : c.windows) {
      std::vector<float> out(static_cast<size_t>(t * n_heads * dv), -1.0f);
      cpu::AttentionArgs a = AttentionOf(q, k, v, n_heads, n_kv, t, dk, dv, capacity, pos0, 0.3f, out);
      ASSERT_EQ(a.total, total);
      a.window = window;
      cpu::AttendCausal(a);
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kv = h / (n_heads / n_kv);
        for (int64_t i = 0; i < t; ++i) {
          const int64_t pos = pos0 + i, first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
          std::vector<double> p;
          double m = -1e300, sum = 0;
          for (int64_t j = first; j <= pos; ++j) {
            double s = 0;
            for (int64_t d = 0; d < dk; ++d) s += double(q[(h * t + i) * dk + d]) * k[(kv * capacity + j) * dk + d];
            p.push_back(s * 0.3);
            m = std::max(m, p.back());
          }
          for (double& e : p) sum += e = std::exp(e - m);
          for (int64_t d = 0; d < dv; ++d) {
            double want = 0;
            for (int64_t j = first; j <= pos; ++j) want += p[j - first] / sum * v[(kv * capacity + j) * dv + d];
            ASSERT_NEAR(out[(i * n_heads + h) * dv + d], want, 1e-5)
                << "t " << t << " window " << window << " head " << h << " query " << i << " dim " << d;
          }
        }
      }
      // Each row has the bits of the same query alone (a decode step at its position).
      for (int64_t i : {int64_t{0}, int64_t{63}, int64_t{64}, t - 1}) {
        if (i >= t) continue;
        std::vector<float> q1(static_cast<size_t>(n_heads * dk));
        for (int64_t h = 0; h < n_heads; ++h)
          std::copy_n(q.begin() + (h * t + i) * dk, dk, q1.begin() + h * dk);
        std::vector<float> one(static_cast<size_t>(n_heads * dv));
        cpu::AttentionArgs b = AttentionOf(q1, k, v, n_heads, n_kv, 1, dk, dv, capacity, pos0 + i, 0.3f, one);
        b.window = window;
        cpu::AttendCausal(b);
        const std::vector<float> row(out.begin() + i * n_heads * dv, out.begin() + (i + 1) * n_heads * dv);
        EXPECT_TRUE(SameBits(row, one)) << "t " << t << " window " << window << " row " << i;
      }
    }
  }
}

// A decode step of a grouped-query model takes a KV head's query heads as one block (keys and values read
// once for all of them, the values in groups of up to kSoftmaxValuesMaxRows rows): each head's output keeps
// the bits of the same row in a prefill, with 12 query heads per KV head (a group of 8 and one of 4),
// sinks, and with and without a sliding window.
TEST(CpuOpsTest, AGroupedDecodeStepHasThePrefillRowsBits) {
  const int64_t n_heads = 24, n_kv = 2, t = 70, dk = 32, dv = 40, capacity = 100, pos0 = 10;
  const std::vector<float> q = Random(static_cast<size_t>(n_heads * t * dk), 31);
  const std::vector<float> k = Random(static_cast<size_t>(n_kv * capacity * dk), 32);
  const std::vector<float> v = Random(static_cast<size_t>(n_kv * capacity * dv), 33);
  const std::vector<float> sinks = Random(static_cast<size_t>(n_heads), 34);
  for (const bool with_sinks : {false, true}) {
    for (int64_t window : {int64_t{0}, int64_t{20}}) {
      std::vector<float> out(static_cast<size_t>(t * n_heads * dv), -1.0f);
      cpu::AttentionArgs a = AttentionOf(q, k, v, n_heads, n_kv, t, dk, dv, capacity, pos0, 0.2f, out);
      a.window = window;
      a.sinks = with_sinks ? sinks.data() : nullptr;
      cpu::AttendCausal(a);
      for (int64_t i : {int64_t{0}, int64_t{5}, int64_t{64}, t - 1}) {
        std::vector<float> q1(static_cast<size_t>(n_heads * dk));
        for (int64_t h = 0; h < n_heads; ++h) std::copy_n(q.begin() + (h * t + i) * dk, dk, q1.begin() + h * dk);
        std::vector<float> one(static_cast<size_t>(n_heads * dv), -1.0f);
        cpu::AttentionArgs b = AttentionOf(q1, k, v, n_heads, n_kv, 1, dk, dv, capacity, pos0 + i, 0.2f, one);
        b.window = window;
        b.sinks = a.sinks;
        cpu::AttendCausal(b);
        const std::vector<float> row(out.begin() + i * n_heads * dv, out.begin() + (i + 1) * n_heads * dv);
        EXPECT_TRUE(SameBits(row, one)) << "window " << window << " sinks " << with_sinks << " row " << i;
      }
    }
  }
}

// Heads shared among threads (from 2^14 multiply-adds on) give each head's outputs the bits of one
// thread computing them all; with fewer KV heads than threads (one: MLA's latent cache; two on four
// threads) a KV head's query heads are shared out too, in a decode step and in a prefill.
TEST(CpuOpsTest, AttendCausalGivesTheSameBitsOnOneThreadAndOnSeveral) {
  struct Case {
    int64_t n_heads, n_kv, t, dk, dv;
  };
  for (const Case& c : {Case{8, 4, 1, 64, 64}, Case{10, 1, 1, 80, 64}, Case{10, 1, 70, 80, 64}, Case{12, 2, 1, 64, 48},
                        Case{12, 2, 5, 64, 48}}) {
    const int64_t n_heads = c.n_heads, n_kv = c.n_kv, t = c.t, dk = c.dk, dv = c.dv, total = 40 + t;
    ASSERT_GE(n_heads * t * total * (dk + dv), int64_t{1} << 14);
    const std::vector<float> q = Random(static_cast<size_t>(n_heads * t * dk), 21);
    const std::vector<float> k = Random(static_cast<size_t>(n_kv * total * dk), 22);
    const std::vector<float> v = Random(static_cast<size_t>(n_kv * total * dv), 23);
    const auto run = [&](int threads) {
      WorkPool::SetSharedThreads(threads);
      std::vector<float> out(static_cast<size_t>(t * n_heads * dv), -1.0f);
      cpu::AttendCausal(AttentionOf(q, k, v, n_heads, n_kv, t, dk, dv, total, total - t, 0.125f, out));
      return out;
    };
    const int saved = WorkPool::Shared().threads();
    const std::vector<float> one = run(1), two = run(2), three = run(3), four = run(4);
    WorkPool::SetSharedThreads(saved);
    const std::string name = std::to_string(n_heads) + " heads over " + std::to_string(n_kv) + ", t " + std::to_string(t);
    EXPECT_TRUE(SameBits(one, two)) << name;
    EXPECT_TRUE(SameBits(one, three)) << name;
    EXPECT_TRUE(SameBits(one, four)) << name;
    EXPECT_EQ(std::count(one.begin(), one.end(), -1.0f), 0) << name << ": an output left unwritten";
  }
}

TEST(CpuOpsTest, AddResidualAddsInPlaceOnlyIntoATensorOfItsOwn) {
  const std::vector<float> a = Random(96, 31), b = Random(96, 32);
  const at::Tensor x = at::tensor(b).view({3, 32});
  const at::Tensor want = at::tensor(a).view({3, 32}) + x;
  {  // owned: written in place, the bits of h + x
    at::Tensor h = at::tensor(a).view({3, 32}).clone();
    const void* storage = h.data_ptr();
    const at::Tensor got = AddResidual(std::move(h), x);
    EXPECT_EQ(got.data_ptr(), storage);
    EXPECT_TRUE(at::equal(got, want));
  }
  {  // another handle on h: h keeps its values
    const at::Tensor h = at::tensor(a).view({3, 32}).clone();
    const at::Tensor before = h.clone();
    const at::Tensor got = AddResidual(h, x);
    EXPECT_NE(got.data_ptr(), h.data_ptr());
    EXPECT_TRUE(at::equal(h, before));
    EXPECT_TRUE(at::equal(got, want));
  }
  {  // a view of a larger tensor: the larger one keeps its values
    const at::Tensor base = at::tensor(a).view({3, 32}).clone();
    at::Tensor view = base.narrow(0, 0, 3);
    const at::Tensor got = AddResidual(std::move(view), x);
    EXPECT_NE(got.data_ptr(), base.data_ptr());
    EXPECT_TRUE(at::equal(base, at::tensor(a).view({3, 32})));
    EXPECT_TRUE(at::equal(got, want));
  }
  {  // float64 goes through torch
    const at::Tensor h = at::tensor(a).view({3, 32}).to(at::kDouble);
    EXPECT_TRUE(at::equal(AddResidual(h.clone(), x.to(at::kDouble)), h + x.to(at::kDouble)));
  }
}

// The cache's rows after appends of transposed views ([t, n, d] -> [n, t, d], as attention passes them),
// across a growth, float32 (copied by row) and float64 (copy_), equal the concatenation of what went in.
TEST(CpuOpsTest, KvCacheAppendKeepsEveryRowOfTransposedViews) {
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    KvCache cache(2);
    std::vector<at::Tensor> ks, vs;
    int seed = 40;
    for (const int64_t t : {5, 1, 1, 13, 1}) {  // 16 positions fit the first capacity, 21 do not
      const at::Tensor k = at::tensor(Random(static_cast<size_t>(t * 3 * 8), seed++)).view({t, 3, 8}).to(dtype);
      const at::Tensor v = at::tensor(Random(static_cast<size_t>(t * 3 * 4), seed++)).view({t, 3, 4}).to(dtype);
      ks.push_back(k);
      vs.push_back(v);
      std::pair<at::Tensor, at::Tensor> all;
      for (int64_t layer = 0; layer < 2; ++layer) all = cache.Append(layer, k.transpose(0, 1), v.transpose(0, 1));
      cache.Advance(t);
      EXPECT_TRUE(at::equal(all.first, at::cat(ks, 0).transpose(0, 1))) << dtype << " after " << cache.length();
      EXPECT_TRUE(at::equal(all.second, at::cat(vs, 0).transpose(0, 1))) << dtype << " after " << cache.length();
    }
  }
}

// A decode step's raw append (attention.cc's decode path) stores exactly what Append stores, for a
// float32 and a BF16 cache, growing by doubling and by pages, mixed with Append's prefills, and its rows
// address the cache as Append's views do.
TEST(CpuOpsTest, KvCacheAppendPositionStoresWhatAppendStores) {
  for (const bool bf16 : {false, true}) {
    for (const int64_t page : {int64_t{0}, int64_t{4}}) {
      KvCache by_append(1), by_position(1);
      by_append.set_bf16_storage(bf16);
      by_position.set_bf16_storage(bf16);
      by_append.set_page_positions(page);
      by_position.set_page_positions(page);
      int seed = 60;
      for (const int64_t t : {3, 1, 1, 1, 7, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}) {  // crosses 16 and pages
        const at::Tensor k = at::tensor(Random(static_cast<size_t>(t * 3 * 8), seed++)).view({t, 3, 8});
        const at::Tensor v = at::tensor(Random(static_cast<size_t>(t * 3 * 4), seed++)).view({t, 3, 4});
        const std::pair<at::Tensor, at::Tensor> want = by_append.Append(0, k.transpose(0, 1), v.transpose(0, 1));
        std::pair<at::Tensor, at::Tensor> got;
        if (t == 1) {
          const KvCache::Rows rows =
              by_position.AppendPosition(0, k.data_ptr<float>(), v.data_ptr<float>(), 3, 8, 4);
          by_position.Advance(1);
          // Append of no rows: the views of every position, the new one included.
          got = by_position.Append(0, k.transpose(0, 1).narrow(1, 0, 0), v.transpose(0, 1).narrow(1, 0, 0));
          const void* k_rows = bf16 ? static_cast<const void*>(rows.k_bf16) : static_cast<const void*>(rows.k);
          const void* v_rows = bf16 ? static_cast<const void*>(rows.v_bf16) : static_cast<const void*>(rows.v);
          EXPECT_EQ(k_rows, got.first.data_ptr());
          EXPECT_EQ(v_rows, got.second.data_ptr());
          EXPECT_EQ(rows.k_head_stride, got.first.stride(0));
          EXPECT_EQ(rows.v_head_stride, got.second.stride(0));
          if (bf16) {
            EXPECT_EQ(rows.k, nullptr);
          } else {
            EXPECT_EQ(rows.k_bf16, nullptr);
          }
        } else {
          got = by_position.Append(0, k.transpose(0, 1), v.transpose(0, 1));
          by_position.Advance(t);
        }
        by_append.Advance(t);
        EXPECT_EQ(got.first.scalar_type(), bf16 ? at::kBFloat16 : at::kFloat);
        EXPECT_TRUE(at::equal(got.first, want.first)) << "bf16 " << bf16 << " page " << page << " at " << by_append.length();
        EXPECT_TRUE(at::equal(got.second, want.second)) << "bf16 " << bf16 << " page " << page << " at " << by_append.length();
        EXPECT_EQ(by_position.bytes(), by_append.bytes());
      }
    }
  }
}

// set_expected_positions: a cache told how long its sequence may get reserves that room at its first growth
// (never more than twice the positions needed then), so decode steps append in place: the rows' address
// does not move while the sequence stays within the hint; the rows equal a cache without the hint at every
// step (doubling and pages, float32 and BF16); past the hint it grows as before; length_bytes counts the
// positions held, bytes the room.
TEST(CpuOpsTest, KvCacheExpectedPositionsAppendsInPlace) {
  for (const bool bf16 : {false, true}) {
    for (const int64_t page : {int64_t{0}, int64_t{4}}) {
      for (const int64_t expected : {int64_t{20}, int64_t{1000}}) {
        KvCache plain(1), hinted(1);
        for (KvCache* c : {&plain, &hinted}) {
          c->set_bf16_storage(bf16);
          c->set_page_positions(page);
        }
        hinted.set_expected_positions(expected);
        const int64_t elem = bf16 ? 2 : 4;
        const void* first_rows = nullptr;
        int seed = 80;
        // A 9-position prompt, then one position a step to 26 (past the hint of 20: it grows again there).
        for (int64_t step = 0; hinted.length() < 26; ++step) {
          const int64_t t = step == 0 ? 9 : 1;
          const at::Tensor k = at::tensor(Random(static_cast<size_t>(t * 3 * 8), seed++)).view({t, 3, 8});
          const at::Tensor v = at::tensor(Random(static_cast<size_t>(t * 3 * 4), seed++)).view({t, 3, 4});
          const std::pair<at::Tensor, at::Tensor> want = plain.Append(0, k.transpose(0, 1), v.transpose(0, 1));
          std::pair<at::Tensor, at::Tensor> got;
          if (t == 1) {
            const KvCache::Rows rows = hinted.AppendPosition(0, k.data_ptr<float>(), v.data_ptr<float>(), 3, 8, 4);
            const void* at_rows = bf16 ? static_cast<const void*>(rows.k_bf16) : static_cast<const void*>(rows.k);
            // Within the hint (and within twice the prompt: 18 positions) the rows do not move.
            if (hinted.length() + 1 <= std::min<int64_t>(expected, 18)) {
              EXPECT_EQ(at_rows, first_rows) << "moved at " << hinted.length() + 1 << ", page " << page;
            }
            hinted.Advance(1);
            got = hinted.Append(0, k.transpose(0, 1).narrow(1, 0, 0), v.transpose(0, 1).narrow(1, 0, 0));
          } else {
            got = hinted.Append(0, k.transpose(0, 1), v.transpose(0, 1));
            hinted.Advance(t);
            first_rows = got.first.data_ptr();
            // The prefill's growth reserved min(expected, 2 x 9) positions (whole pages).
            const int64_t room = page > 0 ? (std::min<int64_t>(expected, 18) + page - 1) / page * page
                                          : std::min<int64_t>(expected, 18);
            EXPECT_EQ(hinted.bytes(), room * 3 * (8 + 4) * elem) << "page " << page << " expected " << expected;
          }
          plain.Advance(t);
          EXPECT_TRUE(at::equal(got.first, want.first)) << "bf16 " << bf16 << " page " << page << " at " << hinted.length();
          EXPECT_TRUE(at::equal(got.second, want.second)) << "bf16 " << bf16 << " page " << page << " at " << hinted.length();
          EXPECT_EQ(hinted.length_bytes(), hinted.length() * 3 * (8 + 4) * elem);
          EXPECT_GE(hinted.bytes(), hinted.length_bytes());
        }
      }
    }
  }
}

}  // namespace
}  // namespace zipmoe::executor
