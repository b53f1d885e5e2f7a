// One-shot index-parallel loops on short-lived threads (joined before returning; nothing detached).
// For many small loops in a row, services/synth's ParallelRunner keeps a pool instead.
// Thread-safety: reentrant; `fn` must be safe to call concurrently for distinct indices.
#pragma once

#include <cstddef>
#include <functional>

namespace zipmoe {

// `requested` if > 0, else the hardware concurrency (at least 1): the meaning of every `--threads 0`.
int ResolveThreadCount(int requested);

// Runs fn(i) for every i in [begin, end) on min(n_threads, end - begin) threads (n_threads as
// ResolveThreadCount) that claim indices in increasing order; returns when every call has returned.
void ParallelFor(size_t begin, size_t end, int n_threads, const std::function<void(size_t)>& fn);

}  // namespace zipmoe
