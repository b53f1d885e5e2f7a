// CUDA recovery kernels (ZipMoE §3.3 "Memory-Coalesced Tensor Recovery Kernel", §3.1 Fig. 5 ➐) and
// their launchers: BF16 (the served dtype), then F32 and F16 (lossless FP32/F16 experts, formulas in
// kernels/recovery.h: F32 reuses the BF16 word recovery for its top halves), F8_E4M3 and MXFP4.
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

#include <algorithm>
#include <string>
#include <type_traits>

#include "common/bitfield.h"
#include "kernels/recovery.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/cuda_status.cuh"
#include "kernels/launch_config.cuh"

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
// RecoverVecRange is one thread's share (thread `tid` of `stride` along x); RecoverBf16VecKernel and
// RecoverBf16BatchKernel run it.
template <int kWidth>
__device__ __forceinline__ void RecoverVecRange(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm,
                                                uint16_t* __restrict__ out, int64_t n, int64_t head, int64_t tid,
                                                int64_t stride) {
  using Traits = VecTraits<kWidth>;
  using Load = typename Traits::Load;
  using Store = std::conditional_t<kWidth == 16, uint4, uint2>;
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

template <int kWidth>
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverBf16VecKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint16_t* __restrict__ out,
                         int64_t n, int64_t head) {
  RecoverVecRange<kWidth>(e, sm, out, n, head, static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                          static_cast<int64_t>(gridDim.x) * blockDim.x);
}

// Several tensors in one launch (LaunchRecoverBf16Batch): blockIdx.y picks the tensor, whose planes
// all take the vec16 path; x is the same grid-stride as RecoverBf16VecKernel<16>. Passed by value
// (kMaxRecoverySegments x 40 bytes of kernel parameters).
struct SegmentTable {
  const uint8_t* e[kMaxRecoverySegments];
  const uint8_t* sm[kMaxRecoverySegments];
  uint16_t* out[kMaxRecoverySegments];
  int64_t n[kMaxRecoverySegments];
  int64_t head[kMaxRecoverySegments];
};

__global__ void __launch_bounds__(kThreadsPerBlock) RecoverBf16BatchKernel(const SegmentTable t) {
  const unsigned s = blockIdx.y;
  RecoverVecRange<16>(t.e[s], t.sm[s], t.out[s], t.n[s], t.head[s],
                      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x,
                      static_cast<int64_t>(gridDim.x) * blockDim.x);
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

// ---- F32 / F16 (formulas and plane layouts: kernels/recovery.h) ----

__device__ __forceinline__ uint32_t RecoverF32One(uint8_t e, uint8_t hi, uint16_t lo) {
  return static_cast<uint32_t>(RecoverOne(e, hi)) << 16 | lo;
}

__device__ __forceinline__ uint16_t RecoverF16One(uint8_t e, uint8_t lo, uint32_t t) {
  return static_cast<uint16_t>((t >> 2) << 15 | (e & 0x1fu) << 10 | (t & 3u) << 8 | lo);
}

// Element i of an F16 tensor, any alignment: reads e[i], lo[i] and the 3 bytes of i's packed group.
__device__ __forceinline__ uint16_t RecoverF16At(const uint8_t* __restrict__ e, const uint8_t* __restrict__ lo,
                                                 const uint8_t* __restrict__ packed, int64_t i) {
  const int64_t g = i >> 3;
  const uint32_t w = packed[3 * g] | static_cast<uint32_t>(packed[3 * g + 1]) << 8 |
                     static_cast<uint32_t>(packed[3 * g + 2]) << 16;
  return RecoverF16One(e[i], lo[i], w >> (3 * (i & 7)) & 7u);
}

// F32 vector path. Grid: x = grid-stride over groups of 4 elements; the n % 4 tail elements are done
// one per thread by the first threads.
//   e: [n] uint8, lo: [n] uint16 (the first 2n bytes of the SM-chunk), hi: [n] uint8 (its last n),
//   out: [n] uint32. Preconditions (RecoverF32VectorPathFits): e, hi 4-aligned, lo 8-aligned, out 16-aligned.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF32VecKernel(const uint8_t* __restrict__ e, const uint16_t* __restrict__ lo, const uint8_t* __restrict__ hi,
                        uint32_t* __restrict__ out, int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = n / 4;
  for (int64_t g = tid; g < groups; g += stride) {
    const uint32_t e4 = reinterpret_cast<const uint32_t*>(e)[g];
    const uint32_t h4 = reinterpret_cast<const uint32_t*>(hi)[g];
    const uint2 l4 = reinterpret_cast<const uint2*>(lo)[g];  // lo[4g..4g+1] in .x, lo[4g+2..4g+3] in .y
    const uint2 top = RecoverWord(e4, h4);                    // the 4 BF16 top halves, packed as l4
    // __byte_perm(x, y, s): bytes 0..3 of x, 4..7 of y; out = top << 16 | lo per element.
    reinterpret_cast<uint4*>(out)[g] =
        make_uint4(__byte_perm(l4.x, top.x, 0x5410), __byte_perm(l4.x, top.x, 0x7632),
                   __byte_perm(l4.y, top.y, 0x5410), __byte_perm(l4.y, top.y, 0x7632));
  }
  const int64_t tail = groups * 4;
  if (tid < n - tail) out[tail + tid] = RecoverF32One(e[tail + tid], hi[tail + tid], lo[tail + tid]);
}

