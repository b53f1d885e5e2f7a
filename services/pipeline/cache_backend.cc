#include "services/pipeline/cache_backend.h"

#include <algorithm>

#include <fmt/format.h>

#include "services/decompressor/decompressor_pool.h"
#include "services/pipeline/offload_provider.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;

const uint8_t* CachedExpert::EChunk(ExpertProj proj, int shard) const {
  if (e_part == nullptr || layout == nullptr) return nullptr;
  const cm::TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  if (!t.present || shard < 0 || shard >= static_cast<int>(t.e_chunks.size())) return nullptr;
  return e_part + t.e_chunks[shard].offset;
}

const uint8_t* CachedExpert::Sm(ExpertProj proj) const {
  if (sm_part == nullptr || layout == nullptr) return nullptr;
  const cm::TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  return t.present ? sm_part + t.sm.offset : nullptr;
}

const uint8_t* CachedExpert::Full(ExpertProj proj) const {
  if (f_part == nullptr || layout == nullptr) return nullptr;
  const cm::TensorSlotLayout& t = layout->tensors[static_cast<int>(proj)];
  return t.present ? f_part + t.bf16.offset : nullptr;
}

Result<std::unique_ptr<LocalCacheBackend>> LocalCacheBackend::Create(OffloadConfig* config, const Manifest& manifest) {
  OffloadConfig& cfg = *config;
  if (cfg.n_workers <= 0) cfg.n_workers = decompressor::DefaultWorkerCount();
  if (cfg.memory_budget_percent != 0) {
    if (!(cfg.memory_budget_percent > 0 && cfg.memory_budget_percent <= 1000)) {
      return Status::InvalidArgument(
          fmt::format("memory budget {}%: a percentage must be in (0, 1000]", cfg.memory_budget_percent));
    }
    cfg.memory_budget_bytes =
        static_cast<uint64_t>(static_cast<double>(manifest.expert_raw_bytes()) * cfg.memory_budget_percent / 100.0);
  }
  if (cfg.no_compression) {
    if (cfg.policy != cm::CachePolicy::kZipMoe || manifest.codec != Codec::kNone) {
      return Status::InvalidArgument(fmt::format(
          "--no-compression runs the zipmoe policy on uncompressed experts: give a directory made with `zipmoe "
          "compress --codec none` ({} uses {}) and --policy zipmoe (got {})",
          cfg.model_dir, CodecName(manifest.codec), cm::CachePolicyName(cfg.policy)));
    }
    cfg.pools = "F";
    cfg.pool_ratios.clear();
  }
  // Pool F on a discrete GPU's device, budgeted apart (OffloadConfig::device_f_budget_*).
  int64_t device_f_bytes = -1;
  if (cfg.device_f_pool && cfg.device_f_budget_percent != 0) {
    if (!(cfg.device_f_budget_percent > 0 && cfg.device_f_budget_percent <= 100)) {
      return Status::InvalidArgument(
          fmt::format("device memory budget {}%: a percentage must be in (0, 100]", cfg.device_f_budget_percent));
    }
    device_f_bytes =
        static_cast<int64_t>(static_cast<double>(manifest.expert_raw_bytes()) * cfg.device_f_budget_percent / 100.0);
  } else if (cfg.device_f_pool && cfg.device_f_budget_bytes >= 0) {
    device_f_bytes = cfg.device_f_budget_bytes;
  }
  ZM_ASSIGN_OR_RETURN(cm::ModelLayout layout, cm::ModelLayout::FromManifest(manifest));
  ZM_ASSIGN_OR_RETURN(cm::ModelPlanInputs model, cm::ModelPlanInputsFromManifest(manifest, cfg.model_dir));
  const cm::StagingLayout staging = cm::StagingLayout::ForModel(layout);
  if (cfg.memory_budget_bytes < staging.slot_bytes) {
    return Status::InvalidArgument(fmt::format(
        "memory budget {} bytes ({:.2f} MiB) is below the minimum {} bytes ({:.2f} MiB) for {}: one expert in "
        "flight needs one staging slot (E-/SM-chunks, exponent planes and recovered {} of its {} tensors)",
        cfg.memory_budget_bytes, cfg.memory_budget_bytes / 1048576.0, staging.slot_bytes,
        staging.slot_bytes / 1048576.0, cfg.model_dir, DTypeName(layout.dtype()), model.tensors_per_expert));
  }
  const uint32_t slots = cfg.staging_slots > 0
                             ? cfg.staging_slots
                             : ChooseStagingSlots(cfg.memory_budget_bytes, staging.slot_bytes, model.top_k,
                                                  cfg.prefetch != PrefetchMode::kNone);
  const uint64_t staging_bytes = static_cast<uint64_t>(slots) * staging.slot_bytes;
  if (staging_bytes > cfg.memory_budget_bytes) {
    return Status::InvalidArgument(fmt::format("{} staging slots need {} bytes, more than the memory budget of {} bytes",
                                               slots, staging_bytes, cfg.memory_budget_bytes));
  }
  cfg.staging_slots = slots;

  // Plan the pools with what the staging slots leave (the cost model serves every policy).
  std::unique_ptr<LocalCacheBackend> b(new LocalCacheBackend());
  // Any other policy given pools beyond F gets the planner's per-layer pools, evicting within each by
  // its own rule.
  ZM_ASSIGN_OR_RETURN(const cm::PolicyPools resolved, cm::ResolvePolicyPools(cfg.policy, cfg.pools));
  const bool planned = resolved.planned;
  cfg.pools = resolved.pools;  // what runs (stats, logs)
  if (!planned && !cfg.pool_ratios.empty()) {
    return Status::InvalidArgument(fmt::format(
        "--pool-ratios {}: the {} policy keeps one F pool; give --pools (e.g. FCSE) to plan pools for it",
        cfg.pool_ratios, cm::CachePolicyName(cfg.policy)));
  }
  cm::PlanRequest request;
  request.model_dir = cfg.model_dir;
  request.budget_bytes = planned ? cfg.memory_budget_bytes - staging_bytes : 0;
  ZM_ASSIGN_OR_RETURN(request.pools, cm::ParsePoolSet(cfg.pools));
  request.trace_path = cfg.trace_path;
  request.n_workers = cfg.n_workers;
  request.profile_path = cfg.profile_path;
  if (!cfg.pool_ratios.empty()) {  // planned (refused above otherwise)
    ZM_ASSIGN_OR_RETURN(request.ratios, cm::ParsePoolRatios(cfg.pool_ratios));
  }
  // F budgeted on the device: F's capacity comes from the device budget and the host budget plans
  // C/S/E around it (Alg. 4 with F fixed: PlanRequest::device_f_budget_bytes).
  const bool f_apart = device_f_bytes >= 0;
  const bool f_in_pools = request.pools[cm::PoolIndex(cm::Pool::kF)];
  if (f_apart && planned) {
    if (request.ratios && (*request.ratios)[cm::PoolIndex(cm::Pool::kF)] != 0) {
      return Status::InvalidArgument(fmt::format(
          "--pool-ratios {}: with a device memory budget pool F is sized by it; give the host pools' ratios "
          "without F", cfg.pool_ratios));
    }
    if (f_in_pools) request.device_f_budget_bytes = device_f_bytes;
    bool host_pools = false;
    for (int p = 0; p < cm::kPoolCount; ++p) host_pools = host_pools || (request.pools[p] && p != cm::PoolIndex(cm::Pool::kF));
    if (!host_pools) request.budget_bytes = 0;  // F only (e.g. --no-compression): nothing cached in host memory
  }
  ZM_ASSIGN_OR_RETURN(b->plan_, cm::BuildPlan(manifest, request));

  cm::CacheConfig cache_config;
  cache_config.policy = cfg.policy;
  cache_config.budget_bytes = cfg.memory_budget_bytes;
  cache_config.shm_name = cfg.shm_name;
  cache_config.plan = planned ? cm::ToCachePlan(b->plan_, layout) : cm::CachePlan{};
  cache_config.pools = cfg.pools;
  cache_config.pools_from_plan = planned && cfg.policy != cm::CachePolicy::kZipMoe;
  if (f_apart && planned) {
    // F's per-layer share of the device budget in whole slots (the plan's floor, some layers one more),
    // the host pools trimmed where that leaves them more than the layer's experts.
    const cm::CachePlan f = cm::DaliPlan(layout, static_cast<uint64_t>(device_f_bytes));
    for (size_t l = 0; l < cache_config.plan.capacity.size(); ++l) {
      auto& cap = cache_config.plan.capacity[l];
      if (f_in_pools) cap[cm::PoolIndex(cm::Pool::kF)] = f.capacity[l][cm::PoolIndex(cm::Pool::kF)];
      const int32_t experts = layout.ExpertsInLayer(static_cast<int32_t>(l));
      for (cm::Pool p : {cm::Pool::kE, cm::Pool::kS, cm::Pool::kC}) {
        int32_t total = 0;
        for (int32_t c : cap) total += c;
        cap[cm::PoolIndex(p)] -= std::min(cap[cm::PoolIndex(p)], std::max(0, total - experts));
      }
    }
  }
  if (cfg.policy == cm::CachePolicy::kDali) {  // equal per-layer F pools; w_size = 4 tokens, u_size = top-k
    if (!planned) {
      cache_config.plan = cm::DaliPlan(
          layout, f_apart ? static_cast<uint64_t>(device_f_bytes) : cfg.memory_budget_bytes - staging_bytes);
    }
    cache_config.workload_window = 4 * std::max(model.top_k, 1);
    cache_config.replacements_per_window = std::max(model.top_k, 1);
  }
  cache_config.tolerance = cfg.tolerance;
  cache_config.staging_slots = slots;
  cache_config.register_with_cuda = cfg.register_with_cuda;
  cache_config.f_on_device = cfg.device_f_pool;
  cache_config.device_f_bytes = device_f_bytes;
  ZM_ASSIGN_OR_RETURN(b->manager_, cm::CacheManager::Create(manifest, cache_config));
  return b;
}

