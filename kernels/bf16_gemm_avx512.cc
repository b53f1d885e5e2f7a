// Bf16Gemm's AVX-512 variant (kernels/bf16_gemm.h). Compiled with -mavx512f -mavx512bw -mavx512vl -mfma
// (kernels/CMakeLists.txt); called only after CPUID reports AVX-512 F/BW/VL.
// One 512-bit register holds the 16 lanes; tiles of 4 rows x 4 tokens keep one chain's 16 accumulators
// (the other chain's wait in L1 while a 256-column group runs: gemm_tile::kChainGroup), 4 widened weight
// vectors and one activation vector in the 32 zmm registers. Decode (one token)
// streams one row at a time (kGemvRows 1), which the memory system keeps busier than 4 rows at once
// (13 % faster decode on a 2-core Zen 5, AVX2 the same), each line asked for into L2 3 KiB ahead
// (gemm_tile::PrefetchAhead; issue 35, docs/architecture.md "CPU kernels").
#include <immintrin.h>

#include "kernels/bf16_gemm_f8_nan_x86.h"
#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

// What MakeFp4Table gives for every E8M0 scale code (Avx512::LoadMxfp4Block reads it instead of multiplying):
// gemm_tile::Mxfp4Product for each nibble, and for code 255 (the NaN scale) the scale's quiet NaN, which x86
// returns for a NaN operand whatever the other's sign. 16 KiB; a constant, so nothing runs at load on a CPU
// without AVX-512 (this unit's code runs only after CPUID).
struct Mxfp4Tables {
  alignas(64) float value[256][16];
};
constexpr Mxfp4Tables MakeMxfp4Tables() {
  Mxfp4Tables t{};
  for (int code = 0; code < 256; ++code) {
    for (int n = 0; n < 16; ++n) t.value[code][n] = code == 255 ? gemm_tile::kE8M0.value[255] : gemm_tile::Mxfp4Product(code, n);
  }
  return t;
}
constexpr Mxfp4Tables kMxfp4Tables = MakeMxfp4Tables();

