// `zipmoe keygen --out FILE [--if-missing | --force]`: a new CURVE key pair for the links of one
// deployment (common/ipc/link_security.h; docs/messaging.md "Link security"), written to FILE with
// mode 0600 (temp file, then rename or link); prints the public key. Every service of the deployment
// reads the same file (config link_security.key_file). An existing FILE is an error, since its key may
// be in use, unless --if-missing keeps it (compose's entrypoints: whichever container comes first
// writes it, the others read it) or --force replaces it.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>

#include "common/file_util.h"
#include "common/ipc/link_security.h"
#include "services/cli/commands.h"

namespace zipmoe::cli {
namespace {

struct KeygenArgs {
  std::string out;
  bool if_missing = false;
  bool force = false;
};

// The key pair now in args.out; *created tells whether this call wrote it.
Result<messaging::CurveKeyPair> WriteKey(const KeygenArgs& args, bool* created) {
  if (args.if_missing) return messaging::LoadOrCreateCurveKeyFile(args.out, created);
  *created = true;
  if (FileExists(args.out) && !args.force) {
    return Status::InvalidArgument(
        fmt::format("{} exists and its key may be in use (--force replaces it, --if-missing keeps it)", args.out));
  }
  ZM_ASSIGN_OR_RETURN(messaging::CurveKeyPair keys, messaging::GenerateCurveKeyPair());
  ZM_RETURN_IF_ERROR(messaging::SaveCurveKeyFile(args.out, keys));
  return keys;
}

int RunKeygen(const KeygenArgs& args) {
  bool created = false;
  Result<messaging::CurveKeyPair> keys = WriteKey(args, &created);
  if (!keys.ok()) {
    fmt::print(stderr, "error: keygen: {}\n", keys.status().ToString());
    return 1;
  }
  fmt::print("{} {} (mode 0600); public key {}\n", created ? "wrote" : "kept", args.out, keys->public_key);
  return 0;
}

}  // namespace

void AddKeygenCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<KeygenArgs>();
  CLI::App* cmd = app.add_subcommand(
      "keygen", "write a CURVE key pair for a deployment's tcp:// links (config link_security.key_file)");
  cmd->add_option("--out", args->out, "key file to write (mode 0600), e.g. RUN_DIR/link.key")->required();
  CLI::Option* keep = cmd->add_flag("--if-missing", args->if_missing, "keep FILE when it exists (and print its key)");
  cmd->add_flag("--force", args->force, "replace FILE when it exists")->excludes(keep);
  cmd->callback([args, exit_code] { *exit_code = RunKeygen(*args); });
}

}  // namespace zipmoe::cli
