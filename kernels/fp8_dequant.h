// FP8 E4M3 block-scaled (and MXFP4) weights to BF16 / float32, for the GPU executor (issue 40 "FP8 on
// the GPU", issue 41's gpt_oss on the torch device path): an FP8
// checkpoint's expert matrices reach a device F slot as BF16 (the GPU path computes in BF16, as for
// every other dtype), and its dense FP8 matrices are dequantized once at load.
//
// For r in [0, rows), k in [0, cols):
//   out[r, k] = bf16_rne( e4m3(q[r, k]) * scale_inv[(r / block_rows) * ceil(cols / block_cols) + k / block_cols] )
// e4m3() exact (common/dtype.h F8E4M3ToFloat: bias 7, subnormals, S.1111.111 = NaN); the product one
// float32 multiplication rounded to nearest (DeepSeek-V3's weight_dequant, transformers' FP8
// integration: the same float32 value the CPU kernels use, kernels/bf16_gemm.h GemmWeights::f8); then
// rounded to BF16 to nearest-even (common/dtype.h FloatToBf16, torch's rounding), a NaN product (a NaN
// code or scale) as the canonical quiet NaN 0x7FC0. So the GPU's BF16 weight is the CPU's float32
// weight rounded once.
//   q: [rows, cols] uint8 F8_E4M3 patterns, row-major; scale_inv: [ceil(rows / block_rows),
//   ceil(cols / block_cols)] float32; out: [rows, cols] uint16 BF16 patterns.
// Thread-safety: reentrant.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace zipmoe::kernels {

// The formula above, one element at a time (kernels/fp8_dequant_ref.cc): the CPU reference and the
// CPU stand-in of the GPU executor's tests. rows, cols <= 0 touch nothing; block sizes must be > 0.
void DequantizeF8E4M3ToBf16Reference(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                     int64_t block_rows, int64_t block_cols, uint16_t* out);

// The same as float32 (no BF16 rounding): the dense FP8 matrices of a GPU executor before their
// conversion to its compute dtype.
void DequantizeF8E4M3ToFloatReference(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols, float* out);

// MXFP4 (OCP Microscaling, gpt-oss's experts) as float32: `raw` in zipmoe's MXFP4 layout (docs/format.md:
// the nibbles [rows, cols / 2] row-major, column 2j in the low nibble of byte j, then the E8M0 scales
// [rows, cols / 32]); out[r, k] = e2m1(nibble) * 2^(scale - 127), one float32 multiplication (exact while
// finite: the CPU kernels' weight, kernels/bf16_gemm.h GemmWeights::mxfp4). cols must be a multiple of
// 32; rows, cols <= 0 touch nothing.
void DequantizeMxfp4ToFloatReference(const uint8_t* raw, int64_t rows, int64_t cols, float* out);

// The same rounded to BF16 (FloatToBf16; a NaN, from scale 0xFF, as 0x7FC0): the CPU reference of
// LaunchDequantizeMxfp4ToBf16.
void DequantizeMxfp4ToBf16Reference(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out);

// GPU kernel (kernels/fp8_dequant.cu, built with CUDA): q, scale_inv and out device-accessible
// (device memory, or registered / unified host memory), out 2-byte aligned; one thread per 4
// elements of a row. `stream` is a cudaStream_t as void* (nullptr: the default stream); enqueues
// only. Errors: kInvalidArgument (negative sizes, block sizes <= 0, a null pointer with work to do),
// kUnavailable (built without CUDA), kInternal (CUDA error string).
Status LaunchDequantizeF8E4M3ToBf16(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                    int64_t block_rows, int64_t block_cols, uint16_t* out, void* stream);

// GPU kernel of DequantizeMxfp4ToBf16Reference: raw (device-accessible, zipmoe's MXFP4 layout) ->
// out [rows, cols] BF16, one thread per byte of nibbles (2 values). Errors: kInvalidArgument (negative
// sizes, cols not a multiple of 32, a null pointer with work to do), kUnavailable (built without CUDA),
// kInternal (CUDA error string).
Status LaunchDequantizeMxfp4ToBf16(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out, void* stream);

// Test helper: copies the host inputs to the device, runs the kernel, copies back and syncs.
// Errors: kUnavailable without CUDA or device; as LaunchDequantizeF8E4M3ToBf16.
Status DequantizeF8E4M3ToBf16OnDevice(const uint8_t* q, const float* scale_inv, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols, uint16_t* out);

// Test helper of LaunchDequantizeMxfp4ToBf16, as DequantizeF8E4M3ToBf16OnDevice.
Status DequantizeMxfp4ToBf16OnDevice(const uint8_t* raw, int64_t rows, int64_t cols, uint16_t* out);

}  // namespace zipmoe::kernels
