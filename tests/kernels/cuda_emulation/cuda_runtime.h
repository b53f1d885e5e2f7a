// A CPU emulation of the part of CUDA that kernels/*.cu use, so that their kernels and launchers run in
// ctest on machines without a GPU (CI has nvcc but no device). Tests only: the binary that uses it,
// zipmoe_kernels_emulated_tests, compiles each kernels/<unit>.cu as C++ with this directory first on the
// include path, so `#include <cuda_runtime.h>` lands here (tests/kernels/cuda_emulation/CMakeLists.txt).
//
// What it models (CUDA C++ Programming Guide, "Execution model", "Warp shuffle functions",
// "Synchronization functions"; CUDA Runtime API 13):
//   - a launch runs the grid's blocks one after another on the calling host thread; a block's threads are
//     fibers (ucontext) that run until they reach __syncthreads(), a warp shuffle or their end, so every
//     interleaving it produces is one a GPU may produce;
//   - __shfl_xor_sync exchanges values among the lanes of a warp once every live lane of the warp has
//     reached it; a lane named in the mask that exited, a lane of a partial warp named in the mask, masks
//     that differ between lanes, and lanes waiting at __shfl_xor_sync while others of their warp wait at
//     __syncthreads are reported as errors (on a GPU: undefined behaviour, usually a hang);
//   - __shared__ variables are per block (static thread_local: one block at a time per host thread), the
//     dynamic shared memory (ZIPMOE_DYNAMIC_SHARED) is filled with 0xFF bytes (NaN floats) at each block's
//     start, and cudaMalloc memory with 0xFF at allocation: a kernel that reads what nobody wrote, or leaves
//     part of its output unwritten, shows it in a bit-exact comparison;
//   - launch configurations a GPU refuses (a block above 1024 threads, grid y/z above 65535, x above
//     2^31 - 1, dynamic shared memory above 48 KiB) fail the launch: cudaGetLastError returns
//     cudaErrorInvalidConfiguration; a pointer argument of a kernel that is neither null, nor inside a
//     cudaMalloc allocation, nor inside a cudaHostRegister'ed range fails it with cudaErrorIllegalAddress
//     (a kernel given a pageable host pointer);
//   - cudaMemcpy checks that device-side pointers of its kind lie inside one allocation (or registered
//     range) with the whole copy (cudaErrorInvalidValue otherwise);
//   - memory: cudaMalloc is the host heap at exact sizes, so AddressSanitizer (the emulated units are built
//     with it) reports a kernel's out-of-bounds access, and UBSan's alignment check a misaligned vector
//     load (on a GPU a sticky "misaligned address" error).
// What it does not model: timing, concurrency between streams (everything is synchronous), races between
// blocks (they run one after another), memory ordering beyond the barriers, the undefined contents of static
// __shared__ variables at a block's start (zero in a host thread's first block, the previous block's values
// after), nvcc's contraction of a * b + c into an FMA (the kernels write fmaf / __fmul_rn / __fadd_rn where
// the order matters; here every such expression is compiled with -ffp-contract=off), and expf's last-ulp
// differences from CUDA's (tests that compare exponentials allow one BF16 ulp).
#pragma once

#include <math.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#define ZIPMOE_CUDA_EMULATION 1

// ---- the device language ----
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static thread_local

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

