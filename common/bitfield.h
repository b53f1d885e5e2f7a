// Bit-field decomposition of floating-point expert tensors (ZipMoE §2.2, §3.1 Fig. 5 ➊), per dtype.
// The E plane always holds one uint8 per value (the exponent field, compressed in K E-chunks); the SM
// plane holds sign and mantissa, stored raw in the SM-chunk, as densely as whole bytes allow:
//
//   BF16 s eeeeeeee mmmmmmm (8+7):  e[i] = (x >> 7) & 0xff
//        SM = [n] uint8 sm[i] = (x >> 8 & 0x80) | (x & 0x7f)                        1 byte/value
//   F32  s eeeeeeee m{23}:          e[i] = (x >> 23) & 0xff
//        SM = [n] uint16 LE lo[i] = x & 0xffff (mantissa bits 15..0), then
//             [n] uint8      hi[i] = (x >> 24 & 0x80) | (x >> 16 & 0x7f) (sign, mantissa 22..16)
//        so the top 16 bits of x are MergeBf16(e, hi): 3 bytes/value, both planes byte-aligned.
//   F16  s eeeee m{10}:             e[i] = (x >> 10) & 0x1f
//        SM = [n] uint8 lo[i] = x & 0xff (mantissa bits 7..0), then ceil(n/8) groups of 3 bytes:
//             group g holds, little-endian, the 3-bit fields t[8g+j] = (x >> 13 & 4) | (x >> 8 & 3)
//             (sign, mantissa 9..8) at bits [3j, 3j+3), j = 0..7; unused fields of the last group are 0.
//        n + 3·ceil(n/8) bytes: 11 bits/value.
//   F8_E4M3 s eeee mmm (OCP FP8 E4M3, DeepSeek-V3 / GLM FP8 checkpoints): e[i] = (x >> 3) & 0xf
//        SM = ceil(n/2) bytes of 4-bit fields t[i] = (x >> 4 & 8) | (x & 7) (sign, mantissa), value 2j in
//             the low nibble of byte j, 2j+1 in the high one (0 when n is odd): 4 bits/value.
//
// Each Merge is the exact inverse of its Split for every bit pattern (NaN payloads, Inf, subnormals,
// -0; all 65,536 for BF16/F16, all 256 for F8_E4M3). Pure functions; thread-safe; no alignment required.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/dtype.h"

namespace zipmoe {

//   in: [n] uint16 BF16 bit patterns -> e: [n] uint8 exponent plane, sm: [n] uint8 sign|mantissa.
void SplitBf16(const uint16_t* in, int64_t n, uint8_t* e, uint8_t* sm);
//   e, sm: [n] uint8 -> out: [n] uint16 BF16 bit patterns. out = (sm & 0x80) << 8 | e << 7 | (sm & 0x7f).
void MergeBf16(const uint8_t* e, const uint8_t* sm, int64_t n, uint16_t* out);

//   in: [n] uint32 F32 bit patterns -> e: [n] uint8, sm: [SmPlaneBytes(kF32, n)] = lo [n] uint16 LE | hi [n] uint8.
void SplitF32(const uint32_t* in, int64_t n, uint8_t* e, uint8_t* sm);
//   e: [n] uint8, sm: as SplitF32 -> out: [n] uint32. out = MergeBf16(e, hi) << 16 | lo.
void MergeF32(const uint8_t* e, const uint8_t* sm, int64_t n, uint32_t* out);
//   in: [n] uint16 F16 bit patterns -> e: [n] uint8 (0..31), sm: [SmPlaneBytes(kF16, n)] = lo [n] | packed t.
void SplitF16(const uint16_t* in, int64_t n, uint8_t* e, uint8_t* sm);
//   e: [n] uint8, sm: as SplitF16 -> out: [n] uint16. out = (t >> 2) << 15 | (e & 0x1f) << 10 | (t & 3) << 8 | lo.
void MergeF16(const uint8_t* e, const uint8_t* sm, int64_t n, uint16_t* out);

//   in: [n] uint8 F8_E4M3 bit patterns -> e: [n] uint8 (0..15), sm: [ceil(n/2)] packed sign|mantissa nibbles.
void SplitF8E4M3(const uint8_t* in, int64_t n, uint8_t* e, uint8_t* sm);
//   e: [n] uint8, sm: as SplitF8E4M3 -> out: [n] uint8. out = (t & 8) << 4 | (e & 0xf) << 3 | (t & 7).
void MergeF8E4M3(const uint8_t* e, const uint8_t* sm, int64_t n, uint8_t* out);

// Bytes of the SM plane of n values of `dtype` (BF16: n, F32: 3n, F16: n + 3·ceil(n/8), F8_E4M3:
// ceil(n/2)); 0 for n <= 0
// and for dtypes without an E/SM split (see HasExponentSplit).
uint64_t SmPlaneBytes(DType dtype, int64_t n);
// True for the dtypes the converter splits losslessly: BF16, F16, F32, F8_E4M3.
bool HasExponentSplit(DType dtype);
// Bits per value of the SM plane (BF16 8, F16 11, F32 24, F8_E4M3 4; 0 otherwise). The entropy bound of the
// compression ratio is (SmBitsPerValue + H(exponent)) / (8 · DTypeSize).
int SmBitsPerValue(DType dtype);

// Element ranges of K shards (E-chunks) over n elements: K contiguous [offset, count) ranges, sizes
// differing by at most one, larger ones first; K is clamped to [1, max(n,1)].
std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int n_shards);

// Shannon entropy in bits/symbol of a 256-bin byte histogram (0 for an empty histogram).
double ShannonEntropyBits(const uint64_t (&histogram)[256]);
// Adds the byte counts of data[0, n) to `histogram`.
void AccumulateHistogram(const uint8_t* data, int64_t n, uint64_t (&histogram)[256]);

}  // namespace zipmoe
