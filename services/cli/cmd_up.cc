// `zipmoe up --model DIR [--decompressors N] [--port P] [--run-dir D] [--config FILE] [--set k=v]...`:
// the whole deployment as separate OS processes on this machine (services issue, item 3). Each
// service is an exec of `zipmoe service NAME --config RUN_DIR/zipmoe.json`; the config is the loaded
// one (file, ZIPMOE_* environment, --set, then these flags) with the endpoints under the run dir and
// an arena name unique to this `up` (/zipmoe-up-<pid>, unless the config names one; those of killed
// `up` runs are swept first).
//   - one pid file per process: RUN_DIR/<service>.pid, RUN_DIR/decompressor-<i>.pid
//   - supervision: a service that exits (crash, SIGKILL) is started again after a back-off (0.25 s,
//     doubling per restart within 60 s, at most 8 s; more than 5 restarts of one service in 60 s
//     stops everything, exit 1), logged and counted in zipmoe_up_restarts_total{service} (up's own
//     /metrics, config metrics.port.up). Storage, decompressors, the scheduler and the executor
//     reconnect to the others (ZeroMQ reconnects; the scheduler re-issues what a lost worker held;
//     requests in flight when the scheduler dies fail, those of a dying executor are re-issued by the
//     front to its replacement, or fail without a front). The cache-manager owns the
//     arena every other service maps: when it dies, every service is stopped and the deployment
//     starts again in order.
//   - start order: cache-manager (the arena owner) first, then scheduler, storage, decompressors,
//     executor (each waits for what it needs: the arena, the cache-manager, the scheduler), then the
//     HTTP front (http.front, default true: services/front/front_server.h), which holds the clients'
//     connections and re-issues their requests when the executor dies, so its restart loses nothing
//   - a service gets SIGTERM when `up` dies, whatever killed it (PR_SET_PDEATHSIG)
//   - SIGINT/SIGTERM: SIGTERM to the front, executor, workers, the scheduler, then the cache-manager (which
//     removes the arena); SIGKILL after 10 s; pid files removed; exit 0.
//   - link security: when an endpoint carries CURVE (link_security.mode; tcp:// off loopback under the
//     default auto), a new key pair for this deployment in RUN_DIR/link.key (0600), named by the
//     config and removed at the end; a key file configured elsewhere is only checked.
#include <CLI/CLI.hpp>

#include <signal.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include "common/file_util.h"
#include "common/metrics_server.h"
#include "common/ipc/link_security.h"
#include "common/ipc/shm_region.h"
#include "services/cli/commands.h"
#include "services/service_base/service_config.h"
#include "services/service_base/service_links.h"
#include "services/service_base/service_util.h"

extern char** environ;

namespace zipmoe::cli {
namespace {

using runtime::LoadServiceConfig;
using runtime::MergeServiceTraces;
using runtime::ServiceConfig;
using runtime::ServiceConfigToJson;
using runtime::ServiceLog;
using runtime::StartMetrics;
using runtime::TerminationSignals;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

struct UpArgs {
  std::string model_dir;
  int decompressors = 1;
  int port = 0;  // 0 = the config's http.port
  std::string run_dir;
  std::string config_file;
  std::vector<std::string> sets;
  std::string memory_budget;
  std::string policy;
  std::string plan_trace;
  bool preload = false;
  int decompress_threads = 0;
  std::string trace_events;  // "" = off
};

struct Child {
  Child(std::string service_name, std::string child_name)
      : service(std::move(service_name)), name(std::move(child_name)) {}
  std::string service;  // cache-manager, scheduler, storage, decompressor, executor
  std::string name;     // service, or decompressor-<i>
  pid_t pid = -1;
  std::vector<Clock::time_point> restarts;  // within the last 60 s
  Clock::time_point start_at{};             // pid < 0: when to start it again
};

constexpr int kMaxRestartsPerMinute = 5;

// Back-off before the n-th restart within 60 s (n >= 1): 0.25 s doubling, at most 8 s.
milliseconds RestartDelay(size_t n) {
  return milliseconds(std::min<int64_t>(8000, int64_t{250} << std::min<size_t>(n - 1, 5)));
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "stopped";
}

class Supervisor {
 public:
  Supervisor(std::string run_dir, std::string config_path) : run_dir_(std::move(run_dir)), config_path_(std::move(config_path)) {}

