#include "common/bitfield.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {

void RecoverBf16Reference(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  MergeBf16(e, sm, n, out);
}

#ifndef ZIPMOE_HAVE_CUDA
bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
Status LaunchRecoverBf16(const uint8_t*, const uint8_t*, uint16_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverBf16: zipmoe was built without CUDA");
}
Status RecoverBf16OnDevice(const uint8_t*, const uint8_t*, uint16_t*, int64_t) {
  return Status::Unavailable("RecoverBf16OnDevice: zipmoe was built without CUDA");
}
#endif

}  // namespace zipmoe::kernels
