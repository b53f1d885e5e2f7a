// zipmoe::Mutex / MutexLock / CondVar (common/mutex.h): mutual exclusion, waits that see the
// predicate under the lock, timeouts. Whether the annotations are enforced is checked by the clang
// pass (ctest thread_safety_clang), not here.
#include "common/mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace zipmoe {
namespace {

struct Counter {
  Mutex mu;
  CondVar cv;
  int64_t n ZM_GUARDED_BY(mu) = 0;
};

TEST(Mutex, ExcludesConcurrentIncrements) {
  Counter c;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&c] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock lock(&c.mu);
        ++c.n;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&c.mu);
  EXPECT_EQ(c.n, 80000);
}

TEST(CondVar, WaitReturnsOnceThePredicateHoldsUnderTheLock) {
  Counter c;
  std::thread producer([&c] {
    for (int i = 0; i < 5; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      MutexLock lock(&c.mu);
      ++c.n;
      c.cv.NotifyAll();
    }
  });
  {
    MutexLock lock(&c.mu);
    c.cv.Wait(&lock, [&c]() ZM_REQUIRES(c.mu) { return c.n == 5; });
    EXPECT_EQ(c.n, 5);
  }
  producer.join();
}

TEST(CondVar, WaitForTimesOutWithThePredicateFalse) {
  Counter c;
  MutexLock lock(&c.mu);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(c.cv.WaitFor(&lock, std::chrono::milliseconds(30), [&c]() ZM_REQUIRES(c.mu) { return c.n > 0; }));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  c.n = 1;  // still held after the timeout
  EXPECT_TRUE(c.cv.WaitFor(&lock, std::chrono::milliseconds(1), [&c]() ZM_REQUIRES(c.mu) { return c.n > 0; }));
}

TEST(MutexLock, UnlockLetsAnotherThreadInAndLockTakesItBack) {
  Counter c;
  MutexLock lock(&c.mu);
  lock.Unlock();
  std::thread other([&c] {
    MutexLock inner(&c.mu);
    c.n = 42;
  });
  other.join();  // would deadlock if Unlock had not released the mutex
  lock.Lock();
  EXPECT_EQ(c.n, 42);
}

}  // namespace
}  // namespace zipmoe
