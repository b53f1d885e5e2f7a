// HostRegistration with CUDA: cudaHostRegister(cudaHostRegisterMapped) + cudaHostGetDevicePointer.
#include <cuda_runtime.h>

#include <string>

#include "kernels/host_registration.h"

namespace zipmoe::kernels {
namespace {

bool IsNoDeviceError(cudaError_t err) {
  return err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver || err == cudaErrorInitializationError ||
         err == cudaErrorNotSupported || err == cudaErrorCallRequiresNewerDriver;
}

Status CudaFailure(cudaError_t err, const char* what, uint64_t bytes) {
  (void)cudaGetLastError();  // clear a sticky error so later calls are not poisoned
  std::string message = std::string("HostRegistration::Register: ") + what + " (" + std::to_string(bytes) +
                        " bytes): " + cudaGetErrorString(err);
  if (IsNoDeviceError(err)) return Status::Unavailable(message);
  return Status::Internal(message);
}

}  // namespace

Result<HostRegistration> HostRegistration::Register(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return Status::InvalidArgument("HostRegistration::Register: null pointer or 0 bytes");
  }
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (err == cudaSuccess) err = cudaErrorNoDevice;
    return CudaFailure(err, "no CUDA device", bytes);
  }
  err = cudaHostRegister(ptr, static_cast<size_t>(bytes), cudaHostRegisterMapped);
  if (err != cudaSuccess) return CudaFailure(err, "cudaHostRegister", bytes);
  void* device = nullptr;
  err = cudaHostGetDevicePointer(&device, ptr, 0);
  if (err != cudaSuccess) {
    Status failure = CudaFailure(err, "cudaHostGetDevicePointer", bytes);
    (void)cudaHostUnregister(ptr);  // undo; the first error is the one reported
    return failure;
  }
  return HostRegistration(ptr, device, bytes);
}

void HostRegistration::Reset() {
  if (host_ != nullptr) {
    // A failure here (driver torn down at exit) leaves nothing to undo; clear the sticky error.
    if (cudaHostUnregister(host_) != cudaSuccess) (void)cudaGetLastError();
  }
  host_ = nullptr;
  device_ = nullptr;
  size_bytes_ = 0;
}

}  // namespace zipmoe::kernels
