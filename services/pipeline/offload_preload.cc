// OffloadExpertProvider::Preload (offload_provider.h): fills the pools to the plan before serving.
#include "services/pipeline/offload_provider.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "common/ipc/slot_arena.h"
#include "common/trace_events.h"
#include "services/decompressor/decompress_op.h"
#include "services/scheduler/lower_bound.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;

Result<OffloadExpertProvider::PreloadStats> OffloadExpertProvider::Preload(
    const std::map<int32_t, std::map<int32_t, uint64_t>>& counts) {
  auto* local = dynamic_cast<LocalCacheBackend*>(cache_.get());
  if (local == nullptr)
    return Status::InvalidArgument("preload needs the cache in this process (embedded mode, not `zipmoe up`)");
  {
    MutexLock lock(&mu_);
    if (active_) return Status::InvalidArgument(fmt::format("preload while layer {} is begun", layer_id_));
  }
  const auto start = std::chrono::steady_clock::now();
  std::map<int32_t, std::vector<int32_t>> layers;  // MoE layer -> its experts, ascending
  for (const ExpertTensorInfo& t : store_->manifest().expert_tensors) {
    std::vector<int32_t>& ids = layers[t.layer_id];
    if (ids.empty() || ids.back() != t.expert_id) ids.push_back(t.expert_id);
  }
  const cm::CacheManager& manager = local->manager();
  const bool global_pool = !manager.per_layer_pools();
  // Pool F on the executor's device: no executor runs here to write its slots, so F is left to fill
  // at first use and only C/S/E are preloaded (no reservations while preloading).
  const bool f_here = !manager.config().f_on_device;
  const int64_t global_slots = global_pool && f_here ? manager.Capacity(0, cm::Pool::kF) : 0;
  struct ReservationsOff {  // back on however Preload returns
    LocalCacheBackend* backend;
    explicit ReservationsOff(LocalCacheBackend* b) : backend(b) { backend->set_reserve_device_f(false); }
    ~ReservationsOff() { backend->set_reserve_device_f(true); }
  } reservations_off(local);
  PreloadStats out;
  const uint64_t read_before = stats().io_read_bytes;
  int64_t layer_index = 0;
  for (const auto& [layer_id, experts] : layers) {
    int64_t capacity = 0;
    if (global_pool) {
      const int64_t n = static_cast<int64_t>(layers.size());
      capacity = global_slots / n + (layer_index < global_slots % n ? 1 : 0);
    } else {
      for (cm::Pool p : {cm::Pool::kF, cm::Pool::kC, cm::Pool::kS, cm::Pool::kE})
        if (p != cm::Pool::kF || f_here) capacity += manager.Capacity(layer_id, p);
    }
    ++layer_index;
    capacity = std::min<int64_t>(capacity, static_cast<int64_t>(experts.size()));
    if (capacity <= 0) continue;
    const auto layer_counts = counts.find(layer_id);
    const auto count_of = [&](int32_t e) -> uint64_t {
      if (layer_counts == counts.end()) return 0;
      const auto it = layer_counts->second.find(e);
      return it == layer_counts->second.end() ? 0 : it->second;
    };
    std::vector<int32_t> order = experts;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return count_of(a) > count_of(b); });
    order.resize(static_cast<size_t>(capacity));
    const int32_t max_expert = *std::max_element(experts.begin(), experts.end());
    std::vector<uint64_t> seed(static_cast<size_t>(max_expert) + 1, 0);
    for (size_t r = 0; r < order.size(); ++r) seed[static_cast<size_t>(order[r])] = order.size() - r;
    ZM_RETURN_IF_ERROR(local->SeedFrequencies(layer_id, seed));
    std::sort(order.begin(), order.end());
    LayerRouting routing;
    routing.layer_id = layer_id;
    routing.expert_ids = order;
    routing.tokens_per_expert.assign(order.size(), 1);
    ZM_RETURN_IF_ERROR(BeginLayer(routing));
    for (size_t i = 0; i < order.size(); ++i) {
      Result<std::unique_ptr<ExpertLease>> lease = NextReady();
      if (!lease.ok()) {
        (void)EndLayer(layer_id);
        return Status(lease.status().code(), fmt::format("preload: {}", lease.status().message()));
      }
    }  // each lease released at once: admitted by rank, its staging slot starts the next wave
    ZM_RETURN_IF_ERROR(EndLayer(layer_id));
    out.experts += order.size();
  }
  out.read_bytes = stats().io_read_bytes - read_before;
  {
    MutexLock lock(&mu_);
    RuntimeStats fresh;  // what Create set, nothing counted
    fresh.per_layer.resize(stats_.per_layer.size());
    fresh.staging_slots = stats_.staging_slots;
    fresh.arena_bytes = stats_.arena_bytes;
    fresh.budget_bytes = stats_.budget_bytes;
    fresh.direct_io = stats_.direct_io;
    fresh.prefetch_mode = stats_.prefetch_mode;
    stats_ = std::move(fresh);
  }
  local->ResetCounters();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string OffloadExpertProvider::PreloadStats::Summary(const std::string& ranking) const {
  return fmt::format("{} experts placed by {} in {:.2f} s ({:.1f} MiB read)", experts, ranking, seconds,
                     read_bytes / 1048576.0);
}

Result<OffloadExpertProvider::PreloadedCache> OffloadExpertProvider::CreatePreloadedCache(
    const OffloadConfig& config, const std::map<int32_t, std::map<int32_t, uint64_t>>& counts) {
  if (config.cache) return Status::InvalidArgument("a preloaded cache is this process's own: OffloadConfig::cache is set");
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<OffloadExpertProvider> runtime, Create(config));
  PreloadedCache out;
  ZM_ASSIGN_OR_RETURN(out.stats, runtime->Preload(counts));
  out.config = runtime->config();
  // Every operation completes (no lease is held after Preload), the work table is emptied while the
  // cache is still here, then the cache leaves: the destructor finds nothing that would reach it.
  runtime->ShutdownAndForgetWork();
  out.cache.reset(static_cast<LocalCacheBackend*>(runtime->cache_.release()));  // Create made a local one
  runtime.reset();
  return out;
}

}  // namespace zipmoe::runtime
