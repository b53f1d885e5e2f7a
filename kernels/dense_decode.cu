// The GPU decode-step kernels of kernels/dense_decode.h: RMSNorm, rotate-half rotary, decode
// attention. Each reduction has a fixed order (per-thread strided FMAs, a xor butterfly per warp, the
// warps added in ascending order by one thread), which dense_decode_ref.cc reproduces on the CPU.
// __fmul_rn / __fadd_rn keep products and sums as separate roundings where the order says so.
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda_launch.cuh"
#include "kernels/cuda_status.cuh"
#include "kernels/recovery.h"  // CudaDeviceCount
#include "kernels/device_buffers.cuh"
#include "kernels/dense_decode.h"

namespace zipmoe::kernels {
namespace {

constexpr int kWarp = 32;

__device__ __forceinline__ float Bf16(uint16_t bits) { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }

__device__ __forceinline__ uint16_t ToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off >= 1; off /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int off = kWarp / 2; off >= 1; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The block's sum of every thread's `v`: warp butterflies, then warp sums in ascending order by
// thread 0; every thread gets the result. `warp_sums` holds blockDim.x / 32 floats.
__device__ float BlockSum(float v, float* warp_sums, float* result) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = WarpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = warp_sums[0];
    for (int w = 1; w < static_cast<int>(blockDim.x) / kWarp; ++w) s = __fadd_rn(s, warp_sums[w]);
    *result = s;
  }
  __syncthreads();
  return *result;
}

__global__ void __launch_bounds__(kNormThreads) RmsNormKernel(RmsNormBf16Args a) {
  __shared__ float warp_sums[kNormThreads / kWarp];
  __shared__ float total;
  const uint16_t* x = a.x + static_cast<int64_t>(blockIdx.x) * a.d;
  uint16_t* y = a.y + static_cast<int64_t>(blockIdx.x) * a.d;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < a.d; j += kNormThreads) {
    const float v = Bf16(x[j]);
    acc = fmaf(v, v, acc);
  }
  const float sum = BlockSum(acc, warp_sums, &total);
  const float var = __fdiv_rn(sum, static_cast<float>(a.d));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(var, a.eps)));
  for (int64_t j = threadIdx.x; j < a.d; j += kNormThreads) {
    const float normed = Bf16(ToBf16(__fmul_rn(Bf16(x[j]), inv)));
    y[j] = ToBf16(__fmul_rn(Bf16(a.weight[j]), normed));
  }
}

// One thread per rotated pair (token, head of a or b, i < rotary_dim / 2).
__global__ void RotaryKernel(RotaryBf16Args a) {
  const int64_t half = a.rotary_dim / 2, heads = a.a_heads + a.b_heads;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= a.n * heads * half) return;
  const int64_t i = idx % half, hh = (idx / half) % heads, t = idx / (half * heads);
  uint16_t* x = hh < a.a_heads ? a.a + (t * a.a_heads + hh) * a.head_dim
                               : a.b + (t * a.b_heads + (hh - a.a_heads)) * a.head_dim;
  const float* c = a.cos + t * a.rotary_dim;
  const float* s = a.sin + t * a.rotary_dim;
  const float x1 = Bf16(x[i]), x2 = Bf16(x[i + half]);
  x[i] = ToBf16(__fadd_rn(__fmul_rn(x1, c[i]), __fmul_rn(-x2, s[i])));
  x[i + half] = ToBf16(__fadd_rn(__fmul_rn(x2, c[i + half]), __fmul_rn(x1, s[i + half])));
}

