// services/executor/work_pool.h: every item runs once, the caller finishes a region alone when no helper
// joins (as when other processes hold the helpers' cores), nested and concurrent regions run inline,
// and the executor's task split gives the same bits on any number of threads (cpu_ops_test.cc).
#include "services/executor/work_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace zipmoe::executor {
namespace {

// Each index of [0, n) is passed to the body exactly once, whatever the grain.
TEST(WorkPoolTest, ParallelForRunsEveryIndexOnce) {
  WorkPool pool(4);
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{100003}}) {
    for (int64_t grain : {int64_t{1}, int64_t{3}, int64_t{64}, int64_t{1} << 20}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        ASSERT_LE(e - b, grain);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " grain " << grain << " i " << i;
    }
  }
}

// Helpers do join: with four threads and items that take a while, more than one slot runs them.
TEST(WorkPoolTest, HelpersJoinARegion) {
  WorkPool pool(4);
  bool several = false;
  for (int attempt = 0; attempt < 50 && !several; ++attempt) {
    std::atomic<int64_t> next{0};
    std::vector<std::atomic<int>> by_slot(4);
    pool.Run([&](int slot) {
      while (next.fetch_add(1) < 64) {
        by_slot[static_cast<size_t>(slot)].fetch_add(1);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    int slots = 0;
    for (auto& c : by_slot) slots += c.load() > 0;
    several = slots > 1;
  }
  EXPECT_TRUE(several) << "no helper joined a region in 50 tries";
}

// The property the pool exists for: with no helper able to join, the caller runs the whole region and
// returns at once instead of waiting for them.
TEST(WorkPoolTest, TheCallerFinishesARegionNoHelperJoins) {
  WorkPool pool(3);
  pool.HoldHelpersForTest(true);
  for (int round = 0; round < 100; ++round) {
    std::vector<int> slots_seen;
    std::atomic<int64_t> next{0};
    int64_t sum = 0;
    pool.Run([&](int slot) {
      slots_seen.push_back(slot);  // only the caller may run: no synchronisation needed
      for (int64_t i; (i = next.fetch_add(1)) < 1000;) sum += i;
    });
    ASSERT_EQ(slots_seen, std::vector<int>{0});
    ASSERT_EQ(sum, 999 * 1000 / 2);
  }
  pool.HoldHelpersForTest(false);
  std::atomic<int> items{0};
  pool.ParallelFor(4096, 1, [&](int64_t b, int64_t e) { items.fetch_add(static_cast<int>(e - b)); });
  EXPECT_EQ(items.load(), 4096);
}

// A region opened inside a body, or from another thread while one is open, runs on its caller alone.
TEST(WorkPoolTest, NestedAndConcurrentRegionsRunInline) {
  WorkPool pool(2);
  std::atomic<int> inner_items{0};
  pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(WorkPool::InRegion());
    for (int64_t i = b; i < e; ++i)
      pool.ParallelFor(100, 1, [&](int64_t ib, int64_t ie) { inner_items.fetch_add(static_cast<int>(ie - ib)); });
  });
  EXPECT_EQ(inner_items.load(), 800);
  EXPECT_FALSE(WorkPool::InRegion());

  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r)
        pool.ParallelFor(1000, 7, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 1000);
}

// Shared() follows SetSharedThreads; a pool of one thread runs everything on the caller.
TEST(WorkPoolTest, SharedPoolFollowsSetSharedThreads) {
  const int saved = WorkPool::Shared().threads();
  WorkPool::SetSharedThreads(3);
  EXPECT_EQ(WorkPool::Shared().threads(), 3);
  WorkPool::SetSharedThreads(1);
  EXPECT_EQ(WorkPool::Shared().threads(), 1);
  const std::thread::id me = std::this_thread::get_id();
  WorkPool::Shared().ParallelFor(100, 1, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
  WorkPool::SetSharedThreads(saved);
  EXPECT_EQ(WorkPool::Shared().threads(), saved);
}

}  // namespace
}  // namespace zipmoe::executor
