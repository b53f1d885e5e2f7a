#include "services/links/cache_wire.h"

#include <array>
#include <cstddef>

#include <fmt/format.h>

namespace zipmoe::runtime {

namespace cm = cache_manager;
namespace msg = messaging;

namespace {
constexpr size_t kPoolCounterFields = 7;  // PoolCounters, in declaration order
constexpr size_t kLayerRequestFields = 5;  // by CompressionState value
}  // namespace

msg::CacheAdmitItem CacheAdmitToWire(const CacheAdmitRequest& request) {
  msg::CacheAdmitItem item;
  item.layer_id = request.layer_id;
  item.expert_id = request.expert_id;
  item.lease_id = request.lease;
  item.admit = true;
  item.parts = (request.parts.e ? msg::kCachePartE : 0) | (request.parts.sm ? msg::kCachePartSm : 0) |
               (request.parts.bf16 ? msg::kCachePartBf16 : 0);
  for (int proj = 0; proj < cm::kProjCount; ++proj) {
    item.e_offsets.insert(item.e_offsets.end(), request.e_chunks[proj].begin(), request.e_chunks[proj].end());
    item.sm_offsets.push_back(request.sm[proj]);
    item.bf16_offsets.push_back(request.bf16[proj]);
    if (request.bf16_from_planes) item.e_plane_offsets.push_back(request.e_plane[proj]);
  }
  item.bf16_from_planes = request.bf16_from_planes;  // the cache-manager recovers the BF16 for F
  return item;
}

Status CacheAdmitFromWire(const msg::CacheAdmitItem& item, const cm::ExpertSlotLayout* layout,
                          CacheAdmitRequest* request) {
  request->layer_id = item.layer_id;
  request->expert_id = item.expert_id;
  request->parts.e = (item.parts & msg::kCachePartE) != 0;
  request->parts.sm = (item.parts & msg::kCachePartSm) != 0;
  request->parts.bf16 = (item.parts & msg::kCachePartBf16) != 0;
  if (layout == nullptr) return Status::Ok();
  size_t used = 0;
  for (int proj = 0; proj < cm::kProjCount; ++proj) {
    const cm::TensorSlotLayout& t = layout->tensors[proj];
    const size_t k = t.present && request->parts.e ? t.e_chunks.size() : 0;
    if (used + k > item.e_offsets.size()) break;
    request->e_chunks[proj].assign(item.e_offsets.begin() + static_cast<std::ptrdiff_t>(used),
                                   item.e_offsets.begin() + static_cast<std::ptrdiff_t>(used + k));
    used += k;
    if (proj < static_cast<int>(item.sm_offsets.size())) request->sm[proj] = item.sm_offsets[proj];
    if (proj < static_cast<int>(item.bf16_offsets.size())) request->bf16[proj] = item.bf16_offsets[proj];
    if (proj < static_cast<int>(item.e_plane_offsets.size())) request->e_plane[proj] = item.e_plane_offsets[proj];
  }
  request->bf16_from_planes = item.bf16_from_planes;
  if (used != item.e_offsets.size() || (request->parts.sm && item.sm_offsets.size() != cm::kProjCount) ||
      (request->parts.bf16 && item.bf16_offsets.size() != cm::kProjCount) ||
      (item.bf16_from_planes && item.e_plane_offsets.size() != cm::kProjCount)) {
    return Status::InvalidArgument(fmt::format(
        "CacheAdmit layer {} expert {}: {} E-chunk / {} SM / {} BF16 offsets do not match its layout", item.layer_id,
        item.expert_id, item.e_offsets.size(), item.sm_offsets.size(), item.bf16_offsets.size()));
  }
  return Status::Ok();
}

msg::CacheStats CacheStatsToWire(uint64_t request_id, const cm::CacheCounters& counters) {
  msg::CacheStats stats;
  stats.request_id = request_id;
  stats.lookups = counters.lookups;
  stats.misses = counters.misses;
  stats.drops = counters.drops;
  stats.pinned_skips = counters.pinned_skips;
  for (const cm::PoolCounters& p : counters.pools) {
    const std::array<uint64_t, kPoolCounterFields> fields = {
        p.requests, p.admissions, p.evictions, p.removals, p.resident_experts, p.resident_bytes, p.capacity_bytes};
    stats.pool_counters.insert(stats.pool_counters.end(), fields.begin(), fields.end());
  }
  for (const auto& row : counters.layer_requests) {
    stats.layer_requests.insert(stats.layer_requests.end(), row.begin(), row.end());
  }
  return stats;
}

cm::CacheCounters CacheCountersFromWire(const msg::CacheStats& m) {
  cm::CacheCounters c;
  c.lookups = m.lookups;
  c.misses = m.misses;
  c.drops = m.drops;
  c.pinned_skips = m.pinned_skips;
  for (size_t p = 0; p < c.pools.size() && (p + 1) * kPoolCounterFields <= m.pool_counters.size(); ++p) {
    const uint64_t* v = &m.pool_counters[p * kPoolCounterFields];
    c.pools[p] = cm::PoolCounters{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
  }
  for (size_t l = 0; (l + 1) * kLayerRequestFields <= m.layer_requests.size(); ++l) {
    std::array<uint64_t, kLayerRequestFields> row{};
    for (size_t s = 0; s < kLayerRequestFields; ++s) row[s] = m.layer_requests[l * kLayerRequestFields + s];
    c.layer_requests.push_back(row);
  }
  return c;
}

}  // namespace zipmoe::runtime
