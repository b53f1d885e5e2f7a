// DALI's CPU/accelerator expert assignment in the executor (MoeForward's placement, device_profile.h,
// GeneratorOptions::device_assignment). No accelerator runs here: torch's device path of MoeForward
// is driven with a BF16 CPU tensor, which stands in for the accelerator (the same code a CUDA x
// takes), while CPU-assigned experts take the float32 BF16-kernel path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "common/resident_expert_provider.h"
#include "services/executor/device_profile.h"
#include "services/executor/generator.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_block.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

struct Loaded {
  std::unique_ptr<LoadedModel> model;
  int32_t layer = -1;  // the first MoE layer
};

Loaded LoadTiny(const std::string& variant, at::ScalarType dtype) {
  LoadOptions options;
  options.dtype = dtype;
  Result<std::unique_ptr<LoadedModel>> r = LoadModel(testing::TinyModelDir(variant), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Loaded out;
  if (!r.ok()) return out;
  out.model = std::move(r).value();
  for (size_t l = 0; l < out.model->weights.layers.size(); ++l) {
    if (out.model->weights.layers[l].is_moe) {
      out.layer = static_cast<int32_t>(l);
      break;
    }
  }
  return out;
}

at::Tensor Input(int64_t n, int64_t hidden, at::ScalarType dtype) {
  at::manual_seed(11);
  return (at::randn({n, hidden}, at::TensorOptions().dtype(at::kFloat)) * 0.5).to(dtype);
}

at::Tensor RunBlock(const Loaded& m, const at::Tensor& x, DevicePlacement* placement) {
  Result<at::Tensor> y = MoeForward(m.model->config, m.model->weights.layers[static_cast<size_t>(m.layer)], m.layer,
                                    x, *m.model->resident_experts, nullptr, 0.0, placement);
  EXPECT_TRUE(y.ok()) << y.status().ToString();
  return y.ok() ? *y : at::Tensor();
}

// Experts cost the same on both sides: Alg. 1 alternates, so both sides get work.
scheduler::DeviceCostModel Balanced() {
  scheduler::DeviceCostModel c;
  c.has_accelerator = true;
  c.cpu_expert_us = c.gpu_expert_us = 10;
  c.cpu_token_us = c.gpu_token_us = 10;
  return c;
}

class DevicePlacementTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DevicePlacementTest, SplitRunsBothSidesAndMatchesTheAllAcceleratorOutput) {
  const Loaded m = LoadTiny(GetParam(), at::kBFloat16);
  ASSERT_GE(m.layer, 0);
  const int64_t n = 6, hidden = m.model->config.hidden_size;
  const at::Tensor x = Input(n, hidden, at::kBFloat16);
  const at::Tensor all_device = RunBlock(m, x, nullptr);
  ASSERT_TRUE(all_device.defined());

  DevicePlacement split{Balanced(), {}};
  const at::Tensor y = RunBlock(m, x, &split);
  ASSERT_TRUE(y.defined());
  EXPECT_EQ(split.stats.layers, 1);
  EXPECT_GT(split.stats.cpu_experts, 0);
  EXPECT_GT(split.stats.gpu_experts, 0);
  EXPECT_LE(split.stats.cpu_experts + split.stats.gpu_experts, n * m.model->config.num_experts_per_tok);
  EXPECT_GT(split.stats.estimated_all_gpu_us, split.stats.estimated_us);  // balancing halves the time
  EXPECT_EQ(y.scalar_type(), at::kBFloat16);
  // CPU experts compute in float32, the stand-in accelerator in BF16: equal up to BF16 rounding.
  const double scale = all_device.abs().max().item<double>();
  ASSERT_GT(scale, 0.0);
  EXPECT_LE((y.to(at::kFloat) - all_device.to(at::kFloat)).abs().max().item<double>(), 0.03 * scale);

  // The same split every time (deterministic): bit-identical outputs.
  DevicePlacement again{Balanced(), {}};
  EXPECT_TRUE(at::equal(RunBlock(m, x, &again), y));
}

