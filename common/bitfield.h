// Bit-field decomposition of floating-point expert tensors (ZipMoE §2.2, §3.1 Fig. 5 ➊), per dtype.
// The E plane holds one uint8 per value (the exponent field, compressed in K E-chunks; MXFP4's also
// carries its block scales, EPlaneBytes); the SM
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
//   MXFP4 (OCP MX FP4 E2M1 nibbles s ee m + one E8M0 scale per 32 values; gpt-oss's experts). The raw
//        tensor of n values (n % 32 == 0; layout in common/dtype.h) is n/2 bytes of nibbles (value 2j in the
//        low nibble of byte j, 2j+1 in the high one), then n/32 scale bytes.
//        E = [n] uint8 e[i] = (v >> 1) & 3 (the 2-bit exponent field of value i's nibble v), then the
//             n/32 scale bytes verbatim: EPlaneBytes = n + n/32. The scales are exponents too (E8M0, a
//             power of two each), low in entropy, so they are compressed with the fields: in an E-chunk
//             of their own (common/checkpoint/manifest.h EChunkDType), the fields in the others.
//        SM = n/4 bytes of 2-bit fields t[i] = (v >> 3) << 1 | (v & 1) (sign in bit 1, mantissa in bit 0),
//             value i at bits [2(i%4), 2(i%4)+2) of byte i/4 (value 4k in the low bits of byte k): 2 bits/value.
//
// Each Merge is the exact inverse of its Split for every bit pattern (NaN payloads, Inf, subnormals,
// -0; all 65,536 for BF16/F16, all 256 for F8_E4M3, every nibble and scale byte for MXFP4). Pure
// functions; thread-safe; no alignment required.
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

//   raw: [n/2 + n/32] bytes, an MXFP4 tensor (blocks, then scales) -> e: [EPlaneBytes(kMXFP4, n) = n + n/32]
//   = the exponent fields [n] (0..3), then the scales [n/32]; sm: [SmPlaneBytes(kMXFP4, n) = n/4] packed
//   sign|mantissa fields.
// n must be a non-negative multiple of 32 (ZM_CHECK: every MXFP4 shape is whole blocks, and
// ReadManifest refuses records that are not; validate data from elsewhere with CheckMxfp4Values first).
void SplitMxfp4(const uint8_t* raw, int64_t n, uint8_t* e, uint8_t* sm);
//   e, sm: as SplitMxfp4 (bits 7..2 of the n fields ignored) -> raw: [n/2 + n/32] bytes. Nibble of value i:
//   (t >> 1) << 3 | (e & 3) << 1 | (t & 1); the scales copied from e + n. n as SplitMxfp4.
void MergeMxfp4(const uint8_t* e, const uint8_t* sm, int64_t n, uint8_t* raw);
// Checks an MXFP4 tensor of n values (raw as SplitMxfp4) for what has no finite fp32 value: a scale 0xFF
// (NaN in the OCP MX spec) or a nibble whose value overflows fp32 (|fp4| · 2^(scale-127) >= 2^128: scale
// 254 with |fp4| >= 2, scale 253 with |fp4| >= 4). The converter calls it before storing a tensor; the
// kernels do not check (kernels/bf16_gemm.h says what they compute then). Reads the n/32 scales, and the
// blocks of scales >= 253 only.
// Errors: kInvalidArgument if n is negative or not a multiple of 32, or naming the first bad block (its
// index n/32-wise, the scale, and the nibble for an overflow).
Status CheckMxfp4Values(const uint8_t* raw, int64_t n);

// Bytes of the SM plane of n values of `dtype` (BF16: n, F32: 3n, F16: n + 3·ceil(n/8), F8_E4M3:
// ceil(n/2), MXFP4: n/4); 0 for n <= 0, for MXFP4 when n is not a multiple of 32, and for
// dtypes without an E/SM split (see HasExponentSplit).
uint64_t SmPlaneBytes(DType dtype, int64_t n);
// Bytes of the (decoded) E plane of n values of `dtype`: n (one exponent field a byte), MXFP4 n + n/32 (its
// scales follow the fields); 0 as SmPlaneBytes.
uint64_t EPlaneBytes(DType dtype, int64_t n);
// True for the dtypes the converter splits losslessly: BF16, F16, F32, F8_E4M3, MXFP4.
bool HasExponentSplit(DType dtype);
// Bits per value of the SM plane (BF16 8, F16 11, F32 24, F8_E4M3 4, MXFP4 2; 0 otherwise). The entropy
// bound of the compression ratio is (SmBitsPerValue + H(exponent) + MXFP4's H(scale) / 32) / RawBitsPerValue.
int SmBitsPerValue(DType dtype);
// Bits per value of the raw tensor: 8 · DTypeSize, 4.25 for MXFP4.
double RawBitsPerValue(DType dtype);

// Element ranges of K shards (E-chunks) over n elements: K contiguous [offset, count) ranges, sizes
// differing by at most one, larger ones first; K is clamped to [1, max(n,1)].
std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int n_shards);

// The E-chunks of a tensor of n values of `dtype` split K ways, as ranges of its E plane
// ([0, EPlaneBytes(dtype, n))): ShardRanges(n, K); for MXFP4, ShardRanges(n, K - 1) over the exponent fields
// and then one range [n, n + n/32) holding the scales (K >= 2, n a positive multiple of 32: ZM_CHECK; compress
// refuses K = 1 for MXFP4 before calling this), so no E-chunk mixes 2-bit fields with scale bytes.
std::vector<std::pair<int64_t, int64_t>> EChunkRanges(DType dtype, int64_t n, int n_shards);

// Shannon entropy in bits/symbol of a 256-bin byte histogram (0 for an empty histogram).
double ShannonEntropyBits(const uint64_t (&histogram)[256]);
// Adds the byte counts of data[0, n) to `histogram`. On an E plane: the exponent histogram of any dtype
// (MXFP4's holds 0..3 only).
void AccumulateHistogram(const uint8_t* data, int64_t n, uint64_t (&histogram)[256]);
// Adds the counts of the n/32 E8M0 scale bytes of an MXFP4 tensor of n values (raw as SplitMxfp4; the
// scales start at raw + n/2) to `histogram`; nothing when n is not a positive multiple of 32. For the
// compress report's scale entropy (ShannonEntropyBits).
void AccumulateMxfp4ScaleHistogram(const uint8_t* raw, int64_t n, uint64_t (&histogram)[256]);

}  // namespace zipmoe
