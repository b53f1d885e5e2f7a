// Gated DeltaNet (linear_attention.h): Qwen3NextGatedDeltaNet.forward's eager path with
// torch_recurrent_gated_delta_rule, in float32 on the CPU; the conv1d, the L2 norms and the delta rule
// are kernels/gated_delta.h's (its fixed operation order: the same bits on every ISA).
#include "services/executor/linear_attention.h"

#include <algorithm>
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
  if (c.mamba()) return Mamba2Forward(c, w, layer_id, x, batch);
  if (c.short_conv()) return ShortConvForward(c, w, layer_id, x, batch);
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
    kernels::CausalConv1d(conv);
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

at::Tensor Mamba2Forward(const ModelConfig& c, const LinearAttentionWeights& w, int64_t layer_id, const at::Tensor& x,
                         const BatchLayout& batch) {
  const int64_t n = x.size(0), nh = c.mamba_n_heads, P = c.mamba_head_dim, G = c.mamba_n_groups,
                N = c.mamba_d_state, K = c.mamba_d_conv, ci = c.mamba_d_inner(), cc = c.mamba_conv_dim();
  const int64_t width = ci + cc + nh, heads_per_group = nh / G, hist = K - 1;
  // 1. in_proj -> rows [z | xBC | dt].
  at::Tensor proj = Linear(x, w.in_proj);
  if (w.in_proj_bias.defined()) proj = proj + w.in_proj_bias;
  proj = proj.contiguous();
  const float* pp = proj.data_ptr<float>();
  at::Tensor xbc_t = at::empty({n, cc}, proj.options());  // after the conv and SiLU
  at::Tensor y_t = at::empty({n, ci}, proj.options());
  float* xbc = xbc_t.data_ptr<float>();
  float* yp = y_t.data_ptr<float>();
  const float* conv_w = w.conv1d.data_ptr<float>();  // [Cc, K]
  const float* conv_b = w.conv_bias.defined() ? w.conv_bias.data_ptr<float>() : nullptr;
  const float* neg_exp_a = w.neg_exp_a.data_ptr<float>();
  const float* dt_bias = w.dt_bias.data_ptr<float>();
  const float* d_skip = w.d_skip.data_ptr<float>();

  for (size_t i = 0; i < batch.starts.size(); ++i) {
    const int64_t start = batch.starts[i], len = batch.lengths[i];
    KvCache::LinearState& st = batch.caches[i]->linear_state(layer_id);
    if (st.conv.empty()) st.conv.assign(static_cast<size_t>(hist * cc), 0.0f);
    if (st.recurrent.empty()) st.recurrent.assign(static_cast<size_t>(nh * P * N), 0.0f);
    // 2. The causal conv1d over xBC with its bias, then SiLU (kernels/gated_delta.h CausalConv1d: the K-1 inputs
    //    before this call's first token come from the state, which then holds this call's last K-1).
    kernels::CausalConvArgs conv;
    conv.x = pp + start * width + ci;
    conv.w = conv_w;
    conv.bias = conv_b;
    conv.state = st.conv.data();
    conv.out = xbc + start * cc;
    conv.t = len;
    conv.channels = cc;
    conv.kernel = K;
    conv.x_token_stride = width;
    conv.out_token_stride = cc;
    kernels::CausalConv1d(conv);
    // 3. The SSM recurrence, heads in parallel (each thread its own heads' state and output columns).
    float* state = st.recurrent.data();
    WorkPool::Shared().ParallelFor(nh, 1, [&](int64_t h0, int64_t h1) {
      constexpr int64_t kLanes = 16;
      std::vector<float> dtb(static_cast<size_t>(N));  // dt_h B_g of the current token
      for (int64_t h = h0; h < h1; ++h) {
        const int64_t g = h / heads_per_group;
        float* sh = state + h * P * N;
        for (int64_t t = 0; t < len; ++t) {
          const int64_t row = start + t;
          const float* xr = xbc + row * cc;
          const float* xh = xr + h * P;
          const float* bg = xr + ci + g * N;
          const float* cg = xr + ci + G * N + g * N;
          const float dt = Softplus(pp[row * width + ci + cc + h] + dt_bias[h]);
          const float decay = std::exp(dt * neg_exp_a[h]);
          for (int64_t k = 0; k < N; ++k) dtb[static_cast<size_t>(k)] = dt * bg[k];
          for (int64_t p = 0; p < P; ++p) {
            float* s_row = sh + p * N;
            const float xv = xh[p];
            // The state row, then y = S_row . C in kLanes fixed partial sums (vectorisable; the same order on
            // every run and thread count).
            for (int64_t k = 0; k < N; ++k) s_row[k] = s_row[k] * decay + dtb[static_cast<size_t>(k)] * xv;
            float lanes[kLanes] = {};
            int64_t k = 0;
            for (; k + kLanes <= N; k += kLanes)
              for (int64_t j = 0; j < kLanes; ++j) lanes[j] += s_row[k + j] * cg[k + j];
            for (; k < N; ++k) lanes[0] += s_row[k] * cg[k];
            float acc = 0.0f;
            for (int64_t j = 0; j < kLanes; ++j) acc += lanes[j];
            yp[row * ci + h * P + p] = acc + d_skip[h] * xv;
          }
        }
      }
    });
  }
  // 4. The gated RMSNorm over the whole inner width (BambaRMSNormGated: y * silu(z) first, then normalised;
  //    the DeltaNet's norm above gates after). z is each row's first Ci columns of proj.
  for (int64_t t = 0; t < n; ++t) cpu::SiluMul(pp + t * width, yp + t * ci, ci, yp + t * ci);
  cpu::RmsNorm(yp, n, ci, w.norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps), yp);
  at::Tensor out = Linear(y_t, w.out_proj);
  if (w.out_proj_bias.defined()) out = out + w.out_proj_bias;
  return out;
}

