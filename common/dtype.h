// Tensor element types as named by safetensors ("BF16", "F16", "F32", ...) and BF16 helpers.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "common/status.h"

namespace zipmoe {

// Values are stable: they are stored in manifest.bin (schemas/manifest.fbs DType mirrors them).
enum class DType : uint8_t {
  kBF16 = 0, kF16 = 1, kF32 = 2, kF64 = 3, kI64 = 4, kI32 = 5, kI16 = 6, kI8 = 7, kU8 = 8, kBool = 9,
  kU16 = 10, kU32 = 11, kU64 = 12, kF8E4M3 = 13, kF8E5M2 = 14,
};

// Bytes per element (BF16 -> 2, F32 -> 4, ...).
int DTypeSize(DType dtype);
// Safetensors spelling: "BF16", "F16", "F32", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "U16",
// "U32", "U64", "F8_E4M3", "F8_E5M2".
const char* DTypeName(DType dtype);
// Parses the safetensors spelling. Errors: kInvalidArgument naming the unknown string.
Result<DType> ParseDType(const std::string& name);

// BF16 <-> float32. BF16 is the top 16 bits of an IEEE-754 float32.
inline float Bf16ToFloat(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// Round-to-nearest-even, NaN stays NaN (quiet), as torch's float -> bfloat16 conversion.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
// IEEE half -> float32 (exact).
float F16ToFloat(uint16_t bits);
// OCP FP8 E4M3 (s eeee mmm, bias 7, subnormals, no infinities, S.1111.111 = NaN) -> float32 (exact):
// e > 0: (-1)^s (1 + m/8) 2^(e-7); e = 0: (-1)^s m 2^-9.
float F8E4M3ToFloat(uint8_t bits);
// float32 -> FP8 E4M3, round to nearest even, saturating to +-448 (as torch's float8_e4m3fn cast of
// values already divided by their block scale); NaN -> 0x7f. -0 keeps its sign.
uint8_t FloatToF8E4M3(float f);

}  // namespace zipmoe
