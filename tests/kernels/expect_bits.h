// Bit-for-bit comparison of float outputs for the kernel tests (every ISA variant against its scalar
// reference): NaN matches NaN whatever its payload; the first five differences are reported.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace zipmoe::kernels::testing {

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}

inline void ExpectSameBits(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = Bits(want[i]) == Bits(got[i]) || (std::isnan(want[i]) && std::isnan(got[i]));
    if (!same && reported++ < 5) ADD_FAILURE() << what << ": element " << i << ": " << want[i] << " vs " << got[i];
  }
}

}  // namespace zipmoe::kernels::testing
