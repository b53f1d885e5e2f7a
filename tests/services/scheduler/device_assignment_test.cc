// DALI's Greedy Assignment (dali.txt §4.1, Algorithm 1) and the exact 0-1 optimum it approximates.
#include "services/scheduler/device_assignment.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace zipmoe::scheduler {
namespace {

using D = ExpertDevice;

// CPU: 100 µs + 50 µs/token; GPU: 10 µs + 1 µs/token, transfers of 200 µs.
DeviceCostModel Hybrid() {
  DeviceCostModel c;
  c.has_accelerator = true;
  c.cpu_expert_us = 100;
  c.cpu_token_us = 50;
  c.gpu_expert_us = 10;
  c.gpu_token_us = 1;
  c.transfer_us = 200;
  return c;
}

std::vector<AssignmentItem> Tokens(const std::vector<int32_t>& w) {
  std::vector<AssignmentItem> items;
  for (int32_t t : w) items.push_back({t, false, 1000});
  return items;
}

TEST(DeviceCostModel, EquationsFourToSix) {
  const DeviceCostModel c = Hybrid();
  EXPECT_DOUBLE_EQ(c.CpuUs(0), 0.0);
  EXPECT_DOUBLE_EQ(c.CpuUs(3), 250.0);
  EXPECT_DOUBLE_EQ(c.GpuUs(0, false), 0.0);             // Trans(0) = 0 and nothing to compute
  EXPECT_DOUBLE_EQ(c.GpuUs(3, false), 200.0);           // max(200 transfer, 13 compute)
  EXPECT_DOUBLE_EQ(c.GpuUs(3, true), 13.0);             // resident: compute only
  EXPECT_DOUBLE_EQ(c.GpuUs(500, false), 510.0);         // compute-bound
  DeviceCostModel cpu_only = c;
  cpu_only.has_accelerator = false;
  EXPECT_TRUE(std::isinf(cpu_only.GpuUs(1, true)));
}

// Hand-run of Algorithm 1 on w = [1, 0, 8, 2]:
//   t_cpu = [150, 0, 500, 200], t_gpu = [200, 0, 200, 200], |diff| = [50, 0, 300, 0]
//   order: 2 (300), 0 (50), 1 (0), 3 (0)
//   2: 0+200 <= 0+500 -> GPU (T_gpu 200); 0: 200+200 <= 0+150? no -> CPU (T_cpu 150);
//   1: not activated; 3: 200+200 <= 150+200 ? no -> CPU (T_cpu 350).
TEST(GreedyAssign, HandRunOfAlgorithmOne) {
  const DeviceAssignment a = GreedyAssign(Tokens({1, 0, 8, 2}), Hybrid());
  EXPECT_EQ(a.device, (std::vector<D>{D::kCpu, D::kNone, D::kGpu, D::kCpu}));
  EXPECT_DOUBLE_EQ(a.gpu_us, 200.0);
  EXPECT_DOUBLE_EQ(a.cpu_us, 350.0);
  EXPECT_EQ(a.n_cpu, 2);
  EXPECT_EQ(a.n_gpu, 1);
  EXPECT_DOUBLE_EQ(a.makespan_us(), 350.0);
}

TEST(GreedyAssign, ResidentExpertsSkipTheTransfer) {
  std::vector<AssignmentItem> items = Tokens({1, 1});
  items[1].resident = true;  // t_gpu 11 instead of 200: its gap (139) beats the other's (50)
  const DeviceAssignment a = GreedyAssign(items, Hybrid());
  EXPECT_EQ(a.device, (std::vector<D>{D::kCpu, D::kGpu}));
  EXPECT_DOUBLE_EQ(a.gpu_us, 11.0);
  EXPECT_DOUBLE_EQ(a.cpu_us, 150.0);
}

TEST(GreedyAssign, WithoutAnAcceleratorEveryActivatedExpertRunsOnTheCpu) {
  DeviceCostModel c = Hybrid();
  c.has_accelerator = false;
  const DeviceAssignment a = GreedyAssign(Tokens({3, 0, 1, 7}), c);
  EXPECT_EQ(a.device, (std::vector<D>{D::kCpu, D::kNone, D::kCpu, D::kCpu}));
  EXPECT_DOUBLE_EQ(a.cpu_us, 250.0 + 150.0 + 450.0);
  EXPECT_DOUBLE_EQ(a.gpu_us, 0.0);
  EXPECT_EQ(a.n_gpu, 0);
}

TEST(GreedyAssign, DeviceMemoryBoundsTheGpuShareEquationNine) {
  // Three heavy experts (t_gpu 510 vs t_cpu 25100): all would go to the GPU, but only two fit.
  std::vector<AssignmentItem> items = Tokens({500, 500, 500});
  const DeviceAssignment unbounded = GreedyAssign(items, Hybrid());
  EXPECT_EQ(unbounded.n_gpu, 3);
  const DeviceAssignment bounded = GreedyAssign(items, Hybrid(), 2000);
  EXPECT_EQ(bounded.device, (std::vector<D>{D::kGpu, D::kGpu, D::kCpu}));
  items[2].resident = true;  // already there: takes no new bytes
  EXPECT_EQ(GreedyAssign(items, Hybrid(), 2000).n_gpu, 3);
}

TEST(GreedyAssign, AllZeroCostsStillAssignEveryActivatedExpert) {
  DeviceCostModel c;
  c.has_accelerator = true;
  const DeviceAssignment a = GreedyAssign(Tokens({1, 2, 0}), c);
  EXPECT_EQ(a.device, (std::vector<D>{D::kGpu, D::kGpu, D::kNone}));  // line 12: 0 <= 0
}

TEST(OptimalAssign, FindsTheBalancedSplitTheGreedyMisses) {
  // No transfers, equal speeds: t = 10·w on both. w = [3, 3, 2, 2, 2]: optimum 60 | 60, while the
  // greedy (all gaps 0, index order) places 3→G, 3→C, 2→G, 2→C, 2→G: 70 | 50.
  DeviceCostModel c;
  c.has_accelerator = true;
  c.cpu_token_us = 10;
  c.gpu_token_us = 10;
  const std::vector<AssignmentItem> items = Tokens({3, 3, 2, 2, 2});
  Result<DeviceAssignment> opt = OptimalAssign(items, c);
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  EXPECT_DOUBLE_EQ(opt->makespan_us(), 60.0);
  EXPECT_DOUBLE_EQ(opt->cpu_us + opt->gpu_us, 120.0);
  const DeviceAssignment greedy = GreedyAssign(items, c);
  EXPECT_DOUBLE_EQ(greedy.makespan_us(), 70.0);
  EXPECT_EQ(greedy.device, (std::vector<D>{D::kGpu, D::kCpu, D::kGpu, D::kCpu, D::kGpu}));
}

TEST(OptimalAssign, RefusesTooManyExperts) {
  std::vector<int32_t> w(kMaxOptimalExperts + 1, 1);
  Result<DeviceAssignment> r = OptimalAssign(Tokens(w), Hybrid());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("23 activated experts"), std::string::npos) << r.status().ToString();
}