LocalCacheBackend::~LocalCacheBackend() {
  MutexLock lock(&mu_);
  leases_.clear();
  for (const auto& [lease, key] : reservations_) manager_->CancelDeviceF(key.first, key.second);
  reservations_.clear();
}

Status LocalCacheBackend::LookupLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                                      std::vector<CachedExpert>* out) {
  return LookupOrPinLayer(layer_id, expert_ids, /*activation=*/true, out);
}

Status LocalCacheBackend::PinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                                   std::vector<CachedExpert>* out) {
  return LookupOrPinLayer(layer_id, expert_ids, /*activation=*/false, out);
}

Status LocalCacheBackend::LookupOrPinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, bool activation,
                                           std::vector<CachedExpert>* out) {
  std::vector<cm::ExpertLookup> found;
  found.reserve(expert_ids.size());
  for (int32_t expert_id : expert_ids) {
    ZM_ASSIGN_OR_RETURN(cm::ExpertLookup lookup, activation ? manager_->Lookup(layer_id, expert_id)
                                                            : manager_->Pin(layer_id, expert_id));  // earlier pins drop
    found.push_back(std::move(lookup));
  }
  // Pool F on the device: F is decided now for the experts about to run (every selected expert is
  // pinned above, so none of them is a victim), and the executor writes them into their slot.
  std::vector<int32_t> reserved(found.size(), -1);
  if (activation && manager_->config().f_on_device && reserve_device_f_.load()) {
    for (size_t i = 0; i < found.size(); ++i) {
      if (found[i].state == CompressionState::kF) continue;
      Result<int32_t> slot = manager_->ReserveDeviceF(layer_id, found[i].expert_id);
      if (!slot.ok()) {
        for (size_t j = 0; j < i; ++j)
          if (reserved[j] >= 0) manager_->CancelDeviceF(layer_id, found[j].expert_id);
        return slot.status();
      }
      reserved[i] = *slot;
    }
  }
  out->clear();
  out->reserve(found.size());
  MutexLock lock(&mu_);
  for (size_t i = 0; i < found.size(); ++i) {
    cm::ExpertLookup& f = found[i];
    CachedExpert e;
    e.state = f.state;
    e.layer_id = f.layer_id;
    e.expert_id = f.expert_id;
    e.layout = f.layout;
    e.slot_offset = f.slot_offset;
    e.e_part = f.e_part;
    e.sm_part = f.sm_part;
    e.f_part = f.f_part;
    e.device_slot = reserved[i] >= 0 ? reserved[i] : f.device_slot;
    e.device_fill = reserved[i] >= 0;
    if (f.lease.valid() || e.device_fill) {
      e.lease = next_lease_++;
      leases_.emplace(e.lease, std::move(f.lease));  // an empty SlotLease for a reserved miss
      if (e.device_fill) reservations_.emplace(e.lease, std::make_pair(f.layer_id, f.expert_id));
    }
    out->push_back(e);
  }
  return Status::Ok();
}

