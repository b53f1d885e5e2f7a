// Bit-field decomposition of BF16 tensors (ZipMoE §2.2, §3.1 Fig. 5 ➊).
//
// BF16 bits: s eeeeeeee mmmmmmm. The E plane holds the 8 exponent bits of each value,
// e[i] = (x >> 7) & 0xff; the SM plane holds sign and mantissa, sm[i] = (x >> 8 & 0x80) | (x & 0x7f).
// Merge is the exact inverse for all 65,536 bit patterns (NaN, Inf, subnormals, -0).
// Pure functions; thread-safe; vectorised by the compiler (no alignment required).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace zipmoe {

//   in: [n] uint16 BF16 bit patterns -> e: [n] uint8 exponent plane, sm: [n] uint8 sign|mantissa.
void SplitBf16(const uint16_t* in, int64_t n, uint8_t* e, uint8_t* sm);
//   e, sm: [n] uint8 -> out: [n] uint16 BF16 bit patterns. out = (sm & 0x80) << 8 | e << 7 | (sm & 0x7f).
void MergeBf16(const uint8_t* e, const uint8_t* sm, int64_t n, uint16_t* out);

// Element ranges of K shards (E-chunks) over n elements: K contiguous [offset, count) ranges, sizes
// differing by at most one, larger ones first; K is clamped to [1, max(n,1)].
std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int n_shards);

// Shannon entropy in bits/symbol of a 256-bin byte histogram (0 for an empty histogram).
double ShannonEntropyBits(const uint64_t (&histogram)[256]);
// Adds the byte counts of data[0, n) to `histogram`.
void AccumulateHistogram(const uint8_t* data, int64_t n, uint64_t (&histogram)[256]);

}  // namespace zipmoe