// Random layers (8..16 experts, some not activated, random residency and costs): the greedy plan is
// feasible, never better than the optimum and accounts its totals exactly; without a memory bound it
// stays within twice the optimum (earliest-completion list scheduling on m unrelated machines is an
// m-approximation, Ibarra & Kim 1977; here m = 2).
TEST(GreedyAssign, FeasibleAndNearTheOptimumOnRandomLayers) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    DeviceCostModel c;
    c.has_accelerator = true;
    c.cpu_expert_us = std::uniform_real_distribution<double>(10, 200)(rng);
    c.cpu_token_us = std::uniform_real_distribution<double>(5, 100)(rng);
    c.gpu_expert_us = std::uniform_real_distribution<double>(5, 50)(rng);
    c.gpu_token_us = std::uniform_real_distribution<double>(0.1, 5)(rng);
    c.transfer_us = std::uniform_real_distribution<double>(0, 800)(rng);
    const int n = std::uniform_int_distribution<int>(8, 16)(rng);
    std::vector<AssignmentItem> items(static_cast<size_t>(n));
    for (AssignmentItem& it : items) {
      it.tokens = std::uniform_int_distribution<int>(0, 6)(rng) < 2 ? 0 : std::uniform_int_distribution<int>(1, 9)(rng);
      it.resident = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
      it.bytes = 100;
    }
    const uint64_t free_bytes = std::uniform_int_distribution<int>(0, 1)(rng) ? kUnlimitedDeviceBytes : 300;
    const DeviceAssignment g = GreedyAssign(items, c, free_bytes);
    Result<DeviceAssignment> o = OptimalAssign(items, c, free_bytes);
    ASSERT_TRUE(o.ok());
    double cpu = 0, gpu = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      ASSERT_EQ(g.device[i] == D::kNone, items[i].tokens == 0) << "round " << round << " expert " << i;
      if (g.device[i] == D::kCpu) cpu += c.CpuUs(items[i].tokens);
      if (g.device[i] == D::kGpu) {
        gpu += c.GpuUs(items[i].tokens, items[i].resident);
        bytes += items[i].resident ? 0 : items[i].bytes;
      }
    }
    EXPECT_NEAR(g.cpu_us, cpu, 1e-9);
    EXPECT_NEAR(g.gpu_us, gpu, 1e-9);
    EXPECT_LE(bytes, free_bytes);
    EXPECT_GE(g.makespan_us() + 1e-9, o->makespan_us()) << "round " << round;
    if (free_bytes == kUnlimitedDeviceBytes) {
      EXPECT_LE(g.makespan_us(), 2 * o->makespan_us() + 1e-9) << "round " << round;
    }
  }
}

TEST(DeviceAssignmentMode, ParsesItsNamesAndNamesBadOnes) {
  EXPECT_EQ(*ParseDeviceAssignmentMode("greedy"), DeviceAssignmentMode::kGreedy);
  EXPECT_EQ(*ParseDeviceAssignmentMode("none"), DeviceAssignmentMode::kNone);
  Result<DeviceAssignmentMode> bad = ParseDeviceAssignmentMode("optimal");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'optimal'"), std::string::npos);
  EXPECT_STREQ(DeviceAssignmentModeName(DeviceAssignmentMode::kGreedy), "greedy");
  EXPECT_STREQ(ExpertDeviceName(D::kGpu), "gpu");
}

}  // namespace
}  // namespace zipmoe::scheduler
