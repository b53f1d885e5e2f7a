// zipmoe: command-line entry point. Parses the subcommand and maps its result to an exit code.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "common/build_info.h"
#include "services/cli/commands.h"

namespace {

// The OpenMP threads of libtorch and OpenBLAS spin-wait between parallel regions by default, taking
// the cores that the runtime's I/O thread and decompression workers need (measured on the 2-core
// VM, qwen2_moe mini at a 50% budget: TPOT 4.0 s spinning, 0.63 s passive). libgomp reads the wait
// policy once, when it is loaded, so a run that uses the runtime (--memory-budget) re-executes
// itself with OMP_WAIT_POLICY=PASSIVE unless the user chose a policy. A failed exec just continues.
void UsePassiveOpenMpForTheRuntime(int argc, char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  bool runtime = false;
  for (int i = 1; i < argc; ++i) {
    runtime = runtime || std::strncmp(argv[i], "--memory-budget", 15) == 0 ||
              (i == 1 && std::strcmp(argv[i], "service") == 0);
  }
  if (!runtime) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::execv("/proc/self/exe", argv);
}

}  // namespace

int main(int argc, char** argv) {
  UsePassiveOpenMpForTheRuntime(argc, argv);
  CLI::App app{"zipmoe: lossless-compressed Mixture-of-Experts serving for edge devices"};
  app.require_subcommand(1);
  // e.g. "zipmoe 0.1.0 (commit 9e66c53, Release, CUDA 12.6.85)" (common/build_info.h)
  app.set_version_flag("--version", zipmoe::BuildInfoString());
  int exit_code = 0;
  zipmoe::cli::AddSynthCommand(app, &exit_code);
  zipmoe::cli::AddCompressCommand(app, &exit_code);
  zipmoe::cli::AddVerifyCommand(app, &exit_code);
  zipmoe::cli::AddInspectCommand(app, &exit_code);
  zipmoe::cli::AddGenerateCommand(app, &exit_code);
  zipmoe::cli::AddPlanCommand(app, &exit_code);
  zipmoe::cli::AddProfileCommand(app, &exit_code);
  zipmoe::cli::AddReplayCommand(app, &exit_code);
  zipmoe::cli::AddServeCommand(app, &exit_code);
  zipmoe::cli::AddServiceCommand(app, &exit_code);
  zipmoe::cli::AddUpCommand(app, &exit_code);
  zipmoe::cli::AddKeygenCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
