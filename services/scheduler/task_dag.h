// Per-task operation DAGs by compression state (ZipMoE §3.2, Fig. 6).
//
// A task reconstructs one expert tensor. Its DAG holds the operations its state still needs:
//   M (kMiss): K E-chunk reads -> K decodes (decode i after read i); SM-chunk read; recover
//   E (kE):    K decodes (E-chunks cached, ready at once); SM-chunk read; recover
//   S (kS):    K E-chunk reads -> K decodes; recover (SM-chunk cached)
//   C (kC):    K decodes; recover
//   F (kF):    no operation: the BF16 tensor is resident
// The recover node depends on every decode and on the SM-chunk read when there is one. The expert's
// GPU computation (pₙ) joins the expert's tasks and is not a node of any one task's DAG.
// Node order: E-chunk reads (shard 0..K-1), decodes (shard 0..K-1), SM-chunk read, recover.
// Plain values; pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/compression_state.h"
#include "common/status.h"

namespace zipmoe::scheduler {

enum class DagOp : uint8_t {
  kReadEChunk = 0,   // I/O thread, e_read_us (ρ/K·u)
  kReadSmChunk = 1,  // I/O thread, sm_read_us (u)
  kDecode = 2,       // a decode worker, decompress_us (c)
  kRecover = 3,      // the recovery stream, recovery_us
};
const char* DagOpName(DagOp op);  // "read_e", "read_sm", "decode", "recover"

struct DagNode {
  DagOp op = DagOp::kDecode;
  int32_t shard = -1;          // E-chunk index for kReadEChunk / kDecode, else -1
  std::vector<int32_t> deps;   // indices of the nodes this one waits for
};

struct TaskDag {
  CompressionState state = CompressionState::kMiss;
  int32_t n_shards = 1;
  std::vector<DagNode> nodes;  // topological order (every dep precedes its node)

  int32_t CountOp(DagOp op) const;
};

// Builds the DAG of one task (Fig. 6). Errors: kInvalidArgument if n_shards (K) < 1 or the state is
// not one of M/E/S/C/F.
Result<TaskDag> BuildTaskDag(CompressionState state, int32_t n_shards);

}  // namespace zipmoe::scheduler
