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

#include "common/safetensors.h"
#include "common/status.h"

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
// a tensor view without copying; read-only as WrapView.
at::Tensor WrapExpertTensor(const void* data, DType dtype, int64_t d0, int64_t d1);

// BF16 bit patterns of `shape` (row-major) converted to a new float32 CPU tensor (exact: bits << 16, NaN payloads
// kept, identical to torch's BFloat16 -> Float conversion). Parallel over torch's intra-op threads;
// several times faster than Tensor::to(kFloat) in libtorch 1.13.
at::Tensor UpcastBf16(const uint16_t* data, at::IntArrayRef shape);
// As UpcastBf16 into `out` (a contiguous float32 CPU tensor of out.numel() elements), reusing its
// memory: no allocation and no page faults on the hot path.
void UpcastBf16Into(const uint16_t* data, at::Tensor& out);

// "[a, b, c]" for messages.
std::string ShapeString(const std::vector<int64_t>& shape);
std::string ShapeString(at::IntArrayRef shape);

// RMSNorm as the HF modules compute it: y = weight * (x32 * rsqrt(mean(x32^2, -1) + eps)).to(x.dtype)
// with x32 = x in float32.  x: [..., d]; weight: [d].
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// nn.Linear: x [..., in] -> [..., out] with weight [out, in] and optional bias [out] (undefined = none).
// A single CPU float32 row (decode) goes through at::mv (GEMV: no packing of the weight matrix);
// the result differs from the GEMM path only by float32 summation order.
at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = at::Tensor());

}  // namespace zipmoe::executor
