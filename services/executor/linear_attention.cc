// Gated DeltaNet (linear_attention.h): Qwen3NextGatedDeltaNet.forward's eager path with
// torch_recurrent_gated_delta_rule, in float32 on the CPU.
#include "services/executor/linear_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <vector>

#include "services/executor/cpu_ops.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

constexpr float kL2NormEps = 1e-6f;  // transformers' l2norm(x, dim=-1, eps=1e-6)

struct Dims {
  int64_t nk, nv, dk, dv, r, kernel, channels;
};

Dims DimsOf(const ModelConfig& c) {
  Dims d;
  d.nk = c.linear_num_key_heads;
  d.nv = c.linear_num_value_heads;
  d.dk = c.linear_key_head_dim;
  d.dv = c.linear_value_head_dim;
  d.r = d.nv / d.nk;
  d.kernel = c.linear_conv_kernel_dim;
  d.channels = 2 * d.nk * d.dk + d.nv * d.dv;
  return d;
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float Silu(float x) { return x / (1.0f + std::exp(-x)); }
// torch's F.softplus with beta 1, threshold 20.
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// x [n] /= sqrt(Σ x² + eps), then * scale.
void L2Normalize(float* x, int64_t n, float scale) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum + kL2NormEps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * scale;
}

// The delta rule of value head h over t tokens: state [dk, dv]; q/k of its key head at
// q + token * q_stride (dk values), v at v + token * v_stride (dv), g / beta at token * nv + h,
// out at out + token * out_stride (dv).
void DeltaRuleHead(const Dims& d, int64_t t, const float* q, const float* k, int64_t qk_stride, const float* v,
                   int64_t v_stride, const float* g, const float* beta, int64_t h, float* state, float* out,
                   int64_t out_stride) {
  std::vector<float> kv(static_cast<size_t>(d.dv));
  for (int64_t s = 0; s < t; ++s) {
    const float* qs = q + s * qk_stride;
    const float* ks = k + s * qk_stride;
    const float* vs = v + s * v_stride;
    const float decay = std::exp(g[s * d.nv + h]);
    const float b = beta[s * d.nv + h];
    for (int64_t i = 0; i < d.dk * d.dv; ++i) state[i] *= decay;
    std::fill(kv.begin(), kv.end(), 0.0f);
    for (int64_t i = 0; i < d.dk; ++i) {
      const float ki = ks[i];
      const float* row = state + i * d.dv;
      for (int64_t j = 0; j < d.dv; ++j) kv[static_cast<size_t>(j)] += row[j] * ki;
    }
    for (int64_t j = 0; j < d.dv; ++j) kv[static_cast<size_t>(j)] = (vs[j] - kv[static_cast<size_t>(j)]) * b;
    float* o = out + s * out_stride;
    std::fill(o, o + d.dv, 0.0f);
    for (int64_t i = 0; i < d.dk; ++i) {
      const float ki = ks[i], qi = qs[i];
      float* row = state + i * d.dv;
      for (int64_t j = 0; j < d.dv; ++j) {
        row[j] += ki * kv[static_cast<size_t>(j)];
        o[j] += row[j] * qi;
      }
    }
  }
}

}  // namespace

