// Internal to kernels/: the register-tiled loops of Bf16Gemm (kernels/bf16_gemm.h), written once
// over a 16-lane vector type V that each ISA's translation unit supplies:
//   V::Acc, V::Vec           16 fp32 lanes (one or several hardware registers)
//   V::Zero()                all-zero accumulator
//   V::LoadX(const float*)   16 activations
//   V::LoadBf16(const uint16_t*)                 16 BF16 weights widened to fp32 (exact)
//   V::LoadPlanes(const uint8_t* e, const uint8_t* sm)   16 weights from the two planes (exact)
//   V::LoadX also loads 16 float32 weights (GemmWeights::f32)
//   V::LoadF8(const uint8_t* p, float scale)    16 FP8 E4M3 weights decoded exactly, times `scale`
//                            (one fp32 multiplication each: GemmWeights' FP8 formula)
//   V::LoadF8x2(p, scale, &w0, &w1)             32 of them (columns k..k+15, k+16..k+31), one block
//   V::kF8Scan, V::F8TileScan(a, r, rows)        when kF8Scan, LoadF8 covers finite codes and scales
//                            < 2^8 only, reading E4M3 subnormals as float32 subnormals: row tiles for
//                            which F8TileScan says F8Tile::kChecked (a NaN code, a larger scale) are
//                            computed by F8Checked<V> below, which covers all
//   V::kF8SubnormalLoads, V::LoadF8Subnormal, V::LoadF8x2Subnormal   when kF8SubnormalLoads, row tiles for
//                            which F8TileScan says F8Tile::kSubnormals (a subnormal code) are computed by
//                            F8Subnormal<V>, whose loads keep float32 subnormals out of the multiplication
//                            (the same bits; x86 cores take a microcode assist on each such input)
//   V::F8NanAcc, F8NanZero(), F8NanMax16(acc, p), F8NanMax32(acc, p), F8NanFound(acc)   (optional) the
//                            fused NaN check of F8TileCheck::kFused (bf16_gemm.h): a running unsigned byte
//                            max of the codes or'ed with 0x80, which is 0xff only where a code is 0x7f or 0xff
//   V::Store(float* p, Vec v)                    16 floats to p (FP8 batches dequantize a tile once)
//   V::Fp4Table, V::MakeFp4Table(float scale)   what LoadMxfp4 needs for one 32-column block of scale `scale`
//                            (the 16 E2M1 values times the scale: one fp32 multiplication each, exact)
//   V::LoadMxfp4(const uint8_t* p, table)       16 MXFP4 weights from 8 bytes (column 2j: low nibble of p[j])
//   V::Fma(w, x, acc)        acc + w * x per lane, one rounding
//   V::Add(a, b)             a + b per lane (the two chains' sum)
//   V::Reduce(acc)           the fixed tree of bf16_gemm.h: lanes j + j+8, then j + j+4, j + j+2, j + j+1
//   kGemvRowsF8              the same for FP8 weights (more rows: FMA latency, not memory, bounds them)
//   kGemvRowsMxfp4           the same for MXFP4 weights
//   kGemvRows                rows per tile when tokens are computed one by one (decode); x86: 1,
//                            measured fastest (issue 35): each row is one stream (PrefetchWeights)
//   kGemmRows, kGemmTokens   rows x tokens per tile for batches and prefill
//   kF8DequantMinTokens      FP8 batches from this many tokens on are dequantized once per row block (Run):
//                            through BF16 row blocks where V has StoreF8Bf16 (HasF8Bf16), else float32 row tiles
//   kF8FewTokens (optional)  FP8 batches of 3 to kF8DequantMinTokens - 1 tokens in one-row tiles of this many
//                            tokens: see F8FewTokens
//   kF8FusedMaxTokens (optional)  the widest tile that takes F8TileCheck::kFused's check: see F8FusedMaxTokens
//   V::StoreF8Bf16(p, out), V::LoadBf16Scaled(p, scale) (optional)   see HasF8Bf16
//   kMxfp4DequantMinTokens   MXFP4 batches likewise (through BF16 row blocks where V has StoreMxfp4Bf16)
//   V::StoreMxfp4Bf16(p, scale_code, out) (optional)   one MXFP4 block as 32 BF16s: see HasMxfp4Bf16
//   kMxfp4Block (optional)   V decodes a whole MXFP4 block into its own lane order: see HasMxfp4Block
// Include only from an ISA translation unit and define V in an anonymous namespace there: every
// instantiation (compiled with that ISA's flags) then has internal linkage and is never picked by
// the linker for a caller on a CPU without the ISA. Uses builtins only, no std:: inline functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/bf16_gemm.h"

namespace zipmoe::kernels::gemm_tile {

// How the weights are stored (GemmWeights). kF8Bf16 is internal to FP8 batches (RowsF8ThroughBf16): w.bf16
// holds the E4M3 values as BF16s (exact), unscaled, and w.f8_scale / block_rows / block_cols their scales;
// a weight is then the BF16 value times its scale, GemmWeights' FP8 formula.
enum class Encoding { kBf16, kF32, kPlanes, kF8, kMxfp4, kF8Bf16 };

// Bytes per weight of an encoding's (first) plane: what the prefetch steps over and what a row block holds.
template <Encoding kEnc>
constexpr int64_t kPlaneBytes = kEnc == Encoding::kF32 ? 4 : kEnc == Encoding::kBf16 || kEnc == Encoding::kF8Bf16 ? 2 : 1;

// FP8 E4M3 -> float32, exact, from bits and builtins only (common/dtype.h F8E4M3ToFloat's formula).
inline float F8ToFloat(uint32_t b) {
  const uint32_t mag = b & 0x7fu;
  float v;
  if (mag == 0x7fu) {
    v = __builtin_nanf("");
  } else if (mag < 8u) {  // exponent 0: m * 2^-9
    v = static_cast<float>(mag) * 0x1p-9f;
  } else {  // (1 + m/8) 2^(e-7): the bits shifted into place, the bias moved from 7 to 127
    const uint32_t bits = (mag << 20) + (120u << 23);
    __builtin_memcpy(&v, &bits, sizeof(v));
  }
  return (b & 0x80u) != 0 ? -v : v;
}

// E8M0 scale code -> float32 (common/dtype.h E8M0ToFloat): 2^(code - 127) for 0..254 (code 0: 2^-127, a
// subnormal; the others: exponent field `code`), the quiet NaN for 0xFF. A table, so that the inner loop
// reads a block's scale with one load-broadcast (doubling from 2^-127 is exact at every step).
struct E8M0Table {
  float value[256];
};
constexpr E8M0Table MakeE8M0Table() {
  E8M0Table t{};
  float s = 0x1p-127f;
  for (int code = 0; code < 255; ++code) {
    t.value[code] = s;
    if (code < 254) s *= 2.0f;
  }
  t.value[255] = __builtin_nanf("");
  return t;
}
constexpr E8M0Table kE8M0 = MakeE8M0Table();
inline float Mxfp4Scale(uint32_t code) { return kE8M0.value[code & 0xffu]; }

// The 16 FP4 E2M1 values by nibble (common/dtype.h Fp4E2M1ToFloat): 0, .5, 1, 1.5, 2, 3, 4, 6, then
// their negatives (code 8 is -0).
constexpr float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                  -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Nibble n's E2M1 value times the E8M0 scale of `code` (0..254) as a float32 multiplication gives it, at
// compile time (the ISAs' per-code tables): exact (at most 2 significant bits, exponent >= -128), or +-inf
// past FLT_MAX. The NaN scale (255) is each table's own: what its ISA's multiplication returns.
constexpr float Mxfp4Product(int code, int nibble) {
  const double product = static_cast<double>(kFp4Values[nibble]) * static_cast<double>(kE8M0.value[code]);
  if (product > static_cast<double>(__FLT_MAX__)) return __builtin_inff();
  if (product < -static_cast<double>(__FLT_MAX__)) return -__builtin_inff();
  return static_cast<float>(product);
}

// Weight `index` of `w` as float32 (the scalar tails). Templated on V, unused inside, so that each
// ISA translation unit's instantiation has internal linkage like every other template here.
template <class V, Encoding kEnc>
inline float WeightAt(const GemmWeights& w, int64_t index) {
  if (kEnc == Encoding::kF32) return w.f32[index];
  if (kEnc == Encoding::kF8) return F8ToFloat(w.f8[index]) * w.F8Scale(index / w.cols, index % w.cols);
  if (kEnc == Encoding::kF8Bf16) {
    const uint32_t bits = static_cast<uint32_t>(w.bf16[index]) << 16;
    float f;
    __builtin_memcpy(&f, &bits, sizeof(f));
    return f * w.F8Scale(index / w.cols, index % w.cols);
  }
  if (kEnc == Encoding::kMxfp4) {
    const uint32_t nibble = (w.mxfp4[index / 2] >> (4 * (index % 2))) & 15u;
    return kFp4Values[nibble] * Mxfp4Scale(w.mxfp4_scales[(index / w.cols) * (w.cols / 32) + (index % w.cols) / 32]);
  }
  uint32_t bits;
  if (kEnc == Encoding::kPlanes) {
    const uint32_t e = w.e[index], sm = w.sm[index];
    bits = (sm & 0x80u) << 24 | e << 23 | (sm & 0x7fu) << 16;
  } else {
    bits = static_cast<uint32_t>(w.bf16[index]) << 16;
  }
  float f;
  __builtin_memcpy(&f, &bits, sizeof(f));
  return f;
}

// True when a scale of rows [r, r + rows) is not below 2^8 in magnitude (or inf / NaN): LoadF8's
// multiplication by scale * 2^120 would overflow (the V::kF8Scan variants); or below 2^-100 (0 included),
// where the subnormal loads' scale * 2^8 could be a float32 subnormal (Avx512::LoadF8Subnormal).
inline bool F8ScalesNeedSafe(const GemmArgs& a, int64_t r, int rows) {
  const int64_t scale_cols = (a.w.cols + a.w.block_cols - 1) / a.w.block_cols;
  for (int64_t br = r / a.w.block_rows; br <= (r + rows - 1) / a.w.block_rows; ++br) {
    const float* s = a.w.f8_scale + br * scale_cols;
    for (int64_t c = 0; c < scale_cols; ++c)
      if (!(__builtin_fabsf(s[c]) < 256.0f) || __builtin_fabsf(s[c]) < 0x1p-100f) return true;
  }
  return false;
}

// While alive, float32 subnormal inputs are read as such on this thread: the FP8 decode of the kF8Scan
// variants makes E4M3 subnormals float32 subnormals, which MXCSR.DAZ (x86; e.g. torch's
// set_flush_denormal) or FPCR.FZ (AArch64) would read as zero. Clears that bit and restores it at the
// end. Templated on V for internal linkage, as everything here.
template <class V>
class SubnormalInputs {
 public:
  SubnormalInputs() {
#if defined(__x86_64__) || defined(__i386__)
    saved_ = __builtin_ia32_stmxcsr();
    if ((saved_ & kDaz) != 0) __builtin_ia32_ldmxcsr(static_cast<unsigned>(saved_ & ~kDaz));
#elif defined(__aarch64__)
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
    if ((saved_ & kFz) != 0) Write(saved_ & ~kFz);
#endif
  }
  ~SubnormalInputs() {
#if defined(__x86_64__) || defined(__i386__)
    if ((saved_ & kDaz) != 0) __builtin_ia32_ldmxcsr(static_cast<unsigned>(saved_));
#elif defined(__aarch64__)
    if ((saved_ & kFz) != 0) Write(saved_);
#endif
  }
  SubnormalInputs(const SubnormalInputs&) = delete;
  SubnormalInputs& operator=(const SubnormalInputs&) = delete;

