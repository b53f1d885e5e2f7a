// SoftmaxValues's NEON variant (kernels/attention_cpu.h), AArch64 builds only (Advanced SIMD is part
// of the base architecture). Compiled with -ffp-contract=off (kernels/CMakeLists.txt); tested under
// qemu (tests/kernels/aarch64). 4 lanes; the values 8 vectors (32 columns) per pass.
#include <arm_neon.h>

#include "kernels/attention_cpu_isa.h"
#include "kernels/attention_cpu_tile.h"

namespace zipmoe::kernels {
namespace {

struct Neon {
  using Vec = float32x4_t;
  static constexpr int64_t kLanes = 4;
  static Vec Load(const float* p) { return vld1q_f32(p); }
  static Vec LoadBf16(const uint16_t* p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
  static void Store(float* p, Vec v) { vst1q_f32(p, v); }
  static Vec Set1(float x) { return vdupq_n_f32(x); }
  static Vec Add(Vec a, Vec b) { return vaddq_f32(a, b); }
  static Vec Sub(Vec a, Vec b) { return vsubq_f32(a, b); }
  static Vec Mul(Vec a, Vec b) { return vmulq_f32(a, b); }
  static Vec Div(Vec a, Vec b) { return vdivq_f32(a, b); }
  static Vec Max(Vec a, Vec b) { return vmaxq_f32(a, b); }
  static Vec ZeroBelow(Vec x, float t, Vec y) {
    const uint32x4_t below = vcltq_f32(x, vdupq_n_f32(t));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), below));
  }
  static Vec Pow2(Vec n) {
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vreinterpretq_f32_s32(e);
  }
};

}  // namespace

void SoftmaxValuesNeon(const SoftmaxValuesArgs& a) { attention_tile::SoftmaxValues<Neon, 8>(a); }
void SoftmaxValuesRowsNeon(const SoftmaxValuesArgs* rows, int count) {
  attention_tile::SoftmaxValuesRows<Neon, 8, 4, 4>(rows, count);
}

}  // namespace zipmoe::kernels
