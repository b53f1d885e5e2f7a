// scheduler_bench: simulated makespan / Lemma B.3 bound of ZipMoE's cache-affinity order
// (Algorithm 1) against the FIFO baseline, over random MoE layers, printed as a Markdown table.
//
//   scheduler_bench [n_layers=500] [seed=1]
//
// Costs are synthetic but shaped like the paper's edge setting (§2.3 observation I: K·c on 3
// workers ≈ reading the SM-chunk, ρ ≈ 0.33): u = 1000 µs, K = 8, L = 6, c = f·u/K for a decode
// factor f. States are drawn per tensor: M 40 %, E/S/C/F 15 % each. Decode steps route 8 experts with
// 1-4 tokens; prefill routes 48 experts with 1-64 tokens; pₙ = 30 µs + per-token cost (67 µs/token
// makes the layer's compute about equal to its I/O).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <vector>

#include "services/scheduler/block_scheduler.h"

namespace {

using zipmoe::CompressionState;
using zipmoe::ExpertProj;
using namespace zipmoe::scheduler;

struct Regime {
  const char* name;
  int n_experts;
  int max_tokens;
  double us_per_token;
  double decode_factor;  // c = decode_factor · u / K
};

constexpr double kSmReadUs = 1000.0;  // u
constexpr double kCompressRatio = 0.33;  // ρ
constexpr int32_t kShards = 8;           // K
constexpr int32_t kWorkers = 6;          // L

CompressionState DrawState(std::mt19937_64& rng) {
  const int r = std::uniform_int_distribution<int>(0, 99)(rng);
  if (r < 40) return CompressionState::kMiss;
  if (r < 55) return CompressionState::kE;
  if (r < 70) return CompressionState::kS;
  if (r < 85) return CompressionState::kC;
  return CompressionState::kF;
}

std::vector<ExpertTask> DrawLayer(const Regime& regime, std::mt19937_64& rng) {
  std::vector<ExpertTask> tasks;
  for (int e = 0; e < regime.n_experts; ++e) {
    const int tokens = std::uniform_int_distribution<int>(1, regime.max_tokens)(rng);
    const double compute_us = 30.0 + regime.us_per_token * tokens;
    for (int t = 0; t < 3; ++t) {
      tasks.push_back({e, static_cast<ExpertProj>(t), DrawState(rng), tokens, compute_us});
    }
  }
  return tasks;
}

struct Stats {
  double sum_ratio = 0.0, max_ratio = 0.0, sum_speedup = 0.0;
  int n = 0;
  void Add(double makespan_us, double bound_us, double baseline_us) {
    const double ratio = makespan_us / bound_us;
    sum_ratio += ratio;
    max_ratio = std::max(max_ratio, ratio);
    sum_speedup += baseline_us / makespan_us;
    ++n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int n_layers = argc > 1 ? std::atoi(argv[1]) : 500;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  const Regime regimes[] = {
      {"decode, fast decompress (f=1)", 8, 4, 20.0, 1.0},
      {"decode, paper-like (f=3)", 8, 4, 20.0, 3.0},
      {"decode, slow decompress (f=6)", 8, 4, 20.0, 6.0},
      {"prefill, fast decompress (f=1)", 48, 64, 8.0, 1.0},
      {"prefill, paper-like (f=3)", 48, 64, 8.0, 3.0},
      {"prefill, slow decompress (f=6)", 48, 64, 8.0, 6.0},
      {"prefill, compute ~ I/O (f=3)", 48, 64, 67.0, 3.0},
      {"prefill, compute ~ I/O (f=6)", 48, 64, 67.0, 6.0},
  };
  struct Variant {
    const char* name;
    SchedulerOptions options;
  };
  const Variant variants[] = {
      {"zipmoe (default)", {}},
      {"zipmoe all-levels", {BlockFill::kTypeIIOnly, DominanceRule::kAllLevels, InsertionStart::kAfterHeavierSameType}},
      {"zipmoe U=(sII,sI)", {BlockFill::kTypeIIThenTypeI, DominanceRule::kAnyLevel, InsertionStart::kAfterHeavierSameType}},
      {"zipmoe literal Alg.1", {BlockFill::kTypeIIThenTypeI, DominanceRule::kAnyLevel, InsertionStart::kBlockHead}},
  };
  std::printf("scheduler_bench: %d layers per regime, seed %llu, u=%.0f us, rho=%.2f, K=%d, L=%d, bound factor %.3f\n\n",
              n_layers, static_cast<unsigned long long>(seed), kSmReadUs, kCompressRatio, kShards, kWorkers,
              ApproximationFactor(kWorkers));
  std::printf("| regime | order | mean makespan/bound | max makespan/bound | mean baseline/order | ms per layer |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Regime& regime : regimes) {
    const CostModel cost =
        CostModelFromRatio(kSmReadUs, kCompressRatio, regime.decode_factor * kSmReadUs / kShards, 0.0, kShards, kWorkers);
    std::mt19937_64 rng(seed);
    std::vector<std::vector<ExpertTask>> layers;
    for (int i = 0; i < n_layers; ++i) layers.push_back(DrawLayer(regime, rng));
    std::vector<double> baseline_us(layers.size()), bound_us(layers.size());
    Stats baseline;
    for (size_t i = 0; i < layers.size(); ++i) {
      zipmoe::Result<LayerSchedule> b = ScheduleLayerBaseline(layers[i], cost);
      if (!b.ok()) {
        std::fprintf(stderr, "E: %s\n", b.status().ToString().c_str());
        return 1;
      }
      baseline_us[i] = b->makespan_us;
      bound_us[i] = b->bound.bound_us;
      baseline.Add(b->makespan_us, b->bound.bound_us, b->makespan_us);
    }
    std::printf("| %s | fifo baseline | %.4f | %.4f | 1.0000 | - |\n", regime.name, baseline.sum_ratio / baseline.n,
                baseline.max_ratio);
    for (const Variant& v : variants) {
      Stats stats;
      const std::clock_t start = std::clock();
      for (size_t i = 0; i < layers.size(); ++i) {
        zipmoe::Result<LayerSchedule> s = ScheduleLayer(layers[i], cost, v.options);
        if (!s.ok()) {
          std::fprintf(stderr, "E: %s\n", s.status().ToString().c_str());
          return 1;
        }
        stats.Add(s->makespan_us, bound_us[i], baseline_us[i]);
      }
      const double ms_per_layer = 1000.0 * (std::clock() - start) / CLOCKS_PER_SEC / layers.size();
      std::printf("| %s | %s | %.4f | %.4f | %.4f | %.3f |\n", regime.name, v.name, stats.sum_ratio / stats.n,
                  stats.max_ratio, stats.sum_speedup / stats.n, ms_per_layer);
    }
  }
  return 0;
}
