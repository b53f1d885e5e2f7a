// Internal to kernels/*.cu: how many blocks of a kernel the current device keeps resident at once,
// cached per (kernel, device, block size). The occupancy query and the SM-count attribute cost
// microseconds of host time per call; an expert-sized recovery or dequantisation runs ~10 µs on an
// H200, and the host time before a launch is device idle time (recovery_bench times an enqueue with
// CUDA events, so it was counted against the kernel: issue 36, "launch-bound below 16 Mi values").
// Thread-safety: ResidentBlocks may be called from any host thread (one mutex around the cache).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "common/status.h"
#include "kernels/cuda_status.cuh"

namespace zipmoe::kernels {

// *out = SM count x blocks of `threads` threads (no dynamic shared memory) one SM holds at once for
// `kernel` (at least 1 per SM), on the calling thread's current device; the first call per (kernel,
// device, threads) asks CUDA, later ones read the cache. Errors: kInternal with CUDA's message.
template <typename Kernel>
Status ResidentBlocks(Kernel kernel, int threads, int64_t* out) {
  int device = 0;
  ZM_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  using Key = std::tuple<const void*, int, int>;
  static std::mutex mu;
  static std::map<Key, int64_t> cache;
  const Key key{reinterpret_cast<const void*>(kernel), device, threads};
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = cache.find(key);
    if (it != cache.end()) {
      *out = it->second;
      return Status::Ok();
    }
  }
  int sms = 0, per_sm = 0;
  ZM_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count"));
  ZM_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0),
                                "cudaOccupancyMaxActiveBlocksPerMultiprocessor"));
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, resident);
  *out = resident;
  return Status::Ok();
}

}  // namespace zipmoe::kernels