 private:
  static constexpr uint64_t kDaz = uint64_t{1} << 6;  // MXCSR.DAZ: denormal inputs read as zero
  static constexpr uint64_t kFz = uint64_t{1} << 24;  // FPCR.FZ: denormals flushed to zero
#if defined(__aarch64__)
  static void Write(uint64_t fpcr) { __asm__ __volatile__("msr fpcr, %0" : : "r"(fpcr)); }
#endif
  uint64_t saved_ = 0;
};

// What a kF8Scan variant's F8TileScan finds in a row tile: nothing LoadF8 cannot take at full speed, a
// subnormal code (exponent 0, mantissa != 0), or a NaN code / a scale LoadF8 cannot take.
enum class F8Tile { kFast, kSubnormals, kChecked };
// A row tile goes the kSubnormals way when more than 1 in this many of its codes is subnormal: the
// subnormal loads cost ~2 cycles more per 16 weights, an assist ~130 per vector holding a subnormal
// (Intel Xeon, docs/benchmarks.md "Background: FP8 checkpoints against BF16"), so below ~1 in 1000 the
// assists cost less.
constexpr int64_t kF8SubnormalShare = 1024;

// The end of an x86 F8TileScan over the n codes of rows [r, r + rows) at p: the codes [i, n) its vector loop
// left counted too (NaN codes; subnormal codes: exponent 0, mantissa != 0), then the verdict. Templated on
// V for internal linkage (the loop is compiled with each ISA's flags).
template <class V>
inline F8Tile F8TileVerdict(const GemmArgs& a, int64_t r, int rows, const uint8_t* p, int64_t i, int64_t n, bool nan,
                            int64_t subnormals) {
  for (; i < n; ++i) {
    nan |= (p[i] & 0x7fu) == 0x7fu;
    subnormals += (p[i] & 0x78u) == 0 && (p[i] & 0x07u) != 0;
  }
  if (nan || F8ScalesNeedSafe(a, r, rows)) return F8Tile::kChecked;
  return subnormals * kF8SubnormalShare > n ? F8Tile::kSubnormals : F8Tile::kFast;
}

// The FP8 decode of the row tiles whose F8TileScan says kSubnormals (kF8SubnormalLoads variants).
template <class V>
struct F8Subnormal : V {
  static constexpr bool kF8Scan = false;
  static typename V::Vec LoadF8(const uint8_t* p, float scale) { return V::LoadF8Subnormal(p, scale); }
  static void LoadF8x2(const uint8_t* p, float scale, typename V::Vec* w0, typename V::Vec* w1) {
    V::LoadF8x2Subnormal(p, scale, w0, w1);
  }
};

// The FP8 decode of the row tiles a kF8Scan variant's F8TileScan sends here as kChecked (a NaN code, a scale
// >= 2^8; neither occurs in a released checkpoint): each weight by GemmWeights' formula (F8ToFloat,
// one fp32 multiplication), 16 at a time through V::LoadX.
template <class V>
struct F8Checked : V {
  static constexpr bool kF8Scan = false;
  static typename V::Vec LoadF8(const uint8_t* p, float scale) {
    float w[16];
    for (int i = 0; i < 16; ++i) w[i] = F8ToFloat(p[i]) * scale;
    return V::LoadX(w);
  }
  static void LoadF8x2(const uint8_t* p, float scale, typename V::Vec* w0, typename V::Vec* w1) {
    *w0 = LoadF8(p, scale);
    *w1 = LoadF8(p + 16, scale);
  }
};

// Whether V has the fused NaN check of F8TileCheck::kFused (V::F8NanMax32 and the rest, above).
template <class V, class = void>
struct HasF8NanCheck {
  static constexpr bool value = false;
};
template <class V>
struct HasF8NanCheck<V, decltype(void(&V::F8NanMax32))> {
  static constexpr bool value = true;
};

// The most tokens of a tile that takes F8TileCheck::kFused's check (the optional V::kF8FusedMaxTokens; else
// any): wider tiles scan first (F8TileScan), as under kScan, the same bits. AVX-512's 4 x 4 tile holds 32
// accumulators (two chains) beside its weights and activations; the running check's registers on top of
// them made it slower than the scan, while its 3-token tile and the decode tiles gain: on the 2-core Zen 5
// VM (fp8_gemm_bench --threads 2 --rounds 5 --matrices 8, 1408 x 4096, kScan and kFused alternated three
// times, 2026-12-04, best ms) 4 tokens 2.5-3.6 scanned against 4.0-4.8 fused; 1 token 1.7-2.6 against
// 1.7-1.8, 2: 1.8-3.4 against 1.7, 3: 2.1-3.3 against 2.1-2.6.
template <class V, class = void>
struct F8FusedMaxTokens {
  static constexpr int value = 1 << 30;
};
template <class V>
struct F8FusedMaxTokens<V, decltype(void(V::kF8FusedMaxTokens))> {
  static constexpr int value = V::kF8FusedMaxTokens;
};

// The FP8 decode of F8TileCheck::kFused row tiles: V's fast decode, no scan before the tile; Tile tracks the
// NaN codes it multiplies (IsF8Fused) and computes the tile again by F8Checked<Unfused> if it met one.
template <class V>
struct F8Fused : V {
  using Unfused = V;
  static constexpr bool kF8Scan = false;
};
template <class V>
struct IsF8Fused {
  static constexpr bool value = false;
};
template <class V>
struct IsF8Fused<F8Fused<V>> {
  static constexpr bool value = true;
};

// The start of a running NaN check (V::F8NanZero()) where kOn, else a placeholder the check never touches.
template <class V, bool kOn>
inline auto F8NanStart() {
  if constexpr (kOn) {
    return V::F8NanZero();
  } else {
    return 0;
  }
}

// Rows of the range's start that Gemm scans for subnormal codes before choosing F8TileCheck::kFused.
constexpr int64_t kF8SampleRows = 4;

// Tokens per outer block: their activations stay in L2 while every row tile of the range streams by.
constexpr int64_t kTokenBlock = 64;

// Software prefetch of the weights (issue 35). Decode tiles (one token) are bound by how many lines a
// core has in flight: a tile of R rows reads R streams of bytes (per plane), stream i being row r + i,
// then row r + i + R (its place in the next tile), and so on, and each stream asks for the 64-byte line
// kPrefetchBytes / R bytes ahead of where it reads, once per line, into L2 (__builtin_prefetch
// locality 2: prefetcht1 on x86, PRFM PLDL2KEEP on AArch64). Hardware prefetchers stop at 4 KiB page
// boundaries, and a request into L2 holds no L1 fill buffer, so more lines are in flight per core.
// Measured on an Intel Xeon VM (2 cores, 800 matrices of 704 x 1024 BF16 in 2 MiB pages, one row per
// tile, alternated run by run): the next row's same column into L1 (the scheme before) read 20-22 GB/s,
// this 24-26 GB/s (a hand-written loop 3 KiB ahead 27-29), a pure read (membw_bench) 26-27 GB/s; into L2
// 1-16 KiB ahead 25-28 GB/s; into L1 at any distance 22-25 GB/s. Batched tiles of several rows (prefill
// beyond one token tile; kStreamedTokens below for smaller batches), where the FMAs rather than memory
// bound the time, keep the cheaper scheme: the next tile's rows at the same
// column, into L1 (PrefetchNextTile), and only in the first token tile of a row block (Rows,
// kRowBlockBytes); the address arithmetic of this one cost them 10 %.
constexpr int64_t kPrefetchBytes = 3072;

// Batches of at most one token tile (V::kGemmTokens: AVX-512 4, AVX2 2; a routed expert's share of a
// short prefill: 16 tokens over 60 experts, top-4, give most experts 1-4) are bound by memory like a
// decode GEMV, with 2-4 FMAs per weight loaded. Where the GEMV streams one row per tile (V::kGemvRows 1:
// x86), Run gives their BF16 and planes weights one-row tiles of all their tokens, prefetched like the
// GEMV's (PrefetchAhead, for tiles of one row and at most kStreamedTokens tokens). Measured on a 2-core
// Zen 4 (mxfp4_gemm_bench --threads 2 --matrices 200, BF16 704 x 1024 and 1024 x 704, builds alternated,
// 2026-12-01), median ms per 200 matrices, 4-row tiles with PrefetchNextTile against this: AVX-512
// 2 tokens 18.3 against 12.2, 3 tokens 18.1 against 12.3, 4 tokens 18.8 against 14.1; 6 and 8 tokens (two
// tiles) were slower this way (24-31 against 16-21 ms), as were AVX2's 3 and 4 (two tiles); AVX2 2 tokens
// 16.9 against 12.6 (docs/benchmarks.md "(m) on other machines").
constexpr int kStreamedTokens = 4;

// ... while their activations fit in L1 beside the weight stream: a one-row tile reads every token's x once
// per row, so where T x cols float32s exceed this (T tokens of a matrix of cols columns) the x of each row
// comes from L2 and the batch takes kGemmRows-row tiles, which read it once per kGemmRows rows. Measured on
// a 2-core Zen 5 VM (fp8_gemm_bench --threads 2 --rounds 5, builds alternated 2-3 times, 2026-12-04, best ms
// per pass over the BF16 matrices, one-row tiles against 4-row tiles): 704 x 4096 (16 matrices) 2 tokens
// 2.80-4.95 against 2.31-2.46, 3: 3.86-5.31 against 2.52-2.56, 4: 4.50-5.51 against 2.58-2.70; 1408 x 2048
// (40) 3 tokens 6.1-11.7 against 5.1-6.4, 4: 10.2-13.2 against 5.5-7.3; 2048 x 1408 4 tokens 8.2-13.6 against
// 5.2-6.6. At 1024 columns and fewer this Zen 5 measured mixed (384 x 1024, 240 matrices: 2 tokens 4.3-5.7
// against 5.0-6.2, 4 tokens 6.9-8.5 against 4.8-6.3) where the Zen 4 above measured one-row tiles 1.3-1.5x
// faster, so they keep them: 16 KiB, half of the 32 KiB L1 data cache of Zen 2-4 and many Intel and Arm cores.
constexpr int64_t kStreamedXBytes = 16384;

// The prefetch of stream i of the tile at row r, reading column byte `col` of its row: `plane` holds
// rows of `row_bytes` bytes, `total` bytes in all (nothing past them is asked for), `step` is the bytes
// one iteration reads (a line is asked for in the iteration that reaches its start).
template <int R>
inline void PrefetchAhead(const uint8_t* plane, int64_t row_bytes, int64_t total, int64_t r, int i, int64_t col,
                          int64_t step) {
  const int64_t ahead = R == 1 ? kPrefetchBytes : (kPrefetchBytes / R < row_bytes ? kPrefetchBytes / R : row_bytes);
  const int64_t to = col + ahead;
  const int64_t offset = R == 1 || to < row_bytes ? (r + i) * row_bytes + to : (r + i + R) * row_bytes + (to - row_bytes);
  if (offset < total && ((reinterpret_cast<uintptr_t>(plane) + static_cast<uintptr_t>(offset)) & 63) < static_cast<uintptr_t>(step))
    __builtin_prefetch(plane + offset, 0, 2);
}

// Batched tiles: row i of the next tile at the same column byte, when the matrix has that row.
template <int R>
inline void PrefetchNextTile(const uint8_t* plane, int64_t row_bytes, int64_t total, int64_t r, int i, int64_t col) {
  const int64_t offset = (r + R + i) * row_bytes + col;
  if (offset < total) __builtin_prefetch(plane + offset);
}

// The prefetch of a tile of R rows x T tokens for stream i: PrefetchAhead for tiles of one row and at most
// kStreamedTokens tokens (x86's BF16 and planes GEMVs and their batches of one token tile), else
// PrefetchNextTile (batches; FP8's multi-row decode tiles; NEON's
// four-row decode tiles, whose speed with PrefetchAhead no Arm machine has measured yet). FP8's GEMV
// (compute-bound, several rows per tile) read 22-23 GB/s of FP8 with PrefetchAhead<2> against 35 with
// PrefetchNextTile on a 2-core Zen 5 (48 matrices of 1408 x 4096, alternated rep by rep, 2026-11-30).
template <int R, int T>
inline void PrefetchWeights(const uint8_t* plane, int64_t row_bytes, int64_t total, int64_t r, int i, int64_t col,
                            int64_t step) {
  if constexpr (R == 1 && T <= kStreamedTokens) {
    PrefetchAhead<R>(plane, row_bytes, total, r, i, col, step);
  } else {
    PrefetchNextTile<R>(plane, row_bytes, total, r, i, col);
  }
}

// Accumulator chains per output (the summation order of kernels/bf16_gemm.h): the 16-column blocks are
// taken in groups of kChainGroup, group g goes to chain g % 2, and the two chains are added lane by lane
// before the reduction. One chain per output bounds a decode GEMV by the FMA latency (16 weights per
// latency: ~32 GB/s of BF16 per Zen 5 core) while memory can outrun it; with two, the out-of-order core
// runs one group's FMAs beside the other's (issue 35; docs/architecture.md "What bounds the one-row GEMV").
// A tile walks its columns once, group after group, so a 4 x 4 tile, whose two chains' 32 accumulators do
// not fit the registers, keeps one group's in registers and the other's in L1 while its 16 blocks run.
// Measured on a 2-core Zen 5 against one chain (48 matrices of 1408 x 4096 BF16, the two kernels alternated
// in one process): 1 token 64-68 against 56-58 GB/s while memory was fast (the same while it was not), 16
// tokens +12-17 %, 32 +14-27 %, 2-8 tokens -5..+6 %, 64 tokens -3..+10 %. Groups of one block (the chains
// alternating) or passes of one chain over the whole row were 7-50 % slower on batches.
constexpr int64_t kChainGroup = kGemmChainGroupBlocks;

// Whether V has Reduce16 (16 V::Reduce at once, bit for bit), which FinishTile uses for tiles of 16 outputs.
template <class V, class = void>
struct HasReduce16 {
  static constexpr bool value = false;
};
template <class V>
struct HasReduce16<V, decltype(void(&V::Reduce16))> {
  static constexpr bool value = true;
};

// The end of a tile: chains added lane by lane, the reduction, the scalar tail from column `tail`,
// the bias; written to y.
template <class V, Encoding kEnc, int R, int T>
inline void FinishTile(const GemmArgs& a, int64_t r, int64_t t, const typename V::Acc (&c0)[R][T],
                       const typename V::Acc (&c1)[R][T], int64_t tail) {
  const int64_t cols = a.w.cols;
  float sums[R * T];
  if constexpr (HasReduce16<V>::value && R * T == 16) {
    typename V::Acc both[16];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) both[i * T + j] = V::Add(c0[i][j], c1[i][j]);
    }
    V::Reduce16(both, sums);
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) sums[i * T + j] = V::Reduce(V::Add(c0[i][j], c1[i][j]));
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const int64_t row = (r + i) * cols;
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const float* xt = a.x + (t + j) * a.ldx;
      float s = sums[i * T + j];
      for (int64_t k = tail; k < cols; ++k) s = __builtin_fmaf(WeightAt<V, kEnc>(a.w, row + k), xt[k], s);
      if (a.bias != nullptr) s += a.bias[r + i];
      a.y[(t + j) * a.ldy + r + i] = s;
    }
  }
}