// F32 element path (any plane alignment). Grid: x = grid-stride over elements. Shapes as above; lo
// is read as two bytes.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF32ScalarKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint32_t* __restrict__ out,
                           int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const uint16_t lo = static_cast<uint16_t>(sm[2 * i] | sm[2 * i + 1] << 8);
    out[i] = RecoverF32One(e[i], sm[2 * n + i], lo);
  }
}

// F16 vector path. Grid: x = grid-stride over the n / 8 full groups; the last partial group (< 8
// elements) is done one per thread by the first threads.
//   e: [n] uint8, lo: [n] uint8, packed: [3·ceil(n/8)] bytes, out: [n] uint16.
// Preconditions (RecoverF16VectorPathFits): e and lo 8-aligned, out 16-aligned.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF16VecKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ lo,
                        const uint8_t* __restrict__ packed, uint16_t* __restrict__ out, int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t groups = n / 8;
  for (int64_t g = tid; g < groups; g += stride) {
    const uint2 e8 = reinterpret_cast<const uint2*>(e)[g];
    const uint2 l8 = reinterpret_cast<const uint2*>(lo)[g];
    const uint32_t w = packed[3 * g] | static_cast<uint32_t>(packed[3 * g + 1]) << 8 |
                       static_cast<uint32_t>(packed[3 * g + 2]) << 16;
    uint32_t r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // elements 2k and 2k+1 of the group
      const uint32_t ew = k < 2 ? e8.x : e8.y, lw = k < 2 ? l8.x : l8.y;
      const int b = (k & 1) * 16;  // bit offset of element 2k within its 4-byte word
      const uint16_t a =
          RecoverF16One(static_cast<uint8_t>(ew >> b), static_cast<uint8_t>(lw >> b), w >> (6 * k) & 7u);
      const uint16_t c = RecoverF16One(static_cast<uint8_t>(ew >> (b + 8)), static_cast<uint8_t>(lw >> (b + 8)),
                                       w >> (6 * k + 3) & 7u);
      r[k] = static_cast<uint32_t>(c) << 16 | a;
    }
    reinterpret_cast<uint4*>(out)[g] = make_uint4(r[0], r[1], r[2], r[3]);
  }
  const int64_t tail = groups * 8;
  if (tid < n - tail) out[tail + tid] = RecoverF16At(e, lo, packed, tail + tid);
}

// F16 element path (any plane alignment). Grid: x = grid-stride over elements. Shapes as above.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF16ScalarKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint16_t* __restrict__ out,
                           int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = RecoverF16At(e, sm, sm + n, i);
  }
}

__device__ __forceinline__ uint32_t F8Low(uint32_t e, uint32_t s) { return (s & 8u) << 4 | (e & 0xfu) << 3 | (s & 7u); }

