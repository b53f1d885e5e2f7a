// Subcommands of the `zipmoe` CLI. Each Add*Command registers one CLI11 subcommand whose callback
// runs the job and stores the process exit code in *exit_code (0 = success; errors are printed to
// stderr as "error: <Status>").
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace CLI {
class App;
}
namespace zipmoe::metrics {
class MetricsServer;
}

namespace zipmoe::cli {

void AddSynthCommand(CLI::App& app, int* exit_code);     // cmd_synth.cc
void AddCompressCommand(CLI::App& app, int* exit_code);  // cmd_compress.cc
void AddVerifyCommand(CLI::App& app, int* exit_code);    // cmd_verify.cc
void AddInspectCommand(CLI::App& app, int* exit_code);   // cmd_inspect.cc
void AddGenerateCommand(CLI::App& app, int* exit_code);  // cmd_generate.cc
void AddPlanCommand(CLI::App& app, int* exit_code);      // cmd_plan.cc
void AddProfileCommand(CLI::App& app, int* exit_code);   // cmd_profile.cc
void AddReplayCommand(CLI::App& app, int* exit_code);    // cmd_replay.cc
void AddServeCommand(CLI::App& app, int* exit_code);     // cmd_serve.cc
void AddServiceCommand(CLI::App& app, int* exit_code);   // cmd_service.cc
void AddUpCommand(CLI::App& app, int* exit_code);        // cmd_up.cc

struct ServiceConfig;
class TerminationSignals;
// The service's Prometheus registry and /metrics endpoint on config.metrics_host:port (0 = registry
// only), with its file_sd entry in metrics.sd_dir (cmd_service.cc).
Result<std::unique_ptr<metrics::MetricsServer>> StartMetrics(const ServiceConfig& config, const std::string& service,
                                                             int64_t port);
// The executor service: the OpenAI-style HTTP API over a RemoteExpertProvider (cmd_serve.cc).
int RunExecutorService(const ServiceConfig& config, TerminationSignals& signals);

}  // namespace zipmoe::cli
