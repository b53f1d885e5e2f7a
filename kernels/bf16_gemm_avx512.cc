// Bf16Gemm's AVX-512 variant (kernels/bf16_gemm.h). Compiled with -mavx512f -mavx512bw -mfma
// (kernels/CMakeLists.txt); called only after CPUID reports AVX-512 F/BW.
// One 512-bit register holds the 16 lanes; tiles of 4 rows x 4 tokens keep 16 accumulators,
// 4 widened weight vectors and one activation vector in the 32 zmm registers. Decode (one token)
// streams one row at a time (kGemvRows 1): with the next row prefetched that is two streams per
// thread, which the memory system keeps busier than 4 rows + 4 prefetched ones (13 % faster decode on
// a 2-core Zen 5, AVX2 the same; issue 35, docs/architecture.md "CPU kernels").
#include <immintrin.h>

#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx512 {
  using Acc = __m512;
  using Vec = __m512;
  static constexpr int kGemvRows = 1;
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 4;

  static Acc Zero() { return _mm512_setzero_ps(); }
  static Vec LoadX(const float* p) { return _mm512_loadu_ps(p); }
  static Vec LoadBf16(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static Vec LoadPlanes(const uint8_t* e, const uint8_t* sm) {
    const __m512i ev = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(e)));
    const __m512i sv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(sv, _mm512_set1_epi32(0x80)), 24);
    const __m512i mant = _mm512_slli_epi32(_mm512_and_si512(sv, _mm512_set1_epi32(0x7f)), 16);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_or_si512(sign, mant), _mm512_slli_epi32(ev, 23)));
  }
  // FP8 E4M3: exponent > 0 by moving the fields into an fp32 and the bias from 7 to 127; exponent 0
  // (subnormal) as m * 2^-9; S.1111.111 NaN; the sign last; then one multiplication by the scale.
  static Vec LoadF8(const uint8_t* p, float scale) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    __m512 v = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23)));
    v = _mm512_mask_mov_ps(v, _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)),
                           _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f)));
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)),
                           _mm512_set1_ps(__builtin_nanf("")));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
    return _mm512_mul_ps(v, _mm512_set1_ps(scale));
  }
  static Acc Fma(Vec w, Vec x, Acc acc) { return _mm512_fmadd_ps(w, x, acc); }
  static float Reduce(Acc acc) {
    const __m256 lo = _mm512_castps512_ps256(acc);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);                                                // j + j+8
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // j + j+4
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                // j + j+2
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                       // 0 + 1
  }
};

}  // namespace

void Bf16GemmAvx512(const GemmArgs& a) { gemm_tile::Gemm<Avx512>(a); }

}  // namespace zipmoe::kernels
