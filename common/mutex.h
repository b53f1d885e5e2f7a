// A std::mutex the thread-safety analysis can see (common/thread_annotations.h), its scoped lock
// and a condition variable that waits on it. Same semantics and cost as std::mutex,
// std::lock_guard / std::unique_lock and std::condition_variable (they are what is inside).
//
//   Mutex mu_;
//   int count_ ZM_GUARDED_BY(mu_) = 0;
//   void Add() ZM_EXCLUDES(mu_) { MutexLock lock(&mu_); ++count_; }
//   void Wait() { MutexLock lock(&mu_); cv_.Wait(&lock, [&]() ZM_REQUIRES(mu_) { return count_ > 0; }); }
//
// Not copyable or movable. Thread-safe, as the std types.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/thread_annotations.h"

namespace zipmoe {

class ZM_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ZM_ACQUIRE() { mu_.lock(); }
  void Unlock() ZM_RELEASE() { mu_.unlock(); }
  // Tells the analysis `mu` is held where it cannot see the lock (e.g. a callback run under it).
  void AssertHeld() const ZM_ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction; Unlock/Lock release and retake it in between (a
// wait, or work done outside the lock).
class ZM_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ZM_ACQUIRE(mu) : lock_(mu->mu_) {}
  ~MutexLock() ZM_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() ZM_RELEASE() { lock_.unlock(); }
  void Lock() ZM_ACQUIRE() { lock_.lock(); }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// std::condition_variable over a MutexLock. Wait* return with the lock held again.
class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }
  void Wait(MutexLock* lock) { cv_.wait(lock->lock_); }
  template <typename Predicate>
  void Wait(MutexLock* lock, Predicate ready) {
    cv_.wait(lock->lock_, ready);
  }
  // false when `timeout` passed first.
  template <typename Rep, typename Period>
  bool WaitFor(MutexLock* lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(lock->lock_, timeout) == std::cv_status::no_timeout;
  }
  // The predicate's value at return (false: `timeout` passed with it still false).
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(MutexLock* lock, std::chrono::duration<Rep, Period> timeout, Predicate ready) {
    return cv_.wait_for(lock->lock_, timeout, ready);
  }

 private:
  std::condition_variable cv_;
};

}  // namespace zipmoe
