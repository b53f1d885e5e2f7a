// The grouped expert MLP on the GPU (kernels/grouped_expert.h): three launches per MoE layer.
// Each dot product is one warp's: lane l sums its elements with FMAs in index order (8-element
// chunks [256 i + 8 l, +8) on the vector path, elements l, l + 32, ... otherwise), then a xor
// butterfly adds the lanes; grouped_expert_ref.cc reproduces that order on the CPU.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/grouped_expert.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/cuda_status.cuh"
#include "kernels/recovery.h"  // CudaDeviceCount
#include "kernels/device_buffers.cuh"

namespace zipmoe::kernels {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;   // rows per block (one warp a row)
constexpr int kTokensPerPass = 4;   // tokens sharing one pass over a weight row

__device__ __forceinline__ float Bf16(uint16_t bits) { return __uint_as_float(static_cast<uint32_t>(bits) << 16); }

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int off = kWarp / 2; off >= 1; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The 8 BF16 values of a 16-byte load.
__device__ __forceinline__ void Load8(const uint16_t* p, float* v) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w[i] << 16);
    v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ void Load8(const float* p, float* v) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}

__device__ __forceinline__ float Elem(const uint16_t* p, int64_t i) { return Bf16(p[i]); }
__device__ __forceinline__ float Elem(const float* p, int64_t i) { return p[i]; }

// acc[t] += row · in_t over this lane's elements, for the `count` (<= kTokensPerPass) inputs in_[t].
template <bool kVec, typename In>
__device__ __forceinline__ void LaneDots(const uint16_t* row, const In* const* in, int count, int64_t k, int lane,
                                         float* acc) {
  if (kVec) {
    for (int64_t base = 8 * lane; base < k; base += 8 * kWarp) {
      float w[8];
      Load8(row + base, w);
#pragma unroll
      for (int t = 0; t < kTokensPerPass; ++t) {
        if (t < count) {
          float v[8];
          Load8(in[t] + base, v);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[t] = fmaf(w[j], v[j], acc[t]);
        }
      }
    }
  } else {
    for (int64_t i = lane; i < k; i += kWarp) {
      const float w = Bf16(row[i]);
#pragma unroll
      for (int t = 0; t < kTokensPerPass; ++t)
        if (t < count) acc[t] = fmaf(w, Elem(in[t], i), acc[t]);
    }
  }
}

// Step 1: grid (ceil(inter / 8), n_experts); warp w of block b computes row 8 b + w of the expert's
// gate and up for each of its pairs.
template <bool kVec>
__global__ void GateUpKernel(GroupedExpertArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int j = blockIdx.y;
  if (r >= a.inter) return;
  const auto* gate = reinterpret_cast<const uint16_t*>(a.weights[3 * j]) + r * a.hidden;
  const auto* up = reinterpret_cast<const uint16_t*>(a.weights[3 * j + 1]) + r * a.hidden;
  const int32_t p_end = a.expert_pair_offsets[j + 1];
  for (int32_t p0 = a.expert_pair_offsets[j]; p0 < p_end; p0 += kTokensPerPass) {
    const int count = min(kTokensPerPass, p_end - p0);
    const uint16_t* in[kTokensPerPass];
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t)
      in[t] = a.x + static_cast<int64_t>(a.pair_token[p0 + min(t, count - 1)]) * a.hidden;
    float g[kTokensPerPass] = {}, u[kTokensPerPass] = {};
    LaneDots<kVec>(gate, in, count, a.hidden, lane, g);
    LaneDots<kVec>(up, in, count, a.hidden, lane, u);
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= count) break;  // count is the same for the whole block: no lane skips a shuffle another makes
      const float gs = WarpSum(g[t]);
      const float us = WarpSum(u[t]);
      if (lane == 0) {
        const float silu = gs / (1.0f + expf(-gs));
        a.act[static_cast<int64_t>(p0 + t) * a.inter + r] = silu * us;
      }
    }
  }
}

