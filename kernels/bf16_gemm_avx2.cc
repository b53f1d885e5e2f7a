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

#include "kernels/bf16_gemm_f8_nan_x86.h"
#include "kernels/bf16_gemm_isa.h"
#include "kernels/bf16_gemm_tile.h"

namespace zipmoe::kernels {
namespace {

// The BF16 of each MXFP4 weight by E8M0 scale code (Avx2::LoadMxfp4Block): bytes[code][n] the low byte,
// bytes[code][16 + n] the high byte of the BF16 of nibble n's value times 2^(code - 127) (code 255: NaN).
struct Mxfp4Bf16Table {
  alignas(64) uint8_t bytes[256][32];
};
// The float32 bits of what MakeFp4Table's multiplication gives: the product (exact, as the double one
// rounded to float), inf past FLT_MAX, and for the NaN scale the scale's quiet NaN (x86 returns the NaN
// operand); then LoadMxfp4's sign, -(|v| * scale).
constexpr uint32_t Mxfp4ProductBits(int code, int nibble) {
  const float scale = gemm_tile::kE8M0.value[code];
  const uint32_t magnitude = code == 255 ? __builtin_bit_cast(uint32_t, scale) | 0x00400000u
                                         : __builtin_bit_cast(uint32_t, gemm_tile::Mxfp4Product(code, nibble & 7));
  return magnitude ^ (nibble >= 8 ? 0x80000000u : 0u);
}
constexpr Mxfp4Bf16Table MakeMxfp4Bf16Table() {
  Mxfp4Bf16Table t{};
  for (int code = 0; code < 256; ++code) {
    for (int n = 0; n < 16; ++n) {
      const uint32_t bits = Mxfp4ProductBits(code, n);
      t.bytes[code][n] = static_cast<uint8_t>(bits >> 16);
      t.bytes[code][16 + n] = static_cast<uint8_t>(bits >> 24);
    }
  }
  return t;
}
constexpr bool Mxfp4ProductsAreBf16() {
  for (int code = 0; code < 256; ++code) {
    for (int n = 0; n < 16; ++n) {
      if ((Mxfp4ProductBits(code, n) & 0xffffu) != 0) return false;
    }
  }
  return true;
}
static_assert(Mxfp4ProductsAreBf16(), "every E2M1 value times every E8M0 scale is an exact BF16");
constexpr Mxfp4Bf16Table kMxfp4Bf16 = MakeMxfp4Bf16Table();

// The column (of the 16 of a half block) that each of the 16 positions of a Vec (lo: 0-7, hi: 8-15) holds
// after LoadMxfp4Block's unpacks and shifts, the inverse permutation (the position of each column), and
// what PermuteMxfp4X / CanonicalMxfp4Lanes do with them: position p of a Vec takes element
// order[p] of the 16, as a vpermps of each register by order[p] % 8 blended by order[p] >= 8.
struct Lanes16 {
  int32_t index[16];
};
constexpr Lanes16 kMxfp4Lanes = {{0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15}};
constexpr Lanes16 InverseLanes(const Lanes16& order) {
  Lanes16 inverse{};
  for (int p = 0; p < 16; ++p) inverse.index[order.index[p]] = p;
  return inverse;
}
constexpr Lanes16 kMxfp4CanonicalLanes = InverseLanes(kMxfp4Lanes);
// The vpermps indices (order[p] % 8) of the 16 positions, and the blend masks of the two registers (bit q
// of mask half h: position 8h + q takes its element from the hi register of the source).
constexpr Lanes16 Within8(const Lanes16& order) {
  Lanes16 within{};
  for (int p = 0; p < 16; ++p) within.index[p] = order.index[p] % 8;
  return within;
}
constexpr int FromHi(const Lanes16& order, int half) {
  int mask = 0;
  for (int q = 0; q < 8; ++q) mask |= (order.index[8 * half + q] >= 8 ? 1 : 0) << q;
  return mask;
}
constexpr Lanes16 kMxfp4LanesWithin8 = Within8(kMxfp4Lanes);
constexpr Lanes16 kMxfp4CanonicalWithin8 = Within8(kMxfp4CanonicalLanes);

// F8NanCheckYmm: F8TileCheck::kFused's NaN check (gemm_tile::F8Fused), the default on AMD cores.
struct Avx2 : F8NanCheckYmm {
  struct Acc {
    __m256 lo, hi;
  };
  using Vec = Acc;
  static constexpr int kGemvRows = 1;
  static constexpr int kGemvRowsF8 = 2;
  static constexpr int kGemvRowsMxfp4 = 2;  // measured: see LoadMxfp4Block
  static constexpr int kGemmRows = 3;
  static constexpr int kGemmTokens = 2;
  static constexpr int kF8DequantMinTokens = 8;  // gemm_tile::Run (measured, see there)
  static constexpr int kF8FewTokens = 4;  // gemm_tile::F8FewTokens (measured, see there)
  static constexpr int kMxfp4DequantMinTokens = 6;  // gemm_tile::Run (measured on Zen 2, see there)

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

