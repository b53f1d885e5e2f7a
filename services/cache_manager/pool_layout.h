// Cache pools and the byte layout of one expert inside a pool slot (ZipMoE §3.2 compression states,
// §3.4 pools F ≺ C ≺ S ≺ E).
//
// A slot holds one *expert* (all its routed tensors: gate, up, down; or up, down for a gate-less
// expert such as switch_transformers' wi/wo, whose absent gate takes no bytes) in one of four forms:
//   F: the full tensors, in the model's expert dtype (BF16, F16 or F32; one dtype per model)  [F part]
//   C: E-chunks then SM-chunks              [E part | SM part]
//   S: SM-chunks                            [SM part]
//   E: E-chunks                             [E part]
// Inside a part every chunk / tensor starts on a 4 KiB boundary and owns its size rounded up to
// 4 KiB, matching experts.bin (docs/format.md), so the storage service may read a chunk with O_DIRECT
// straight into the slot (length = read_bytes). Parts are ordered by projection (gate, up, down),
// E-chunks by shard. A pool's slot size is the largest such part sum over all experts of the model
// (E-chunk sizes differ per expert), so every expert fits every slot of its pool.
//
// Value types; ModelLayout is immutable after FromManifest and safe to share across threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/compression_state.h"
#include "common/checkpoint/manifest.h"
#include "common/status.h"
#include "services/cache_manager/pool.h"

namespace zipmoe::cache_manager {

// Pool, kPoolCount, kPoolOrder, PoolIndex: services/cache_manager/pool.h (the one numbering).
char PoolLetter(Pool p);                    // 'F', 'C', 'S', 'E'
CompressionState PoolState(Pool p);         // the state of an expert cached in `p`
inline bool PoolHoldsE(Pool p) { return p == Pool::kC || p == Pool::kE; }
inline bool PoolHoldsSm(Pool p) { return p == Pool::kC || p == Pool::kS; }
// The F pool holds full tensors in the expert dtype (ModelLayout::dtype); "Bf16" from when every
// served expert was BF16.
inline bool PoolHoldsBf16(Pool p) { return p == Pool::kF; }

inline constexpr int kProjCount = 3;  // gate, up, down (ExpertProj order)

// One chunk or tensor inside a slot part.
struct SlotExtent {
  uint64_t offset = 0;      // from the start of its part, multiple of 4 KiB
  uint64_t bytes = 0;       // payload bytes (stored bytes of a chunk; DTypeBytes(dtype, numel) for a full tensor)
  uint64_t read_bytes = 0;  // bytes reserved: `bytes` rounded up to 4 KiB (an O_DIRECT read length)
};

struct TensorSlotLayout {
  bool present = false;              // false: the expert has no tensor for this projection
  int64_t numel = 0;
  std::vector<SlotExtent> e_chunks;  // [K], in the E part
  SlotExtent sm;                     // in the SM part: SmPlaneBytes(dtype, numel) payload bytes
  // In the F part: the full tensor, DTypeBytes(dtype, numel) bytes (the name is from when every
  // served expert was BF16; F32, F16, F8_E4M3 and MXFP4 experts keep their own dtype here).
  SlotExtent bf16;
  // The decoded exponent plane in a staging slot ([EPlaneBytes(dtype, numel)] uint8: one byte per value,
  // then MXFP4's n/32 block scales), from StagingLayout::e_plane_offset: bf16.offset / DTypeSize(dtype)
  // for the dtypes of a
  // byte or more per value; for MXFP4 (under a byte per value) the planes of the expert's tensors one
  // after the other, 4 KiB aligned. The planes of an expert's tensors never overlap.
  SlotExtent e_plane;
};

struct ExpertSlotLayout {
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  std::array<TensorSlotLayout, kProjCount> tensors;  // by ExpertProj
  uint64_t e_part_bytes = 0;   // Σ E-chunk read_bytes
  uint64_t sm_part_bytes = 0;  // Σ SM read_bytes
  uint64_t f_part_bytes = 0;   // Σ full-tensor (bf16) read_bytes

  // Bytes this expert uses in a slot of `p`; where the SM part starts in such a slot (the E part
  // always starts at 0).
  uint64_t PoolBytes(Pool p) const;
  uint64_t SmPartOffset(Pool p) const { return p == Pool::kC ? e_part_bytes : 0; }
};

// Capacities of the cache pools, in experts, per decoder layer (ZipMoE §3.4: the planner outputs S_p
// per MoE layer). capacity[layer_id][PoolIndex(p)]; layers without routed experts have 0 everywhere.
struct CachePlan {
  std::vector<std::array<int32_t, kPoolCount>> capacity;
  // The same capacities for every layer in [0, n_layers).
  static CachePlan Uniform(int32_t n_layers, const std::array<int32_t, kPoolCount>& per_layer);
};

class ModelLayout {
 public:
  // Layouts of every (layer, expert) in `manifest`; every expert tensor must have the dtype of the
  // first (BF16, F16 or F32: slot sizes are per model). Errors: kInvalidArgument naming the tensor
  // when a record is inconsistent (a dtype without E/SM split, a dtype other than the first tensor's
  // (naming both), negative ids, no SM-chunk, a projection twice), or naming the expert when it lacks
  // up or down, or has a gate where the others have none (or the reverse).
  static Result<ModelLayout> FromManifest(const Manifest& manifest);

  // The experts' dtype (BF16 for a manifest without experts).
  DType dtype() const { return dtype_; }
  // Bytes a staging slot reserves for one expert's decoded exponent planes ([numel] uint8 per tensor,
  // at each tensor's e_plane.offset): max over experts of the end of their last plane, 4 KiB aligned.
  uint64_t e_plane_slot_bytes() const { return e_plane_slot_bytes_; }
  int32_t n_layers() const { return n_layers_; }    // max(manifest n_layers, max layer_id + 1)
  int32_t n_experts() const { return n_experts_; }  // max(manifest n_experts, max expert_id + 1)
  // Whether the experts have a gate projection (gate/up/down); false: up/down only (tensors[kGate]
  // absent in every ExpertSlotLayout). True for a manifest without experts.
  bool gated() const { return gated_; }
  bool LayerHasExperts(int32_t layer_id) const;
  // Experts of `layer_id` with tensors in the manifest (0 outside [0, n_layers)).
  int32_t ExpertsInLayer(int32_t layer_id) const;
  // nullptr if (layer, expert) has no tensors in the manifest.
  const ExpertSlotLayout* Find(int32_t layer_id, int32_t expert_id) const;
  // Slot size of pool `p`: max over experts of PoolBytes(p) (a multiple of 4 KiB). This is the
  // per-expert cost the arena charges; give it to the planner as its bytes per expert.
  uint64_t slot_bytes(Pool p) const { return slot_bytes_[PoolIndex(p)]; }
  // Arena bytes `plan` needs: Σ_layers Σ_p capacity · slot_bytes(p).
  uint64_t PlanBytes(const CachePlan& plan) const;

 private:
  DType dtype_ = DType::kBF16;
  int32_t n_layers_ = 0;
  int32_t n_experts_ = 0;
  bool gated_ = true;
  std::vector<ExpertSlotLayout> experts_;  // [n_layers * n_experts], layer_id -1 when absent
  std::vector<uint8_t> layer_has_experts_;
  std::array<uint64_t, kPoolCount> slot_bytes_{};
  uint64_t e_plane_slot_bytes_ = 0;
};

}  // namespace zipmoe::cache_manager
