#include "services/executor/torch_util.h"

#include <algorithm>
#include <cstring>
#include <shared_mutex>
#include <stdexcept>
#include <unordered_map>

#include "kernels/dense_decode.h"
#include "services/executor/cpu_ops.h"
#include "services/executor/work_pool.h"

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
  TORCH_CHECK(dtype == DType::kBF16 || dtype == DType::kF16 || dtype == DType::kF32, "WrapExpertTensor: ",
              DTypeName(dtype), " expert weights are read by the CPU kernels only (FP8 needs its block scales)");
  const at::ScalarType type = dtype == DType::kF32 ? at::kFloat : dtype == DType::kF16 ? at::kHalf : at::kBFloat16;
  return at::from_blob(const_cast<void*>(data), {d0, d1}, at::TensorOptions().dtype(type));
}

at::Tensor UpcastBf16(const uint16_t* data, at::IntArrayRef shape) {
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  uint32_t* dst = reinterpret_cast<uint32_t*>(out.data_ptr<float>());
  constexpr int64_t kGrain = 1 << 16;  // elements per task
  WorkPool::Shared().ParallelFor(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = static_cast<uint32_t>(data[i]) << 16;  // vectorised
  });
  return out;
}

std::string ShapeString(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string ShapeString(at::IntArrayRef shape) {
  return ShapeString(std::vector<int64_t>(shape.begin(), shape.end()));
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && weight.is_cpu() && weight.scalar_type() == at::kFloat &&
      weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0)) {
    const at::Tensor xc = x.contiguous();
    const at::Tensor wc = weight.contiguous();
    at::Tensor y = at::empty(x.sizes(), x.options());
    const int64_t d = x.size(-1);
    cpu::RmsNorm(xc.data_ptr<float>(), d == 0 ? 0 : x.numel() / d, d, wc.data_ptr<float>(), static_cast<float>(eps),
                 y.data_ptr<float>());
    return y;
  }
  if (x.is_cuda() && x.scalar_type() == at::kBFloat16 && weight.is_cuda() && weight.scalar_type() == at::kBFloat16 &&
      weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0) && x.numel() > 0) {
    const at::Tensor xc = x.contiguous();
    const at::Tensor wc = weight.contiguous();
    at::Tensor y = at::empty(x.sizes(), x.options());
    kernels::RmsNormBf16Args a;
    a.x = static_cast<const uint16_t*>(xc.data_ptr());
    a.weight = static_cast<const uint16_t*>(wc.data_ptr());
    a.y = static_cast<uint16_t*>(y.data_ptr());
    a.d = x.size(-1);
    a.rows = x.numel() / a.d;
    a.eps = static_cast<float>(eps);
    if (DeviceKernelRan(kernels::LaunchRmsNormBf16(a, /*stream=*/nullptr))) return y;
  }
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  const at::Tensor normed = x32 * at::rsqrt(variance + eps);
  return weight * normed.to(x.scalar_type());
}

bool DeviceKernelRan(const Status& launch) {
  if (launch.ok()) return true;
  if (launch.code() == StatusCode::kUnavailable) return false;
  throw std::runtime_error(launch.ToString());
}

at::Tensor AddResidual(at::Tensor h, const at::Tensor& x, double scale) {
  if (h.is_cpu() && x.is_cpu() && h.scalar_type() == at::kFloat && x.scalar_type() == at::kFloat && h.is_contiguous() &&
      x.is_contiguous() && !h.is_view() && h.sizes() == x.sizes() && h.use_count() == 1 && h.storage().use_count() == 1 &&
      h.storage_offset() == 0 && !h.is_same(x)) {
    float* hp = h.data_ptr<float>();
    const float* xp = x.data_ptr<float>();
    const int64_t count = h.numel();
    if (scale == 1.0) {
      for (int64_t i = 0; i < count; ++i) hp[i] += xp[i];
    } else {  // as torch's h + x * scale in float32: the product rounded, then the sum
      const auto s = static_cast<float>(scale);
      for (int64_t i = 0; i < count; ++i) {
        volatile float product = xp[i] * s;  // not contracted into an FMA
        hp[i] += product;
      }
    }
    return h;
  }
  return scale == 1.0 ? h + x : h + x * scale;
}

namespace {

struct Fp8Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, Fp8Scales> scales;
};

Fp8Registry& Registry() {
  static Fp8Registry* registry = new Fp8Registry();  // never destroyed: models may outlive statics
  return *registry;
}

}  // namespace

void AttachFp8Scales(const at::Tensor& weight, Fp8Scales scales) {
  Fp8Registry& r = Registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  r.scales[weight.data_ptr()] = std::move(scales);
}

void DetachFp8Scales(const at::Tensor& weight) {
  Fp8Registry& r = Registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  r.scales.erase(weight.data_ptr());
}

const Fp8Scales* FindFp8Scales(const void* data) {
  Fp8Registry& r = Registry();
  std::shared_lock<std::shared_mutex> lock(r.mu);
  auto it = r.scales.find(data);
  return it == r.scales.end() ? nullptr : &it->second;  // entries are stable until detached
}

