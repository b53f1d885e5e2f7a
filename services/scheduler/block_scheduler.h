// Cache-affinity scheduling of one MoE layer (ZipMoE §3.3, Appendix A: Algorithm 1, Definition A.1).
//
// ScheduleLayer turns the layer's tasks into what the runtime executes:
//   (a) order.io_order: the I/O thread's reads (task, E-chunk i or the SM-chunk), back to back;
//   (b) decode_rank / order.decode_order: a priority for every decode op (task, E-chunk i); a free
//       worker takes the ready op of lowest rank;
//   (c) blocks: the Alg. 1 blocks (for logs and stats);
//   (d) makespan_us, simulated by SimulateSchedule, and the Lemma B.3 lower bound.
// The recovery stream and the executor act on readiness: a tensor is recovered once decoded and its
// SM-chunk is present, and the executor may compute an expert as soon as its tensors are recovered.
//
// Algorithm 1 as implemented (ambiguities of the paper resolved as noted):
//   1. Partition per expert (§3.3: "Type-I tasks correspond to experts whose reconstruction requires
//      loading SM-chunks"): an expert's tasks are Type-I if any of its tensors is in state M or E,
//      else Type-II (S, C). F tasks have no operation; they are in resident_tasks and in no block.
//   2. σI, σII: each sorted by pₙ non-increasing (ties: expert_id, then proj), tasks of one expert
//      consecutive. Alg. 1 moves tasks one at a time; here the unit moved is an expert group (the
//      consecutive tasks of one expert), so an expert's tensors stay together.
//   3. A block starts from the head of σI (of σII once σI is empty, so that all tasks are assigned).
//      While the block is not compute-dominant, the next unit is inserted at the earliest position
//      that adds no idle time on the decode workers, i.e. does not raise the block's estimated Δ
//      (Definition B.1). The next unit is the head of σII; once σII is empty the block closes
//      (BlockFill::kTypeIIOnly, default: §3.3's "terminates when either all Type-II tasks have been
//      considered, or ... compute-bound"), or, with kTypeIIThenTypeI, goes on with the head of σI
//      (Alg. 1 line 8, U = (σII, σI)). With InsertionStart::kAfterHeavierSameType (default) the
//      scan starts after the last unit of the same type with pₙ >= the new one's, so σI and σII keep
//      their order inside a block; kBlockHead scans from position 0 as printed, which reverses σII.
//      If no position qualifies, the unit goes right after the last Type-II unit with pₙ >= its own
//      (the last such Type-I unit if the block has no Type-II unit; position 0 if there is none).
//   4. Blocks are estimated in isolation: the block's reads start at t = 0 (E-chunks first, in task
//      order, then SM-chunks in task order) on one I/O thread and its decodes run on L idle workers
//      as in SimulateSchedule. Definition A.1: with F_IO the end of the block's reads and F_c(l) the
//      l-th earliest worker completion (0 for a worker that ran nothing), the block is
//      compute-dominant when F_c(l) - F_IO >= l·ρu/K holds for some 1 <= l <= min(L, K)
//      (DominanceRule::kAnyLevel, the reading of §3.3's text; default) or for every such l
//      (kAllLevels, the "for all l" of Appendix A's Eq. (1)).
//   5. Execution order: blocks in order; within a block, E-chunk reads of its tasks in block order,
//      then its SM-chunk reads in block order; decode priority follows block order, then shard.
// Why kTypeIIOnly is the default: with kTypeIIThenTypeI an I/O-bound layer never becomes
// compute-dominant, so all tasks form one block that reads every E-chunk before any SM-chunk and no
// expert can compute until the E-chunks are all in; when compute ≈ I/O that loses to FIFO
// (bench/scheduler_bench.cc). Every variant passes the (3 - 1/L) property test.
// ScheduleLayerBaseline is the comparison order: tasks by (expert_id, proj), each task's E-chunks
// then its SM-chunk, decode priority in the same order, no blocks.
//
// Pure functions on values; callable from any thread. Each insertion try simulates the block
// (O(B·K·(L + log BK)) for B tasks), at most one try per position. Measured on a 2-core VM (K = 8,
// L = 6): ~0.1 ms for a layer of 8 routed experts, a few ms for 48-64.
#pragma once

