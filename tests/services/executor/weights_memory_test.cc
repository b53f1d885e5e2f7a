// BackgroundWeightsCopy (services/executor/weights_memory.h) with stand-in files: what it copies, what
// it leaves mapped and why, its stats while it runs, Wait, and cancellation by its destructor.
#include "services/executor/weights_memory.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace zipmoe::executor {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

BackgroundWeightsCopy::File FakeFile(const std::string& path, int64_t bytes, std::atomic<int>* calls, Status result) {
  return {path, bytes, [calls, result](const std::atomic<bool>*) {
            calls->fetch_add(1);
            return result;
          }};
}

WeightsMemoryStats Mapped(int64_t bytes) {
  WeightsMemoryStats s;
  s.mapped_bytes = bytes;
  return s;
}

// Files are copied in order while the headroom holds each one plus the 1 GiB reserve; one that does
// not fit, or whose copy fails, stays mapped and is counted; the headroom is asked again per file.
TEST(BackgroundWeightsCopyTest, CopiesWhatFitsAndCountsWhatStaysMapped) {
  std::atomic<int> calls{0};
  std::atomic<int> asked{0};
  std::vector<BackgroundWeightsCopy::File> files = {
      FakeFile("a", 10 * kMiB, &calls, Status::Ok()),
      FakeFile("b", 20 * kMiB, &calls, Status::Ok()),  // does not fit: headroom shrinks after "a"
      FakeFile("c", 30 * kMiB, &calls, Status::IoError("c: no memory")),
      FakeFile("d", 40 * kMiB, &calls, Status::Ok()),
  };
  // The headroom the copy sees at each file's turn: a, b, c, d.
  const std::vector<int64_t> headroom = {kAnonymousWeightsReserveBytes + 10 * kMiB,
                                         kAnonymousWeightsReserveBytes + 20 * kMiB - 1,
                                         kAnonymousWeightsReserveBytes + 64 * kMiB,
                                         kAnonymousWeightsReserveBytes + 64 * kMiB};
  BackgroundWeightsCopy copy(std::move(files), Mapped(100 * kMiB), [&] { return headroom[asked++]; });
  ASSERT_TRUE(copy.Wait(std::chrono::seconds(60)));
  EXPECT_EQ(asked.load(), 4);
  EXPECT_EQ(calls.load(), 3) << "a, c and d tried; b did not fit";
  const WeightsMemoryStats s = copy.stats();
  EXPECT_EQ(s.anonymous_bytes, 50 * kMiB);
  EXPECT_EQ(s.mapped_bytes, 50 * kMiB);
  EXPECT_EQ(s.files_left_mapped, 2);
  EXPECT_EQ(s.pending_bytes, 0);
  EXPECT_GT(s.background_seconds, 0.0);
}

// While a copy runs, stats() says what is still queued and Wait() times out; the destructor cancels the
// copy in progress (the stand-in returns only when it sees the flag) and joins: no file is counted as
// copied, nothing is left running.
TEST(BackgroundWeightsCopyTest, TheDestructorCancelsTheCopyInProgress) {
  std::atomic<bool> started{false};
  std::atomic<bool> saw_cancel{false};
  std::atomic<int> later_calls{0};
  {
    std::vector<BackgroundWeightsCopy::File> files;
    files.push_back({"slow", 8 * kMiB, [&](const std::atomic<bool>* cancel) {
                       started = true;
                       while (!cancel->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                       saw_cancel = true;
                       return Status::Unavailable("slow: copy into anonymous memory cancelled");
                     }});
    files.push_back(FakeFile("next", 4 * kMiB, &later_calls, Status::Ok()));
    BackgroundWeightsCopy copy(std::move(files), Mapped(12 * kMiB), [] { return int64_t{1} << 50; });
    while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const WeightsMemoryStats s = copy.stats();
    EXPECT_EQ(s.pending_bytes, 12 * kMiB);
    EXPECT_EQ(s.anonymous_bytes, 0);
    EXPECT_FALSE(copy.Wait(std::chrono::milliseconds(20))) << "still copying";
  }
  EXPECT_TRUE(saw_cancel.load());
  EXPECT_EQ(later_calls.load(), 0) << "after a cancel no further file is copied";
}

}  // namespace
}  // namespace zipmoe::executor
