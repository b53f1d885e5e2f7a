// `zipmoe profile`: measures the planner's delays u, v, c on this machine (docs/planner.md), or,
// with --prefetch-residuals, calibrates DALI's residual vectors for `--prefetch residual`
// (services/executor/prefetch_residuals.h) from a text file of prompts, one per line.
//
//   zipmoe profile --model COMPRESSED_DIR [--out FILE] [--tensors N] [--decode-repeats R]
//                  [--buffered] [--json]
//   zipmoe profile --model DIR --prefetch-residuals PROMPTS.txt [--out FILE]
//                  [--calibration-prompts N] [--calibration-max-tokens T] [--threads N] [--json]
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/tokenizer/tokenizer.h"
#include "services/executor/generator.h"
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
  std::string residual_prompts;  // --prefetch-residuals
  int64_t calibration_prompts = 64;
  int64_t calibration_max_tokens = 256;
  int threads = 0;
};

// DALI residual calibration: the first N non-empty lines of the prompts file, each encoded with the
// model's tokenizer and cut to T tokens, fed through the model with every expert resident.
Status RunResidualCalibration(const ProfileArgs& args) {
  if (args.calibration_prompts < 1 || args.calibration_max_tokens < 2) {
    return Status::InvalidArgument("--calibration-prompts must be >= 1 and --calibration-max-tokens >= 2");
  }
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(args.residual_prompts));
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::LoadDir(args.model));
  std::vector<std::vector<int32_t>> prompts;
  size_t start = 0;
  while (start < text.size() && static_cast<int64_t>(prompts.size()) < args.calibration_prompts) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ZM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(line, /*add_special_tokens=*/true));
    if (static_cast<int64_t>(ids.size()) > args.calibration_max_tokens) ids.resize(args.calibration_max_tokens);
    if (!ids.empty()) prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) {
    return Status::InvalidArgument(fmt::format("{}: no non-empty line to calibrate with", args.residual_prompts));
  }
  executor::GeneratorOptions options;
  options.model_dir = args.model;
  options.n_threads = args.threads;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<executor::Generator> generator, executor::Generator::Create(options));
  ZM_ASSIGN_OR_RETURN(executor::PrefetchResiduals residuals, generator->CalibratePrefetchResiduals(prompts));
  residuals.source = args.residual_prompts;
  const std::string out =
      args.out.empty() ? JoinPath(args.model, executor::kPrefetchResidualsFileName) : args.out;
  ZM_RETURN_IF_ERROR(executor::WritePrefetchResiduals(out, residuals));
  if (args.json) {
    nlohmann::json j = {{"out", out},
                        {"layers", residuals.by_layer.size()},
                        {"calibration_prompts", residuals.calibration_prompts},
                        {"calibration_tokens", residuals.calibration_tokens}};
    fmt::print("{}\n", j.dump());
    return Status::Ok();
  }
  fmt::print("prefetch residuals of {} MoE layers from {} prompts ({} tokens of {}); wrote {}\n",
             residuals.by_layer.size(), residuals.calibration_prompts, residuals.calibration_tokens,
             args.residual_prompts, out);
  return Status::Ok();
}

Status RunProfile(const ProfileArgs& args) {
  if (!args.residual_prompts.empty()) return RunResidualCalibration(args);
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
  cmd->add_option("--out", args->out,
                  "file to write (default MODEL/profile.json; with --prefetch-residuals "
                  "MODEL/prefetch_residuals.safetensors)");
  cmd->add_option("--tensors", args->options.max_tensors, "expert tensors sampled")->capture_default_str();
  cmd->add_option("--decode-repeats", args->options.decode_repeats, "decodes per E-chunk")->capture_default_str();
  cmd->add_option("--seed", args->options.seed, "which tensors are sampled")->capture_default_str();
  cmd->add_flag("--buffered", args->buffered, "do not try O_DIRECT");
  cmd->add_flag("--json", args->json, "print one JSON object");
  cmd->add_option("--prefetch-residuals", args->residual_prompts,
                  "instead of the delays: calibrate DALI's residual vectors for `--prefetch residual` from this text "
                  "file, one prompt per line (the model's tokenizer encodes them)");
  cmd->add_option("--calibration-prompts", args->calibration_prompts, "prompts (lines) used at most")
      ->capture_default_str();
  cmd->add_option("--calibration-max-tokens", args->calibration_max_tokens, "tokens per prompt at most")
      ->capture_default_str();
  cmd->add_option("--threads", args->threads, "executor threads for the calibration (0 = the physical cores this process may run on)")
      ->capture_default_str();
  cmd->callback([args, exit_code] {
    Status st = RunProfile(*args);
    if (!st.ok()) {
      fmt::print(stderr, "error: {}\n", st.ToString());
      *exit_code = 1;
    }
  });
}

}  // namespace zipmoe::cli
