// BF16 tensor recovery (ZipMoE §3.1 Fig. 5 ➐): re-assembles BF16 from the exponent plane (decoded
// E-chunks) and the sign|mantissa plane (SM-chunk). Host API only; no torch, no CUDA headers.
//
// GPU path (built when nvcc is found, ZIPMOE_HAVE_CUDA): LaunchRecoverBf16 enqueues on a stream.
// CPU path and reference: RecoverBf16Reference (the same bit formula; see common/bitfield.h).
// Thread-safety: all functions are reentrant.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace zipmoe::kernels {

// True when this binary was built with the CUDA kernels.
bool BuiltWithCuda();
// Number of visible CUDA devices; 0 when built without CUDA or when no driver/device is present.
int CudaDeviceCount();

// out[i] = (sm[i] & 0x80) << 8 | e[i] << 7 | (sm[i] & 0x7f), i in [0, n).
//   e: [n] uint8 exponent plane; sm: [n] uint8 sign<<7 | mantissa; out: [n] uint16 BF16 bit patterns.
void RecoverBf16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

// GPU recovery. Pointers must be device-accessible (device memory, or host memory registered with
// cudaHostRegisterMapped / unified memory on Jetson); any alignment, any n >= 0 (tail handled).
// `stream` is a cudaStream_t passed as void* so callers need no CUDA headers; nullptr = default stream.
// Enqueues only (no sync). Errors: kInvalidArgument (null pointer with n > 0),
// kUnavailable (built without CUDA), kInternal (launch error, with the CUDA error string).
Status LaunchRecoverBf16(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, void* stream);

// Test/bench helper: copies host planes to the device, recovers there, copies back and syncs.
// Errors: kUnavailable without CUDA or device; kInternal on CUDA errors.
Status RecoverBf16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n);

}  // namespace zipmoe::kernels
