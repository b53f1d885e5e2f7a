// Bf16Gemm's NEON variant (kernels/bf16_gemm.h) for AArch64 (Jetson Orin's Cortex-A78AE; NEON and
// FMA are part of the AArch64 baseline). The 16 lanes are four 128-bit registers (lanes 0-3, 4-7,
// 8-11, 12-15). Tested here by cross-compiling and running under qemu-user (tests/kernels/aarch64).
#include <arm_neon.h>

#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

struct Neon {
  // FP8 as on x86 (kernels/bf16_gemm_avx512.cc Avx512::LoadF8): each byte sign-extended to 32 bits,
  // shifted left by 20 and masked is the float32 of value e4m3 / 2^120 (E4M3 subnormals become float32
  // subnormals, read exactly while FPCR.FZ is clear: gemm_tile::SubnormalInputs), times scale * 2^120:
  // 5 operations per 4 weights against 13 for the decode with every case checked it replaced. Row tiles
  // with a NaN code or a scale >= 2^8 are found by F8TileScan and computed by gemm_tile::F8Checked.
  // Subnormal codes stay on LoadF8: Arm cores multiply float32 subnormals at full speed.
  static constexpr bool kF8Scan = true;
  static constexpr bool kF8SubnormalLoads = false;
  struct Acc {
    float32x4_t v0, v1, v2, v3;
  };
  using Vec = Acc;
  static constexpr int kGemvRows = 4;
  static constexpr int kGemvRowsF8 = 4;
  static constexpr int kGemvRowsMxfp4 = 4;
  static constexpr int kGemmRows = 2;
  static constexpr int kGemmTokens = 2;
  static constexpr int kF8DequantMinTokens = 4;  // gemm_tile::Run: 2 token tiles, not measured on an Arm core
  static constexpr int kMxfp4DequantMinTokens = 1 << 30;  // gemm_tile::Run: never (the tile decodes), not measured on an Arm core

