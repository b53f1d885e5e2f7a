// What a build without CUDA (nvcc not found, or ZIPMOE_ENABLE_CUDA=OFF) links instead of kernels/*.cu: every
// device entry point answers kUnavailable ("zipmoe was built without CUDA") after the same argument checks as
// the CUDA side, BuiltWithCuda() is false and CudaDeviceCount() 0, so callers take their CPU paths.
// A build with CUDA links the .cu units instead (kernels/CMakeLists.txt), and so does the CPU emulation of
// CUDA the tests use (tests/kernels/cuda_emulation).
#include <string>

#include "kernels/dense_decode.h"
#include "kernels/device_memory.h"
#include "kernels/fp8_dequant.h"
#include "kernels/grouped_expert.h"
#include "kernels/host_registration.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {

// ---- recovery (kernels/recovery.cu) ----
Status LaunchRecoverBf16Batch(const RecoverySegment* segments, int count, void*) {
  ZM_RETURN_IF_ERROR(ValidateRecoverySegments("LaunchRecoverBf16Batch", segments, count));
  return Status::Unavailable("LaunchRecoverBf16Batch: zipmoe was built without CUDA");
}
bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
Status LaunchRecoverBf16(const uint8_t*, const uint8_t*, uint16_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverBf16: zipmoe was built without CUDA");
}
Status RecoverBf16OnDevice(const uint8_t*, const uint8_t*, uint16_t*, int64_t) {
  return Status::Unavailable("RecoverBf16OnDevice: zipmoe was built without CUDA");
}
Status LaunchRecoverF32(const uint8_t*, const uint8_t*, uint32_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverF32: zipmoe was built without CUDA");
}
Status LaunchRecoverF16(const uint8_t*, const uint8_t*, uint16_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverF16: zipmoe was built without CUDA");
}
Status RecoverF32OnDevice(const uint8_t*, const uint8_t*, uint32_t*, int64_t, int) {
  return Status::Unavailable("RecoverF32OnDevice: zipmoe was built without CUDA");
}
Status RecoverF16OnDevice(const uint8_t*, const uint8_t*, uint16_t*, int64_t, int) {
  return Status::Unavailable("RecoverF16OnDevice: zipmoe was built without CUDA");
}
Status LaunchRecoverF8E4M3(const uint8_t*, const uint8_t*, uint8_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverF8E4M3: zipmoe was built without CUDA");
}
Status RecoverF8E4M3OnDevice(const uint8_t*, const uint8_t*, uint8_t*, int64_t, int) {
  return Status::Unavailable("RecoverF8E4M3OnDevice: zipmoe was built without CUDA");
}
Status LaunchRecoverMxfp4(const uint8_t*, const uint8_t*, uint8_t*, int64_t, void*) {
  return Status::Unavailable("LaunchRecoverMxfp4: zipmoe was built without CUDA");
}
Status RecoverMxfp4OnDevice(const uint8_t*, const uint8_t*, uint8_t*, int64_t, int) {
  return Status::Unavailable("RecoverMxfp4OnDevice: zipmoe was built without CUDA");
}

// ---- FP8 / MXFP4 dequantisation (kernels/fp8_dequant.cu) ----
Status LaunchDequantizeF8E4M3ToBf16(const uint8_t*, const float*, int64_t, int64_t, int64_t, int64_t, uint16_t*,
                                    void*) {
  return Status::Unavailable("LaunchDequantizeF8E4M3ToBf16: zipmoe was built without CUDA");
}
Status DequantizeF8E4M3ToBf16OnDevice(const uint8_t*, const float*, int64_t, int64_t, int64_t, int64_t, uint16_t*) {
  return Status::Unavailable("DequantizeF8E4M3ToBf16OnDevice: zipmoe was built without CUDA");
}
Status LaunchDequantizeMxfp4ToBf16(const uint8_t*, int64_t, int64_t, uint16_t*, void*) {
  return Status::Unavailable("LaunchDequantizeMxfp4ToBf16: zipmoe was built without CUDA");
}
Status DequantizeMxfp4ToBf16OnDevice(const uint8_t*, int64_t, int64_t, uint16_t*) {
  return Status::Unavailable("DequantizeMxfp4ToBf16OnDevice: zipmoe was built without CUDA");
}

// ---- the grouped expert MLP (kernels/grouped_expert.cu) ----
Status LaunchGroupedExpertMlp(const GroupedExpertArgs& args, void* stream) {
  (void)args;
  (void)stream;
  return Status::Unavailable("LaunchGroupedExpertMlp: zipmoe was built without CUDA");
}

Status GroupedExpertMlpOnDevice(const GroupedExpertArgs& host, int repeats, double* seconds) {
  ZM_RETURN_IF_ERROR(ValidateGroupedExpertTables(host));
  (void)repeats;
  (void)seconds;
  return Status::Unavailable("GroupedExpertMlpOnDevice: zipmoe was built without CUDA");
}

// ---- decode-step kernels (kernels/dense_decode.cu) ----
namespace {
Status NoCuda(const char* what) { return Status::Unavailable(std::string(what) + ": zipmoe was built without CUDA"); }
}  // namespace

Status LaunchRmsNormBf16(const RmsNormBf16Args& a, void* stream) {
  (void)stream;
  ZM_RETURN_IF_ERROR(ValidateRmsNormBf16(a));
  return NoCuda("LaunchRmsNormBf16");
}
Status LaunchRotaryBf16(const RotaryBf16Args& a, void* stream) {
  (void)stream;
  ZM_RETURN_IF_ERROR(ValidateRotaryBf16(a));
  return NoCuda("LaunchRotaryBf16");
}
Status LaunchDecodeAttentionBf16(const DecodeAttentionBf16Args& a, void* stream) {
  (void)stream;
  ZM_RETURN_IF_ERROR(ValidateDecodeAttentionBf16(a));
  return NoCuda("LaunchDecodeAttentionBf16");
}
Status RmsNormBf16OnDevice(const RmsNormBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateRmsNormBf16(host));
  return NoCuda("RmsNormBf16OnDevice");
}
Status RotaryBf16OnDevice(const RotaryBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateRotaryBf16(host));
  return NoCuda("RotaryBf16OnDevice");
}
Status DecodeAttentionBf16OnDevice(const DecodeAttentionBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateDecodeAttentionBf16(host));
  return NoCuda("DecodeAttentionBf16OnDevice");
}

// ---- device memory (kernels/device_memory.cu) ----
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

// ---- host registration (kernels/host_registration.cu) ----
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

}  // namespace zipmoe::kernels
