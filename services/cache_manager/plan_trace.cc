#include "services/cache_manager/plan_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "services/cache_manager/plan_probability.h"

namespace zipmoe::cache_manager {
namespace {

Result<int64_t> GetInt(const nlohmann::json& j, const char* key, const std::string& where, bool required,
                       int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return Status::InvalidArgument(fmt::format("{}: missing \"{}\"", where, key));
    return fallback;
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Status::InvalidArgument(fmt::format("{}: \"{}\" = {}: expected an integer >= 0", where, key, it->dump()));
  }
  return it->get<int64_t>();
}

Result<std::vector<int32_t>> GetIntArray(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& a = j.at(key);
  if (!a.is_array()) return Status::InvalidArgument(fmt::format("{}: \"{}\" is not an array", where, key));
  std::vector<int32_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() > INT32_MAX) {
      return Status::InvalidArgument(
          fmt::format("{}: \"{}\"[{}] = {}: expected an integer >= 0", where, key, i, a[i].dump()));
    }
    out.push_back(static_cast<int32_t>(a[i].get<int64_t>()));
  }
  return out;
}

}  // namespace

std::string FormatTraceLine(const ActivationRecord& record) {
  nlohmann::json j;
  j["step"] = record.step;
  j["layer"] = record.layer_id;
  j["experts"] = record.expert_ids;
  if (!record.tokens_per_expert.empty()) j["tokens"] = record.tokens_per_expert;
  if (record.n_tokens > 0) j["n_tokens"] = record.n_tokens;
  if (!record.session.empty()) j["session"] = record.session;
  return j.dump();
}

Result<ActivationRecord> ParseTraceLine(const std::string& line, const std::string& where) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::InvalidArgument(fmt::format("{}: not a JSON object", where));
  }
  ActivationRecord r;
  ZM_ASSIGN_OR_RETURN(r.step, GetInt(j, "step", where, true, 0));
  ZM_ASSIGN_OR_RETURN(int64_t layer, GetInt(j, "layer", where, true, 0));
  ZM_ASSIGN_OR_RETURN(int64_t n_tokens, GetInt(j, "n_tokens", where, false, 0));
  if (layer > INT32_MAX || n_tokens > INT32_MAX) {
    return Status::InvalidArgument(fmt::format("{}: \"layer\" or \"n_tokens\" out of range", where));
  }
  r.layer_id = static_cast<int32_t>(layer);
  r.n_tokens = static_cast<int32_t>(n_tokens);
  if (!j.contains("experts")) return Status::InvalidArgument(fmt::format("{}: missing \"experts\"", where));
  ZM_ASSIGN_OR_RETURN(r.expert_ids, GetIntArray(j, "experts", where));
  std::set<int32_t> seen;
  for (int32_t e : r.expert_ids) {
    if (!seen.insert(e).second) {
      return Status::InvalidArgument(fmt::format("{}: expert {} listed twice in \"experts\"", where, e));
    }
  }
  if (j.contains("tokens")) {
    ZM_ASSIGN_OR_RETURN(r.tokens_per_expert, GetIntArray(j, "tokens", where));
    if (r.tokens_per_expert.size() != r.expert_ids.size()) {
      return Status::InvalidArgument(fmt::format("{}: \"tokens\" has {} entries, \"experts\" has {}", where,
                                                 r.tokens_per_expert.size(), r.expert_ids.size()));
    }
  }
  if (j.contains("session")) {
    if (!j["session"].is_string()) {
      return Status::InvalidArgument(fmt::format("{}: \"session\" is not a string", where));
    }
    r.session = j["session"].get<std::string>();
  }
  return r;
}

Result<std::vector<ActivationRecord>> ReadTrace(const std::string& path) {
  if (!FileExists(path)) return Status::NotFound(fmt::format("{}: no such trace file", path));
  std::ifstream in(path);
  if (!in) return Status::IoError(fmt::format("{}: cannot open trace file", path));
  std::vector<ActivationRecord> records;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ZM_ASSIGN_OR_RETURN(ActivationRecord r, ParseTraceLine(line, fmt::format("{}:{}", path, line_no)));
    records.push_back(std::move(r));
  }
  if (in.bad()) return Status::IoError(fmt::format("{}: read failed after line {}", path, line_no));
  return records;
}

