// SoftmaxValues: the scalar reference, argument checks and the choice of ISA variant
// (kernels/attention_cpu.h). The vector variants live in attention_cpu_{avx2,avx512,neon}.cc.
#include "kernels/attention_cpu.h"

#include <cstring>

#include <fmt/format.h>

#include "kernels/attention_cpu_isa.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define ZIPMOE_ATTENTION_X86 1
#endif

namespace zipmoe::kernels {
namespace {

using SoftmaxValuesFn = void (*)(const SoftmaxValuesArgs&);
using SoftmaxValuesRowsFn = void (*)(const SoftmaxValuesArgs*, int);

// One ISA's entry points (both null where the build or the CPU lacks it).
struct Variant {
  SoftmaxValuesFn one = nullptr;
  SoftmaxValuesRowsFn rows = nullptr;
};

Variant VariantFor(GemmIsa isa) {
  if (!GemmIsaAvailable(isa)) return {};
  switch (isa) {
    case GemmIsa::kScalar: return {&SoftmaxValuesReference, &SoftmaxValuesRowsReference};
#if defined(ZIPMOE_ATTENTION_X86)
    case GemmIsa::kAvx2: return {&SoftmaxValuesAvx2, &SoftmaxValuesRowsAvx2};
    case GemmIsa::kAvx512: return {&SoftmaxValuesAvx512, &SoftmaxValuesRowsAvx512};
#endif
#if defined(__aarch64__)
    case GemmIsa::kNeon: return {&SoftmaxValuesNeon, &SoftmaxValuesRowsNeon};
#endif
    default: return {};
  }
}

}  // namespace

Status ValidateSoftmaxValuesArgs(const SoftmaxValuesArgs& a) {
  if (a.n < 1) return Status::InvalidArgument(fmt::format("SoftmaxValues: n {} < 1 (no visible key)", a.n));
  if (a.dv < 1) return Status::InvalidArgument(fmt::format("SoftmaxValues: dv {} < 1", a.dv));
  if (a.v_row_stride < a.dv)
    return Status::InvalidArgument(fmt::format("SoftmaxValues: v_row_stride {} < dv {}", a.v_row_stride, a.dv));
  const struct {
    const char* name;
    const void* p;
  } pointers[] = {{"scores", a.scores}, {"v", a.v != nullptr ? static_cast<const void*>(a.v) : a.v_bf16}, {"out", a.out}};
  for (const auto& p : pointers) {
    if (p.p == nullptr) return Status::InvalidArgument(fmt::format("SoftmaxValues: {} is null", p.name));
  }
  return Status::Ok();
}

void SoftmaxValuesReference(const SoftmaxValuesArgs& a) {
  float* s = a.scores;
  for (int64_t j = 0; j < a.n; ++j) s[j] = s[j] * a.scale;
  float m = a.sink != nullptr ? *a.sink : s[0];
  for (int64_t j = 0; j < a.n; ++j) m = s[j] > m ? s[j] : m;
  float lanes[16] = {};
  for (int64_t j = 0; j < a.n; ++j) {
    s[j] = AttentionExp(s[j] - m);
    lanes[j % 16] = lanes[j % 16] + s[j];
  }
  float sum = FoldSixteenLanes(lanes);
  if (a.sink != nullptr) sum = sum + AttentionExp(*a.sink - m);
  for (int64_t j = 0; j < a.n; ++j) s[j] = s[j] / sum;
  for (int64_t d = 0; d < a.dv; ++d) a.out[d] = 0.0f;
  for (int64_t j = 0; j < a.n; ++j) {
    for (int64_t d = 0; d < a.dv; ++d) {
      float vjd;
      if (a.v_bf16 != nullptr) {
        const uint32_t bits = static_cast<uint32_t>(a.v_bf16[j * a.v_row_stride + d]) << 16;
        std::memcpy(&vjd, &bits, sizeof(vjd));
      } else {
        vjd = a.v[j * a.v_row_stride + d];
      }
      a.out[d] = a.out[d] + s[j] * vjd;
    }
  }
}

GemmIsa AttentionIsa() {
  static const GemmIsa isa = BestFloatLaneIsa();  // thread-safe one-time initialisation
  return isa;
}

bool AttentionIsaAvailable(GemmIsa isa) { return VariantFor(isa).one != nullptr; }

void SoftmaxValues(const SoftmaxValuesArgs& a) {
  static const SoftmaxValuesFn fn = VariantFor(AttentionIsa()).one;
  fn(a);
}

Status SoftmaxValuesWithIsa(GemmIsa isa, const SoftmaxValuesArgs& a) {
  ZM_RETURN_IF_ERROR(ValidateSoftmaxValuesArgs(a));
  const SoftmaxValuesFn fn = VariantFor(isa).one;
  if (fn == nullptr)
    return Status::Unavailable(fmt::format("SoftmaxValues: no {} variant in this build or on this CPU", GemmIsaName(isa)));
  fn(a);
  return Status::Ok();
}

void SoftmaxValuesRowsReference(const SoftmaxValuesArgs* rows, int count) {
  for (int r = 0; r < count; ++r) SoftmaxValuesReference(rows[r]);
}

void SoftmaxValuesRows(const SoftmaxValuesArgs* rows, int count) {
  static const SoftmaxValuesRowsFn fn = VariantFor(AttentionIsa()).rows;
  fn(rows, count);
}

Status SoftmaxValuesRowsWithIsa(GemmIsa isa, const SoftmaxValuesArgs* rows, int count) {
  if (count < 1 || count > kSoftmaxValuesMaxRows)
    return Status::InvalidArgument(
        fmt::format("SoftmaxValuesRows: count {} outside [1, {}]", count, kSoftmaxValuesMaxRows));
  for (int r = 0; r < count; ++r) {
    const Status st = ValidateSoftmaxValuesArgs(rows[r]);
    if (!st.ok()) return Status::InvalidArgument(fmt::format("rows[{}]: {}", r, st.message()));
  }
  const SoftmaxValuesRowsFn fn = VariantFor(isa).rows;
  if (fn == nullptr)
    return Status::Unavailable(
        fmt::format("SoftmaxValuesRows: no {} variant in this build or on this CPU", GemmIsaName(isa)));
  fn(rows, count);
  return Status::Ok();
}

}  // namespace zipmoe::kernels
