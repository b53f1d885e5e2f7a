// Inverse-CDF table sampler for standard normals (see gaussian.h).
#include "services/synth/gaussian.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>

#include "common/hash.h"

namespace zipmoe::synth {
namespace {

constexpr int kTableBits = 16;
constexpr int kTableSize = 1 << kTableBits;  // equal-probability bins of the quantile function

// Bin i covers probabilities [i, i+1) / kTableSize; inside it z = base[i] + f * slope[i], f in (0, 1).
struct QuantileTable {
  std::array<float, kTableSize> base;
  std::array<float, kTableSize> slope;
  double tail_start;  // Φ⁻¹(1 - 1/kTableSize) ≈ 4.168: the outer bins sample |z| > tail_start
};

std::unique_ptr<QuantileTable> BuildQuantileTable() {
  auto table = std::make_unique<QuantileTable>();
  std::array<double, kTableSize + 1> edge{};
  for (int i = 1; i < kTableSize; ++i) edge[i] = InverseNormalCdf(static_cast<double>(i) / kTableSize);
  for (int i = 1; i + 1 < kTableSize; ++i) {
    table->base[i] = static_cast<float>(edge[i]);
    table->slope[i] = static_cast<float>(edge[i + 1] - edge[i]);
  }
  table->base[0] = table->slope[0] = 0.0f;
  table->base[kTableSize - 1] = table->slope[kTableSize - 1] = 0.0f;
  table->tail_start = edge[kTableSize - 1];
  return table;
}

const QuantileTable& Table() {
  static const std::unique_ptr<QuantileTable> table = BuildQuantileTable();
  return *table;
}

// |z| given |z| > t (Marsaglia 1964): x = -ln(u1)/t, y = -ln(u2), accept when 2y > x².
double SampleNormalTail(double t, SplitMix64& rng) {
  for (;;) {
    double x = -std::log(rng.NextOpenUniform()) / t;
    double y = -std::log(rng.NextOpenUniform());
    if (2.0 * y > x * x) return t + x;
  }
}

inline float SampleFrom32(uint32_t bits, const QuantileTable& table, SplitMix64& rng) {
  const uint32_t bin = bits >> 16;
  const float frac = (static_cast<float>(bits & 0xffffu) + 0.5f) * (1.0f / 65536.0f);
  if (bin == 0) return static_cast<float>(-SampleNormalTail(table.tail_start, rng));
  if (bin == kTableSize - 1) return static_cast<float>(SampleNormalTail(table.tail_start, rng));
  return table.base[bin] + frac * table.slope[bin];
}

// Fills a whole block (n <= kNormalBlockElems elements, fewer only for a prefix).
void FillBlock(uint64_t stream_seed, int64_t block, int64_t n, float* out) {
  const QuantileTable& table = Table();
  SplitMix64 rng(Mix64(stream_seed ^ Mix64(static_cast<uint64_t>(block) + 0x5851F42D4C957F2Dull)));
  int64_t i = 0;
  for (; i + 1 < n; i += 2) {
    const uint64_t r = rng.Next();
    out[i] = SampleFrom32(static_cast<uint32_t>(r >> 32), table, rng);
    out[i + 1] = SampleFrom32(static_cast<uint32_t>(r), table, rng);
  }
  if (i < n) out[i] = SampleFrom32(static_cast<uint32_t>(rng.Next() >> 32), table, rng);
}

}  // namespace

uint64_t TensorSeed(uint64_t seed, std::string_view name) {
  return Mix64(Mix64(seed) ^ Xxh64(name.data(), name.size()));
}

void StandardNormals(uint64_t stream_seed, int64_t begin, int64_t end, float* out) {
  float scratch[kNormalBlockElems];
  int64_t pos = begin;
  while (pos < end) {
    const int64_t block = pos / kNormalBlockElems;
    const int64_t block_start = block * kNormalBlockElems;
    const int64_t block_end = std::min(block_start + kNormalBlockElems, end);
    if (pos == block_start && block_end - block_start == kNormalBlockElems) {
      FillBlock(stream_seed, block, kNormalBlockElems, out + (pos - begin));
    } else {
      // Partial block: the sample at index j only depends on draws for indices <= j (tail draws
      // are consumed in order), so generating the prefix up to block_end is enough.
      FillBlock(stream_seed, block, block_end - block_start, scratch);
      std::copy(scratch + (pos - block_start), scratch + (block_end - block_start), out + (pos - begin));
    }
    pos = block_end;
  }
}

double InverseNormalCdf(double p) {
  if (p <= 0.0) return -std::numeric_limits<double>::infinity();
  if (p >= 1.0) return std::numeric_limits<double>::infinity();
  // Acklam (2003) coefficients, relative error < 1.15e-9 before refinement.
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                                 1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                                 6.680131188771972e+01,  -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                                 -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  double x;
  if (p < kLow) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else if (p <= 1.0 - kLow) {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  } else {
    const double q = std::sqrt(-2.0 * std::log(1.0 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  }
  // One Halley step on F(x) = Φ(x) - p brings the error to double precision.
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  constexpr double kSqrt2Pi = 2.5066282746310002;
  const double u = e * kSqrt2Pi * std::exp(x * x / 2.0);
  return x - u / (1.0 + x * u / 2.0);
}

}  // namespace zipmoe::synth