TEST_P(DevicePlacementTest, ExtremeCostsPutEveryExpertOnOneSide) {
  const Loaded m = LoadTiny(GetParam(), at::kBFloat16);
  ASSERT_GE(m.layer, 0);
  const at::Tensor x = Input(4, m.model->config.hidden_size, at::kBFloat16);
  const at::Tensor all_device = RunBlock(m, x, nullptr);

  scheduler::DeviceCostModel slow_cpu = Balanced();
  slow_cpu.cpu_expert_us = 1e9;  // every expert to the accelerator: exactly the unassigned path
  DevicePlacement gpu_only{slow_cpu, {}};
  EXPECT_TRUE(at::equal(RunBlock(m, x, &gpu_only), all_device));
  EXPECT_EQ(gpu_only.stats.cpu_experts, 0);
  EXPECT_GT(gpu_only.stats.gpu_experts, 0);

  scheduler::DeviceCostModel no_accelerator = Balanced();
  no_accelerator.has_accelerator = false;  // every expert on the CPU kernels
  DevicePlacement cpu_only{no_accelerator, {}};
  const at::Tensor y = RunBlock(m, x, &cpu_only);
  EXPECT_EQ(cpu_only.stats.gpu_experts, 0);
  EXPECT_EQ(cpu_only.stats.cpu_experts, gpu_only.stats.gpu_experts);
  const double scale = all_device.abs().max().item<double>();
  EXPECT_LE((y.to(at::kFloat) - all_device.to(at::kFloat)).abs().max().item<double>(), 0.03 * scale);
  EXPECT_FALSE(at::equal(y, all_device)) << "the CPU experts should have computed in float32";
}

INSTANTIATE_TEST_SUITE_P(Archs, DevicePlacementTest, ::testing::Values("qwen2_moe", "mixtral", "deepseek_v2"));

TEST(DevicePlacement, TheFloat32CpuPathHasNoAcceleratorAndIgnoresIt) {
  const Loaded m = LoadTiny("qwen2_moe", at::kFloat);
  ASSERT_GE(m.layer, 0);
  const at::Tensor x = Input(5, m.model->config.hidden_size, at::kFloat);
  const at::Tensor plain = RunBlock(m, x, nullptr);
  DevicePlacement placement{Balanced(), {}};
  EXPECT_TRUE(at::equal(RunBlock(m, x, &placement), plain));
  EXPECT_EQ(placement.stats.layers, 0);
}

TEST(ProfileExpertDevices, MeasuresTheCpuAndNoAcceleratorOnTheCpu) {
  const Loaded m = LoadTiny("qwen2_moe", at::kFloat);
  Result<scheduler::DeviceCostModel> c = ProfileExpertDevices(m.model->config, at::kCPU, at::kFloat);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->has_accelerator);
  EXPECT_GE(c->cpu_expert_us, 0.0);
  EXPECT_GE(c->cpu_token_us, 0.0);
  EXPECT_GT(c->CpuUs(16), 0.0);
  EXPECT_EQ(c->transfer_us, 0.0);

  DeviceProfileOptions bad;
  bad.small_tokens = 4;
  bad.large_tokens = 4;
  Result<scheduler::DeviceCostModel> refused = ProfileExpertDevices(m.model->config, at::kCPU, at::kFloat, bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
}

// generate on the CPU with --device-assignment greedy: nothing to assign, the same logits.
TEST(GeneratorDeviceAssignment, DegeneratesOnTheCpuWithTheSameLogits) {
  GeneratorOptions options;
  options.model_dir = testing::TinyModelDir("mixtral");
  options.n_threads = 1;
  Result<std::unique_ptr<Generator>> plain = Generator::Create(options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  options.device_assignment = scheduler::DeviceAssignmentMode::kGreedy;
  Result<std::unique_ptr<Generator>> greedy = Generator::Create(options);
  ASSERT_TRUE(greedy.ok()) << greedy.status().ToString();
  const std::vector<std::vector<int32_t>> chunks = {{1, 5, 9, 3}, {7}, {2}};
  Result<std::vector<float>> a = (*plain)->ForwardChunks(chunks);
  Result<std::vector<float>> b = (*greedy)->ForwardChunks(chunks);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_FALSE((*greedy)->device_cost().has_accelerator);
  EXPECT_EQ((*greedy)->device_assignment_stats().layers, 0);
}

}  // namespace
}  // namespace zipmoe::executor
