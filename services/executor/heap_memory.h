// The C heap's policy for the executor's transient buffers (issue 35). torch-free.
//
// A forward pass allocates and frees many buffers of 0.1-30 MiB per layer: torch's CPU tensors
// (at::empty goes to posix_memalign, torch keeps no cache of its own), the MoE block's activations and
// expert outputs. With glibc's defaults a buffer above the mmap threshold is mapped and unmapped on
// every use, and the heap's free top beyond the trim threshold (twice the largest freed mapping) is
// handed back to the kernel, so the next layer's buffers fault their pages in again and the kernel
// clears each one first. A 256-token prefill of qwen2_moe mini on 2 Zen 5 cores spent ~5 % of its
// samples in the MoE block's page faults and the clearing alone (perf, 2026-12-02). Keeping freed heap
// memory for the next use removes that work: the same bits, RSS after a long prompt stays up to
// kTrimThresholdBytes higher (what the prompt's peak already held), and buffers above
// kMmapThresholdBytes (a layer's keys or values beyond ~8000 positions of qwen2_moe mini's 8 float32 heads of
// 128) are still mapped on their own. The weights' anonymous copies never come from the heap.
#pragma once

#include <cstdint>

namespace zipmoe::executor {

// Requests served from the heap up to this size (glibc's largest allowed: HEAP_MAX_SIZE / 2 on 64-bit).
inline constexpr int64_t kMmapThresholdBytes = int64_t{32} << 20;
// Free memory kept at the heap's top before glibc hands it back to the kernel.
inline constexpr int64_t kTrimThresholdBytes = int64_t{256} << 20;

// Sets glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD to the values above for the whole process
// (mallopt; this also stops glibc adjusting them itself). Idempotent and thread-safe. Does nothing,
// and returns false, when the C library is not glibc or when the user chose the heap's policy
// already (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_, or a glibc.malloc tunable in GLIBC_TUNABLES);
// true once the values are set.
bool RetainFreedHeapMemory();

// True when the environment sets glibc's heap policy (the variables above), which
// RetainFreedHeapMemory then leaves alone.
bool HeapPolicySetByEnvironment();

}  // namespace zipmoe::executor
