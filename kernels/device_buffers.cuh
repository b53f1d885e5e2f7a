// Internal to kernels/*.cu: device buffers for the *OnDevice test and bench helpers (grouped_expert.cu,
// dense_decode.cu), freed when the holder goes out of scope. Not for the executor's hot path.
// Thread-safety: one holder per thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "kernels/cuda_status.cuh"

namespace zipmoe::kernels {

struct DeviceBuffers {
  std::vector<void*> ptrs;
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : ptrs) cudaFree(p);
  }
  // A device buffer of `count` T (at least one byte), filled from host `src` unless it is null.
  template <typename T>
  Status Upload(const T* src, int64_t count, T** dst) {
    void* p = nullptr;
    const size_t bytes = static_cast<size_t>(count) * sizeof(T);
    ZM_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"));
    ptrs.push_back(p);
    if (src != nullptr && bytes > 0)
      ZM_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"));
    *dst = static_cast<T*>(p);
    return Status::Ok();
  }
};

}  // namespace zipmoe::kernels