// F8_E4M3 vector path: 8 values per thread (e 8-aligned, sm 4-aligned, out 8-aligned, n % 8 == 0).
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF8E4M3VecKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint8_t* __restrict__ out,
                           int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 8; g += stride) {
    const uint2 e8 = reinterpret_cast<const uint2*>(e)[g];
    const uint32_t s8 = reinterpret_cast<const uint32_t*>(sm)[g];  // nibble k = value 8g + k
    uint32_t w[2] = {0u, 0u};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint32_t ev = ((k < 4 ? e8.x : e8.y) >> (8 * (k % 4))) & 0xffu;
      w[k / 4] |= F8Low(ev, s8 >> (4 * k)) << (8 * (k % 4));
    }
    reinterpret_cast<uint2*>(out)[g] = make_uint2(w[0], w[1]);
  }
}

// F8_E4M3 pair path (any alignment): one SM byte, two values per thread.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverF8E4M3PairKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint8_t* __restrict__ out,
                            int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; 2 * j < n; j += stride) {
    const uint32_t s = sm[j];
    out[2 * j] = static_cast<uint8_t>(F8Low(e[2 * j], s));
    if (2 * j + 1 < n) out[2 * j + 1] = static_cast<uint8_t>(F8Low(e[2 * j + 1], s >> 4));
  }
}

// MXFP4: the output word of 8 values from their 8 exponent bytes (e8, little-endian) and their two SM
// bytes (s16): nibble i = (t_i >> 1) << 3 | e_i << 1 | (t_i & 1), the shifts of RecoverMxfp4Cpu.
__device__ __forceinline__ uint32_t Mxfp4Word(uint64_t e8, uint32_t s16) {
  uint64_t x = e8 & 0x0303030303030303ull;
  x = (x | x >> 4) & 0x00ff00ff00ff00ffull;
  x = (x | x >> 8) & 0x0000ffff0000ffffull;
  x = (x | x >> 16) & 0xffffffffull;
  uint32_t y = s16 & 0xffffu;
  y = (y | y << 8) & 0x00ff00ffu;
  y = (y | y << 4) & 0x0f0f0f0fu;
  y = (y | y << 2) & 0x33333333u;
  return (y & 0x11111111u) | (y & 0x22222222u) << 2 | static_cast<uint32_t>(x) << 1;
}

// The n/32 scale bytes after the n exponent fields of the E plane, copied after the n/2 bytes of nibbles.
// Grid-stride from global thread `tid` (shared by both MXFP4 kernels).
__device__ __forceinline__ void CopyMxfp4Scales(const uint8_t* __restrict__ e, uint8_t* __restrict__ out, int64_t n,
                                                int64_t tid, int64_t stride) {
  for (int64_t g = tid; g < n / 32; g += stride) out[n / 2 + g] = e[n + g];
}

// MXFP4 vector path: 16 values per thread (one uint4 of e, one uint32 of sm, one uint2 of out).
//   e: [n + n/32] uint8 16-aligned (fields, then scales), sm: [n/4] 4-aligned, out: [n/2 + n/32] 8-aligned;
//   n % 32 == 0.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverMxfp4VecKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint8_t* __restrict__ out,
                          int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = tid; g < n / 16; g += stride) {
    const uint4 e16 = reinterpret_cast<const uint4*>(e)[g];
    const uint32_t s32 = reinterpret_cast<const uint32_t*>(sm)[g];  // fields of values 16g .. 16g+15
    const uint64_t lo = static_cast<uint64_t>(e16.y) << 32 | e16.x, hi = static_cast<uint64_t>(e16.w) << 32 | e16.z;
    reinterpret_cast<uint2*>(out)[g] = make_uint2(Mxfp4Word(lo, s32), Mxfp4Word(hi, s32 >> 16));
  }
  CopyMxfp4Scales(e, out, n, tid, stride);
}

// MXFP4 byte path (any alignment): 4 values (one SM byte, two output bytes) per thread. Shapes as above.
__global__ void __launch_bounds__(kThreadsPerBlock)
    RecoverMxfp4QuadKernel(const uint8_t* __restrict__ e, const uint8_t* __restrict__ sm, uint8_t* __restrict__ out,
                           int64_t n) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = tid; j < n / 4; j += stride) {
    const uint32_t s = sm[j];
    uint32_t v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t t = (s >> (2 * k)) & 3u;
      v[k] = (t >> 1) << 3 | (e[4 * j + k] & 3u) << 1 | (t & 1u);
    }
    out[2 * j] = static_cast<uint8_t>(v[0] | v[1] << 4);
    out[2 * j + 1] = static_cast<uint8_t>(v[2] | v[3] << 4);
  }
  CopyMxfp4Scales(e, out, n, tid, stride);
}

