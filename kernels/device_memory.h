// Device memory helpers of the GPU executor (issue 36): where a host pointer is readable by the
// device, asynchronous copies, stream synchronisation and the device's memory kind. Plain C++ API
// (no CUDA headers), so torch-side code in services/executor calls CUDA without CUDA headers;
// kernels/device_memory.cu with CUDA, no_cuda.cc (kUnavailable / nullptr) without.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace zipmoe::kernels {

// The device address of host memory `p` when the device can read it in place (pinned or
// registered host memory, managed memory, or a device pointer itself); nullptr when it cannot
// (pageable memory), without CUDA, or with no device. Never fails.
void* DeviceAliasOf(const void* p);

// cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream). Asynchronous only from pinned or
// registered host memory (a pageable source is copied before returning, as CUDA does).
// Errors: kUnavailable (built without CUDA), kInternal (CUDA error string).
Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream);

// cudaStreamSynchronize(stream). Errors: kUnavailable (built without CUDA), kInternal.
Status SynchronizeStream(void* stream);

struct DeviceProperties {
  bool integrated = false;  // cudaDevAttrIntegrated: the GPU shares the host's memory (Jetson)
  uint64_t free_bytes = 0;  // cudaMemGetInfo at the time of the call
  uint64_t total_bytes = 0;
};
// The current device's properties. Errors: kUnavailable (built without CUDA, no device), kInternal.
Result<DeviceProperties> QueryDevice();
// Device bytes the GPU executor may give to expert slots by default on a discrete GPU: 90 % of the
// free memory less 2 GiB for torch's own tensors (activations, KV cache, dense weights), >= 0.
inline uint64_t UsableExpertBytes(const DeviceProperties& p) {
  const double usable = 0.9 * static_cast<double>(p.free_bytes) - 2.0 * (1ull << 30);
  return usable > 0 ? static_cast<uint64_t>(usable) : 0;
}

}  // namespace zipmoe::kernels
