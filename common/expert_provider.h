// The interface between the model executor and whatever supplies routed-expert weights.
//
// The executor's MoE block (services/executor) computes the router, then for each MoE layer:
//   1. BeginLayer(routing): announces the selected experts (and tokens per expert) so a provider
//      can schedule I/O, decompression and recovery for all of them at once (ZipMoE §3.3);
//   2. NextReady() exactly routing.expert_ids.size() times: each call blocks until one of the
//      announced experts is ready and returns a lease on its BF16 weights, in whatever order they
//      become ready (a provider may deliver cache hits first);
//   3. EndLayer(layer_id) once every lease of the layer has been taken.
// The executor combines expert outputs in a fixed order (ascending expert id), so the arrival
// order never changes the numerics.
//
// This header has no torch or CUDA dependency: the runtime (cache + scheduler) implements it in
// its own library, and the executor wraps the pointers as tensors.
// Thread-safety: one executor thread drives a provider; leases may be released from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe {

// The two bit-field planes of one BF16 tensor (common/bitfield.h): e[i] the exponent byte,
// sm[i] = sign << 7 | mantissa, one byte per element each, same element order as the tensor.
struct ExpertPlanes {
  const uint8_t* e = nullptr;
  const uint8_t* sm = nullptr;
};

// Weights of one routed expert (row-major, as in the checkpoint):
//   gate: [intermediate, hidden], up: [intermediate, hidden], down: [hidden, intermediate],
// all three of element type `dtype`: BF16 bit patterns (compressed directories, the runtime), or
// F16/F32 when an HF checkpoint stores its experts that way (e.g. OLMoE's F32 release).
// A provider serving a CPU executor may instead hand out a BF16 expert unrecovered, as its E/SM
// planes (gate/up/down null, *_planes set): the executor's kernels fuse the recovery into the
// matmul (kernels/bf16_gemm.h), so no recovered copy is written and read again.
struct ExpertWeightsView {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  DType dtype = DType::kBF16;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  ExpertPlanes gate_planes, up_planes, down_planes;  // BF16 only, when gate/up/down are null
  int64_t intermediate = 0;
  int64_t hidden = 0;

  bool planes() const { return gate == nullptr; }
};

// Keeps an expert's weights resident (pinned) while alive; the destructor releases the pin.
class ExpertLease {
 public:
  virtual ~ExpertLease() = default;
  virtual const ExpertWeightsView& weights() const = 0;
};

// Which experts one MoE layer selected for the current batch of tokens.
struct LayerRouting {
  int32_t layer_id = 0;
  std::vector<int32_t> expert_ids;         // distinct, ascending
  std::vector<int32_t> tokens_per_expert;  // same length: tokens routed to each expert
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // Errors: kInvalidArgument (unknown layer/expert, a layer already begun and not ended).
  virtual Status BeginLayer(const LayerRouting& routing) = 0;
  // Errors: kInvalidArgument (no layer begun / all its experts already delivered), kCorruption or
  // kIoError from storage (naming file, tensor, chunk), kUnavailable/kDeadlineExceeded from peers.
  virtual Result<std::unique_ptr<ExpertLease>> NextReady() = 0;
  // True when the next NextReady() would return at once (its expert is already resident or
  // recovered), so the executor may take it now and compute it in one parallel region with the
  // others it holds. False means "would wait, or unknown" (the default): the executor then computes
  // each expert as it arrives. Never blocks.
  virtual bool NextIsReady() const { return false; }
  virtual Status EndLayer(int32_t layer_id) = 0;
};

}  // namespace zipmoe