// Blocks for `work` items (groups or elements), one item per thread per grid-stride step, capped at
// what the current device keeps resident at once for `kernel` (more blocks only add scheduling
// work; fewer leave loads out of flight). At least 1.
template <typename Kernel>
Status GridBlocks(Kernel kernel, int64_t work, int* blocks) {
  int64_t resident = 1;
  ZM_RETURN_IF_ERROR(ResidentBlocks(kernel, kThreadsPerBlock, &resident));  // cached: no host cost per launch
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

// Validation shared by the F32/F16 launchers. `out_align`: bytes of one output element.
Status CheckFpLaunch(const char* fn, const uint8_t* e, const uint8_t* sm, const void* out, int64_t n,
                     uintptr_t out_align) {
  if (n < 0) return Status::InvalidArgument(std::string(fn) + ": negative n=" + std::to_string(n));
  if (n > 0 && (e == nullptr || sm == nullptr || out == nullptr))
    return Status::InvalidArgument(std::string(fn) + ": null pointer with n=" + std::to_string(n));
  if (reinterpret_cast<uintptr_t>(out) % out_align != 0)
    return Status::InvalidArgument(std::string(fn) + ": out is not " + std::to_string(out_align) + "-byte aligned");
  return Status::Ok();
}

// Copies e ([EPlaneBytes(dtype, n)]) and sm ([SmPlaneBytes(dtype, n)]) to fresh device buffers, each `offset`
// bytes past its allocation's start, runs `launch(d_e, d_sm, d_out)` and copies out ([DTypeBytes(dtype, n)])
// back. Syncs (test/bench helper).
template <typename Launch>
Status RunOnDevice(DType dtype, const uint8_t* e, const uint8_t* sm, void* out, int64_t n, int offset,
                   Launch launch) {
  const uint64_t sm_bytes = SmPlaneBytes(dtype, n), out_bytes = DTypeBytes(dtype, static_cast<uint64_t>(n));
  if (CudaDeviceCount() == 0) return Status::Unavailable("no CUDA device");
  if (offset < 0 || offset > 255) return Status::InvalidArgument("offset must be in [0, 255]");
  uint8_t* d_e = nullptr;
  uint8_t* d_sm = nullptr;
  uint8_t* d_out = nullptr;
  const size_t pad = static_cast<size_t>(offset);
  const size_t e_bytes = static_cast<size_t>(EPlaneBytes(dtype, n));
  Status st = CudaStatus(cudaMalloc(&d_e, e_bytes + pad + 1), "cudaMalloc e");
  if (st.ok()) st = CudaStatus(cudaMalloc(&d_sm, sm_bytes + pad + 1), "cudaMalloc sm");
  if (st.ok()) st = CudaStatus(cudaMalloc(&d_out, out_bytes + 16), "cudaMalloc out");
  if (st.ok()) st = CudaStatus(cudaMemcpy(d_e + pad, e, e_bytes, cudaMemcpyHostToDevice), "cudaMemcpy e");
  if (st.ok()) st = CudaStatus(cudaMemcpy(d_sm + pad, sm, sm_bytes, cudaMemcpyHostToDevice), "cudaMemcpy sm");
  if (st.ok()) st = launch(d_e + pad, d_sm + pad, d_out);
  // NOTE(sync): the copy back synchronises the default stream; this helper is for tests/benches.
  if (st.ok()) st = CudaStatus(cudaMemcpy(out, d_out, out_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy out");
  cudaFree(d_e);
  cudaFree(d_sm);
  cudaFree(d_out);
  return st;
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
      ZIPMOE_CUDA_LAUNCH(RecoverBf16VecKernel<16>, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n, head);
      return CudaStatus(cudaGetLastError(), "RecoverBf16VecKernel<16> launch");
    }
    case RecoveryKernelPath::kVec4: {
      const int64_t head = HeadElements(e, 4, n);
      ZM_RETURN_IF_ERROR(GridBlocks(RecoverBf16VecKernel<4>, (n - head) / 4, &blocks));
      ZIPMOE_CUDA_LAUNCH(RecoverBf16VecKernel<4>, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n, head);
      return CudaStatus(cudaGetLastError(), "RecoverBf16VecKernel<4> launch");
    }
    case RecoveryKernelPath::kScalar:
      break;
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverBf16ScalarKernel, n, &blocks));
  ZIPMOE_CUDA_LAUNCH(RecoverBf16ScalarKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverBf16ScalarKernel launch");
}

Status LaunchRecoverBf16Batch(const RecoverySegment* segments, int count, void* stream) {
  ZM_RETURN_IF_ERROR(ValidateRecoverySegments("LaunchRecoverBf16Batch", segments, count));
  SegmentTable t{};
  int batched = 0;
  int64_t most_groups = 0;
  for (int i = 0; i < count; ++i) {
    const RecoverySegment& g = segments[i];
    if (g.n == 0) continue;
    if (SelectRecoveryKernelPath(g.e, g.sm, g.out) != RecoveryKernelPath::kVec16) {  // its own launch
      ZM_RETURN_IF_ERROR(LaunchRecoverBf16(g.e, g.sm, g.out, g.n, stream));
      continue;
    }
    t.e[batched] = g.e;
    t.sm[batched] = g.sm;
    t.out[batched] = g.out;
    t.n[batched] = g.n;
    t.head[batched] = HeadElements(g.e, 16, g.n);
    most_groups = std::max(most_groups, (g.n - t.head[batched]) / 16);
    ++batched;
  }
  if (batched == 0) return Status::Ok();
  if (batched == 1) return LaunchRecoverBf16(t.e[0], t.sm[0], t.out[0], t.n[0], stream);
  // x: the largest tensor's blocks, capped so that all y slices together fit what the device keeps
  // resident (each slice grid-strides over its own tensor; a slice with fewer groups idles early).
  int64_t resident = 1;
  ZM_RETURN_IF_ERROR(ResidentBlocks(RecoverBf16BatchKernel, kThreadsPerBlock, &resident));
  const int64_t needed = (most_groups + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int64_t cap = (resident + batched - 1) / batched;
  const int64_t x = std::max<int64_t>(1, std::min(needed, cap));
  ZIPMOE_CUDA_LAUNCH(RecoverBf16BatchKernel, dim3(static_cast<unsigned>(x), static_cast<unsigned>(batched)),
                     kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream))(t);
  return CudaStatus(cudaGetLastError(), "RecoverBf16BatchKernel launch");
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

Status LaunchRecoverF32(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n, void* stream) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("LaunchRecoverF32", e, sm, out, n, 4));
  if (n == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  int blocks = 1;
  if (RecoverF32VectorPathFits(e, sm, out, n)) {
    ZM_RETURN_IF_ERROR(GridBlocks(RecoverF32VecKernel, n / 4, &blocks));
    ZIPMOE_CUDA_LAUNCH(RecoverF32VecKernel, blocks, kThreadsPerBlock, 0, s)(
        e, reinterpret_cast<const uint16_t*>(sm), sm + 2 * n, out, n);
    return CudaStatus(cudaGetLastError(), "RecoverF32VecKernel launch");
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverF32ScalarKernel, n, &blocks));
  ZIPMOE_CUDA_LAUNCH(RecoverF32ScalarKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverF32ScalarKernel launch");
}

Status LaunchRecoverF16(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, void* stream) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("LaunchRecoverF16", e, sm, out, n, 2));
  if (n == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  int blocks = 1;
  if (RecoverF16VectorPathFits(e, sm, out)) {
    ZM_RETURN_IF_ERROR(GridBlocks(RecoverF16VecKernel, n / 8, &blocks));
    ZIPMOE_CUDA_LAUNCH(RecoverF16VecKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, sm + n, out, n);
    return CudaStatus(cudaGetLastError(), "RecoverF16VecKernel launch");
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverF16ScalarKernel, n, &blocks));
  ZIPMOE_CUDA_LAUNCH(RecoverF16ScalarKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverF16ScalarKernel launch");
}