// Whether V decodes a whole MXFP4 block at once into its own lane order (the optional V::Mxfp4BlockTable,
// MakeMxfp4BlockTable(code), LoadMxfp4Block(p, table, &half0, &half1), PermuteMxfp4X(x16, out16),
// CanonicalMxfp4Lanes(acc), kMxfp4BlockMaxTokens): TileMxfp4 then reads x permuted into that order (Run
// permutes it once per call) and permutes the accumulators back before FinishTile, so each lane's products
// and their order are LoadMxfp4's. Run takes the block decode for calls of at most kMxfp4BlockMaxTokens
// tokens and LoadMxfp4 for larger ones (the same bits). AVX-512 keeps it to decode and pairs: its 4-token
// tiles hold both halves' activations (Fma32Columns) beside 32 accumulators and ran 1.05-1.1x (4 tokens)
// and 1.4x (16 tokens) LoadMxfp4's time that way (mxfp4_gemm_bench, 2880 x 1440 and 1440 x 1440).
// V says so with kMxfp4Block = true; Mxfp4Canonical<V> turns it off (the canonical LoadMxfp4 path).
template <class V, class = void>
struct HasMxfp4Block {
  static constexpr bool value = false;
};
template <class V>
struct HasMxfp4Block<V, decltype(void(V::kMxfp4Block))> {
  static constexpr bool value = V::kMxfp4Block;
};
// Whether TileMxfp4 runs the two accumulator chains' block groups side by side (V::kMxfp4InterleavedChains,
// optional, with kMxfp4Block): each output lane takes two FMAs a block one after the other, so a tile of
// few rows and tokens waits on FMA latency with one chain at a time (see Avx2's LoadMxfp4Block).
template <class V, class = void>
struct Mxfp4InterleavedChains {
  static constexpr bool value = false;
};
template <class V>
struct Mxfp4InterleavedChains<V, decltype(void(V::kMxfp4InterleavedChains))> {
  static constexpr bool value = V::kMxfp4InterleavedChains;
};
template <class V>
struct Mxfp4Canonical : V {
  static constexpr bool kMxfp4Block = false;
};

