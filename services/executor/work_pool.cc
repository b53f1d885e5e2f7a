#include "services/executor/work_pool.h"

#include <strings.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>

#include "common/status.h"

namespace zipmoe::executor {
namespace {

thread_local bool t_in_region = false;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Shared(): one pool per thread count, made on first use and never destroyed, so that a caller still
// inside a region of the previous size is never left with a destroyed pool.
constexpr int kMaxSharedThreads = 256;
Mutex g_shared_mu;
std::array<WorkPool*, kMaxSharedThreads + 1> g_shared_pools ZM_GUARDED_BY(g_shared_mu) = {};
std::atomic<WorkPool*> g_shared{nullptr};

WorkPool* SharedPoolOf(int threads) ZM_EXCLUDES(g_shared_mu) {
  threads = std::clamp(threads, 1, kMaxSharedThreads);
  MutexLock lock(&g_shared_mu);
  WorkPool*& pool = g_shared_pools[static_cast<size_t>(threads)];
  if (pool == nullptr) pool = new WorkPool(threads);  // never deleted (see above)
  return pool;
}

// OMP_WAIT_POLICY=PASSIVE (which `zipmoe` sets for runs with the runtime, whose I/O thread and
// decompression workers need the cores between regions: services/cli/main.cc) makes helpers sleep at once.
int64_t SpinMicros() {
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  return policy != nullptr && strcasecmp(policy, "passive") == 0 ? 0 : WorkPool::kSpinMicros;
}

}  // namespace

WorkPool::WorkPool(int threads) : threads_(std::max(1, threads)), spin_micros_(SpinMicros()) {
  ZM_CHECK(threads_ <= 0x7fff) << threads_ << " threads";
  helpers_.reserve(static_cast<size_t>(threads_ - 1));
  for (int i = 1; i < threads_; ++i) helpers_.emplace_back([this] { HelperLoop(); });
}

WorkPool::~WorkPool() {
  stop_.store(true, std::memory_order_seq_cst);
  {
    MutexLock lock(&mu_);
    wake_.NotifyAll();
  }
  for (std::thread& t : helpers_) t.join();
}

WorkPool& WorkPool::Shared() {
  WorkPool* pool = g_shared.load(std::memory_order_acquire);
  if (pool == nullptr) {
    WorkPool* one = SharedPoolOf(1);
    WorkPool* expected = nullptr;
    g_shared.compare_exchange_strong(expected, one, std::memory_order_acq_rel);
    pool = g_shared.load(std::memory_order_acquire);
  }
  return *pool;
}

void WorkPool::SetSharedThreads(int threads) { g_shared.store(SharedPoolOf(threads), std::memory_order_release); }

bool WorkPool::InRegion() { return t_in_region; }

void WorkPool::Run(const std::function<void(int slot)>& body) {
  if (threads_ == 1 || t_in_region || busy_.exchange(true, std::memory_order_acquire)) {
    const bool outer = t_in_region;
    t_in_region = true;
    body(0);
    t_in_region = outer;
    return;
  }
  t_in_region = true;
  body_.store(&body, std::memory_order_relaxed);
  const uint64_t s = state_.load(std::memory_order_relaxed);
  state_.store((static_cast<uint64_t>(Generation(s) + 1) << 32) | kOpen | kSlotOne, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    MutexLock lock(&mu_);
    wake_.NotifyAll();
  }
  body(0);
  // Close the region; wait for the helpers that joined (they are running: each leaves when its body
  // finds nothing more to claim).
  state_.fetch_and(~kOpen, std::memory_order_acq_rel);
  for (int spins = 0; (state_.load(std::memory_order_acquire) & kActiveMask) != 0; ++spins) {
    if (spins < 4096) {
      CpuRelax();
    } else {
      std::this_thread::yield();  // a joined helper preempted on this core
    }
  }
  t_in_region = false;
  busy_.store(false, std::memory_order_release);
}

void WorkPool::HelperLoop() {
  t_in_region = true;  // regions opened inside a body run inline
  uint32_t seen = Generation(state_.load(std::memory_order_acquire));
  uint64_t s = 0;
  const auto ready = [&] {
    s = state_.load(std::memory_order_seq_cst);
    return stop_.load(std::memory_order_relaxed) ||
           (Generation(s) != seen && (s & kOpen) != 0 && !hold_.load(std::memory_order_relaxed));
  };
  for (;;) {
    bool woke = false;
    const auto spin_end = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_micros_);
    for (int i = 0; !woke; ++i) {
      woke = ready();
      if (woke || spin_micros_ == 0 || ((i & 63) == 63 && std::chrono::steady_clock::now() >= spin_end)) break;
      CpuRelax();
    }
    if (!woke) {
      MutexLock lock(&mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.Wait(&lock, ready);
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    if (stop_.load(std::memory_order_relaxed)) return;
    seen = Generation(s);
    // Join while the region is open and has a slot left (the caller may close it meanwhile).
    while ((s & kOpen) != 0 && Slot(s) < threads_ && Generation(s) == seen) {
      if (state_.compare_exchange_weak(s, s + kSlotOne + 1, std::memory_order_acq_rel)) {
        (*body_.load(std::memory_order_relaxed))(Slot(s));
        state_.fetch_sub(1, std::memory_order_release);
        break;
      }
    }
  }
}

void WorkPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (threads_ == 1 || n <= grain || t_in_region) {
    body(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int) {
    for (;;) {
      const int64_t begin = next.fetch_add(grain, std::memory_order_relaxed);
      if (begin >= n) return;
      body(begin, std::min(n, begin + grain));
    }
  });
}

}  // namespace zipmoe::executor
