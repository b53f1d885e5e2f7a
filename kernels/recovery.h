// Tensor recovery (ZipMoE §3.1 Fig. 5 ➐, §3.3 "Memory-Coalesced Tensor Recovery Kernel"): re-assembles
// BF16, F32, F16, F8_E4M3 or MXFP4 values from the exponent plane (decoded E-chunks) and the
// sign|mantissa plane (SM-chunk). Host API only; no torch, no CUDA headers. Plane layouts per dtype:
// common/bitfield.h.
//
// BF16 (the served dtype), for i in [0, n):
//   out[i] = (sm[i] & 0x80) << 8 | e[i] << 7 | (sm[i] & 0x7f)
//   e: [n] uint8 exponent plane; sm: [n] uint8 sign<<7 | mantissa; out: [n] uint16 BF16 bit patterns.
// and all of them are bit-identical to RecoverBf16Reference for all 65,536 (e, sm) pairs.
// F32 and F16 (lossless FP32/F16 checkpoints, served as such by the runtime): see the
// RecoverF32* / RecoverF16* section below for their formulas; RecoverCpu dispatches on the dtype.
//
// Paths:
//   RecoverBf16Reference  scalar reference (the same bit formula; see common/bitfield.h).
//   RecoverBf16Cpu        CPU fast path (kernels/recovery_cpu.cc): SSE2 / AVX2 (x86-64, AVX2 picked
//                         at run time) or NEON (Jetson), else a portable auto-vectorised loop.
//   LaunchRecoverBf16     GPU kernel (kernels/recovery.cu, built when nvcc is found, ZIPMOE_HAVE_CUDA):
//                         128-bit vector loads/stores, grid-stride, coalesced; enqueues on a stream.
// out must not overlap e or sm on any path.
// Thread-safety: all functions are reentrant.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe::kernels {

// True when this binary was built with the CUDA kernels.
bool BuiltWithCuda();
// Number of visible CUDA devices; 0 when built without CUDA or when no driver/device is present.
int CudaDeviceCount();

// Scalar reference: one element per iteration. n <= 0 touches nothing (pointers may then be null).
//   e: [n] uint8, sm: [n] uint8 -> out: [n] uint16.
void RecoverBf16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// ---- CPU fast path (kernels/recovery_cpu.cc) -------------------------------------------------

// Instruction-set variants of the CPU loop. Each handles any n and any pointer alignment
// (unaligned vector loads/stores, scalar tail) and is bit-identical to RecoverBf16Reference.
enum class CpuRecoveryIsa : int {
  kPortable = 0,  // plain C++ in fixed 16-element blocks, left to the compiler's auto-vectoriser
  kSse2 = 1,      // x86-64: 16 elements per step (SSE2 is part of the x86-64 baseline)
  kAvx2 = 2,      // x86-64: 32 elements per step; compiled with a target attribute, used only when
                  // CPUID reports AVX2 (or the whole build targets AVX2)
  kNeon = 3,      // ARM with NEON (Jetson, AArch64): vsli/vsri byte inserts + interleaving vst2
};

// "portable", "sse2", "avx2", "neon" ("unknown" for other values).
const char* CpuRecoveryIsaName(CpuRecoveryIsa isa);
// True when `isa` is compiled into this binary and supported by the CPU it runs on.
// kPortable is always available.
bool CpuRecoveryIsaAvailable(CpuRecoveryIsa isa);
// The variant RecoverBf16Cpu uses here: AVX2 > SSE2 on x86-64, NEON on ARM, else portable.
// Detected once per process.
CpuRecoveryIsa BestCpuRecoveryIsa();

