// Scheduling priority of the pipeline threads (storage I/O, decompression workers, and in `zipmoe up`
// every thread of the storage, decompressor, cache-manager and scheduler processes plus the
// executor's ZeroMQ I/O thread) over the executor's compute threads.
//
// Why: on a machine with few cores the executor's matrix products keep every core busy, and a
// woken pipeline thread (a read completed, a chunk to decode, a message to pass on) waits for the
// running compute thread's time slice to end (Linux's fair scheduler: up to ~1.5 ms on 2 cores).
// Each such wait delays an expert the executor is about to wait for (ZipMoE §3.4's pipeline: I/O
// and decompression overlap compute only if they run when their input is ready). Measured on a
// 2-core VM (docs/benchmarks.md (h) background): TPOT −10 % embedded, −7 % in `zipmoe up`.
//
// Levels:
//   kRealtime   SCHED_FIFO priority 1: preempts every normal thread at once. Needs CAP_SYS_NICE (root,
//               or docker `cap_add: [SYS_NICE]`) or an RLIMIT_RTPRIO >= 1. The kernel's RT throttling
//               (sched_rt_runtime_us, default 95 %) keeps normal threads running under a flood.
//   kShortSlice SCHED_OTHER with a 0.1 ms time slice (sched_setattr sched_runtime; Linux >= 6.12's EEVDF
//               scheduler): a woken short-slice thread preempts a long-slice one. Unprivileged.
//   kNone       leave the thread as it is.
//   kAuto       kRealtime where permitted, else kShortSlice where the kernel has it, else kNone.
// A raised level is inherited by threads the raised thread creates (and by fork).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace zipmoe {

enum class ThreadPriority : uint8_t { kNone = 0, kShortSlice = 1, kRealtime = 2, kAuto = 3 };

// "none", "slice", "realtime", "auto".
const char* ThreadPriorityName(ThreadPriority priority);
// Parses ThreadPriorityName's words. Errors: kInvalidArgument naming `what` (a flag or config key) and the text.
Result<ThreadPriority> ParseThreadPriority(const std::string& text, const std::string& what);

// Applies `want` to thread `tid` (0 = the calling thread) and returns the level it got: kAuto
// resolves as above; kNone returns kNone without a system call. A thread's nice value is kept.
// Errors: kUnavailable (the level is not permitted, or kShortSlice on a kernel without custom
// slices), kNotFound (no such thread), kInternal (other errno); each names the level, the thread
// and strerror.
Result<ThreadPriority> RaiseThread(ThreadPriority want, pid_t tid = 0);

// The level `want` gets on this machine, found by raising a short-lived probe thread: kAuto resolved
// (never an error; kNone when neither level is permitted), any other level as given when permitted.
// Errors: RaiseThread's for an explicit level this process cannot have.
Result<ThreadPriority> ResolveThreadPriority(ThreadPriority want);

// The process-wide level of the pipeline threads an embedded runtime starts (default kNone); the CLI
// sets it from --pipeline-priority before it creates the runtime. RaisePipelineThread applies it to
// the calling thread (called first by the storage I/O thread and each decompression worker); a
// failure is ignored (the thread keeps its level).
void SetPipelineThreadPriority(ThreadPriority priority);
ThreadPriority PipelineThreadPriority();
void RaisePipelineThread();

// Lowers the calling thread to SCHED_IDLE: it runs only on a core that has nothing else to run, so
// work that may wait (services/executor/weights_memory.h's background copy of the weights) never
// takes a core from the compute, I/O or decompression threads. Unprivileged. Errors: kInternal
// naming strerror (a kernel without SCHED_IDLE).
Status LowerThreadToIdle();

// Raises every thread of this process whose name starts with "ZMQbg/" (ZeroMQ's I/O threads) to
// `want`; returns how many it raised. For the executor process of `zipmoe up`, whose messages to and
// from the scheduler pass through them.
int RaiseZmqIoThreads(ThreadPriority want);

}  // namespace zipmoe
