// CUDA BF16 recovery kernel (ZipMoE §3.1 Fig. 5 ➐) and its launcher.
#include <cuda_runtime.h>

#include <string>

#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kElemsPerThread = 4;  // one 32-bit load of e and of sm per thread on the fast path

__device__ __forceinline__ uint16_t RecoverOne(uint8_t e, uint8_t sm) {
  return static_cast<uint16_t>((static_cast<uint16_t>(sm & 0x80u) << 8) |
                               (static_cast<uint16_t>(e) << 7) | (sm & 0x7fu));
}

// Grid: x = groups of kElemsPerThread elements. Coalesced 4-byte loads when all pointers are
// aligned (the launcher checks), otherwise byte loads.
//   e: [n] uint8, sm: [n] uint8, out: [n] uint16
__global__ void RecoverBf16Kernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm,
                                  uint16_t* __restrict__ out, int64_t n, bool aligned) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       g * kElemsPerThread < n; g += stride) {
    const int64_t base = g * kElemsPerThread;
    if (aligned && base + kElemsPerThread <= n) {
      const uint32_t e4 = reinterpret_cast<const uint32_t*>(e)[g];
      const uint32_t s4 = reinterpret_cast<const uint32_t*>(sm)[g];
      ushort4 o;
      o.x = RecoverOne(e4 & 0xff, s4 & 0xff);
      o.y = RecoverOne((e4 >> 8) & 0xff, (s4 >> 8) & 0xff);
      o.z = RecoverOne((e4 >> 16) & 0xff, (s4 >> 16) & 0xff);
      o.w = RecoverOne(e4 >> 24, s4 >> 24);
      reinterpret_cast<ushort4*>(out)[g] = o;
    } else {
      for (int64_t i = base; i < n && i < base + kElemsPerThread; ++i) out[i] = RecoverOne(e[i], sm[i]);
    }
  }
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return count;
}

Status LaunchRecoverBf16(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, void* stream) {
  if (n < 0) return Status::InvalidArgument("LaunchRecoverBf16: negative n");
  if (n == 0) return Status::Ok();
  if (e == nullptr || sm == nullptr || out == nullptr)
    return Status::InvalidArgument("LaunchRecoverBf16: null pointer with n=" + std::to_string(n));
  const bool aligned = (reinterpret_cast<uintptr_t>(e) % 4 == 0) && (reinterpret_cast<uintptr_t>(sm) % 4 == 0) &&
                       (reinterpret_cast<uintptr_t>(out) % 8 == 0);
  const int64_t groups = (n + kElemsPerThread - 1) / kElemsPerThread;
  const int64_t blocks64 = (groups + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int blocks = static_cast<int>(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
  RecoverBf16Kernel<<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream)>>>(e, sm, out, n, aligned);
  return CudaStatus(cudaGetLastError(), "RecoverBf16Kernel launch");
}

Status RecoverBf16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  if (CudaDeviceCount() == 0) return Status::Unavailable("RecoverBf16OnDevice: no CUDA device");
  uint8_t* d_e = nullptr;
  uint8_t* d_sm = nullptr;
  uint16_t* d_out = nullptr;
  const size_t bytes = static_cast<size_t>(n);
  Status st = CudaStatus(cudaMalloc(&d_e, bytes + 1), "cudaMalloc e");
  if (st.ok()) st = CudaStatus(cudaMalloc(&d_sm, bytes + 1), "cudaMalloc sm");
  if (st.ok()) st = CudaStatus(cudaMalloc(&d_out, 2 * bytes + 2), "cudaMalloc out");
  if (st.ok()) st = CudaStatus(cudaMemcpy(d_e, e, bytes, cudaMemcpyHostToDevice), "cudaMemcpy e");
  if (st.ok()) st = CudaStatus(cudaMemcpy(d_sm, sm, bytes, cudaMemcpyHostToDevice), "cudaMemcpy sm");
  if (st.ok()) st = LaunchRecoverBf16(d_e, d_sm, d_out, n, nullptr);
  // NOTE(sync): the copy back synchronises the default stream; this helper is for tests/benches.
  if (st.ok()) st = CudaStatus(cudaMemcpy(out, d_out, 2 * bytes, cudaMemcpyDeviceToHost), "cudaMemcpy out");
  cudaFree(d_e);
  cudaFree(d_sm);
  cudaFree(d_out);
  return st;
}

}  // namespace zipmoe::kernels
