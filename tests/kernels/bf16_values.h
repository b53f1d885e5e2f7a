// BF16 <-> float for the kernel tests, written independently of the code under test: round to nearest
// even (finite inputs), and the exact widening (bits << 16).
#pragma once

#include <cstdint>
#include <cstring>

namespace zipmoe::kernels::testing {

inline uint16_t ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float FromBf16(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace zipmoe::kernels::testing
