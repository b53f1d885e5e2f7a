#include "services/executor/heap_memory.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace zipmoe::executor {

bool HeapPolicySetByEnvironment() {
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr)
    return true;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  return tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr;
}

bool RetainFreedHeapMemory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  static bool set = false;
  std::call_once(once, [] {
    if (HeapPolicySetByEnvironment()) return;
    set = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes)) == 1 &&
          mallopt(M_TRIM_THRESHOLD, static_cast<int>(kTrimThresholdBytes)) == 1;
  });
  return set;
#else
  return false;
#endif
}

}  // namespace zipmoe::executor
