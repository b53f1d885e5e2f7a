// The small helpers every zipmoe service process shares (services/processes/<name>_service.h, `zipmoe up`):
// signal handling, log lines, CPU pinning, the /metrics endpoint, attaching the shared arena, the
// pull-worker loop and trace files. In services/service_base beside service_config.h (not common/): most
// take the deployment's ServiceConfig; library zipmoe_service_base, torch-free and CLI-free.
// Threads: TerminationSignals belongs to the main thread (see below); the rest is callable from any
// thread. Errors: Status values naming the service, key or file.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/ipc/pull_worker.h"
#include "common/ipc/shm_region.h"
#include "common/status.h"

namespace zipmoe::metrics {
class MetricsServer;
}

namespace zipmoe::runtime {

struct ServiceConfig;

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

// "I: <service>: <line>" on stderr (one write per line); a line that starts with "E: " or "W: " keeps
// that level: "E: <service>: <rest>".
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

// "error: <service>: <status>" on stderr; returns 1 (the process exit code).
int FailService(const std::string& service, const Status& status);

// The service's Prometheus registry and /metrics endpoint on config.metrics_host:port (0 = registry
// only), with its file_sd entry in metrics.sd_dir. An endpoint that cannot listen is logged and the
// service keeps the registry only. Errors: MetricsServer::Start's for the registry-only server.
Result<std::unique_ptr<metrics::MetricsServer>> StartMetrics(const ServiceConfig& config, const std::string& service,
                                                             int64_t port);

// Attaches the shared arena `shm_name`, waiting for its creator (the cache-manager) until a signal
// arrives. Errors: ShmRegion::Attach's other than kNotFound / kUnavailable; kUnavailable when stopped.
Result<ShmRegion> AttachArena(const std::string& service, const std::string& shm_name, TerminationSignals& signals);

// The pull-protocol settings of a storage / decompressor worker (`role`) from the config: the
// scheduler's workers endpoint, identity ROLE-HOST-PID, heartbeat and liveness.
messaging::PullWorkerConfig PullConfig(const ServiceConfig& config, const std::string& role);

// Runs `worker.Run()` on a thread of its own and `every_second` on this one about once a second
// until SIGINT/SIGTERM; then RequestStop() and join. Returns the exit code: 0, or 1 with the
// worker's error printed (FailService). Worker: StorageWorker, DecompressorWorker.
template <typename Worker>
int RunPullWorker(const std::string& name, Worker& worker, TerminationSignals& signals,
                  const std::function<void()>& every_second) {
  Status result;
  std::thread loop([&] { result = worker.Run(); });
  do {
    every_second();
  } while (signals.Wait(std::chrono::milliseconds(1000)) == 0);
  ServiceLog(name, "stopping");
  worker.RequestStop();
  loop.join();
  if (!result.ok()) return FailService(name, result);
  return 0;
}

}  // namespace zipmoe::runtime