// CPU fast path: RecoverBf16Reference's result, computed with BestCpuRecoveryIsa() on the calling
// thread (single-threaded; callers split large tensors into ranges themselves).
//   e: [n] uint8, sm: [n] uint8 -> out: [n] uint16; any alignment; out must not overlap e or sm.
// No error path: n <= 0 touches nothing (pointers may then be null); for n > 0 all three pointers
// must be valid for n elements (not checked).
void RecoverBf16Cpu(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// RecoverBf16Cpu with an explicit variant (tests, benches). Same shapes as RecoverBf16Cpu.
// Errors: kInvalidArgument (n < 0, or a null pointer with n > 0), kUnavailable (`isa` not compiled
// in or not supported by this CPU; see CpuRecoveryIsaAvailable).
Status RecoverBf16CpuWithIsa(CpuRecoveryIsa isa, const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// ---- GPU kernel (kernels/recovery.cu) --------------------------------------------------------

// Which kernel LaunchRecoverBf16 runs, chosen from the pointers' alignment. A vector path of width
// W bytes needs one element index i at which e+i and sm+i are W-aligned and out+i is
// min(2W, 16)-aligned; that holds iff sm ≡ e (mod W) and out ≡ 2·e (mod min(2W, 16)) as addresses.
// The elements before that i (fewer than W) and after the last full vector (fewer than W) are done
// one per thread by the same launch.
enum class RecoveryKernelPath : int {
  kVec16 = 0,   // per thread: one 16-byte load of e and of sm, two 16-byte stores of out
  kVec4 = 1,    // per thread: one 4-byte load of e and of sm, one 8-byte store of out
  kScalar = 2,  // per thread: one element (byte loads, 2-byte store); any alignment
};

// "vec16", "vec4", "scalar" ("unknown" for other values).
const char* RecoveryKernelPathName(RecoveryKernelPath path);
// The path LaunchRecoverBf16 takes for these pointers (pure address arithmetic; nothing is
// dereferenced, so it is usable without CUDA). Always defined, with or without CUDA.
RecoveryKernelPath SelectRecoveryKernelPath(const uint8_t* e, const uint8_t* sm, const uint16_t* out);

// GPU recovery. Pointers must be device-accessible (device memory, or host memory registered with
// cudaHostRegisterMapped / unified memory on Jetson); e and sm may have any alignment, out must be
// 2-byte aligned (as any uint16_t*); any n >= 0 (head/tail handled). The kernel is picked by
// SelectRecoveryKernelPath; best throughput when e, sm and out are all 16-byte aligned.
// `stream` is a cudaStream_t passed as void* so callers need no CUDA headers; nullptr = default stream.
// Enqueues only (no sync). Errors: kInvalidArgument (n < 0, null pointer with n > 0, odd out
// address), kUnavailable (built without CUDA), kInternal (device query or launch error, with the
// CUDA error string).
Status LaunchRecoverBf16(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, void* stream);

// One tensor of a batched recovery: e, sm [n] uint8 planes -> out [n] uint16 BF16 patterns, pointers
// as for LaunchRecoverBf16.
struct RecoverySegment {
  const uint8_t* e = nullptr;
  const uint8_t* sm = nullptr;
  uint16_t* out = nullptr;
  int64_t n = 0;
};
// Most segments of one LaunchRecoverBf16Batch call (an expert's gate, up and down are 3).
constexpr int kMaxRecoverySegments = 8;

// Host checks of a batch (nothing dereferenced but `segments`): 0 <= count <= kMaxRecoverySegments,
// segments non-null when count > 0, each segment as LaunchRecoverBf16 requires (n >= 0, non-null
// pointers when n > 0, out 2-byte aligned). `fn` names the caller in the message. Errors:
// kInvalidArgument naming the segment and field. Always defined, with or without CUDA.
Status ValidateRecoverySegments(const char* fn, const RecoverySegment* segments, int count);

// Several tensors recovered by one kernel launch (ZipMoE §3.3; issue 36: an expert's three matrices
// arrive together, and one launch of ~10 µs each on an H200 was launch-bound): every segment whose
// pointers take the vec16 path is one slice (blockIdx.y) of the same grid; any other segment gets its
// own LaunchRecoverBf16. Bit-identical to LaunchRecoverBf16 on each segment (the same per-thread
// code). Enqueues only. Errors: ValidateRecoverySegments', kUnavailable (built without CUDA),
// kInternal (launch error with CUDA's message).
Status LaunchRecoverBf16Batch(const RecoverySegment* segments, int count, void* stream);

// Test/bench helper: copies host planes to the device, recovers there, copies back and syncs.
// Host pointers may have any alignment (the device copies are freshly allocated, so vec16 runs).
// Errors: kUnavailable without CUDA or device; kInvalidArgument as LaunchRecoverBf16;
// kInternal on CUDA errors.
Status RecoverBf16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// ---- F32 and F16 recovery (kernels/recovery_ref.cc, recovery_fp_cpu.cc, recovery.cu) ----------
//
// F32, for i in [0, n) (ZipMoE §3.1's split applied to the 8-bit FP32 exponent):
//   hi = sm[2n + i], lo = sm[2i] | sm[2i + 1] << 8
//   out[i] = ((hi & 0x80) << 8 | e[i] << 7 | (hi & 0x7f)) << 16 | lo
//   e: [n] uint8 exponent plane; sm: [3n] bytes = lo plane [n] uint16 little-endian (mantissa bits
//   15..0), then hi plane [n] uint8 (sign << 7 | mantissa bits 22..16); out: [n] uint32 F32 patterns.
// F16, for i in [0, n), g = i / 8, j = i % 8:
//   w = sm[n + 3g] | sm[n + 3g + 1] << 8 | sm[n + 3g + 2] << 16,  t = w >> 3j & 7  (sign << 2 | mantissa 9..8)
//   out[i] = (t >> 2) << 15 | (e[i] & 0x1f) << 10 | (t & 3) << 8 | sm[i]
//   e: [n] uint8 exponent plane (0..31); sm: [n + 3·ceil(n/8)] bytes = lo plane [n] uint8 (mantissa
//   bits 7..0), then ceil(n/8) 3-byte groups of eight 3-bit fields; out: [n] uint16 F16 patterns.
// Every path is bit-identical to its Reference (tests: all 65,536 F16 patterns; F32 NaN payloads,
// Inf, subnormals, -0). Pointers may have any alignment on the CPU; n <= 0 touches nothing.

// Scalar references (MergeF32 / MergeF16 of common/bitfield.h).
void RecoverF32Reference(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n);
void RecoverF16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// CPU fast paths (kernels/recovery_fp_cpu.cc), single-threaded, any alignment, no intrinsics: F32 in
// fixed 16-element blocks the compiler vectorises (on par with MergeF32, which GCC vectorises too); F16
// in 2048-element blocks, the packed fields first spread to bytes, then a vectorised combine (~4x
// MergeF16; bench/recovery_fp_bench.cc). No error path, as RecoverBf16Cpu.
void RecoverF32Cpu(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n);
void RecoverF16Cpu(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);
// F8_E4M3 (DeepSeek-V3 / GLM FP8 experts): out[i] = (t >> 3) << 7 | (e & 0xf) << 3 | (t & 7) with t the
// i-th nibble of sm (MergeF8E4M3); the fast path takes values in pairs (one SM byte), the reference one
// at a time.
void RecoverF8E4M3Cpu(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n);
void RecoverF8E4M3Reference(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n);
// MXFP4 (gpt-oss experts; planes in common/bitfield.h, raw layout in common/dtype.h), for i in [0, n):
//   t = sm[i / 4] >> 2 (i % 4) & 3,  v = (t >> 1) << 3 | (e[i] & 3) << 1 | (t & 1)
//   out[i / 2] holds v in its low nibble for even i, in its high one for odd i; then
//   out[n/2 + g] = e[n + g] for the n/32 scales g (bytes, never interpreted: 0xFF scales round-trip).
//   e: [n + n/32] bytes (the fields 0..3, then the scales); sm: [n/4] bytes; out: [n/2 + n/32] bytes = the
//   raw MXFP4 tensor.
// n must be a non-negative multiple of 32 (ZM_CHECK; RecoverCpu and LaunchRecoverMxfp4 return
// kInvalidArgument instead). The fast path takes 8 values (two SM bytes, one 4-byte word of out) per
// step with shifts and masks; the reference one value at a time (MergeMxfp4's formula).
void RecoverMxfp4Cpu(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n);
void RecoverMxfp4Reference(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n);

// The CPU fast path of `dtype`, chosen once per call (the per-value loops have no dtype branch):
// RecoverBf16Cpu, RecoverF16Cpu, RecoverF32Cpu, RecoverF8E4M3Cpu or RecoverMxfp4Cpu.
//   e: [EPlaneBytes(dtype, n)] uint8; sm: [SmPlaneBytes(dtype, n)] bytes (common/bitfield.h);
//   out: [DTypeBytes(dtype, n)]
//   bytes, any alignment; out must not overlap e or sm.
// Errors: kInvalidArgument naming the dtype when it has no E/SM split, or for MXFP4 when n is not a
// multiple of 32 (nothing written).
Status RecoverCpu(DType dtype, const uint8_t* e, const uint8_t* sm, void* out, int64_t n);

// GPU recovery (kernels/recovery.cu). Grid-stride, coalesced: a thread recovers 4 F32 values (4-byte
// loads of e and hi, one 8-byte load of lo, one 16-byte store) or one 8-value F16 group (8-byte loads
// of e and lo, 3 byte loads of the packed group, one 16-byte store) when the planes allow it:
//   F32 vector path: e ≡ 0 (mod 4), sm ≡ 0 (mod 8), sm + 2n ≡ 0 (mod 4), out ≡ 0 (mod 16)
//   F16 vector path: e ≡ 0 (mod 8), sm ≡ 0 (mod 8), out ≡ 0 (mod 16)
// (always true for cudaMalloc'd planes of even n); otherwise one element per thread, any alignment
// (out must still be aligned to its element type). Pointers device-accessible; `stream` is a
// cudaStream_t as void* (nullptr = default stream). Enqueues only (no sync).
// Errors: kInvalidArgument (n < 0, null pointer with n > 0, misaligned out), kUnavailable (built
// without CUDA), kInternal (device query or launch error, with the CUDA error string).
Status LaunchRecoverF32(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n, void* stream);
Status LaunchRecoverF16(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, void* stream);
// F8_E4M3 (kernels/recovery.cu): a thread recovers 8 values (one 8-byte load of e, one 4-byte load of
// sm, one 8-byte store) when e ≡ 0 (mod 8), sm ≡ 0 (mod 4), out ≡ 0 (mod 8) and n ≡ 0 (mod 8)
// (RecoverF8E4M3VectorPathFits), else a pair of values (one SM byte) per thread. As above otherwise.
Status LaunchRecoverF8E4M3(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, void* stream);
bool RecoverF8E4M3VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint8_t* out, int64_t n);
// MXFP4 (kernels/recovery.cu): a thread recovers 16 values (one 16-byte load of e, one 4-byte load of sm,
// one 8-byte store) when e ≡ 0 (mod 16), sm ≡ 0 (mod 4) and out ≡ 0 (mod 8) (RecoverMxfp4VectorPathFits),
// else 4 values (one SM byte, two output bytes) per thread; the n/32 scale bytes (e + n) are copied by the
// same launch. Errors as above, and kInvalidArgument when n is not a multiple of 32.
Status LaunchRecoverMxfp4(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, void* stream);
bool RecoverMxfp4VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint8_t* out);
// True when LaunchRecoverF32 / LaunchRecoverF16 take their vector path for these pointers (pure
// address arithmetic; usable without CUDA).
bool RecoverF32VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint32_t* out, int64_t n);
bool RecoverF16VectorPathFits(const uint8_t* e, const uint8_t* sm, const uint16_t* out);

// Test/bench helpers as RecoverBf16OnDevice: the host planes (e of EPlaneBytes(dtype, n), sm of
// SmPlaneBytes(dtype, n) bytes) are
// copied to fresh device buffers, e and sm each starting `offset` bytes past a 256-byte boundary
// (0 = the vector path for even n; an odd offset forces the element path), recovered into a fresh
// aligned out, copied back; syncs.
// Errors: kUnavailable without CUDA or device; kInvalidArgument as the launchers; kInternal on CUDA errors.
Status RecoverF32OnDevice(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n, int offset = 0);
Status RecoverF16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, int offset = 0);
Status RecoverF8E4M3OnDevice(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, int offset = 0);
Status RecoverMxfp4OnDevice(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, int offset = 0);

}  // namespace zipmoe::kernels
