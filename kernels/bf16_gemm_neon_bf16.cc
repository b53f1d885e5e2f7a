// Bf16Gemm's Arm BF16 variant (kernels/bf16_gemm.h, GemmIsa::kNeonBf16). Compiled with
// -march=armv8.2-a+bf16 (kernels/CMakeLists.txt); called only after the kernel reports HWCAP2_BF16
// (Neoverse V1/V2/V3 and N2: Graviton 3/4, Grace, Jetson Thor; Apple M2 and later; not the Orin's
// Cortex-A78AE, which takes the NEON variant). The Arm twin of bf16_gemm_avx512bf16.cc:
//
// BFDOT multiplies 8 BF16 weights by 8 BF16 activations and adds pairs into 4 fp32 lanes, with no
// widening of the weights. The fp32 activation enters as two BF16 halves, x = hi + lo (hi = bf16(x)
// rounded to nearest even, lo = bf16(x - hi)), so each product keeps 16 significant bits of x.
// Per output, for 32-column blocks b, lane i in [0, 16) (four registers of 4 lanes):
//   acc[i] = bfdot(acc[i], W[r, 32b + 2i .. +1], hi[32b + 2i .. +1]), then the same with lo
// then the reduction tree of bf16_gemm.h over the 16 lanes, the remaining columns with fp32 FMAs on
// the exact activation, and the bias: the lane layout and order of Bf16GemmBf16DotReference and of
// the AVX-512-BF16 variant. BFDOT's own rounding (Arm ARM BFDotAdd: products and their pair sum
// without IEEE rounding) differs from the model's fp32 steps by ulps (tests bound it). The same
// instruction sequence whatever the row split, the batch or the encoding (BF16 or planes), so results
// do not depend on them. F32, FP8 and MXFP4 weights gain nothing from BFDOT and take the NEON variant.
// Opt-in (ZIPMOE_GEMM_ISA=neonbf16), as on x86: it leaves the fp32-activation summation of the other
// variants.
#include <arm_neon.h>

#include <cstdlib>

#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

// The scalar tail's weights: bf16_gemm_tile.h's WeightAt, instantiated on a type of this translation
// unit so the instantiation stays internal to it (compiled with the BF16 flags).
struct Tag {};
inline float WeightAt(const GemmWeights& w, int64_t index) {
  return w.planes() ? gemm_tile::WeightAt<Tag, gemm_tile::Encoding::kPlanes>(w, index)
                    : gemm_tile::WeightAt<Tag, gemm_tile::Encoding::kBf16>(w, index);
}

// 16 BF16 weights from the two planes (the byte interleave of bf16_gemm_neon.cc's LoadPlanes).
inline void LoadPlanes16(const uint8_t* e, const uint8_t* sm, uint16x8_t* w0, uint16x8_t* w1) {
  const uint8x16_t ev = vld1q_u8(e), sv = vld1q_u8(sm);
  const uint8x16_t m80 = vdupq_n_u8(0x80), m7f = vdupq_n_u8(0x7f);
  const uint8x16_t lo = vorrq_u8(vandq_u8(vshlq_n_u8(ev, 7), m80), vandq_u8(sv, m7f));
  const uint8x16_t hi = vorrq_u8(vandq_u8(sv, m80), vshrq_n_u8(ev, 1));
  *w0 = vreinterpretq_u16_u8(vzip1q_u8(lo, hi));
  *w1 = vreinterpretq_u16_u8(vzip2q_u8(lo, hi));
}

inline float Reduce(float32x4_t a0, float32x4_t a1, float32x4_t a2, float32x4_t a3) {
  const float32x4_t s8a = vaddq_f32(a0, a2), s8b = vaddq_f32(a1, a3);  // j + j+8
  const float32x4_t s4 = vaddq_f32(s8a, s8b);                          // j + j+4
  const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));  // j + j+2
  return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);                  // 0 + 1
}

// One output: row r of the weights against one token's split activation (hi, lo: 32 kb BF16 each).
inline float Dot(const GemmArgs& a, const uint16_t* hi, const uint16_t* lo, const float* x, int64_t r) {
  const int64_t cols = a.w.cols, kb = cols / 32, row = r * cols;
  float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  for (int64_t b = 0; b < kb; ++b) {
    const int64_t k = b * 32;
    uint16x8_t w[4];
    if (a.w.planes()) {
      LoadPlanes16(a.w.e + row + k, a.w.sm + row + k, &w[0], &w[1]);
      LoadPlanes16(a.w.e + row + k + 16, a.w.sm + row + k + 16, &w[2], &w[3]);
    } else {
      for (int j = 0; j < 4; ++j) w[j] = vld1q_u16(a.w.bf16 + row + k + 8 * j);
    }
    for (int j = 0; j < 4; ++j) {
      const bfloat16x8_t wb = vreinterpretq_bf16_u16(w[j]);
      acc[j] = vbfdotq_f32(acc[j], wb, vreinterpretq_bf16_u16(vld1q_u16(hi + k + 8 * j)));
      acc[j] = vbfdotq_f32(acc[j], wb, vreinterpretq_bf16_u16(vld1q_u16(lo + k + 8 * j)));
    }
  }
  float s = Reduce(acc[0], acc[1], acc[2], acc[3]);
  for (int64_t k = kb * 32; k < cols; ++k) s = __builtin_fmaf(WeightAt(a.w, row + k), x[k], s);
  if (a.bias != nullptr) s += a.bias[r];
  return s;
}

}  // namespace

void Bf16GemmNeonBf16(const GemmArgs& a) {
  if (a.n <= 0 || a.row_end <= a.row_begin) return;
  if (a.w.bf16 == nullptr && !a.w.planes()) {  // F32, FP8 or MXFP4 weights
    Bf16GemmNeon(a);
    return;
  }
  const int64_t kb = a.w.cols / 32, stride = 32 * kb;
  constexpr int64_t kTokenBlock = 16;  // tokens split at once; a weight row is read once per block
  const int64_t block = a.n < kTokenBlock ? a.n : kTokenBlock;
  // hi and lo of a block of tokens; malloc keeps this translation unit free of inline library code
  // compiled with the BF16 flags (as bf16_gemm_tile.h explains for the x86 variants).
  auto* buf = static_cast<uint16_t*>(std::malloc(static_cast<size_t>(2 * block * (stride > 0 ? stride : 1)) * 2));
  if (buf == nullptr) {
    Bf16GemmNeon(a);
    return;
  }
  for (int64_t t0 = 0; t0 < a.n; t0 += block) {
    const int64_t count = t0 + block < a.n ? block : a.n - t0;
    for (int64_t j = 0; j < count; ++j) {
      const float* x = a.x + (t0 + j) * a.ldx;
      uint16_t* hi = buf + 2 * j * stride;
      SplitBf16Activations(x, stride, hi, hi + stride);  // as the scalar model splits
    }
    for (int64_t r = a.row_begin; r < a.row_end; ++r) {
      if (r + 1 < a.row_end) {  // the next row, as the other variants prefetch
        __builtin_prefetch(a.w.planes() ? static_cast<const void*>(a.w.e + (r + 1) * a.w.cols)
                                        : static_cast<const void*>(a.w.bf16 + (r + 1) * a.w.cols));
      }
      for (int64_t j = 0; j < count; ++j) {
        const uint16_t* hi = buf + 2 * j * stride;
        a.y[(t0 + j) * a.ldy + r] = Dot(a, hi, hi + stride, a.x + (t0 + j) * a.ldx, r);
      }
    }
  }
  std::free(buf);
}

}  // namespace zipmoe::kernels
