// ParallelRunner: a fixed-size pool that runs index-parallel loops (style.md "Threads": fixed pools,
// joined in the destructor, nothing detached).
//
// Thread-safety: ParallelFor may be called from any thread; concurrent calls are serialised (the second
// waits for the first). The calling thread works on the loop too, so ParallelRunner(1) runs inline.
// `fn` must not throw and must be safe to call concurrently for distinct indices.
#pragma once

#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

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
  // Claims and runs tasks of the current loop until none is left. Called with mu_ held; releases it
  // while each task runs.
  void RunTasks() ZM_REQUIRES(mu_);

  Mutex call_mu_;  // serialises ParallelFor calls
  Mutex mu_;       // guards every field below but workers_
  CondVar work_cv_;
  CondVar done_cv_;
  const std::function<void(int64_t)>* fn_ ZM_GUARDED_BY(mu_) = nullptr;  // the loop body of the current call
  int64_t n_tasks_ ZM_GUARDED_BY(mu_) = 0;
  int64_t next_task_ ZM_GUARDED_BY(mu_) = 0;
  int64_t unfinished_ ZM_GUARDED_BY(mu_) = 0;  // tasks claimed or unclaimed that have not returned
  int active_workers_ ZM_GUARDED_BY(mu_) = 0;  // workers inside RunTasks for the current call
  uint64_t generation_ ZM_GUARDED_BY(mu_) = 0;  // bumped once per ParallelFor call
  bool stop_ ZM_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;  // constant after construction
};

}  // namespace zipmoe::synth
