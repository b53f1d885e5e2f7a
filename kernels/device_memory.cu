// Device memory helpers with CUDA (kernels/device_memory.h).
#include <cuda_runtime.h>

#include <string>

#include "kernels/device_memory.h"
#include "kernels/cuda_status.cuh"

namespace zipmoe::kernels {

void* DeviceAliasOf(const void* p) {
  if (p == nullptr) return nullptr;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // no device / driver: pageable as far as we can tell
    return nullptr;
  }
  // cudaMemoryTypeUnregistered (pageable) has no device address.
  if (attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
    return attr.devicePointer;
  return nullptr;
}

Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
  if (bytes == 0) return Status::Ok();
  if (dst == nullptr || src == nullptr) return Status::InvalidArgument("CopyAsync: null pointer");
  const cudaError_t err =
      cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes");
  return Status::Ok();
}

Status SynchronizeStream(void* stream) {
  const cudaError_t err = cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
  if (err != cudaSuccess) return CudaStatus(err, "cudaStreamSynchronize");
  return Status::Ok();
}

Result<DeviceProperties> QueryDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return Status::Unavailable("QueryDevice: no CUDA device");
  }
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaGetDevice");
  int integrated = 0;
  err = cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device);
  if (err != cudaSuccess) return CudaStatus(err, "cudaDeviceGetAttribute(cudaDevAttrIntegrated)");
  size_t free_bytes = 0, total_bytes = 0;
  err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) return CudaStatus(err, "cudaMemGetInfo");
  DeviceProperties p;
  p.integrated = integrated != 0;
  p.free_bytes = free_bytes;
  p.total_bytes = total_bytes;
  return p;
}

}  // namespace zipmoe::kernels
