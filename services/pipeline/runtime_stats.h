// What the embedded runtime measured (`zipmoe generate --stats-json`, `zipmoe replay`): cache
// requests per pool and misses (total and per layer), bytes read (E-chunks and SM-chunks apart),
// decode/recovery operations and their time, and per MoE layer the measured makespan next to its
// Lemma B.3 lower bound (ZipMoE Appendix B).
//
// Per layer, the bound is ComputeLowerBound (services/scheduler/lower_bound.h) over the layer's
// tasks with the *measured* operation times of that layer: u, v, c and the recovery time are the
// layer's mean SM-chunk read, E-chunk read, E-chunk decode and tensor recovery times (the profile's
// when the layer did none), L the worker count, and pₙ the time the executor held expert n's lease
// (its computation). The measured makespan is BeginLayer → EndLayer wall time.
//
// Plain value types; callable from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/cache_manager/cache_manager.h"
#include "services/scheduler/scheduler_types.h"

namespace zipmoe::runtime {

// Operation times of one layer run (sums in µs).
struct LayerMeasure {
  uint64_t sm_reads = 0, e_reads = 0, decodes = 0, recoveries = 0;
  double sm_read_us = 0, e_read_us = 0, decode_us = 0, recover_us = 0;
  uint64_t waves = 0;
  std::vector<scheduler::ExpertTask> tasks;  // one per (expert, tensor), with its state
  std::map<int32_t, double> compute_us;      // expert id → lease hold time
};

struct LayerTotals {
  uint64_t runs = 0;            // BeginLayer/EndLayer pairs
  uint64_t waves = 0;           // scheduler waves started (more than runs: the layer did not fit)
  double makespan_us = 0;       // Σ measured makespans
  double bound_us = 0;          // Σ lower bounds
  double ratio_sum = 0;         // Σ makespan / bound (runs with bound > 0)
  uint64_t ratio_runs = 0;
};

// Prefetching (OffloadExpertProvider::Prefetch). Accuracy = used / (used + wasted).
struct PrefetchTotals {
  uint64_t predicted = 0;     // experts predicted by the executor (all states)
  uint64_t issued = 0;        // prefetches started (staging slot taken, reads submitted)
  uint64_t used = 0;          // adopted by the layer that selected them
  uint64_t wasted = 0;        // started and dropped unused
  uint64_t failed = 0;        // dropped after an operation failed
  uint64_t used_bytes = 0;    // bytes read for used prefetches (incl. padding)
  uint64_t wasted_bytes = 0;  // bytes read for wasted prefetches (incl. padding)
};

// SMoE expert substitution (LayerRouting::substituted): (token, slot) pairs whose low-score expert
// the executor replaced by a cached one, out of every routed (token, slot) pair.
struct SubstitutionTotals {
  uint64_t substituted = 0;
  uint64_t routed = 0;
};

struct RuntimeStats {
  cache_manager::CacheCounters cache;
  uint64_t io_ops = 0;
  uint64_t io_bytes_e = 0;      // verified stored bytes of E-chunks read
  uint64_t io_bytes_sm = 0;     // ... of SM-chunks
  uint64_t io_read_bytes = 0;   // bytes transferred incl. 4 KiB padding
  double io_seconds = 0;        // time in pread
  uint64_t decode_ops = 0;
  double decode_seconds = 0;    // worker time decoding E-chunks
  uint64_t recover_ops = 0;
  double recover_seconds = 0;   // worker time recovering BF16 tensors
  uint64_t admit_calls = 0;
  std::map<std::string, uint64_t> admit_outcomes;  // AdmitOutcomeName → count
  double schedule_seconds = 0;  // time in ScheduleLayer
  std::vector<LayerTotals> per_layer;  // [n_layers]
  uint64_t staging_slots = 0;
  uint64_t arena_bytes = 0;     // mapped: pools + staging (≤ budget)
  uint64_t budget_bytes = 0;
  bool direct_io = false;
  PrefetchTotals prefetch;
  std::string prefetch_mode = "none";
  SubstitutionTotals substitution;
  uint64_t abandoned_layers = 0;  // layers the executor gave up after BeginLayer (an error of its own)
};

// Mean of makespan / bound over every layer run (0 when none).
double MeanMakespanOverBound(const RuntimeStats& stats);
// Mean measured makespan per layer run, µs.
double MeanMakespanUs(const RuntimeStats& stats);
// The --stats-json object (docs/architecture.md "Runtime statistics" lists the keys).
nlohmann::json RuntimeStatsToJson(const RuntimeStats& stats);

}  // namespace zipmoe::runtime
