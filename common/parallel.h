// One-shot index-parallel loops on short-lived threads (joined before returning; nothing detached).
// For many small loops in a row, services/synth's ParallelRunner keeps a pool instead.
// Thread-safety: reentrant; `fn` must be safe to call concurrently for distinct indices.
#pragma once

#include <cstddef>
#include <functional>

namespace zipmoe {

// `requested` if > 0, else the CPUs this process may run on (its affinity mask: `taskset`, a
// cpuset; AllowedCpuCount in common/cpu_topology.h; at least 1): `--threads 0` of compress, verify,
// synth and the decompression workers, whose codec work gains from SMT siblings.
int ResolveThreadCount(int requested);

// `requested` if > 0, else the physical cores among the CPUs this process may run on
// (AllowedPhysicalCoreCount; at least 1): `--threads 0` of the executor's matmuls and attention,
// which are bound by memory bandwidth and one FMA pipe per core, so that a second SMT thread per
// core only adds synchronisation (llama.cpp's default counts physical cores likewise).
int ResolveComputeThreadCount(int requested);

// Runs fn(i) for every i in [begin, end) on min(n_threads, end - begin) threads (n_threads as
// ResolveThreadCount) that claim indices in increasing order; returns when every call has returned.
void ParallelFor(size_t begin, size_t end, int n_threads, const std::function<void(size_t)>& fn);

}  // namespace zipmoe