// 32 columns from k of rows [0, R) x tokens [0, T) into `set`: load_row(i, &w0, &w1) gives row i's two
// 16-weight halves (columns k..k+15, k+16..k+31); each output's FMA of the first half, then the second's.
template <class V, int R, int T, class LoadRow>
__attribute__((always_inline)) inline void Fma32Columns(const float* const (&xrow)[T], int64_t k,
                                                        typename V::Acc (&set)[R][T], const LoadRow& load_row) {
  typename V::Vec x0[T], x1[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) {
    x0[j] = V::LoadX(xrow[j] + k);
    x1[j] = V::LoadX(xrow[j] + k + 16);
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    typename V::Vec w0, w1;
    load_row(i, &w0, &w1);
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) set[i][j] = V::Fma(w1, x1[j], V::Fma(w0, x0[j], set[i][j]));
  }
}

// MXFP4 rows [r, r + R) x tokens [t, t + T): per 32-column block, each row's table for its scale, then
// the block's two 16-lane halves (the FMAs of Tile's loop, so the same bits), kChainGroup / 2 blocks per
// chain group; the chains' sum, the reduction and the bias. cols % 32 == 0 (ValidateGemmArgs), so there
// is no scalar tail.
template <class V, int R, int T>
inline void TileMxfp4(const GemmArgs& a, int64_t r, int64_t t) {
  static_assert(kChainGroup % 2 == 0, "an MXFP4 block (two 16-column halves) lies in one chain group");
  constexpr int64_t kGroupBlocks = kChainGroup / 2;
  const int64_t cols = a.w.cols, blocks = cols / 32;
  typename V::Acc acc0[R][T], acc1[R][T];  // the two chains (two arrays: see Tile)
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc0[i][j] = acc1[i][j] = V::Zero();
  }
  const uint8_t* q = a.w.mxfp4 + r * (cols / 2);
  const uint8_t* scales = a.w.mxfp4_scales + r * blocks;
  // Loop invariants in locals (as in Tile): each token's activations, each row's nibbles and scales.
  const float* xrow[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) xrow[j] = a.x + (t + j) * a.ldx;
  const uint8_t* qrow[R];
  const uint8_t* srow[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    qrow[i] = q + i * (cols / 2);
    srow[i] = scales + i * blocks;
  }
  // Blocks [b0, b1) into `set`.
  const auto blocks_into = [&](int64_t b0, int64_t b1, typename V::Acc(&set)[R][T]) __attribute__((always_inline)) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t k = b * 32;
      // The next tile's rows: one 64-byte line of nibbles per 4 blocks. (PrefetchAhead's arithmetic per
      // block and row made the MXFP4 GEMV, which its decode rather than memory bounds, 1.6x slower.)
      if ((b & 3) == 0) {
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          PrefetchNextTile<R>(a.w.mxfp4, cols / 2, a.w.rows * (cols / 2), r, i, k / 2);
          if ((b & 63) == 0) PrefetchNextTile<R>(a.w.mxfp4_scales, blocks, a.w.rows * blocks, r, i, b);
        }
      }
      if constexpr (HasMxfp4Block<V>::value) {  // x in V's lane order (Run), the block decoded at once
        Fma32Columns<V, R, T>(xrow, k, set, [&](int i, typename V::Vec* w0, typename V::Vec* w1) {
          V::LoadMxfp4Block(qrow[i] + k / 2, V::MakeMxfp4BlockTable(srow[i][b]), w0, w1);
        });
        continue;
      }
      typename V::Fp4Table table[R];
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) table[i] = V::MakeFp4Table(Mxfp4Scale(srow[i][b]));
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        typename V::Vec x[T];
#pragma GCC unroll 8
        for (int j = 0; j < T; ++j) x[j] = V::LoadX(xrow[j] + k + 16 * half);
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const typename V::Vec w = V::LoadMxfp4(qrow[i] + k / 2 + 8 * half, table[i]);
#pragma GCC unroll 8
          for (int j = 0; j < T; ++j) set[i][j] = V::Fma(w, x[j], set[i][j]);
        }
      }
    }
  };
  const auto min = [](int64_t u, int64_t v) { return u < v ? u : v; };
  if constexpr (Mxfp4InterleavedChains<V>::value && HasMxfp4Block<V>::value) {
    // The two chains' groups side by side: block g + i into acc0, then block g + kGroupBlocks + i into acc1
    // (each chain's blocks in the same order as below: the same bits), twice the independent FMA chains.
    for (int64_t g = 0; g < blocks; g += 2 * kGroupBlocks) {
      const int64_t end0 = min(g + kGroupBlocks, blocks), end1 = min(g + 2 * kGroupBlocks, blocks);
      const int64_t both = end1 - end0;  // blocks of the second group (the first has as many or more)
      for (int64_t i = 0; i < both; ++i) {
        blocks_into(g + i, g + i + 1, acc0);
        blocks_into(end0 + i, end0 + i + 1, acc1);
      }
      blocks_into(g + both, end0, acc0);
    }
  } else {
    for (int64_t g = 0; g < blocks; g += 2 * kGroupBlocks) {
      blocks_into(g, min(g + kGroupBlocks, blocks), acc0);
      blocks_into(min(g + kGroupBlocks, blocks), min(g + 2 * kGroupBlocks, blocks), acc1);
    }
  }
  if constexpr (HasMxfp4Block<V>::value) {  // back to canonical lanes for the reduction
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) {
        acc0[i][j] = V::CanonicalMxfp4Lanes(acc0[i][j]);
        acc1[i][j] = V::CanonicalMxfp4Lanes(acc1[i][j]);
      }
    }
  }
  FinishTile<V, Encoding::kMxfp4, R, T>(a, r, t, acc0, acc1, cols);
}

// Rows [r, r + R) x tokens [t, t + T): the 16-lane body (block b into chain (b / kChainGroup) % 2), the
// chains' sum, the reduction, the tail and the bias. kPrefetch false: no prefetch of the weights (a batch's
// row block already in L2).
template <class V, Encoding kEnc, int R, int T, bool kPrefetch = true>
inline void Tile(const GemmArgs& a, int64_t r, int64_t t) {
  if constexpr (kEnc == Encoding::kMxfp4) {
    TileMxfp4<V, R, T>(a, r, t);
    return;
  }
  if constexpr (kEnc == Encoding::kF8 && V::kF8Scan) {
    if constexpr (HasF8NanCheck<V>::value) {
      if (a.f8_check == F8TileCheck::kFused && T <= F8FusedMaxTokens<V>::value) {  // resolved by Gemm
        if (F8ScalesNeedSafe(a, r, R)) {
          Tile<F8Checked<V>, kEnc, R, T, kPrefetch>(a, r, t);
        } else {
          Tile<F8Fused<V>, kEnc, R, T, kPrefetch>(a, r, t);
        }
        return;
      }
    }
    const F8Tile kind = V::F8TileScan(a, r, R);
    if (kind == F8Tile::kChecked) {
      Tile<F8Checked<V>, kEnc, R, T, kPrefetch>(a, r, t);
      return;
    }
    if constexpr (V::kF8SubnormalLoads) {
      if (kind == F8Tile::kSubnormals) {
        Tile<F8Subnormal<V>, kEnc, R, T, kPrefetch>(a, r, t);
        return;
      }
    }
  }
  using Acc = typename V::Acc;
  const int64_t cols = a.w.cols;
  const int64_t kb = cols / 16;
  // The two chains' accumulators, as two arrays (GCC keeps each in registers where the other allows;
  // one array of both, 32 vectors for a 4 x 4 tile, it left in memory: prefill 2x slower).
  Acc acc0[R][T], acc1[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc0[i][j] = acc1[i][j] = V::Zero();
  }
  // F8Fused: the running NaN check of the codes multiplied (V::F8NanMax32).
  constexpr bool kNanFused = kEnc == Encoding::kF8 && IsF8Fused<V>::value;
  [[maybe_unused]] auto nan = F8NanStart<V, kNanFused>();
  // The weights' prefetch (PrefetchWeights): the bytes per weight of the encoding's plane(s), and
  // where the matrix ends.
  constexpr int64_t kElem = kPlaneBytes<kEnc>;
  const uint8_t* plane0 = kEnc == Encoding::kPlanes ? a.w.e
                          : kEnc == Encoding::kF8   ? a.w.f8
                          : kEnc == Encoding::kF32  ? reinterpret_cast<const uint8_t*>(a.w.f32)
                                                    : reinterpret_cast<const uint8_t*>(a.w.bf16);
  // FP8 scales: per block of block_rows x block_cols, for kF8's codes and kF8Bf16's BF16 values alike.
  constexpr bool kScaled = kEnc == Encoding::kF8 || kEnc == Encoding::kF8Bf16;
  const uint8_t* plane1 = kEnc == Encoding::kPlanes ? a.w.sm : nullptr;
  const int64_t row_bytes = cols * kElem, total = a.w.rows * row_bytes;
  // FP8: each row's scales; the scale column of block b is b / chunks_per_block.
  const float* scale_row[R] = {};
  const int64_t chunks_per_block = kScaled ? a.w.block_cols / 16 : 1;
  if (kScaled) {
    const int64_t scale_cols = (cols + a.w.block_cols - 1) / a.w.block_cols;
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) scale_row[i] = a.w.f8_scale + ((r + i) / a.w.block_rows) * scale_cols;
  }
  // FP8 with blocks of a multiple of 32 columns: two 16-column blocks per step (a pair never straddles a
  // scale block or a chain group; the FMAs keep their order, so the bits are those of one block at a time).
  // Only for tiles of at most 2 tokens: a 4 x 4 tile with both halves' activations live runs out of registers.
  static_assert(kChainGroup % 2 == 0, "an FP8 pair lies in one chain group");
  const bool f8_pairs = kEnc == Encoding::kF8 && T <= 2 && chunks_per_block % 2 == 0;
  // Loop invariants in locals: each token's activations and each row's first weight (GCC reloaded
  // a.x / a.ldx and multiplied the row offset again on every step of the loop below).
  const float* xrow[T];