kernels::GemmWeights GemmWeightsOf(const at::Tensor& weight) {
  const bool bf16 = weight.scalar_type() == at::kBFloat16;
  const bool fp8 = weight.scalar_type() == at::kByte;
  TORCH_CHECK(weight.dim() == 2 && weight.is_cpu() && (bf16 || fp8 || weight.scalar_type() == at::kFloat) &&
                  weight.is_contiguous(),
              "GemmWeightsOf: expected a contiguous 2-D CPU BF16, float32 or FP8 tensor, got ", weight.sizes(), " ",
              weight.scalar_type());
  kernels::GemmWeights w;
  if (fp8) {
    const Fp8Scales* scales = FindFp8Scales(weight.data_ptr());
    TORCH_CHECK(scales != nullptr, "GemmWeightsOf: a uint8 weight ", weight.sizes(), " without FP8 scales attached");
    w.f8 = weight.data_ptr<uint8_t>();
    w.f8_scale = scales->scale_inv.data_ptr<float>();
    w.block_rows = scales->block_rows;
    w.block_cols = scales->block_cols;
  } else if (bf16) {
    w.bf16 = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
  } else {
    w.f32 = weight.data_ptr<float>();
  }
  w.rows = weight.size(0);
  w.cols = weight.size(1);
  return w;
}

std::vector<at::Tensor> LinearCpuGroup(const at::Tensor& x, const std::vector<kernels::GemmWeights>& ws,
                                       const std::vector<at::Tensor>& biases) {
  TORCH_CHECK(!ws.empty() && (biases.empty() || biases.size() == ws.size()),
              "LinearCpuGroup: ", ws.size(), " weights and ", biases.size(), " biases");
  TORCH_CHECK(x.is_cpu() && x.scalar_type() == at::kFloat && x.dim() >= 1, "LinearCpu: x must be float32 on the CPU");
  const int64_t cols = ws[0].cols;
  TORCH_CHECK(x.size(-1) == cols, "LinearCpu: x has ", x.size(-1), " features, the weight ", cols, " columns");
  // A decode step's [n, cols] activations are used as they are: reshape and contiguous are torch
  // operators, whose dispatch costs more than a small product's setup.
  const bool flat = x.dim() == 2 && x.is_contiguous();
  const at::Tensor x2 = flat ? x : x.reshape({-1, cols}).contiguous();
  std::vector<kernels::GemmArgs> args(ws.size());
  std::vector<at::Tensor> ys(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) {
    const kernels::GemmWeights& w = ws[i];
    const at::Tensor bias = biases.empty() ? at::Tensor() : biases[i];
    TORCH_CHECK(w.cols == cols, "LinearCpuGroup: weight ", i, " has ", w.cols, " columns, weight 0 ", cols);
    TORCH_CHECK(!bias.defined() || (bias.scalar_type() == at::kFloat && bias.numel() == w.rows && bias.is_contiguous()),
                "LinearCpu: bias must be a contiguous float32 [", w.rows, "] tensor");
    ys[i] = at::empty({x2.size(0), w.rows}, x.options());
    kernels::GemmArgs& a = args[i];
    a.w = w;
    a.x = x2.data_ptr<float>();
    a.n = x2.size(0);
    a.ldx = cols;
    a.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
    a.y = ys[i].data_ptr<float>();
    a.ldy = w.rows;
  }
  // One parallel region over the rows of every weight: one fork/join for the group.
  cpu::Gemms(args);
  if (flat) return ys;  // already [n, rows]
  for (size_t i = 0; i < ws.size(); ++i) {
    std::vector<int64_t> out_shape(x.sizes().begin(), x.sizes().end());
    out_shape.back() = ws[i].rows;
    ys[i] = ys[i].view(out_shape);
  }
  return ys;
}

at::Tensor LinearCpu(const at::Tensor& x, const kernels::GemmWeights& w, const at::Tensor& bias) {
  return LinearCpuGroup(x, {w}, {bias})[0];
}

bool RunsOnCpuKernels(const at::Tensor& x, const at::Tensor& weight) {
  return x.is_cpu() && x.scalar_type() == at::kFloat && weight.is_cpu() &&
         (weight.scalar_type() == at::kBFloat16 || weight.scalar_type() == at::kFloat ||
          (weight.scalar_type() == at::kByte && FindFp8Scales(weight.data_ptr()) != nullptr));
}

std::vector<at::Tensor> Linears(const at::Tensor& x, const std::vector<std::pair<at::Tensor, at::Tensor>>& layers) {
  bool cpu = true;
  for (const auto& [weight, bias] : layers) cpu = cpu && RunsOnCpuKernels(x, weight);
  if (cpu) {
    std::vector<kernels::GemmWeights> ws;
    std::vector<at::Tensor> biases;
    for (const auto& [weight, bias] : layers) {
      ws.push_back(GemmWeightsOf(weight.contiguous()));
      biases.push_back(bias);
    }
    return LinearCpuGroup(x, ws, biases);
  }
  std::vector<at::Tensor> out;
  for (const auto& [weight, bias] : layers) out.push_back(Linear(x, weight, bias));
  return out;
}

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (RunsOnCpuKernels(x, weight)) return LinearCpu(x, GemmWeightsOf(weight.contiguous()), bias);
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

}  // namespace zipmoe::executor