#include <cstdint>
#include <vector>

#include "services/scheduler/lower_bound.h"
#include "services/scheduler/schedule_sim.h"
#include "services/scheduler/scheduler_types.h"

namespace zipmoe::scheduler {

enum class BlockFill : uint8_t { kTypeIIOnly = 0, kTypeIIThenTypeI = 1 };
enum class DominanceRule : uint8_t { kAnyLevel = 0, kAllLevels = 1 };
enum class InsertionStart : uint8_t { kAfterHeavierSameType = 0, kBlockHead = 1 };

struct SchedulerOptions {
  BlockFill fill = BlockFill::kTypeIIOnly;
  DominanceRule dominance = DominanceRule::kAnyLevel;
  InsertionStart insertion_start = InsertionStart::kAfterHeavierSameType;
};

// A block's timeline estimated in isolation (step 4 above).
struct BlockEstimate {
  double io_us = 0.0;                 // F_IO(B): all of the block's reads
  std::vector<double> worker_end_us;  // [L] F_c(l)(B), ascending
  double decode_idle_us = 0.0;        // Δ(B)
};

// One Alg. 1 block.
struct Block {
  std::vector<int32_t> tasks;     // task indices, priority order
  BlockEstimate estimate;         // of the final block
  bool compute_dominant = false;  // false: closed with nothing left to insert (σII used up, or
                                  // every task placed with BlockFill::kTypeIIThenTypeI)
};

struct LayerSchedule {
  std::vector<int32_t> task_order;      // tasks with operations (not F), priority order
  std::vector<int32_t> resident_tasks;  // F tasks, ascending index
  ScheduleOrder order;                  // (a) reads and (b) decodes, highest priority first
  int32_t n_shards = 1;                 // K
  std::vector<int32_t> decode_rank;     // [n_tasks, K] row-major; rank in order.decode_order, -1 for F
  std::vector<Block> blocks;            // (c) empty for the baseline
  double makespan_us = 0.0;             // (d) simulated makespan
  LowerBound bound;                     // (d) Lemma B.3

  // Rank of decode (task, shard): 0 is the highest priority; -1 if the task decodes nothing.
  int32_t DecodeRank(int32_t task, int32_t shard) const {
    return decode_rank[static_cast<size_t>(task) * n_shards + shard];
  }
};

// Algorithm 1 plus ordering, simulation and bound. Tasks may be empty (empty schedule).
// Errors: kInvalidArgument from ValidateCostModel / ValidateTasks.
Result<LayerSchedule> ScheduleLayer(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                                    const SchedulerOptions& options = {});

// The FIFO baseline described above. Errors: as ScheduleLayer.
Result<LayerSchedule> ScheduleLayerBaseline(const std::vector<ExpertTask>& tasks, const CostModel& cost);

// --- Steps of Algorithm 1, exposed for tests and tools (inputs assumed validated). ---

// σ: `indices` sorted by expert_compute_us non-increasing, ties by expert_id then proj.
std::vector<int32_t> SortByExpertCompute(const std::vector<ExpertTask>& tasks, std::vector<int32_t> indices);

// Estimates block `block_tasks` (priority order) in isolation (step 4).
BlockEstimate EstimateBlock(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                            const std::vector<int32_t>& block_tasks);

// Definition A.1 on an estimate.
bool IsComputeDominant(const BlockEstimate& estimate, const CostModel& cost, DominanceRule rule);

// Algorithm 1's blocks (steps 1-4).
std::vector<Block> BuildBlocks(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                               const SchedulerOptions& options);

// Step 5: reads and decodes of consecutive blocks, E-chunks before SM-chunks within each block.
ScheduleOrder OrderFromBlocks(const std::vector<ExpertTask>& tasks, const CostModel& cost,
                              const std::vector<Block>& blocks);

}  // namespace zipmoe::scheduler