#pragma GCC unroll 8
  for (int j = 0; j < T; ++j) xrow[j] = a.x + (t + j) * a.ldx;
  int64_t row_off[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) row_off[i] = (r + i) * cols;
  const uint16_t* const w_bf16 = a.w.bf16;
  const float* const w_f32 = a.w.f32;
  const uint8_t* const w_e = a.w.e;
  const uint8_t* const w_sm = a.w.sm;
  const uint8_t* const w_f8 = a.w.f8;
  // FP8: block b's scale column, and b's chunk in it, counted along the loop without a division.
  int64_t col_block = 0, chunk_in_block = 0;
  const auto advance = [&](int64_t n) __attribute__((always_inline)) {
    if (kScaled) {
      chunk_in_block += n;
      while (chunk_in_block >= chunks_per_block) {
        chunk_in_block -= chunks_per_block;
        ++col_block;
      }
    }
  };
  // Block b (columns 16b .. 16b + 15) of every row and token into `set`.
  const auto block = [&](int64_t b, Acc(&set)[R][T]) __attribute__((always_inline)) {
    const int64_t k = b * 16;
    if constexpr (kPrefetch) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        PrefetchWeights<R, T>(plane0, row_bytes, total, r, i, k * kElem, 16 * kElem);
        if (kEnc == Encoding::kPlanes) PrefetchWeights<R, T>(plane1, row_bytes, total, r, i, k, 16);
      }
    }
    typename V::Vec x[T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) x[j] = V::LoadX(xrow[j] + k);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const int64_t off = row_off[i] + k;
      const typename V::Vec w = [&]() __attribute__((always_inline)) {
        if constexpr (kEnc == Encoding::kPlanes) {
          return V::LoadPlanes(w_e + off, w_sm + off);
        } else if constexpr (kEnc == Encoding::kF32) {
          return V::LoadX(w_f32 + off);
        } else if constexpr (kEnc == Encoding::kF8) {
          return V::LoadF8(w_f8 + off, scale_row[i][col_block]);
        } else if constexpr (kEnc == Encoding::kF8Bf16) {
          return V::LoadBf16Scaled(w_bf16 + off, scale_row[i][col_block]);
        } else {
          return V::LoadBf16(w_bf16 + off);
        }
      }();
      if constexpr (kNanFused) nan = V::F8NanMax16(nan, w_f8 + off);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) set[i][j] = V::Fma(w, x[j], set[i][j]);
    }
  };
  // FP8 blocks b and b + 1, in one scale block, decoded at once.
  const auto f8_pair = [&](int64_t b, Acc(&set)[R][T]) __attribute__((always_inline)) {
    const int64_t k = b * 16;
    if constexpr (kPrefetch) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) PrefetchWeights<R, T>(plane0, row_bytes, total, r, i, k, 32);
    }
    Fma32Columns<V, R, T>(xrow, k, set, [&](int i, typename V::Vec* w0, typename V::Vec* w1) {
      V::LoadF8x2(w_f8 + row_off[i] + k, scale_row[i][col_block], w0, w1);
      if constexpr (kNanFused) nan = V::F8NanMax32(nan, w_f8 + row_off[i] + k);
    });
  };
  // Blocks [b0, b1) (one chain group, or the end of the row) into `set`.
  const auto group = [&](int64_t b0, int64_t b1, Acc(&set)[R][T]) __attribute__((always_inline)) {
    for (int64_t b = b0; b < b1; ++b) {
      if (kEnc == Encoding::kF8 && f8_pairs && b + 1 < b1) {  // b is even, as b0 is (kChainGroup is)
        f8_pair(b, set);
        advance(2);
        ++b;
        continue;
      }
      block(b, set);
      advance(1);
    }
  };
  const auto min = [](int64_t u, int64_t v) { return u < v ? u : v; };
  for (int64_t g = 0; g < kb; g += 2 * kChainGroup) {
    group(g, min(g + kChainGroup, kb), acc0);
    group(min(g + kChainGroup, kb), min(g + 2 * kChainGroup, kb), acc1);
  }
  if constexpr (kNanFused) {
    if (V::F8NanFound(nan)) {  // a NaN code (never in a released checkpoint): the whole tile again, checked
      Tile<F8Checked<typename V::Unfused>, kEnc, R, T, kPrefetch>(a, r, t);
      return;
    }
  }
  FinishTile<V, kEnc, R, T>(a, r, t, acc0, acc1, kb * 16);
}

// Rows [r, r + R) for tokens [t, t1), fewer than T of them: one tile of 3 or 2 tokens where T allows it,
// then one by one. Each weight is decoded (widened, FP8 scaled) once per tile, so 3 tokens in one tile
// rather than 2 + 1 spare a decode; every output is still one tile's sum in the same order (same bits).
template <class V, Encoding kEnc, int R, int T, bool kPrefetch = true>
inline void LeftoverTokens(const GemmArgs& a, int64_t r, int64_t t, int64_t t1) {
  if constexpr (T > 3) {
    if (t1 - t == 3) {
      Tile<V, kEnc, R, 3, kPrefetch>(a, r, t);
      return;
    }
  }
  if constexpr (T > 2) {
    if (t1 - t >= 2) {
      Tile<V, kEnc, R, 2, kPrefetch>(a, r, t);
      t += 2;
    }
  }
  for (; t < t1; ++t) Tile<V, kEnc, R, 1, kPrefetch>(a, r, t);
}

// Rows [r, r + R) for tokens [t0, t1): tiles of T tokens, then the leftover ones (LeftoverTokens).
template <class V, Encoding kEnc, int R, int T, bool kPrefetch = true>
inline void RowTile(const GemmArgs& a, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + T <= t1; t += T) Tile<V, kEnc, R, T, kPrefetch>(a, r, t);
  LeftoverTokens<V, kEnc, R, T, kPrefetch>(a, r, t, t1);
}

// Weight bytes per row block of a batch (Rows): every token tile of the block runs over these rows before
// the next block's, so they come from memory once (the first token tile, which prefetches them) and from
// L2 for the other token tiles, whose loop then carries no prefetch instructions; the tile's activations
// (T rows of cols floats) stay in L1. 128 KiB fits the L2 of every core we target (the Orin's A78AE has
// 256 KiB). Measured on a 2-core Zen 5 (1 thread, 8 matrices of 1408 x 2048 BF16, fp8_gemm_bench, best of
// 5, alternated builds): 64 tokens 16.4-16.6 ms -> 14.6-14.9 ms (178 -> 201 GFLOP/s, 78 % of the FMA
// peak a register-only loop reaches), 16 tokens 4.42-4.47 -> 4.42-4.60 ms; 256 and 512 KiB the same
// within 1 %. Dropping the batched prefetch altogether (every token tile) made 64 tokens as fast and 16
// tokens 1.3x slower: with few token tiles the weights' stream from memory is what waits.
constexpr int64_t kRowBlockBytes = 128 * 1024;
// Row blocks from this many full token tiles on; fewer run each row tile over all of them, its rows in L1
// (one token tile and a leftover token in row blocks took 1.23x as long: 48 matrices of 704 x 2048, 1
// thread, 5 tokens 6.5-6.6 ms against 5.2-5.5; 8 tokens 7.9 against 7.3-7.7; from 16 tokens on the row
// blocks are as fast or faster: 32 tokens 22.1-23.0 against 24.9-25.6, 64 tokens 41.7-42.9 against 49).
constexpr int64_t kRowBlockMinTokenTiles = 4;

// Rows [row_begin, row_end) for tokens [t0, t1) in tiles of R rows (then single rows); batches of at least
// kRowBlockMinTokenTiles token tiles in row blocks of about kRowBlockBytes (of the first plane), each
// block's row tiles under one token tile at a time. Every output is one Tile's sum whatever the order, so
// the order changes no bits. kPrefetch false: no software prefetch in any tile (GemvPrefetch::kHardware's
// one-row tiles).
template <class V, Encoding kEnc, int R, int T, bool kPrefetch = true>
inline void Rows(const GemmArgs& a, int64_t t0, int64_t t1) {
  if (T == 1 || (t1 - t0) / T < kRowBlockMinTokenTiles) {
    int64_t r = a.row_begin;
    for (; r + R <= a.row_end; r += R) RowTile<V, kEnc, R, T, kPrefetch>(a, r, t0, t1);
    for (; r < a.row_end; ++r) RowTile<V, kEnc, 1, T, kPrefetch>(a, r, t0, t1);
  } else {
    const int64_t fit = kRowBlockBytes / (a.w.cols * kPlaneBytes<kEnc>) / R * R;
    const int64_t block = fit > R ? fit : R;
    for (int64_t rb = a.row_begin; rb < a.row_end; rb += block) {
      const int64_t re = rb + block < a.row_end ? rb + block : a.row_end;
      int64_t t = t0;
      for (; t + T <= t1; t += T) {
        int64_t r = rb;
        if (t == t0) {
          for (; r + R <= re; r += R) Tile<V, kEnc, R, T, kPrefetch>(a, r, t);
        } else {
          for (; r + R <= re; r += R) Tile<V, kEnc, R, T, false>(a, r, t);
        }
        for (; r < re; ++r) Tile<V, kEnc, 1, T, kPrefetch>(a, r, t);
      }
      if (t < t1) {
        int64_t r = rb;
        for (; r + R <= re; r += R) LeftoverTokens<V, kEnc, R, T, kPrefetch>(a, r, t, t1);
        for (; r < re; ++r) LeftoverTokens<V, kEnc, 1, T, kPrefetch>(a, r, t, t1);
      }
    }
  }
}

