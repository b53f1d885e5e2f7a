// zipmoe: command-line entry point. Parses the subcommand and maps its result to an exit code.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "services/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"zipmoe: lossless-compressed Mixture-of-Experts serving for edge devices"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "zipmoe 0.1.0");
  int exit_code = 0;
  zipmoe::cli::AddSynthCommand(app, &exit_code);
  zipmoe::cli::AddCompressCommand(app, &exit_code);
  zipmoe::cli::AddVerifyCommand(app, &exit_code);
  zipmoe::cli::AddInspectCommand(app, &exit_code);
  zipmoe::cli::AddGenerateCommand(app, &exit_code);
  zipmoe::cli::AddPlanCommand(app, &exit_code);
  zipmoe::cli::AddProfileCommand(app, &exit_code);
  zipmoe::cli::AddReplayCommand(app, &exit_code);
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
