#include "services/executor/prefix_cache.h"

#include <algorithm>

namespace zipmoe::executor {
namespace {

int64_t CommonPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

std::optional<KvCache> PrefixCache::Lookup(const std::vector<int32_t>& prompt, int64_t* reused) {
  *reused = 0;
  ++stats_.lookups;
  const int64_t most = static_cast<int64_t>(prompt.size()) - 1;  // one prompt token is always fed
  auto best = entries_.end();
  int64_t best_n = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    int64_t n = std::min(CommonPrefix(it->tokens, prompt), most);
    // A recurrent state serves its whole length only; a trimmed sliding-window layer from where its window
    // is still whole (KvCache::earliest_prefix).
    if (n < it->cache.earliest_prefix()) n = 0;
    if (n > best_n) {
      best = it;
      best_n = n;
    }
  }
  if (best == entries_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, best);
  KvCache copy = entries_.front().cache.Prefix(best_n, /*continuing=*/true);
  *reused = best_n;
  ++stats_.hits;
  stats_.reused_tokens += static_cast<uint64_t>(best_n);
  return copy;
}

void PrefixCache::Insert(std::vector<int32_t> tokens, KvCache cache) {
  if (tokens.empty() || static_cast<int64_t>(tokens.size()) != cache.length()) return;
  const int64_t bytes = cache.bytes();
  if (bytes > stats_.budget_bytes) return;  // would evict everything and itself
  // Entries the new one covers: their tokens are a prefix of the new tokens, and every prefix they can be
  // cut to the new one can be cut to as well (KvCache::earliest_prefix: a KV cache serves every shorter
  // prefix; a recurrent state only its whole length; a trimmed sliding-window layer the prefixes where its
  // window is whole, so a trimmed entry does not replace an untrimmed one).
  const int64_t earliest = cache.earliest_prefix();
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->tokens.size() <= tokens.size() && it->cache.earliest_prefix() >= earliest &&
        std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin())) {
      stats_.bytes -= it->bytes;
      ++stats_.evicted;
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  Entry e;
  e.bytes = bytes;
  e.tokens = std::move(tokens);
  e.cache = std::move(cache);
  stats_.bytes += e.bytes;
  entries_.push_front(std::move(e));
  ++stats_.inserted;
  EvictOverBudget();
}

void PrefixCache::EvictOverBudget() {
  while (!entries_.empty() && stats_.bytes > stats_.budget_bytes) {
    stats_.bytes -= entries_.back().bytes;
    entries_.pop_back();
    ++stats_.evicted;
  }
  stats_.entries = static_cast<int64_t>(entries_.size());
}

}  // namespace zipmoe::executor