  Status Spawn(Child& c) {
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) return Status::IoError(fmt::format("fork for {}: {}", c.name, std::strerror(errno)));
    if (pid == 0) {
      // A service never outlives its `up` (even one that was SIGKILLed): SIGTERM when up dies, so the
      // cache-manager still removes its arena.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);  // up died before prctl
      sigset_t none;
      sigemptyset(&none);
      pthread_sigmask(SIG_SETMASK, &none, nullptr);
      std::vector<std::string> argv_s = {"zipmoe", "service", c.service, "--config", config_path_};
      std::vector<char*> argv;
      for (std::string& a : argv_s) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "error: up: exec zipmoe service %s: %s\n", c.service.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    c.pid = pid;
    ZM_RETURN_IF_ERROR(WriteFileAtomic(PidFile(c), fmt::format("{}\n", static_cast<long>(pid))));
    ServiceLog("up", fmt::format("started {} (pid {})", c.name, static_cast<long>(pid)));
    return Status::Ok();
  }

  std::string PidFile(const Child& c) const { return JoinPath(run_dir_, c.name + ".pid"); }

  // SIGTERM to each group in order (but the service named `keep`), SIGKILL after the grace period;
  // removes pid files.
  void StopAll(std::vector<Child>& children, const std::string& keep = "") {
    const std::vector<std::vector<std::string>> order = {
        {"front"}, {"executor"}, {"storage", "decompressor"}, {"scheduler"}, {"cache-manager"}};
    for (const auto& group : order) {
      std::vector<Child*> members;
      for (Child& c : children) {
        for (const std::string& s : group) {
          if (c.service == s && c.pid > 0 && c.service != keep) members.push_back(&c);
        }
      }
      for (Child* c : members) ::kill(c->pid, SIGTERM);
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      for (Child* c : members) {
        while (true) {
          int status = 0;
          const pid_t r = ::waitpid(c->pid, &status, WNOHANG);
          if (r == c->pid || r < 0) break;
          if (Clock::now() > deadline) {
            ServiceLog("up", fmt::format("{} (pid {}) did not stop in 10 s: SIGKILL", c->name, static_cast<long>(c->pid)));
            ::kill(c->pid, SIGKILL);
            ::waitpid(c->pid, &status, 0);
            break;
          }
          std::this_thread::sleep_for(milliseconds(20));
        }
        ::unlink(PidFile(*c).c_str());
        c->pid = -1;
      }
    }
  }

 private:
  std::string run_dir_;
  std::string config_path_;
};

// Takes an exclusive lock on RUN_DIR/up.lock (holding this process's pid) for the life of the process.
// kUnavailable naming the run dir and the holder's pid when another `up` holds it.
Status LockRunDir(const std::string& run_dir) {
  const std::string path = JoinPath(run_dir, "up.lock");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return Status::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd, pid, sizeof(pid) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK)
      return Status::Unavailable(fmt::format(
          "another `zipmoe up` (pid {}) runs in {}; stop it, or give this one its own --run-dir",
          n > 0 ? std::string(pid, static_cast<size_t>(n)) : "unknown", run_dir));
    return Status::IoError(fmt::format("cannot lock {}: {}", path, std::strerror(err)));
  }
  const std::string me = std::to_string(static_cast<long>(::getpid()));
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
    return Status::IoError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return Status::Ok();  // fd stays open: the lock is released when this process exits
}

// kUnavailable when `host`:`port` cannot be bound (another server listens there).
Status CheckPortFree(const std::string& host, int64_t port) {
  if (port <= 0) return Status::Ok();  // 0: any free port
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr)
    return Status::Ok();  // the front reports an unresolvable host itself
  Status result = Status::Ok();
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // as the front binds: TIME_WAIT is no conflict
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 && errno == EADDRINUSE)
      result = Status::Unavailable(
          fmt::format("{}:{} is in use (another server, or another `zipmoe up`); choose another --port", host, port));
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
}

