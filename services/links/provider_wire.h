// The wire forms of the executor <-> scheduler operations (messages: schemas/messages.fbs; client
// services/links/remote_provider.h RemoteExpertProvider, server ProviderServer): a layer's routing
// and one ready expert, whose arena pointers travel as offsets.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "common/expert_provider.h"
#include "common/ipc/messaging.h"
#include "common/ipc/shm_region.h"
#include "common/status.h"

namespace zipmoe::runtime {

// A layer's routing (BeginLayer), or a prediction (Prefetch: prefetch = true; scores not sent).
messaging::LayerRequest LayerRequestToWire(const LayerRouting& routing, bool prefetch);
LayerRouting LayerRoutingFromWire(const messaging::LayerRequest& request);
// One ready expert: pointers into the shared arena at `arena_base` become offsets (tensors of
// view.dtype: BF16, F16 or F32; or the E and SM planes of an unrecovered BF16 expert) and the dtype;
// its device slot (pool F on the executor's device), with no offsets when the slot holds it.
messaging::ExpertReady ExpertReadyToWire(const ExpertWeightsView& view, const uint8_t* arena_base);
// The view of an ExpertReady in this process's mapping of `arena`, after checking that every
// tensor lies inside it (DTypeBytes(dtype, numel) bytes each; none for an expert its device slot
// holds). Errors: kCorruption naming `endpoint`, the expert and the arena, a dtype other than
// BF16/F16/F32/F8/MXFP4 (planes: BF16 only), or a slot that holds it given as negative.
Result<ExpertWeightsView> ExpertWeightsFromWire(const messaging::ExpertReady& ready, const ShmRegion& arena,
                                                const std::string& endpoint);

}  // namespace zipmoe::runtime
