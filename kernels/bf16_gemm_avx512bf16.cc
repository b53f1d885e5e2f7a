// Bf16Gemm's AVX-512-BF16 variant (kernels/bf16_gemm.h, GemmIsa::kAvx512Bf16). Compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512bf16 -mfma (kernels/CMakeLists.txt); called only after
// CPUID reports AVX512_BF16 (Zen 4/5, Cooper Lake, Sapphire Rapids and later).
//
// The weights are BF16 already: vdpbf16ps multiplies 32 of them by 32 BF16 activations and adds
// pairs into 16 fp32 lanes, with no widening of the weights. The fp32 activation enters as two BF16
// halves, x = hi + lo (hi = bf16(x) rounded to nearest even, lo = bf16(x - hi)), so the products are
// those of x with 16 significant bits instead of 24: relative error <= 2^-17 per activation, against
// the 2^-8 of a single BF16 activation (llama.cpp's choice, which moves logits by BF16 rounding).
//
// Per output (row r, token t), for 32-column blocks b = 0 .. cols/32 - 1, lane i in [0, 16):
//   acc[i] = dpbf16(acc[i], W[r, 32b + 2i .. +1], hi[32b + 2i .. +1]), then the same with lo
// then the reduction tree of bf16_gemm.h over the 16 lanes, the remaining columns with fp32 FMAs on
// the exact activation, and the bias. The same instruction sequence whatever the tile, the thread
// split or the encoding (BF16 or planes, reassembled to BF16 in registers), so results do not depend
// on them; they differ from the fp32-activation variants by the rounding above (tests bound it).
// F32, FP8 and MXFP4 weights (GemmWeights::f32 / f8 / mxfp4) gain nothing from vdpbf16ps and take the
// AVX-512 variant.
#include <immintrin.h>

#include <cstdlib>

#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

constexpr int64_t kTokenBlock = 16;  // tokens whose split activations are made at once

enum class Enc { kBf16, kPlanes };

// 32 BF16 weights from the two planes: (sm & 0x80) << 8 | e << 7 | (sm & 0x7f) per element.
inline __m512i LoadPlanes32(const uint8_t* e, const uint8_t* sm) {
  const __m512i ev = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e)));
  const __m512i sv = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm)));
  const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(sv, _mm512_set1_epi16(0x80)), 8);
  return _mm512_or_si512(_mm512_or_si512(sign, _mm512_slli_epi16(ev, 7)),
                         _mm512_and_si512(sv, _mm512_set1_epi16(0x7f)));
}

