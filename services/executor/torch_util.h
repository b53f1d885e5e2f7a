// Small libtorch helpers of the executor: the exception boundary (c10::Error -> Status), wrapping
// checkpoint bytes as tensors, and RMSNorm. Internal to services/executor (includes ATen).
// Thread-safety: pure functions.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/checkpoint/safetensors.h"
#include "common/status.h"
#include "kernels/bf16_gemm.h"

namespace zipmoe::executor {

// Runs `fn` (returning Status) and converts a torch or std exception into Status::Internal whose
// message starts with `what`. The one place executor code catches exceptions (style.md "Errors").
template <typename F>
Status TorchBoundary(const std::string& what, F&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    return Status::Internal(fmt::format("{}: torch error: {}", what, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("{}: {}", what, e.what()));
  }
}

// The scalar type of a safetensors dtype, or kInvalidArgument naming `what` for unsupported ones.
Result<at::ScalarType> ToScalarType(DType dtype, const std::string& what);

// A tensor viewing `view`'s bytes without copying (shape as the file). The bytes are read-only:
// never write through the result. Valid while the file that owns `view` lives.
// Errors: kInvalidArgument for dtypes other than BF16/F16/F32.
Result<at::Tensor> WrapView(const TensorView& view);

// Expert weights [d0, d1] (row-major) of element type `dtype` (BF16, F16 or F32; ExpertWeightsView) as
// a tensor view without copying; read-only as WrapView. Throws c10::Error for another dtype (FP8
// experts are multiplied by the CPU kernels with their scales: moe_block.cc).
at::Tensor WrapExpertTensor(const void* data, DType dtype, int64_t d0, int64_t d1);

// BF16 bit patterns of `shape` (row-major) converted to a new float32 CPU tensor (exact: bits << 16, NaN payloads
// kept, identical to torch's BFloat16 -> Float conversion). Parallel over torch's intra-op threads;
// several times faster than Tensor::to(kFloat) in libtorch 1.13. Used for BF16 vectors (norms, biases).
at::Tensor UpcastBf16(const uint16_t* data, at::IntArrayRef shape);

// "[a, b, c]" for messages.
std::string ShapeString(const std::vector<int64_t>& shape);
std::string ShapeString(at::IntArrayRef shape);

// RMSNorm as the HF modules compute it: y = weight * (x32 * rsqrt(mean(x32^2, -1) + eps)).to(x.dtype)
// with x32 = x in float32.  x: [..., d]; weight: [d]. float32 CPU tensors: cpu::RmsNorm; BF16 CUDA
// tensors (x and weight): one launch of kernels/dense_decode.h's kernel (the same formula, its fixed
// reduction order); otherwise torch operators.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// The outcome of a launch of a kernels/ device kernel from torch code: true when it was enqueued;
// false when the binary has no CUDA kernels (kUnavailable: the caller computes the same with torch
// operators); throws std::runtime_error with the status otherwise (TorchBoundary makes it a Status).
bool DeviceKernelRan(const Status& launch);

// The residual connection h + x of a decoder layer, written into h when h is a float32 CPU tensor of
// its own (contiguous, not a view, the same shape as a float32 CPU x): the same bits as h + x (one
// float32 addition per element) without a torch operator's dispatch, which on a 2-core decode step cost
// more than the additions (issue 35). Otherwise returns h + x. h is consumed: use the result.
// scale != 1 (Granite's residual_multiplier): h + x * scale, the product rounded before the sum.
at::Tensor AddResidual(at::Tensor h, const at::Tensor& x, double scale = 1.0);

// nn.Linear: x [..., in] -> [..., out] with weight [out, in] and optional bias [out] (undefined = none).
// On the CPU with float32 activations and a BF16 or float32 weight (how every checkpoint matrix is
// held there) this is LinearCpu: the weight is read as stored, never copied. Otherwise (the GPU)
// at::linear.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

// The kernels' view of a contiguous 2-D CPU BF16 or float32 tensor [rows, cols], or of a uint8 one
// holding F8_E4M3 bit patterns with scales attached (AttachFp8Scales) (no copy; valid while it
// lives). Throws c10::Error for other tensors (a uint8 one without scales too).
kernels::GemmWeights GemmWeightsOf(const at::Tensor& weight);

// Block-scaled FP8 linear weights (quantization_config fp8): torch 1.13 has no FP8 dtype, so such a
// weight is a kByte CPU tensor [rows, cols] of E4M3 bit patterns, and its weight_scale_inv
// ([ceil(rows / block_rows), ceil(cols / block_cols)] float32, contiguous CPU) is attached to it here,
// keyed by the weight's data pointer, for GemmWeightsOf. The loader attaches them and detaches them
// when the model is freed (LoadedModel). Thread-safe.
struct Fp8Scales {
  at::Tensor scale_inv;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
};
void AttachFp8Scales(const at::Tensor& weight, Fp8Scales scales);
void DetachFp8Scales(const at::Tensor& weight);
// The scales attached to the weight whose data starts at `data`, or nullptr.
const Fp8Scales* FindFp8Scales(const void* data);

// x · Wᵀ (+ bias) with the CPU kernels of kernels/bf16_gemm.h: x [..., w.cols] float32 CPU
// (made contiguous if it is not) -> [..., w.rows] float32; bias [w.rows] float32 or undefined.
// Output rows are split across torch's intra-op threads; every output element is computed in the
// kernels' fixed order, so the result depends neither on the thread count nor on which other tokens
// share the batch, nor on the encoding of w (BF16, E/SM planes or float32 holding the same values).
// Throws c10::Error (caught by TorchBoundary) when x's last dimension differs from w.cols.
at::Tensor LinearCpu(const at::Tensor& x, const kernels::GemmWeights& w, const at::Tensor& bias = at::Tensor());

// LinearCpu of several weights with the same input (q/k/v, gate/up) in one parallel region: one
// fork/join for the group instead of one per weight, the same bits as separate calls.
// `biases`: empty, or one (possibly undefined) per weight. Throws c10::Error as LinearCpu, or when a
// weight's column count differs from the first's.
std::vector<at::Tensor> LinearCpuGroup(const at::Tensor& x, const std::vector<kernels::GemmWeights>& ws,
                                       const std::vector<at::Tensor>& biases = {});

// True when Linear(x, weight) runs on the CPU kernels (float32 x on the CPU, BF16/F32 CPU weight, or
// an FP8 one with scales attached).
bool RunsOnCpuKernels(const at::Tensor& x, const at::Tensor& weight);

// Linear of each (weight, bias) on the same x: one LinearCpuGroup when every one runs on the CPU
// kernels, else one Linear each. Bias may be undefined.
std::vector<at::Tensor> Linears(const at::Tensor& x, const std::vector<std::pair<at::Tensor, at::Tensor>>& layers);

}  // namespace zipmoe::executor
