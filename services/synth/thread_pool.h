// ParallelRunner: a fixed-size pool that runs index-parallel loops (style.md "Threads": fixed pools,
// joined in the destructor, nothing detached).
//
// Thread-safety: ParallelFor may be called from any thread; concurrent calls are serialised (the second
// waits for the first). The calling thread works on the loop too, so ParallelRunner(1) runs inline.
// `fn` must not throw and must be safe to call concurrently for distinct indices.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace zipmoe::synth {

class ParallelRunner {
 public:
  // n_threads >= 1 threads in total (n_threads - 1 workers plus the caller); values < 1 mean 1.
  explicit ParallelRunner(int n_threads);
  ~ParallelRunner();  // stops and joins the workers
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  // Runs fn(i) for every i in [0, n_tasks) and returns when all calls have returned.
  void ParallelFor(int64_t n_tasks, const std::function<void(int64_t)>& fn);
  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

 private:
  void WorkerLoop();
  // Claims and runs tasks of the current loop until none is left. Called with mu_ held.
  void RunTasks(std::unique_lock<std::mutex>& lock);

  std::mutex call_mu_;  // serialises ParallelFor calls
  std::mutex mu_;       // guards every field below
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t)>* fn_ = nullptr;  // the loop body of the current call
  int64_t n_tasks_ = 0;
  int64_t next_task_ = 0;
  int64_t unfinished_ = 0;  // tasks claimed or unclaimed that have not returned
  int active_workers_ = 0;  // workers inside RunTasks for the current call
  uint64_t generation_ = 0;  // bumped once per ParallelFor call
  bool stop_ = false;
  std::vector<std::thread> workers_;  // constant after construction
};

}  // namespace zipmoe::synth