// Step 2: grid (ceil(hidden / 8), n_experts); warp w of block b computes row 8 b + w of the
// expert's down for each of its pairs, times the pair's routing weight.
template <bool kVec>
__global__ void DownKernel(GroupedExpertArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int64_t h = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int j = blockIdx.y;
  if (h >= a.hidden) return;
  const auto* down = reinterpret_cast<const uint16_t*>(a.weights[3 * j + 2]) + h * a.inter;
  const int32_t p_end = a.expert_pair_offsets[j + 1];
  for (int32_t p0 = a.expert_pair_offsets[j]; p0 < p_end; p0 += kTokensPerPass) {
    const int count = min(kTokensPerPass, p_end - p0);
    const float* in[kTokensPerPass];
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) in[t] = a.act + static_cast<int64_t>(p0 + min(t, count - 1)) * a.inter;
    float d[kTokensPerPass] = {};
    LaneDots<kVec>(down, in, count, a.inter, lane, d);
#pragma unroll
    for (int t = 0; t < kTokensPerPass; ++t) {
      if (t >= count) break;  // as in GateUpKernel: a decode step reduces one token's sum, not four
      const float s = WarpSum(d[t]);
      if (lane == 0) a.out[static_cast<int64_t>(p0 + t) * a.hidden + h] = s * a.pair_weight[p0 + t];
    }
  }
}

// Step 3: one thread per (token, h): the token's pairs in ascending expert order.
__global__ void CombineKernel(GroupedExpertArgs a) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= a.n_tokens * a.hidden) return;
  const int64_t t = i / a.hidden, h = i % a.hidden;
  float s = 0.0f;
  for (int32_t q = a.token_pair_offsets[t]; q < a.token_pair_offsets[t + 1]; ++q)
    s += a.out[static_cast<int64_t>(a.token_pairs[q]) * a.hidden + h];
  a.y[i] = s;
}

Status LaunchStatus(const char* what) {
  return CudaStatus(cudaGetLastError(), std::string("LaunchGroupedExpertMlp: ") + what);
}

}  // namespace

Status LaunchGroupedExpertMlp(const GroupedExpertArgs& a, void* stream) {
  if (a.n_tokens <= 0 || a.hidden <= 0 || a.inter <= 0 || a.n_experts <= 0 || a.n_pairs <= 0)
    return Status::InvalidArgument("LaunchGroupedExpertMlp: non-positive size");
  if (a.x == nullptr || a.weights == nullptr || a.expert_pair_offsets == nullptr || a.pair_token == nullptr ||
      a.pair_weight == nullptr || a.token_pair_offsets == nullptr || a.token_pairs == nullptr || a.act == nullptr ||
      a.out == nullptr || a.y == nullptr)
    return Status::InvalidArgument("LaunchGroupedExpertMlp: null pointer");
  if (a.n_experts > 65535) return Status::InvalidArgument("LaunchGroupedExpertMlp: more than 65535 experts");
  // The vector paths' 16-byte loads (a misaligned one is a sticky device fault that ends the context);
  // the weight addresses live on the device: the caller checks them (GroupedExpertWeightsAligned).
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if ((a.hidden % 8 == 0 && !aligned(a.x)) || (a.inter % 8 == 0 && !aligned(a.act)))
    return Status::InvalidArgument("LaunchGroupedExpertMlp: x or act is not 16-byte aligned (the vector path's loads)");
  (void)cudaGetLastError();  // a stale error of an earlier runtime call is not this launch's
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 block(kWarp * kWarpsPerBlock);
  const dim3 gu_grid(static_cast<unsigned>((a.inter + kWarpsPerBlock - 1) / kWarpsPerBlock),
                     static_cast<unsigned>(a.n_experts));
  if (a.hidden % 8 == 0) {
    ZIPMOE_CUDA_LAUNCH(GateUpKernel<true>, gu_grid, block, 0, s)(a);
  } else {
    ZIPMOE_CUDA_LAUNCH(GateUpKernel<false>, gu_grid, block, 0, s)(a);
  }
  ZM_RETURN_IF_ERROR(LaunchStatus("gate/up kernel"));
  const dim3 down_grid(static_cast<unsigned>((a.hidden + kWarpsPerBlock - 1) / kWarpsPerBlock),
                       static_cast<unsigned>(a.n_experts));
  if (a.inter % 8 == 0) {
    ZIPMOE_CUDA_LAUNCH(DownKernel<true>, down_grid, block, 0, s)(a);
  } else {
    ZIPMOE_CUDA_LAUNCH(DownKernel<false>, down_grid, block, 0, s)(a);
  }
  ZM_RETURN_IF_ERROR(LaunchStatus("down kernel"));
  const int64_t total = a.n_tokens * a.hidden;
  ZIPMOE_CUDA_LAUNCH(CombineKernel, static_cast<unsigned>((total + 255) / 256), 256, 0, s)(a);
  return LaunchStatus("combine kernel");
}

}  // namespace zipmoe::kernels

