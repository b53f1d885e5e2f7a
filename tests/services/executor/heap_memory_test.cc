// services/executor/heap_memory.h: with the executor's heap policy a layer's worth of freed buffers
// stays in the heap and the next use faults no pages in; the environment's own choice is left alone.
// Each measurement runs in a forked child, whose heap is its own.
#include "services/executor/heap_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zipmoe::executor {
namespace {

struct HeapRun {
  long last_faults = -1;   // minor page faults of the last of four identical rounds
  long long kept_free = -1;  // bytes the heap holds free after the last round
  int retained = -1;       // RetainFreedHeapMemory's answer (1 / 0), -1 when not called
};

// One round: four 4 MiB buffers and one of 6 MiB (what a prefill layer's activations look like to
// malloc), each written, then all freed; four rounds.
HeapRun RunRounds() {
  HeapRun run;
  constexpr size_t kSmall = size_t{4} << 20, kLarge = size_t{6} << 20;
  for (int round = 0; round < 4; ++round) {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    std::vector<char*> buffers;
    for (int i = 0; i < 5; ++i) {
      const size_t bytes = i == 4 ? kLarge : kSmall;
      char* p = static_cast<char*>(std::malloc(bytes));
      if (p == nullptr) std::abort();
      std::memset(p, i + 1, bytes);
      asm volatile("" : : "r"(p) : "memory");  // the writes and the buffer are used
      buffers.push_back(p);
    }
    for (auto it = buffers.rbegin(); it != buffers.rend(); ++it) std::free(*it);
    getrusage(RUSAGE_SELF, &after);
    run.last_faults = after.ru_minflt - before.ru_minflt;
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  run.kept_free = static_cast<long long>(mallinfo2().fordblks);
#endif
  return run;
}

// Runs RunRounds in a child (after RetainFreedHeapMemory when `retain`) and returns its numbers.
HeapRun InChild(bool retain) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    HeapRun run;
    const int retained = retain ? (RetainFreedHeapMemory() ? 1 : 0) : -1;
    run = RunRounds();
    run.retained = retained;
    const ssize_t n = write(fds[1], &run, sizeof(run));
    _exit(n == static_cast<ssize_t>(sizeof(run)) ? 0 : 1);
  }
  close(fds[1]);
  HeapRun run;
  const ssize_t n = read(fds[0], &run, sizeof(run));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_EQ(n, static_cast<ssize_t>(sizeof(run)));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return run;
}

TEST(HeapMemoryTest, FreedBuffersAreReusedWithoutPageFaults) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "the heap policy is glibc's (mallopt); this C library is not glibc";
#else
  if (HeapPolicySetByEnvironment())
    GTEST_SKIP() << "MALLOC_*_THRESHOLD_ or GLIBC_TUNABLES sets the heap policy here: RetainFreedHeapMemory leaves it";
  // glibc's own policy for comparison (in a process that has not set it already): the 6 MiB buffer is
  // mapped anew each round and the heap's free top is handed back, so rounds fault pages in again.
  const HeapRun before = InChild(false);
  const HeapRun after = InChild(true);
  ASSERT_EQ(after.retained, 1);
  const long pages = static_cast<long>((size_t{22} << 20) / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  std::printf("last round's page faults: %ld before (of %ld pages), %ld with the policy; free bytes kept: %lld, %lld\n",
              before.last_faults, pages, after.last_faults, before.kept_free, after.kept_free);
  EXPECT_LT(after.last_faults, pages / 8) << "the round's buffers were faulted in again";
#if __GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)
  EXPECT_GE(after.kept_free, static_cast<long long>(size_t{16} << 20)) << "the freed buffers went back to the kernel";
#endif
#endif
}

TEST(HeapMemoryTest, TheEnvironmentsChoiceIsLeftAlone) {
  const char* names[] = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"};
  std::vector<std::pair<const char*, std::string>> saved;
  for (const char* name : names) {
    if (const char* v = std::getenv(name)) saved.emplace_back(name, v);
    unsetenv(name);
  }
  EXPECT_FALSE(HeapPolicySetByEnvironment());
  setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F", 1);  // another tunable: not the heap's
  EXPECT_FALSE(HeapPolicySetByEnvironment());
  setenv("GLIBC_TUNABLES", "glibc.cpu.hwcaps=-AVX512F:glibc.malloc.trim_threshold=1048576", 1);
  EXPECT_TRUE(HeapPolicySetByEnvironment());
  unsetenv("GLIBC_TUNABLES");
  setenv("MALLOC_TRIM_THRESHOLD_", "131072", 1);
  EXPECT_TRUE(HeapPolicySetByEnvironment());
  unsetenv("MALLOC_TRIM_THRESHOLD_");
  setenv("MALLOC_MMAP_THRESHOLD_", "131072", 1);
  EXPECT_TRUE(HeapPolicySetByEnvironment());
  unsetenv("MALLOC_MMAP_THRESHOLD_");
  for (const auto& [name, value] : saved) setenv(name, value.c_str(), 1);
}

}  // namespace
}  // namespace zipmoe::executor
