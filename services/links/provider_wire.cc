#include "services/links/provider_wire.h"

#include <vector>

#include <fmt/format.h>

#include "common/bitfield.h"

namespace zipmoe::runtime {

namespace msg = messaging;

msg::LayerRequest LayerRequestToWire(const LayerRouting& routing, bool prefetch) {
  msg::LayerRequest request;
  request.layer_id = routing.layer_id;
  request.expert_ids = routing.expert_ids;
  request.tokens_per_expert = routing.tokens_per_expert;
  if (!prefetch) {
    request.mean_scores = routing.mean_scores;
    request.substituted = routing.substituted;
    request.device_epoch = routing.device_epoch;
  }
  request.prefetch = prefetch;
  return request;
}

LayerRouting LayerRoutingFromWire(const msg::LayerRequest& request) {
  LayerRouting routing{request.layer_id, request.expert_ids, request.tokens_per_expert};
  routing.mean_scores = request.mean_scores;
  routing.substituted = request.substituted;
  routing.device_epoch = request.device_epoch;
  return routing;
}

msg::ExpertReady ExpertReadyToWire(const ExpertWeightsView& v, const uint8_t* arena_base) {
  msg::ExpertReady ready;
  ready.layer_id = v.layer_id;
  ready.expert_id = v.expert_id;
  auto offset = [arena_base](const void* p) { return static_cast<uint64_t>(static_cast<const uint8_t*>(p) - arena_base); };
  ready.gated = v.gated;
  ready.device_slot = v.device_slot;
  ready.device_slot_holds = v.device_slot_holds;
  if (v.device_slot_holds) {
    // An F hit on the executor's device: no bytes in the arena.
  } else if (v.planes()) {  // unrecovered: the CPU executor fuses the recovery into its matmul
    for (const ExpertPlanes* planes : {&v.gate_planes, &v.up_planes, &v.down_planes}) {
      if (planes == &v.gate_planes && !v.gated) continue;
      ready.e_plane_offsets.push_back(offset(planes->e));
      ready.sm_offsets.push_back(offset(planes->sm));
    }
  } else {
    if (v.gated) ready.gate_offset = offset(v.gate);
    ready.up_offset = offset(v.up);
    ready.down_offset = offset(v.down);
  }
  ready.intermediate = v.intermediate;
  ready.hidden = v.hidden;
  ready.dtype = static_cast<uint8_t>(v.dtype);
  return ready;
}

Result<ExpertWeightsView> ExpertWeightsFromWire(const msg::ExpertReady& ready, const ShmRegion& arena,
                                                const std::string& endpoint) {
  const uint64_t size = arena.size_bytes();
  const bool holds = ready.device_slot_holds;
  const bool planes = !holds && !ready.e_plane_offsets.empty();
  const uint64_t numel = static_cast<uint64_t>(ready.intermediate) * static_cast<uint64_t>(ready.hidden);
  std::vector<uint64_t> offsets = {ready.up_offset, ready.down_offset};
  if (ready.gated) offsets.push_back(ready.gate_offset);
  if (planes) {  // E and SM planes: one byte per weight each
    offsets = ready.e_plane_offsets;
    offsets.insert(offsets.end(), ready.sm_offsets.begin(), ready.sm_offsets.end());
  }
  const auto dtype = static_cast<DType>(ready.dtype);
  if (!HasExponentSplit(dtype) || (planes && dtype != DType::kBF16)) {
    return Status::Corruption(fmt::format("scheduler at {}: expert {} of layer {} has dtype {}{}", endpoint,
                                          ready.expert_id, ready.layer_id, static_cast<int>(ready.dtype),
                                          planes ? " with E/SM planes (BF16 only)" : " (BF16, F16, F32, F8_E4M3 or MXFP4 expected)"));
  }
  // BF16 planes: one byte per weight each (the SM plane is n bytes for BF16 only).
  const uint64_t bytes = planes ? numel : DTypeBytes(dtype, numel);
  const size_t n_proj = ready.gated ? 3 : 2;  // gate, up, down or up, down
  bool inside = ready.intermediate > 0 && ready.hidden > 0 &&
                (!planes || (ready.e_plane_offsets.size() == n_proj && ready.sm_offsets.size() == n_proj));
  if (!holds) {
    for (uint64_t offset : offsets) inside = inside && offset <= size && bytes <= size - offset;
  }
  if (holds && ready.device_slot < 0) {
    return Status::Corruption(fmt::format("scheduler at {}: expert {} of layer {} is held in device slot {}",
                                          endpoint, ready.expert_id, ready.layer_id, ready.device_slot));
  }
  if (!inside) {
    return Status::Corruption(fmt::format("scheduler at {}: expert {} of layer {} lies outside the arena {} "
                                          "({} bytes)", endpoint, ready.expert_id, ready.layer_id, arena.name(), size));
  }
  const uint8_t* base = arena.data();
  ExpertWeightsView view;
  view.layer_id = ready.layer_id;
  view.expert_id = ready.expert_id;
  view.dtype = dtype;
  view.gated = ready.gated;
  view.device_slot = ready.device_slot < 0 ? -1 : ready.device_slot;
  view.device_slot_holds = holds;
  if (holds) {
    // No host bytes: the executor reads its device slot.
  } else if (planes) {
    const size_t up = ready.gated ? 1 : 0;  // the planes' index of up (down follows)
    if (ready.gated) view.gate_planes = {base + ready.e_plane_offsets[0], base + ready.sm_offsets[0]};
    view.up_planes = {base + ready.e_plane_offsets[up], base + ready.sm_offsets[up]};
    view.down_planes = {base + ready.e_plane_offsets[up + 1], base + ready.sm_offsets[up + 1]};
  } else {
    if (ready.gated) view.gate = base + ready.gate_offset;
    view.up = base + ready.up_offset;
    view.down = base + ready.down_offset;
  }
  view.intermediate = ready.intermediate;
  view.hidden = ready.hidden;
  return view;
}

}  // namespace zipmoe::runtime
