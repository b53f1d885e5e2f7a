// Gated DeltaNet (linear_attention.h): Qwen3NextGatedDeltaNet.forward's eager path with
// torch_recurrent_gated_delta_rule, in float32 on the CPU; the conv1d, the L2 norms and the delta rule
// are kernels/gated_delta.h's (its fixed operation order: the same bits on every ISA).
#include "services/executor/linear_attention.h"

#include <cmath>
#include <vector>

#include "kernels/gated_delta.h"
#include "services/executor/cpu_ops.h"
#include "services/executor/torch_util.h"
#include "services/executor/work_pool.h"

namespace zipmoe::executor {
namespace {

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
// torch's F.softplus with beta 1, threshold 20.
float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

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
    float* co = conv_out.data_ptr<float>() + start * d.channels;
    kernels::CausalConvArgs conv;
    conv.x = mixed.data_ptr<float>() + start * d.channels;
    conv.w = conv_w;
    conv.state = st.conv.data();
    conv.out = co;
    conv.t = len;
    conv.channels = d.channels;
    conv.kernel = d.kernel;
    conv.x_token_stride = d.channels;
    conv.out_token_stride = d.channels;
    kernels::CausalConv1dSilu(conv);
    kernels::L2NormalizeHeads(co, len, d.nk, d.dk, d.channels, q_scale);
    kernels::L2NormalizeHeads(co + kd, len, d.nk, d.dk, d.channels, 1.0f);
    kernels::GatedDeltaArgs rule;
    rule.q = co;
    rule.k = co + kd;
    rule.v = co + 2 * kd;
    rule.g = g_t.data_ptr<float>() + start * d.nv;
    rule.beta = beta_t.data_ptr<float>() + start * d.nv;
    rule.state = st.recurrent.data();
    rule.out = o_t.data_ptr<float>() + start * vd;
    rule.t = len;
    rule.n_k = d.nk;
    rule.n_v = d.nv;
    rule.dk = d.dk;
    rule.dv = d.dv;
    rule.q_token_stride = rule.k_token_stride = rule.v_token_stride = d.channels;
    rule.out_token_stride = vd;
    // Value heads in parallel: each thread writes its own heads' state and output columns.
    WorkPool::Shared().ParallelFor(d.nv, 1, [&](int64_t h0, int64_t h1) {
      kernels::GatedDeltaArgs part = rule;
      part.head_begin = h0;
      part.head_end = h1;
      kernels::GatedDeltaRecurrent(part);
    });
  }

  // 4. The gated RMSNorm per value head, then out_proj.
  float* op = o_t.data_ptr<float>();
  cpu::RmsNorm(op, n * d.nv, d.dv, w.norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps), op);
  cpu::SiluMul(z.data_ptr<float>(), op, n * vd, op);  // RMSNorm(o) * silu(z)
  return Linear(o_t, w.out_proj);
}

}  // namespace zipmoe::executor
