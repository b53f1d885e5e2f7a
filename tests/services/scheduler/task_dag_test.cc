#include "services/scheduler/task_dag.h"

#include <gtest/gtest.h>

namespace zipmoe::scheduler {
namespace {

using S = CompressionState;

// Node i as "op:shard" for compact comparison with Fig. 6.
std::vector<std::string> Nodes(const TaskDag& dag) {
  std::vector<std::string> out;
  for (const DagNode& n : dag.nodes) out.push_back(std::string(DagOpName(n.op)) + ":" + std::to_string(n.shard));
  return out;
}

TEST(TaskDagTest, NodeSetsPerStateMatchFig6) {
  const int32_t k = 2;
  using V = std::vector<std::string>;
  EXPECT_EQ(Nodes(*BuildTaskDag(S::kMiss, k)),
            (V{"read_e:0", "read_e:1", "decode:0", "decode:1", "read_sm:-1", "recover:-1"}));
  EXPECT_EQ(Nodes(*BuildTaskDag(S::kE, k)), (V{"decode:0", "decode:1", "read_sm:-1", "recover:-1"}));
  EXPECT_EQ(Nodes(*BuildTaskDag(S::kS, k)), (V{"read_e:0", "read_e:1", "decode:0", "decode:1", "recover:-1"}));
  EXPECT_EQ(Nodes(*BuildTaskDag(S::kC, k)), (V{"decode:0", "decode:1", "recover:-1"}));
  EXPECT_TRUE(BuildTaskDag(S::kF, k)->nodes.empty());
}

TEST(TaskDagTest, EdgesFollowPrecedence) {
  const int32_t k = 4;
  Result<TaskDag> dag = BuildTaskDag(S::kMiss, k);
  ASSERT_TRUE(dag.ok());
  EXPECT_EQ(dag->CountOp(DagOp::kReadEChunk), k);
  EXPECT_EQ(dag->CountOp(DagOp::kDecode), k);
  EXPECT_EQ(dag->CountOp(DagOp::kReadSmChunk), 1);
  EXPECT_EQ(dag->CountOp(DagOp::kRecover), 1);
  for (size_t i = 0; i < dag->nodes.size(); ++i) {
    const DagNode& n = dag->nodes[i];
    for (int32_t d : n.deps) EXPECT_LT(d, static_cast<int32_t>(i)) << "topological order";
    if (n.op == DagOp::kDecode) {  // decode i waits for exactly E-chunk i
      ASSERT_EQ(n.deps.size(), 1u);
      EXPECT_EQ(dag->nodes[n.deps[0]].op, DagOp::kReadEChunk);
      EXPECT_EQ(dag->nodes[n.deps[0]].shard, n.shard);
    }
    if (n.op == DagOp::kReadEChunk || n.op == DagOp::kReadSmChunk) {
      EXPECT_TRUE(n.deps.empty());
    }
  }
  const DagNode& recover = dag->nodes.back();
  ASSERT_EQ(recover.op, DagOp::kRecover);
  EXPECT_EQ(recover.deps.size(), static_cast<size_t>(k + 1));  // all decodes + the SM-chunk read
}

TEST(TaskDagTest, CachedEChunksDecodeWithoutDependencies) {
  for (S s : {S::kE, S::kC}) {
    Result<TaskDag> dag = BuildTaskDag(s, 3);
    ASSERT_TRUE(dag.ok());
    for (const DagNode& n : dag->nodes) {
      if (n.op == DagOp::kDecode) {
        EXPECT_TRUE(n.deps.empty()) << CompressionStateLetter(s);
      }
    }
    EXPECT_EQ(dag->nodes.back().deps.size(), s == S::kE ? 4u : 3u);
  }
}

TEST(TaskDagTest, RejectsZeroShards) {
  Result<TaskDag> dag = BuildTaskDag(S::kMiss, 0);
  ASSERT_FALSE(dag.ok());
  EXPECT_EQ(dag.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dag.status().message().find("n_shards"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::scheduler
