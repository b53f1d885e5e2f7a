// Dependency-aware request grouping for continuous batching: CoServe's request arrangement
// (coserve.txt §4.2, "requests that rely on the same expert are grouped closer together within a
// defined window") adapted to an MoE language model, where a request depends on the experts its
// tokens route to in every MoE layer.
//
// When more sequences wait than the batch has free slots, the API's batch loop (services/api/api_server.h) looks at the
// first `window` waiting sequences (FIFO order) and admits, one slot at a time, the one whose
// predicted experts (executor::Generator::PredictExperts) are most "at hand": already served without
// I/O (the provider's cached experts and those the running batch just used,
// Generator::ExpertsAtHand) or predicted for a sequence admitted before it in this round. A sequence
// passed over `window` times is admitted before any other, oldest first, so none waits more than
// `window` admissions beyond its FIFO turn. Grouping changes only the order sequences start in:
// every sequence's tokens stay those of its lone run (the CPU kernels are batch-invariant).
// Off by default for every policy: on the benchmark models a prefill touches most experts, so the
// prediction separates requests little, and reordering prefills doubled the tail TTFT without
// raising the hit rate (docs/benchmarks.md (q)).
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace zipmoe::scheduler {

enum class RequestGrouping : uint8_t {
  kNone = 0,     // first come, first served
  kCoServe = 1,  // the arrangement above
};

// "none", "coserve".
const char* RequestGroupingName(RequestGrouping grouping);
// Errors: kInvalidArgument naming the text and the accepted names.
Result<RequestGrouping> ParseRequestGrouping(const std::string& text);

// Experts per layer: [layers], each the distinct expert ids of that layer ascending (empty = none).
using ExpertSets = std::vector<std::vector<int32_t>>;

// |predicted ∩ at_hand| / |predicted| over every layer's (layer, expert) pairs; 1 when nothing is
// predicted (a request that depends on nothing costs nothing). Layers missing from `at_hand` hold
// nothing.
double DependencyOverlap(const ExpertSets& predicted, const ExpertSets& at_hand);

// One waiting sequence of the window, in FIFO order.
struct GroupingCandidate {
  const ExpertSets* predicted = nullptr;  // its predicted experts (not null)
  int passed_over = 0;                    // admissions that went to a sequence queued after it
};

// Which candidates to admit into `slots` free batch slots, in admission order (indices into
// `window`): each pick is the candidate passed over at least `max_passes` times that queued first,
// if any, else the one with the largest DependencyOverlap against `at_hand` plus the predictions of
// those already picked (ties: queued first). Returns min(slots, window.size()) distinct indices.
std::vector<size_t> ChooseAdmissions(const std::vector<GroupingCandidate>& window, const ExpertSets& at_hand,
                                     size_t slots, int max_passes);

}  // namespace zipmoe::scheduler
