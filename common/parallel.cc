#include "common/parallel.h"

#include "common/cpu_topology.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace zipmoe {

int ResolveThreadCount(int requested) {
  if (requested > 0) return requested;
  return AllowedCpuCount();
}

int ResolveComputeThreadCount(int requested) {
  if (requested > 0) return requested;
  return AllowedPhysicalCoreCount();
}

void ParallelFor(size_t begin, size_t end, int n_threads, const std::function<void(size_t)>& fn) {
  if (begin >= end) return;
  const size_t n_workers = std::min(static_cast<size_t>(ResolveThreadCount(n_threads)), end - begin);
  std::atomic<size_t> next{begin};
  std::vector<std::thread> workers;
  workers.reserve(n_workers);
  for (size_t w = 0; w < n_workers; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < end; i = next++) fn(i);
    });
  }
  for (auto& th : workers) th.join();
}

}  // namespace zipmoe
