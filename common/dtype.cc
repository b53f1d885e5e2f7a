#include "common/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace zipmoe {

int DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kBF16: case DType::kF16: case DType::kI16: case DType::kU16: return 2;
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF64: case DType::kI64: case DType::kU64: return 8;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kF8E4M3: case DType::kF8E5M2: return 1;
    case DType::kMXFP4: return 0;
  }
  return 0;
}

uint64_t DTypeBytes(DType dtype, uint64_t numel) {
  if (dtype == DType::kMXFP4) return numel / 2 + numel / 32;
  return numel * static_cast<uint64_t>(DTypeSize(dtype));
}

bool IsSafetensorsDType(DType dtype) { return DTypeSize(dtype) > 0; }

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kU16: return "U16";
    case DType::kU32: return "U32";
    case DType::kU64: return "U64";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kF8E5M2: return "F8_E5M2";
    case DType::kMXFP4: return "MXFP4";
  }
  return "?";
}

Result<DType> ParseDType(const std::string& name) {
  static const struct { const char* name; DType dtype; } kTable[] = {
      {"BF16", DType::kBF16}, {"F16", DType::kF16}, {"F32", DType::kF32}, {"F64", DType::kF64},
      {"I64", DType::kI64},   {"I32", DType::kI32}, {"I16", DType::kI16}, {"I8", DType::kI8},
      {"U8", DType::kU8},     {"BOOL", DType::kBool}, {"U16", DType::kU16}, {"U32", DType::kU32},
      {"U64", DType::kU64},   {"F8_E4M3", DType::kF8E4M3}, {"F8_E5M2", DType::kF8E5M2},
      {"MXFP4", DType::kMXFP4}};
  for (const auto& e : kTable)
    if (name == e.name) return e.dtype;
  return Status::InvalidArgument("unknown dtype '" + name + "'");
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nanf("") : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

float F8E4M3ToFloat(uint8_t bits) {
  const int e = (bits >> 3) & 0xf, m = bits & 7;
  float v;
  if (e == 0xf && m == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<float>(m), -9);
  } else {
    v = std::ldexp(static_cast<float>(8 + m), e - 10);
  }
  return (bits & 0x80) != 0 ? -v : v;
}

uint8_t FloatToF8E4M3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < std::ldexp(1.0f, -6)) {  // subnormal range: m * 2^-9, m = 0..8 (8 is the smallest normal, code 8)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  uint32_t bits;
  std::memcpy(&bits, &a, sizeof bits);
  int e = static_cast<int>(bits >> 23) - 127;  // -6 .. 8
  uint32_t m = (bits & 0x7fffffu) >> 20;
  const uint32_t rest = bits & 0xfffffu, half = 0x80000u;
  if (rest > half || (rest == half && (m & 1u) != 0)) ++m;
  if (m == 8) {
    m = 0;
    ++e;
  }
  const uint32_t code = static_cast<uint32_t>(e + 7) << 3 | m;
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

float Fp4E2M1ToFloat(uint8_t nibble) {
  const int e = (nibble >> 1) & 3, m = nibble & 1;
  const float v = e == 0 ? 0.5f * static_cast<float>(m) : std::ldexp(1.0f + 0.5f * static_cast<float>(m), e - 1);
  return (nibble & 8) != 0 ? -v : v;
}

float E8M0ToFloat(uint8_t code) {
  if (code == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

}  // namespace zipmoe
