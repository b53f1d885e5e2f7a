#include "services/cache_manager/plan_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checkpoint/model_config.h"

namespace zipmoe::cache_manager {

Status ValidateCostModel(const CostModel& cost) {
  const std::pair<const char*, double> delays[] = {
      {"sm_read_us", cost.sm_read_us},         {"e_read_us", cost.e_read_us},
      {"decompress_us", cost.decompress_us},   {"recovery_us", cost.recovery_us},
      {"expert_compute_us", cost.expert_compute_us}};
  for (const auto& [name, value] : delays) {
    if (!std::isfinite(value) || value < 0) {
      return Status::InvalidArgument(fmt::format("cost.{} = {}: must be finite and >= 0", name, value));
    }
  }
  const std::pair<const char*, int32_t> counts[] = {{"n_shards", cost.n_shards},
                                                    {"n_workers", cost.n_workers},
                                                    {"tensors_per_expert", cost.tensors_per_expert}};
  for (const auto& [name, value] : counts) {
    if (value < 1) return Status::InvalidArgument(fmt::format("cost.{} = {}: must be >= 1", name, value));
  }
  return Status::Ok();
}

double EstimateMakespanUs(int top_k, const std::array<int32_t, kPoolCount>& hits, const CostModel& cost) {
  int32_t total = 0;
  for (int32_t h : hits) {
    ZM_CHECK(h >= 0) << "negative hit count";
    total += h;
  }
  ZM_CHECK(total <= top_k) << total << " hits > top_k " << top_k;
  const double n = cost.tensors_per_expert;
  const double k_shards = cost.n_shards;
  const double n_sm = n * (top_k - hits[kPoolF] - hits[kPoolC] - hits[kPoolS]);            // Alg. 3 line 4
  const double n_e = n * k_shards * (top_k - hits[kPoolF] - hits[kPoolC] - hits[kPoolE]);  // line 5
  const double t_io = n_sm * cost.sm_read_us + n_e * cost.e_read_us;                        // line 6
  const double n_d = n * k_shards * (top_k - hits[kPoolF]);                                  // line 8
  const double t_dec = (n_e * cost.e_read_us + n_d * cost.decompress_us) / cost.n_workers;  // line 9
  const double alg3 = std::max(t_io, t_dec);                                                 // line 10
  const int32_t rebuilt = top_k - hits[kPoolF];
  const double tail = rebuilt > 0 ? n * cost.recovery_us + cost.expert_compute_us : 0.0;
  const double gpu = top_k * cost.expert_compute_us + n * rebuilt * cost.recovery_us;
  return std::max(alg3 + tail, gpu);
}

Result<ModelPlanInputs> ModelPlanInputsFromManifest(const Manifest& manifest, const std::string& source) {
  if (manifest.expert_tensors.empty()) {
    return Status::InvalidArgument(fmt::format("{}: manifest has no routed-expert tensors", source));
  }
  nlohmann::json config = nlohmann::json::parse(manifest.config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return Status::InvalidArgument(fmt::format("{}: manifest config.json is not a JSON object", source));
  }
  ZM_ASSIGN_OR_RETURN(ModelConfig model_config, ParseModelConfig(config, source + "/config.json"));
  if (model_config.num_experts_per_tok < 1) {
    return Status::InvalidArgument(fmt::format("{}/config.json: num_experts_per_tok = {}: must be >= 1", source,
                                               model_config.num_experts_per_tok));
  }

  // Per (layer, expert): tensor count and byte sums.
  struct ExpertBytes {
    int32_t tensors = 0;
    double raw = 0, e_stored = 0, sm = 0;
    uint64_t f_slot = 0, e_slot = 0, sm_slot = 0;  // 4 KiB-rounded parts (pool_layout.h)
  };
  auto round_up = [](uint64_t x) { return (x + kChunkAlignmentBytes - 1) / kChunkAlignmentBytes * kChunkAlignmentBytes; };
  std::map<std::pair<int32_t, int32_t>, ExpertBytes> experts;
  std::set<int32_t> layers;
  double e_chunks = 0, e_stored = 0, e_raw = 0, sm_chunks = 0, sm_bytes = 0;
  for (const ExpertTensorInfo& t : manifest.expert_tensors) {
    ExpertBytes& b = experts[{t.layer_id, t.expert_id}];
    ++b.tensors;
    b.raw += static_cast<double>(t.raw_bytes());
    b.f_slot += round_up(t.raw_bytes());
    for (const ChunkInfo& c : t.chunks) {
      if (c.kind == ChunkKind::kE) {
        b.e_stored += static_cast<double>(c.stored_bytes);
        b.e_slot += round_up(c.stored_bytes);
        e_chunks += 1;
        e_stored += static_cast<double>(c.stored_bytes);
        e_raw += static_cast<double>(c.raw_bytes);
      } else {
        b.sm += static_cast<double>(c.stored_bytes);
        b.sm_slot += round_up(c.stored_bytes);
        sm_chunks += 1;
        sm_bytes += static_cast<double>(c.stored_bytes);
      }
    }
    layers.insert(t.layer_id);
  }

  ModelPlanInputs in;
  in.arch = manifest.arch;
  in.n_experts = manifest.n_experts;
  in.top_k = static_cast<int32_t>(model_config.num_experts_per_tok);
  in.n_moe_layers = static_cast<int32_t>(layers.size());
  in.n_shards = manifest.n_shards;
  in.tensors_per_expert = experts.begin()->second.tensors;
  for (const auto& [key, b] : experts) {
    if (b.tensors != in.tensors_per_expert) {
      return Status::InvalidArgument(fmt::format("{}: layer {} expert {} has {} tensors, layer {} expert {} has {}",
                                                 source, key.first, key.second, b.tensors,
                                                 experts.begin()->first.first, experts.begin()->first.second,
                                                 in.tensors_per_expert));
    }
    in.pool_costs.bytes_per_expert[kPoolF] += b.raw;
    in.pool_costs.bytes_per_expert[kPoolC] += b.e_stored + b.sm;
    in.pool_costs.bytes_per_expert[kPoolS] += b.sm;
    in.pool_costs.bytes_per_expert[kPoolE] += b.e_stored;
    const double slot[kPoolCount] = {static_cast<double>(b.f_slot), static_cast<double>(b.e_slot + b.sm_slot),
                                    static_cast<double>(b.sm_slot), static_cast<double>(b.e_slot)};
    for (int p = 0; p < kPoolCount; ++p) {
      in.slot_costs.bytes_per_expert[p] = std::max(in.slot_costs.bytes_per_expert[p], slot[p]);
    }
  }
  for (double& bytes : in.pool_costs.bytes_per_expert) bytes /= static_cast<double>(experts.size());
  if (in.n_experts <= 0) {
    std::set<int32_t> ids;
    for (const auto& [key, b] : experts) ids.insert(key.second);
    in.n_experts = static_cast<int32_t>(ids.size());
  }
  in.sm_chunk_bytes = sm_chunks > 0 ? sm_bytes / sm_chunks : 0;
  in.e_chunk_stored_bytes = e_chunks > 0 ? e_stored / e_chunks : 0;
  in.e_chunk_raw_bytes = e_chunks > 0 ? e_raw / e_chunks : 0;
  return in;
}

CostModel DefaultCostModel(const ModelPlanInputs& model, int32_t n_workers) {
  CostModel cost;
  cost.sm_read_us = kDefaultReadLatencyUs + model.sm_chunk_bytes / kDefaultReadBytesPerUs;
  cost.e_read_us = kDefaultReadLatencyUs + model.e_chunk_stored_bytes / kDefaultReadBytesPerUs;
  cost.decompress_us = model.e_chunk_raw_bytes / kDefaultDecodeBytesPerUs;
  cost.n_shards = std::max(1, model.n_shards);
  cost.n_workers = std::max(1, n_workers);
  cost.tensors_per_expert = std::max(1, model.tensors_per_expert);
  return cost;
}

}  // namespace zipmoe::cache_manager
