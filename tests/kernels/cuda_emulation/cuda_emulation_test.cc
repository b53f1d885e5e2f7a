// The CPU emulation of CUDA itself (tests/kernels/cuda_emulation/cuda_runtime.h): the semantics the kernel
// tests rely on (thread and block positions, warp shuffles, barriers and shared memory) on known answers, and
// the errors a GPU would raise (launch configurations, host pointers, shuffles CUDA leaves undefined).
#include <cuda_runtime.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cuda_launch.cuh"

namespace {

// out[linear thread id] = its (block, thread) position packed in 6 bytes.
__global__ void PositionKernel(uint64_t* out) {
  const uint64_t block = (static_cast<uint64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  const uint64_t thread = (static_cast<uint64_t>(threadIdx.z) * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  const uint64_t threads = static_cast<uint64_t>(blockDim.x) * blockDim.y * blockDim.z;
  out[block * threads + thread] = static_cast<uint64_t>(blockIdx.x) | static_cast<uint64_t>(blockIdx.y) << 8 |
                                  static_cast<uint64_t>(blockIdx.z) << 16 | static_cast<uint64_t>(threadIdx.x) << 24 |
                                  static_cast<uint64_t>(threadIdx.y) << 32 | static_cast<uint64_t>(threadIdx.z) << 40;
}

// Each lane's value after a xor butterfly (the whole warp's sum), and after one xor step of width 8.
__global__ void ButterflyKernel(const int* in, int* sums, int* partners) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int v = in[i];
  partners[i] = __shfl_xor_sync(0xffffffffu, v, 9, 8);  // lane ^ 9 leaves its 8-lane segment for odd segments
  for (int off = 16; off >= 1; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  sums[i] = v;
}

// Reverses a block's elements through shared memory (static and dynamic) and a barrier.
__global__ void ReverseKernel(const float* in, float* out) {
  __shared__ float tile[256];
  ZIPMOE_DYNAMIC_SHARED(float, scratch);
  const unsigned t = threadIdx.x, n = blockDim.x;
  tile[t] = in[blockIdx.x * n + t];
  scratch[t] = 2.0f * in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = tile[n - 1 - t] + scratch[n - 1 - t];
}

// Lane 0 of each warp exits before the others shuffle with it in the mask.
__global__ void ExitedLaneKernel(int* out) {
  if (threadIdx.x % 32 == 0) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

// Lanes 0-15 of warp 0 wait at a barrier while lanes 16-31 wait at a shuffle with all 32 lanes.
__global__ void DivergentBarrierKernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  }
}

// The dynamic shared memory's first float, as the block finds it.
__global__ void ReadSharedKernel(float* out) {
  ZIPMOE_DYNAMIC_SHARED(float, s);
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void WriteOne(int* out) { out[threadIdx.x] = 1; }

template <typename T>
T* DeviceCopy(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, sizeof(T) * host.size()), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, host.data(), sizeof(T) * host.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

template <typename T>
std::vector<T> HostCopy(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaEmulationTest, EveryThreadOfEveryBlockRunsOnceWithItsPosition) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const size_t n = 3 * 2 * 2 * 4 * 3 * 2;
  uint64_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(uint64_t) * n), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(PositionKernel, grid, block, 0, nullptr)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<uint64_t> got = HostCopy(d, n);
  size_t i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++i) {
              const uint64_t want = bx | by << 8 | bz << 16 | static_cast<uint64_t>(tx) << 24 |
                                    static_cast<uint64_t>(ty) << 32 | static_cast<uint64_t>(tz) << 40;
              ASSERT_EQ(got[i], want) << "element " << i;
            }
  cudaFree(d);
}

TEST(CudaEmulationTest, XorShufflesExchangeWithinTheWarpAndTheWidth) {
  const int n = 64;  // two warps of one block
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 37 + 11) % 101;
  int* d_in = DeviceCopy(in);
  int *d_sums = nullptr, *d_partners = nullptr;
  ASSERT_EQ(cudaMalloc(&d_sums, sizeof(int) * n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_partners, sizeof(int) * n), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(ButterflyKernel, 1, n, 0, nullptr)(d_in, d_sums, d_partners);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<int> sums = HostCopy(d_sums, n), partners = HostCopy(d_partners, n);
  for (int w = 0; w < 2; ++w) {
    int total = 0;
    for (int l = 0; l < 32; ++l) total += in[32 * w + l];
    for (int l = 0; l < 32; ++l) {
      EXPECT_EQ(sums[32 * w + l], total) << "warp " << w << " lane " << l;
      // width 8: lane ^ 9 lies in the next segment for lanes of even segments (CUDA: the caller's own value
      // when the source is in a higher segment) and in the previous one for odd segments.
      const int src = l ^ 9;
      const int want = src / 8 > l / 8 ? in[32 * w + l] : in[32 * w + src];
      EXPECT_EQ(partners[32 * w + l], want) << "warp " << w << " lane " << l;
    }
  }
  cudaFree(d_in);
  cudaFree(d_sums);
  cudaFree(d_partners);
}

