#include <CLI/CLI.hpp>
#include "services/cli/commands.h"
namespace zipmoe::cli {
void AddInspectCommand(CLI::App& app, int* exit_code) { (void)app; (void)exit_code; }  // TODO(placeholder during bring-up)
}  // namespace zipmoe::cli
