// CoServe's dependency-aware request grouping (request_grouping.h): overlap known answers, the
// admission order it picks, its starvation bound, and option parsing.
#include "services/scheduler/request_grouping.h"

#include <gtest/gtest.h>

#include <vector>

namespace zipmoe::scheduler {
namespace {

TEST(RequestGrouping, OverlapCountsLayerExpertPairs) {
  const ExpertSets predicted = {{}, {1, 2, 3}, {0}};
  EXPECT_DOUBLE_EQ(DependencyOverlap(predicted, {{}, {2, 3, 9}, {5}}), 0.5);  // 2 of 4 pairs
  EXPECT_DOUBLE_EQ(DependencyOverlap(predicted, {{1, 2, 3}, {}, {0}}), 0.25);  // layers are distinct
  EXPECT_DOUBLE_EQ(DependencyOverlap(predicted, {{}, {1, 2, 3}, {0}}), 1.0);
  EXPECT_DOUBLE_EQ(DependencyOverlap(predicted, {}), 0.0) << "missing layers hold nothing";
  EXPECT_DOUBLE_EQ(DependencyOverlap({{}, {}}, {}), 1.0) << "depending on nothing costs nothing";
}

TEST(RequestGrouping, AdmitsTheRequestWhoseExpertsAreAtHandFirst) {
  const ExpertSets a = {{0, 1}};  // nothing at hand
  const ExpertSets b = {{5, 9}};  // half at hand
  const ExpertSets c = {{5, 6}};  // all at hand
  const std::vector<GroupingCandidate> window = {{&a, 0}, {&b, 0}, {&c, 0}};
  const ExpertSets at_hand = {{4, 5, 6}};
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 1, 8), (std::vector<size_t>{2}));
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 2, 8), (std::vector<size_t>{2, 1}));
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 5, 8), (std::vector<size_t>{2, 1, 0})) << "at most the window";
  EXPECT_TRUE(ChooseAdmissions(window, at_hand, 0, 8).empty());
}

TEST(RequestGrouping, LaterPicksFollowTheExpertsOfEarlierOnes) {
  // Nothing at hand: the first pick is the oldest (ties go to the queue order); the second is the
  // one sharing its experts, ahead of an older unrelated one (CoServe's "arrange behind requests
  // that use the same expert").
  const ExpertSets a = {{0, 1}, {2}};
  const ExpertSets b = {{7}, {8}};
  const ExpertSets c = {{0, 1}, {3}};
  const std::vector<GroupingCandidate> window = {{&a, 0}, {&b, 0}, {&c, 0}};
  EXPECT_EQ(ChooseAdmissions(window, {}, 2, 8), (std::vector<size_t>{0, 2}));
}

TEST(RequestGrouping, ASequencePassedOverTheWindowIsAdmittedFirst) {
  const ExpertSets cold = {{0}};
  const ExpertSets warm = {{1}};
  const ExpertSets other = {{2}};
  const ExpertSets at_hand = {{1}};
  std::vector<GroupingCandidate> window = {{&cold, 3}, {&warm, 0}, {&other, 4}};
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 1, 4), (std::vector<size_t>{2})) << "starving: over overlap";
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 2, 4), (std::vector<size_t>{2, 1}));
  window[0].passed_over = 4;
  EXPECT_EQ(ChooseAdmissions(window, at_hand, 1, 4), (std::vector<size_t>{0})) << "oldest starving first";
}

TEST(RequestGrouping, ParsesNames) {
  EXPECT_EQ(*ParseRequestGrouping("none"), RequestGrouping::kNone);
  EXPECT_EQ(*ParseRequestGrouping("coserve"), RequestGrouping::kCoServe);
  const Status bad = ParseRequestGrouping("CoServe!").status();
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.ToString().find("CoServe!"), std::string::npos) << bad.ToString();
  EXPECT_STREQ(RequestGroupingName(RequestGrouping::kCoServe), "coserve");
}

}  // namespace
}  // namespace zipmoe::scheduler
