// CPU fast paths for F32, F16, F8_E4M3 and MXFP4 recovery (ZipMoE §3.3 applied to lossless FP32/F16/FP8/
// MXFP4 experts; the no-GPU counterpart of LaunchRecoverF32/F16/...). Formulas and plane layouts:
// kernels/recovery.h.
//
// F32 works in fixed blocks of 16 elements over byte loads that the compiler turns into vector loads,
// shifts and interleaves (no intrinsics: the top half is the BF16 formula, the bottom half a copy).
// F16 works in blocks of 2048 elements: first each 8-element group's 3 packed bytes are loaded once
// and its fields spread to one byte each (constant shifts, one 8-byte store; the reference reloads
// the word for every element), then e, lo and those bytes are combined by a loop the compiler
// vectorises like the BF16 one. Both handle any alignment and any n.
#include <cstring>
#include <string>

#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

constexpr int64_t kF32Block = 16;    // fixed inner trip count, vectorised even at GCC -O2
constexpr int64_t kF16Group = 8;     // elements per 3-byte group of packed fields
constexpr int64_t kF16Block = 2048;  // elements per two-pass block (a multiple of kF16Group; 2 KiB of t)

inline uint32_t RecoverF32One(uint8_t e, uint8_t hi, uint8_t lo0, uint8_t lo1) {
  const uint32_t top = ((hi & 0x80u) << 8) | (static_cast<uint32_t>(e) << 7) | (hi & 0x7fu);
  return top << 16 | static_cast<uint32_t>(lo1) << 8 | lo0;
}

inline uint16_t RecoverF16One(uint8_t e, uint8_t lo, uint32_t t) {
  return static_cast<uint16_t>((t >> 2) << 15 | (e & 0x1fu) << 10 | (t & 3u) << 8 | lo);
}

}  // namespace

void RecoverF32Cpu(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint32_t* __restrict out, int64_t n) {
  if (n <= 0) return;
  const uint8_t* __restrict hi = sm + 2 * n;
  int64_t i = 0;
  for (; i + kF32Block <= n; i += kF32Block) {
    for (int64_t j = 0; j < kF32Block; ++j) {
      const int64_t k = i + j;
      out[k] = RecoverF32One(e[k], hi[k], sm[2 * k], sm[2 * k + 1]);
    }
  }
  for (; i < n; ++i) out[i] = RecoverF32One(e[i], hi[i], sm[2 * i], sm[2 * i + 1]);
}

void RecoverF16Cpu(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint16_t* __restrict out, int64_t n) {
  if (n <= 0) return;
  const uint8_t* __restrict packed = sm + n;
  // Two passes per block of kF16Block elements, both in L1: unpack the 3-bit fields to one byte each
  // (one 8-byte store per group), then combine e, lo and t with a loop the compiler vectorises.
  alignas(64) uint8_t t[kF16Block];
  for (int64_t begin = 0; begin < n; begin += kF16Block) {
    const int64_t count = n - begin < kF16Block ? n - begin : kF16Block;
    const int64_t groups = (count + kF16Group - 1) / kF16Group;  // begin is a multiple of 8
    const uint8_t* __restrict p = packed + 3 * (begin / kF16Group);
    for (int64_t g = 0; g < groups; ++g) {
      const uint64_t w =
          p[3 * g] | static_cast<uint64_t>(p[3 * g + 1]) << 8 | static_cast<uint64_t>(p[3 * g + 2]) << 16;
      uint64_t bytes = 0;  // byte j = field j
      for (int j = 0; j < kF16Group; ++j) bytes |= (w >> (3 * j) & 7u) << (8 * j);
      std::memcpy(t + kF16Group * g, &bytes, sizeof bytes);  // little-endian hosts (x86-64, AArch64)
    }
    const uint8_t* __restrict eb = e + begin;
    const uint8_t* __restrict lo = sm + begin;
    uint16_t* __restrict ob = out + begin;
    for (int64_t i = 0; i < count; ++i) ob[i] = RecoverF16One(eb[i], lo[i], t[i]);
  }
}

