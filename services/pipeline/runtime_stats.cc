#include "services/pipeline/runtime_stats.h"

#include <string>

namespace zipmoe::runtime {

namespace cm = cache_manager;

double MeanMakespanOverBound(const RuntimeStats& stats) {
  double sum = 0;
  uint64_t n = 0;
  for (const LayerTotals& t : stats.per_layer) {
    sum += t.ratio_sum;
    n += t.ratio_runs;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

double MeanMakespanUs(const RuntimeStats& stats) {
  double sum = 0;
  uint64_t n = 0;
  for (const LayerTotals& t : stats.per_layer) {
    sum += t.makespan_us;
    n += t.runs;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

nlohmann::json RuntimeStatsToJson(const RuntimeStats& stats) {
  nlohmann::json j;
  const cm::CacheCounters& c = stats.cache;
  nlohmann::json pools = nlohmann::json::object();
  for (cm::Pool p : cm::kPoolOrder) {
    const cm::PoolCounters& pc = c.pools[cm::PoolIndex(p)];
    pools[std::string(1, cm::PoolLetter(p))] = {{"requests", pc.requests},
                                                {"admissions", pc.admissions},
                                                {"evictions", pc.evictions},
                                                {"removals", pc.removals},
                                                {"resident_experts", pc.resident_experts},
                                                {"resident_bytes", pc.resident_bytes},
                                                {"capacity_bytes", pc.capacity_bytes}};
  }
  j["requests"] = {{"total", c.lookups}, {"hits", c.HitsTotal()}, {"misses", c.misses},
                   {"hit_rate", c.lookups > 0 ? static_cast<double>(c.HitsTotal()) / c.lookups : 0.0}};
  j["pools"] = pools;
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < stats.per_layer.size(); ++l) {
    const LayerTotals& t = stats.per_layer[l];
    if (t.runs == 0) continue;
    nlohmann::json lj;
    lj["layer"] = l;
    if (l < c.layer_requests.size()) {
      const auto& r = c.layer_requests[l];
      lj["requests"] = {{"M", r[0]}, {"E", r[1]}, {"S", r[2]}, {"C", r[3]}, {"F", r[4]}};
      lj["misses"] = r[0];
    }
    lj["runs"] = t.runs;
    lj["waves"] = t.waves;
    lj["mean_makespan_us"] = t.makespan_us / static_cast<double>(t.runs);
    lj["mean_bound_us"] = t.bound_us / static_cast<double>(t.runs);
    lj["mean_makespan_over_bound"] = t.ratio_runs > 0 ? t.ratio_sum / static_cast<double>(t.ratio_runs) : 0.0;
    layers.push_back(lj);
  }
  j["layers"] = layers;
  j["io"] = {{"ops", stats.io_ops},
             {"bytes_e", stats.io_bytes_e},
             {"bytes_sm", stats.io_bytes_sm},
             {"bytes_transferred", stats.io_read_bytes},
             {"seconds", stats.io_seconds},
             {"direct_io", stats.direct_io}};
  j["decode"] = {{"ops", stats.decode_ops}, {"seconds", stats.decode_seconds}};
  j["recovery"] = {{"ops", stats.recover_ops}, {"seconds", stats.recover_seconds}};
  j["admit"] = {{"calls", stats.admit_calls}, {"outcomes", stats.admit_outcomes}};
  j["schedule_seconds"] = stats.schedule_seconds;
  j["mean_makespan_us"] = MeanMakespanUs(stats);
  j["mean_makespan_over_bound"] = MeanMakespanOverBound(stats);
  const PrefetchTotals& pf = stats.prefetch;
  j["prefetch"] = {{"mode", stats.prefetch_mode},
                   {"predicted", pf.predicted},
                   {"issued", pf.issued},
                   {"used", pf.used},
                   {"wasted", pf.wasted},
                   {"failed", pf.failed},
                   {"used_bytes", pf.used_bytes},
                   {"wasted_bytes", pf.wasted_bytes},
                   {"accuracy", pf.used + pf.wasted > 0 ? static_cast<double>(pf.used) / (pf.used + pf.wasted) : 0.0}};
  const SubstitutionTotals& sub = stats.substitution;
  j["substitution"] = {
      {"substituted", sub.substituted},
      {"routed", sub.routed},
      {"rate", sub.routed > 0 ? static_cast<double>(sub.substituted) / static_cast<double>(sub.routed) : 0.0}};
  j["arena"] = {{"budget_bytes", stats.budget_bytes},
                {"mapped_bytes", stats.arena_bytes},
                {"staging_slots", stats.staging_slots}};
  j["abandoned_layers"] = stats.abandoned_layers;
  return j;
}

}  // namespace zipmoe::runtime