// Rows [r0, r0 + rows) of FP8 weights dequantized into buf (float32, row-major, cols per row). kNanCheck
// (F8TileCheck::kFused, V with HasF8NanCheck): false when the codes V::LoadF8 read held a NaN code, whose
// values are then wrong (the caller dequantizes again through F8Checked); else always true.
template <class V, bool kNanCheck = false>
inline bool RowsF8Dequantize(const GemmArgs& a, int64_t r0, int rows, float* buf) {
  const int64_t cols = a.w.cols, bc = a.w.block_cols;
  const int64_t scale_cols = (cols + bc - 1) / bc;
  [[maybe_unused]] auto nan = F8NanStart<V, kNanCheck>();
  for (int i = 0; i < rows; ++i) {
    const float* srow = a.w.f8_scale + ((r0 + i) / a.w.block_rows) * scale_cols;
    const uint8_t* q = a.w.f8 + (r0 + i) * cols;
    float* out = buf + i * cols;
    for (int64_t k0 = 0, b = 0; k0 < cols; k0 += bc, ++b) {
      const float scale = srow[b];
      const int64_t k1 = k0 + bc < cols ? k0 + bc : cols;
      int64_t k = k0;
      for (; k + 16 <= k1; k += 16) {
        V::Store(out + k, V::LoadF8(q + k, scale));
        if constexpr (kNanCheck) nan = V::F8NanMax16(nan, q + k);
      }
      for (; k < k1; ++k) out[k] = F8ToFloat(q[k]) * scale;
    }
  }
  if constexpr (kNanCheck) {
    return !V::F8NanFound(nan);
  } else {
    return true;
  }
}

// Rows [r0, r0 + rows) of MXFP4 weights dequantized into buf (float32, row-major, cols per row): the
// values LoadMxfp4 gives the tile, block by block (cols % 32 == 0). For the V without StoreMxfp4Bf16 (which
// go through BF16 instead: RowsDequantized), so by the canonical LoadMxfp4 whatever HasMxfp4Block says.
template <class V>
inline void RowsMxfp4Dequantize(const GemmArgs& a, int64_t r0, int rows, float* buf) {
  const int64_t cols = a.w.cols, blocks = cols / 32;
  for (int i = 0; i < rows; ++i) {
    const uint8_t* q = a.w.mxfp4 + (r0 + i) * (cols / 2);
    const uint8_t* scales = a.w.mxfp4_scales + (r0 + i) * blocks;
    float* out = buf + i * cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const typename V::Fp4Table table = V::MakeFp4Table(Mxfp4Scale(scales[b]));
      V::Store(out + 32 * b, V::LoadMxfp4(q + 16 * b, table));
      V::Store(out + 32 * b + 16, V::LoadMxfp4(q + 16 * b + 8, table));
    }
  }
}

// Whether V writes an MXFP4 block as BF16s (the optional V::StoreMxfp4Bf16(const uint8_t* p, uint8_t scale_code,
// uint16_t* out): the 32 weights of the block at p (column 2j: low nibble of p[j]) times 2^(scale_code - 127),
// as 32 BF16s in column order). Every E2M1 value times every E8M0 scale is a BF16 (Avx2's kMxfp4Bf16
// static_assert), so these are the values LoadMxfp4 gives, exactly: MXFP4 batches then go through BF16
// rather than float32 (RowsThroughBf16).
template <class V, class = void>
struct HasMxfp4Bf16 {
  static constexpr bool value = false;
};
template <class V>
struct HasMxfp4Bf16<V, decltype(void(&V::StoreMxfp4Bf16))> {
  static constexpr bool value = true;
};

// Rows [r0, r0 + rows) of MXFP4 weights dequantized into buf as BF16 (row-major, cols per row; HasMxfp4Bf16).
template <class V>
inline void RowsMxfp4DequantizeBf16(const GemmArgs& a, int64_t r0, int rows, uint16_t* buf) {
  const int64_t cols = a.w.cols, blocks = cols / 32;
  for (int i = 0; i < rows; ++i) {
    const uint8_t* q = a.w.mxfp4 + (r0 + i) * (cols / 2);
    const uint8_t* scales = a.w.mxfp4_scales + (r0 + i) * blocks;
    uint16_t* out = buf + i * cols;
    for (int64_t b = 0; b < blocks; ++b) V::StoreMxfp4Bf16(q + 16 * b, scales[b], out + 32 * b);
  }
}

// Rows, never inlined into its caller: GCC inlined the BF16 tiles into RowsThroughBf16 with accumulators on
// the stack (1.8x the BF16 kernel's time), and compiles them as Run's do when they are on their own.
template <class V, Encoding kEnc, int R, int T>
__attribute__((noinline)) void RowsOutOfLine(const GemmArgs& a, int64_t t0, int64_t t1) {
  Rows<V, kEnc, R, T>(a, t0, t1);
}

// Rows per block of RowsThroughBf16: kRowBlockBytes of BF16 (a multiple of R, at least R).
inline int64_t ThroughBf16BlockRows(int64_t cols, int R) {
  const int64_t fit = kRowBlockBytes / (cols * 2) / R * R;
  return fit > R ? fit : R;
}

// MXFP4 batches where V has StoreMxfp4Bf16: each row block (Rows' kRowBlockBytes of BF16) dequantized once per
// token block into `buf`, then multiplied by Rows as BF16 weights, tile for tile the BF16 kernel: the
// same values and FMA order as TileMxfp4 (32-column blocks are two 16-column blocks), so the same bits.
// Half the bytes of the float32 round trip, and BF16's row blocks: its token tiles run over the block
// in L2 with their activations in L1 (float32 rows of a 3-row tile streamed every token's activations).
template <class V, int R, int T>
inline void RowsThroughBf16(const GemmArgs& a, int64_t t0, int64_t t1, uint16_t* buf) {
  GemmArgs sub = a;
  sub.w.mxfp4 = nullptr;
  sub.w.mxfp4_scales = nullptr;
  sub.w.bf16 = buf;
  sub.row_begin = 0;
  const int64_t block = ThroughBf16BlockRows(a.w.cols, R);
  for (int64_t r = a.row_begin; r < a.row_end; r += block) {
    const int rows = static_cast<int>(a.row_end - r >= block ? block : a.row_end - r);
    RowsMxfp4DequantizeBf16<V>(a, r, rows, buf);
    sub.w.rows = rows;
    sub.row_end = rows;
    sub.y = a.y + r;
    sub.bias = a.bias != nullptr ? a.bias + r : nullptr;
    RowsOutOfLine<V, Encoding::kBf16, R, T>(sub, t0, t1);
  }
}

// Whether V writes FP8 E4M3 codes as BF16s and multiplies BF16s by a scale (the optional
// V::StoreF8Bf16(const uint8_t* p, uint16_t* out): the 16 codes at p as 16 BF16s, the E4M3 values exactly
// (every finite E4M3 value is a BF16; NaN codes a BF16 NaN), and V::LoadBf16Scaled(const uint16_t* p, float
// scale): 16 BF16s times scale, one float32 rounding each): FP8 batches then go through BF16 row blocks
// (RowsF8ThroughBf16) rather than float32 row tiles.
template <class V, class = void>
struct HasF8Bf16 {
  static constexpr bool value = false;
};
template <class V>
struct HasF8Bf16<V, decltype(void(&V::StoreF8Bf16))> {
  static constexpr bool value = true;
};

// Tokens per one-row tile of an FP8 batch of 3 to kF8DequantMinTokens - 1 tokens (RunTiles), where V says
// (the optional V::kF8FewTokens; else 0: the batch tiles as any other). A tile decodes each weight vector
// once for all its tokens, so where kGemmTokens is 2 (AVX2) a routed expert's few prefill tokens decode
// every weight once per 2 tokens in kGemmRows x 2 tiles; one row by 4 tokens decodes it once per 4 (the
// same bits: each token's sum is the same chains in the same order). AVX2 on a 2-core Zen 5 VM with
// ZIPMOE_GEMM_ISA=avx2 (fp8_gemm_bench --threads 2 --rounds 3 --matrices 8, 1408 x 4096, 2026-12-04,
// binaries alternated twice, best ms, 3 x 2 tiles -> 1 x 4): 3 tokens 6.6-6.9 -> 4.2-5.3, 4: 7.3 -> 5.0-5.7,
// 5: 9.5-9.7 -> 6.9-7.0, 6: 10.4-11.2 -> 7.6-9.0, 7: 12.6-13.4 -> 9.0-9.8 (BF16 weights 3.4-7.5 ms); 8 tokens
// in the tile 10.5-10.6 against 11.4-12.1 through BF16 row blocks, 10 and 16 the same, so the threshold
// kF8DequantMinTokens stays. Noisier on the 2-core Zen 2 VM of 2026-12-03 (1 thread, FP8 / BF16 time):
// 3 tokens 1.69-1.81 -> 1.16-1.20, 4: 1.66-1.69 -> 1.22, 6: 1.76-1.81 -> 1.45-1.47.
template <class V, class = void>
struct F8FewTokens {
  static constexpr int value = 0;
};
template <class V>
struct F8FewTokens<V, decltype(void(V::kF8FewTokens))> {
  static constexpr int value = V::kF8FewTokens;
};