  // MXFP4 a whole 32-column block at a time, for TileMxfp4 (gemm_tile::HasMxfp4Block): every E2M1 value
  // times every E8M0 scale is a float32 whose low 16 bits are zero (at most 2 significant bits, exponent
  // >= -128; the overflow is inf, the NaN scale 0x7fc00000), i.e. an exact BF16. kMxfp4Bf16 holds those
  // BF16s per scale code as two 16-byte vpshufb tables (low bytes, high bytes; entry n = nibble n, the
  // negative half -(|v| * scale) by its sign bit, as LoadMxfp4's xor), so a block's 32 weights take one
  // 16-byte broadcast, a variable shift (lane 0: the low nibbles, lane 1: the high ones), an and, two
  // vpshufb, two byte unpacks (the 16-bit BF16s), then per register of 16 BF16s a shift left by 16 (the
  // even words as float32) and an and (the odd ones): 10 operations against LoadMxfp4's 16 (4 per 8
  // weights), 6 of them on the shuffle/shift ports (4 on Intel's port 5) where four word unpacks took 8.
  // The weights come out in lane order kMxfp4Lanes (position p of a Vec holds column
  // kMxfp4Lanes.index[p] of its 16), which TileMxfp4 undoes by permuting x once (PermuteMxfp4X) and each
  // accumulator at the end (CanonicalMxfp4Lanes): every column's products are summed by one lane in the
  // same order as LoadMxfp4's, so the bits are its bits (tests/kernels/mxfp4_gemm_test.cc compares them).
  // Measured on the 2-core Zen 3 VM (2026-12-07; a driver calling Bf16Gemm as mxfp4_gemm_bench does, 8
  // matrices of 5760 x 2880 and 16 of 2880 x 2880, one token, 2 threads, 40 rounds with the variants
  // alternated round by round, min / p25 ms): four word unpacks in 4-row tiles (the code before) 5.23 / 5.62
  // and 5.21 / 5.52; shifts in 2-row tiles 4.54 / 4.96 and 4.57 / 4.90 (13 % less); shifts in 3-row tiles
  // 4.69 / 5.10, in 4-row 4.87 / 5.30; unpacks in 2-row 5.00 / 5.28 (4-row tiles of two chains keep 16
  // accumulator registers: the compiler spilled). gpt_oss mini, `executor_bench --threads 2 --decode-tokens
  // 32 --reps 2 --no-mmap`, builds alternated 3x: TPOT 0.0819 / 0.0721 / 0.0819 -> 0.0771 / 0.0709 / 0.0723 s.
  // (On the 2-core Zen 5 VM, 2026-12-04, the shifts in 4-row tiles under ZIPMOE_GEMM_ISA=avx2 had been
  // slower; that CPU runs the AVX-512 variant by default.)
  // The two accumulator chains' block groups side by side (gemm_tile::Mxfp4InterleavedChains; same bits):
  // each lane's two FMAs a block wait on each other, and a 2-row decode tile has only 4 such lanes' registers.
  // The same driver, 2026-12-07, a slower hour of the VM (p25 ms): 8 matrices of 5760 x 2880, one token,
  // 8.49 / 7.99 -> 7.38 / 6.96 (13 % less, two runs of 40 rounds); gpt_oss mini's shapes (96 matrices) 2880 x
  // 1440 29.1 -> 26.8, 1440 x 1440 13.5 -> 12.1; 2 tokens within the noise. In the model (gpt_oss mini TPOT,
  // builds alternated 3x in that hour) within its noise.
  static constexpr bool kMxfp4InterleavedChains = true;
  static constexpr bool kMxfp4Block = true;
  static constexpr int64_t kMxfp4BlockMaxTokens = INT64_MAX;  // every call that decodes in the tile (kMxfp4DequantMinTokens)

