// Internal to kernels/*.cu: a CUDA runtime result as a Status, the one rule every kernel unit's host
// code follows (recovery.cu, fp8_dequant.cu, grouped_expert.cu, device_memory.cu).
// Thread-safety: pure (cudaGetLastError is per host thread).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "common/status.h"

namespace zipmoe::kernels {

// Ok for cudaSuccess; otherwise kInternal "<what>: <CUDA's message>", after clearing the host thread's
// last error: a failed runtime call also sets that (non-sticky) error, which would otherwise be
// reported again by the next launch check.
inline Status CudaStatus(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return Status::Internal(what + ": " + cudaGetErrorString(err));
}

}  // namespace zipmoe::kernels
