// Bf16Gemm's AMX-BF16 variant (kernels/bf16_gemm.h, GemmIsa::kAmxBf16). Compiled with
// -mamx-tile -mamx-bf16 -mavx512f -mavx512bw -mavx512vl -mavx512bf16 (kernels/CMakeLists.txt); called only
// after CPUID reports AMX-TILE + AMX-BF16 + AVX512_BF16, the OS enables the tile state (XCR0) and Linux
// grants this process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM; bf16_gemm.cc). Sapphire Rapids,
// Emerald Rapids, Granite Rapids.
//
// One TDPBF16PS multiplies a tile of 16 weight rows x 32 columns (the A tile, read straight from the
// row-major BF16 weights with the row stride) by 32 columns x 16 tokens of activations (the B tile, the
// activations repacked in pairs: B row p, column n = columns 2p, 2p+1 of token n) into 16 rows x 16 tokens
// of fp32 sums (the C tile). The fp32 activation enters as two BF16 halves, x = hi + lo (as the
// AVX-512-BF16 variant: hi = bf16(x) rounded to nearest even, lo = bf16(x - hi); 16 significant bits), so
// each 32-column block is two TDPBF16PS into the same C tile, hi first.
//
// Per output (row r, token t), its C element accumulates, for 32-column blocks b = 0 .. cols/32 - 1 and
// each half h = hi, lo: for p in [0, 16): c += W[r, 32b+2p] h[32b+2p]; c += W[r, 32b+2p+1] h[32b+2p+1]
// (the SDM's TDPBF16PS pseudo-code; Bf16GemmAmxReference is its scalar model; the hardware sums each
// instruction's 32 products in an order of its own, 27 of 750 outputs equal to that model on an Intel Xeon,
// so tests compare within a tolerance), then the remaining columns
// with fp32 FMAs on the exact activation, then the bias. Every output is one chain in that order whatever
// the tile it sits in (rows in tiles of 16, a partial tile through a zero-padded copy, tokens in blocks of
// up to 16, the last padded with zeros, packed 64 at a time), the thread split, the batch or the encoding (planes are reassembled
// to BF16 first), so results do not depend on them; they differ from the fp32-activation variants by the
// split and by the order (one chain instead of 16 lanes and a tree). F32, FP8 and MXFP4 weights take the
// AVX-512 variant.
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "kernels/bf16_gemm_isa.h"

namespace zipmoe::kernels {
namespace {

constexpr int kTileRows = 16;    // rows of W per A/C tile
constexpr int kTileTokens = 16;  // tokens per B/C tile at most (fewer when the product has fewer)
constexpr int kBlockCols = 32;   // BF16 columns per A tile row (64 bytes)
constexpr int64_t kChunkBlocks = 4;  // token tiles packed at once (64 tokens, as bf16_gemm_tile.h's kTokenBlock)

// The tile configuration (Intel SDM Vol. 1 §3.2, palette 1): tile 0 C (16 rows x N tokens, fp32), 4 A (16 rows
// x 64 bytes), 6 B hi, 7 B lo (16 pairs x N tokens), N = min(n, 16) the tokens of a tile; 1-3 and 5 unused.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

void ConfigureTiles(int64_t tokens) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 64 : 4 * tokens);
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

inline __m512 Bf16HalfToPs(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// hi and lo of x[0, 32) as two vectors of 16 pairs (uint32: columns 2p, 2p+1).
inline void SplitBlock(const float* x, __m512i* hi, __m512i* lo) {
  const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
  const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);  // BF16 [0..15] from x0, [16..31] from x1
  const __m512 r0 = _mm512_sub_ps(x0, Bf16HalfToPs(_mm512_castsi512_si256(h)));
  const __m512 r1 = _mm512_sub_ps(x1, Bf16HalfToPs(_mm512_extracti64x4_epi64(h, 1)));
  *hi = h;
  *lo = (__m512i)_mm512_cvtne2ps_pbh(r1, r0);
}

// r[i] = column i of the 16 x 16 uint32 matrix whose row j is r[j] (unpack 32, unpack 64, two 128-bit
// shuffles).
inline void Transpose16(__m512i* r) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0x88);
      t[8 * i + j + 4] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + j + 4], 0xdd);
    }
  }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