Result<std::map<int32_t, std::map<int32_t, uint64_t>>> ReadActivationCounts(const std::string& path) {
  std::map<int32_t, std::map<int32_t, uint64_t>> counts;
  if (path.empty()) return counts;
  ZM_ASSIGN_OR_RETURN(const std::vector<ActivationRecord> records, ReadTrace(path));
  for (const ActivationRecord& r : records)
    for (int32_t e : r.expert_ids) ++counts[r.layer_id][e];
  return counts;
}

int32_t BatchSizeOf(const ActivationRecord& record, int top_k) {
  if (record.n_tokens > 0) return record.n_tokens;
  int64_t routed = 0;
  for (int32_t t : record.tokens_per_expert) routed += t;
  if (routed <= 0 || top_k < 1) return 1;
  return static_cast<int32_t>((routed + top_k - 1) / top_k);
}

Result<std::map<int32_t, RankFrequencies>> ComputeRankFrequencies(const std::vector<ActivationRecord>& records,
                                                                  int32_t n_experts, int top_k) {
  if (n_experts < 1 || top_k < 1 || top_k > n_experts) {
    return Status::InvalidArgument(
        fmt::format("n_experts = {}, top_k = {}: need 1 <= top_k <= n_experts", n_experts, top_k));
  }
  if (records.empty()) return Status::InvalidArgument("trace has no activation records");
  // (batch size, layer, session) -> activation count per expert id, and number of records.
  struct Counts {
    std::vector<int64_t> per_expert;
    int64_t steps = 0;
  };
  std::map<std::tuple<int32_t, int32_t, std::string>, Counts> groups;
  for (const ActivationRecord& r : records) {
    Counts& c = groups[{BatchSizeOf(r, top_k), r.layer_id, r.session}];
    if (c.per_expert.empty()) c.per_expert.assign(n_experts, 0);
    for (int32_t e : r.expert_ids) {
      if (e >= n_experts) {
        return Status::InvalidArgument(fmt::format("trace step {} layer {}: expert {} >= n_experts = {}", r.step,
                                                   r.layer_id, e, n_experts));
      }
      ++c.per_expert[e];
    }
    ++c.steps;
  }

  // (batch size, layer) -> Σ over sessions of sorted counts, Σ steps.
  std::map<std::pair<int32_t, int32_t>, std::pair<std::vector<double>, int64_t>> layers;
  for (auto& [key, c] : groups) {
    auto& [sum, steps] = layers[{std::get<0>(key), std::get<1>(key)}];
    if (sum.empty()) sum.assign(n_experts, 0.0);
    std::sort(c.per_expert.begin(), c.per_expert.end(), std::greater<int64_t>());
    for (int32_t r = 0; r < n_experts; ++r) sum[r] += static_cast<double>(c.per_expert[r]);
    steps += c.steps;
  }

  std::map<int32_t, RankFrequencies> out;
  for (auto& [key, value] : layers) {
    RankFrequencies& rf = out[key.first];
    rf.batch_size = key.first;
    rf.n_records += value.second;
    std::vector<double> f = value.first;
    for (double& x : f) x /= static_cast<double>(value.second);
    rf.per_layer[key.second] = std::move(f);
  }
  for (auto& [batch, rf] : out) {
    std::vector<double> mean(n_experts, 0.0);
    for (const auto& [layer, f] : rf.per_layer) {
      for (int32_t r = 0; r < n_experts; ++r) mean[r] += f[r];
    }
    for (double& x : mean) x /= static_cast<double>(rf.per_layer.size());
    for (double x : mean) rf.mean_active_experts += x;
    rf.active_k = static_cast<int32_t>(
        std::clamp<int64_t>(std::llround(rf.mean_active_experts), 1, static_cast<int64_t>(n_experts)));
    ZM_ASSIGN_OR_RETURN(rf.rank_freq, NormalizeInclusion(mean, rf.active_k));
    // Capping can leave ulp-level rises where values tie; restore monotonicity exactly.
    for (size_t r = 1; r < rf.rank_freq.size(); ++r) rf.rank_freq[r] = std::min(rf.rank_freq[r], rf.rank_freq[r - 1]);
  }
  return out;
}

std::vector<double> UniformRankFrequencies(int32_t n_experts, int top_k) {
  return std::vector<double>(static_cast<size_t>(std::max(n_experts, 0)),
                             n_experts > 0 ? static_cast<double>(top_k) / n_experts : 0.0);
}

}  // namespace zipmoe::cache_manager
