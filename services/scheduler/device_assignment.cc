#include "services/scheduler/device_assignment.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace zipmoe::scheduler {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Bytes an item takes on the device when assigned there: none if already resident.
uint64_t NewDeviceBytes(const AssignmentItem& item) { return item.resident ? 0 : item.bytes; }

void Place(DeviceAssignment& a, size_t i, ExpertDevice device, double us) {
  a.device[i] = device;
  if (device == ExpertDevice::kGpu) {
    a.gpu_us += us;
    ++a.n_gpu;
  } else {
    a.cpu_us += us;
    ++a.n_cpu;
  }
}

}  // namespace

double DeviceCostModel::CpuUs(int32_t tokens) const {
  if (tokens <= 0) return 0.0;
  return cpu_expert_us + cpu_token_us * tokens;
}

double DeviceCostModel::GpuUs(int32_t tokens, bool resident) const {
  if (tokens <= 0) return 0.0;
  if (!has_accelerator) return kInfinity;
  const double compute = gpu_expert_us + gpu_token_us * tokens;
  return std::max(resident ? 0.0 : transfer_us, compute);  // Eq. 5: transfer and compute pipelined
}

const char* ExpertDeviceName(ExpertDevice device) {
  switch (device) {
    case ExpertDevice::kCpu: return "cpu";
    case ExpertDevice::kGpu: return "gpu";
    case ExpertDevice::kNone: break;
  }
  return "none";
}

DeviceAssignment GreedyAssign(const std::vector<AssignmentItem>& items, const DeviceCostModel& cost,
                              uint64_t device_free_bytes) {
  const size_t n = items.size();
  DeviceAssignment a;
  a.device.assign(n, ExpertDevice::kNone);
  std::vector<double> t_gpu(n), t_cpu(n), gap(n);  // lines 3-4
  for (size_t i = 0; i < n; ++i) {
    t_cpu[i] = cost.CpuUs(items[i].tokens);
    t_gpu[i] = cost.GpuUs(items[i].tokens, items[i].resident);
    gap[i] = std::isinf(t_gpu[i]) ? kInfinity : std::fabs(t_gpu[i] - t_cpu[i]);
  }
  std::vector<size_t> order(n);  // line 5: descending |t_gpu - t_cpu|, ties by index
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return gap[x] > gap[y]; });
  uint64_t free_bytes = device_free_bytes;
  for (size_t i : order) {
    // Lines 9-10 skip experts whose both times are 0; here that is exactly the non-activated ones
    // (an activated expert under an all-zero cost model is still assigned, to the GPU by line 12).
    if (items[i].tokens <= 0) continue;
    const uint64_t need = NewDeviceBytes(items[i]);
    const bool fits = need <= free_bytes;
    if (fits && !std::isinf(t_gpu[i]) && a.gpu_us + t_gpu[i] <= a.cpu_us + t_cpu[i]) {  // line 12
      Place(a, i, ExpertDevice::kGpu, t_gpu[i]);
      free_bytes -= need;
    } else {
      Place(a, i, ExpertDevice::kCpu, t_cpu[i]);
    }
  }
  return a;
}

Result<DeviceAssignment> OptimalAssign(const std::vector<AssignmentItem>& items, const DeviceCostModel& cost,
                                       uint64_t device_free_bytes) {
  std::vector<size_t> active;
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].tokens > 0) active.push_back(i);
  }
  if (active.size() > static_cast<size_t>(kMaxOptimalExperts)) {
    return Status::InvalidArgument(fmt::format("OptimalAssign: {} activated experts, at most {} are enumerated",
                                               active.size(), kMaxOptimalExperts));
  }
  const uint64_t splits = uint64_t{1} << active.size();  // bit j set: active[j] on the GPU
  uint64_t best_mask = 0;
  double best_makespan = kInfinity;
  int best_gpu = 0;
  for (uint64_t mask = 0; mask < splits; ++mask) {
    double cpu = 0, gpu = 0;
    uint64_t bytes = 0;
    bool feasible = true;
    for (size_t j = 0; j < active.size() && feasible; ++j) {
      const AssignmentItem& item = items[active[j]];
      if (mask >> j & 1) {
        gpu += cost.GpuUs(item.tokens, item.resident);
        bytes += NewDeviceBytes(item);
        feasible = !std::isinf(gpu) && bytes <= device_free_bytes && bytes >= NewDeviceBytes(item);
      } else {
        cpu += cost.CpuUs(item.tokens);
      }
    }
    if (!feasible) continue;
    const double makespan = std::max(cpu, gpu);
    const int n_gpu = static_cast<int>(std::bitset<64>(mask).count());
    if (makespan < best_makespan || (makespan == best_makespan && n_gpu < best_gpu)) {
      best_makespan = makespan;
      best_mask = mask;
      best_gpu = n_gpu;
    }
  }
  DeviceAssignment a;
  a.device.assign(items.size(), ExpertDevice::kNone);
  for (size_t j = 0; j < active.size(); ++j) {
    const size_t i = active[j];
    if (best_mask >> j & 1) {
      Place(a, i, ExpertDevice::kGpu, cost.GpuUs(items[i].tokens, items[i].resident));
    } else {
      Place(a, i, ExpertDevice::kCpu, cost.CpuUs(items[i].tokens));
    }
  }
  return a;
}

const char* DeviceAssignmentModeName(DeviceAssignmentMode mode) {
  return mode == DeviceAssignmentMode::kGreedy ? "greedy" : "none";
}

Result<DeviceAssignmentMode> ParseDeviceAssignmentMode(const std::string& name) {
  if (name == "none") return DeviceAssignmentMode::kNone;
  if (name == "greedy") return DeviceAssignmentMode::kGreedy;
  return Status::InvalidArgument(
      fmt::format("--device-assignment: unknown value '{}' (expected none or greedy)", name));
}

}  // namespace zipmoe::scheduler
