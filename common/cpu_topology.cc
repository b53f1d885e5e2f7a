#include "common/cpu_topology.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

namespace zipmoe {

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
#if defined(__linux__)
  // A mask for up to 4096 CPUs; CPU_ALLOC so that hosts beyond CPU_SETSIZE (1024) are read whole.
  constexpr int kMaxCpus = 4096;
  cpu_set_t* set = CPU_ALLOC(kMaxCpus);
  if (set != nullptr) {
    const size_t size = CPU_ALLOC_SIZE(kMaxCpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      for (int cpu = 0; cpu < kMaxCpus; ++cpu)
        if (CPU_ISSET_S(cpu, size, set)) cpus.push_back(cpu);
    }
    CPU_FREE(set);
  }
#endif
  if (cpus.empty()) {
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int cpu = 0; cpu < n; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

int AllowedCpuCount() { return static_cast<int>(AllowedCpus().size()); }

namespace {

// The first line of `path`, "" if it cannot be read.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

int CountPhysicalCores(const std::vector<int>& cpus, const std::string& sysfs_cpu_root) {
  std::set<std::string> cores;
  for (const int cpu : cpus) {
    const std::string topology = sysfs_cpu_root + "/cpu" + std::to_string(cpu) + "/topology/";
    std::string siblings = FirstLine(topology + "core_cpus_list");
    if (siblings.empty()) siblings = FirstLine(topology + "thread_siblings_list");
    // Unreadable: a core of its own, keyed so that it cannot equal a sibling list ("0-1", "3,19").
    if (siblings.empty()) siblings = "?" + std::to_string(cpu);
    cores.insert(siblings);
  }
  return static_cast<int>(cores.size());
}

int AllowedPhysicalCoreCount() { return std::max(1, CountPhysicalCores(AllowedCpus())); }

}  // namespace zipmoe