namespace zipmoe::kernels {
namespace {

Status Download(void* dst, const void* src, size_t bytes) {
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy back");
}

}  // namespace

Status GroupedExpertMlpOnDevice(const GroupedExpertArgs& host, int repeats, double* seconds) {
  ZM_RETURN_IF_ERROR(ValidateGroupedExpertTables(host));
  if (CudaDeviceCount() == 0) return Status::Unavailable("GroupedExpertMlpOnDevice: no CUDA device");
  DeviceBuffers b;
  GroupedExpertArgs d = host;
  uint16_t* x = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(host.x, host.n_tokens * host.hidden, &x));
  d.x = x;
  std::vector<uint64_t> weights(static_cast<size_t>(3 * host.n_experts));
  for (int32_t j = 0; j < host.n_experts; ++j) {
    for (int m = 0; m < 3; ++m) {
      const int64_t n = m < 2 ? host.inter * host.hidden : host.hidden * host.inter;
      uint16_t* w = nullptr;
      ZM_RETURN_IF_ERROR(b.Upload(reinterpret_cast<const uint16_t*>(host.weights[3 * j + m]), n, &w));
      weights[static_cast<size_t>(3 * j + m)] = reinterpret_cast<uint64_t>(w);
    }
  }
  uint64_t* wt = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(weights.data(), static_cast<int64_t>(weights.size()), &wt));
  d.weights = wt;
  int32_t *epo = nullptr, *pt = nullptr, *tpo = nullptr, *tp = nullptr;
  float* pw = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload(host.expert_pair_offsets, host.n_experts + 1, &epo));
  ZM_RETURN_IF_ERROR(b.Upload(host.pair_token, host.n_pairs, &pt));
  ZM_RETURN_IF_ERROR(b.Upload(host.pair_weight, host.n_pairs, &pw));
  ZM_RETURN_IF_ERROR(b.Upload(host.token_pair_offsets, host.n_tokens + 1, &tpo));
  ZM_RETURN_IF_ERROR(b.Upload(host.token_pairs, host.n_pairs, &tp));
  d.expert_pair_offsets = epo;
  d.pair_token = pt;
  d.pair_weight = pw;
  d.token_pair_offsets = tpo;
  d.token_pairs = tp;
  float *act = nullptr, *out = nullptr, *y = nullptr;
  ZM_RETURN_IF_ERROR(b.Upload<float>(nullptr, static_cast<int64_t>(host.n_pairs) * host.inter, &act));
  ZM_RETURN_IF_ERROR(b.Upload<float>(nullptr, static_cast<int64_t>(host.n_pairs) * host.hidden, &out));
  ZM_RETURN_IF_ERROR(b.Upload<float>(nullptr, host.n_tokens * host.hidden, &y));
  d.act = act;
  d.out = out;
  d.y = y;
  ZM_RETURN_IF_ERROR(LaunchGroupedExpertMlp(d, nullptr));  // warm-up (and the result when repeats <= 1)
  if (seconds != nullptr) *seconds = 0;
  if (repeats > 1) {
    struct Events {  // destroyed on every return
      cudaEvent_t start = nullptr, stop = nullptr;
      ~Events() {
        if (start != nullptr) cudaEventDestroy(start);
        if (stop != nullptr) cudaEventDestroy(stop);
      }
    } ev;
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&ev.start), "cudaEventCreate"));
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventCreate(&ev.stop), "cudaEventCreate"));
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ev.start, nullptr), "cudaEventRecord"));
    for (int i = 0; i < repeats; ++i) ZM_RETURN_IF_ERROR(LaunchGroupedExpertMlp(d, nullptr));
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(ev.stop, nullptr), "cudaEventRecord"));
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(ev.stop), "cudaEventSynchronize"));
    float ms = 0;
    ZM_RETURN_IF_ERROR(CudaStatus(cudaEventElapsedTime(&ms, ev.start, ev.stop), "cudaEventElapsedTime"));
    if (seconds != nullptr) *seconds = ms / 1e3 / repeats;
  }
  ZM_RETURN_IF_ERROR(Download(host.act, act, sizeof(float) * static_cast<size_t>(host.n_pairs * host.inter)));
  ZM_RETURN_IF_ERROR(Download(host.out, out, sizeof(float) * static_cast<size_t>(host.n_pairs * host.hidden)));
  return Download(host.y, y, sizeof(float) * static_cast<size_t>(host.n_tokens * host.hidden));
}

}  // namespace zipmoe::kernels
