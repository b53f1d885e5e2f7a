// `zipmoe service NAME [--config FILE] [--set key=value]...`: one zipmoe service as its own process
// (services issue; docs/services.md). This file loads the configuration (services/service_base/
// service_config.h: file, then ZIPMOE_* environment, then --set), pins the CPUs, starts the trace and
// calls the service's entry, which lives in its own folder:
//   cache-manager services/processes/cache_manager_service.h  the arena owner: plans the pools, creates the arena
//   scheduler     services/processes/scheduler_service.h      Alg. 1 over the cache-manager, storage and decompressors
//   storage       services/processes/storage_service.h        the I/O thread: chunk reads into the shared arena
//   decompressor  services/processes/decompressor_service.h   L decode/recovery threads; run N replicas
//   executor      services/processes/executor_service.h       the model + the OpenAI-style HTTP API
//   front         services/processes/front_service.h          the HTTP front before the executor (http.front)
// SIGINT/SIGTERM stop the service cleanly (a worker tells the scheduler, which re-issues its ops).
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/thread_priority.h"
#include "services/processes/cache_manager_service.h"
#include "services/cli/cli_util.h"
#include "services/cli/commands.h"
#include "services/processes/decompressor_service.h"
#include "services/processes/executor_service.h"
#include "services/processes/front_service.h"
#include "services/service_base/service_config.h"
#include "services/service_base/service_util.h"
#include "services/processes/scheduler_service.h"
#include "services/processes/storage_service.h"

extern char** environ;

namespace zipmoe::cli {
namespace {

using runtime::FailService;
using runtime::ServiceConfig;
using runtime::TerminationSignals;

struct ServiceArgs {
  std::string name;
  std::string config_file;
  std::vector<std::string> sets;
};

int RunService(const ServiceArgs& args) {
  TerminationSignals signals;  // blocks SIGINT/SIGTERM before any thread starts
  Result<ServiceConfig> config = runtime::LoadServiceConfig(args.config_file, args.sets, environ);
  if (!config.ok()) return FailService(args.name, config.status());
  if (const std::string& cpus = runtime::CpuAffinityOf(*config, args.name); !cpus.empty()) {
    // Before any thread starts, so every thread of the service inherits it.
    if (Status st = runtime::PinToCpus(cpus, args.name); !st.ok()) return FailService(args.name, st);
  }
  if (args.name != "executor" && args.name != "front") {
    // Every thread of a pipeline service inherits the main thread's priority (common/thread_priority.h);
    // the executor raises only its ZeroMQ I/O threads once they exist (executor/service.cc).
    Result<ThreadPriority> want = ParseThreadPriority(config->pipeline_priority, "pipeline_priority");
    Result<ThreadPriority> got = want.ok() ? RaiseThread(*want) : Result<ThreadPriority>(want.status());
    if (!got.ok()) return FailService(args.name, got.status().WithContext("pipeline_priority"));
    if (*got != ThreadPriority::kNone) {
      runtime::ServiceLog(args.name, fmt::format("pipeline priority {} (pipeline_priority = {})",
                                                 ThreadPriorityName(*got), config->pipeline_priority));
    }
  }
  using Runner = int (*)(const ServiceConfig&, TerminationSignals&);
  Runner run = nullptr;
  if (args.name == "cache-manager") {
    run = cache_manager::RunCacheManagerService;
  } else if (args.name == "scheduler") {
    run = scheduler::RunSchedulerService;
  } else if (args.name == "storage") {
    run = storage::RunStorageService;
  } else if (args.name == "decompressor") {
    run = decompressor::RunDecompressorService;
  } else if (args.name == "executor") {
    run = executor::RunExecutorService;
  } else if (args.name == "front") {
    run = front::RunFrontService;
  } else {
    return FailService(args.name, Status::InvalidArgument("unknown service"));
  }
  const std::string& prefix = config->trace_events;
  const TraceToFile trace_file(prefix.empty() ? std::string() : runtime::TraceFileOf(prefix, args.name, ::getpid()),
                               args.name);
  return run(*config, signals);
}

}  // namespace

void AddServiceCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ServiceArgs>();
  CLI::App* cmd = app.add_subcommand("service", "run one zipmoe service as its own process (zipmoe up, compose)");
  cmd->add_option("name", args->name, "cache-manager | scheduler | storage | decompressor | executor | front")
      ->required()
      ->check(CLI::IsMember({"cache-manager", "scheduler", "storage", "decompressor", "executor", "front"}));
  cmd->add_option("--config", args->config_file, "JSON config file (docs/services.md); ZIPMOE_* variables override it");
  cmd->add_option("--set", args->sets, "key=value, overrides file and environment (repeatable)");
  cmd->callback([args, exit_code] { *exit_code = RunService(*args); });
}

}  // namespace zipmoe::cli
