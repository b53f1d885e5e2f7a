#include "common/bitfield.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "common/status.h"

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

void SplitF32(const uint32_t* __restrict in, int64_t n, uint8_t* __restrict e, uint8_t* __restrict sm) {
  uint8_t* __restrict hi = sm + 2 * n;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = in[i];
    e[i] = static_cast<uint8_t>(x >> 23);
    sm[2 * i] = static_cast<uint8_t>(x);  // lo plane, little-endian whatever the host order
    sm[2 * i + 1] = static_cast<uint8_t>(x >> 8);
    hi[i] = static_cast<uint8_t>(((x >> 24) & 0x80u) | ((x >> 16) & 0x7fu));
  }
}

void MergeF32(const uint8_t* __restrict e, const uint8_t* __restrict sm, int64_t n, uint32_t* __restrict out) {
  const uint8_t* __restrict hi = sm + 2 * n;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t s = hi[i];
    const uint32_t top = ((s & 0x80u) << 8) | (static_cast<uint32_t>(e[i]) << 7) | (s & 0x7fu);
    out[i] = top << 16 | static_cast<uint32_t>(sm[2 * i + 1]) << 8 | sm[2 * i];
  }
}

void SplitF16(const uint16_t* __restrict in, int64_t n, uint8_t* __restrict e, uint8_t* __restrict sm) {
  uint8_t* __restrict packed = sm + n;
  const int64_t groups = (n + 7) / 8;
  for (int64_t g = 0; g < groups; ++g) {
    uint32_t word = 0;  // eight 3-bit fields, little-endian
    for (int64_t j = 0; j < 8 && 8 * g + j < n; ++j) {
      const int64_t i = 8 * g + j;
      const uint16_t x = in[i];
      e[i] = static_cast<uint8_t>((x >> 10) & 0x1fu);
      sm[i] = static_cast<uint8_t>(x);
      word |= (((x >> 13) & 4u) | ((x >> 8) & 3u)) << (3 * j);
    }
    packed[3 * g] = static_cast<uint8_t>(word);
    packed[3 * g + 1] = static_cast<uint8_t>(word >> 8);
    packed[3 * g + 2] = static_cast<uint8_t>(word >> 16);
  }
}

void MergeF16(const uint8_t* __restrict e, const uint8_t* __restrict sm, int64_t n, uint16_t* __restrict out) {
  const uint8_t* __restrict packed = sm + n;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = i / 8, j = i % 8;
    const uint32_t word = packed[3 * g] | static_cast<uint32_t>(packed[3 * g + 1]) << 8 |
                          static_cast<uint32_t>(packed[3 * g + 2]) << 16;
    const uint32_t t = (word >> (3 * j)) & 7u;
    out[i] = static_cast<uint16_t>((t >> 2) << 15 | (e[i] & 0x1fu) << 10 | (t & 3u) << 8 | sm[i]);
  }
}

void SplitF8E4M3(const uint8_t* __restrict in, int64_t n, uint8_t* __restrict e, uint8_t* __restrict sm) {
  for (int64_t i = 0; i < n; ++i) e[i] = static_cast<uint8_t>((in[i] >> 3) & 0x0fu);
  for (int64_t j = 0; 2 * j < n; ++j) {
    const uint32_t a = in[2 * j];
    const uint32_t b = 2 * j + 1 < n ? in[2 * j + 1] : 0u;
    const uint32_t ta = ((a >> 4) & 8u) | (a & 7u), tb = ((b >> 4) & 8u) | (b & 7u);
    sm[j] = static_cast<uint8_t>(ta | tb << 4);
  }
}

void MergeF8E4M3(const uint8_t* __restrict e, const uint8_t* __restrict sm, int64_t n, uint8_t* __restrict out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t t = (sm[i / 2] >> (4 * (i % 2))) & 0x0fu;
    out[i] = static_cast<uint8_t>((t & 8u) << 4 | (e[i] & 0x0fu) << 3 | (t & 7u));
  }
}

namespace {

// MXFP4 nibble v -> its 2-bit sign|mantissa field, and back with the exponent field e.
inline uint32_t Mxfp4Field(uint32_t v) { return (v >> 3) << 1 | (v & 1u); }
inline uint32_t Mxfp4Nibble(uint32_t e, uint32_t t) { return (t >> 1) << 3 | (e & 3u) << 1 | (t & 1u); }

}  // namespace

void SplitMxfp4(const uint8_t* __restrict raw, int64_t n, uint8_t* __restrict e, uint8_t* __restrict sm) {
  ZM_CHECK(n >= 0 && n % 32 == 0) << "MXFP4 tensors hold whole blocks of 32 values, got n=" << n;
  for (int64_t j = 0; j < n / 2; ++j) {
    e[2 * j] = static_cast<uint8_t>((raw[j] >> 1) & 3u);
    e[2 * j + 1] = static_cast<uint8_t>((raw[j] >> 5) & 3u);
  }
  for (int64_t k = 0; k < n / 4; ++k) {  // values 4k..4k+3: the nibbles of raw bytes 2k and 2k+1
    const uint32_t a = raw[2 * k], b = raw[2 * k + 1];
    sm[k] = static_cast<uint8_t>(Mxfp4Field(a & 15u) | Mxfp4Field(a >> 4) << 2 | Mxfp4Field(b & 15u) << 4 |
                                 Mxfp4Field(b >> 4) << 6);
  }
  if (n > 0) std::memcpy(e + n, raw + n / 2, static_cast<size_t>(n / 32));
}

