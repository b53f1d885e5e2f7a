// CUDA kernels of kernels/fp8_dequant.h: FP8 E4M3 with block scales (and MXFP4) to BF16, the formulas there.
// Memory-bound (1 byte read, 2 written per element, the scales cached): each thread takes 4
// consecutive elements of one row; consecutive threads take consecutive groups, so a warp reads 128
// contiguous bytes of q and writes 256 of out. The E4M3 decode and the BF16 rounding are the bit
// formulas of common/dtype.h (F8E4M3ToFloat, FloatToBf16), so the device and the CPU reference agree
// bit for bit; the product is __fmul_rn (never contracted).
#include <cuda_runtime.h>

#include <string>

#include "kernels/fp8_dequant.h"
#include "kernels/cuda_launch.cuh"
#include "kernels/cuda_status.cuh"
#include "kernels/launch_config.cuh"
#include "kernels/recovery.h"  // CudaDeviceCount

namespace zipmoe::kernels {
namespace {

constexpr int kThreadsPerBlock = 256;

__device__ __forceinline__ float E4M3ToFloat(uint32_t b) {
  const uint32_t mag = b & 0x7fu;
  float v;
  if (mag == 0x7fu) {
    v = __int_as_float(0x7fc00000);
  } else if (mag < 8u) {  // exponent 0: m * 2^-9, exact
    v = __fmul_rn(static_cast<float>(mag), 0x1p-9f);
  } else {  // (1 + m/8) 2^(e-7): the fields moved into place, the bias moved from 7 to 127
    v = __uint_as_float((mag << 20) + (120u << 23));
  }
  return (b & 0x80u) != 0 ? -v : v;
}

__device__ __forceinline__ uint16_t ToBf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // any NaN: the canonical one (payloads differ by device)
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Grid-stride over groups of 4 elements of a row (a row's last group may be shorter).
//   q: [rows, cols] uint8; scale_inv: [ceil(rows / br), ceil(cols / bc)] float32; out: [rows, cols] uint16.
__global__ void __launch_bounds__(kThreadsPerBlock)
    DequantF8Kernel(const uint8_t* __restrict__ q, const float* __restrict__ scale_inv, int64_t rows, int64_t cols,
                    int64_t br, int64_t bc, uint16_t* __restrict__ out) {
  const int64_t groups_per_row = (cols + 3) / 4, groups = rows * groups_per_row;
  const int64_t scale_cols = (cols + bc - 1) / bc;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = g / groups_per_row, k0 = (g % groups_per_row) * 4;
    const float* srow = scale_inv + (r / br) * scale_cols;
    const int64_t end = k0 + 4 < cols ? k0 + 4 : cols;
    for (int64_t k = k0; k < end; ++k)
      out[r * cols + k] = ToBf16(__fmul_rn(E4M3ToFloat(q[r * cols + k]), __ldg(srow + k / bc)));
  }
}

// MXFP4: grid-stride over the bytes of nibbles; byte j of the [rows, cols / 2] nibble area holds values
// 2j (low nibble) and 2j + 1 of row 2j / cols, whose block scale is scales[(2j) / 32]. E2M1 by its
// definition (bit 3 sign, bits 2-1 exponent with bias 1, bit 0 mantissa: exact in float32), E8M0 as
// 2^(code - 127) (code 0: 2^-127, 0xFF: NaN), one __fmul_rn, then ToBf16.
__device__ __forceinline__ float E2M1ToFloat(uint32_t nibble) {
  const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  const float mag = e == 0 ? 0.5f * static_cast<float>(m) : __fmul_rn(1.0f + 0.5f * static_cast<float>(m), static_cast<float>(1u << (e - 1)));
  return (nibble & 8u) != 0 ? -mag : mag;
}
__device__ __forceinline__ float E8M0ToFloat(uint32_t code) {
  if (code == 0xffu) return __int_as_float(0x7fc00000);
  if (code == 0u) return 0x1p-127f;
  return __uint_as_float(code << 23);
}
__global__ void __launch_bounds__(kThreadsPerBlock)
    DequantMxfp4Kernel(const uint8_t* __restrict__ raw, int64_t rows, int64_t cols, uint16_t* __restrict__ out) {
  const int64_t bytes = rows * cols / 2;
  const uint8_t* scales = raw + bytes;
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t b = raw[j];
    const int64_t v = 2 * j;  // values v and v + 1, in the same block (blocks are 32 values)
    const float s = E8M0ToFloat(scales[v / 32]);
    out[v] = ToBf16(__fmul_rn(E2M1ToFloat(b & 15u), s));
    out[v + 1] = ToBf16(__fmul_rn(E2M1ToFloat(b >> 4), s));
  }
}

Status CheckArgs(const char* fn, const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols, int64_t br,
                 int64_t bc, const uint16_t* out) {
  if (rows < 0 || cols < 0) return Status::InvalidArgument(std::string(fn) + ": negative rows or cols");
  if (br <= 0 || bc <= 0) return Status::InvalidArgument(std::string(fn) + ": block sizes must be > 0");
  if (rows > 0 && cols > 0 && (q == nullptr || scale_inv == nullptr || out == nullptr))
    return Status::InvalidArgument(std::string(fn) + ": null pointer with work to do");
  if (reinterpret_cast<uintptr_t>(out) % 2 != 0) return Status::InvalidArgument(std::string(fn) + ": out is not 2-byte aligned");
  return Status::Ok();
}

}  // namespace