at::Tensor ShortConvForward(const ModelConfig& c, const LinearAttentionWeights& w, int64_t layer_id, const at::Tensor& x,
                            const BatchLayout& batch) {
  const int64_t n = x.size(0), h = c.hidden_size, k = c.linear_conv_kernel_dim, hist = k - 1;
  // 1. in_proj -> rows [B | C | x]; the conv's input is B * x.
  at::Tensor proj = Linear(x, w.in_proj);
  if (w.in_proj_bias.defined()) proj = proj + w.in_proj_bias;
  proj = proj.contiguous();
  const float* pp = proj.data_ptr<float>();
  at::Tensor y_t = at::empty({n, h}, proj.options());
  float* yp = y_t.data_ptr<float>();
  const float* conv_w = w.conv1d.data_ptr<float>();  // [H, K]
  const float* conv_b = w.conv_bias.defined() ? w.conv_bias.data_ptr<float>() : nullptr;
  at::Tensor bx_t = at::empty({n, h}, proj.options());
  float* bx = bx_t.data_ptr<float>();
  for (int64_t t = 0; t < n; ++t) {  // B * x
    const float* row = pp + t * 3 * h;
    for (int64_t ch = 0; ch < h; ++ch) bx[t * h + ch] = row[ch] * row[2 * h + ch];
  }
  for (size_t i = 0; i < batch.starts.size(); ++i) {
    const int64_t start = batch.starts[i], len = batch.lengths[i];
    KvCache::LinearState& st = batch.caches[i]->linear_state(layer_id);
    if (st.conv.empty()) st.conv.assign(static_cast<size_t>(hist * h), 0.0f);
    // 2. The causal depthwise conv1d over B * x (bias iff conv_bias, no activation; kernels/gated_delta.h
    //    CausalConv1d, the state carrying the last K-1 inputs), then y = C * conv.
    kernels::CausalConvArgs conv;
    conv.x = bx + start * h;
    conv.w = conv_w;
    conv.bias = conv_b;
    conv.silu = false;
    conv.state = st.conv.data();
    conv.out = yp + start * h;
    conv.t = len;
    conv.channels = h;
    conv.kernel = k;
    conv.x_token_stride = h;
    conv.out_token_stride = h;
    kernels::CausalConv1d(conv);
  }
  for (int64_t t = 0; t < n; ++t) {  // C * conv
    const float* gate_c = pp + t * 3 * h + h;
    for (int64_t ch = 0; ch < h; ++ch) yp[t * h + ch] = gate_c[ch] * yp[t * h + ch];
  }
  // 3. out_proj.
  at::Tensor out = Linear(y_t, w.out_proj);
  if (w.out_proj_bias.defined()) out = out + w.out_proj_bias;
  return out;
}

}  // namespace zipmoe::executor
