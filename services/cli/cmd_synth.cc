// `zipmoe synth`: writes a synthetic MoE checkpoint in the Hugging Face layout (services/synth/synth.h).
//
//   zipmoe synth --arch qwen2_moe --preset tiny --out DIR [--seed S] [--router-skew X]
//                [--shard-size 2G] [--threads N] [--q-lora-rank R] [--measure-skew | --measure-only]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "services/cli/commands.h"
#include "services/synth/synth.h"

namespace zipmoe::cli {
namespace {

struct SynthArgs {
  synth::SynthOptions options;
  std::string shard_size = "2G";
  bool measure_skew = false;
  bool measure_only = false;
  int64_t measure_tokens = 4096;
};

std::string HumanBytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

void PrintShare(const synth::RouterShareReport& r) {
  std::printf("router top-10%% share (layer-0 approximation, %lld tokens, top-%lld of %lld experts, "
              "hot = %lld, uniform = %.3f): mean %.3f\n",
              static_cast<long long>(r.n_tokens), static_cast<long long>(r.top_k),
              static_cast<long long>(r.n_experts), static_cast<long long>(r.n_hot), r.uniform_share,
              r.mean_top_share);
  std::string per_layer;
  for (size_t i = 0; i < r.layer_ids.size(); ++i) {
    per_layer += fmt::format("{}{}:{:.3f}", i == 0 ? "" : " ", r.layer_ids[i], r.top_share[i]);
  }
  std::printf("  per layer: %s\n", per_layer.c_str());
}

// Runs the command; returns the process exit code.
int RunSynth(const SynthArgs& args) {
  synth::SynthOptions options = args.options;
  Result<uint64_t> shard = synth::ParseByteSize(args.shard_size);
  if (!shard.ok()) {
    std::fprintf(stderr, "error: %s\n", shard.status().ToString().c_str());
    return 1;
  }
  options.shard_size_bytes = *shard;
  if (!args.measure_only) {
    Result<synth::SynthReport> report = synth::SynthesizeCheckpoint(options);
    if (!report.ok()) {
      std::fprintf(stderr, "error: %s\n", report.status().ToString().c_str());
      return 1;
    }
    const synth::SynthReport& r = *report;
    std::printf("wrote %s (%s/%s, seed %llu, router skew %g): %lld tensors, %s of weights (%llu bytes), "
                "%zu files, %s total, %.1f s\n",
                options.out_dir.c_str(), options.arch.c_str(), options.preset.c_str(),
                static_cast<unsigned long long>(options.seed), options.router_skew,
                static_cast<long long>(r.n_tensors), HumanBytes(r.weight_bytes).c_str(),
                static_cast<unsigned long long>(r.weight_bytes), r.files.size(), HumanBytes(r.total_bytes).c_str(),
                r.elapsed_seconds);
    for (const synth::SynthFile& f : r.files) {
      std::printf("  %-40s %12llu bytes\n", f.name.c_str(), static_cast<unsigned long long>(f.size_bytes));
    }
    std::printf("tokenizer: vocab %lld = 256 byte tokens + %lld learned merges + %lld synthetic merges + "
                "special tokens\n",
                static_cast<long long>(r.vocab_size), static_cast<long long>(r.n_learned_merges),
                static_cast<long long>(r.n_synthetic_merges));
  }
  if (args.measure_skew || args.measure_only) {
    Result<synth::RouterShareReport> share =
        synth::MeasureSynthRouterTopShare(options, args.measure_tokens, /*sample_seed=*/options.seed + 1);
    if (!share.ok()) {
      std::fprintf(stderr, "error: %s\n", share.status().ToString().c_str());
      return 1;
    }
    PrintShare(*share);
  }
  return 0;
}

}  // namespace

void AddSynthCommand(CLI::App& app, int* exit_code) {
  // Shared with the callback, which CLI11 stores and runs after this function has returned.
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "write a synthetic MoE checkpoint in the Hugging Face layout");
  cmd->add_option("--arch", args->options.arch, "architecture")
      ->required()
      ->check(CLI::IsMember({"qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "glm4_moe",
                             "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "qwen3_next", "qwen3_5_moe",
                             "granitemoe", "granitemoeshared", "granitemoehybrid", "lfm2_moe", "afmoe", "switch_transformers"}));
  cmd->add_option("--preset", args->options.preset, "size preset: tiny (<= 20 MB) or mini (half width, GBs)")
      ->required()
      ->check(CLI::IsMember({"tiny", "mini"}));
  cmd->add_option("--out", args->options.out_dir, "output directory (created; old weight files replaced)");
  cmd->add_option("--seed", args->options.seed, "weight seed (same seed -> identical bytes)");
  cmd->add_option("--router-skew", args->options.router_skew,
                  "expert-popularity skew X >= 0 (0 = uniform routing; see docs/synth.md)");
  cmd->add_option("--skew-channel-scale", args->options.skew_channel_scale,
                  "norm of the skew channel relative to an embedding row (kappa, default 1)");
  cmd->add_option("--embedding-std", args->options.embedding_std,
                  "std of the token part of the embedding rows (default 1: keeps routing token-dependent in deep "
                  "models; 0.02 = HF initializer_range)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shard-size", args->shard_size, "max bytes per safetensors shard, e.g. 512M, 2G (default 2G)");
  cmd->add_option("--threads", args->options.n_threads, "generator threads (0 = the CPUs this process may run on)");
  cmd->add_option("--q-lora-rank", args->options.q_lora_rank,
                  "MLA models only (deepseek_v2, deepseek_v3, glm4_moe_lite): set q_lora_rank (q_a_proj/q_b_proj); "
                  "0 = the preset's");
  cmd->add_option("--dtype", args->options.dtype,
                  "tensor dtype: switch_transformers f32 (default, as released) or bf16 (servable by the runtime); the "
                  "decoder-only archs fp8 (block-scaled F8_E4M3 *_proj weights, as DeepSeek-V3's FP8 release)")
      ->check(CLI::IsMember({"f32", "bf16", "fp8"}));
  cmd->add_flag("--measure-skew", args->measure_skew,
                "after writing, print the router top-10% share (layer-0 approximation)");
  cmd->add_flag("--measure-only", args->measure_only,
                "write nothing; only print the router top-10% share of the model that would be written");
  cmd->add_option("--measure-tokens", args->measure_tokens, "random tokens for the share measurement");
  cmd->callback([args, exit_code] {
    if (!args->measure_only && args->options.out_dir.empty()) {
      std::fprintf(stderr, "error: InvalidArgument: synth: --out directory is required\n");
      *exit_code = 1;
      return;
    }
    *exit_code = RunSynth(*args);
  });
}

}  // namespace zipmoe::cli
