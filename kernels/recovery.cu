// CUDA BF16 recovery kernel (ZipMoE §3.3 "Memory-Coalesced Tensor Recovery Kernel", §3.1 Fig. 5 ➐)
// and its launcher.
//
// The kernel is memory-bound (4 bytes of traffic and a handful of bit operations per element), so
// each thread moves 16 elements with one 128-bit load of e, one of sm and two 128-bit stores of out;
// consecutive threads take consecutive 16-element groups, so a warp reads 512 contiguous bytes of
// each plane and writes 1 KiB of out. The bit work stays in registers: per 4 elements,
//   hi = (sm & 0x80808080) | (e >> 1 & 0x7f7f7f7f)    high bytes of the 4 BF16 values
//   lo = (sm & 0x7f7f7f7f) | (e << 7 & 0x80808080)    low bytes
// then two byte permutes interleave lo/hi into 4 little-endian uint16.
// SelectRecoveryKernelPath (kernels/recovery_ref.cc) picks 16-byte vectors, 4-byte vectors, or one
// element per thread from the pointers' alignment; the unaligned head and the short tail are done
// element-wise by the first threads of the same launch.
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;  // >= 16, so block 0 covers the head and the tail

__device__ __forceinline__ uint16_t RecoverOne(uint8_t e, uint8_t sm) {
  return static_cast<uint16_t>((static_cast<uint16_t>(sm & 0x80u) << 8) | (static_cast<uint16_t>(e) << 7) |
                               (sm & 0x7fu));
}

// Four elements: e4, s4 hold bytes i..i+3 of e and sm; returns out[i..i+1] in .x, out[i+2..i+3] in .y.
__device__ __forceinline__ uint2 RecoverWord(uint32_t e4, uint32_t s4) {
  const uint32_t hi = (s4 & 0x80808080u) | ((e4 >> 1) & 0x7f7f7f7fu);
  const uint32_t lo = (s4 & 0x7f7f7f7fu) | ((e4 << 7) & 0x80808080u);
  // __byte_perm(lo, hi, s): byte k of the result is byte (s >> 4k & 7) of {hi:lo}; lo = 0..3, hi = 4..7.
  return make_uint2(__byte_perm(lo, hi, 0x5140), __byte_perm(lo, hi, 0x7362));
}

template <int kWidth>
struct VecTraits;
template <>
struct VecTraits<16> {  // uint4 loads of e/sm, two uint4 stores of out
  using Load = uint4;
  __device__ static void Recover(const Load& ev, const Load& sv, uint4* out, int64_t g) {
    const uint2 a = RecoverWord(ev.x, sv.x), b = RecoverWord(ev.y, sv.y);
    const uint2 c = RecoverWord(ev.z, sv.z), d = RecoverWord(ev.w, sv.w);
    out[2 * g] = make_uint4(a.x, a.y, b.x, b.y);
    out[2 * g + 1] = make_uint4(c.x, c.y, d.x, d.y);
  }
};
template <>
struct VecTraits<4> {  // uint32 loads of e/sm, one uint2 store of out
  using Load = uint32_t;
  __device__ static void Recover(const Load& ev, const Load& sv, uint2* out, int64_t g) {
    out[g] = RecoverWord(ev, sv);
  }
};

// Vector path. Grid: x = grid-stride over groups of kWidth elements starting at element `head`.
//   e: [n] uint8, sm: [n] uint8, out: [n] uint16.
// Preconditions (checked by SelectRecoveryKernelPath on the host): e + head and sm + head are
// kWidth-aligned, out + head is min(2 * kWidth, 16)-aligned; 0 <= head <= n, head < kWidth.
template <int kWidth>
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverBf16VecKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint16_t* __restrict__ out,
                         int64_t n, int64_t head) {
  using Traits = VecTraits<kWidth>;
  using Load = typename Traits::Load;
  using Store = std::conditional_t<kWidth == 16, uint4, uint2>;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = (n - head) / kWidth;
  const Load* ev = reinterpret_cast<const Load*>(e + head);
  const Load* sv = reinterpret_cast<const Load*>(sm + head);
  Store* ov = reinterpret_cast<Store*>(out + head);
  for (int64_t g = tid; g < groups; g += stride) Traits::Recover(ev[g], sv[g], ov, g);
  // Unaligned head [0, head) and short tail [head + groups * kWidth, n): < kWidth elements each.
  if (tid < head) out[tid] = RecoverOne(e[tid], sm[tid]);
  const int64_t tail = head + groups * kWidth;
  if (tid < n - tail) out[tail + tid] = RecoverOne(e[tail + tid], sm[tail + tid]);
}