// One block per query head. Dynamic shared memory: q as float [dk].
__global__ void __launch_bounds__(kAttentionThreads) DecodeAttentionKernel(DecodeAttentionBf16Args a) {
  ZIPMOE_DYNAMIC_SHARED(float, q);
  __shared__ float warp_sums[kAttentionThreads / kWarp];
  __shared__ float shared_max[kAttentionThreads / kWarp];
  __shared__ float total;
  const int64_t h = blockIdx.x, group = a.n_heads / a.n_kv;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  constexpr int kWarps = kAttentionThreads / kWarp;
  const uint16_t* kh = a.k + (h / group) * a.k_head_stride;
  const uint16_t* vh = a.v + (h / group) * a.v_head_stride;
  float* s = a.scores + h * a.total;
  const int64_t last = a.pos < a.total - 1 ? a.pos : a.total - 1;
  const int64_t first = a.window > 0 ? (a.pos - a.window + 1 > 0 ? a.pos - a.window + 1 : 0) : 0;
  for (int64_t d = threadIdx.x; d < a.dk; d += kAttentionThreads) q[d] = Bf16(a.q[h * a.dk + d]);
  __syncthreads();
  // 1. scores: warp w takes keys first + w, first + w + kWarps, ...
  for (int64_t j = first + warp; j <= last; j += kWarps) {
    const uint16_t* kj = kh + j * a.dk;
    float acc = 0.0f;
    for (int64_t d = lane; d < a.dk; d += kWarp) acc = fmaf(q[d], Bf16(kj[d]), acc);
    acc = WarpSum(acc);
    if (lane == 0) s[j] = __fmul_rn(acc, a.scale);
  }
  __syncthreads();  // global writes of this block, read back by its other threads below
  // 2. max over the visible keys (and the sink)
  float m = -INFINITY;
  for (int64_t j = first + threadIdx.x; j <= last; j += kAttentionThreads) m = fmaxf(m, s[j]);
  m = WarpMax(m);
  if (lane == 0) shared_max[warp] = m;
  __syncthreads();
  m = shared_max[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, shared_max[w]);
  const bool sink = a.sinks != nullptr;
  if (sink) m = fmaxf(m, a.sinks[h]);
  // 3. exponentials and their sum (thread i: keys first + i, + kAttentionThreads, ... in order)
  float acc = 0.0f;
  for (int64_t j = first + threadIdx.x; j <= last; j += kAttentionThreads) {
    const float e = expf(__fadd_rn(s[j], -m));
    s[j] = e;
    acc = __fadd_rn(acc, e);
  }
  float sum = BlockSum(acc, warp_sums, &total);
  if (sink) sum = __fadd_rn(sum, expf(__fadd_rn(a.sinks[h], -m)));
  // 4. probabilities, by the threads that wrote each e_j
  for (int64_t j = first + threadIdx.x; j <= last; j += kAttentionThreads) s[j] = __fdiv_rn(s[j], sum);
  __syncthreads();
  // 5. out[d] = Σ_j p_j v_j[d], ascending j
  for (int64_t d = threadIdx.x; d < a.dv; d += kAttentionThreads) {
    float o = 0.0f;
    for (int64_t j = first; j <= last; ++j) o = fmaf(s[j], Bf16(vh[j * a.dv + d]), o);
    a.out[h * a.dv + d] = ToBf16(o);
  }
}

Status LaunchStatus(const char* what) { return CudaStatus(cudaGetLastError(), what); }

}  // namespace

Status LaunchRmsNormBf16(const RmsNormBf16Args& a, void* stream) {
  ZM_RETURN_IF_ERROR(ValidateRmsNormBf16(a));
  if (a.x == nullptr || a.weight == nullptr || a.y == nullptr)
    return Status::InvalidArgument("LaunchRmsNormBf16: null pointer");
  if (a.rows > 0x7fffffff) return Status::InvalidArgument("LaunchRmsNormBf16: more than 2^31 - 1 rows");
  (void)cudaGetLastError();  // a stale error of an earlier runtime call is not this launch's
  ZIPMOE_CUDA_LAUNCH(RmsNormKernel, static_cast<unsigned>(a.rows), kNormThreads, 0,
                     static_cast<cudaStream_t>(stream))(a);
  return LaunchStatus("RMSNorm kernel");
}

Status LaunchRotaryBf16(const RotaryBf16Args& a, void* stream) {
  ZM_RETURN_IF_ERROR(ValidateRotaryBf16(a));
  if (a.a == nullptr || a.cos == nullptr || a.sin == nullptr)
    return Status::InvalidArgument("LaunchRotaryBf16: null pointer");
  const int64_t threads = a.n * (a.a_heads + a.b_heads) * (a.rotary_dim / 2);
  const int64_t blocks = (threads + 255) / 256;
  if (blocks > 0x7fffffff) return Status::InvalidArgument("LaunchRotaryBf16: too many elements");
  (void)cudaGetLastError();  // a stale error of an earlier runtime call is not this launch's
  ZIPMOE_CUDA_LAUNCH(RotaryKernel, static_cast<unsigned>(blocks), 256, 0, static_cast<cudaStream_t>(stream))(a);
  return LaunchStatus("rotary kernel");
}

Status LaunchDecodeAttentionBf16(const DecodeAttentionBf16Args& a, void* stream) {
  ZM_RETURN_IF_ERROR(ValidateDecodeAttentionBf16(a));
  if (a.q == nullptr || a.k == nullptr || a.v == nullptr || a.scores == nullptr || a.out == nullptr)
    return Status::InvalidArgument("LaunchDecodeAttentionBf16: null pointer");
  if (a.dk > 8192) return Status::InvalidArgument("LaunchDecodeAttentionBf16: dk above 8192");
  const size_t shared = sizeof(float) * static_cast<size_t>(a.dk);
  (void)cudaGetLastError();  // a stale error of an earlier runtime call is not this launch's
  ZIPMOE_CUDA_LAUNCH(DecodeAttentionKernel, static_cast<unsigned>(a.n_heads), kAttentionThreads, shared,
                     static_cast<cudaStream_t>(stream))(a);
  return LaunchStatus("decode attention kernel");
}