Status LaunchDequantizeF8E4M3ToBf16(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                    int64_t block_rows, int64_t block_cols, uint16_t* out, void* stream) {
  ZM_RETURN_IF_ERROR(CheckArgs("LaunchDequantizeF8E4M3ToBf16", q, scale_inv, rows, cols, block_rows, block_cols, out));
  if (rows == 0 || cols == 0) return Status::Ok();
  int64_t most = 1;  // what the device keeps resident (cached: no host cost per launch)
  ZM_RETURN_IF_ERROR(ResidentBlocks(DequantF8Kernel, kThreadsPerBlock, &most));
  const int64_t groups = rows * ((cols + 3) / 4);
  const int64_t needed = (groups + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int blocks = static_cast<int>(needed < most ? needed : most);
  ZIPMOE_CUDA_LAUNCH(DequantF8Kernel, blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream))(
      q, scale_inv, rows, cols, block_rows, block_cols, out);
  return CudaStatus(cudaGetLastError(), "DequantF8Kernel launch");
}

Status LaunchDequantizeMxfp4ToBf16(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out, void* stream) {
  if (rows < 0 || cols < 0 || cols % 32 != 0)
    return Status::InvalidArgument("LaunchDequantizeMxfp4ToBf16: negative sizes or cols not a multiple of 32");
  if (rows == 0 || cols == 0) return Status::Ok();
  if (raw == nullptr || out == nullptr)
    return Status::InvalidArgument("LaunchDequantizeMxfp4ToBf16: null pointer with work to do");
  if (reinterpret_cast<uintptr_t>(out) % 2 != 0)
    return Status::InvalidArgument("LaunchDequantizeMxfp4ToBf16: out is not 2-byte aligned");
  int64_t most = 1;  // what the device keeps resident (cached: no host cost per launch)
  ZM_RETURN_IF_ERROR(ResidentBlocks(DequantMxfp4Kernel, kThreadsPerBlock, &most));
  const int64_t needed = (rows * cols / 2 + kThreadsPerBlock - 1) / kThreadsPerBlock;
  const int blocks = static_cast<int>(needed < most ? needed : most);
  ZIPMOE_CUDA_LAUNCH(DequantMxfp4Kernel, blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(stream))(
      raw, rows, cols, out);
  return CudaStatus(cudaGetLastError(), "DequantMxfp4Kernel launch");
}

Status DequantizeMxfp4ToBf16OnDevice(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out) {
  if (rows < 0 || cols < 0 || cols % 32 != 0)
    return Status::InvalidArgument("DequantizeMxfp4ToBf16OnDevice: negative sizes or cols not a multiple of 32");
  if (CudaDeviceCount() == 0) return Status::Unavailable("DequantizeMxfp4ToBf16OnDevice: no CUDA device");
  if (rows == 0 || cols == 0) return Status::Ok();
  const size_t n = static_cast<size_t>(rows * cols), raw_bytes = n / 2 + n / 32;
  uint8_t* draw = nullptr;
  uint16_t* dout = nullptr;
  Status st = CudaStatus(cudaMalloc(&draw, raw_bytes), "cudaMalloc raw");
  if (st.ok()) st = CudaStatus(cudaMalloc(&dout, n * sizeof(uint16_t)), "cudaMalloc out");
  if (st.ok()) st = CudaStatus(cudaMemcpy(draw, raw, raw_bytes, cudaMemcpyHostToDevice), "copy raw");
  if (st.ok()) st = LaunchDequantizeMxfp4ToBf16(draw, rows, cols, dout, nullptr);
  if (st.ok()) st = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (st.ok()) st = CudaStatus(cudaMemcpy(out, dout, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "copy out");
  cudaFree(draw);
  cudaFree(dout);
  return st;
}

Status DequantizeF8E4M3ToBf16OnDevice(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols, uint16_t* out) {
  ZM_RETURN_IF_ERROR(CheckArgs("DequantizeF8E4M3ToBf16OnDevice", q, scale_inv, rows, cols, block_rows, block_cols, out));
  if (CudaDeviceCount() == 0) return Status::Unavailable("DequantizeF8E4M3ToBf16OnDevice: no CUDA device");
  if (rows == 0 || cols == 0) return Status::Ok();
  const size_t n = static_cast<size_t>(rows * cols);
  const size_t scales = static_cast<size_t>(((rows + block_rows - 1) / block_rows) * ((cols + block_cols - 1) / block_cols));
  uint8_t* dq = nullptr;
  float* ds = nullptr;
  uint16_t* dout = nullptr;
  Status st = CudaStatus(cudaMalloc(&dq, n), "cudaMalloc q");
  if (st.ok()) st = CudaStatus(cudaMalloc(&ds, scales * sizeof(float)), "cudaMalloc scales");
  if (st.ok()) st = CudaStatus(cudaMalloc(&dout, n * sizeof(uint16_t)), "cudaMalloc out");
  if (st.ok()) st = CudaStatus(cudaMemcpy(dq, q, n, cudaMemcpyHostToDevice), "copy q");
  if (st.ok()) st = CudaStatus(cudaMemcpy(ds, scale_inv, scales * sizeof(float), cudaMemcpyHostToDevice), "copy scales");
  if (st.ok()) st = LaunchDequantizeF8E4M3ToBf16(dq, ds, rows, cols, block_rows, block_cols, dout, nullptr);
  if (st.ok()) st = CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (st.ok()) st = CudaStatus(cudaMemcpy(out, dout, n * sizeof(uint16_t), cudaMemcpyDeviceToHost), "copy out");
  cudaFree(dq);
  cudaFree(ds);
  cudaFree(dout);
  return st;
}

}  // namespace zipmoe::kernels
