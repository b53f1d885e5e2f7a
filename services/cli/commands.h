// Subcommands of the `zipmoe` CLI. Each Add*Command registers one CLI11 subcommand whose callback
// runs the job and stores the process exit code in *exit_code (0 = success; errors are printed to
// stderr as "error: <Status>").
#pragma once

namespace CLI {
class App;
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
void AddKeygenCommand(CLI::App& app, int* exit_code);    // cmd_keygen.cc

}  // namespace zipmoe::cli
