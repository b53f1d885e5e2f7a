// Which CPUs this process may use and how many physical cores they are: the defaults of every
// `--threads 0` (ResolveThreadCount / ResolveComputeThreadCount in common/parallel.h).
//
// std::thread::hardware_concurrency() counts the machine's online CPUs, ignoring the affinity mask
// that `taskset`, cgroups' cpusets (docker `--cpuset-cpus`) and compose's `cpu_affinity` set: a
// 16-CPU host running `taskset -c 0-1 zipmoe generate` started 16 compute threads on 2 CPUs. These
// functions read the mask (sched_getaffinity(2)) and, for the compute threads of the matmuls, which
// are bound by memory and by one FMA pipe per core, count SMT siblings once (as llama.cpp's default
// thread count does, from the same sysfs files).
// Source: Linux Documentation/ABI/stable/sysfs-devices-system-cpu (topology/core_cpus_list, the
// older name topology/thread_siblings_list: the CPUs sharing this CPU's core).
// Thread-safety: reentrant (reads the kernel's state on every call).
#pragma once

#include <string>
#include <vector>

namespace zipmoe {

// The CPU numbers in this process's affinity mask, ascending (Linux sched_getaffinity); on another
// OS or if the call fails, 0 .. hardware_concurrency-1. Never empty.
std::vector<int> AllowedCpus();

// AllowedCpus().size(): the CPUs this process may run on (>= 1).
int AllowedCpuCount();

// The number of physical cores among `cpus`: CPUs whose
// `<sysfs_cpu_root>/cpuN/topology/core_cpus_list` (else `thread_siblings_list`) read the same count
// once. A CPU whose file cannot be read counts as a core of its own, so the result is in
// [1, cpus.size()] for a non-empty `cpus` (0 for an empty one).
int CountPhysicalCores(const std::vector<int>& cpus,
                       const std::string& sysfs_cpu_root = "/sys/devices/system/cpu");

// CountPhysicalCores(AllowedCpus()): the physical cores this process may run on (>= 1).
int AllowedPhysicalCoreCount();

}  // namespace zipmoe
