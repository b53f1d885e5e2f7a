// Fencing of worker processes that stopped heart-beating (services/links/worker_dispatcher.h): before
// the dispatcher re-issues a silent worker's ops, the worker's process is stopped for good so that a
// stalled (not dead) worker cannot wake up and write into arena slots handed to someone else.
// Linux /proc only; a process that is not visible here (another pid namespace) cannot be fenced, and
// the functions say so instead of failing. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>

namespace zipmoe::runtime {

// If `pid` is visible here and runs `zipmoe service ROLE` (not this process): SIGKILLs it and waits
// (at most 2 s) until the kernel has torn it down. Returns a phrase for the log saying what was done
// ("SIGKILLed and gone (fenced)", "not fenced: ...").
std::string FenceWorker(int32_t pid, const std::string& role);

// True when `pid` is visible here and stopped (SIGSTOP, a tracer): it will not heart-beat again on
// its own, whether or not it holds ops.
bool ProcessStopped(int32_t pid);

}  // namespace zipmoe::runtime
