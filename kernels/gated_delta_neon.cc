// GatedDeltaRecurrent's NEON variant (kernels/gated_delta.h) for AArch64 (NEON is part of its
// baseline). Compiled with -ffp-contract=off (kernels/CMakeLists.txt): vmulq + vaddq, never vfmaq.
// 4 lanes per vector, 8 vectors (32 columns) per block in the 32 q registers. Tested by
// cross-compiling and running under qemu-user (tests/kernels/aarch64).
#include <arm_neon.h>

#include "kernels/gated_delta_isa.h"
#include "kernels/gated_delta_tile.h"

namespace zipmoe::kernels {
namespace {

struct Neon {
  using Vec = float32x4_t;
  static constexpr int64_t kLanes = 4;
  static constexpr int kBlock = 8;
  static Vec Load(const float* p) { return vld1q_f32(p); }
  static void Store(float* p, Vec v) { vst1q_f32(p, v); }
  static Vec Set1(float x) { return vdupq_n_f32(x); }
  static Vec Add(Vec a, Vec b) { return vaddq_f32(a, b); }
  static Vec Sub(Vec a, Vec b) { return vsubq_f32(a, b); }
  static Vec Mul(Vec a, Vec b) { return vmulq_f32(a, b); }
};

}  // namespace

void GatedDeltaRecurrentNeon(const GatedDeltaArgs& a) { gated_delta_tile::Recurrent<Neon>(a); }

}  // namespace zipmoe::kernels