Status LaunchRecoverF8E4M3(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, void* stream) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("LaunchRecoverF8E4M3", e, sm, out, n, 1));
  if (n == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  int blocks = 1;
  if (RecoverF8E4M3VectorPathFits(e, sm, out, n)) {
    ZM_RETURN_IF_ERROR(GridBlocks(RecoverF8E4M3VecKernel, n / 8, &blocks));
    ZIPMOE_CUDA_LAUNCH(RecoverF8E4M3VecKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
    return CudaStatus(cudaGetLastError(), "RecoverF8E4M3VecKernel launch");
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverF8E4M3PairKernel, (n + 1) / 2, &blocks));
  ZIPMOE_CUDA_LAUNCH(RecoverF8E4M3PairKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverF8E4M3PairKernel launch");
}

Status LaunchRecoverMxfp4(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, void* stream) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("LaunchRecoverMxfp4", e, sm, out, n, 1));
  if (n % 32 != 0)
    return Status::InvalidArgument("LaunchRecoverMxfp4: MXFP4 needs whole blocks of 32 values, got n=" +
                                   std::to_string(n));
  if (n == 0) return Status::Ok();
  const auto s = static_cast<cudaStream_t>(stream);
  int blocks = 1;
  if (RecoverMxfp4VectorPathFits(e, sm, out)) {
    ZM_RETURN_IF_ERROR(GridBlocks(RecoverMxfp4VecKernel, n / 16, &blocks));
    ZIPMOE_CUDA_LAUNCH(RecoverMxfp4VecKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
    return CudaStatus(cudaGetLastError(), "RecoverMxfp4VecKernel launch");
  }
  ZM_RETURN_IF_ERROR(GridBlocks(RecoverMxfp4QuadKernel, n / 4, &blocks));
  ZIPMOE_CUDA_LAUNCH(RecoverMxfp4QuadKernel, blocks, kThreadsPerBlock, 0, s)(e, sm, out, n);
  return CudaStatus(cudaGetLastError(), "RecoverMxfp4QuadKernel launch");
}

