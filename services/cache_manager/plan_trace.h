// Expert-activation traces and the rank-based workload model of the cache planner (ZipMoE §3.4
// "Rank-Based Workload Modeling").
//
// A trace is JSON lines, one record per (step, MoE layer) (docs/planner.md "Trace format"):
//   {"step":12,"layer":3,"experts":[0,5,9,14],"tokens":[1,1,1,1]}
// with optional "n_tokens" (tokens in the batch at that step) and "session" (a string: records of
// one prompt/conversation). From the records, ComputeRankFrequencies derives f_r, the probability
// that the r-th most frequently selected expert of a layer is selected at a step, per batch size.
//
// Plain value types and pure functions (ReadTrace reads one file); callable from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace zipmoe::cache_manager {

struct ActivationRecord {
  int64_t step = 0;
  int32_t layer_id = 0;
  std::vector<int32_t> expert_ids;         // distinct experts selected at this step and layer
  std::vector<int32_t> tokens_per_expert;  // empty, or same length: tokens routed to each expert
  int32_t n_tokens = 0;                    // tokens in the batch; 0 = derive (see BatchSizeOf)
  std::string session;                     // "" = the default session
};

// One JSON line (no newline) in the trace format; optional fields only when set.
std::string FormatTraceLine(const ActivationRecord& record);

// Parses one JSON line. `where` ("FILE:LINE") prefixes error messages.
// Errors: kInvalidArgument (not a JSON object, missing/ill-typed "step", "layer" or "experts",
// negative ids, repeated expert, "tokens" of a different length than "experts").
Result<ActivationRecord> ParseTraceLine(const std::string& line, const std::string& where);

// Reads a whole trace (blank lines skipped). Errors: kNotFound / kIoError naming the file, and
// ParseTraceLine's errors naming FILE:LINE.
Result<std::vector<ActivationRecord>> ReadTrace(const std::string& path);

// How often each expert was selected in the trace at `path`: counts[layer_id][expert_id] = the records
// of that layer naming it (the warm start's ranking, OffloadExpertProvider::Preload). Experts never
// selected are absent; an empty path gives no counts. Errors: ReadTrace's.
Result<std::map<int32_t, std::map<int32_t, uint64_t>>> ReadActivationCounts(const std::string& path);

// Batch size of a record: n_tokens if set, else ceil(Σ tokens_per_expert / top_k) (each token picks
// top_k experts), else 1.
int32_t BatchSizeOf(const ActivationRecord& record, int top_k);

// The rank-based workload model for one batch size.
struct RankFrequencies {
  int32_t batch_size = 1;
  int64_t n_records = 0;             // (step, layer) records in this bucket
  std::map<int32_t, std::vector<double>> per_layer;  // layer_id -> [N] f_r, non-increasing, Σ = mean
                                                     // distinct experts per step of that layer
  double mean_active_experts = 0;    // Σ_r of the layer-averaged f (k for batch size 1)
  int32_t active_k = 0;              // round(mean_active_experts), in [1, N]: the planner's k
  std::vector<double> rank_freq;     // [N] layer-averaged f_r rescaled to sum to active_k (capped at 1)
};

// Rank-based inclusion probabilities per batch size (§3.4). For each batch size, layer and session,
// experts are ranked by their activation count in that session (ties in any order), and
//   f_r(layer) = Σ_sessions count_r(session) / Σ_sessions steps(session)
// where count_r is the r-th largest count and steps the session's records for that layer. Ranking
// per session keeps the skew that changes expert identities across prompts would otherwise wash out.
//   records: any order; n_experts: N; top_k: k of the model (for BatchSizeOf)
// Returns batch size -> model. Errors: kInvalidArgument (no records, expert id >= n_experts naming
// the step and layer, n_experts or top_k < 1).
Result<std::map<int32_t, RankFrequencies>> ComputeRankFrequencies(const std::vector<ActivationRecord>& records,
                                                                  int32_t n_experts, int top_k);

// f_r = k / N for every rank: the workload model when no trace is given.
std::vector<double> UniformRankFrequencies(int32_t n_experts, int top_k);

}  // namespace zipmoe::cache_manager