namespace zipmoe_cuda_emulation {

// The position of the fiber that runs now (valid inside a kernel only).
struct ThreadPosition {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
const ThreadPosition& Position();
// The block's dynamic shared memory (the launch's shared_bytes, 16-byte aligned, 0xFF-filled).
void* DynamicSharedMemory();
void SyncThreads();
// Lane `lane ^ lane_mask` of the caller's width-lane segment gives its `bits` (the caller's own when that
// lane lies in a higher segment, as CUDA's __shfl_xor_sync).
uint64_t ShuffleXor(unsigned mask, uint64_t bits, int lane_mask, int width);

}  // namespace zipmoe_cuda_emulation

#define threadIdx (::zipmoe_cuda_emulation::Position().thread_idx)
#define blockIdx (::zipmoe_cuda_emulation::Position().block_idx)
#define blockDim (::zipmoe_cuda_emulation::Position().block_dim)
#define gridDim (::zipmoe_cuda_emulation::Position().grid_dim)
#define ZIPMOE_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(::zipmoe_cuda_emulation::DynamicSharedMemory())

inline void __syncthreads() { ::zipmoe_cuda_emulation::SyncThreads(); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "__shfl_xor_sync: a value of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = ::zipmoe_cuda_emulation::ShuffleXor(mask, bits, lane_mask, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
// Byte k of the result is byte (s >> 4k) & 7 of the 8 bytes {y:x} (x bytes 0-3, y bytes 4-7).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t v = static_cast<uint64_t>(y) << 32 | x;
  unsigned r = 0;
  for (int k = 0; k < 4; ++k) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
}
// IEEE round-to-nearest operations (this translation unit is compiled with -ffp-contract=off).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }

// ---- the runtime API (values as in CUDA 13's driver_types.h where a caller may compare them) ----
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorCallRequiresNewerDriver = 36,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorHostMemoryNotRegistered = 713,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
};
using cudaError = cudaError_t;
struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrIntegrated = 18,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};
constexpr unsigned cudaHostRegisterMapped = 0x02;

cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t err);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags);
cudaError_t cudaHostUnregister(void* ptr);
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags);
template <typename T>
cudaError_t cudaHostGetDevicePointer(T** device, void* host, unsigned flags) {
  return cudaHostGetDevicePointer(reinterpret_cast<void**>(device), host, flags);
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
// Blocks of `threads` threads one emulated SM keeps resident (a fixed 2; the emulated device has 2 SMs),
// so launchers that cap their grid at the resident blocks grid-stride over their work as on a GPU.
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int threads, size_t shared_bytes) {
  if (blocks == nullptr || threads <= 0 || threads > 1024) return cudaErrorInvalidValue;
  (void)shared_bytes;
  *blocks = 2;
  return cudaSuccess;
}

namespace zipmoe_cuda_emulation {

// Checks a launch's configuration; on failure records the error cudaGetLastError returns and says why on
// stderr. `pointer_ok` is false when a pointer argument is not device-accessible.
bool BeginLaunch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, bool pointers_ok);
// Runs `body` once per thread of every block of the grid (blocks in order, threads as fibers).
void RunGrid(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, void (*body)(void*), void* context);
// Whether a kernel may dereference `p`: null, inside a cudaMalloc allocation or a registered host range.
bool DeviceAccessible(const void* p);

template <typename P>
bool ArgumentOk(const P& p) {
  if constexpr (std::is_pointer<P>::value) {
    return DeviceAccessible(static_cast<const void*>(p));
  } else {
    return true;
  }
}

template <typename... Params>
struct Launcher {
  void (*kernel)(Params...);
  const char* name;
  dim3 grid, block;
  size_t shared_bytes;

  template <typename... Args>
  void operator()(Args&&... args) const {
    // Kernel parameters are copies, as on a GPU.
    std::tuple<std::decay_t<Params>...> params(std::forward<Args>(args)...);
    const bool pointers_ok = std::apply([](const auto&... p) { return (ArgumentOk(p) && ... && true); }, params);
    if (!BeginLaunch(name, grid, block, shared_bytes, pointers_ok)) return;
    struct Context {
      void (*kernel)(Params...);
      std::tuple<std::decay_t<Params>...>* params;
    } context{kernel, &params};
    RunGrid(
        name, grid, block, shared_bytes,
        [](void* c) {
          auto* ctx = static_cast<Context*>(c);
          std::apply(ctx->kernel, *ctx->params);
        },
        &context);
  }
};

template <typename... Params>
Launcher<Params...> Launch(void (*kernel)(Params...), const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                           cudaStream_t) {
  return Launcher<Params...>{kernel, name, grid, block, shared_bytes};
}

}  // namespace zipmoe_cuda_emulation

// kernels/cuda_launch.cuh: ZIPMOE_CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...).
#define ZIPMOE_CUDA_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::zipmoe_cuda_emulation::Launch(kernel, #kernel, grid, block, shared_bytes, stream)
