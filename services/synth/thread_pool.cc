// ParallelRunner: fixed worker pool with a shared task counter (see thread_pool.h).
#include "services/synth/thread_pool.h"

namespace zipmoe::synth {

ParallelRunner::ParallelRunner(int n_threads) {
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ParallelRunner::~ParallelRunner() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.NotifyAll();
  for (std::thread& t : workers_) t.join();
}

void ParallelRunner::RunTasks() {
  while (next_task_ < n_tasks_) {
    const int64_t task = next_task_++;
    const std::function<void(int64_t)>* fn = fn_;
    mu_.Unlock();
    (*fn)(task);
    mu_.Lock();
    --unfinished_;
  }
}

void ParallelRunner::ParallelFor(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  MutexLock call_lock(&call_mu_);
  if (workers_.empty() || n_tasks <= 1) {
    for (int64_t i = 0; i < n_tasks; ++i) fn(i);
    return;
  }
  MutexLock lock(&mu_);
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_task_ = 0;
  unfinished_ = n_tasks;
  ++generation_;
  work_cv_.NotifyAll();
  RunTasks();
  // Wait for stragglers; also for workers to leave RunTasks, so none reads fn_ after we return.
  done_cv_.Wait(&lock, [this]() ZM_REQUIRES(mu_) { return unfinished_ == 0 && active_workers_ == 0; });
  fn_ = nullptr;
  n_tasks_ = 0;
  next_task_ = 0;
}

void ParallelRunner::WorkerLoop() {
  MutexLock lock(&mu_);
  uint64_t seen = 0;  // workers start before the first call (generation_ == 0)
  for (;;) {
    work_cv_.Wait(&lock, [&]() ZM_REQUIRES(mu_) { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++active_workers_;
    RunTasks();
    --active_workers_;
    if (unfinished_ == 0 && active_workers_ == 0) done_cv_.NotifyAll();
  }
}

}  // namespace zipmoe::synth
