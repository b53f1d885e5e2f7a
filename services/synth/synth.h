// zipmoe synth: synthetic Mixture-of-Experts checkpoints in the exact Hugging Face layout.
//
// SynthesizeCheckpoint writes a model directory that a real download of the same architecture would
// look like to any loader: config.json (the real model's key set), BF16 safetensors weights named and
// shaped as the transformers implementation expects (sharded with model.safetensors.index.json above
// shard_size_bytes), generation_config.json, tokenizer.json (byte-level BPE, Qwen2 pre-tokenizer) and
// tokenizer_config.json. Architectures: qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2, deepseek_v3,
// glm4_moe, glm4_moe_lite, ernie4_5_moe, gpt_oss, qwen3_next, qwen3_5_moe (and switch_transformers); presets
// tiny (<= 20 MB, for tests) and mini (the real model at half width, a few GB). See docs/synth.md.
//
// Weights are N(mean, std²) (embeddings std SynthOptions::embedding_std = 1, projections std 0.02,
// RMSNorm weights 1 + N(0, 0.02²) or, where the model applies 1 + w (qwen3_next, qwen3_5_moe), N(0, 0.1²),
// biases std 0.01; the Gated DeltaNet's conv1d / A_log / dt_bias as model_layout.cc)
// drawn from a per-tensor stream seeded by (seed, tensor name): the output bytes depend only on the
// options, never on the thread count. router_skew > 0 makes expert popularity skewed (a few hot experts
// per layer) through a shared embedding direction read only by the routers (docs/synth.md).
//
// All functions are thread-compatible: independent calls may run concurrently on different out_dirs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::synth {

struct SynthOptions {
  std::string arch;      // an arch of presets.h ArchNames(), or switch_transformers
  std::string preset;    // tiny | mini
  std::string out_dir;   // created if missing; existing weight files there are replaced
  uint64_t seed = 0;
  double router_skew = 0.0;                  // X >= 0; 0 = no skew (near-uniform routing)
  double skew_channel_scale = 1.0;           // κ > 0: norm of the skew channel / norm of an embedding row
  // σ_embed > 0: std of the token-specific part of every embedding row. 1.0 (not HF's 0.02
  // initializer_range) keeps token identity in the residual stream of a deep random model: with 0.02
  // the (near-uniform) attention averages of random weights swamp it after a few layers and every
  // decode step routes to the same experts (docs/synth.md "Embedding scale").
  double embedding_std = 1.0;
  uint64_t shard_size_bytes = 2ull << 30;    // max bytes per safetensors shard
  int n_threads = 0;                         // 0 = the CPUs this process may run on
  int64_t q_lora_rank = 0;                   // deepseek_v2 only: > 0 sets q_lora_rank (q_a/q_b path)
  // switch_transformers: "bf16" writes every tensor as BF16 (config torch_dtype "bfloat16") instead
  // of the released checkpoints' F32, e.g. to serve the experts through the runtime. Decoder-only
  // archs: "fp8" writes every *_proj.weight as block-scaled F8_E4M3 (blocks of 32 for tiny, 128 for
  // mini) with its weight_scale_inv and the quantization_config of DeepSeek-V3's FP8 release
  // (tensor_init.h FillFp8). "" = the preset's (BF16 / F32).
  std::string dtype;
};

struct SynthFile {
  std::string name;  // relative to out_dir
  uint64_t size_bytes = 0;
};

struct SynthReport {
  std::vector<SynthFile> files;  // every file written, sorted by name
  int64_t n_tensors = 0;
  uint64_t weight_bytes = 0;     // tensor data bytes (sum of numel * 2)
  uint64_t total_bytes = 0;      // sum of the file sizes
  int64_t vocab_size = 0;
  int64_t n_learned_merges = 0;  // BPE merges learned from the embedded corpus
  int64_t n_synthetic_merges = 0;
  double elapsed_seconds = 0.0;  // wall time of SynthesizeCheckpoint
};

// Writes the checkpoint. Errors: kInvalidArgument (unknown arch/preset, bad option values),
// kIoError (directory or file writes), plus WriteCheckpointWeights' errors.
Result<SynthReport> SynthesizeCheckpoint(const SynthOptions& options);

// config.json of a preset (q_lora_rank as SynthOptions). Errors: kInvalidArgument.
Result<nlohmann::json> PresetConfig(const std::string& arch, const std::string& preset,
                                    int64_t q_lora_rank = 0);

// "2147483648", "512M", "2G", "64K", "1.5G" (binary units: K = 1024; optional trailing "B"/"iB").
// Errors: kInvalidArgument naming the text.
Result<uint64_t> ParseByteSize(const std::string& text);

// Expert popularity measured on an approximation of each MoE layer's router input (docs/synth.md):
// x = RMSNorm(embedding row of a uniformly random token id) * post_attention_layernorm.weight (1 + w
// for zero-centred norms) of that
// layer, i.e. as if the residual stream were still the embedding. No attention or expert is run.
struct RouterShareReport {
  std::vector<int32_t> layer_ids;  // MoE layers, ascending
  std::vector<double> top_share;   // [n_moe_layers]: fraction of all top-k selections that went to the
                                   // n_hot most-selected experts of that layer
  double mean_top_share = 0.0;     // mean over layers
  int64_t n_hot = 0;               // ceil(10% of n_experts)
  double uniform_share = 0.0;      // n_hot / n_experts: the share under perfectly uniform routing
  int64_t n_tokens = 0;
  int64_t n_experts = 0;
  int64_t top_k = 0;
};

// Measures a checkpoint directory (synthetic or a real HF download of a supported arch).
// Errors: Checkpoint::Open errors; kInvalidArgument (unsupported config, n_tokens < 1);
// kNotFound (router / norm / embedding tensor missing); kInvalidArgument (tensor not BF16/F32).
Result<RouterShareReport> MeasureRouterTopShare(const std::string& checkpoint_dir, int64_t n_tokens,
                                                uint64_t sample_seed);

// Same measurement on the model `options` would write, generating only the embedding rows, norms and
// routers it needs in memory (fast even for mini presets; writes nothing).
Result<RouterShareReport> MeasureSynthRouterTopShare(const SynthOptions& options, int64_t n_tokens,
                                                     uint64_t sample_seed);

}  // namespace zipmoe::synth
