// Cost side of the cache planner: the per-layer makespan estimate of ZipMoE Appendix C Alg. 3, the
// per-expert byte cost of each pool, and the model facts the planner needs, read from a compressed
// directory's manifest (docs/planner.md).
//
// Plain value types and pure functions; callable from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "common/cost_model.h"
#include "common/checkpoint/manifest.h"
#include "common/status.h"
#include "services/cache_manager/plan_probability.h"

namespace zipmoe::cache_manager {

// Offline-profiled delays (µs) and execution configuration of one sparse layer (Alg. 3 inputs): the
// one cost model of common/cost_model.h.
using zipmoe::CostModel;

// Errors: kInvalidArgument naming the first negative/non-finite delay or non-positive count.
Status ValidateCostModel(const CostModel& cost);

// Makespan estimate (µs) of one sparse layer for hit pattern `hits` = (h_F, h_C, h_S, h_E)
// (Alg. 3, extended by a GPU term that vanishes when recovery_us = expert_compute_us = 0):
//   n_SM = n (k - h_F - h_C - h_S)          SM-chunks to read (Miss and E-pool experts)
//   n_E  = n K (k - h_F - h_C - h_E)        E-chunks to read (Miss and S-pool experts)
//   n_D  = n K (k - h_F)                    E-chunks to decode (everything but F hits)
//   T_io = n_SM u + n_E v;   T_dec = (n_E v + n_D c) / L
//   alg3 = max(T_io, T_dec)                 (the paper's estimate, "excluding token execution")
//   tail = n·recovery + p if k - h_F > 0 else 0   (the last reconstructed expert still has to be
//          recovered and run after its chunks are ready)
//   gpu  = k p + n (k - h_F) recovery       (everything the GPU stream does, serially)
//   makespan = max(alg3 + tail, gpu)
// Requires 0 <= h_p and Σ h_p <= top_k (ZM_CHECKed).
double EstimateMakespanUs(int top_k, const std::array<int32_t, kPoolCount>& hits, const CostModel& cost);

// Bytes one expert occupies in each pool (all `tensors_per_expert` tensors):
//   F: 2·numel (BF16), C: E stored bytes + SM bytes, S: SM bytes (= numel), E: E stored bytes.
struct PoolCosts {
  std::array<double, kPoolCount> bytes_per_expert{};  // indexed by kPoolF..kPoolE
};

// Facts about a compressed model that the planner needs (one MoE layer is representative: the
// planner uses the mean over MoE layers).
struct ModelPlanInputs {
  std::string arch;
  int32_t n_experts = 0;           // N, routed experts per MoE layer
  int32_t top_k = 0;               // k, num_experts_per_tok from config.json
  int32_t n_moe_layers = 0;        // layers that have routed-expert tensors in the manifest
  int32_t n_shards = 1;            // K
  int32_t tensors_per_expert = 0;  // n (3 for every supported architecture)
  PoolCosts pool_costs;            // mean stored bytes per expert over all experts (the paper's)
  PoolCosts slot_costs;            // what the cache arena charges per expert (pool_layout.h
                                   // ModelLayout::slot_bytes): every chunk / BF16 tensor rounded up
                                   // to 4 KiB, max over experts
  double sm_chunk_bytes = 0;       // mean SM-chunk bytes (one tensor)
  double e_chunk_stored_bytes = 0; // mean E-chunk stored bytes
  double e_chunk_raw_bytes = 0;    // mean E-chunk raw bytes (exponent values)
};

// Derives ModelPlanInputs from a manifest (top_k from its verbatim config.json).
// Errors: kInvalidArgument (no expert tensors, config.json unparsable or without
// num_experts_per_tok, experts with differing tensor counts), naming `source` (the directory).
Result<ModelPlanInputs> ModelPlanInputsFromManifest(const Manifest& manifest, const std::string& source);

// Default storage/decoder speeds used when no profile exists (docs/planner.md "Defaults"):
// reads at kDefaultReadBytesPerUs with kDefaultReadLatencyUs per request, decode at
// kDefaultDecodeBytesPerUs raw bytes per µs per worker.
inline constexpr double kDefaultReadBytesPerUs = 2000.0;    // 2 GB/s NVMe (the paper's edge SSD)
inline constexpr double kDefaultReadLatencyUs = 20.0;       // per read request
inline constexpr double kDefaultDecodeBytesPerUs = 1000.0;  // 1 GB/s of exponents per worker
CostModel DefaultCostModel(const ModelPlanInputs& model, int32_t n_workers);

}  // namespace zipmoe::cache_manager