// The link key of a deployment whose endpoints carry CURVE: a new pair written to RUN_DIR/link.key when
// link_security.key_file is that default (returns its path), else the configured file is loaded to
// check it (returns ""). Nothing when no endpoint needs CURVE (returns ""). Errors: the key file's,
// naming it.
Result<std::string> PrepareLinkKey(const ServiceConfig& config) {
  ZM_ASSIGN_OR_RETURN(const bool needs_curve, runtime::DeploymentNeedsCurve(config));
  if (!needs_curve) return std::string();
  const std::string& path = config.link_security_key_file;
  if (path != JoinPath(config.run_dir, "link.key")) {
    ZM_RETURN_IF_ERROR(messaging::LoadCurveKeyFile(path).status().WithContext("link_security.key_file"));
    ServiceLog("up", fmt::format("link security: CURVE with the key pair of {} (link_security.mode {})", path,
                                 config.link_security_mode));
    return std::string();
  }
  ZM_ASSIGN_OR_RETURN(messaging::CurveKeyPair keys, messaging::GenerateCurveKeyPair());
  ZM_RETURN_IF_ERROR(messaging::SaveCurveKeyFile(path, keys));
  ServiceLog("up", fmt::format("link security: CURVE (link_security.mode {}) with a new key pair in {}, public key {}",
                               config.link_security_mode, path, keys.public_key));
  return path;
}

