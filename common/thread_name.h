// Names the calling thread for top -H, perf, gdb and /proc/PID/task/TID/comm (pthread_setname_np;
// Linux keeps 15 bytes, longer names are cut). Best effort: a failure is ignored. Thread-safe.
#pragma once

#include <string>

namespace zipmoe {

void SetCurrentThreadName(const std::string& name);

}  // namespace zipmoe
