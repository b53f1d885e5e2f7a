// Bf16Gemm's AVX-512 variant (kernels/bf16_gemm.h). Compiled with -mavx512f -mavx512bw -mavx512vl -mfma
// (kernels/CMakeLists.txt); called only after CPUID reports AVX-512 F/BW/VL.
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
  static constexpr int kGemvRowsF8 = 2;
  static constexpr int kGemvRowsMxfp4 = 4;
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 4;

  static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
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
  // FP8 E4M3 through IEEE half: the byte's fields moved into a binary16 (sign to bit 15, exponent
  // and mantissa to bits 7..13) are the E4M3 value / 2^8 exactly, subnormals included, which
  // vcvtph2ps widens exactly; S.1111.111 (NaN) would read as 1.875 there and becomes a half NaN
  // first. Then one multiplication by scale * 2^8 (exact while finite, so the product is the one
  // rounding of GemmWeights' FP8 formula), or by 2^8 and the scale when that overflows.
  static __m512i HalfBits(__m512i b16) {
    const __m512i x7 = _mm512_slli_epi16(b16, 7);  // sign at bit 14, exponent|mantissa at 7..13
    const __m512i h = _mm512_add_epi16(x7, _mm512_and_si512(x7, _mm512_set1_epi16(0x4000)));  // sign to bit 15
    const __m512i mag_mask = _mm512_set1_epi16(0x3f80);
    const __mmask32 nan = _mm512_cmpeq_epi16_mask(_mm512_and_si512(h, mag_mask), mag_mask);
    return _mm512_mask_mov_epi16(h, nan, _mm512_set1_epi16(0x7e00));
  }
  static __m512 Scaled(__m256i half, float scale) {
    const __m512 v = _mm512_cvtph_ps(half);
    const float s256 = scale * 256.0f;
    if (__builtin_isinf(s256)) return _mm512_mul_ps(_mm512_mul_ps(v, _mm512_set1_ps(256.0f)), _mm512_set1_ps(scale));
    return _mm512_mul_ps(v, _mm512_set1_ps(s256));
  }
  static Vec LoadF8(const uint8_t* p, float scale) {
    const __m512i b = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    return Scaled(_mm512_castsi512_si256(HalfBits(b)), scale);
  }
  static void LoadF8x2(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    const __m512i h = HalfBits(_mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
    *w0 = Scaled(_mm512_castsi512_si256(h), scale);
    *w1 = Scaled(_mm512_extracti64x4_epi64(h, 1), scale);
  }
  // MXFP4: the 16 signed E2M1 values times the block's scale (exact products, or the overflow's inf),
  // looked up by nibble with one vpermps (it reads index bits 3..0 only). The 8 bytes of 16 nibbles are
  // broadcast to every 128-bit lane (a load, no shuffle); an in-lane vpshufb gives lane j the byte
  // holding column j, and lane j is shifted right by 4 (j % 2) for its nibble.
  using Fp4Table = __m512;
  static Fp4Table MakeFp4Table(float scale) {
    return _mm512_mul_ps(_mm512_loadu_ps(gemm_tile::kFp4Values), _mm512_set1_ps(scale));
  }
  static Vec LoadMxfp4(const uint8_t* p, Fp4Table table) {
    long long bytes;
    __builtin_memcpy(&bytes, p, sizeof(bytes));
    // Lane j (dword j % 4 of 128-bit lane j / 4) takes byte j / 2 in every one of its 4 bytes.
    const __m512i pick = _mm512_set_epi32(0x07070707, 0x07070707, 0x06060606, 0x06060606, 0x05050505, 0x05050505,
                                          0x04040404, 0x04040404, 0x03030303, 0x03030303, 0x02020202, 0x02020202,
                                          0x01010101, 0x01010101, 0x00000000, 0x00000000);
    const __m512i shift = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    const __m512i idx = _mm512_srlv_epi32(_mm512_shuffle_epi8(_mm512_set1_epi64(bytes), pick), shift);
    return _mm512_permutexvar_ps(idx, table);
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