void RecoverF8E4M3Cpu(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint8_t* __restrict out, int64_t n) {
  if (n <= 0) return;
  // Pairs: one SM byte holds the fields of values 2j (low nibble) and 2j+1 (high nibble).
  const int64_t pairs = n / 2;
  for (int64_t j = 0; j < pairs; ++j) {
    const uint32_t s = sm[j];
    out[2 * j] = static_cast<uint8_t>((s & 8u) << 4 | (e[2 * j] & 0x0fu) << 3 | (s & 7u));
    out[2 * j + 1] = static_cast<uint8_t>((s & 0x80u) | (e[2 * j + 1] & 0x0fu) << 3 | (s >> 4 & 7u));
  }
  if (n % 2 != 0) {
    const uint32_t s = sm[pairs];
    out[n - 1] = static_cast<uint8_t>((s & 8u) << 4 | (e[n - 1] & 0x0fu) << 3 | (s & 7u));
  }
}

void RecoverMxfp4Cpu(const uint8_t* __restrict e, const uint8_t* __restrict sm, uint8_t* __restrict out, int64_t n) {
  ZM_CHECK(n >= 0 && n % 32 == 0) << "MXFP4 tensors hold whole blocks of 32 values, got n=" << n;
  for (int64_t g = 0; g < n / 8; ++g) {  // values 8g..8g+7 -> out bytes 4g..4g+3
    uint64_t x;
    std::memcpy(&x, e + 8 * g, sizeof x);  // byte i = exponent field of value 8g + i (little-endian hosts)
    x &= 0x0303030303030303ull;
    x = (x | x >> 4) & 0x00ff00ff00ff00ffull;  // nibble i = field i: pairs, then quads, then all eight
    x = (x | x >> 8) & 0x0000ffff0000ffffull;
    x = (x | x >> 16) & 0xffffffffull;
    uint32_t y = sm[2 * g] | static_cast<uint32_t>(sm[2 * g + 1]) << 8;  // eight 2-bit sign|mantissa fields
    y = (y | y << 8) & 0x00ff00ffu;  // spread to nibbles: field i at bits 4i, 4i+1
    y = (y | y << 4) & 0x0f0f0f0fu;
    y = (y | y << 2) & 0x33333333u;
    const uint32_t w = (y & 0x11111111u) | (y & 0x22222222u) << 2 | static_cast<uint32_t>(x) << 1;
    std::memcpy(out + 4 * g, &w, sizeof w);  // nibble i of w = value 8g + i: low nibble first per byte
  }
  if (n > 0) std::memcpy(out + n / 2, e + n, static_cast<size_t>(n / 32));  // the scales, after the fields
}

Status RecoverCpu(DType dtype, const uint8_t* e, const uint8_t* sm, void* out, int64_t n) {
  // RecoverBf16Cpu / RecoverF16Cpu / RecoverF32Cpu take any alignment; the casts only name the type.
  switch (dtype) {
    case DType::kBF16: RecoverBf16Cpu(e, sm, static_cast<uint16_t*>(out), n); return Status::Ok();
    case DType::kF16: RecoverF16Cpu(e, sm, static_cast<uint16_t*>(out), n); return Status::Ok();
    case DType::kF32: RecoverF32Cpu(e, sm, static_cast<uint32_t*>(out), n); return Status::Ok();
    case DType::kF8E4M3: RecoverF8E4M3Cpu(e, sm, static_cast<uint8_t*>(out), n); return Status::Ok();
    case DType::kMXFP4:
      if (n < 0 || n % 32 != 0)
        return Status::InvalidArgument("RecoverCpu: MXFP4 needs whole blocks of 32 values, got n=" + std::to_string(n));
      RecoverMxfp4Cpu(e, sm, static_cast<uint8_t*>(out), n);
      return Status::Ok();
    default:
      return Status::InvalidArgument(std::string("RecoverCpu: dtype ") + DTypeName(dtype) + " has no E/SM split");
  }
}

}  // namespace zipmoe::kernels
