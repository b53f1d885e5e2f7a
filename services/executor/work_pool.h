// The CPU executor's thread pool: the caller and up to threads - 1 helper threads share one parallel
// region, and the caller never waits for a helper that has not started. torch-free.
//
// Why not at::parallel_for (OpenMP): an OpenMP region ends at a barrier that every thread of the team
// must reach, so when another process holds a helper's core the caller waits for the scheduler to give
// that helper a slice, once per region, and a decode step has hundreds of regions. Measured on a 2-core
// Zen 5 with two busy-loop processes beside `zipmoe serve --threads 2` on the tiny qwen2_moe (900 tokens
// in 3 requests): 2.2-33 ms a token with at::parallel_for, 1.0-1.6 ms with this pool, 0.7-0.9 ms with
// --threads 1 (what is left: torch's own OpenMP regions); uncontended 0.64 ms a token against 0.76
// (docs/benchmarks.md "Background: the CPU executor beside other processes"). Here a region is
// cooperative: every participant claims work from shared counters until none is left, so the caller
// alone can finish it; a helper that wakes after everything is claimed does not enter, and the caller
// waits only for helpers that entered (they are running). Results do not depend on who ran what as
// long as each work item writes its own outputs (the executor's tasks do: cpu_ops.h).
//
// Helpers spin for kSpinMicros after a region (regions of one decode step come microseconds apart),
// then sleep on a condition variable; with OMP_WAIT_POLICY=PASSIVE (set by `zipmoe` for runs with the
// runtime, as for torch's OpenMP threads) they sleep at once. One region at a time: a region opened while
// another is open (from another thread, or nested inside a body) runs on its caller alone.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace zipmoe::executor {

class WorkPool {
 public:
  // threads >= 1: the caller plus threads - 1 helpers (started here).
  explicit WorkPool(int threads);
  ~WorkPool();
  WorkPool(const WorkPool&) = delete;
  WorkPool& operator=(const WorkPool&) = delete;

  // The process-wide pool the executor's CPU kernels use (cpu_ops.cc); 1 thread until SetSharedThreads.
  static WorkPool& Shared();
  // Resizes Shared() (the generator does, with its n_threads). Not while a region runs in it.
  static void SetSharedThreads(int threads);

  int threads() const { return threads_; }

  // Runs body(slot) on the calling thread with slot 0 and on every helper that joins while the region
  // is open, each with its own slot in [1, threads()); returns when the caller's body has returned and
  // every helper that joined has left. `body` must be cooperative: whichever participants run, the
  // caller's call alone must get all the work done (claim it from shared counters). Bodies must not
  // throw (a helper's exception ends the process).
  void Run(const std::function<void(int slot)>& body);

  // body(begin, end) over [0, n) in chunks of `grain` (>= 1) items claimed from one counter by the
  // participants of one Run; a region of one chunk, or a pool of one thread, runs inline.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& body);

  // True on a helper thread, or on a caller inside its Run (nested regions run inline).
  static bool InRegion();

  // For tests: while held, helpers do not join regions (as if another process held their cores).
  void HoldHelpersForTest(bool hold) { hold_.store(hold, std::memory_order_seq_cst); }

  static constexpr int64_t kSpinMicros = 200;

 private:
  void HelperLoop();
  // The region word: generation << 32 | open << 31 | next slot << 16 | active helpers.
  static constexpr uint64_t kOpen = uint64_t{1} << 31;
  static constexpr uint64_t kSlotOne = uint64_t{1} << 16;
  static constexpr uint64_t kActiveMask = 0xffff;
  static uint32_t Generation(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
  static int Slot(uint64_t s) { return static_cast<int>((s >> 16) & 0x7fff); }

  const int threads_;
  const int64_t spin_micros_;
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> busy_{false};  // a region is open (one at a time)
  std::atomic<bool> stop_{false};
  std::atomic<bool> hold_{false};
  std::atomic<int> sleepers_{0};
  // The open region's body: written before the region word opens it (release), read by a helper after
  // it joined (acquire); never changed while a helper is inside.
  std::atomic<const std::function<void(int)>*> body_{nullptr};
  Mutex mu_;
  CondVar wake_;
  std::vector<std::thread> helpers_;
};

}  // namespace zipmoe::executor
