#include "common/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace zipmoe {
namespace {

TEST(ParallelTest, EveryIndexOfTheRangeRunsExactlyOnce) {
  for (int threads : {0, 1, 3, 64}) {
    std::vector<std::atomic<int>> calls(1000);
    ParallelFor(100, 1000, threads, [&](size_t i) { calls[i]++; });
    for (size_t i = 0; i < calls.size(); ++i) ASSERT_EQ(calls[i].load(), i >= 100 ? 1 : 0) << i << " threads " << threads;
  }
  int ran = 0;
  ParallelFor(5, 5, 4, [&](size_t) { ++ran; });
  EXPECT_EQ(ran, 0);
}

TEST(ParallelTest, ThreadCountDefaultsToTheAllowedCpus) {
  EXPECT_EQ(ResolveThreadCount(3), 3);
  EXPECT_GE(ResolveThreadCount(0), 1);
  EXPECT_EQ(ResolveThreadCount(-2), ResolveThreadCount(0));
}

}  // namespace
}  // namespace zipmoe
