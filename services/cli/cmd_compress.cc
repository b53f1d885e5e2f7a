// `zipmoe compress MODEL_DIR OUT_DIR`: the offline converter (services/convert/compress.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "common/checkpoint/model_config.h"
#include "services/cli/commands.h"
#include "services/cli/progress.h"
#include "services/convert/compress.h"

namespace zipmoe::cli {

void AddCompressCommand(CLI::App& app, int* exit_code) {
  struct Args {
    convert::CompressOptions options;
    std::string codec = "zstd";
  };
  auto args = std::make_shared<Args>();  // shared: outlives this function, owned by the callback
  CLI::App* cmd = app.add_subcommand("compress", "Convert a Hugging Face MoE checkpoint into the compressed layout");
  cmd->add_option("MODEL_DIR", args->options.model_dir, "Hugging Face checkpoint directory")->required();
  cmd->add_option("OUT_DIR", args->options.out_dir, "output directory (built in OUT_DIR.partial, renamed into place when complete; the same command resumes a killed run)")->required();
  cmd->add_option("--codec", args->codec, "E-chunk codec: zstd | lz4 | none")->capture_default_str();
  cmd->add_option("--level", args->options.codec.level, "codec level (0 = tuned default)")->capture_default_str();
  cmd->add_option("--shards", args->options.n_shards, "K: E-chunks per expert tensor")->capture_default_str();
  cmd->add_option("--threads", args->options.n_threads, "worker threads (0 = the CPUs this process may run on)")->capture_default_str();
  cmd->add_flag("--convert-dtype", args->options.convert_dtype,
                "round F16/F32 expert tensors to BF16 (lossy; halves F32 expert bytes, and makes a model whose "
                "experts mix dtypes servable); without it they are kept bit-exact in their own dtype, which "
                "the runtime serves when all experts share one");
  cmd->add_flag("--force", args->options.overwrite, "replace OUT_DIR if it exists");
  cmd->callback([args, exit_code] {
    auto codec = ParseCodec(args->codec);
    if (!codec.ok()) {
      fmt::print(stderr, "error: {}\n", codec.status().ToString());
      *exit_code = 2;
      return;
    }
    args->options.codec.codec = *codec;
    // A config.json that generate and serve refuse would make an output nothing can serve (verify would
    // still call its tensors bit-exact): refused before the work, naming the file and key.
    if (Result<ModelConfig> config = LoadModelConfig(args->options.model_dir); !config.ok()) {
      fmt::print(stderr, "error: {} (the compressed model could not be served)\n", config.status().ToString());
      *exit_code = 1;
      return;
    }
    ProgressBar bar("compress");
    auto summary = convert::CompressModel(args->options, [&](const convert::CompressProgress& p) {
      const double mbps = p.raw_bytes_done / 1e6 / std::max(bar.elapsed_seconds(), 1e-9);
      bar.Update(p.tensors_done, p.tensors_total, fmt::format("tensors, {:.1f} MB, {:.0f} MB/s", p.raw_bytes_done / 1e6, mbps));
    });
    bar.Finish();
    if (!summary.ok()) {
      fmt::print(stderr, "error: {}\n", summary.status().ToString());
      *exit_code = 1;
      return;
    }
    const auto& s = summary.value();
    if (s.stale_temp_dirs_removed > 0)
      fmt::print(stderr, "I: compress: removed {} temporary director{} an interrupted compress of {} left\n",
                 s.stale_temp_dirs_removed, s.stale_temp_dirs_removed == 1 ? "y" : "ies", args->options.out_dir);
    if (s.mtp_tensors_skipped > 0)
      fmt::print(stderr, "I: compress: left out {} tensors ({:.1f} MB) that decoding never reads (multi-token-prediction "
                 "layers: model.layers.L with L >= num_hidden_layers, mtp.*; a vision tower: model.visual.*)\n",
                 s.mtp_tensors_skipped, s.mtp_bytes_skipped / 1e6);
    fmt::print("compressed {} -> {}: {} expert tensors ({:.1f} MB -> {:.1f} MB stored, ratio {:.4f}; experts.bin "
               "{:.1f} MB with 4 KiB alignment), {} dense tensors, {:.1f} s\n",
               args->options.model_dir, args->options.out_dir, s.expert_tensors, s.expert_bytes_raw / 1e6,
               s.expert_bytes_stored / 1e6,
               s.expert_bytes_raw ? static_cast<double>(s.expert_bytes_stored) / s.expert_bytes_raw : 0.0,
               s.experts_file_bytes / 1e6, s.dense_tensors, s.seconds);
  });
}

}  // namespace zipmoe::cli