// Tokens [t0, t0 + count) (count <= N) of x, split into hi and lo and packed as B tiles: for block b,
// packed + (2 b) * 16 N is hi's tile, + (2 b + 1) * 16 N lo's, each 16 pair-rows x N tokens of uint32 (two
// BF16). Tokens past count are written as zeros.
void PackTokens(const GemmArgs& a, int64_t t0, int64_t count, int64_t kb, int64_t N, uint32_t* packed) {
  if (N == 1) {  // a one-token tile is the token's pairs as they are
    for (int64_t b = 0; b < kb; ++b) {
      __m512i h, l;
      SplitBlock(a.x + t0 * a.ldx + 32 * b, &h, &l);
      _mm512_storeu_si512(packed + 2 * b * kTileRows, h);
      _mm512_storeu_si512(packed + (2 * b + 1) * kTileRows, l);
    }
    return;
  }
  if (N <= 4) {  // a few tokens: scattered stores cost less than the 16 x 16 transposes
    alignas(64) uint32_t hi[kTileRows], lo[kTileRows];
    for (int64_t b = 0; b < kb; ++b) {
      uint32_t* tile_hi = packed + 2 * b * kTileRows * N;
      uint32_t* tile_lo = tile_hi + kTileRows * N;
      for (int64_t n = 0; n < N; ++n) {
        __m512i h = _mm512_setzero_si512(), l = _mm512_setzero_si512();
        if (n < count) SplitBlock(a.x + (t0 + n) * a.ldx + 32 * b, &h, &l);
        _mm512_store_si512(hi, h);
        _mm512_store_si512(lo, l);
        for (int p = 0; p < kTileRows; ++p) {
          tile_hi[p * N + n] = hi[p];
          tile_lo[p * N + n] = lo[p];
        }
      }
    }
    return;
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << N) - 1);  // the N tokens of a tile row
  for (int64_t b = 0; b < kb; ++b) {  // the tokens' pairs transposed in registers, missing tokens zero
    __m512i r[kTileTokens];
    alignas(64) uint32_t lo[kTileTokens][kTileRows];
    for (int t = 0; t < kTileTokens; ++t) {
      if (t < count) {
        __m512i l;
        SplitBlock(a.x + (t0 + t) * a.ldx + 32 * b, &r[t], &l);
        _mm512_store_si512(lo[t], l);
      } else {
        r[t] = _mm512_setzero_si512();
        _mm512_store_si512(lo[t], r[t]);
      }
    }
    uint32_t* tile_hi = packed + 2 * b * kTileRows * N;
    uint32_t* tile_lo = tile_hi + kTileRows * N;
    Transpose16(r);
    for (int p = 0; p < kTileRows; ++p) _mm512_mask_storeu_epi32(tile_hi + p * N, keep, r[p]);
    for (int t = 0; t < kTileTokens; ++t) r[t] = _mm512_load_si512(lo[t]);
    Transpose16(r);
    for (int p = 0; p < kTileRows; ++p) _mm512_mask_storeu_epi32(tile_lo + p * N, keep, r[p]);
  }
}

// A growing buffer per thread for the packed activations and the copied rows (a product split into many
// row ranges calls this variant many times; a fresh allocation each time cost more than the products).
struct ThreadBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  ~ThreadBuffer() { std::free(data); }
  void* Get(size_t want) {
    if (want > bytes) {
      std::free(data);
      bytes = (want + 4095) / 4096 * 4096;
      data = std::aligned_alloc(64, bytes);
      if (data == nullptr) bytes = 0;
    }
    return data;
  }
};

// Weight (r, k) from BF16 bits or the two planes (the tail columns).
inline float WeightAt(const GemmWeights& w, int64_t r, int64_t k) {
  const int64_t i = r * w.cols + k;
  const uint32_t bits = w.bf16 != nullptr ? static_cast<uint32_t>(w.bf16[i]) << 16
                                          : (w.sm[i] & 0x80u) << 24 | static_cast<uint32_t>(w.e[i]) << 23 |
                                                (w.sm[i] & 0x7fu) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The outputs of rows [r, r + nrows) (nrows <= 16) and tokens [t0, t0 + count) from the C tile `c`
// (16 x N fp32, row-major), finished with the tail columns and the bias.
void Finish(const GemmArgs& a, const float* c, int64_t r, int64_t nrows, int64_t t0, int64_t count, int64_t N,
            int64_t kb) {
  const int64_t cols = a.w.cols;
  for (int64_t i = 0; i < nrows; ++i) {
    for (int64_t n = 0; n < count; ++n) {
      const float* xt = a.x + (t0 + n) * a.ldx;
      float s = c[i * N + n];
      for (int64_t k = 32 * kb; k < cols; ++k) s = __builtin_fmaf(WeightAt(a.w, r + i, k), xt[k], s);
      if (a.bias != nullptr) s += a.bias[r + i];
      a.y[(t0 + n) * a.ldy + r + i] = s;
    }
  }
}

// Rows [r, r + nrows) (nrows <= 16) of the weights from their planes, or the BF16 rows after the last full
// tile, as BF16 rows of `cols` into dst (row i at dst + i cols), the rows after nrows zero.
void CopyRows(const GemmWeights& w, int64_t r, int64_t nrows, uint16_t* dst) {
  const int64_t cols = w.cols;
  for (int64_t i = 0; i < nrows; ++i) {
    uint16_t* out = dst + i * cols;
    if (w.bf16 != nullptr) {
      std::memcpy(out, w.bf16 + (r + i) * cols, static_cast<size_t>(cols) * 2);
      continue;
    }
    const uint8_t* e = w.e + (r + i) * cols;
    const uint8_t* sm = w.sm + (r + i) * cols;
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
      const __m512i ev = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(e + k)));
      const __m512i sv = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sm + k)));
      const __m512i sign = _mm512_slli_epi16(_mm512_and_si512(sv, _mm512_set1_epi16(0x80)), 8);
      _mm512_storeu_si512(out + k, _mm512_or_si512(_mm512_or_si512(sign, _mm512_slli_epi16(ev, 7)),
                                                  _mm512_and_si512(sv, _mm512_set1_epi16(0x7f))));
    }
    for (; k < cols; ++k)
      out[k] = static_cast<uint16_t>((sm[k] & 0x80u) << 8 | static_cast<uint32_t>(e[k]) << 7 | (sm[k] & 0x7fu));
  }
  std::memset(dst + nrows * cols, 0, static_cast<size_t>((kTileRows - nrows) * cols) * 2);
}

