// DALI's CPU/GPU expert assignment (dali.txt §4.1): which activated experts of one MoE layer run on
// the CPU and which on the accelerator, so that the slower of the two finishes first (Eq. 3,
// min max(T_gpu, T_cpu)). GreedyAssign is Algorithm 1 ("Greedy Assignment Strategy"); OptimalAssign
// solves the 0-1 problem exactly by enumeration for small layers (the paper's "Opt_plan"), the
// reference the tests and benchmarks compare the greedy plan against.
//
// Cost model (Eq. 4-6): an expert with workload w (tokens routed to it) costs
//   t_cpu(w) = cpu_expert_us + cpu_token_us * w                          on the CPU,
//   t_gpu(w) = max(Trans(w), gpu_expert_us + gpu_token_us * w)           on the accelerator,
// where Trans(w) = transfer_us (host -> device copy of its weights) unless the expert is already on
// the device or w = 0, and an expert with w = 0 costs nothing anywhere (it is not assigned: Alg. 1
// lines 9-10). Times are microseconds; the executor measures them by warm-up profiling
// (services/executor/device_profile.h), as the paper does.
//
// With no accelerator (cost.has_accelerator false, every CPU-only machine) the problem degenerates:
// every activated expert goes to the CPU.
//
// Pure functions; callable from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/status.h"

namespace zipmoe::scheduler {

// Per-expert timing of one MoE layer's experts on the two processors (Eq. 4-6), microseconds.
struct DeviceCostModel {
  bool has_accelerator = false;  // false: CPU only, every expert is assigned to the CPU
  double cpu_expert_us = 0;      // t_cpu's fixed part: one expert's three matmuls over 0 tokens
  double cpu_token_us = 0;       // t_cpu's part per token routed to the expert
  double gpu_expert_us = 0;      // compute_expert's fixed part on the accelerator
  double gpu_token_us = 0;       // compute_expert's part per token
  double transfer_us = 0;        // trans_time: one expert's weights host -> accelerator

  // t_cpu(w); 0 for w <= 0.
  double CpuUs(int32_t tokens) const;
  // t_gpu(w) = max(Trans(w), compute_expert(w)); Trans is 0 when `resident`; 0 for w <= 0;
  // +infinity without an accelerator.
  double GpuUs(int32_t tokens, bool resident) const;
};

// One activated (or not) expert of the layer.
struct AssignmentItem {
  int32_t tokens = 0;         // w_i: tokens routed to the expert in this step; 0 = not activated
  bool resident = false;      // its weights already sit on the accelerator (Trans = 0, dali.txt §4.3)
  uint64_t bytes = 0;         // size(E_i), for the accelerator memory constraint (Eq. 9)
};

enum class ExpertDevice : uint8_t { kNone = 0, kCpu = 1, kGpu = 2 };
const char* ExpertDeviceName(ExpertDevice device);  // "none", "cpu", "gpu"

// C and G of Alg. 1 as one vector (kNone: not activated), with the totals of Eq. 4 and 5.
struct DeviceAssignment {
  std::vector<ExpertDevice> device;  // one per AssignmentItem, same order
  double cpu_us = 0;                 // T_cpu
  double gpu_us = 0;                 // T_gpu
  int32_t n_cpu = 0;
  int32_t n_gpu = 0;
  double makespan_us() const { return cpu_us > gpu_us ? cpu_us : gpu_us; }  // Eq. 3's objective
};

// Running totals of the assignments of a run (the executor's, per MoE layer on an accelerator): how
// many activated experts went to the CPU and to the accelerator, and the cost model's estimates (µs)
// of the layers' expert time with those splits (Σ max(T_cpu, T_gpu), Eq. 3) and with every expert on
// the accelerator (Σ t_gpu, i.e. without assignment).
struct DeviceAssignmentStats {
  int64_t layers = 0;
  int64_t cpu_experts = 0;
  int64_t gpu_experts = 0;
  double estimated_us = 0;
  double estimated_all_gpu_us = 0;
};

inline constexpr uint64_t kUnlimitedDeviceBytes = std::numeric_limits<uint64_t>::max();

// Algorithm 1: experts in descending |t_gpu - t_cpu| (ties: lower index first), each to the GPU if
// T_gpu + t_gpu <= T_cpu + t_cpu (line 12) and its bytes still fit in `device_free_bytes` (Eq. 9;
// resident experts take no new bytes), else to the CPU. O(N log N).
DeviceAssignment GreedyAssign(const std::vector<AssignmentItem>& items, const DeviceCostModel& cost,
                              uint64_t device_free_bytes = kUnlimitedDeviceBytes);

// The exact minimum of Eq. 3 under Eq. 7-9 by enumerating every CPU/GPU split of the activated
// experts (ties: the fewest experts on the GPU, then the lexicographically smallest split).
// Errors: kInvalidArgument when more than kMaxOptimalExperts experts are activated (2^N splits).
inline constexpr int32_t kMaxOptimalExperts = 22;
Result<DeviceAssignment> OptimalAssign(const std::vector<AssignmentItem>& items, const DeviceCostModel& cost,
                                       uint64_t device_free_bytes = kUnlimitedDeviceBytes);

// "greedy" | "none" (the executor's --device-assignment values).
enum class DeviceAssignmentMode : uint8_t { kNone = 0, kGreedy = 1 };
const char* DeviceAssignmentModeName(DeviceAssignmentMode mode);
// Errors: kInvalidArgument naming the value and the accepted ones.
Result<DeviceAssignmentMode> ParseDeviceAssignmentMode(const std::string& name);

}  // namespace zipmoe::scheduler
