#include "common/thread_priority.h"

#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace zipmoe {
namespace {

// The kernel's struct sched_attr (include/uapi/linux/sched/types.h); glibc has no wrapper.
struct SchedAttr {
  uint32_t size = sizeof(SchedAttr);
  uint32_t sched_policy = 0;
  uint64_t sched_flags = 0;
  int32_t sched_nice = 0;
  uint32_t sched_priority = 0;
  uint64_t sched_runtime = 0;  // SCHED_OTHER since Linux 6.12: the EEVDF time slice, ns
  uint64_t sched_deadline = 0;
  uint64_t sched_period = 0;
  uint32_t sched_util_min = 0;
  uint32_t sched_util_max = 0;
};

constexpr uint64_t kShortSliceNs = 100'000;  // 0.1 ms, the kernel's minimum custom slice

pid_t ThreadIdOf(pid_t tid) { return tid == 0 ? static_cast<pid_t>(::syscall(SYS_gettid)) : tid; }

Status ErrnoStatus(int err, ThreadPriority level, pid_t tid, const char* call) {
  const std::string what =
      fmt::format("{} priority for thread {}: {}: {}", ThreadPriorityName(level), tid, call, std::strerror(err));
  if (err == EPERM) {
    return Status::Unavailable(what + (level == ThreadPriority::kRealtime
                                           ? " (needs CAP_SYS_NICE, e.g. docker cap_add: [SYS_NICE], or RLIMIT_RTPRIO)"
                                           : ""));
  }
  if (err == ESRCH) return Status::NotFound(what);
  return Status::Internal(what);
}

Result<ThreadPriority> RaiseRealtime(pid_t tid) {
  sched_param param{};
  param.sched_priority = 1;
  if (::sched_setscheduler(tid, SCHED_FIFO, &param) != 0) {
    return ErrnoStatus(errno, ThreadPriority::kRealtime, tid, "sched_setscheduler(SCHED_FIFO, 1)");
  }
  return ThreadPriority::kRealtime;
}

Result<ThreadPriority> RaiseShortSlice(pid_t tid) {
  SchedAttr attr;
  if (::syscall(SYS_sched_getattr, tid, &attr, sizeof(attr), 0) != 0) {
    return ErrnoStatus(errno, ThreadPriority::kShortSlice, tid, "sched_getattr");
  }
  // Keep the thread's nice value (lowering it would need privileges); a realtime thread stays one.
  if (attr.sched_policy != SCHED_OTHER && attr.sched_policy != SCHED_BATCH) return ThreadPriority::kRealtime;
  attr.size = sizeof(attr);
  attr.sched_policy = SCHED_OTHER;
  attr.sched_flags = 0;
  attr.sched_runtime = kShortSliceNs;
  if (::syscall(SYS_sched_setattr, tid, &attr, 0) != 0) {
    return ErrnoStatus(errno, ThreadPriority::kShortSlice, tid, "sched_setattr(sched_runtime)");
  }
  // Kernels before 6.12 accept and ignore sched_runtime for SCHED_OTHER; 6.12+ report the slice back.
  SchedAttr check;
  if (::syscall(SYS_sched_getattr, tid, &check, sizeof(check), 0) != 0 || check.sched_runtime != kShortSliceNs) {
    return Status::Unavailable(fmt::format("slice priority for thread {}: this kernel has no custom time slices "
                                           "(Linux >= 6.12)", tid));
  }
  return ThreadPriority::kShortSlice;
}

std::atomic<uint8_t> g_pipeline{static_cast<uint8_t>(ThreadPriority::kNone)};

}  // namespace

const char* ThreadPriorityName(ThreadPriority priority) {
  switch (priority) {
    case ThreadPriority::kNone:
      return "none";
    case ThreadPriority::kShortSlice:
      return "slice";
    case ThreadPriority::kRealtime:
      return "realtime";
    case ThreadPriority::kAuto:
      return "auto";
  }
  return "?";
}

Result<ThreadPriority> ParseThreadPriority(const std::string& text, const std::string& what) {
  for (ThreadPriority p : {ThreadPriority::kNone, ThreadPriority::kShortSlice, ThreadPriority::kRealtime,
                           ThreadPriority::kAuto}) {
    if (text == ThreadPriorityName(p)) return p;
  }
  return Status::InvalidArgument(
      fmt::format("{} = '{}': expected auto, realtime, slice or none", what, text));
}

Status LowerThreadToIdle() {
  struct sched_param param {};
  param.sched_priority = 0;
  if (::sched_setscheduler(0, SCHED_IDLE, &param) != 0)  // 0: the calling thread (Linux)
    return Status::Internal(fmt::format("SCHED_IDLE for this thread: {}", std::strerror(errno)));
  return Status::Ok();
}

Result<ThreadPriority> RaiseThread(ThreadPriority want, pid_t tid) {
  const pid_t id = ThreadIdOf(tid);
  switch (want) {
    case ThreadPriority::kNone:
      return ThreadPriority::kNone;
    case ThreadPriority::kRealtime:
      return RaiseRealtime(id);
    case ThreadPriority::kShortSlice:
      return RaiseShortSlice(id);
    case ThreadPriority::kAuto: {
      Result<ThreadPriority> rt = RaiseRealtime(id);
      if (rt.ok() || rt.status().code() == StatusCode::kNotFound) return rt;
      Result<ThreadPriority> slice = RaiseShortSlice(id);
      if (slice.ok() || slice.status().code() == StatusCode::kNotFound) return slice;
      return ThreadPriority::kNone;
    }
  }
  return Status::InvalidArgument(fmt::format("thread priority {}", static_cast<int>(want)));
}

Result<ThreadPriority> ResolveThreadPriority(ThreadPriority want) {
  if (want == ThreadPriority::kNone) return want;
  Result<ThreadPriority> got = Status::Internal("probe thread did not run");
  std::thread probe([&got, want] { got = RaiseThread(want); });
  probe.join();
  if (want == ThreadPriority::kAuto && !got.ok()) return ThreadPriority::kNone;
  return got;
}

void SetPipelineThreadPriority(ThreadPriority priority) { g_pipeline.store(static_cast<uint8_t>(priority)); }

ThreadPriority PipelineThreadPriority() { return static_cast<ThreadPriority>(g_pipeline.load()); }

void RaisePipelineThread() {
  const ThreadPriority p = PipelineThreadPriority();
  if (p != ThreadPriority::kNone) (void)RaiseThread(p);
}

int RaiseZmqIoThreads(ThreadPriority want) {
  if (want == ThreadPriority::kNone) return 0;
  int raised = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  while (const dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream comm(fmt::format("/proc/self/task/{}/comm", entry->d_name));
    std::string name;
    std::getline(comm, name);
    if (name.rfind("ZMQbg/", 0) != 0) continue;
    Result<ThreadPriority> r = RaiseThread(want, static_cast<pid_t>(std::atoi(entry->d_name)));
    raised += r.ok() && *r != ThreadPriority::kNone;
  }
  ::closedir(dir);
  return raised;
}

}  // namespace zipmoe
