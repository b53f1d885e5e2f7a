// Cache planner inputs from files: rank frequencies from activation traces, trace lines and their
// errors, and the profile file's round trip.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"
#include "tests/services/cache_manager/planner_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::Rec;

// --- rank frequencies from traces ---------------------------------------------------------------

TEST(RankFrequenciesTest, CountsSortedPerLayerAndAveraged) {
  // Layer 0: expert 0 every step, 1 twice, 2 and 3 once -> f = [1, .5, .25, .25].
  // Layer 1: expert 3 every step, 2 every step -> f = [1, 1, 0, 0].
  std::vector<ActivationRecord> records = {Rec(0, 0, {0, 1}), Rec(1, 0, {0, 2}), Rec(2, 0, {0, 1}),
                                           Rec(3, 0, {3, 0}), Rec(0, 1, {2, 3}), Rec(1, 1, {3, 2})};
  auto rf = ComputeRankFrequencies(records, 4, 2);
  ASSERT_TRUE(rf.ok()) << rf.status().ToString();
  ASSERT_EQ(rf->size(), 1u);
  const RankFrequencies& b1 = rf->at(1);
  EXPECT_EQ(b1.n_records, 6);
  EXPECT_EQ(b1.per_layer.at(0), (std::vector<double>{1, 0.5, 0.25, 0.25}));
  EXPECT_EQ(b1.per_layer.at(1), (std::vector<double>{1, 1, 0, 0}));
  EXPECT_EQ(b1.active_k, 2);
  EXPECT_DOUBLE_EQ(b1.mean_active_experts, 2.0);
  EXPECT_EQ(b1.rank_freq, (std::vector<double>{1, 0.75, 0.125, 0.125}));
}

TEST(RankFrequenciesTest, BatchSizesAndSessionsAreSeparated) {
  // Two sessions with different hot experts: ranked per session, the skew survives.
  std::vector<ActivationRecord> records;
  for (int s = 0; s < 4; ++s) records.push_back(Rec(s, 0, {0}, "a"));
  for (int s = 0; s < 4; ++s) records.push_back(Rec(s, 0, {3}, "b"));
  ActivationRecord batch3 = Rec(9, 0, {0, 1, 2});
  batch3.tokens_per_expert = {1, 1, 1};  // 3 tokens routed, top-1
  records.push_back(batch3);
  auto rf = ComputeRankFrequencies(records, 4, 1);
  ASSERT_TRUE(rf.ok());
  EXPECT_EQ(rf->at(1).rank_freq, (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(rf->at(3).active_k, 3);
  EXPECT_EQ(rf->at(3).rank_freq, (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(ComputeRankFrequencies({Rec(0, 0, {4})}, 4, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ComputeRankFrequencies({}, 4, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(TraceTest, LinesRoundTripAndErrorsNameTheLine) {
  ActivationRecord r = Rec(12, 3, {0, 5, 9});
  r.tokens_per_expert = {2, 1, 3};
  r.n_tokens = 2;
  r.session = "chat-1";
  const std::string line = FormatTraceLine(r);
  EXPECT_EQ(line, R"({"experts":[0,5,9],"layer":3,"n_tokens":2,"session":"chat-1","step":12,"tokens":[2,1,3]})");
  auto back = ParseTraceLine(line, "t:1");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->expert_ids, r.expert_ids);
  EXPECT_EQ(back->tokens_per_expert, r.tokens_per_expert);
  EXPECT_EQ(BatchSizeOf(*back, 2), 2);
  back->n_tokens = 0;
  EXPECT_EQ(BatchSizeOf(*back, 2), 3);  // ceil(6 routed / top-2)

  testing::TempDir tmp;
  const std::string path = tmp.Sub("trace.jsonl");
  testing::WriteAll(path, line + "\n\n" + R"({"step":1,"layer":0,"experts":[1,1]})" + "\n");
  auto bad = ReadTrace(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path + ":3"), std::string::npos) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("twice"), std::string::npos);
  EXPECT_EQ(ParseTraceLine(R"({"step":1,"layer":0})", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseTraceLine(R"({"step":1,"layer":0,"experts":[1,2],"tokens":[1]})", "x").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTrace(tmp.Sub("missing.jsonl")).status().code(), StatusCode::kNotFound);
}

// --- profile file -------------------------------------------------------------------------------

TEST(ProfileFileTest, RoundTripAndMissingField) {
  testing::TempDir tmp;
  StorageProfile p;
  p.sm_read_us = 12.5;
  p.e_read_us = 3.25;
  p.decompress_us = 7;
  p.io_mode = "buffered";
  p.io_note = "open(O_DIRECT): Invalid argument";
  p.decodes = 40;
  ASSERT_TRUE(WriteStorageProfile(tmp.Sub("p.json"), p).ok());
  auto back = ReadStorageProfile(tmp.Sub("p.json"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->sm_read_us, 12.5);
  EXPECT_EQ(back->e_read_us, 3.25);
  EXPECT_EQ(back->io_note, p.io_note);
  EXPECT_EQ(back->decodes, 40);
  testing::WriteAll(tmp.Sub("bad.json"), R"({"version":1,"sm_read_us":1,"e_read_us":2})");
  auto bad = ReadStorageProfile(tmp.Sub("bad.json"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("decompress_us"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::cache_manager
