// Shared cases for the BF16 recovery tests (recovery_test.cc: reference and GPU kernel;
// recovery_cpu_test.cc: CPU fast path): sizes around every vector width, and pointer offsets that
// put e, sm and out at every alignment the CPU loops and the GPU kernel paths distinguish.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace zipmoe::kernels::recovery_cases {

// Sizes: empty, below/at/above the 16- and 32-element vector widths, odd page-sized, and a large
// odd size whose tail is not a multiple of any width.
inline const std::vector<int64_t>& RecoverySizes() {
  static const std::vector<int64_t> sizes = {0, 1, 3, 4, 5, 15, 16, 17, 31, 32, 33, 4095, (int64_t{1} << 20) + 3};
  return sizes;
}

// Offsets from 64-byte-aligned bases: e and sm in bytes, out in uint16 elements (0..15 each).
struct Offsets {
  int e, sm, out;
  std::string ToString() const {
    return "offsets e/sm/out=" + std::to_string(e) + "/" + std::to_string(sm) + "/" + std::to_string(out);
  }
};

// For every o in 0..15: all three equal (GPU vec16 with head o' = (16 - o) % 16), sm or out shifted
// by 4 (vec4), sm or out shifted by 1 (scalar), and an unrelated mix.
inline std::vector<Offsets> RecoveryOffsets() {
  std::vector<Offsets> cases;
  for (int o = 0; o < 16; ++o) {
    cases.push_back({o, o, o});
    cases.push_back({o, (o + 4) % 16, o});
    cases.push_back({o, o, (o + 4) % 16});
    cases.push_back({o, (o + 1) % 16, o});
    cases.push_back({o, o, (o + 1) % 16});
    cases.push_back({o, (o + 7) % 16, (o + 3) % 16});
  }
  return cases;
}

// Fewer offsets for the large size (the full set is still cheap on the CPU; this keeps the GPU
// test's allocations and copies short): one per (e mod 16) for each path.
inline std::vector<Offsets> RecoveryOffsetsForLargeN() {
  std::vector<Offsets> cases;
  for (int o = 0; o < 16; ++o) cases.push_back(RecoveryOffsets()[6 * o + o % 6]);
  return cases;
}

// Planes of n elements covering all 65,536 (e, sm) pairs in shuffled order, repeated as needed.
struct RandomPlanes {
  std::vector<uint8_t> e, sm;
};
inline RandomPlanes MakeRandomPlanes(int64_t n, uint64_t seed) {
  std::vector<uint16_t> pairs(65536);
  for (int i = 0; i < 65536; ++i) pairs[i] = static_cast<uint16_t>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(pairs.begin(), pairs.end(), rng);
  RandomPlanes p;
  p.e.resize(n);
  p.sm.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    p.e[i] = static_cast<uint8_t>(pairs[i % 65536] >> 8);
    p.sm[i] = static_cast<uint8_t>(pairs[i % 65536] & 0xff);
  }
  return p;
}

// All 65,536 (e, sm) pairs in order: element i has e = i >> 8, sm = i & 0xff.
inline RandomPlanes MakeAllPairPlanes() {
  RandomPlanes p;
  p.e.resize(65536);
  p.sm.resize(65536);
  for (int i = 0; i < 65536; ++i) {
    p.e[i] = static_cast<uint8_t>(i >> 8);
    p.sm[i] = static_cast<uint8_t>(i & 0xff);
  }
  return p;
}

// Index of the first element where got[0, n) and want[0, n) differ, or -1.
inline int64_t FirstMismatch(const uint16_t* got, const uint16_t* want, int64_t n) {
  const auto it = std::mismatch(got, got + n, want).first;
  return it == got + n ? -1 : it - got;
}

// The recovery formula written out independently of every implementation under test.
inline uint16_t ExpectedBf16(uint8_t e, uint8_t sm) {
  return static_cast<uint16_t>(((sm & 0x80) << 8) | (e << 7) | (sm & 0x7f));
}

// A buffer of `count` T at element offset `offset` from a 64-byte-aligned base, with `kGuard`
// elements of random canary on both sides (so over- and under-runs change them).
template <typename T>
class GuardedBuffer {
 public:
  static constexpr int64_t kGuard = 64;

  GuardedBuffer(int64_t count, int offset, uint64_t seed) : count_(count), offset_(offset) {
    storage_.resize(static_cast<size_t>((count + 2 * kGuard + offset) * sizeof(T) + 64));
    auto addr = reinterpret_cast<uintptr_t>(storage_.data());
    base_ = reinterpret_cast<T*>((addr + 63) / 64 * 64);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;  // cheap LCG: the fill only has to differ from the answer
    for (int64_t i = 0; i < Total(); ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      base_[i] = static_cast<T>(x >> 40);
    }
    initial_.assign(base_, base_ + Total());
  }

  T* data() { return base_ + kGuard + offset_; }
  // Whole guarded region [base, base + Total()), 64-byte aligned at base.
  T* base() { return base_; }
  int64_t Total() const { return count_ + 2 * kGuard + offset_; }
  // Index into base() of the first element of data().
  int64_t Begin() const { return kGuard + offset_; }
  // First index outside [Begin(), Begin() + count) whose value changed, or -1.
  int64_t FirstClobberedGuard() const {
    for (int64_t i = 0; i < Begin(); ++i) {
      if (base_[i] != initial_[i]) return i;
    }
    for (int64_t i = Begin() + count_; i < Total(); ++i) {
      if (base_[i] != initial_[i]) return i;
    }
    return -1;
  }

 private:
  int64_t count_;
  int offset_;
  std::vector<uint8_t> storage_;
  T* base_ = nullptr;
  std::vector<T> initial_;
};

}  // namespace zipmoe::kernels::recovery_cases