int RunUp(const UpArgs& args) {
  TerminationSignals signals;
  signals.AlsoChildren();
  std::vector<std::string> sets = args.sets;
  sets.push_back("model_dir=" + args.model_dir);
  if (!args.run_dir.empty()) sets.push_back("run_dir=" + args.run_dir);
  if (args.port > 0) sets.push_back(fmt::format("http.port={}", args.port));
  if (!args.memory_budget.empty()) sets.push_back("memory_budget=" + args.memory_budget);
  if (!args.policy.empty()) sets.push_back("policy=" + args.policy);
  if (!args.plan_trace.empty()) sets.push_back("plan_trace=" + args.plan_trace);
  if (args.preload) sets.push_back("preload=true");
  if (args.decompress_threads > 0) sets.push_back(fmt::format("decompress_threads={}", args.decompress_threads));
  if (!args.trace_events.empty()) sets.push_back("trace_events=" + args.trace_events);
  Result<ServiceConfig> loaded = LoadServiceConfig(args.config_file, sets, environ);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: up: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  ServiceConfig config = *loaded;
  if (config.shm_name == ServiceConfig().shm_name) {
    // A per-`up` name is never created again: sweep the arenas of `up` runs that were killed.
    ShmRegion::ReclaimStaleAndLog("/zipmoe-up-", "up");
    config.shm_name = fmt::format("/zipmoe-up-{}", static_cast<long>(::getpid()));
  }
  std::error_code ec;
  std::filesystem::create_directories(config.run_dir, ec);  // parents too (--run-dir a/b)
  if (ec || ::chmod(config.run_dir.c_str(), 0700) != 0) {
    std::fprintf(stderr, "error: up: cannot create run dir %s: %s\n", config.run_dir.c_str(),
                 ec ? ec.message().c_str() : std::strerror(errno));
    return 1;
  }
  // The model directory before anything starts (a missing one used to restart the whole deployment six
  // times over 26 s before `up` gave up).
  if (!FileExists(JoinPath(config.model_dir, "manifest.bin"))) {
    std::fprintf(stderr,
                 "error: up: %s is not a compressed model directory (no manifest.bin); make one with `zipmoe compress "
                 "MODEL_DIR OUT_DIR` and give OUT_DIR to --model\n",
                 config.model_dir.c_str());
    return 1;
  }
  // One `up` per run dir: a second would overwrite the first's config, pid files and sockets and delete
  // them when it stops. The lock lives as long as this process (the descriptor is not inherited, so
  // children that outlive a killed `up` do not hold it).
  if (Status st = LockRunDir(config.run_dir); !st.ok()) {
    std::fprintf(stderr, "error: up: %s\n", st.ToString().c_str());
    return 1;
  }
  // The clients' port, before any service starts (a busy port used to crash-loop the front).
  if (Status st = CheckPortFree(config.http_host, config.http_port); !st.ok()) {
    std::fprintf(stderr, "error: up: %s\n", st.ToString().c_str());
    return 1;
  }
  // Link security (docs/messaging.md "Link security"): when an endpoint carries CURVE, this deployment
  // gets a fresh key pair in RUN_DIR/link.key (0600), which the config names (link_security.key_file);
  // a key file configured elsewhere is the operator's (shared with peers on other hosts): only checked.
  Result<std::string> written_key = PrepareLinkKey(config);
  if (!written_key.ok()) {
    std::fprintf(stderr, "error: up: %s\n", written_key.status().ToString().c_str());
    return 1;
  }
  // The config holds the API key: readable by this user only.
  const std::string config_path = JoinPath(config.run_dir, "zipmoe.json");
  if (Status st = WriteFileAtomic(config_path, ServiceConfigToJson(config)); !st.ok()) {
    std::fprintf(stderr, "error: up: %s\n", st.ToString().c_str());
    return 1;
  }
  ::chmod(config_path.c_str(), 0600);
  Result<std::unique_ptr<metrics::MetricsServer>> metrics_server = StartMetrics(config, "up", config.metrics_port_up);
  if (!metrics_server.ok()) {
    std::fprintf(stderr, "error: up: %s\n", metrics_server.status().ToString().c_str());
    return 1;
  }
  prometheus::Family<prometheus::Counter>& restarts_total =
      prometheus::BuildCounter()
          .Name("zipmoe_up_restarts_total")
          .Help("Services `zipmoe up` started again after they exited, by service.")
          .Register((*metrics_server)->registry());
  std::vector<Child> children;
  children.push_back({"cache-manager", "cache-manager"});
  children.push_back({"scheduler", "scheduler"});
  children.push_back({"storage", "storage"});
  for (int i = 0; i < args.decompressors; ++i) children.push_back({"decompressor", fmt::format("decompressor-{}", i)});
  children.push_back({"executor", "executor"});
  // The HTTP front holds the clients' connections, so an executor restart is invisible to them.
  if (config.http_front) children.push_back({"front", "front"});
  // Every service's counter exists from the start at 0 (Prometheus: export known label values before
  // the first event), so rate() and alerts see the series before a first restart.
  for (const Child& c : children) restarts_total.Add({{"service", c.service}});
  Supervisor supervisor(config.run_dir, config_path);
  for (Child& c : children) {
    if (Status st = supervisor.Spawn(c); !st.ok()) {
      std::fprintf(stderr, "error: up: %s\n", st.ToString().c_str());
      supervisor.StopAll(children);
      return 1;
    }
  }
  ServiceLog("up", fmt::format("{} processes; API at http://{}:{} (GET /health is 200 when loaded); config {}; "
                               "Ctrl-C stops everything", children.size(), config.http_host, config.http_port,
                               config_path));
  int exit_code = 0;
  while (true) {
    const int sig = signals.Wait(milliseconds(500));
    if (sig == SIGINT || sig == SIGTERM) {
      ServiceLog("up", fmt::format("signal {}: stopping every service", sig));
      break;
    }
    bool fatal = false;
    bool restart_all = false;
    while (true) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (Child& c : children) {
        if (c.pid != pid) continue;
        c.pid = -1;
        ::unlink(supervisor.PidFile(c).c_str());
        ServiceLog("up", fmt::format("E: {} (pid {}) {}", c.name, static_cast<long>(pid), DescribeExit(status)));
        const auto now = Clock::now();
        c.restarts.push_back(now);
        while (!c.restarts.empty() && now - c.restarts.front() > std::chrono::seconds(60)) c.restarts.erase(c.restarts.begin());
        if (c.restarts.size() > kMaxRestartsPerMinute) {
          ServiceLog("up", fmt::format("E: {} exited more than {} times in 60 s: giving up", c.name,
                                       kMaxRestartsPerMinute));
          fatal = true;
          break;
        }
        c.start_at = now + RestartDelay(c.restarts.size());
        restarts_total.Add({{"service", c.service}}).Increment();
        if (c.service == "cache-manager") restart_all = true;
        ServiceLog("up", fmt::format("restarting {} in {} ms{}", c.name, RestartDelay(c.restarts.size()).count(),
                                     c.service == "cache-manager" ? " (with every service: it owns the arena)" : ""));
      }
    }
    if (restart_all && !fatal) {
      // Every other service maps the arena of the dead cache-manager: stop them, start all in order.
      // The HTTP front maps nothing and keeps the clients' connections: it re-issues their requests
      // to the new executor.
      Child* owner = nullptr;
      for (Child& c : children)
        if (c.service == "cache-manager") owner = &c;
      const Clock::time_point at = owner->start_at;
      supervisor.StopAll(children, /*keep=*/"front");
      ::shm_unlink(config.shm_name.c_str());  // the killed owner could not remove it
      for (Child& c : children) c.start_at = at;
    }
    // Start what is due, in the start order (children is in that order).
    for (Child& c : children) {
      if (fatal || c.pid > 0 || Clock::now() < c.start_at) continue;
      if (Status st = supervisor.Spawn(c); !st.ok()) {
        ServiceLog("up", "E: " + st.ToString());
        fatal = true;
      }
    }
    if (fatal) {
      exit_code = 1;
      break;
    }
  }
  supervisor.StopAll(children);
  // The services are gone: remove the arena if its owner could not (killed), and the ipc:// socket
  // files (a new `up` binds them again).
  ::shm_unlink(config.shm_name.c_str());
  ::unlink(runtime::ExecutorAddressFile(config).c_str());
  for (const std::string& endpoint : {config.endpoint_scheduler, config.endpoint_workers, config.endpoint_cache_manager}) {
    if (endpoint.rfind("ipc://", 0) == 0) ::unlink(endpoint.substr(6).c_str());
  }
  if (!written_key->empty()) ::unlink(written_key->c_str());  // this deployment's key ends with it
  if (!config.trace_events.empty()) {  // every service wrote its part when it stopped
    Result<size_t> merged = MergeServiceTraces(config.trace_events);
    if (merged.ok()) {
      ServiceLog("up", fmt::format("trace of {} processes merged into {} (open it in ui.perfetto.dev)", *merged,
                                   config.trace_events));
    } else {
      ServiceLog("up", "E: merging the services' traces: " + merged.status().ToString());
    }
  }
  ServiceLog("up", "stopped");
  return exit_code;
}

}  // namespace

void AddUpCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<UpArgs>();
  CLI::App* cmd = app.add_subcommand("up", "start every service as its own process (cache-manager, scheduler, "
                                           "storage, decompressors, executor, HTTP front) and supervise them");
  cmd->add_option("--model", args->model_dir, "compressed model directory")->required();
  cmd->add_option("--decompressors", args->decompressors, "decompressor replicas")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--port", args->port, "HTTP port of the API (default: the config's http.port, 8080)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--run-dir", args->run_dir, "sockets, pid files and the generated config (default /tmp/zipmoe)");
  cmd->add_option("--config", args->config_file, "JSON config file (docs/services.md)");
  cmd->add_option("--set", args->sets, "key=value config override (repeatable)");
  cmd->add_option("--memory-budget", args->memory_budget, "e.g. 512MiB or 50% (config memory_budget)");
  cmd->add_option("--policy", args->policy,
                  "zipmoe | lru | fifo | lfu | marking | dali | smoe | coserve | full-load (config policy)");
  cmd->add_option("--plan-trace", args->plan_trace,
                  "routing trace (generate --trace-out) the planner fits f_r to (config plan_trace)");
  cmd->add_flag("--preload", args->preload,
                "the cache-manager fills the pools to the plan before serving: per MoE layer the experts --plan-trace "
                "selects most (by expert id without one), as generate --preload (config preload)");
  cmd->add_option("--decompress-threads", args->decompress_threads, "L per decompressor replica");
  cmd->add_option("--trace-events", args->trace_events,
                  "record every service's timeline (Chrome trace JSON, config trace_events) and merge them into "
                  "FILE when up stops; open it in ui.perfetto.dev");
  cmd->callback([args, exit_code] { *exit_code = RunUp(*args); });
}

}  // namespace zipmoe::cli
