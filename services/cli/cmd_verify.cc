// `zipmoe verify MODEL_DIR COMPRESSED_DIR`: exit 0 iff the compressed directory is bit-exact.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "services/cli/commands.h"
#include "services/cli/progress.h"
#include "services/convert/verify.h"

namespace zipmoe::cli {

void AddVerifyCommand(CLI::App& app, int* exit_code) {
  auto opt = std::make_shared<convert::VerifyOptions>();  // shared: owned by the callback
  CLI::App* cmd = app.add_subcommand("verify", "Check a compressed directory against its checkpoint, bit for bit");
  cmd->add_option("MODEL_DIR", opt->model_dir, "Hugging Face checkpoint directory")->required();
  cmd->add_option("COMPRESSED_DIR", opt->compressed_dir, "output of `zipmoe compress`")->required();
  cmd->add_option("--threads", opt->n_threads, "worker threads (0 = the CPUs this process may run on)")->capture_default_str();
  cmd->callback([opt, exit_code] {
    ProgressBar bar("verify");
    auto summary = convert::VerifyCompressed(*opt, [&](int64_t done, int64_t total) { bar.Update(done, total); });
    bar.Finish();
    if (!summary.ok()) {
      fmt::print(stderr, "verify FAILED: {}\n", summary.status().ToString());
      *exit_code = 1;
      return;
    }
    const auto& s = summary.value();
    fmt::print("verify OK: {} expert tensors ({} chunks, {:.1f} MB) and {} dense tensors are bit-exact ({:.1f} s)\n",
               s.expert_tensors, s.chunks, s.expert_bytes_raw / 1e6, s.dense_tensors, s.seconds);
  });
}

}  // namespace zipmoe::cli