Status RecoverMxfp4OnDevice(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, int offset) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("RecoverMxfp4OnDevice", e, sm, out, n, 1));
  if (n % 32 != 0)
    return Status::InvalidArgument("RecoverMxfp4OnDevice: MXFP4 needs whole blocks of 32 values, got n=" +
                                   std::to_string(n));
  return RunOnDevice(DType::kMXFP4, e, sm, out, n, offset,
                     [n](const uint8_t* d_e, const uint8_t* d_sm, uint8_t* d_out) {
                       return LaunchRecoverMxfp4(d_e, d_sm, d_out, n, nullptr);
                     });
}

Status RecoverF8E4M3OnDevice(const uint8_t* e, const uint8_t* sm, uint8_t* out, int64_t n, int offset) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("RecoverF8E4M3OnDevice", e, sm, out, n, 1));
  return RunOnDevice(DType::kF8E4M3, e, sm, out, n, offset,
                     [n](const uint8_t* d_e, const uint8_t* d_sm, uint8_t* d_out) {
                       return LaunchRecoverF8E4M3(d_e, d_sm, d_out, n, nullptr);
                     });
}

Status RecoverF32OnDevice(const uint8_t* e, const uint8_t* sm, uint32_t* out, int64_t n, int offset) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("RecoverF32OnDevice", e, sm, out, n, 1));
  return RunOnDevice(DType::kF32, e, sm, out, n, offset,
                     [n](const uint8_t* d_e, const uint8_t* d_sm, uint8_t* d_out) {
                       return LaunchRecoverF32(d_e, d_sm, reinterpret_cast<uint32_t*>(d_out), n, nullptr);
                     });
}

Status RecoverF16OnDevice(const uint8_t* e, const uint8_t* sm, uint16_t* out, int64_t n, int offset) {
  ZM_RETURN_IF_ERROR(CheckFpLaunch("RecoverF16OnDevice", e, sm, out, n, 1));
  return RunOnDevice(DType::kF16, e, sm, out, n, offset,
                     [n](const uint8_t* d_e, const uint8_t* d_sm, uint8_t* d_out) {
                       return LaunchRecoverF16(d_e, d_sm, reinterpret_cast<uint16_t*>(d_out), n, nullptr);
                     });
}

}  // namespace zipmoe::kernels
