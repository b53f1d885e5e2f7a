// HostRegistration without CUDA: Register() is unavailable, so no object ever holds a range.
// The CUDA implementation is kernels/host_registration.cu (selected like kernels/recovery_ref.cc).
#include "kernels/host_registration.h"

namespace zipmoe::kernels {

#ifndef ZIPMOE_HAVE_CUDA
Result<HostRegistration> HostRegistration::Register(void* ptr, uint64_t bytes) {
  if (ptr == nullptr || bytes == 0) {
    return Status::InvalidArgument("HostRegistration::Register: null pointer or 0 bytes");
  }
  return Status::Unavailable("HostRegistration::Register: zipmoe was built without CUDA");
}

void HostRegistration::Reset() {
  host_ = nullptr;
  device_ = nullptr;
  size_bytes_ = 0;
}
#endif

}  // namespace zipmoe::kernels
