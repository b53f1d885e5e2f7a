// Tensor element types as named by safetensors ("BF16", "F16", "F32", ...), zipmoe's internal MXFP4, and
// the BF16 / F16 / FP8 / FP4 value helpers. Pure functions; thread-safe.
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
  // OCP Microscaling MXFP4 (gpt-oss's routed experts): FP4 E2M1 values in blocks of 32 along a row sharing
  // one E8M0 scale byte. Internal to zipmoe (manifest records, never a safetensors dtype: checkpoints ship
  // it as two U8 tensors, *_blocks and *_scales). One tensor of logical shape [rows, cols] (cols % 32 == 0)
  // is stored as rows*cols/2 bytes of blocks (byte k of row r: column 2k in the low nibble, 2k+1 in the
  // high one; HF's `*_blocks[e]` flattened), then rows*cols/32 scale bytes [rows, cols/32] (HF's
  // `*_scales[e]` flattened): DTypeBytes(kMXFP4, numel) = numel/2 + numel/32 (docs/format.md "MXFP4").
  kMXFP4 = 15,
};

// Bytes per element (BF16 -> 2, F32 -> 4, ...); 0 for kMXFP4, whose 4.25 bits per value are not a whole
// number of bytes: size tensors with DTypeBytes.
int DTypeSize(DType dtype);
// Bytes of `numel` values of `dtype`: numel/2 + numel/32 for kMXFP4 (numel must be a multiple of 32 for
// the layout to exist; the division truncates otherwise), numel * DTypeSize(dtype) for the others.
uint64_t DTypeBytes(DType dtype, uint64_t numel);
// Safetensors spelling: "BF16", "F16", "F32", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "U16",
// "U32", "U64", "F8_E4M3", "F8_E5M2"; "MXFP4" for the internal kMXFP4.
const char* DTypeName(DType dtype);
// Parses DTypeName's spelling ("MXFP4" included). Errors: kInvalidArgument naming the unknown string.
Result<DType> ParseDType(const std::string& name);
// True for the dtypes a safetensors file may hold (all but kMXFP4).
bool IsSafetensorsDType(DType dtype);

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

// OCP MX FP4 E2M1 nibble s ee m (bit 3 sign, bits 2-1 exponent with bias 1, bit 0 mantissa) -> float32
// (exact): ee > 0: (-1)^s (1 + m/2) 2^(ee-1); ee = 0: (-1)^s m/2. Magnitudes of codes 0..7: 0, 0.5, 1,
// 1.5, 2, 3, 4, 6; code 8 is -0. Bits 7-4 of `nibble` are ignored.
float Fp4E2M1ToFloat(uint8_t nibble);
// OCP MX E8M0 scale -> float32: 2^(code - 127) for codes 0..254, exact (code 0 is 2^-127, a subnormal;
// codes 1..254 are the normal floats with exponent field `code` and a zero mantissa); 0xFF is NaN.
float E8M0ToFloat(uint8_t code);

}  // namespace zipmoe
