#include "services/executor/device_profile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "common/expert_provider.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_block.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

using Clock = std::chrono::steady_clock;

// Deterministic BF16 weights of magnitude <= ~0.03 (xorshift; the top half of a float32).
std::vector<uint16_t> PseudoRandomBf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> out(n);
  uint32_t s = seed | 1u;
  for (uint16_t& v : out) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    const float f = (static_cast<float>(s % 2001u) - 1000.0f) * 3e-5f;
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    v = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

// Median wall time of `fn` over `repeats` runs after one warm-up, microseconds.
double MedianUs(int32_t repeats, const std::function<void()>& fn) {
  fn();
  std::vector<double> us;
  for (int32_t r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
  return us[us.size() / 2];
}

// The line through (small, t_small) and (large, t_large): fixed part and slope, both >= 0.
void Fit(double t_small, double t_large, int32_t small, int32_t large, double* fixed_us, double* token_us) {
  const double slope = std::max(0.0, (t_large - t_small) / static_cast<double>(large - small));
  *token_us = slope;
  *fixed_us = std::max(0.0, t_small - slope * small);
}

}  // namespace

Result<scheduler::DeviceCostModel> ProfileExpertDevices(const ModelConfig& config, at::Device device,
                                                        at::ScalarType dtype, const DeviceProfileOptions& options) {
  if (!(options.small_tokens >= 1 && options.small_tokens < options.large_tokens) || options.repeats < 1) {
    return Status::InvalidArgument(fmt::format("ProfileExpertDevices: need 1 <= small_tokens < large_tokens and "
                                               "repeats >= 1 (got {}, {}, {})", options.small_tokens,
                                               options.large_tokens, options.repeats));
  }
  const int64_t inter = config.moe_intermediate_size, hidden = config.hidden_size;
  if (inter <= 0 || hidden <= 0) {
    return Status::InvalidArgument(fmt::format("ProfileExpertDevices: expert shape [{}, {}] of {}", inter, hidden,
                                               ModelArchName(config.arch)));
  }
  const std::vector<uint16_t> gate = PseudoRandomBf16(static_cast<size_t>(inter * hidden), 1);
  const std::vector<uint16_t> up = PseudoRandomBf16(static_cast<size_t>(inter * hidden), 2);
  const std::vector<uint16_t> down = PseudoRandomBf16(static_cast<size_t>(hidden * inter), 3);
  ExpertWeightsView ew;
  ew.dtype = DType::kBF16;
  ew.gate = gate.data();
  ew.up = up.data();
  ew.down = down.data();
  ew.intermediate = inter;
  ew.hidden = hidden;
  scheduler::DeviceCostModel cost;
  const int32_t small = options.small_tokens, large = options.large_tokens;
  ZM_RETURN_IF_ERROR(TorchBoundary("profiling an expert", [&]() -> Status {
    const at::Tensor x_small = at::randn({small, hidden}, at::TensorOptions().dtype(at::kFloat)) * 0.1;
    const at::Tensor x_large = at::randn({large, hidden}, at::TensorOptions().dtype(at::kFloat)) * 0.1;
    // CPU: the path a CPU-assigned expert takes (MoeForward: ExpertForward on float32 CPU rows).
    const double cpu_small = MedianUs(options.repeats, [&] { (void)ExpertForward(ew, x_small); });
    const double cpu_large = MedianUs(options.repeats, [&] { (void)ExpertForward(ew, x_large); });
    Fit(cpu_small, cpu_large, small, large, &cost.cpu_expert_us, &cost.cpu_token_us);
    if (device.is_cpu()) return Status::Ok();
    // Accelerator: the copy of the three matrices, then the matmuls on resident copies. Reading one
    // element back waits for the queued work.
    const auto sync = [](const at::Tensor& t) { (void)t.sum().to(at::kCPU).item<float>(); };
    MlpWeights on_device;
    cost.transfer_us = MedianUs(options.repeats, [&] {
      on_device.gate = WrapExpertTensor(ew.gate, ew.dtype, inter, hidden).to(device, dtype);
      on_device.up = WrapExpertTensor(ew.up, ew.dtype, inter, hidden).to(device, dtype);
      on_device.down = WrapExpertTensor(ew.down, ew.dtype, hidden, inter).to(device, dtype);
      sync(on_device.down);
    });
    const at::Tensor d_small = x_small.to(device, dtype), d_large = x_large.to(device, dtype);
    const double gpu_small = MedianUs(options.repeats, [&] { sync(MlpForward(on_device, d_small)); });
    const double gpu_large = MedianUs(options.repeats, [&] { sync(MlpForward(on_device, d_large)); });
    Fit(gpu_small, gpu_large, small, large, &cost.gpu_expert_us, &cost.gpu_token_us);
    cost.has_accelerator = true;
    return Status::Ok();
  }));
  return cost;
}

}  // namespace zipmoe::executor
