// Warm-up profiling of DALI's cost model (dali.txt §4.1: "all hardware-specific timing values ...
// can be obtained through warm-up profiling before execution"): how long one routed expert of this
// model takes on the CPU (ExpertForward in float32 with the BF16 kernels, the path CPU-assigned
// experts take) and on an accelerator (host -> device copy of its three BF16 matrices, and the
// matmuls in the compute dtype), each at two token counts, fitted as fixed + per-token time
// (scheduler::DeviceCostModel).
//
// The expert is synthetic (deterministic pseudo-random BF16 weights of the config's
// [moe_intermediate_size, hidden_size] shapes), so profiling touches neither the cache nor storage.
// Internal to services/executor; blocking (tens of milliseconds on the tiny presets, about a second
// on real ones); callable from any thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "services/scheduler/device_assignment.h"

namespace zipmoe::executor {

struct DeviceProfileOptions {
  int32_t small_tokens = 1;   // the two workloads the line is fitted through
  int32_t large_tokens = 16;
  int32_t repeats = 5;        // timed runs per point (after one warm-up); the median is kept
};

// The cost model for experts of `config` on the CPU and on `device` (compute dtype `dtype`).
// A CPU device has no accelerator: has_accelerator is false and only the CPU half is measured.
// Slopes are clamped at 0 (noise can make the larger workload look faster).
// Errors: kInvalidArgument (token counts not 1 <= small < large, repeats < 1, an expert shape <= 0);
// kInternal (torch, e.g. the device is unavailable).
Result<scheduler::DeviceCostModel> ProfileExpertDevices(const ModelConfig& config, at::Device device,
                                                        at::ScalarType dtype,
                                                        const DeviceProfileOptions& options = {});

}  // namespace zipmoe::executor
