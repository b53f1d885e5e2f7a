// Bf16Gemm's AVX2 variant (kernels/bf16_gemm.h). Compiled with -mavx2 -mfma (kernels/CMakeLists.txt);
// called only after CPUID reports AVX2 and FMA. The 16 lanes are two 256-bit registers (lanes 0-7,
// 8-15); decode streams one row at a time (2 accumulators: fewer streams per thread keep the
// memory system busier, as in the AVX-512 variant), batch tiles of 3 rows x 2 tokens keep 12. Measured on
// a 2-core Zen 5 (fp8_gemm_bench, 8 matrices of 1408 x 2048 BF16, 2 threads, two builds alternated 3 times):
// 3 x 2 took 4.8-5.5 ms at 16 tokens and 19.1-19.9 ms at 64 against 5.8-6.0 and 22.2-23.0 for 2 x 3 (the
// shape before), FP8 (dequantized tiles) the same; 2 x 2, 3 x 3, 4 x 2, 4 x 1, 1 x 4, 5 x 1 and 6 x 1 were
// slower still on one thread. The tile shape changes no bits (each output is one tile's sum). Not yet
// measured on an Intel core, whose shifts share ports with its FMAs.
#include <immintrin.h>

#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

struct Avx2 {
  struct Acc {
    __m256 lo, hi;
  };
  using Vec = Acc;
  static constexpr int kGemvRows = 1;
  static constexpr int kGemvRowsF8 = 2;
  static constexpr int kGemvRowsMxfp4 = 4;
  static constexpr int kGemmRows = 3;
  static constexpr int kGemmTokens = 2;
  static constexpr int kF8DequantMinTokens = 8;  // gemm_tile::Run (measured, see there)
  static constexpr int kMxfp4DequantMinTokens = 4;  // gemm_tile::Run: from 2 token tiles (measured on Zen 2, see there)

