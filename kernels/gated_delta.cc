// GatedDeltaRecurrent: the scalar reference, argument checks and the choice of ISA variant; the causal
// conv1d + SiLU and the L2 normalisation (kernels/gated_delta.h). The vector variants live in
// gated_delta_{avx2,avx512,neon}.cc.
#include "kernels/gated_delta.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "kernels/gated_delta_isa.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ZIPMOE_GATED_DELTA_X86 1
#endif

namespace zipmoe::kernels {
namespace {

using GatedDeltaFn = void (*)(const GatedDeltaArgs&);

constexpr float kL2NormEps = 1e-6f;  // transformers' l2norm (modeling_qwen3_next.py)

GatedDeltaFn FunctionFor(GemmIsa isa) {
  if (!GemmIsaAvailable(isa)) return nullptr;
  switch (isa) {
    case GemmIsa::kScalar: return &GatedDeltaRecurrentReference;
#if defined(ZIPMOE_GATED_DELTA_X86)
    case GemmIsa::kAvx2: return &GatedDeltaRecurrentAvx2;
    case GemmIsa::kAvx512: return &GatedDeltaRecurrentAvx512;
#endif
#if defined(__aarch64__)
    case GemmIsa::kNeon: return &GatedDeltaRecurrentNeon;
#endif
    default: return nullptr;
  }
}

}  // namespace

Status ValidateGatedDeltaArgs(const GatedDeltaArgs& a) {
  if (a.t < 0 || a.n_k < 0 || a.n_v < 0 || a.dk < 0 || a.dv < 0)
    return Status::InvalidArgument(fmt::format("GatedDelta: negative size (t {}, n_k {}, n_v {}, dk {}, dv {})", a.t,
                                               a.n_k, a.n_v, a.dk, a.dv));
  if (a.n_v > 0 && (a.n_k == 0 || a.n_v % a.n_k != 0))
    return Status::InvalidArgument(
        fmt::format("GatedDelta: n_v {} is not a multiple of n_k {} (value heads share key heads)", a.n_v, a.n_k));
  if (a.head_begin < 0 || a.head_end > a.n_v || a.head_begin > a.head_end)
    return Status::InvalidArgument(
        fmt::format("GatedDelta: head range [{}, {}) is outside [0, {})", a.head_begin, a.head_end, a.n_v));
  const struct {
    const char* name;
    int64_t stride, row;
  } strides[] = {{"q_token_stride", a.q_token_stride, a.n_k * a.dk},
                 {"k_token_stride", a.k_token_stride, a.n_k * a.dk},
                 {"v_token_stride", a.v_token_stride, a.n_v * a.dv},
                 {"out_token_stride", a.out_token_stride, a.n_v * a.dv}};
  for (const auto& s : strides) {
    if (s.stride < s.row)
      return Status::InvalidArgument(fmt::format("GatedDelta: {} {} < its row of {} floats", s.name, s.stride, s.row));
  }
  if (a.t == 0 || a.head_begin == a.head_end) return Status::Ok();
  const struct {
    const char* name;
    const void* p;
  } pointers[] = {{"q", a.q}, {"k", a.k}, {"v", a.v}, {"g", a.g}, {"beta", a.beta}, {"state", a.state}, {"out", a.out}};
  for (const auto& p : pointers) {
    if (p.p == nullptr) return Status::InvalidArgument(fmt::format("GatedDelta: {} is null", p.name));
  }
  return Status::Ok();
}

void GatedDeltaRecurrentReference(const GatedDeltaArgs& a) {
  const int64_t dk = a.dk, dv = a.dv, group = a.n_v / a.n_k;
  std::vector<float> kv(static_cast<size_t>(dv)), delta(static_cast<size_t>(dv));
  for (int64_t s = 0; s < a.t; ++s) {
    for (int64_t h = a.head_begin; h < a.head_end; ++h) {
      const float* q = a.q + s * a.q_token_stride + (h / group) * dk;
      const float* k = a.k + s * a.k_token_stride + (h / group) * dk;
      const float* v = a.v + s * a.v_token_stride + h * dv;
      float* out = a.out + s * a.out_token_stride + h * dv;
      float* S = a.state + h * dk * dv;
      const float decay = std::exp(a.g[s * a.n_v + h]), beta = a.beta[s * a.n_v + h];
      for (int64_t i = 0; i < dk * dv; ++i) S[i] = S[i] * decay;
      for (int64_t j = 0; j < dv; ++j) kv[j] = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) kv[j] = kv[j] + S[i * dv + j] * k[i];
      }
      for (int64_t j = 0; j < dv; ++j) delta[j] = (v[j] - kv[j]) * beta;
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) S[i * dv + j] = S[i * dv + j] + k[i] * delta[j];
      }
      for (int64_t j = 0; j < dv; ++j) out[j] = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        for (int64_t j = 0; j < dv; ++j) out[j] = out[j] + S[i * dv + j] * q[i];
      }
    }
  }
}

GemmIsa GatedDeltaIsa() {
  static const GemmIsa isa = BestFloatLaneIsa();  // thread-safe one-time initialisation
  return isa;
}

bool GatedDeltaIsaAvailable(GemmIsa isa) { return FunctionFor(isa) != nullptr; }

void GatedDeltaRecurrent(const GatedDeltaArgs& a) {
  static const GatedDeltaFn fn = FunctionFor(GatedDeltaIsa());
  fn(a);
}

Status GatedDeltaRecurrentWithIsa(GemmIsa isa, const GatedDeltaArgs& a) {
  ZM_RETURN_IF_ERROR(ValidateGatedDeltaArgs(a));
  const GatedDeltaFn fn = FunctionFor(isa);
  if (fn == nullptr)
    return Status::Unavailable(
        fmt::format("GatedDelta: no {} variant in this build or on this CPU", GemmIsaName(isa)));
  fn(a);
  return Status::Ok();
}

void CausalConv1d(const CausalConvArgs& a) {
  const int64_t c_n = a.channels, hist = a.kernel - 1;
  for (int64_t s = 0; s < a.t; ++s) {
    const float* x = a.x + s * a.x_token_stride;
    float* out = a.out + s * a.out_token_stride;
    for (int64_t c = 0; c < c_n; ++c) {
      const float* w = a.w + c * a.kernel;
      const float input = x[c];
      float acc = a.bias != nullptr ? a.bias[c] : 0.0f;
      for (int64_t j = 0; j < hist; ++j) acc = acc + w[j] * a.state[j * c_n + c];
      acc = acc + w[hist] * input;
      // Roll the window: the oldest row drops out, the input becomes the newest.
      for (int64_t j = 0; j + 1 < hist; ++j) a.state[j * c_n + c] = a.state[(j + 1) * c_n + c];
      if (hist > 0) a.state[(hist - 1) * c_n + c] = input;
      out[c] = a.silu ? acc / (1.0f + std::exp(-acc)) : acc;
    }
  }
}

void L2NormalizeHeads(float* x, int64_t t, int64_t n_heads, int64_t dim, int64_t token_stride, float scale) {
  for (int64_t s = 0; s < t; ++s) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* r = x + s * token_stride + h * dim;
      float sum = 0.0f;
      for (int64_t i = 0; i < dim; ++i) sum = sum + r[i] * r[i];
      const float inv = 1.0f / std::sqrt(sum + kL2NormEps);
      for (int64_t i = 0; i < dim; ++i) r[i] = (r[i] * inv) * scale;
    }
  }
}

}  // namespace zipmoe::kernels