namespace {

template <typename T>
Status Download(T* dst, const T* src, int64_t count) {
  ZM_RETURN_IF_ERROR(CudaStatus(cudaDeviceSynchronize(), "kernel"));
  return CudaStatus(cudaMemcpy(dst, src, sizeof(T) * static_cast<size_t>(count), cudaMemcpyDeviceToHost),
                    "cudaMemcpy D2H");
}

Status NeedDevice(const char* what) {
  return CudaDeviceCount() == 0 ? Status::Unavailable(std::string(what) + ": no CUDA device") : Status::Ok();
}

}  // namespace

Status RmsNormBf16OnDevice(const RmsNormBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateRmsNormBf16(host));
  ZM_RETURN_IF_ERROR(NeedDevice("RmsNormBf16OnDevice"));
  DeviceBuffers b;
  RmsNormBf16Args d = host;
  const int64_t n = host.rows * host.d;
  uint16_t *x = nullptr, *w = nullptr, *y = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(host.x, n, &x));
  ZM_RETURN_IF_ERROR(b.Upload(host.weight, host.d, &w));
  ZM_RETURN_IF_ERROR(b.Upload<uint16_t>(nullptr, n, &y));
  d.x = x;
  d.weight = w;
  d.y = y;
  ZM_RETURN_IF_ERROR(LaunchRmsNormBf16(d, nullptr));
  return Download(host.y, y, n);
}

Status RotaryBf16OnDevice(const RotaryBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateRotaryBf16(host));
  ZM_RETURN_IF_ERROR(NeedDevice("RotaryBf16OnDevice"));
  DeviceBuffers b;
  RotaryBf16Args d = host;
  const int64_t na = host.n * host.a_heads * host.head_dim, nb = host.n * host.b_heads * host.head_dim;
  uint16_t *pa = nullptr, *pb = nullptr;
  float *c = nullptr, *s = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(host.a, na, &pa));
  if (host.b != nullptr) ZM_RETURN_IF_ERROR(b.Upload(host.b, nb, &pb));
  ZM_RETURN_IF_ERROR(b.Upload(host.cos, host.n * host.rotary_dim, &c));
  ZM_RETURN_IF_ERROR(b.Upload(host.sin, host.n * host.rotary_dim, &s));
  d.a = pa;
  d.b = pb;
  d.cos = c;
  d.sin = s;
  ZM_RETURN_IF_ERROR(LaunchRotaryBf16(d, nullptr));
  ZM_RETURN_IF_ERROR(Download(host.a, pa, na));
  return host.b != nullptr ? Download(host.b, pb, nb) : Status::Ok();
}

Status DecodeAttentionBf16OnDevice(const DecodeAttentionBf16Args& host) {
  ZM_RETURN_IF_ERROR(ValidateDecodeAttentionBf16(host));
  ZM_RETURN_IF_ERROR(NeedDevice("DecodeAttentionBf16OnDevice"));
  DeviceBuffers b;
  DecodeAttentionBf16Args d = host;
  const int64_t nk = (host.n_kv - 1) * host.k_head_stride + host.total * host.dk;
  const int64_t nv = (host.n_kv - 1) * host.v_head_stride + host.total * host.dv;
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
  float *sinks = nullptr, *scores = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(host.q, host.n_heads * host.dk, &q));
  ZM_RETURN_IF_ERROR(b.Upload(host.k, nk, &k));
  ZM_RETURN_IF_ERROR(b.Upload(host.v, nv, &v));
  if (host.sinks != nullptr) ZM_RETURN_IF_ERROR(b.Upload(host.sinks, host.n_heads, &sinks));
  ZM_RETURN_IF_ERROR(b.Upload<float>(nullptr, host.n_heads * host.total, &scores));
  ZM_RETURN_IF_ERROR(b.Upload<uint16_t>(nullptr, host.n_heads * host.dv, &out));
  d.q = q;
  d.k = k;
  d.v = v;
  d.sinks = sinks;
  d.scores = scores;
  d.out = out;
  ZM_RETURN_IF_ERROR(LaunchDecodeAttentionBf16(d, nullptr));
  ZM_RETURN_IF_ERROR(Download(host.out, out, host.n_heads * host.dv));
  return Download(host.scores, scores, host.n_heads * host.total);
}

}  // namespace zipmoe::kernels
