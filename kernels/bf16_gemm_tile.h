// Internal to kernels/: the register-tiled loops of Bf16Gemm (kernels/bf16_gemm.h), written once
// over a 16-lane vector type V that each ISA's translation unit supplies:
//   V::Acc, V::Vec           16 fp32 lanes (one or several hardware registers)
//   V::Zero()                all-zero accumulator
//   V::LoadX(const float*)   16 activations
//   V::LoadBf16(const uint16_t*)                 16 BF16 weights widened to fp32 (exact)
//   V::LoadPlanes(const uint8_t* e, const uint8_t* sm)   16 weights from the two planes (exact)
//   V::LoadX also loads 16 float32 weights (GemmWeights::f32)
//   V::Fma(w, x, acc)        acc + w * x per lane, one rounding
//   V::Reduce(acc)           the fixed tree of bf16_gemm.h: lanes j + j+8, then j + j+4, j + j+2, j + j+1
//   kGemvRows                rows per tile when tokens are computed one by one (decode); x86: 1,
//                            measured fastest (issue 35): each row is one stream, the next row prefetched
//   kGemmRows, kGemmTokens   rows x tokens per tile for batches and prefill
// Include only from an ISA translation unit and define V in an anonymous namespace there: every
// instantiation (compiled with that ISA's flags) then has internal linkage and is never picked by
// the linker for a caller on a CPU without the ISA. Uses builtins only, no std:: inline functions.
#pragma once

#include <cstdint>

#include "kernels/bf16_gemm.h"

namespace zipmoe::kernels::gemm_tile {

// How the weights are stored (GemmWeights).
enum class Encoding { kBf16, kF32, kPlanes };

// Weight `index` of `w` as float32 (the scalar tails). Templated on V, unused inside, so that each
// ISA translation unit's instantiation has internal linkage like every other template here.
template <class V, Encoding kEnc>
inline float WeightAt(const GemmWeights& w, int64_t index) {
  if (kEnc == Encoding::kF32) return w.f32[index];
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

// Tokens per outer block: their activations stay in L2 while every row tile of the range streams by.
constexpr int64_t kTokenBlock = 64;

// Rows [r, r + R) x tokens [t, t + T): the 16-lane body, the reduction, the tail and the bias.
template <class V, Encoding kEnc, int R, int T>
inline void Tile(const GemmArgs& a, int64_t r, int64_t t) {
  const int64_t cols = a.w.cols;
  const int64_t kb = cols / 16;
  typename V::Acc acc[R][T];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) acc[i][j] = V::Zero();
  }
  // The next tile's rows are prefetched at the same columns: hardware prefetchers stop at 4 KiB
  // page boundaries, and a weight row is often exactly one page (hidden 2048 in BF16) of a
  // memory-mapped checkpoint, so without this every row starts with a full memory latency.
  const int64_t next_rows = a.w.rows - r - R < R ? a.w.rows - r - R : R;  // rows of the next tile (<= 0: none)
  for (int64_t b = 0; b < kb; ++b) {
    const int64_t k = b * 16;
    if (next_rows > 0) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        if (i >= next_rows) break;
        const int64_t off = (r + R + i) * cols + k;
        if (kEnc == Encoding::kPlanes) {
          __builtin_prefetch(a.w.e + off);
          __builtin_prefetch(a.w.sm + off);
        } else if (kEnc == Encoding::kF32) {
          __builtin_prefetch(a.w.f32 + off);
        } else {
          __builtin_prefetch(a.w.bf16 + off);
        }
      }
    }
    typename V::Vec x[T];
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) x[j] = V::LoadX(a.x + (t + j) * a.ldx + k);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const int64_t off = (r + i) * cols + k;
      const typename V::Vec w = kEnc == Encoding::kPlanes ? V::LoadPlanes(a.w.e + off, a.w.sm + off)
                                : kEnc == Encoding::kF32  ? V::LoadX(a.w.f32 + off)
                                                          : V::LoadBf16(a.w.bf16 + off);
#pragma GCC unroll 8
      for (int j = 0; j < T; ++j) acc[i][j] = V::Fma(w, x[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    const int64_t row = (r + i) * cols;
#pragma GCC unroll 8
    for (int j = 0; j < T; ++j) {
      const float* xt = a.x + (t + j) * a.ldx;
      float s = V::Reduce(acc[i][j]);
      for (int64_t k = kb * 16; k < cols; ++k) s = __builtin_fmaf(WeightAt<V, kEnc>(a.w, row + k), xt[k], s);
      if (a.bias != nullptr) s += a.bias[r + i];
      a.y[(t + j) * a.ldy + r + i] = s;
    }
  }
}

// Rows [r, r + R) for tokens [t0, t1): tiles of T tokens, then the remaining tokens one by one.
template <class V, Encoding kEnc, int R, int T>
inline void RowTile(const GemmArgs& a, int64_t r, int64_t t0, int64_t t1) {
  int64_t t = t0;
  for (; t + T <= t1; t += T) Tile<V, kEnc, R, T>(a, r, t);
  for (; t < t1; ++t) Tile<V, kEnc, R, 1>(a, r, t);
}

// Rows [row_begin, row_end) for tokens [t0, t1) in tiles of R rows (then single rows).
template <class V, Encoding kEnc, int R, int T>
inline void Rows(const GemmArgs& a, int64_t t0, int64_t t1) {
  int64_t r = a.row_begin;
  for (; r + R <= a.row_end; r += R) RowTile<V, kEnc, R, T>(a, r, t0, t1);
  for (; r < a.row_end; ++r) RowTile<V, kEnc, 1, T>(a, r, t0, t1);
}

template <class V, Encoding kEnc>
inline void Run(const GemmArgs& a) {
  for (int64_t t0 = 0; t0 < a.n; t0 += kTokenBlock) {
    const int64_t t1 = t0 + kTokenBlock < a.n ? t0 + kTokenBlock : a.n;
    if (t1 - t0 >= V::kGemmTokens) {
      Rows<V, kEnc, V::kGemmRows, V::kGemmTokens>(a, t0, t1);
    } else if (t1 - t0 >= 2) {  // a routed expert's few prefill tokens: widen each weight once per pair
      Rows<V, kEnc, V::kGemmRows, 2>(a, t0, t1);
    } else {
      Rows<V, kEnc, V::kGemvRows, 1>(a, t0, t1);
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
  } else {
    Run<V, Encoding::kPlanes>(a);
  }
}

}  // namespace zipmoe::kernels::gemm_tile
