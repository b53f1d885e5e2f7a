// The wire forms of the scheduler <-> cache-manager operations (the ToWire / FromWire pairs of this
// protocol; messages: schemas/messages.fbs; client services/links/remote_cache_backend.h, server
// services/links/cache_server.h). Arena pointers travel as offsets, as in every message.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/ipc/messaging.h"
#include "common/status.h"
#include "services/cache_manager/cache_manager.h"
#include "services/pipeline/cache_backend.h"

namespace zipmoe::runtime {

// One admission (the client sends it; lease_id is the request's lease, released after it).
messaging::CacheAdmitItem CacheAdmitToWire(const CacheAdmitRequest& request);
// The admission an item asks for, its offsets split per projection by `layout` (the expert's slot
// layout; null for an expert the model does not have: the request keeps no offsets, and the cache
// manager refuses it). request->lease is left to the caller (the server checks the client holds it).
// Errors: kInvalidArgument when the item's E-chunk, SM, BF16 or E-plane offset counts do not match
// the layout (names the layer and expert); *request is then partly filled and must not be admitted.
Status CacheAdmitFromWire(const messaging::CacheAdmitItem& item, const cache_manager::ExpertSlotLayout* layout,
                          CacheAdmitRequest* request);

// The cache counters (CacheManager::Counters) as a CacheStats reply to request `request_id`:
// pool_counters [4 pools][7], layer_requests [n_layers][5], flattened row-major.
messaging::CacheStats CacheStatsToWire(uint64_t request_id, const cache_manager::CacheCounters& counters);
// Its inverse; rows a short vector does not complete are dropped.
cache_manager::CacheCounters CacheCountersFromWire(const messaging::CacheStats& stats);

}  // namespace zipmoe::runtime
