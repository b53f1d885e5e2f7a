#include "services/cache_manager/pool_layout.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/bitfield.h"
#include "common/ipc/slot_arena.h"

namespace zipmoe::cache_manager {

char PoolLetter(Pool p) {
  switch (p) {
    case Pool::kF: return 'F';
    case Pool::kC: return 'C';
    case Pool::kS: return 'S';
    case Pool::kE: return 'E';
  }
  return '?';
}

CompressionState PoolState(Pool p) {
  switch (p) {
    case Pool::kF: return CompressionState::kF;
    case Pool::kC: return CompressionState::kC;
    case Pool::kS: return CompressionState::kS;
    case Pool::kE: return CompressionState::kE;
  }
  return CompressionState::kMiss;
}

uint64_t ExpertSlotLayout::PoolBytes(Pool p) const {
  switch (p) {
    case Pool::kF: return f_part_bytes;
    case Pool::kC: return e_part_bytes + sm_part_bytes;
    case Pool::kS: return sm_part_bytes;
    case Pool::kE: return e_part_bytes;
  }
  return 0;
}

CachePlan CachePlan::Uniform(int32_t n_layers, const std::array<int32_t, kPoolCount>& per_layer) {
  CachePlan plan;
  plan.capacity.assign(static_cast<size_t>(std::max(n_layers, 0)), per_layer);
  return plan;
}

Result<ModelLayout> ModelLayout::FromManifest(const Manifest& manifest) {
  ModelLayout layout;
  layout.n_layers_ = std::max(manifest.n_layers, 0);
  layout.n_experts_ = std::max(manifest.n_experts, 0);
  for (const ExpertTensorInfo& t : manifest.expert_tensors) {
    if (t.layer_id < 0 || t.expert_id < 0) {
      return Status::InvalidArgument(
          fmt::format("manifest: tensor '{}': layer {} / expert {} is negative", t.name, t.layer_id, t.expert_id));
    }
    layout.n_layers_ = std::max(layout.n_layers_, t.layer_id + 1);
    layout.n_experts_ = std::max(layout.n_experts_, t.expert_id + 1);
  }
  if (!manifest.expert_tensors.empty()) layout.dtype_ = manifest.expert_tensors.front().dtype;
  layout.experts_.resize(static_cast<size_t>(layout.n_layers_) * layout.n_experts_);
  layout.layer_has_experts_.assign(layout.n_layers_, 0);

  for (const ExpertTensorInfo& t : manifest.expert_tensors) {
    const int proj = static_cast<int>(t.proj);
    if (!HasExponentSplit(t.dtype) || proj < 0 || proj >= kProjCount) {
      return Status::InvalidArgument(fmt::format("manifest: tensor '{}' (layer {}, expert {}): not a BF16/F16/F32 "
                                                 "gate/up/down projection ({})", t.name, t.layer_id, t.expert_id,
                                                 DTypeName(t.dtype)));
    }
    if (t.dtype != layout.dtype_) {
      const ExpertTensorInfo& first = manifest.expert_tensors.front();
      return Status::InvalidArgument(fmt::format("manifest: tensor '{}' (layer {}, expert {}) is {} but '{}' is {}: "
                                                 "the cache serves experts of one dtype", t.name, t.layer_id,
                                                 t.expert_id, DTypeName(t.dtype), first.name, DTypeName(first.dtype)));
    }
    ExpertSlotLayout& e = layout.experts_[static_cast<size_t>(t.layer_id) * layout.n_experts_ + t.expert_id];
    e.layer_id = t.layer_id;
    e.expert_id = t.expert_id;
    layout.layer_has_experts_[t.layer_id] = 1;
    TensorSlotLayout& tl = e.tensors[proj];
    if (tl.present) {
      return Status::InvalidArgument(fmt::format("manifest: tensor '{}' (layer {}, expert {}): {} appears twice",
                                                 t.name, t.layer_id, t.expert_id, ExpertProjName(t.proj)));
    }
    tl.present = true;
    tl.numel = t.numel();
    bool have_sm = false;
    for (const ChunkInfo& c : t.chunks) {
      if (c.kind == ChunkKind::kE) {
        tl.e_chunks.push_back({0, c.stored_bytes, AlignSlotBytes(c.stored_bytes)});
      } else {
        tl.sm = {0, c.stored_bytes, AlignSlotBytes(c.stored_bytes)};
        have_sm = true;
      }
    }
    if (!have_sm) {
      return Status::InvalidArgument(fmt::format("manifest: tensor '{}' (layer {}, expert {}): no SM-chunk",
                                                 t.name, t.layer_id, t.expert_id));
    }
    const uint64_t full_bytes = DTypeBytes(layout.dtype_, static_cast<uint64_t>(tl.numel));
    tl.bf16 = {0, full_bytes, AlignSlotBytes(full_bytes)};
    const uint64_t e_plane_bytes = EPlaneBytes(layout.dtype_, tl.numel);  // MXFP4: the fields, then the scales
    tl.e_plane = {0, e_plane_bytes, e_plane_bytes};
  }

  // Offsets: parts ordered by projection, E-chunks by shard (the manifest's chunk order).
  bool seen_expert = false;
  for (ExpertSlotLayout& e : layout.experts_) {
    if (e.layer_id < 0) continue;
    // Every expert has up and down; all have a gate (SwiGLU experts) or none does (switch_transformers'
    // wi/wo: up/down only). The pipeline, slots and wire messages skip an absent gate.
    const bool gated = e.tensors[static_cast<int>(ExpertProj::kGate)].present;
    if (!seen_expert) layout.gated_ = gated;
    seen_expert = true;
    for (int proj = 0; proj < kProjCount; ++proj) {
      const ExpertProj ep = static_cast<ExpertProj>(proj);
      if (!e.tensors[proj].present && ep != ExpertProj::kGate) {
        return Status::InvalidArgument(fmt::format("manifest: layer {} expert {} has no {} tensor", e.layer_id,
                                                   e.expert_id, ExpertProjName(ep)));
      }
    }
    if (gated != layout.gated_) {
      return Status::InvalidArgument(fmt::format(
          "manifest: layer {} expert {} {} gate_proj tensor but earlier experts {}: every expert must have one, "
          "or none (gate-less up/down experts)",
          e.layer_id, e.expert_id, gated ? "has a" : "has no", gated ? "have none" : "have one"));
    }
    const uint64_t elem_bytes = static_cast<uint64_t>(DTypeSize(layout.dtype_));  // 0 for MXFP4
    uint64_t e_plane_end = 0;
    for (TensorSlotLayout& tl : e.tensors) {
      if (!tl.present) continue;
      for (SlotExtent& c : tl.e_chunks) {
        c.offset = e.e_part_bytes;
        e.e_part_bytes += c.read_bytes;
      }
      tl.sm.offset = e.sm_part_bytes;
      e.sm_part_bytes += tl.sm.read_bytes;
      tl.bf16.offset = e.f_part_bytes;
      // A multiple of 1 KiB (F32), 2 KiB (BF16/F16) or 4 KiB (F8_E4M3); MXFP4: after the previous plane.
      tl.e_plane.offset = elem_bytes > 0 ? tl.bf16.offset / elem_bytes : AlignSlotBytes(e_plane_end);
      e_plane_end = tl.e_plane.offset + tl.e_plane.bytes;
      e.f_part_bytes += tl.bf16.read_bytes;
    }
    layout.e_plane_slot_bytes_ = std::max(layout.e_plane_slot_bytes_, AlignSlotBytes(e_plane_end));
    for (Pool p : kPoolOrder) {
      layout.slot_bytes_[PoolIndex(p)] = std::max(layout.slot_bytes_[PoolIndex(p)], e.PoolBytes(p));
    }
  }
  return layout;
}

bool ModelLayout::LayerHasExperts(int32_t layer_id) const {
  return layer_id >= 0 && layer_id < n_layers_ && layer_has_experts_[layer_id] != 0;
}

int32_t ModelLayout::ExpertsInLayer(int32_t layer_id) const {
  int32_t n = 0;
  for (int32_t e = 0; e < n_experts_; ++e) n += Find(layer_id, e) != nullptr;
  return n;
}

const ExpertSlotLayout* ModelLayout::Find(int32_t layer_id, int32_t expert_id) const {
  if (layer_id < 0 || layer_id >= n_layers_ || expert_id < 0 || expert_id >= n_experts_) return nullptr;
  const ExpertSlotLayout& e = experts_[static_cast<size_t>(layer_id) * n_experts_ + expert_id];
  return e.layer_id < 0 ? nullptr : &e;
}

uint64_t ModelLayout::PlanBytes(const CachePlan& plan) const {
  uint64_t total = 0;
  for (const auto& layer : plan.capacity) {
    for (Pool p : kPoolOrder) total += static_cast<uint64_t>(std::max(layer[PoolIndex(p)], 0)) * slot_bytes(p);
  }
  return total;
}

}  // namespace zipmoe::cache_manager
