// Device memory helpers without CUDA (kernels/device_memory.h); the CUDA side is device_memory.cu.
#include "kernels/device_memory.h"

namespace zipmoe::kernels {

#ifndef ZIPMOE_HAVE_CUDA
void* DeviceAliasOf(const void* p) {
  (void)p;
  return nullptr;
}

Status CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) {
  (void)dst;
  (void)src;
  (void)bytes;
  (void)stream;
  return Status::Unavailable("CopyAsync: zipmoe was built without CUDA");
}

Status SynchronizeStream(void* stream) {
  (void)stream;
  return Status::Unavailable("SynchronizeStream: zipmoe was built without CUDA");
}

Result<DeviceProperties> QueryDevice() { return Status::Unavailable("QueryDevice: zipmoe was built without CUDA"); }
#endif

}  // namespace zipmoe::kernels
