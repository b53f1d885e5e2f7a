// The fused FP8 NaN check of F8TileCheck::kFused (kernels/bf16_gemm.h; gemm_tile::F8Fused) in 256-bit
// registers, shared by the AVX2 and AVX-512 variants (both run AVX2). Include only from an x86 ISA
// translation unit compiled with at least -mavx2, inside that unit's anonymous namespace use
// (kernels/bf16_gemm_tile.h says why: internal linkage keeps one ISA's code from a CPU without it).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace zipmoe::kernels {
namespace {

// Codes | 0x80 are 0xff only for the E4M3 NaN codes 0x7f and 0xff (OCP FP8 E4M3: S.1111.111), so their
// running unsigned byte max is 0xff in some byte iff the codes passed through it held one. One load, one
// or and one max per 32 codes, against the scan's separate pass over the tile (F8TileScan).
struct F8NanCheckYmm {
  using F8NanAcc = __m256i;
  static __m256i F8NanZero() { return _mm256_setzero_si256(); }
  // The 32 codes at p.
  static __m256i F8NanMax32(__m256i acc, const uint8_t* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm256_max_epu8(acc, _mm256_or_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))));
  }
  // The 16 codes at p.
  static __m256i F8NanMax16(__m256i acc, const uint8_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_max_epu8(acc, _mm256_zextsi128_si256(_mm_or_si128(v, _mm_set1_epi8(static_cast<char>(0x80)))));
  }
  // Whether a NaN code went into acc.
  static bool F8NanFound(__m256i acc) {
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(acc, _mm256_set1_epi8(static_cast<char>(0xff)))) != 0;
  }
};

}  // namespace
}  // namespace zipmoe::kernels
