// DALI's residual vectors for residual-based prefetching (dali.txt §4.2, Eq. 10-11), and the file
// that stores them next to the compressed directory's profile.json.
//
// For every MoE layer l that has a later MoE layer n (the next one), res_vec(l) = 1/N Σ_i (x_i(n) −
// x_i(l)), where x_i(l) is token i's router (gate) input at layer l (after post_attention_layernorm)
// and N the calibration tokens. At run time the next layer's router applied to x(l) + res_vec(l)
// predicts the experts layer n will select (PrefetchMode::kResidual). The last MoE layer has none.
//
// File: prefetch_residuals.safetensors, one F32 tensor "layers.<l>.prefetch_residual" of shape
// [hidden] per such layer, metadata {"format": "pt", "calibration_tokens": N, "calibration_prompts":
// P, "source": what the prompts were}.
//
// Torch-free; pure functions (thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe::executor {

using ::zipmoe::kPrefetchResidualsFileName;  // common/checkpoint/manifest.h

struct PrefetchResiduals {
  int64_t hidden = 0;
  std::map<int32_t, std::vector<float>> by_layer;  // MoE layer l -> res_vec(l) [hidden]
  int64_t calibration_tokens = 0;
  int64_t calibration_prompts = 0;
  std::string source;
};

// Writes `residuals` atomically. Errors: kInvalidArgument (a vector whose size is not `hidden`, no
// layer), kIoError.
Status WritePrefetchResiduals(const std::string& path, const PrefetchResiduals& residuals);

// Reads and checks the file against the model: every tensor named "layers.<l>.prefetch_residual",
// F32 [hidden], l in [0, n_layers). Errors (naming the path and the tensor): kNotFound (no file:
// the message says how to calibrate), kCorruption (damaged safetensors), kInvalidArgument (other
// names, dtypes or shapes; no tensor).
Result<PrefetchResiduals> ReadPrefetchResiduals(const std::string& path, int64_t hidden, int64_t n_layers);

}  // namespace zipmoe::executor