  using Mxfp4BlockTable = const uint8_t*;
  static Mxfp4BlockTable MakeMxfp4BlockTable(uint32_t code) { return kMxfp4Bf16.bytes[code & 0xffu]; }
  static void LoadMxfp4Block(const uint8_t* p, Mxfp4BlockTable table, Vec* half0, Vec* half1) {
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
    const __m256i hi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table + 16)));
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i nibbles = _mm256_and_si256(_mm256_srlv_epi32(v, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)),
                                             _mm256_set1_epi8(0x0f));
    const __m256i low_bytes = _mm256_shuffle_epi8(lo, nibbles), high_bytes = _mm256_shuffle_epi8(hi, nibbles);
    const __m256i w0 = _mm256_unpacklo_epi8(low_bytes, high_bytes);  // BF16s of bytes 0-7: lane 0 low nibbles, lane 1 high
    const __m256i w1 = _mm256_unpackhi_epi8(low_bytes, high_bytes);  // bytes 8-15
    const __m256i odd = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    half0->lo = _mm256_castsi256_ps(_mm256_slli_epi32(w0, 16));  // columns 0 4 8 12 1 5 9 13 (kMxfp4Lanes)
    half0->hi = _mm256_castsi256_ps(_mm256_and_si256(w0, odd));   // columns 2 6 10 14 3 7 11 15
    half1->lo = _mm256_castsi256_ps(_mm256_slli_epi32(w1, 16));  // the same + 16
    half1->hi = _mm256_castsi256_ps(_mm256_and_si256(w1, odd));
  }
  // The block at p as 32 BF16s in column order (gemm_tile::HasMxfp4Bf16): the same two vpshufb tables,
  // indexed by the nibbles in column order (low and high nibbles interleaved), then the low and high
  // bytes interleaved into words. The bytes are taken 0-3, 8-11, 4-7, 12-15 first, so that the 128-bit lanes
  // come out as columns 0-7 | 8-15 and 16-23 | 24-31, stored as they are (no cross-lane permute).
  static void StoreMxfp4Bf16(const uint8_t* p, uint8_t scale_code, uint16_t* out) {
    const uint8_t* table = kMxfp4Bf16.bytes[scale_code];
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table)));
    const __m256i hi = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(table + 16)));
    const __m128i order = _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), order);
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i low = _mm_and_si128(v, mask), high = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
    // columns 0-7, 16-23 | 8-15, 24-31
    const __m256i nibbles = _mm256_setr_m128i(_mm_unpacklo_epi8(low, high), _mm_unpackhi_epi8(low, high));
    const __m256i low_bytes = _mm256_shuffle_epi8(lo, nibbles), high_bytes = _mm256_shuffle_epi8(hi, nibbles);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_unpacklo_epi8(low_bytes, high_bytes));  // 0-15
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), _mm256_unpackhi_epi8(low_bytes, high_bytes));  // 16-31
  }
  // The 16 elements of v in the order `order` (Lanes16): position p takes element order.index[p].
  template <const Lanes16& kWithin8, int kMaskLo, int kMaskHi>
  static Vec Permute16(const Vec& v) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWithin8.index));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kWithin8.index + 8));
    return {_mm256_blend_ps(_mm256_permutevar8x32_ps(v.lo, lo), _mm256_permutevar8x32_ps(v.hi, lo), kMaskLo),
            _mm256_blend_ps(_mm256_permutevar8x32_ps(v.lo, hi), _mm256_permutevar8x32_ps(v.hi, hi), kMaskHi)};
  }
  // 16 activations from x (canonical order) to out (lane order kMxfp4Lanes).
  static void PermuteMxfp4X(const float* x, float* out) {
    Store(out, Permute16<kMxfp4LanesWithin8, FromHi(kMxfp4Lanes, 0), FromHi(kMxfp4Lanes, 1)>(LoadX(x)));
  }
  static Acc CanonicalMxfp4Lanes(const Acc& acc) {
    return Permute16<kMxfp4CanonicalWithin8, FromHi(kMxfp4CanonicalLanes, 0), FromHi(kMxfp4CanonicalLanes, 1)>(acc);
  }

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
  // FP8 batches through BF16 row blocks (gemm_tile::RowsF8ThroughBf16): 16 BF16 E4M3 values times their scale.
  static Vec LoadBf16Scaled(const uint16_t* p, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    return {_mm256_mul_ps(Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), s),
            _mm256_mul_ps(Widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8))), s)};
  }
  // The 16 E4M3 codes at p as BF16 values (gemm_tile::HasF8Bf16): through IEEE half as LoadF8Subnormal (the
  // half is the value / 2^8, exactly, subnormal codes included), widened and times 2^8 (exact), whose
  // float32 has at most 4 significant bits, so its high 16 bits are the BF16; NaN codes (S.1111.111, which
  // the half would read as a number) then become the BF16 quiet NaN with their sign.
  static void StoreF8Bf16(const uint8_t* p, uint16_t* out) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i b = _mm256_cvtepi8_epi16(codes);  // sign-extended: the sign at bit 15
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(b, 7), _mm256_set1_epi16(static_cast<short>(0xbf80)));
    const __m256 k256 = _mm256_set1_ps(0x1p8f);
    const __m256 f0 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), k256);
    const __m256 f1 = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), k256);
    const __m256i u0 = _mm256_srli_epi32(_mm256_castps_si256(f0), 16);
    const __m256i u1 = _mm256_srli_epi32(_mm256_castps_si256(f1), 16);
    // packus interleaves the 128-bit lanes (u0 0-3, u1 0-3, u0 4-7, u1 4-7): qwords 0, 2, 1, 3 restore the order.
    const __m256i bf = _mm256_permute4x64_epi64(_mm256_packus_epi32(u0, u1), 0xd8);
    const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), _mm256_set1_epi16(0x7f));
    const __m256i nan_bits = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi16(static_cast<short>(0x8000))),
                                             _mm256_set1_epi16(0x7fc0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_blendv_epi8(bf, nan_bits, nan));
  }
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
