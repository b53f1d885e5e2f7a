// Fast, seekable, deterministic standard-normal streams for synthetic weights.
//
// A stream is identified by a 64-bit seed (one per tensor: TensorSeed(seed, name)). It is cut into
// fixed blocks of kNormalBlockElems elements; block b draws from its own SplitMix64 generator seeded by
// (stream seed, b). Any element range can therefore be produced independently, by any thread, and the
// values never depend on how the range was split or on the thread count.
//
// Sampler: inverse-CDF lookup. 32 random bits pick one of 65 536 equal-probability bins (upper 16 bits)
// and a position inside it (lower 16 bits, linear interpolation of the quantile function Φ⁻¹ between the
// bin edges). The two outermost bins (|z| > 4.168, probability 2/65 536) are sampled exactly with
// Marsaglia's normal-tail method, so the distribution has true Gaussian tails. Inside a bin the density
// is flat instead of Gaussian; for |z| < 3.7 a bin is narrower than the BF16 spacing at that value.
//
// Pure functions; thread-safe (the quantile table is built once, on first use, then read-only).
#pragma once

#include <cstdint>
#include <string_view>

namespace zipmoe::synth {

// Elements per independently seeded block of a stream.
constexpr int64_t kNormalBlockElems = 4096;

// SplitMix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// SplitMix64 generator: 64 random bits per call; passes BigCrush. Not thread-safe (one per thread).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform double in (0, 1], 53 random bits.
  double NextOpenUniform() { return (static_cast<double>(Next() >> 11) + 1.0) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64).
  uint64_t NextBelow(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

// Seed of one tensor's stream: a mix of the run seed and xxh64(name). Distinct names give
// independent streams; the same (seed, name) always gives the same stream.
uint64_t TensorSeed(uint64_t seed, std::string_view name);

// Writes standard-normal samples N(0, 1) for elements [begin, end) of stream `stream_seed` into
// out[0 .. end-begin). 0 <= begin <= end. float32 output.
void StandardNormals(uint64_t stream_seed, int64_t begin, int64_t end, float* out);

// Φ⁻¹(p) for p in (0, 1), double precision (Acklam's rational approximation plus one Halley step
// on erfc). Returns ∓infinity at p = 0 / 1.
double InverseNormalCdf(double p);

}  // namespace zipmoe::synth
