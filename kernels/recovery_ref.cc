// Host side of BF16/F32/F16/F8_E4M3/MXFP4 recovery (ZipMoE §3.3): the scalar references, the GPU kernel-path
// selection (pure address arithmetic, shared by recovery.cu and the host tests); the no-CUDA stubs are in no_cuda.cc.
#include "common/bitfield.h"
#include "kernels/recovery.h"

#include <string>

namespace zipmoe::kernels {

void RecoverBf16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  MergeBf16(e, sm, n, out);
}

void RecoverF32Reference(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n) {
  if (n > 0) MergeF32(e, sm, n, out);
}

void RecoverF16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  if (n > 0) MergeF16(e, sm, n, out);
}

bool RecoverF32VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint32_t* out, int64_t n) {
  const auto ea = reinterpret_cast<uintptr_t>(e);
  const auto sa = reinterpret_cast<uintptr_t>(sm);
  const auto oa = reinterpret_cast<uintptr_t>(out);
  return ea % 4 == 0 && sa % 8 == 0 && (sa + 2 * static_cast<uintptr_t>(n)) % 4 == 0 && oa % 16 == 0;
}

bool RecoverF8E4M3VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint8_t* out, int64_t n) {
  return reinterpret_cast<uintptr_t>(e) % 8 == 0 && reinterpret_cast<uintptr_t>(sm) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(out) % 8 == 0 && n % 8 == 0;
}

bool RecoverF16VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint16_t* out) {
  const auto ea = reinterpret_cast<uintptr_t>(e);
  const auto sa = reinterpret_cast<uintptr_t>(sm);
  const auto oa = reinterpret_cast<uintptr_t>(out);
  return ea % 8 == 0 && sa % 8 == 0 && oa % 16 == 0;
}

const char* RecoveryKernelPathName(RecoveryKernelPath path) {
  switch (path) {
    case RecoveryKernelPath::kVec16:
      return "vec16";
    case RecoveryKernelPath::kVec4:
      return "vec4";
    case RecoveryKernelPath::kScalar:
      return "scalar";
  }
  return "unknown";
}

namespace {

// True when a vector path loading `width` bytes of e and sm per thread (and storing 2*width bytes
// of out in stores of min(2*width, 16) bytes) has an index i where all three accesses are aligned:
// i ≡ -e (mod width) aligns e and sm iff sm ≡ e (mod width); then out + 2i ≡ out - 2e, which must
// be ≡ 0 modulo the store size.
bool VectorPathFits(uintptr_t e, uintptr_t sm, uintptr_t out, uintptr_t width) {
  const uintptr_t store = 2 * width < 16 ? 2 * width : 16;
  return (sm - e) % width == 0 && (out - 2 * e) % store == 0;
}

}  // namespace

RecoveryKernelPath SelectRecoveryKernelPath(const uint8_t* e, const uint8_t* sm, const uint16_t* out) {
  const auto ea = reinterpret_cast<uintptr_t>(e);
  const auto sa = reinterpret_cast<uintptr_t>(sm);
  const auto oa = reinterpret_cast<uintptr_t>(out);
  if (VectorPathFits(ea, sa, oa, 16)) return RecoveryKernelPath::kVec16;
  if (VectorPathFits(ea, sa, oa, 4)) return RecoveryKernelPath::kVec4;
  return RecoveryKernelPath::kScalar;
}

void RecoverF8E4M3Reference(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t t = (sm[i / 2] >> (4 * (i % 2))) & 0x0fu;
    out[i] = static_cast<uint8_t>((t >> 3) << 7 | (e[i] & 0x0fu) << 3 | (t & 7u));
  }
}

void RecoverMxfp4Reference(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n) {
  ZM_CHECK(n >= 0 && n % 32 == 0) << "MXFP4 tensors hold whole blocks of 32 values, got n=" << n;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t t = (sm[i / 4] >> (2 * (i % 4))) & 3u;
    const uint32_t v = (t >> 1) << 3 | (e[i] & 3u) << 1 | (t & 1u);
    if (i % 2 == 0) {
      out[i / 2] = static_cast<uint8_t>(v);
    } else {
      out[i / 2] = static_cast<uint8_t>(out[i / 2] | v << 4);
    }
  }
  for (int64_t g = 0; g < n / 32; ++g) out[n / 2 + g] = e[n + g];
}

bool RecoverMxfp4VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint8_t* out) {
  return reinterpret_cast<uintptr_t>(e) % 16 == 0 && reinterpret_cast<uintptr_t>(sm) % 4 == 0 &&
         reinterpret_cast<uintptr_t>(out) % 8 == 0;
}

Status ValidateRecoverySegments(const char* fn, const RecoverySegment* segments, int count) {
  const std::string f(fn);
  if (count < 0 || count > kMaxRecoverySegments)
    return Status::InvalidArgument(f + ": count=" + std::to_string(count) + " outside [0, " +
                                   std::to_string(kMaxRecoverySegments) + "]");
  if (count > 0 && segments == nullptr) return Status::InvalidArgument(f + ": segments is null with count > 0");
  for (int i = 0; i < count; ++i) {
    const RecoverySegment& g = segments[i];
    const std::string at = f + ": segment " + std::to_string(i);
    if (g.n < 0) return Status::InvalidArgument(at + ": negative n=" + std::to_string(g.n));
    if (g.n > 0 && (g.e == nullptr || g.sm == nullptr || g.out == nullptr))
      return Status::InvalidArgument(at + ": null e, sm or out with n=" + std::to_string(g.n));
    if (reinterpret_cast<uintptr_t>(g.out) % 2 != 0) return Status::InvalidArgument(at + ": out is not 2-byte aligned");
  }
  return Status::Ok();
}

}  // namespace zipmoe::kernels
