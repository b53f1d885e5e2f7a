// Deterministic simulator of one MoE layer's execution under a schedule (ZipMoE §3.3, Appendix A).
//
// Resources, as in the paper's runtime:
//   - one I/O thread that reads the chunks of ScheduleOrder::io_order back to back (every read is
//     issuable at t = 0, so it never idles);
//   - L decode workers, work-conserving: whenever a worker is free and some decode op is ready (its
//     E-chunk read or cached), it takes the ready op that comes first in decode_order; several free
//     workers take ops in worker-index order;
//   - one recovery stream: a tensor is recovered (recovery_us) once its K decodes are done and its
//     SM-chunk is read or cached, in order of readiness (ties: decode_order of the task);
//   - the GPU: an expert computes (pₙ) once all its tasks' tensors are recovered (F tensors are ready
//     at t = 0), one expert at a time, in order of readiness (ties: decode_order, then expert_id).
// No stage feeds back into an earlier one, so the simulation runs the stages one after another
// and is exact for this model. The makespan is the end of the last expert computation.
//
// Thread-compatible values; the functions are pure and callable from any thread.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "common/checkpoint/manifest.h"
#include "services/scheduler/scheduler_types.h"

namespace zipmoe::scheduler {

// One read on the I/O thread: E-chunk `shard` of a task, or its SM-chunk (shard -1).
struct IoOp {
  int32_t task = 0;  // index into the layer's task list
  ChunkKind chunk = ChunkKind::kE;
  int32_t shard = -1;  // in [0, K) for kE, -1 for kSm

  bool operator==(const IoOp& o) const { return task == o.task && chunk == o.chunk && shard == o.shard; }
};

// One decode operation: decompress E-chunk `shard` of a task on some worker.
struct DecodeOp {
  int32_t task = 0;
  int32_t shard = 0;  // in [0, K)

  bool operator==(const DecodeOp& o) const { return task == o.task && shard == o.shard; }
};

// What the runtime executes: the I/O thread's read order and the decode ops, highest priority first.
struct ScheduleOrder {
  std::vector<IoOp> io_order;          // every read any task needs, exactly once
  std::vector<DecodeOp> decode_order;  // every decode any task needs, exactly once
};

// Interval of one operation on a resource. shard: E-chunk index for reads of E-chunks and decodes,
// -1 for SM-chunk reads and recoveries.
struct TimedOp {
  int32_t task = 0;
  int32_t shard = -1;
  double start_us = 0.0;
  double end_us = 0.0;
};

struct ComputeSpan {
  int32_t expert_id = 0;
  double start_us = 0.0;
  double end_us = 0.0;
};

struct SimResult {
  double makespan_us = 0.0;      // end of the last expert computation (0 if there is none)
  double io_end_us = 0.0;        // end of the last read
  double decode_end_us = 0.0;    // end of the last decode
  double decode_idle_us = 0.0;   // Δ (Definition B.1): Σ over decodes of the idle gap before it on
                                 // its worker (from t = 0 for a worker's first op)
  std::vector<TimedOp> io_timeline;                   // [io_order.size()], io_timeline[i] is io_order[i]
  std::vector<std::vector<TimedOp>> worker_timelines; // [L], each in start order
  std::vector<TimedOp> recover_timeline;              // one per decoded task, in start order
  std::vector<ComputeSpan> compute_timeline;          // one per expert, in start order
  std::vector<double> tensor_ready_us;                // [n_tasks]: recovery end; 0 for F tasks
};

// Simulates `order` for `tasks` under `cost`.
// Errors: kInvalidArgument from ValidateCostModel / ValidateTasks, or naming the offending entry if
// `order` reads a chunk a task does not need (e.g. an SM-chunk of an S task), names a task or shard
// out of range, lists an op twice, or misses a read or decode that a task needs.
Result<SimResult> SimulateSchedule(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                                   const ScheduleOrder& order);

// The decode stage alone, shared with the block estimator of Algorithm 1.
//   ready_us: [n_ops] time each op's E-chunk is available, ops listed highest priority first
// Returns per-op start and worker, each worker's completion (0 if it ran nothing) and Δ.
// With a finite max_idle_us the run stops as soon as Δ exceeds it (Δ only grows), leaving the
// remaining ops unscheduled (worker -1) and stopped_early set; Algorithm 1 uses this to reject an
// insertion position without simulating the whole block.
struct DecodeRun {
  std::vector<double> start_us;       // [n_ops]
  std::vector<int32_t> worker;        // [n_ops]
  std::vector<double> worker_end_us;  // [L]
  double idle_us = 0.0;               // Δ as in SimResult::decode_idle_us
  double end_us = 0.0;                // last decode end (0 if no op)
  bool stopped_early = false;
};
// Expects n_workers >= 1 and decompress_us >= 0 (validated by the callers).
DecodeRun RunDecodeWorkers(const std::vector<double>& ready_us, double decompress_us, int32_t n_workers,
                           double max_idle_us = std::numeric_limits<double>::infinity());

}  // namespace zipmoe::scheduler
