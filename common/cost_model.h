// The offline-profiled cost model of one sparse (MoE) layer (ZipMoE §3.3, Appendix A, Alg. 3), the
// one both the cache planner (services/cache_manager/plan_cost.h: makespan estimates, Alg. 4) and the
// cache-affinity scheduler (services/scheduler: Algorithm 1, Lemma B.3's bound, the simulator) read.
// `zipmoe profile` measures it (profile.json); the runtime also measures it per layer
// (services/pipeline/runtime_stats.h).
//
// Execution model: one I/O thread reads chunks back to back, L decode workers decode one E-chunk
// each per operation, one recovery stream recovers tensors (E + SM -> BF16), and the GPU (or the
// CPU executor) runs expert computations one at a time. Times are microseconds.
// Plain value type.
#pragma once

#include <cstdint>

namespace zipmoe {

struct CostModel {
  double sm_read_us = 0;         // u: read one SM-chunk (one tensor's sign|mantissa plane) from storage
  double e_read_us = 0;          // ρ/K·u: read one E-chunk (all K of a tensor: ρ·u)
  double decompress_us = 0;      // c: decode one E-chunk on one worker
  double recovery_us = 0;        // recover one tensor (E + SM -> BF16) on the recovery stream; 0 in the
                                 // paper's model, where recovery is not on the critical path
  double expert_compute_us = 0;  // p: run one expert over its tokens; 0 = excluded, as in Alg. 3
  int32_t n_shards = 1;          // K: E-chunks per tensor, >= 1
  int32_t n_workers = 1;         // L: decode worker threads, >= 1
  int32_t tensors_per_expert = 3;  // n: gate, up, down

  // ρ·u: reading all K E-chunks of one tensor.
  double all_e_read_us() const { return e_read_us * n_shards; }
};

}  // namespace zipmoe