// F8NanCheckYmm: F8TileCheck::kFused's NaN check (gemm_tile::F8Fused), the default on AMD cores, in
// 256-bit registers as AVX2's (the tile's codes are read 32 at a time).
struct Avx512 : F8NanCheckYmm {
  using Acc = __m512;
  using Vec = __m512;
  static constexpr int kGemvRows = 1;
  static constexpr int kGemvRowsF8 = 2;
  static constexpr int kGemvRowsMxfp4 = 4;
  static constexpr int kGemmRows = 4;
  static constexpr int kGemmTokens = 4;
  static constexpr int kF8DequantMinTokens = 8;  // gemm_tile::Run (measured, see there)
  static constexpr int kF8FusedMaxTokens = 3;  // gemm_tile::F8FusedMaxTokens (measured, see there)
  static constexpr int kMxfp4DequantMinTokens = 1 << 30;  // gemm_tile::Run: never, the tile decodes (measured, see there)

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
  // FP8 E4M3 by moving bits: the byte sign-extended to 32 bits and shifted left by 20 has the sign at
  // bit 31 and the exponent|mantissa at bits 26..20, so masked it is the float32 whose value is the
  // E4M3 value / 2^120, exactly (E4M3 subnormals become float32 subnormals, read exactly while
  // MXCSR.DAZ is clear: gemm_tile::SubnormalInputs). One multiplication by
  // scale * 2^120 (exact while finite) is then the one rounding of GemmWeights' FP8 formula.
  // 3 operations per 16 weights before the scale, against 7 through IEEE half (the FP8 GEMV's
  // throughput 1.2-1.3x on a Zen 5, issue 40). Two cases this does not cover, S.1111.111 (NaN, which
  // would read as a number) and scales >= 2^8 (the product overflows), are found per row tile by
  // F8TileScan, and such tiles are computed by gemm_tile::F8Checked. Subnormal codes: LoadF8Subnormal.
  static constexpr bool kF8Scan = true;
  static constexpr bool kF8SubnormalLoads = true;
  static __m512 Shifted(__m128i bytes) {
    const __m512i b = _mm512_slli_epi32(_mm512_cvtepi8_epi32(bytes), 20);
    return _mm512_castsi512_ps(_mm512_and_si512(b, _mm512_set1_epi32(static_cast<int>(0x87f00000u))));
  }
  static Vec LoadF8(const uint8_t* p, float scale) {
    return _mm512_mul_ps(Shifted(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), _mm512_set1_ps(scale * 0x1p120f));
  }
  static void LoadF8x2(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    const __m512 s = _mm512_set1_ps(scale * 0x1p120f);
    *w0 = _mm512_mul_ps(Shifted(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), s);
    *w1 = _mm512_mul_ps(Shifted(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))), s);
  }
  // Row tiles with many subnormal codes (exponent 0, mantissa m != 0: the value +-m 2^-9; F8TileScan).
  // Through LoadF8 each is a float32 subnormal input to the multiplication, which Intel cores run through a
  // microcode assist (~130 cycles per vector holding one, measured on an Intel Xeon: FP8 decode 9x BF16's
  // time with every code alike; AMD and Arm cores take them at full speed). These tiles go through IEEE
  // half instead: the code's exponent|mantissa shifted into a half's (exponent bias 15, so the half is the
  // value / 2^8, E4M3 subnormals half subnormals), widened exactly by vcvtph2ps (no assist), times
  // scale 2^8: the same one rounding of GemmWeights' formula (scale 2^8 exact; |scale| < 2^-100 went to
  // F8Checked). One operation more per 16 weights than LoadF8 (~2 cycles per vector).
  static __m512 HalfRoute(__m128i bytes) {
    const __m256i b = _mm256_cvtepi8_epi16(bytes);
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<short>(0xbf80)));
    return _mm512_cvtph_ps(h);
  }
  // The 16 E4M3 codes at p as BF16 values (gemm_tile::HasF8Bf16; FP8 batches through BF16 row blocks):
  // HalfRoute's float32 times 2^8 is the value, exactly, with at most 4 significant bits, so its high 16
  // bits are the BF16; NaN codes (S.1111.111, which the half reads as a number) become the BF16 quiet NaN
  // with their sign. As Avx2::StoreF8Bf16, with vpmovdw for the narrowing and a mask blend.
  static void StoreF8Bf16(const uint8_t* p, uint16_t* out) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i b = _mm256_cvtepi8_epi16(codes);  // sign-extended: the sign at bit 15
    const __m512 f = _mm512_mul_ps(HalfRoute(codes), _mm512_set1_ps(0x1p8f));
    const __m256i bf = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(f), 16));
    const __mmask16 nan = _mm256_cmpeq_epi16_mask(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
    const __m256i nan_bits = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                             _mm256_set1_epi16(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_mask_blend_epi16(nan, bf, nan_bits));
  }
  // 16 BF16s times scale (one float32 rounding each): Tile's weights of Encoding::kF8Bf16.
  static Vec LoadBf16Scaled(const uint16_t* p, float scale) { return _mm512_mul_ps(LoadBf16(p), _mm512_set1_ps(scale)); }
  static Vec LoadF8Subnormal(const uint8_t* p, float scale) {
    return _mm512_mul_ps(HalfRoute(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), _mm512_set1_ps(scale * 0x1p8f));
  }
  static void LoadF8x2Subnormal(const uint8_t* p, float scale, Vec* w0, Vec* w1) {
    const __m512 s = _mm512_set1_ps(scale * 0x1p8f);
    *w0 = _mm512_mul_ps(HalfRoute(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), s);
    *w1 = _mm512_mul_ps(HalfRoute(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))), s);
  }
  // kChecked when rows [r, r + rows) hold a NaN code or a scale that LoadF8 cannot take (|s| >= 2^8, inf,
  // NaN, or < 2^-100), else kSubnormals when more than 1 in gemm_tile::kF8SubnormalShare codes is subnormal,
  // else kFast.
  static gemm_tile::F8Tile F8TileScan(const GemmArgs& a, int64_t r, int rows) {
    const uint8_t* p = a.w.f8 + r * a.w.cols;
    const int64_t n = rows * a.w.cols;
    const __m512i high = _mm512_set1_epi8(static_cast<char>(0x80)), ones = _mm512_set1_epi8(static_cast<char>(0xff));
    const __m512i exp = _mm512_set1_epi8(0x78), mant = _mm512_set1_epi8(0x07);
    __mmask64 nan = 0;
    int64_t subnormals = 0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      const __m512i v = _mm512_loadu_si512(p + i);
      nan |= _mm512_cmpeq_epi8_mask(_mm512_or_si512(v, high), ones);
      const __mmask64 sub = _mm512_mask_test_epi8_mask(_mm512_testn_epi8_mask(v, exp), v, mant);
      if (sub != 0) subnormals += __builtin_popcountll(sub);  // rare: no count in the common case
    }
    return gemm_tile::F8TileVerdict<Avx512>(a, r, rows, p, i, n, nan != 0, subnormals);
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
  // MXFP4 a whole 32-column block at a time, for TileMxfp4 (gemm_tile::HasMxfp4Block): the same table and
  // lookup as LoadMxfp4, without its byte shuffle. Each 8-byte half of the block (16 nibbles, column n at bits
  // 4n .. 4n+3) is broadcast to every 64-bit lane (a load) and one variable dword shift puts a nibble in the
  // low 4 bits of each lane: dword 2m holds bits 0-31, so it takes column m; dword 2m + 1 holds bits 32-63,
  // so it takes column 8 + m (kMxfp4Lanes); vpermps ignores the bits above. One shift (port 0) and one
  // vpermps (port 5) per 16 weights against LoadMxfp4's vpshufb + shift + vpermps (two on port 5). Both
  // halves take the same lane order, so lane p sums column kMxfp4Lanes[p] of the first half, then the same
  // column of the second, as LoadMxfp4's lane does: TileMxfp4 reads x permuted into that order
  // (PermuteMxfp4X) and puts each accumulator back (CanonicalMxfp4Lanes), so the bits are LoadMxfp4's. The
  // table of each scale code is read from kMxfp4Tables (vpermps's memory operand) instead of multiplied per
  // row and block. Measured on the Intel Xeon VM (mxfp4_gemm_bench --threads 2 --rounds 5 --matrices 400
  // --tokens 1 --shapes 2880x1440, three alternated runs, best ms): LoadMxfp4 49.8-50.5, this block decode
  // with the multiplication 46.2-47.0, with the tables 45.0-45.7; vpmultishiftqb (AVX512_VBMI) in
  // LoadMxfp4's place of its vpshufb and shift 44.5-46.0, not kept (a second variant for ~1 %).
  static constexpr bool kMxfp4Block = true;
  static constexpr int64_t kMxfp4BlockMaxTokens = 2;  // decode and pairs (gemm_tile::HasMxfp4Block: measured)
  using Mxfp4BlockTable = const float*;
  static Mxfp4BlockTable MakeMxfp4BlockTable(uint32_t code) { return kMxfp4Tables.value[code & 0xffu]; }
  static void LoadMxfp4Block(const uint8_t* p, Mxfp4BlockTable table, Vec* half0, Vec* half1) {
    const __m512i shift = _mm512_set_epi32(28, 28, 24, 24, 20, 20, 16, 16, 12, 12, 8, 8, 4, 4, 0, 0);
    long long lo, hi;
    __builtin_memcpy(&lo, p, sizeof(lo));
    __builtin_memcpy(&hi, p + 8, sizeof(hi));
    *half0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(lo), shift), _mm512_load_ps(table));
    *half1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(_mm512_set1_epi64(hi), shift), _mm512_load_ps(table));
  }
  // 16 activations from x (canonical order) to out (lane order kMxfp4Lanes: 0 8 1 9 2 10 ... 7 15).
  static void PermuteMxfp4X(const float* x, float* out) {
    const __m512i order = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, _mm512_loadu_ps(x)));
  }
  // The inverse: lane 2m back to m, lane 2m + 1 to 8 + m.
  static Acc CanonicalMxfp4Lanes(Acc acc) {
    const __m512i inverse = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutexvar_ps(inverse, acc);
  }
  static Acc Fma(Vec w, Vec x, Acc acc) { return _mm512_fmadd_ps(w, x, acc); }
  static Acc Add(Acc a, Acc b) { return _mm512_add_ps(a, b); }
  // out[i] = Reduce(a[i]) for 16 accumulators, bit for bit (the same additions of the same pairs, 15
  // vector additions instead of 64 scalar-width ones): lanes j + j+8 of two accumulators per register,
  // then j + j+4 of four, then j + j+2 and 0 + 1 of eight, the results transposed back into order. A 4 x 4
  // tile's 16 reductions were ~10 % of its instructions at 1024 columns and half of an attention score
  // tile's at 128 (issue 35).
  static void Reduce16(const Acc (&a)[16], float (&out)[16]) {
    __m512 s8[8], s4[4];
    for (int p = 0; p < 8; ++p)  // [a(2p) j + j+8 | a(2p+1) j + j+8]
      s8[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                            _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
    for (int q = 0; q < 4; ++q)  // 128-bit lane m: a(4q + m) j + j+4
      s4[q] = _mm512_add_ps(_mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], 0x88),
                            _mm512_shuffle_f32x4(s8[2 * q], s8[2 * q + 1], 0xDD));
    // 128-bit lane k: [a(k) j + j+2 (2 lanes), a(4 + k) (2 lanes)], then a(8 + k), a(12 + k)
    const __m512 s2a = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s4[0]), _mm512_castps_pd(s4[1]))),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s4[0]), _mm512_castps_pd(s4[1]))));
    const __m512 s2b = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s4[2]), _mm512_castps_pd(s4[3]))),
                                     _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s4[2]), _mm512_castps_pd(s4[3]))));
    // lane 4k + m: a(4m + k)'s lane 0 + lane 1
    const __m512 s1 = _mm512_add_ps(_mm512_shuffle_ps(s2a, s2b, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(s2a, s2b, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, s1));
  }
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