  // 8 BF16 values (little-endian uint16) widened to two fp32 vectors.
  static void Widen(uint16x8_t v, float32x4_t* lo, float32x4_t* hi) {
    *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16));
    *hi = vreinterpretq_f32_u32(vshll_high_n_u16(v, 16));
  }

  static void Store(float* p, const Vec& v) {
    vst1q_f32(p, v.v0);
    vst1q_f32(p + 4, v.v1);
    vst1q_f32(p + 8, v.v2);
    vst1q_f32(p + 12, v.v3);
  }
  static Acc Zero() {
    const float32x4_t z = vdupq_n_f32(0.0f);
    return {z, z, z, z};
  }
  static Vec LoadX(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}; }
  static Vec LoadBf16(const uint16_t* p) {
    Vec w;
    Widen(vld1q_u16(p), &w.v0, &w.v1);
    Widen(vld1q_u16(p + 8), &w.v2, &w.v3);
    return w;
  }
  static Vec LoadPlanes(const uint8_t* e, const uint8_t* sm) {
    // The recovery formula on bytes (kernels/recovery_cpu.cc), then the BF16 widening.
    const uint8x16_t ev = vld1q_u8(e), sv = vld1q_u8(sm);
    const uint8x16_t m80 = vdupq_n_u8(0x80), m7f = vdupq_n_u8(0x7f);
    const uint8x16_t lo = vorrq_u8(vandq_u8(vshlq_n_u8(ev, 7), m80), vandq_u8(sv, m7f));
    const uint8x16_t hi = vorrq_u8(vandq_u8(sv, m80), vshrq_n_u8(ev, 1));
    Vec w;
    Widen(vreinterpretq_u16_u8(vzip1q_u8(lo, hi)), &w.v0, &w.v1);
    Widen(vreinterpretq_u16_u8(vzip2q_u8(lo, hi)), &w.v2, &w.v3);
    return w;
  }
  static float32x4_t F8Shifted(int32x4_t b) {
    return vreinterpretq_f32_s32(vandq_s32(vshlq_n_s32(b, 20), vdupq_n_s32(static_cast<int32_t>(0x87f00000u))));
  }
  static Vec LoadF8(const uint8_t* p, float scale) {
    const int8x16_t b = vld1q_s8(reinterpret_cast<const int8_t*>(p));
    const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
    const float32x4_t s = vdupq_n_f32(scale * 0x1p120f);
    return {vmulq_f32(F8Shifted(vmovl_s16(vget_low_s16(lo))), s), vmulq_f32(F8Shifted(vmovl_high_s16(lo)), s),
            vmulq_f32(F8Shifted(vmovl_s16(vget_low_s16(hi))), s), vmulq_f32(F8Shifted(vmovl_high_s16(hi)), s)};
  }
  static void LoadF8x2(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    *w0 = LoadF8(p, scale);
    *w1 = LoadF8(p + 16, scale);
  }
  // kChecked when rows [r, r + rows) hold a NaN code or a scale that LoadF8 cannot take (|s| >= 2^8, inf,
  // NaN), else kFast.
  static gemm_tile::F8Tile F8TileScan(const GemmArgs& a, int64_t r, int rows) {
    const uint8_t* p = a.w.f8 + r * a.w.cols;
    const int64_t n = rows * a.w.cols;
    uint8x16_t nan = vdupq_n_u8(0);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      nan = vorrq_u8(nan, vceqq_u8(vorrq_u8(vld1q_u8(p + i), vdupq_n_u8(0x80)), vdupq_n_u8(0xff)));
    bool any = vmaxvq_u8(nan) != 0;
    for (; i < n; ++i) any |= (p[i] & 0x7fu) == 0x7fu;
    return any || gemm_tile::F8ScalesNeedSafe(a, r, rows) ? gemm_tile::F8Tile::kChecked : gemm_tile::F8Tile::kFast;
  }
  // MXFP4: each E2M1 value is an IEEE half whose low byte is 0, so the nibbles index a 16-byte table of
  // the high bytes (TBL), a zip with zeros makes the halves, FCVTL widens them exactly, and one
  // multiplication by the block's scale gives GemmWeights' value.
  using Fp4Table = float32x4_t;
  static Fp4Table MakeFp4Table(float scale) { return vdupq_n_f32(scale); }
  static Vec LoadMxfp4(const uint8_t* p, float32x4_t scale) {
    // High bytes of the halves 0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, ..., -6 (0x3800 is 0.5).
    static const uint8_t kHalfHigh[16] = {0x00, 0x38, 0x3c, 0x3e, 0x40, 0x42, 0x44, 0x46,
                                          0x80, 0xb8, 0xbc, 0xbe, 0xc0, 0xc2, 0xc4, 0xc6};
    const uint8x8_t b = vld1_u8(p);  // 16 nibbles; column 2j in the low nibble of p[j]
    const uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(0x0f)), vshr_n_u8(b, 4));
    const uint8x16_t high = vqtbl1q_u8(vld1q_u8(kHalfHigh), vcombine_u8(z.val[0], z.val[1]));
    const uint8x16_t zero = vdupq_n_u8(0);
    const float16x8_t h0 = vreinterpretq_f16_u8(vzip1q_u8(zero, high));  // columns 0-7, little-endian halves
    const float16x8_t h1 = vreinterpretq_f16_u8(vzip2q_u8(zero, high));  // columns 8-15
    return {vmulq_f32(vcvt_f32_f16(vget_low_f16(h0)), scale), vmulq_f32(vcvt_high_f32_f16(h0), scale),
            vmulq_f32(vcvt_f32_f16(vget_low_f16(h1)), scale), vmulq_f32(vcvt_high_f32_f16(h1), scale)};
  }
  static Acc Fma(const Vec& w, const Vec& x, const Acc& acc) {
    return {vfmaq_f32(acc.v0, w.v0, x.v0), vfmaq_f32(acc.v1, w.v1, x.v1), vfmaq_f32(acc.v2, w.v2, x.v2),
            vfmaq_f32(acc.v3, w.v3, x.v3)};
  }
  static Acc Add(const Acc& a, const Acc& b) {
    return {vaddq_f32(a.v0, b.v0), vaddq_f32(a.v1, b.v1), vaddq_f32(a.v2, b.v2), vaddq_f32(a.v3, b.v3)};
  }
  static float Reduce(const Acc& acc) {
    const float32x4_t s8a = vaddq_f32(acc.v0, acc.v2), s8b = vaddq_f32(acc.v1, acc.v3);  // j + j+8
    const float32x4_t s4 = vaddq_f32(s8a, s8b);                                         // j + j+4
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));               // j + j+2
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);                                 // 0 + 1
  }
};

}  // namespace

void Bf16GemmNeon(const GemmArgs& a) { gemm_tile::Gemm<Neon>(a); }

}  // namespace zipmoe::kernels
