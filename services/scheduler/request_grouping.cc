#include "services/scheduler/request_grouping.h"

#include <algorithm>

#include <fmt/format.h>

namespace zipmoe::scheduler {

const char* RequestGroupingName(RequestGrouping grouping) {
  switch (grouping) {
    case RequestGrouping::kNone:
      return "none";
    case RequestGrouping::kCoServe:
      return "coserve";
  }
  return "?";
}

Result<RequestGrouping> ParseRequestGrouping(const std::string& text) {
  if (text == "none") return RequestGrouping::kNone;
  if (text == "coserve") return RequestGrouping::kCoServe;
  return Status::InvalidArgument(
      fmt::format("unknown request grouping '{}': expected none (first come, first served) or coserve "
                  "(waiting requests whose experts are at hand first)",
                  text));
}

namespace {

// Adds `more` into `into` (both per layer, ascending, distinct).
void Merge(ExpertSets* into, const ExpertSets& more) {
  if (into->size() < more.size()) into->resize(more.size());
  for (size_t l = 0; l < more.size(); ++l) {
    std::vector<int32_t> merged;
    std::set_union((*into)[l].begin(), (*into)[l].end(), more[l].begin(), more[l].end(), std::back_inserter(merged));
    (*into)[l].swap(merged);
  }
}

}  // namespace

double DependencyOverlap(const ExpertSets& predicted, const ExpertSets& at_hand) {
  size_t total = 0;
  size_t hit = 0;
  for (size_t l = 0; l < predicted.size(); ++l) {
    total += predicted[l].size();
    if (l >= at_hand.size()) continue;
    for (int32_t e : predicted[l]) {
      if (std::binary_search(at_hand[l].begin(), at_hand[l].end(), e)) ++hit;
    }
  }
  return total == 0 ? 1.0 : static_cast<double>(hit) / static_cast<double>(total);
}

std::vector<size_t> ChooseAdmissions(const std::vector<GroupingCandidate>& window, const ExpertSets& at_hand,
                                     size_t slots, int max_passes) {
  std::vector<size_t> picked;
  std::vector<bool> taken(window.size(), false);
  ExpertSets hand = at_hand;
  while (picked.size() < std::min(slots, window.size())) {
    size_t best = 0;  // a starving candidate first, the oldest of them
    while (best < window.size() && (taken[best] || window[best].passed_over < max_passes)) ++best;
    if (best == window.size()) {
      double best_overlap = -1.0;
      for (size_t i = 0; i < window.size(); ++i) {
        if (taken[i]) continue;
        const double overlap = DependencyOverlap(*window[i].predicted, hand);
        if (overlap > best_overlap) {  // strict: ties go to the one queued first
          best_overlap = overlap;
          best = i;
        }
      }
    }
    taken[best] = true;
    picked.push_back(best);
    Merge(&hand, *window[best].predicted);
  }
  return picked;
}

}  // namespace zipmoe::scheduler