// One C tile: 16 BF16 rows at w (row i at w + i ldw; only nrows written out, as rows [r, r + nrows)) times
// one token block of `packed` (count tokens from t0, N per tile), one k loop. The A tile is loaded straight
// from the rows: 16 row streams, which this VM's memory served as fast as a plain sequential read (12.4 vs
// 11.9 GB/s on one thread); 64 rows side by side (four C tiles) read 9 % slower, software prefetch of every
// row slower still, and copying the rows into tile order first 30 % slower.
void Tile(const GemmArgs& a, const uint16_t* w, int64_t ldw, int64_t r, int64_t nrows, const uint32_t* packed,
          int64_t t0, int64_t count, int64_t N, int64_t kb) {
  _tile_zero(0);
  for (int64_t b = 0; b < kb; ++b) {
    _tile_loadd(6, packed + 2 * b * kTileRows * N, 4 * N);
    _tile_loadd(7, packed + (2 * b + 1) * kTileRows * N, 4 * N);
    _tile_loadd(4, w + 32 * b, ldw * 2);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(0, 4, 7);
  }
  alignas(64) float c[kTileRows * kTileTokens];
  _tile_stored(0, c, 4 * N);
  Finish(a, c, r, nrows, t0, count, N, kb);
}

}  // namespace

void Bf16GemmAmxBf16(const GemmArgs& a) {
  if (a.n <= 0 || a.row_end <= a.row_begin) return;
  if (a.w.bf16 == nullptr && !a.w.planes()) {  // F32, FP8 or MXFP4 weights
    Bf16GemmAvx512(a);
    return;
  }
  const int64_t cols = a.w.cols, kb = cols / kBlockCols;
  const int64_t N = a.n < kTileTokens ? a.n : kTileTokens;  // tokens per tile
  const int64_t token_blocks = (a.n + N - 1) / N;
  const int64_t chunk = token_blocks < kChunkBlocks ? token_blocks : kChunkBlocks;  // blocks packed at once
  const int64_t block_elems = (kb > 0 ? kb : 1) * 2 * kTileRows * N;  // uint32 per packed token block
  const size_t packed_bytes = static_cast<size_t>(chunk * block_elems) * 4;
  // 16 rows copied (planes, or the BF16 rows after the last full tile).
  const bool need_copy = a.w.bf16 == nullptr || (a.row_end - a.row_begin) % kTileRows != 0;
  const size_t copy_bytes = static_cast<size_t>(kTileRows * (cols > 0 ? cols : 1)) * 2;
  static thread_local ThreadBuffer packed_buffer, copy_buffer;
  auto* packed = static_cast<uint32_t*>(packed_buffer.Get(packed_bytes));
  auto* copy = need_copy ? static_cast<uint16_t*>(copy_buffer.Get(copy_bytes)) : nullptr;
  if (packed == nullptr || (need_copy && copy == nullptr)) {
    Bf16GemmAvx512(a);  // no memory for the packed operands: the fp32-activation variant
    return;
  }
  ConfigureTiles(N);
  // Tokens in chunks of up to kChunkBlocks tiles (their packed activations stay in L2, and the buffer
  // stays small for a long prompt), every row tile of the range streaming by for each chunk.
  for (int64_t tb0 = 0; tb0 < token_blocks; tb0 += chunk) {
    const int64_t tb1 = tb0 + chunk < token_blocks ? tb0 + chunk : token_blocks;
    for (int64_t tb = tb0; tb < tb1; ++tb) {
      const int64_t t0 = tb * N, count = a.n - t0 < N ? a.n - t0 : N;
      PackTokens(a, t0, count, kb, N, packed + (tb - tb0) * block_elems);
    }
    for (int64_t r = a.row_begin; r < a.row_end; r += kTileRows) {
      const int64_t nrows = a.row_end - r < kTileRows ? a.row_end - r : kTileRows;
      const uint16_t* w = copy;
      if (a.w.bf16 != nullptr && nrows == kTileRows) {
        w = a.w.bf16 + r * cols;
      } else {
        CopyRows(a.w, r, nrows, copy);
      }
      for (int64_t tb = tb0; tb < tb1; ++tb) {
        const int64_t t0 = tb * N, count = a.n - t0 < N ? a.n - t0 : N;
        Tile(a, w, cols, r, nrows, packed + (tb - tb0) * block_elems, t0, count, N, kb);
      }
    }
  }
  _tile_release();
}

}  // namespace zipmoe::kernels