at::Tensor LinearAttentionForward(const ModelConfig& c, const LinearAttentionWeights& w, int64_t layer_id,
                                  const at::Tensor& x, const BatchLayout& batch) {
  const Dims d = DimsOf(c);
  const int64_t n = x.size(0);
  const int64_t kd = d.nk * d.dk, vd = d.nv * d.dv;
  // 1. Projections -> mixed [n, C] (q | k | v), z [n, vd], b / a [n, nv].
  at::Tensor mixed, z, b, a;
  if (c.arch == ModelArch::kQwen3Next) {
    const std::vector<at::Tensor> p = Linears(x, {{w.in_proj_qkvz, at::Tensor()}, {w.in_proj_ba, at::Tensor()}});
    // Per key head j: [q_j | k_j | v of its r value heads | z of them] and [b of them | a of them].
    const at::Tensor qkvz = p[0].view({n, d.nk, 2 * d.dk + 2 * d.r * d.dv});
    mixed = at::cat({qkvz.narrow(2, 0, d.dk).reshape({n, kd}), qkvz.narrow(2, d.dk, d.dk).reshape({n, kd}),
                     qkvz.narrow(2, 2 * d.dk, d.r * d.dv).reshape({n, vd})},
                    1);
    z = qkvz.narrow(2, 2 * d.dk + d.r * d.dv, d.r * d.dv).reshape({n, vd});
    const at::Tensor ba = p[1].view({n, d.nk, 2 * d.r});
    b = ba.narrow(2, 0, d.r).reshape({n, d.nv});
    a = ba.narrow(2, d.r, d.r).reshape({n, d.nv});
  } else {
    const std::vector<at::Tensor> p = Linears(x, {{w.in_proj_qkv, at::Tensor()},
                                                  {w.in_proj_z, at::Tensor()},
                                                  {w.in_proj_b, at::Tensor()},
                                                  {w.in_proj_a, at::Tensor()}});
    mixed = p[0];
    z = p[1];
    b = p[2];
    a = p[3];
  }
  mixed = mixed.contiguous();
  z = z.contiguous();
  b = b.contiguous();
  a = a.contiguous();
  at::Tensor conv_out = at::empty({n, d.channels}, mixed.options());
  at::Tensor g_t = at::empty({n, d.nv}, mixed.options());
  at::Tensor beta_t = at::empty({n, d.nv}, mixed.options());
  at::Tensor o_t = at::empty({n, vd}, mixed.options());
  const float* conv_w = w.conv1d.data_ptr<float>();  // [C, K]
  const float* neg_exp_a = w.neg_exp_a.data_ptr<float>();
  const float* dt_bias = w.dt_bias.data_ptr<float>();
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d.dk));

  // 2. Gates, the same for every sequence's rows.
  {
    const float* bp = b.data_ptr<float>();
    const float* ap = a.data_ptr<float>();
    float* gp = g_t.data_ptr<float>();
    float* betap = beta_t.data_ptr<float>();
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < d.nv; ++h) {
        betap[t * d.nv + h] = Sigmoid(bp[t * d.nv + h]);
        gp[t * d.nv + h] = neg_exp_a[h] * Softplus(ap[t * d.nv + h] + dt_bias[h]);
      }
    }
  }

  // 3. Per sequence: the conv1d with its carried inputs, the norms, then the delta rule per value head.
  for (size_t i = 0; i < batch.starts.size(); ++i) {
    const int64_t start = batch.starts[i], len = batch.lengths[i];
    KvCache::LinearState& st = batch.caches[i]->linear_state(layer_id);
    const int64_t hist = d.kernel - 1;
    if (st.conv.empty()) st.conv.assign(static_cast<size_t>(hist * d.channels), 0.0f);
    if (st.recurrent.empty()) st.recurrent.assign(static_cast<size_t>(d.nv * d.dk * d.dv), 0.0f);
    // xx = the carried K-1 inputs, then this call's len rows.
    std::vector<float> xx(static_cast<size_t>((hist + len) * d.channels));
    std::copy(st.conv.begin(), st.conv.end(), xx.begin());
    const float* in = mixed.data_ptr<float>() + start * d.channels;
    std::copy(in, in + len * d.channels, xx.begin() + hist * d.channels);
    float* co = conv_out.data_ptr<float>() + start * d.channels;
    at::parallel_for(0, d.channels, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t t = 0; t < len; ++t) {
        for (int64_t ch = c0; ch < c1; ++ch) {
          float acc = 0.0f;
          for (int64_t j = 0; j < d.kernel; ++j) acc += xx[static_cast<size_t>((t + j) * d.channels + ch)] * conv_w[ch * d.kernel + j];
          co[t * d.channels + ch] = Silu(acc);
        }
      }
    });
    std::copy(xx.end() - hist * d.channels, xx.end(), st.conv.begin());
    for (int64_t t = 0; t < len; ++t) {
      float* row = co + t * d.channels;
      for (int64_t h = 0; h < d.nk; ++h) {
        L2Normalize(row + h * d.dk, d.dk, q_scale);
        L2Normalize(row + kd + h * d.dk, d.dk, 1.0f);
      }
    }
    const float* gp = g_t.data_ptr<float>() + start * d.nv;
    const float* betap = beta_t.data_ptr<float>() + start * d.nv;
    float* op = o_t.data_ptr<float>() + start * vd;
    at::parallel_for(0, d.nv, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t kh = h / d.r;
        DeltaRuleHead(d, len, co + kh * d.dk, co + kd + kh * d.dk, d.channels, co + 2 * kd + h * d.dv, d.channels, gp,
                      betap, h, st.recurrent.data() + h * d.dk * d.dv, op + h * d.dv, vd);
      }
    });
  }

  // 4. The gated RMSNorm per value head, then out_proj.
  float* op = o_t.data_ptr<float>();
  cpu::RmsNorm(op, n * d.nv, d.dv, w.norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps), op);
  const float* zp = z.data_ptr<float>();
  for (int64_t e = 0; e < n * vd; ++e) op[e] = op[e] * Silu(zp[e]);
  return Linear(o_t, w.out_proj);
}

}  // namespace zipmoe::executor
