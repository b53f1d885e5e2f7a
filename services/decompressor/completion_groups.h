// CompletionGroups: which decode completions a decompressor worker sends now and which it holds, so
// that an expert's completions leave together (DecompressorWorker; docs/messaging.md "Batched
// frames"). An op is Register()ed when the worker accepts it, under its expert (layer_id, expert_id);
// Complete() returns what to send: nothing while other ops of that expert are registered and this
// one succeeded; else every held completion of the expert, then this one. Ops without an expert
// label (a negative id) are never held. Each registered op must be completed exactly once.
// Not thread-safe: the owner serialises calls (DecompressorWorker holds its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace zipmoe::decompressor {

template <typename Completion>
class CompletionGroups {
 public:
  using ExpertKey = std::pair<int32_t, int32_t>;  // (layer_id, expert_id)

  void Register(ExpertKey expert) {
    if (Labelled(expert)) ++open_[expert];
  }

  std::vector<Completion> Complete(ExpertKey expert, Completion done, bool ok) {
    std::vector<Completion> out;
    if (!Labelled(expert)) {
      out.push_back(std::move(done));
      return out;
    }
    auto open = open_.find(expert);
    const bool more = open != open_.end() && --open->second > 0;
    if (open != open_.end() && open->second <= 0) open_.erase(open);
    std::vector<Completion>& held = held_[expert];
    held.push_back(std::move(done));
    if (more && ok) return out;
    out.swap(held);
    held_.erase(expert);
    return out;
  }

  size_t held() const {
    size_t n = 0;
    for (const auto& [expert, completions] : held_) n += completions.size();
    return n;
  }

 private:
  static bool Labelled(ExpertKey expert) { return expert.first >= 0 && expert.second >= 0; }

  std::map<ExpertKey, int32_t> open_;                 // registered, not completed, per expert
  std::map<ExpertKey, std::vector<Completion>> held_;  // completed successfully, not yet sent
};

}  // namespace zipmoe::decompressor
