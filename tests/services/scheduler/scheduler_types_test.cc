#include "services/scheduler/scheduler_types.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace zipmoe::scheduler {
namespace {

using S = CompressionState;

void ExpectInvalid(const Status& st, const std::string& field) {
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
}

TEST(SchedulerTypesTest, TaskPartitionFollowsSmRead) {
  EXPECT_EQ(TaskTypeOf(S::kMiss), TaskType::kTypeI);
  EXPECT_EQ(TaskTypeOf(S::kE), TaskType::kTypeI);
  EXPECT_EQ(TaskTypeOf(S::kS), TaskType::kTypeII);
  EXPECT_EQ(TaskTypeOf(S::kC), TaskType::kTypeII);
  EXPECT_STREQ(TaskTypeName(TaskType::kTypeII), "Type-II");
}

TEST(SchedulerTypesTest, CostModelFromRatio) {
  const CostModel cost = CostModelFromRatio(100.0, 0.4, 5.0, 1.0, 8, 3);
  EXPECT_DOUBLE_EQ(cost.e_read_us, 5.0);
  EXPECT_DOUBLE_EQ(cost.all_e_read_us(), 40.0);
  EXPECT_TRUE(ValidateCostModel(cost).ok());
}

TEST(SchedulerTypesTest, InvalidCostNamesField) {
  CostModel cost = CostModelFromRatio(10, 0.5, 1, 0, 4, 2);
  CostModel bad = cost;
  bad.n_workers = 0;
  ExpectInvalid(ValidateCostModel(bad), "n_workers");
  bad = cost;
  bad.n_shards = 0;
  ExpectInvalid(ValidateCostModel(bad), "n_shards");
  bad = cost;
  bad.decompress_us = -1;
  ExpectInvalid(ValidateCostModel(bad), "decompress_us");
  bad = cost;
  bad.e_read_us = std::numeric_limits<double>::quiet_NaN();
  ExpectInvalid(ValidateCostModel(bad), "e_read_us");
  bad = cost;
  bad.recovery_us = -0.5;
  ExpectInvalid(ValidateCostModel(bad), "recovery_us");
  bad = cost;
  bad.sm_read_us = std::numeric_limits<double>::infinity();
  ExpectInvalid(ValidateCostModel(bad), "sm_read_us");
}

TEST(SchedulerTypesTest, InvalidTasksNameField) {
  const ExpertTask ok{3, ExpertProj::kGate, S::kMiss, 2, 10.0};
  EXPECT_TRUE(ValidateTasks({ok}).ok());
  ExpertTask bad = ok;
  bad.expert_compute_us = -1;
  ExpectInvalid(ValidateTasks({bad}), "expert_compute_us");
  bad = ok;
  bad.n_tokens = -2;
  ExpectInvalid(ValidateTasks({bad}), "n_tokens");
  bad = ok;
  bad.expert_id = -1;
  ExpectInvalid(ValidateTasks({bad}), "expert_id");
  ExpectInvalid(ValidateTasks({ok, ok}), "duplicate");
  ExpertTask up = ok;
  up.proj = ExpertProj::kUp;
  up.expert_compute_us = 11.0;
  ExpectInvalid(ValidateTasks({ok, up}), "expert_compute_us");
}

}  // namespace
}  // namespace zipmoe::scheduler
