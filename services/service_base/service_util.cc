#include "services/service_base/service_util.h"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "common/metrics_server.h"
#include "common/trace_events.h"
#include "services/service_base/service_config.h"

namespace zipmoe::runtime {

TerminationSignals::TerminationSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void TerminationSignals::AlsoChildren() {
  sigaddset(&set_, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int TerminationSignals::Wait(std::chrono::milliseconds timeout) {
  if (taken_ != 0) return taken_;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec wait{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int sig = sigtimedwait(&set_, nullptr, &wait);
  if (sig == SIGINT || sig == SIGTERM) {
    taken_ = sig;
    return sig;
  }
  return sig > 0 ? sig : 0;
}

void ServiceLog(const std::string& service, const std::string& line) {
  std::string text;
  if (line.rfind("E: ", 0) == 0 || line.rfind("W: ", 0) == 0) {
    text = fmt::format("{}{}: {}\n", line.substr(0, 3), service, line.substr(3));
  } else {
    text = fmt::format("I: {}: {}\n", service, line);
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
}

std::function<void(const std::string&)> ServiceLogger(const std::string& service) {
  return [service](const std::string& line) { ServiceLog(service, line); };
}

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  return buf;
}

Status PinToCpus(const std::string& cpus, const std::string& service) {
  const std::string key = CpuAffinityKey(service);
  ZM_ASSIGN_OR_RETURN(std::vector<int> list, ParseCpuList(cpus, key));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : list) CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0) {
    return Status::InvalidArgument(fmt::format("{} = '{}': sched_setaffinity: {} (this machine has CPUs 0-{})", key,
                                               cpus, std::strerror(errno), ::sysconf(_SC_NPROCESSORS_CONF) - 1));
  }
  ServiceLog(service, fmt::format("pinned to CPUs {} ({})", cpus, key));
  return Status::Ok();
}

std::string TraceFileOf(const std::string& prefix, const std::string& service, int pid) {
  return fmt::format("{}.{}-{}.json", prefix, service, pid);
}

Result<size_t> MergeServiceTraces(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path base(prefix);
  const fs::path dir = base.has_parent_path() ? base.parent_path() : fs::path(".");
  const std::string stem = base.filename().string() + ".";
  std::vector<std::string> parts;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > stem.size() + 5 && name.compare(0, stem.size(), stem) == 0 &&
        name.compare(name.size() - 5, 5, ".json") == 0) {
      parts.push_back(e.path().string());
    }
  }
  if (ec) return Status::IoError(fmt::format("{}: {}", dir.string(), ec.message()));
  if (parts.empty()) return Status::NotFound(fmt::format("no service trace files {}*.json", prefix + "."));
  std::sort(parts.begin(), parts.end());
  ZM_RETURN_IF_ERROR(trace::MergeTraceFiles(parts, prefix));
  for (const std::string& part : parts) fs::remove(part, ec);
  return parts.size();
}

int FailService(const std::string& service, const Status& status) {
  std::fprintf(stderr, "error: %s: %s\n", service.c_str(), status.ToString().c_str());
  return 1;
}

Result<std::unique_ptr<metrics::MetricsServer>> StartMetrics(const ServiceConfig& c, const std::string& service,
                                                             int64_t port) {
  metrics::MetricsServerConfig m;
  m.service = service;
  m.host = c.metrics_host;
  m.port = static_cast<int>(port);
  m.sd_dir = c.metrics_sd_dir;
  Result<std::unique_ptr<metrics::MetricsServer>> server = metrics::MetricsServer::Start(m);
  if (!server.ok() && m.port > 0) {
    // A service without its /metrics endpoint still serves: log it and keep the registry only.
    ServiceLog(service, "E: no /metrics endpoint: " + server.status().ToString());
    m.port = 0;
    server = metrics::MetricsServer::Start(m);
  }
  return server;  // MetricsServer::Start says where it listens
}

Result<ShmRegion> AttachArena(const std::string& service, const std::string& shm_name, TerminationSignals& signals) {
  bool told = false;
  while (true) {
    Result<ShmRegion> arena = ShmRegion::Attach(shm_name);
    if (arena.ok()) return arena;
    const StatusCode code = arena.status().code();
    if (code != StatusCode::kNotFound && code != StatusCode::kUnavailable) return arena.status();
    if (!told) ServiceLog(service, fmt::format("waiting for the arena {} ({})", shm_name, arena.status().message()));
    told = true;
    if (signals.Wait(std::chrono::milliseconds(200)) != 0) {
      return Status::Unavailable("stopped while waiting for the arena");
    }
  }
}

messaging::PullWorkerConfig PullConfig(const ServiceConfig& c, const std::string& role) {
  messaging::PullWorkerConfig pull;
  pull.endpoint = c.endpoint_workers;
  pull.identity = fmt::format("{}-{}-{}", role, HostName(), static_cast<long>(::getpid()));
  pull.heartbeat_interval = std::chrono::milliseconds(c.heartbeat_ms);
  pull.liveness = static_cast<int>(c.liveness);
  pull.log = ServiceLogger(role);
  pull.pipe = c.shm_pipes;
  return pull;
}

}  // namespace zipmoe::runtime
