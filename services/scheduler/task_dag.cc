#include "services/scheduler/task_dag.h"

#include <fmt/format.h>

namespace zipmoe::scheduler {

const char* DagOpName(DagOp op) {
  switch (op) {
    case DagOp::kReadEChunk: return "read_e";
    case DagOp::kReadSmChunk: return "read_sm";
    case DagOp::kDecode: return "decode";
    case DagOp::kRecover: return "recover";
  }
  return "?";
}

int32_t TaskDag::CountOp(DagOp op) const {
  int32_t n = 0;
  for (const DagNode& node : nodes) n += node.op == op ? 1 : 0;
  return n;
}

Result<TaskDag> BuildTaskDag(CompressionState state, int32_t n_shards) {
  if (n_shards < 1) {
    return Status::InvalidArgument(fmt::format("BuildTaskDag: n_shards (K) must be >= 1, got {}", n_shards));
  }
  if (static_cast<int>(state) > static_cast<int>(CompressionState::kF)) {
    return Status::InvalidArgument(fmt::format("BuildTaskDag: invalid state {}", static_cast<int>(state)));
  }
  TaskDag dag;
  dag.state = state;
  dag.n_shards = n_shards;
  if (!NeedsDecode(state)) return dag;  // F: resident, nothing to do

  std::vector<int32_t> reads(n_shards, -1);
  if (NeedsERead(state)) {
    for (int32_t i = 0; i < n_shards; ++i) {
      reads[i] = static_cast<int32_t>(dag.nodes.size());
      dag.nodes.push_back({DagOp::kReadEChunk, i, {}});
    }
  }
  DagNode recover{DagOp::kRecover, -1, {}};
  for (int32_t i = 0; i < n_shards; ++i) {
    DagNode decode{DagOp::kDecode, i, {}};
    if (reads[i] >= 0) decode.deps.push_back(reads[i]);
    recover.deps.push_back(static_cast<int32_t>(dag.nodes.size()));
    dag.nodes.push_back(std::move(decode));
  }
  if (NeedsSmRead(state)) {
    recover.deps.push_back(static_cast<int32_t>(dag.nodes.size()));
    dag.nodes.push_back({DagOp::kReadSmChunk, -1, {}});
  }
  dag.nodes.push_back(std::move(recover));
  return dag;
}

}  // namespace zipmoe::scheduler