inline __m512 Bf16HalfToPs(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// hi and lo halves of x[0, 32 kb) into hi[], lo[] (32 BF16 per block).
inline void Split(const float* x, int64_t kb, uint16_t* hi, uint16_t* lo) {
  for (int64_t b = 0; b < kb; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // [0..15] from x0
    const __m512 r0 = _mm512_sub_ps(x0, Bf16HalfToPs(_mm512_castsi512_si256(h)));
    const __m512 r1 = _mm512_sub_ps(x1, Bf16HalfToPs(_mm512_extracti64x4_epi64(h, 1)));
    const __m512i l = (__m512i)_mm512_cvtne2ps_pbh(r1, r0);
    _mm512_storeu_si512(hi + 32 * b, h);
    _mm512_storeu_si512(lo + 32 * b, l);
  }
}

inline float Reduce(__m512 acc) {  // the tree of bf16_gemm.h: j + j+8, j + j+4, j + j+2, j + j+1
  const __m256 lo = _mm512_castps512_ps256(acc);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

// The scalar tail's weights: bf16_gemm_tile.h's WeightAt, instantiated on a type of this
// translation unit so the instantiation stays internal to it.
struct Tag {};
template <Enc kEnc>
inline float WeightAt(const GemmWeights& w, int64_t index) {
  return gemm_tile::WeightAt<Tag, kEnc == Enc::kPlanes ? gemm_tile::Encoding::kPlanes : gemm_tile::Encoding::kBf16>(
      w, index);
}

// The split activations of tokens [t0, t0 + count): token j's hi at xs + 2 j stride, lo after it.
struct SplitX {
  const uint16_t* buf;
  int64_t stride;  // BF16 elements per token half (32 kb)
  const uint16_t* Hi(int64_t j) const { return buf + 2 * j * stride; }
  const uint16_t* Lo(int64_t j) const { return buf + (2 * j + 1) * stride; }
};

// Rows [r, r + R) x tokens [t, t + T) (t relative to the split block starting at t0).
template <Enc kEnc, int R, int T>
inline void Tile(const GemmArgs& a, const SplitX& sx, int64_t t0, int64_t r, int64_t t) {
  const int64_t cols = a.w.cols, kb = cols / 32;
  __m512 acc[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  const int64_t next_rows = a.w.rows - r - R < R ? a.w.rows - r - R : R;
  for (int64_t b = 0; b < kb; ++b) {
    const int64_t k = b * 32;
    if (next_rows > 0) {  // the next tile's rows, as bf16_gemm_tile.h (page-sized rows)
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        if (i >= next_rows) break;
        const int64_t off = (r + R + i) * cols + k;
        if (kEnc == Enc::kPlanes) {
          __builtin_prefetch(a.w.e + off);
          __builtin_prefetch(a.w.sm + off);
        } else {
          __builtin_prefetch(a.w.bf16 + off);
        }
      }
    }
    __m512bh xh[T], xl[T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      xh[j] = (__m512bh)_mm512_loadu_si512(sx.Hi(t + j) + k);
      xl[j] = (__m512bh)_mm512_loadu_si512(sx.Lo(t + j) + k);
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const int64_t off = (r + i) * cols + k;
      const __m512bh w =
          (__m512bh)(kEnc == Enc::kPlanes ? LoadPlanes32(a.w.e + off, a.w.sm + off) : _mm512_loadu_si512(a.w.bf16 + off));
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w, xh[j]);
        acc[i][j] = _mm512_dpbf16_ps(acc[i][j], w, xl[j]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const int64_t row = (r + i) * cols;
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const float* xt = a.x + (t0 + t + j) * a.ldx;
      float s = Reduce(acc[i][j]);
      for (int64_t k = kb * 32; k < cols; ++k) s = __builtin_fmaf(WeightAt<kEnc>(a.w, row + k), xt[k], s);
      if (a.bias != nullptr) s += a.bias[r + i];
      a.y[(t0 + t + j) * a.ldy + r + i] = s;
    }
  }
}

template <Enc kEnc, int R, int T>
inline void Rows(const GemmArgs& a, const SplitX& sx, int64_t t0, int64_t count) {
  int64_t r = a.row_begin;
  for (; r + R <= a.row_end; r += R) {
    int64_t t = 0;
    for (; t + T <= count; t += T) Tile<kEnc, R, T>(a, sx, t0, r, t);
    for (; t < count; ++t) Tile<kEnc, R, 1>(a, sx, t0, r, t);
  }
  for (; r < a.row_end; ++r) {
    int64_t t = 0;
    for (; t + T <= count; t += T) Tile<kEnc, 1, T>(a, sx, t0, r, t);
    for (; t < count; ++t) Tile<kEnc, 1, 1>(a, sx, t0, r, t);
  }
}

template <Enc kEnc>
void Run(const GemmArgs& a) {
  const int64_t kb = a.w.cols / 32, stride = 32 * kb;
  const int64_t block = a.n < kTokenBlock ? a.n : kTokenBlock;
  // 2 halves x block tokens x stride BF16; malloc (not a std:: container) keeps this translation
  // unit free of inline library code compiled with AVX-512 flags (bf16_gemm_tile.h explains why).
  auto* buf = static_cast<uint16_t*>(std::malloc(static_cast<size_t>(2 * block * (stride > 0 ? stride : 1)) * 2));
  if (buf == nullptr) {
    Bf16GemmAvx512(a);  // no memory for the split: the fp32-activation variant
    return;
  }
  for (int64_t t0 = 0; t0 < a.n; t0 += block) {
    const int64_t count = t0 + block < a.n ? block : a.n - t0;
    for (int64_t j = 0; j < count; ++j) Split(a.x + (t0 + j) * a.ldx, kb, buf + 2 * j * stride, buf + (2 * j + 1) * stride);
    const SplitX sx{buf, stride};
    if (count >= 4) {
      Rows<kEnc, 4, 4>(a, sx, t0, count);
    } else if (count >= 2) {
      Rows<kEnc, 4, 2>(a, sx, t0, count);
    } else {
      Rows<kEnc, 1, 1>(a, sx, t0, count);
    }
  }
  std::free(buf);
}

}  // namespace

void Bf16GemmAvx512Bf16(const GemmArgs& a) {
  if (a.n <= 0 || a.row_end <= a.row_begin) return;
  if (a.w.bf16 != nullptr) {
    Run<Enc::kBf16>(a);
  } else if (!a.w.planes()) {  // F32, FP8 or MXFP4 weights
    Bf16GemmAvx512(a);
  } else {
    Run<Enc::kPlanes>(a);
  }
}

}  // namespace zipmoe::kernels
