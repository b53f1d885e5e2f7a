// Helpers shared by the service commands (cmd_service.cc, cmd_up.cc, cmd_serve.cc).
#pragma once

#include <signal.h>

#include <chrono>
#include <functional>
#include <string>

#include "common/status.h"

namespace zipmoe::cli {

// Blocks SIGINT and SIGTERM in the calling thread (construct it before starting any thread, so every
// thread inherits the mask); Wait() takes them synchronously.
class TerminationSignals {
 public:
  TerminationSignals();
  // Waits up to `timeout` for SIGINT/SIGTERM; returns the signal number, or 0 on timeout.
  // Once a signal was taken, later calls return it again at once.
  int Wait(std::chrono::milliseconds timeout);
  // Adds SIGCHLD to the set (zipmoe up); Wait() then also returns SIGCHLD (not remembered).
  void AlsoChildren();

 private:
  sigset_t set_;
  int taken_ = 0;
};

// "I: <service>: <line>" on stderr (one write per line).
void ServiceLog(const std::string& service, const std::string& line);
std::function<void(const std::string&)> ServiceLogger(const std::string& service);
std::string HostName();

// Pins the calling process (its threads to come) to the CPUs of `cpus` (a Linux CPU list, "0-3,6";
// ParseCpuList) with sched_setaffinity and logs it. Errors: kInvalidArgument naming
// cpu_affinity.<service> (a bad list, or no listed CPU is online here).
Status PinToCpus(const std::string& cpus, const std::string& service);

// The trace file a service writes with config trace_events = `prefix`: PREFIX.SERVICE-PID.json.
std::string TraceFileOf(const std::string& prefix, const std::string& service, int pid);
// Joins the trace files of `prefix`'s services (PREFIX.*.json, TraceFileOf) into PREFIX and removes
// them; returns how many were merged. Errors: MergeTraceFiles's; kNotFound when there are none.
Result<size_t> MergeServiceTraces(const std::string& prefix);

}  // namespace zipmoe::cli