// E4M3 code -> its value as a BF16 (F8ToFloat's float32 has at most 4 significant bits, so its high half
// is the same value; its NaN is the quiet NaN 0x7fc00000 -> 0x7fc0).
inline uint16_t F8ToBf16(uint32_t b) {
  const float v = F8ToFloat(b);
  uint32_t bits;
  __builtin_memcpy(&bits, &v, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// Rows [r0, r0 + rows) of FP8 codes as BF16 values into buf (row-major, cols per row; HasF8Bf16).
template <class V>
inline void RowsF8DequantizeBf16(const GemmArgs& a, int64_t r0, int rows, uint16_t* buf) {
  const int64_t cols = a.w.cols;
  for (int i = 0; i < rows; ++i) {
    const uint8_t* q = a.w.f8 + (r0 + i) * cols;
    uint16_t* out = buf + i * cols;
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) V::StoreF8Bf16(q + k, out + k);
    for (; k < cols; ++k) out[k] = F8ToBf16(q[k]);
  }
}

// FP8 batches where V has StoreF8Bf16: each row block (Rows' kRowBlockBytes of BF16) has its codes written
// once per token block into `buf` as BF16 values, unscaled (exact), and Rows multiplies them as
// Encoding::kF8Bf16: each weight vector times its scale (V::LoadBf16Scaled), the value LoadF8 gives, then
// Tile's FMAs in Tile's order: the same bits as the tile's own decode and as the float32 row tiles. Half
// the bytes of those float32 tiles per token tile (they were bound by reading them from L2), one
// multiplication more per 16 weights than BF16 weights; no NaN, scale or subnormal case to look for (a NaN
// code is a BF16 NaN, any scale is multiplied as the formula says, no E4M3 value is a float32 subnormal).
// The buffer holds rows [r, r + rows) of the matrix, and sub.w.bf16 points `r` rows before it, so Tile's
// row indices and scale rows are the matrix's own (rows outside the block are never read).
template <class V, int R, int T>
inline void RowsF8ThroughBf16(const GemmArgs& a, int64_t t0, int64_t t1, uint16_t* buf) {
  GemmArgs sub = a;
  sub.w.f8 = nullptr;
  const int64_t cols = a.w.cols;
  const int64_t block = ThroughBf16BlockRows(cols, R);
  for (int64_t r = a.row_begin; r < a.row_end; r += block) {
    const int rows = static_cast<int>(a.row_end - r >= block ? block : a.row_end - r);
    RowsF8DequantizeBf16<V>(a, r, rows, buf);
    sub.w.bf16 = buf - r * cols;
    sub.row_begin = r;
    sub.row_end = r + rows;
    RowsOutOfLine<V, Encoding::kF8Bf16, R, T>(sub, t0, t1);
  }
}

// FP8 and MXFP4 batches of several token tiles (prefill of dense weights, popular experts): decoding a
// weight costs more than the FMAs of a few tokens, so each tile of rows is dequantized once per token
// block into `buf` (float32, the exact values LoadF8 / LoadMxfp4 give) and multiplied as F32 weights:
// the same bits (TileMxfp4 runs Tile's FMAs), the decode shared by every token tile of the block.
// Smaller batches decode in the tile.
template <class V, Encoding kEnc, int R, int T>
inline void RowsThroughF32(const GemmArgs& a, int64_t t0, int64_t t1, float* buf) {
  static_assert(kEnc == Encoding::kF8 || kEnc == Encoding::kMxfp4, "a float32 round trip for FP8 or MXFP4");
  const int64_t cols = a.w.cols;
  const auto dequantize = [&](int64_t r0, int rows) {
    if constexpr (kEnc == Encoding::kMxfp4) {
      RowsMxfp4Dequantize<V>(a, r0, rows, buf);
    } else {
      if constexpr (V::kF8Scan) {
        if constexpr (HasF8NanCheck<V>::value) {
          if (a.f8_check == F8TileCheck::kFused) {  // as Tile's: the scales first, the NaN codes while decoding
            if (F8ScalesNeedSafe(a, r0, rows) || !RowsF8Dequantize<V, true>(a, r0, rows, buf))
              RowsF8Dequantize<F8Checked<V>>(a, r0, rows, buf);
            return;
          }
        }
        const F8Tile kind = V::F8TileScan(a, r0, rows);
        if (kind == F8Tile::kChecked) {
          RowsF8Dequantize<F8Checked<V>>(a, r0, rows, buf);
          return;
        }
        if constexpr (V::kF8SubnormalLoads) {
          if (kind == F8Tile::kSubnormals) {
            RowsF8Dequantize<F8Subnormal<V>>(a, r0, rows, buf);
            return;
          }
        }
      }
      RowsF8Dequantize<V>(a, r0, rows, buf);
    }
  };
  GemmArgs sub = a;
  sub.w.f8 = nullptr;
  sub.w.f8_scale = nullptr;
  sub.w.mxfp4 = nullptr;
  sub.w.mxfp4_scales = nullptr;
  sub.w.f32 = buf;
  sub.row_begin = 0;
  int64_t r = a.row_begin;
  for (; r < a.row_end; r += R) {
    const int rows = a.row_end - r >= R ? R : static_cast<int>(a.row_end - r);
    dequantize(r, rows);
    sub.w.rows = rows;
    sub.row_end = rows;
    sub.y = a.y + r;
    sub.bias = a.bias != nullptr ? a.bias + r : nullptr;
    if (rows == R) {
      RowTile<V, Encoding::kF32, R, T>(sub, 0, t0, t1);
    } else {
      for (int i = 0; i < rows; ++i) {
        GemmArgs one = sub;
        one.w.f32 = buf + i * cols;
        one.w.rows = 1;
        one.row_end = 1;
        one.y = a.y + r + i;
        one.bias = a.bias != nullptr ? a.bias + r + i : nullptr;
        RowTile<V, Encoding::kF32, 1, T>(one, 0, t0, t1);
      }
    }
  }
}

// FP8 batches of at least V::kF8DequantMinTokens tokens dequantize each row tile into float32 once
// (RowsThroughF32) for all their token tiles; smaller ones decode E4M3 in the tile, once per token tile. Where
// that pays depends on how many tokens a tile holds and what the decode costs. Measured on a 2-core Zen 5
// (fp8_gemm_bench --threads 2, 48 matrices of 1408 x 2048, 2026-12-01, binaries alternated twice), FP8
// ms in the tile against through float32: AVX-512 (4-token tiles) 8 tokens 10.2-12.3 against 16.6-24.5,
// 12: 15.1-17.2 against 20.5-20.8, 16: 19.5-20.0 against 24.2-25.3, 32: 37.3-38.5 against 38.2-40.5, 64:
// 74.5-76.3 against 68.6-75.2, so 64; AVX2 (2-token tiles) 4 tokens 14.0-14.6 against 18.1-18.6, 8: 27.5
// against 27.7-28.0, 16: 54-55 against 45-46, so 8. (From 2 token tiles on before: the moved-bits decode
// of 2026-11-29 made the tile's decode cheaper than the float32 round trip it had been measured against.)
// AVX2 now goes through BF16 row blocks (RowsF8ThroughBf16) from those 8 tokens. On a 2-core Zen 2 VM
// (fp8_gemm_bench --threads 2 --rounds 3 --matrices 8, 1408 x 4096, 2026-12-03, binaries alternated twice,
// best ms; BF16 weights 7.0 / 13.0 / 50.0): 8 tokens 12.8-12.9 through float32, 12.8-12.9 through BF16;
// 16: 22.5-23.1 against 20.5-20.6; 64: 81.7-82.0 against 66.8-67.3. Below 8 the tile's decode stays
// ahead (BF16 blocks from 2 tokens: 2 tokens 7.0-7.1 against 3.7-3.8 in the tile, 4: 9.4 against 7.1-7.2,
// 6: 11.9 against 10.5-10.6): writing the block costs ~5 ms per 46 M codes there, shared by fewer tiles.
// AVX-512 went through BF16 row blocks too (Avx512::StoreF8Bf16, 2026-12-04), from 8 tokens: on the 2-core
// Zen 5 VM (fp8_gemm_bench --threads 2 --rounds 5 --matrices 8, 1408 x 4096, binaries alternated 2-3 times,
// best ms, tile (float32 row tiles from 64) against BF16 row blocks; BF16 weights in the same runs): 6 tokens
// 5.1-6.6 against 5.7-7.3 (3.3-4.0), 7: 5.5-6.9 against 5.9-7.0, 8: 7.2-8.5 against 6.1-8.0 (3.5-4.7), 12:
// 11.2-11.5 against 8.1-10.5, 16: 11.8-12.0 against 8.8-10.9 (5.9-6.4), 32: 22.8-23.1 against 14.6-18.7
// (10.1-12.3), 64: 56.0-57.5 against 26.7-33.0 (20.8-24.0).
template <class V, Encoding kEnc>
inline void RunTiles(const GemmArgs& a);

// A token block of a batch dequantized once: MXFP4 through BF16 row blocks where V has StoreMxfp4Bf16
// (RowsThroughBf16, buf of ThroughBf16BlockRows x cols BF16s), else through float32 row tiles
// (RowsThroughF32, buf of R x cols floats).
template <class V, Encoding kEnc, int R, int T>
inline void RowsDequantized(const GemmArgs& a, int64_t t0, int64_t t1, void* buf) {
  if constexpr (kEnc == Encoding::kMxfp4 && HasMxfp4Bf16<V>::value) {
    RowsThroughBf16<V, R, T>(a, t0, t1, static_cast<uint16_t*>(buf));
  } else if constexpr (kEnc == Encoding::kF8 && HasF8Bf16<V>::value) {
    RowsF8ThroughBf16<V, R, T>(a, t0, t1, static_cast<uint16_t*>(buf));
  } else {
    RowsThroughF32<V, kEnc, R, T>(a, t0, t1, static_cast<float*>(buf));
  }
}

template <class V, Encoding kEnc>
inline void Run(const GemmArgs& a) {
  // MXFP4 likewise from V::kMxfp4DequantMinTokens. Where a tile holds 2 tokens (AVX2), its block decode
  // (LoadMxfp4Block: 10 operations per 32 weights) once per token tile against BF16 row blocks decoded once
  // (RowsThroughBf16, StoreMxfp4Bf16; bench/mxfp4_gemm_bench.cc --rounds 3 --matrices 8 on a 2-core Zen 2,
  // 2026-12-03, binaries alternated twice, best ms, 5760 x 2880 / 2880 x 2880): in the tile 2 tokens 8.1 /
  // 4.6-5.9 against 12.3-15.6 / 6.6-6.7, 3: 14.0-14.2 / 7.1-10.4 against 15.9-21.9 / 8.4-8.8, 4: 16.9-17.5 /
  // 8.5-8.9 against 17.4-20.0 / 9.1-9.2, 6: 25.2-25.8 / 12.5-13.1 against 22.8-23.4 / 12.0-12.1, 8:
  // 34.2-34.9 / 16.5-17.4 against 26.6-26.7 / 13.8, so 6. At 10 and 16 tokens the BF16 blocks took 32.6-33.0
  // and 47.1-47.7 ms (5760 x 2880) where the float32 row tiles before them (from 16 tokens) or the tile took
  // 41.4-43.8 and 63.4-64.5 (BF16's tile reads 2 bytes a weight from L2 against float32's 4; BF16 weights
  // themselves 28-31 and 43-45). Where a tile holds 4 (AVX-512) the tile's decode measured cheaper
  // (0.69-0.75 x BF16's time against 1.2-1.3 x through float32 at 8-64 tokens, 2026-11-28), so never.
  constexpr bool kDecoded = kEnc == Encoding::kF8 || kEnc == Encoding::kMxfp4;
  if constexpr (kDecoded) {
    constexpr int kDequantMin = kEnc == Encoding::kF8 ? V::kF8DequantMinTokens : V::kMxfp4DequantMinTokens;
    constexpr bool kViaBf16 = (kEnc == Encoding::kMxfp4 && HasMxfp4Bf16<V>::value) ||  // RowsThroughBf16
                              (kEnc == Encoding::kF8 && HasF8Bf16<V>::value);         // RowsF8ThroughBf16
    if (a.n >= kDequantMin) {  // many token tiles share each decode
      const int64_t elems = (kViaBf16 ? ThroughBf16BlockRows(a.w.cols, V::kGemmRows) : V::kGemmRows) * a.w.cols;
      void* buf = __builtin_malloc(static_cast<unsigned long>(elems) * (kViaBf16 ? sizeof(uint16_t) : sizeof(float)));
      if (buf != nullptr) {
        for (int64_t t0 = 0; t0 < a.n; t0 += kTokenBlock) {
          const int64_t t1 = t0 + kTokenBlock < a.n ? t0 + kTokenBlock : a.n;
          if (t1 - t0 >= V::kGemmTokens) {
            RowsDequantized<V, kEnc, V::kGemmRows, V::kGemmTokens>(a, t0, t1, buf);
          } else {
            RowsDequantized<V, kEnc, V::kGemmRows, 2>(a, t0, t1, buf);  // RowTile handles a single remaining token too
          }
        }
        __builtin_free(buf);
        return;
      }  // no memory for the buffer: decode in the tiles below instead (the same bits)
    }
  }
  if constexpr (kEnc == Encoding::kMxfp4 && HasMxfp4Block<V>::value) {
    if (a.n > V::kMxfp4BlockMaxTokens) {
      RunTiles<Mxfp4Canonical<V>, kEnc>(a);
      return;
    }
    // TileMxfp4 reads x in V's lane order: each token's row permuted once per call (each thread's share of
    // rows permutes its own copy: cols / 16 permutes per token against rows x cols / 32 block decodes).
    const int64_t cols = a.w.cols, count = a.n * cols;
    constexpr int64_t kStackFloats = 8192;  // 32 KiB: a decode step's x (gpt-oss: 2880 columns)
    alignas(64) float stack[kStackFloats];
    float* px = count <= kStackFloats
                    ? stack
                    : static_cast<float*>(__builtin_malloc(static_cast<unsigned long>(count) * sizeof(float)));
    if (px != nullptr) {
      for (int64_t t = 0; t < a.n; ++t) {
        for (int64_t k = 0; k < cols; k += 16) V::PermuteMxfp4X(a.x + t * a.ldx + k, px + t * cols + k);
      }
      GemmArgs b = a;
      b.x = px;
      b.ldx = cols;
      RunTiles<V, kEnc>(b);
      if (px != stack) __builtin_free(px);
    } else {  // no memory for the permuted copy: LoadMxfp4 in canonical order (the same bits)
      RunTiles<Mxfp4Canonical<V>, kEnc>(a);
    }
    return;
  }
  RunTiles<V, kEnc>(a);
}

// Run's token loop: batches of one token tile or a few tokens, and decode, in register tiles.
template <class V, Encoding kEnc>
inline void RunTiles(const GemmArgs& a) {
  constexpr bool kStreamFew = V::kGemvRows == 1 && V::kGemmTokens <= kStreamedTokens &&
                              (kEnc == Encoding::kBf16 || kEnc == Encoding::kPlanes);
  // One-row tiles (the x86 GEMV, kStreamFew's batches) prefetch ahead or leave it to the hardware
  // (GemvPrefetch: same bits, only the speed differs by CPU).
  constexpr int kF8Few =
      kEnc == Encoding::kF8 && F8FewTokens<V>::value > V::kGemmTokens ? F8FewTokens<V>::value : V::kGemmTokens;
  const bool ahead = (a.prefetch == GemvPrefetch::kAuto ? ActiveGemvPrefetch() : a.prefetch) != GemvPrefetch::kHardware;
  for (int64_t t0 = 0; t0 < a.n; t0 += kTokenBlock) {
    const int64_t t1 = t0 + kTokenBlock < a.n ? t0 + kTokenBlock : a.n;
    if (kStreamFew && t1 - t0 >= 2 && t1 - t0 <= V::kGemmTokens &&
        (t1 - t0) * a.w.cols * static_cast<int64_t>(sizeof(float)) <= kStreamedXBytes) {
      // One row per tile holding every token of the batch (LeftoverTokens: 3 of 4 in one tile), the
      // row's weights streamed as in decode (kStreamedTokens).
      if (ahead) {
        Rows<V, kEnc, 1, V::kGemmTokens>(a, t0, t1);
      } else {
        Rows<V, kEnc, 1, V::kGemmTokens, false>(a, t0, t1);
      }
    } else if (kF8Few > V::kGemmTokens && t1 - t0 >= 3 &&
               t1 - t0 < V::kF8DequantMinTokens) {  // F8FewTokens
      Rows<V, kEnc, 1, kF8Few>(a, t0, t1);
    } else if (t1 - t0 >= V::kGemmTokens || (V::kGemmTokens > 3 && t1 - t0 == 3)) {  // 3: one tile (LeftoverTokens)
      Rows<V, kEnc, V::kGemmRows, V::kGemmTokens>(a, t0, t1);
    } else if (t1 - t0 >= 2) {  // a routed expert's few prefill tokens: widen each weight once per pair
      Rows<V, kEnc, V::kGemmRows, 2>(a, t0, t1);
    } else {
      // FP8 decodes 16 weights per FMA of the one accumulator chain a row has, so its GEMV is bound by
      // FMA latency with one row per tile: it takes kGemvRowsF8 independent rows (chains) at once; MXFP4
      // (a quarter of BF16's bytes) likewise kGemvRowsMxfp4.
      constexpr int kRows = kEnc == Encoding::kF8      ? V::kGemvRowsF8
                            : kEnc == Encoding::kMxfp4 ? V::kGemvRowsMxfp4
                                                       : V::kGemvRows;
      if (kRows == 1 && !ahead) {
        Rows<V, kEnc, kRows, 1, false>(a, t0, t1);
      } else {
        Rows<V, kEnc, kRows, 1>(a, t0, t1);
      }
    }
  }
}

// The entry point of one ISA's translation unit.
template <class V>
inline void Gemm(const GemmArgs& a) {
  if (a.n <= 0 || a.row_end <= a.row_begin) return;
  if (a.w.bf16 != nullptr) {
    Run<V, Encoding::kBf16>(a);
  } else if (a.w.f32 != nullptr) {
    Run<V, Encoding::kF32>(a);
  } else if (a.w.f8 != nullptr) {
    const SubnormalInputs<V> keep;  // the FP8 decode reads float32 subnormals
    GemmArgs resolved = a;
    if (resolved.f8_check == F8TileCheck::kAuto) resolved.f8_check = ActiveF8TileCheck();
    if constexpr (V::kF8Scan && HasF8NanCheck<V>::value) {
      // kFused, unless the range's first kF8SampleRows rows have many subnormal codes: the fused tiles take
      // them as float32 subnormal inputs, which cost more than the scan's pass and subnormal loads (bf16_gemm.h).
      const int64_t first_rows =
          a.row_end - a.row_begin < kF8SampleRows ? a.row_end - a.row_begin : kF8SampleRows;
      if (resolved.f8_check == F8TileCheck::kFused && first_rows > 0 &&
          V::F8TileScan(a, a.row_begin, static_cast<int>(first_rows)) == F8Tile::kSubnormals)
        resolved.f8_check = F8TileCheck::kScan;
    }
    Run<V, Encoding::kF8>(resolved);
  } else if (a.w.mxfp4 != nullptr) {
    Run<V, Encoding::kMxfp4>(a);
  } else {
    Run<V, Encoding::kPlanes>(a);
  }
}

}  // namespace zipmoe::kernels::gemm_tile