void MergeMxfp4(const uint8_t* __restrict e, const uint8_t* __restrict sm, int64_t n, uint8_t* __restrict raw) {
  ZM_CHECK(n >= 0 && n % 32 == 0) << "MXFP4 tensors hold whole blocks of 32 values, got n=" << n;
  for (int64_t j = 0; j < n / 2; ++j) {
    const uint32_t t = sm[j / 2] >> (4 * (j % 2));  // the fields of values 2j (bits 1..0) and 2j+1 (3..2)
    raw[j] = static_cast<uint8_t>(Mxfp4Nibble(e[2 * j], t & 3u) | Mxfp4Nibble(e[2 * j + 1], (t >> 2) & 3u) << 4);
  }
  if (n > 0) std::memcpy(raw + n / 2, e + n, static_cast<size_t>(n / 32));
}

Status CheckMxfp4Values(const uint8_t* raw, int64_t n) {
  if (n < 0 || n % 32 != 0)
    return Status::InvalidArgument(fmt::format("MXFP4 tensor of {} values: not whole blocks of 32", n));
  const uint8_t* scales = raw + n / 2;
  for (int64_t g = 0; g < n / 32; ++g) {
    const uint32_t s = scales[g];
    if (s == 0xffu)
      return Status::InvalidArgument(fmt::format(
          "MXFP4 block {} (values [{}, {})): scale 0xFF is NaN in the OCP MX spec", g, 32 * g, 32 * g + 32));
    if (s < 253u) continue;
    // |fp4| * 2^(s-127) >= 2^128 <=> |fp4| >= 2^(255-s): magnitude codes >= 4 (2.0) at 254, >= 6 (4.0) at 253.
    const uint32_t first_bad_code = s == 254u ? 4u : 6u;
    for (int64_t j = 0; j < 16; ++j) {
      const uint32_t byte = raw[16 * g + j];
      for (const uint32_t v : {byte & 15u, byte >> 4}) {
        if ((v & 7u) >= first_bad_code)
          return Status::InvalidArgument(fmt::format(
              "MXFP4 block {} (values [{}, {})): nibble 0x{:x} at scale {} overflows float32 (|value| >= 2^128)", g,
              32 * g, 32 * g + 32, v, s));
      }
    }
  }
  return Status::Ok();
}

uint64_t SmPlaneBytes(DType dtype, int64_t n) {
  if (n <= 0) return 0;
  const auto u = static_cast<uint64_t>(n);
  switch (dtype) {
    case DType::kBF16: return u;
    case DType::kF32: return 3 * u;
    case DType::kF16: return u + 3 * ((u + 7) / 8);
    case DType::kF8E4M3: return (u + 1) / 2;
    case DType::kMXFP4: return u % 32 == 0 ? u / 4 : 0;
    default: return 0;
  }
}

uint64_t EPlaneBytes(DType dtype, int64_t n) {
  if (n <= 0 || !HasExponentSplit(dtype)) return 0;
  const auto u = static_cast<uint64_t>(n);
  if (dtype == DType::kMXFP4) return u % 32 == 0 ? u + u / 32 : 0;
  return u;
}

bool HasExponentSplit(DType dtype) {
  return dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32 || dtype == DType::kF8E4M3 ||
         dtype == DType::kMXFP4;
}

int SmBitsPerValue(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return 8;
    case DType::kF16: return 11;
    case DType::kF32: return 24;
    case DType::kF8E4M3: return 4;
    case DType::kMXFP4: return 2;
    default: return 0;
  }
}

double RawBitsPerValue(DType dtype) {
  return dtype == DType::kMXFP4 ? 4.0 + 8.0 / 32.0 : 8.0 * DTypeSize(dtype);
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

std::vector<std::pair<int64_t, int64_t>> EChunkRanges(DType dtype, int64_t n, int n_shards) {
  if (dtype != DType::kMXFP4) return ShardRanges(n, n_shards);
  ZM_CHECK(n > 0 && n % 32 == 0 && n_shards >= 2)
      << "MXFP4 E-chunks: n=" << n << " (a positive multiple of 32), K=" << n_shards << " (at least 2)";
  std::vector<std::pair<int64_t, int64_t>> ranges = ShardRanges(n, n_shards - 1);
  ranges.emplace_back(n, n / 32);
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

void AccumulateMxfp4ScaleHistogram(const uint8_t* raw, int64_t n, uint64_t (&histogram)[256]) {
  if (n <= 0 || n % 32 != 0) return;
  AccumulateHistogram(raw + n / 2, n / 32, histogram);
}

}  // namespace zipmoe
