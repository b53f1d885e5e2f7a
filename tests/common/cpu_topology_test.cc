#include "common/cpu_topology.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/parallel.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

namespace fs = std::filesystem;

// Writes <root>/cpuN/topology/<file> = text (a fake sysfs CPU tree).
void WriteTopology(const std::string& root, int cpu, const std::string& file, const std::string& text) {
  const fs::path dir = fs::path(root) / ("cpu" + std::to_string(cpu)) / "topology";
  fs::create_directories(dir);
  std::ofstream(dir / file) << text << "\n";
}

// Two SMT siblings per core, numbered the way x86 Linux does (cpu c and c + 4 share core c), as in
// /sys on a 4-core, 8-thread host.
TEST(CpuTopologyTest, SmtSiblingsCountOnce) {
  testing::TempDir tmp;
  for (int cpu = 0; cpu < 8; ++cpu) {
    const int core = cpu % 4;
    WriteTopology(tmp.path(), cpu, "core_cpus_list", std::to_string(core) + "," + std::to_string(core + 4));
  }
  EXPECT_EQ(CountPhysicalCores({0, 1, 2, 3, 4, 5, 6, 7}, tmp.path()), 4);
  EXPECT_EQ(CountPhysicalCores({0, 4}, tmp.path()), 1);        // one core's two threads (taskset -c 0,4)
  EXPECT_EQ(CountPhysicalCores({0, 1}, tmp.path()), 2);        // two cores' first threads
  EXPECT_EQ(CountPhysicalCores({0, 1, 4, 5, 6}, tmp.path()), 3);
  EXPECT_EQ(CountPhysicalCores({}, tmp.path()), 0);
}

// Kernels before 5.10 have only thread_siblings_list; one thread per core (the Zen VMs this project
// runs on, an Orin's Cortex-A78AE) lists each CPU alone.
TEST(CpuTopologyTest, ReadsTheOlderFileNameAndOneThreadPerCore) {
  testing::TempDir tmp;
  for (int cpu = 0; cpu < 6; ++cpu) WriteTopology(tmp.path(), cpu, "thread_siblings_list", std::to_string(cpu));
  EXPECT_EQ(CountPhysicalCores({0, 1, 2, 3, 4, 5}, tmp.path()), 6);
  // core_cpus_list wins where both exist (ranges as the kernel prints them).
  WriteTopology(tmp.path(), 0, "core_cpus_list", "0-1");
  WriteTopology(tmp.path(), 1, "core_cpus_list", "0-1");
  EXPECT_EQ(CountPhysicalCores({0, 1, 2}, tmp.path()), 2);
}

// A CPU without topology files (an odd container's /sys) counts as a core of its own rather than
// collapsing into one "unknown" core.
TEST(CpuTopologyTest, UnreadableCpusCountAsCoresOfTheirOwn) {
  testing::TempDir tmp;
  WriteTopology(tmp.path(), 0, "core_cpus_list", "0,2");
  WriteTopology(tmp.path(), 2, "core_cpus_list", "0,2");
  EXPECT_EQ(CountPhysicalCores({0, 1, 2, 3}, tmp.path()), 3);  // {0,2}, 1, 3
  EXPECT_EQ(CountPhysicalCores({5, 6}, tmp.path() + "/missing"), 2);
}

// The defaults follow the affinity mask (taskset, a cpuset), not the machine's CPU count: run on a
// thread pinned to one CPU, every `--threads 0` resolves to 1.
TEST(CpuTopologyTest, DefaultsFollowTheAffinityMask) {
  const std::vector<int> allowed = AllowedCpus();
  ASSERT_FALSE(allowed.empty());
  EXPECT_TRUE(std::is_sorted(allowed.begin(), allowed.end()));
  EXPECT_EQ(AllowedCpuCount(), static_cast<int>(allowed.size()));
  EXPECT_LE(AllowedPhysicalCoreCount(), AllowedCpuCount());
  EXPECT_GE(AllowedPhysicalCoreCount(), 1);
  EXPECT_EQ(ResolveThreadCount(0), AllowedCpuCount());
  EXPECT_EQ(ResolveComputeThreadCount(0), AllowedPhysicalCoreCount());
  EXPECT_EQ(ResolveComputeThreadCount(5), 5);

  std::vector<int> pinned_cpus;
  int pinned_threads = 0, pinned_compute = 0, pinned_cores = 0;
  bool pinned = false;
  std::thread([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(allowed.back(), &one);
    pinned = sched_setaffinity(0, sizeof(one), &one) == 0;  // this thread only
    pinned_cpus = AllowedCpus();
    pinned_threads = ResolveThreadCount(0);
    pinned_compute = ResolveComputeThreadCount(0);
    pinned_cores = AllowedPhysicalCoreCount();
  }).join();
  ASSERT_TRUE(pinned) << "sched_setaffinity failed";
  EXPECT_EQ(pinned_cpus, std::vector<int>{allowed.back()});
  EXPECT_EQ(pinned_threads, 1);
  EXPECT_EQ(pinned_compute, 1);
  EXPECT_EQ(pinned_cores, 1);
  EXPECT_EQ(AllowedCpus(), allowed);  // the calling thread's mask is untouched
}

}  // namespace
}  // namespace zipmoe