// Fallback when no vector path fits the pointers' alignment. Grid: x = grid-stride over elements.
//   e: [n] uint8, sm: [n] uint8, out: [n] uint16.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverBf16ScalarKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint16_t* __restrict__ out,
                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = RecoverOne(e[i], sm[i]);
  }
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();  // a failed runtime call also sets the (non-sticky) last error; clear it
  return Status::Internal(std::string(what) + ": " + cudaGetErrorString(err));
}

// Blocks for `work` items (groups or elements), one item per thread per grid-stride step, capped at
// what the current device keeps resident at once for `kernel` (more blocks only add scheduling
// work; fewer leave loads out of flight). At least 1.
template <typename Kernel>
Status GridBlocks(Kernel kernel, int64_t work, int* blocks) {
  int device = 0, sms = 0, per_sm = 0;
  Status st = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
  if (st.ok()) st = CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  if (st.ok()) {
    st = CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreadsPerBlock, 0),
                    "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  }
  if (!st.ok()) return st;
  const int64_t resident = static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1);
  const int64_t needed = (work + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int64_t b = needed < resident ? needed : resident;
  *blocks = static_cast<int>(b < 1 ? 1 : b);
  return Status::Ok();
}

// First element index at which the planes are `width`-aligned, clamped to n.
int64_t HeadElements(const uint8_t* e, int64_t width, int64_t n) {
  const int64_t head = static_cast<int64_t>((width - reinterpret_cast<uintptr_t>(e) % width) % width);
  return head < n ? head : n;
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
  if (n < 0) return Status::InvalidArgument("LaunchRecoverBf16: negative n=" + std::to_string(n));
  if (n == 0) return Status::Ok();
  if (e == nullptr || sm == nullptr || out == nullptr)
    return Status::InvalidArgument("LaunchRecoverBf16: null pointer with n=" + std::to_string(n));
  if (reinterpret_cast<uintptr_t>(out) % 2 != 0)
    return Status::InvalidArgument("LaunchRecoverBf16: out is not 2-byte aligned");
  const auto s = static_cast<cudaStream_t>(stream);
  int blocks = 1;
  switch (SelectRecoveryKernelPath(e, sm, out)) {
    case RecoveryKernelPath::kVec16: {
      const int64_t head = HeadElements(e, 16, n);
      ZM_RETURN_IF_ERROR(GridBlocks(RecoverBf16VecKernel<16>, (n - head) / 16, &blocks));
      RecoverBf16VecKernel<16><<<blocks, kThreadsPerBlock, 0, s>>>(e, sm, out, n, head);
      return CudaStatus(cudaGetLastError(), "RecoverBf16VecKernel<16> launch");
    }
    case RecoveryKernelPath::kVec4: {
      const int64_t head = HeadElements(e, 4, n);
      ZM_RETURN_IF_ERROR(GridBlocks(RecoverBf16VecKernel<4>, (n - head) / 4, &blocks));
      RecoverBf16VecKernel<4><<<blocks, kThreadsPerBlock, 0, s>>>(e, sm, out, n, head);
      return CudaStatus(cudaGetLastError(), "RecoverBf16VecKernel<4> launch");
    }
    case RecoveryKernelPath::kScalar:
      break;
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverBf16ScalarKernel, n, &blocks));
  RecoverBf16ScalarKernel<<<blocks, kThreadsPerBlock, 0, s>>>(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverBf16ScalarKernel launch");
}

Status RecoverBf16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n) {
  if (n < 0) return Status::InvalidArgument("RecoverBf16OnDevice: negative n=" + std::to_string(n));
  if (n > 0 && (e == nullptr || sm == nullptr || out == nullptr))
    return Status::InvalidArgument("RecoverBf16OnDevice: null pointer with n=" + std::to_string(n));
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