Status LocalCacheBackend::Admit(const CacheAdmitRequest& request) { return AdmitWithResult(request).status(); }

Result<cm::AdmitResult> LocalCacheBackend::AdmitWithResult(const CacheAdmitRequest& request) {
  Result<cm::AdmitResult> result = Status::Internal("unreachable");
  const cm::ExpertSlotLayout* layout = manager_->layout().Find(request.layer_id, request.expert_id);
  uint8_t* base = manager_->arena_base();
  const uint64_t size = manager_->arena_bytes();
  // Every source range [offset, + bytes) must lie in the arena (offsets come from peers).
  auto at = [&](uint64_t offset, uint64_t bytes, const char* what, int proj) -> Result<const uint8_t*> {
    if (base == nullptr) return static_cast<const uint8_t*>(nullptr);
    if (offset > size || bytes > size - offset) {
      return Status::InvalidArgument(fmt::format(
          "admit layer {} expert {}: {} of proj {} at arena offset {} (+{} bytes) is outside the arena ({} bytes)",
          request.layer_id, request.expert_id, what, proj, offset, bytes, size));
    }
    return static_cast<const uint8_t*>(base + offset);
  };
  cm::ExpertSources sources;
  Status checked;
  if (layout == nullptr) {
    checked = Status::InvalidArgument(fmt::format("admit: layer {} expert {} is not in the manifest",
                                                  request.layer_id, request.expert_id));
  }
  for (int proj = 0; proj < cm::kProjCount && checked.ok() && base != nullptr; ++proj) {
    const cm::TensorSlotLayout& t = layout->tensors[proj];
    if (!t.present) continue;
    if (request.parts.e) {
      if (request.e_chunks[proj].size() != t.e_chunks.size()) {
        checked = Status::InvalidArgument(fmt::format("admit layer {} expert {}: {} E-chunk offsets for proj {}, "
                                                      "the layout has {}", request.layer_id, request.expert_id,
                                                      request.e_chunks[proj].size(), proj, t.e_chunks.size()));
        break;
      }
      for (size_t i = 0; i < t.e_chunks.size() && checked.ok(); ++i) {
        Result<const uint8_t*> p = at(request.e_chunks[proj][i], t.e_chunks[i].bytes, "E-chunk", proj);
        if (!p.ok()) checked = p.status(); else sources.e_chunks[proj].push_back(*p);
      }
    }
    if (request.parts.sm && checked.ok()) {
      Result<const uint8_t*> p = at(request.sm[proj], t.sm.bytes, "SM plane", proj);
      if (!p.ok()) checked = p.status(); else sources.sm[proj] = *p;
    }
    if (request.parts.bf16 && checked.ok() && request.bf16_from_planes) {
      Result<const uint8_t*> e = at(request.e_plane[proj], t.e_plane.bytes, "exponent plane", proj);
      Result<const uint8_t*> sm = at(request.sm[proj], t.sm.bytes, "SM plane", proj);
      if (!e.ok()) checked = e.status(); else if (!sm.ok()) checked = sm.status();
      if (checked.ok()) {
        sources.e_plane[proj] = *e;
        sources.sm[proj] = *sm;
      }
    } else if (request.parts.bf16 && checked.ok()) {
      Result<const uint8_t*> p = at(request.bf16[proj], t.bf16.bytes, "full tensor", proj);
      if (!p.ok()) checked = p.status(); else sources.bf16[proj] = *p;
    }
  }
  result = checked.ok() ? manager_->Admit(request.layer_id, request.expert_id, request.parts, sources)
                        : Result<cm::AdmitResult>(checked);
  if (!result.ok()) manager_->CancelDeviceF(request.layer_id, request.expert_id);  // no-op without one
  cm::SlotLease released;
  MutexLock lock(&mu_);
  reservations_.erase(request.lease);  // committed by the Admit (or cancelled)
  ++totals_.calls;
  if (result.ok()) ++totals_.outcomes[static_cast<int>(result->outcome)];
  auto it = leases_.find(request.lease);
  if (it != leases_.end()) {
    released = std::move(it->second);  // unpinned at return, after the admission
    leases_.erase(it);
  }
  return result;
}

void LocalCacheBackend::ReleaseLeases(const std::vector<uint64_t>& leases) {
  std::vector<std::pair<int32_t, int32_t>> cancel;
  {
    MutexLock lock(&mu_);
    for (uint64_t id : leases) {
      leases_.erase(id);
      auto r = reservations_.find(id);
      if (r == reservations_.end()) continue;
      cancel.push_back(r->second);
      reservations_.erase(r);
    }
  }
  for (const auto& [layer, expert] : cancel) manager_->CancelDeviceF(layer, expert);
}

uint64_t LocalCacheBackend::StagingOffset(uint32_t slot) const {
  const uint8_t* data = manager_->StagingData(slot);
  return data == nullptr ? 0 : static_cast<uint64_t>(data - manager_->arena_base());
}

AdmitTotals LocalCacheBackend::admit_totals() const {
  MutexLock lock(&mu_);
  return totals_;
}

void LocalCacheBackend::ResetCounters() {
  manager_->ResetCounters();
  MutexLock lock(&mu_);
  totals_ = AdmitTotals();
}

uint64_t LocalCacheBackend::leases_held() const {
  MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace zipmoe::runtime