TEST(CudaEmulationTest, BarrierOrdersSharedMemoryWritesBeforeReads) {
  const int blocks = 3, threads = 256;
  std::vector<float> in(blocks * threads);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i);
  float* d_in = DeviceCopy(in);
  float* d_out = nullptr;
  ASSERT_EQ(cudaMalloc(&d_out, sizeof(float) * in.size()), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(ReverseKernel, blocks, threads, sizeof(float) * threads, nullptr)(d_in, d_out);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> out = HostCopy(d_out, in.size());
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t)
      ASSERT_EQ(out[b * threads + t], 3.0f * in[b * threads + threads - 1 - t]) << "block " << b << " thread " << t;
  cudaFree(d_in);
  cudaFree(d_out);
}

TEST(CudaEmulationTest, UnwrittenMemoryReadsAsAllOnes) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 2), cudaSuccess);
  const std::vector<float> fresh = HostCopy(d, 2);  // cudaMalloc memory: 0xFF bytes, a NaN
  EXPECT_TRUE(std::isnan(fresh[0]));
  ZIPMOE_CUDA_LAUNCH(ReadSharedKernel, 2, 32, 16, nullptr)(d);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> shared = HostCopy(d, 2);  // dynamic shared memory nobody wrote
  EXPECT_TRUE(std::isnan(shared[0]) && std::isnan(shared[1]));
  cudaFree(d);
}

TEST(CudaEmulationTest, ShuffleWithAnExitedLaneFailsTheLaunch) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int) * 64), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(ExitedLaneKernel, 1, 64, 0, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once, then cleared
  cudaFree(d);
}

TEST(CudaEmulationTest, LanesSplitBetweenABarrierAndAShuffleFailTheLaunch) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int) * 32), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(DivergentBarrierKernel, 1, 32, 0, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  cudaFree(d);
}

TEST(CudaEmulationTest, ConfigurationsAGpuRefusesFailTheLaunch) {
  int* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(int) * 2048), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(WriteOne, 1, 2048, 0, nullptr)(d);  // more than 1024 threads a block
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ZIPMOE_CUDA_LAUNCH(WriteOne, dim3(1, 70000), 32, 0, nullptr)(d);  // grid y above 65535
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ZIPMOE_CUDA_LAUNCH(WriteOne, 1, 32, 64 * 1024, nullptr)(d);  // 64 KiB of dynamic shared memory
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ZIPMOE_CUDA_LAUNCH(WriteOne, 1, 32, 0, nullptr)(d);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  cudaFree(d);
}

TEST(CudaEmulationTest, KernelsReadHostMemoryOnlyWhenRegistered) {
  std::vector<int> host(32, 0);
  ZIPMOE_CUDA_LAUNCH(WriteOne, 1, 32, 0, nullptr)(host.data());  // pageable host memory
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(host[0], 0);
  ASSERT_EQ(cudaHostRegister(host.data(), sizeof(int) * host.size(), cudaHostRegisterMapped), cudaSuccess);
  int* alias = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&alias, host.data(), 0), cudaSuccess);
  ZIPMOE_CUDA_LAUNCH(WriteOne, 1, 32, 0, nullptr)(alias);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(host[31], 1);
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data() + 3), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(cudaHostUnregister(host.data()), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&attr, host.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaHostUnregister(host.data()), cudaErrorHostMemoryNotRegistered);
}

TEST(CudaEmulationTest, CopiesOutsideAnAllocationFail) {
  uint8_t* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 100), cudaSuccess);
  std::vector<uint8_t> host(101, 7);
  EXPECT_EQ(cudaMemcpy(d, host.data(), 101, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), d + 1, 100, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, host.data(), 100, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(host.data(), d, 100, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // host "device" side
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // twice
}

}  // namespace
