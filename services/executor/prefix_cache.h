// Prefix reuse across requests (issue 43 item 2, part): the KV caches of finished sequences are kept,
// up to a byte budget, and a new prompt that starts with the tokens one of them holds continues from a
// copy of it instead of feeding those tokens again, as llama.cpp's prompt cache and vLLM's automatic
// prefix caching do. A multi-turn chat re-sends its whole history every turn; with a hit only the new
// turn is prefilled.
//
// Granularity: whole sequences, not blocks. An entry holds the positions its sequence fed (prompt and
// generated tokens but the last) and their tokens; a lookup takes the entry with the longest common
// prefix with the prompt, cut to leave at least one prompt token to feed (its logits sample the first
// new token). A model with Gated DeltaNet layers (qwen3_next, qwen3_5_moe) keeps a recurrent state that
// summarises every position, so its entries are reused only when the prompt starts with ALL of an
// entry's tokens. A cache whose sliding-window layers hold only their window (KvCache::set_trim_windows)
// is cut no earlier than where those windows are whole (KvCache::earliest_prefix). Encoder-decoder models
// are not cached (the caller does not insert them).
//
// Exactness: the CPU kernels' results do not depend on the batch a token is computed in
// (kernels/bf16_gemm.h), so the logits of the tokens fed after a hit are bit-identical to those of a
// run that fed the whole prompt (tests/services/executor/prefix_cache_test.cc).
//
// With a recurrent state, or sliding-window layers that may be trimmed before the sequence ends, the
// generator also keeps a copy of each sequence's cache right after its prompt: the next turn of a chat
// re-sends the answer as text, whose tokens need not be the ones generated (gpt-oss's Harmony history
// drops the reasoning), but it always starts with the whole previous prompt.
//
// Eviction: least recently used (inserted or hit) first, while the entries' bytes (KvCache::bytes)
// exceed the budget; an entry whose tokens are a prefix of a newly inserted one that can be cut to
// every prefix it could (earliest_prefix no later) is dropped (the new one serves every prompt it did).
// An entry larger than the whole budget is not kept.
//
// Internal to services/executor. Not thread-safe: the generating thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <vector>

#include "services/executor/attention.h"
#include "services/executor/generator.h"

namespace zipmoe::executor {

class PrefixCache {
 public:
  explicit PrefixCache(int64_t budget_bytes) {
    stats_.enabled = true;
    stats_.budget_bytes = budget_bytes;
  }

  // The longest reusable prefix of `prompt` (1 <= n <= prompt.size() - 1): a copy of that entry's
  // cache holding its first n positions (KvCache::Prefix, continuing: a trimmed sliding-window layer only the
  // window - 1 before n), and n in *reused; nullopt (and 0) on a miss.
  std::optional<KvCache> Lookup(const std::vector<int32_t>& prompt, int64_t* reused);

  // Keeps `cache`, whose positions hold `tokens` (tokens.size() == cache.length() > 0), then evicts.
  void Insert(std::vector<int32_t> tokens, KvCache cache);

  const PrefixCacheCounters& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    KvCache cache;
    int64_t bytes = 0;
  };
  void EvictOverBudget();

  std::list<Entry> entries_;  // most recently used first
  PrefixCacheCounters stats_;
};

}  // namespace zipmoe::executor
