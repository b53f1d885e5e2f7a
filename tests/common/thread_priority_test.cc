// common/thread_priority.h: names, the levels a thread really gets (read back from the kernel), the
// error when a level is not permitted, and the ZeroMQ I/O threads found by name.
#include "common/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include <gtest/gtest.h>
#include <zmq.hpp>

namespace zipmoe {
namespace {

struct Attr {  // struct sched_attr
  uint32_t size = sizeof(Attr);
  uint32_t policy = 0;
  uint64_t flags = 0;
  int32_t nice = 0;
  uint32_t priority = 0;
  uint64_t runtime = 0;
  uint64_t deadline = 0;
  uint64_t period = 0;
  uint32_t util_min = 0;
  uint32_t util_max = 0;
};

Attr AttrOf(pid_t tid) {
  Attr a;
  EXPECT_EQ(::syscall(SYS_sched_getattr, tid, &a, sizeof(a), 0), 0);
  return a;
}

pid_t Tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// What the kernel says a thread runs at, in ThreadPriority's words.
ThreadPriority Observed(pid_t tid) {
  const Attr a = AttrOf(tid);
  if (a.policy == SCHED_FIFO) return ThreadPriority::kRealtime;
  if (a.policy == SCHED_OTHER && a.runtime == 100'000) return ThreadPriority::kShortSlice;
  return ThreadPriority::kNone;
}

// Runs `body` on a fresh thread (so the test process keeps its own priority) and joins it.
template <typename F>
void OnThread(F body) {
  std::thread t(body);
  t.join();
}

TEST(ThreadPriority, NamesRoundTripAndBadTextIsNamed) {
  for (ThreadPriority p : {ThreadPriority::kNone, ThreadPriority::kShortSlice, ThreadPriority::kRealtime,
                           ThreadPriority::kAuto}) {
    Result<ThreadPriority> parsed = ParseThreadPriority(ThreadPriorityName(p), "--pipeline-priority");
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, p);
  }
  Result<ThreadPriority> bad = ParseThreadPriority("fast", "pipeline_priority");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("pipeline_priority = 'fast'"), std::string::npos) << bad.status().ToString();
}

TEST(ThreadPriority, NoneChangesNothing) {
  OnThread([] {
    const Attr before = AttrOf(Tid());
    Result<ThreadPriority> got = RaiseThread(ThreadPriority::kNone);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, ThreadPriority::kNone);
    const Attr after = AttrOf(Tid());
    EXPECT_EQ(after.policy, before.policy);
    EXPECT_EQ(after.runtime, before.runtime);
  });
}

// Auto gives what the kernel then reports, and the thread's nice value survives a short slice.
TEST(ThreadPriority, AutoGetsWhatTheKernelReports) {
  OnThread([] {
    Result<ThreadPriority> got = RaiseThread(ThreadPriority::kAuto);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_NE(*got, ThreadPriority::kAuto);
    EXPECT_EQ(Observed(Tid()), *got);
  });
  // The probe runs on its own thread: the caller keeps its level.
  const ThreadPriority mine = Observed(Tid());
  Result<ThreadPriority> resolved = ResolveThreadPriority(ThreadPriority::kAuto);
  ASSERT_TRUE(resolved.ok());
  EXPECT_NE(*resolved, ThreadPriority::kAuto);
  EXPECT_EQ(Observed(Tid()), mine);
}

// An explicit level is either granted (the kernel reports it) or refused with a reason.
TEST(ThreadPriority, ExplicitLevelsAreGrantedOrRefusedWithAReason) {
  for (ThreadPriority want : {ThreadPriority::kRealtime, ThreadPriority::kShortSlice}) {
    OnThread([want] {
      Result<ThreadPriority> got = RaiseThread(want);
      if (got.ok()) {
        // A realtime thread asked for a short slice stays realtime; otherwise exactly what was asked.
        EXPECT_EQ(Observed(Tid()), *got);
        if (want == ThreadPriority::kRealtime) {
          EXPECT_EQ(*got, ThreadPriority::kRealtime);
        }
      } else {
        EXPECT_EQ(got.status().code(), StatusCode::kUnavailable) << got.status().ToString();
        EXPECT_NE(got.status().message().find(ThreadPriorityName(want)), std::string::npos);
        EXPECT_EQ(Observed(Tid()), ThreadPriority::kNone);
      }
    });
  }
}

TEST(ThreadPriority, ShortSliceKeepsTheNiceValue) {
  OnThread([] {
    ASSERT_EQ(::setpriority(PRIO_PROCESS, static_cast<id_t>(Tid()), 5), 0);
    Result<ThreadPriority> got = RaiseThread(ThreadPriority::kShortSlice);
    if (!got.ok()) GTEST_SKIP() << "no custom slices here: " << got.status().ToString();
    EXPECT_EQ(AttrOf(Tid()).nice, 5);
    EXPECT_EQ(AttrOf(Tid()).runtime, 100'000u);
  });
}

TEST(ThreadPriority, UnknownThreadIsNotFound) {
  Result<ThreadPriority> got = RaiseThread(ThreadPriority::kRealtime, 0x3fffffff);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound) << got.status().ToString();
}

// Threads created by a raised thread inherit its level (the pipeline services rely on it).
TEST(ThreadPriority, ChildThreadsInherit) {
  OnThread([] {
    Result<ThreadPriority> got = RaiseThread(ThreadPriority::kAuto);
    ASSERT_TRUE(got.ok());
    ThreadPriority child = ThreadPriority::kAuto;
    OnThread([&child] { child = Observed(Tid()); });
    EXPECT_EQ(child, *got);
  });
}

TEST(ThreadPriority, PipelineThreadTakesTheProcessLevel) {
  Result<ThreadPriority> level = ResolveThreadPriority(ThreadPriority::kAuto);
  ASSERT_TRUE(level.ok());
  SetPipelineThreadPriority(*level);
  EXPECT_EQ(PipelineThreadPriority(), *level);
  ThreadPriority seen = ThreadPriority::kAuto;
  OnThread([&seen] {
    RaisePipelineThread();
    seen = Observed(Tid());
  });
  EXPECT_EQ(seen, *level);
  SetPipelineThreadPriority(ThreadPriority::kNone);
  OnThread([&seen] {
    RaisePipelineThread();
    seen = Observed(Tid());
  });
  EXPECT_EQ(seen, ThreadPriority::kNone);
}

TEST(ThreadPriority, RaisesZeroMqIoThreadsByName) {
  Result<ThreadPriority> level = ResolveThreadPriority(ThreadPriority::kAuto);
  ASSERT_TRUE(level.ok());
  if (*level == ThreadPriority::kNone) GTEST_SKIP() << "neither realtime nor a short slice is permitted here";
  zmq::context_t context(1);
  zmq::socket_t socket(context, zmq::socket_type::pair);  // starts the context's I/O thread
  socket.bind("inproc://thread-priority-test");
  EXPECT_EQ(RaiseZmqIoThreads(ThreadPriority::kNone), 0);
  // ZeroMQ's threads name themselves once they run: wait for that (at most 5 s).
  int raised = 0;
  for (int i = 0; i < 500 && raised == 0; ++i) {
    raised = RaiseZmqIoThreads(*level);
    if (raised == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(raised, 1);
  // This (test) thread is not one of them.
  EXPECT_EQ(Observed(Tid()), ThreadPriority::kNone);
}

}  // namespace
}  // namespace zipmoe