  static __m256 Widen(__m128i u16x8) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(u16x8), 16));
  }
  // 8 weights from 8 bytes of each plane.
  static __m256 Planes8(const uint8_t* e, const uint8_t* sm) {
    const __m256i ev = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)));
    const __m256i sv = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm)));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(sv, _mm256_set1_epi32(0x80)), 24);
    const __m256i mant = _mm256_slli_epi32(_mm256_and_si256(sv, _mm256_set1_epi32(0x7f)), 16);
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_or_si256(sign, mant), _mm256_slli_epi32(ev, 23)));
  }

  // 8 FP8 E4M3 weights from 8 bytes as the E4M3 value / 2^120 (as Avx512::Shifted: sign-extended,
  // shifted left by 20, masked; exact, subnormals read while MXCSR.DAZ is clear). NaN codes and scales
  // >= 2^8 are left to gemm_tile::F8Checked, row tiles with subnormal codes to LoadF8Subnormal (F8TileScan).
  static constexpr bool kF8Scan = true;
  static constexpr bool kF8SubnormalLoads = true;
  static __m256 F8x8(const uint8_t* p) {
    const __m256i b = _mm256_slli_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))), 20);
    return _mm256_castsi256_ps(_mm256_and_si256(b, _mm256_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  // As Avx512::F8TileScan (and the subnormal loads' reasons there).
  static gemm_tile::F8Tile F8TileScan(const GemmArgs& a, int64_t r, int rows) {
    const uint8_t* p = a.w.f8 + r * a.w.cols;
    const int64_t n = rows * a.w.cols;
    const __m256i high = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi8(static_cast<char>(0xff));
    const __m256i exp = _mm256_set1_epi8(0x78), mant = _mm256_set1_epi8(0x07), zero = _mm256_setzero_si256();
    __m256i nan = zero;
    int64_t subnormals = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
      nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(_mm256_or_si256(v, high), ones));
      const __m256i sub = _mm256_andnot_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mant), zero),
                                              _mm256_cmpeq_epi8(_mm256_and_si256(v, exp), zero));
      const unsigned bits = static_cast<unsigned>(_mm256_movemask_epi8(sub));
      if (bits != 0) subnormals += __builtin_popcount(bits);  // rare: no count in the common case
    }
    return gemm_tile::F8TileVerdict<Avx2>(a, r, rows, p, i, n, _mm256_movemask_epi8(nan) != 0, subnormals);
  }

  // MXFP4: the 8 E2M1 magnitudes times the block's scale (exact products, or the overflow's inf), looked
  // up with vpermps by the nibbles' low 3 bits m; the nibble shifted left by 28 then puts its sign s at
  // bit 31 and m at bits 28..30, and is xored in. The table's entry m holds its value ^ (m << 28), so
  // the xor leaves |value| with the sign s: -(|v| * scale) is (-|v|) * scale bit for bit. The 4 bytes of
  // 8 nibbles are broadcast to every lane (a load, no shuffle) and lane j is shifted right by 4j, so one
  // vpermps is the only shuffle per 8 weights.
  using Fp4Table = __m256;
  static Fp4Table MakeFp4Table(float scale) {
    const __m256i code_bits = _mm256_setr_epi32(0, 1 << 28, 2 << 28, 3 << 28, 4 << 28, 5 << 28, 6 << 28, 7 << 28);
    return _mm256_xor_ps(_mm256_mul_ps(_mm256_loadu_ps(gemm_tile::kFp4Values), _mm256_set1_ps(scale)),
                         _mm256_castsi256_ps(code_bits));
  }
  static __m256 Mxfp4x8(const uint8_t* p, __m256 table) {
    int32_t word;
    __builtin_memcpy(&word, p, sizeof(word));
    const __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32(word), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(table, idx), _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  }
  static Vec LoadMxfp4(const uint8_t* p, __m256 table) { return {Mxfp4x8(p, table), Mxfp4x8(p + 4, table)}; }

  static void Store(float* p, const Vec& v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
  }
  static Acc Zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec LoadF8(const uint8_t* p, float scale) {
    const __m256 s = _mm256_set1_ps(scale * 0x1p120f);
    return {_mm256_mul_ps(F8x8(p), s), _mm256_mul_ps(F8x8(p + 8), s)};
  }
  static void LoadF8x2(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    *w0 = LoadF8(p, scale);
    *w1 = LoadF8(p + 16, scale);
  }
  // The subnormal loads (as Avx512's): through IEEE half, F16C's vcvtph2ps, times scale 2^8.
  static __m256 HalfRoute(const uint8_t* p) {
    const __m128i b = _mm_cvtepi8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(static_cast<short>(0xbf80))));
  }
  static Vec LoadF8Subnormal(const uint8_t* p, float scale) {
    const __m256 s = _mm256_set1_ps(scale * 0x1p8f);
    return {_mm256_mul_ps(HalfRoute(p), s), _mm256_mul_ps(HalfRoute(p + 8), s)};
  }
  static void LoadF8x2Subnormal(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    *w0 = LoadF8Subnormal(p, scale);
    *w1 = LoadF8Subnormal(p + 16, scale);
  }
  static Vec LoadX(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec LoadBf16(const uint16_t* p) {
    return {Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static Vec LoadPlanes(const uint8_t* e, const uint8_t* sm) { return {Planes8(e, sm), Planes8(e + 8, sm + 8)}; }
  static Acc Fma(const Vec& w, const Vec& x, const Acc& acc) {
    return {_mm256_fmadd_ps(w.lo, x.lo, acc.lo), _mm256_fmadd_ps(w.hi, x.hi, acc.hi)};
  }
  static Acc Add(const Acc& a, const Acc& b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
  static float Reduce(const Acc& acc) {
    const __m256 s8 = _mm256_add_ps(acc.lo, acc.hi);                                        // j + j+8
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // j + j+4
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                                // j + j+2
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));                       // 0 + 1
  }
};

}  // namespace

void Bf16GemmAvx2(const GemmArgs& a) { gemm_tile::Gemm<Avx2>(a); }

}  // namespace zipmoe::kernels
