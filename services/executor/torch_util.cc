#include "services/executor/torch_util.h"

#include <ATen/Parallel.h>

#include <cstring>

namespace zipmoe::executor {

Result<at::ScalarType> ToScalarType(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::kBF16: return at::kBFloat16;
    case DType::kF16: return at::kHalf;
    case DType::kF32: return at::kFloat;
    default:
      return Status::InvalidArgument(
          fmt::format("{}: dtype {} is not supported (expected BF16, F16 or F32)", what, DTypeName(dtype)));
  }
}

Result<at::Tensor> WrapView(const TensorView& view) {
  ZM_ASSIGN_OR_RETURN(at::ScalarType type, ToScalarType(view.spec.dtype, view.file + ": '" + view.spec.name + "'"));
  // from_blob needs a non-const pointer; the memory map is read-only and nothing writes through it.
  return at::from_blob(const_cast<uint8_t*>(view.data), view.spec.shape, at::TensorOptions().dtype(type));
}

at::Tensor WrapExpertTensor(const void* data, DType dtype, int64_t d0, int64_t d1) {
  const at::ScalarType type = dtype == DType::kF32 ? at::kFloat : dtype == DType::kF16 ? at::kHalf : at::kBFloat16;
  return at::from_blob(const_cast<void*>(data), {d0, d1}, at::TensorOptions().dtype(type));
}

void UpcastBf16Into(const uint16_t* data, at::Tensor& out) {
  uint32_t* dst = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
  constexpr int64_t kGrain = 1 << 16;  // elements per task
  at::parallel_for(0, out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<uint32_t>(data[i]) << 16;  // vectorised
  });
}

at::Tensor UpcastBf16(const uint16_t* data, at::IntArrayRef shape) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  UpcastBf16Into(data, out);
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string ShapeString(at::IntArrayRef shape) {
  return ShapeString(std::vector<int64_t>(shape.begin(), shape.end()));
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  const at::Tensor normed = x32 * at::rsqrt(variance + eps);
  return weight * normed.to(x.scalar_type());
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (x.dim() == 2 && x.size(0) == 1 && x.is_cpu() && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat) {
    at::Tensor y = at::mv(weight, x[0]);
    if (bias.defined()) y = y + bias;
    return y.unsqueeze(0);
  }
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

}  // namespace zipmoe::executor
