#include "common/bitfield.h"

#include <cmath>

namespace zipmoe {

// Plain loops over restrict pointers: GCC/Clang vectorise these at -O3 (16-32 values per iteration
// with SSE2/AVX2/NEON); bench/bitfield_bench.cc measures them.
void SplitBf16(const uint16_t* __restrict in, int64_t n, uint8_t* __restrict e, uint8_t* __restrict sm) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t x = in[i];
    e[i] = static_cast<uint8_t>(x >> 7);
    sm[i] = static_cast<uint8_t>(((x >> 8) & 0x80u) | (x & 0x7fu));
  }
}

void MergeBf16(const uint8_t* __restrict e, const uint8_t* __restrict sm, int64_t n, uint16_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t s = sm[i];
    out[i] = static_cast<uint16_t>(((s & 0x80u) << 8) | (static_cast<uint16_t>(e[i]) << 7) | (s & 0x7fu));
  }
}

std::vector<std::pair<int64_t, int64_t>> ShardRanges(int64_t n, int n_shards) {
  int64_t k = n_shards < 1 ? 1 : n_shards;
  if (k > n) k = n > 0 ? n : 1;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ranges.reserve(static_cast<size_t>(k));
  const int64_t base = n / k, extra = n % k;
  int64_t offset = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t count = base + (i < extra ? 1 : 0);
    ranges.emplace_back(offset, count);
    offset += count;
  }
  return ranges;
}

double ShannonEntropyBits(const uint64_t (&histogram)[256]) {
  uint64_t total = 0;
  for (uint64_t c : histogram) total += c;
  if (total == 0) return 0.0;
  double h = 0.0;
  for (uint64_t c : histogram) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / static_cast<double>(total);
    h -= p * std::log2(p);
  }
  return h;
}

void AccumulateHistogram(const uint8_t* data, int64_t n, uint64_t (&histogram)[256]) {
  // Four sub-histograms break the store-to-load dependency on repeated symbols.
  uint64_t h[4][256] = {};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    ++h[0][data[i]];
    ++h[1][data[i + 1]];
    ++h[2][data[i + 2]];
    ++h[3][data[i + 3]];
  }
  for (; i < n; ++i) ++h[0][data[i]];
  for (int s = 0; s < 256; ++s) histogram[s] += h[0][s] + h[1][s] + h[2][s] + h[3][s];
}

}  // namespace zipmoe
