// `zipmoe profile`: measures the planner's delays u, v, c on this machine (docs/planner.md).
//
//   zipmoe profile --model COMPRESSED_DIR [--out FILE] [--tensors N] [--decode-repeats R]
//                  [--buffered] [--json]
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include <fmt/format.h>

#include "common/file_util.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cli/commands.h"

namespace zipmoe::cli {
namespace {

namespace cm = cache_manager;

struct ProfileArgs {
  std::string model;
  std::string out;  // "" = MODEL/profile.json
  cm::ProfileOptions options;
  bool buffered = false;
  bool json = false;
};

Status RunProfile(const ProfileArgs& args) {
  cm::ProfileOptions options = args.options;
  options.try_o_direct = !args.buffered;
  ZM_ASSIGN_OR_RETURN(cm::StorageProfile profile, cm::ProfileStorage(args.model, options));
  const std::string out = args.out.empty() ? JoinPath(args.model, cm::kProfileFileName) : args.out;
  ZM_RETURN_IF_ERROR(cm::WriteStorageProfile(out, profile));
  if (args.json) {
    nlohmann::json j = cm::StorageProfileToJson(profile);
    j["out"] = out;
    fmt::print("{}\n", j.dump());
    return Status::Ok();
  }
  if (profile.io_mode != "o_direct") {
    fmt::print("note: O_DIRECT refused ({}); measured buffered reads after dropping each range from the page "
               "cache\n", profile.io_note);
  }
  fmt::print("profile {} ({} reads, {} codec, K={}):\n", args.model, profile.io_mode, profile.codec, profile.n_shards);
  fmt::print("  u  SM-chunk read    {:9.2f} us  ({:.0f} bytes, {} reads, {:.0f} MB/s)\n", profile.sm_read_us,
             profile.sm_chunk_bytes, profile.sm_reads,
             profile.sm_read_us > 0 ? profile.sm_chunk_bytes / profile.sm_read_us : 0.0);
  fmt::print("  v  E-chunk read     {:9.2f} us  ({:.0f} bytes, {} reads)\n", profile.e_read_us,
             profile.e_chunk_stored_bytes, profile.e_reads);
  fmt::print("  c  E-chunk decode   {:9.2f} us  ({:.0f} values, {} decodes, {:.0f} MB/s)\n", profile.decompress_us,
             profile.e_chunk_raw_bytes, profile.decodes,
             profile.decompress_us > 0 ? profile.e_chunk_raw_bytes / profile.decompress_us : 0.0);
  fmt::print("     BF16 recovery    {:9.2f} us  per tensor on one CPU worker, incl. its xxh64 check\n",
             profile.recovery_us);
  fmt::print("wrote {}\n", out);
  return Status::Ok();
}

}  // namespace

void AddProfileCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ProfileArgs>();  // shared: owned by the callback
  CLI::App* cmd = app.add_subcommand("profile", "Measure SM-/E-chunk read and E-chunk decode delays for `zipmoe plan`");
  cmd->add_option("--model", args->model, "compressed model directory (output of `zipmoe compress`)")->required();
  cmd->add_option("--out", args->out, "profile JSON to write (default MODEL/profile.json)");
  cmd->add_option("--tensors", args->options.max_tensors, "expert tensors sampled")->capture_default_str();
  cmd->add_option("--decode-repeats", args->options.decode_repeats, "decodes per E-chunk")->capture_default_str();
  cmd->add_option("--seed", args->options.seed, "which tensors are sampled")->capture_default_str();
  cmd->add_flag("--buffered", args->buffered, "do not try O_DIRECT");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->callback([args, exit_code] {
    Status st = RunProfile(*args);
    if (!st.ok()) {
      fmt::print(stderr, "error: {}\n", st.ToString());
      *exit_code = 1;
    }
  });
}

}  // namespace zipmoe::cli
