// Loading a model directory for the executor: the config, every non-expert weight as a tensor on
// the compute device, and (optionally) a provider that holds every routed expert resident.
//
// Two directory kinds are recognised (DetectModelDir):
//   - a Hugging Face checkpoint (config.json + *.safetensors): non-expert tensors come from
//     Checkpoint::Open, experts from ResidentExpertProvider::FromCheckpoint (zero-copy mmaps);
//   - a compressed zipmoe directory (has manifest.bin): non-expert tensors from dense.safetensors,
//     experts from ExpertStore (ResidentExpertProvider::FromStore decompresses them all once).
// On the CPU (compute dtype float32) every BF16 weight matrix stays a zero-copy BF16 view of its
// file (Linear reads it with the BF16 kernels of kernels/bf16_gemm.h), the token embedding too (rows
// are upcast on lookup); BF16 vectors (norms, biases) and F16/F32 tensors are converted to float32
// (exact). On the GPU every tensor is copied to the device in the compute dtype (the router in
// float32). Every tensor's shape is checked against the config, including the routed experts'.
//
// Internal to services/executor (includes ATen). A LoadedModel is immutable after loading and may
// be read from any thread; it owns the files its views point into.
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/expert_store.h"
#include "common/checkpoint/model_config.h"
#include "common/resident_expert_provider.h"
#include "services/executor/weights_memory.h"
#include "common/checkpoint/safetensors.h"
#include "common/status.h"

namespace zipmoe::executor {

enum class ModelDirKind : uint8_t { kHuggingFace = 0, kCompressed = 1 };

// kCompressed if DIR/manifest.bin exists, else kHuggingFace if DIR/config.json exists.
// Errors: kNotFound naming DIR if it has neither.
Result<ModelDirKind> DetectModelDir(const std::string& dir);

struct LinearWeights {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out] or undefined
};

struct MlpWeights {  // SwiGLU MLP: down(silu(gate(x)) * up(x))
  at::Tensor gate;   // [inter, hidden]
  at::Tensor up;     // [inter, hidden]
  at::Tensor down;   // [hidden, inter]
};

struct AttentionWeights {
  // GQA (qwen2_moe, mixtral, qwen3_moe, olmoe)
  LinearWeights q_proj, k_proj, v_proj;  // [heads*head_dim | kv_heads*head_dim, hidden]
  // qwen3_moe, glm4_moe use_qk_norm, qwen3_next: [head_dim] (qwen3_next: 1 + w); olmoe: [heads*head_dim], [kv_heads*head_dim]
  at::Tensor q_norm, k_norm;
  // q_proj is [heads * 2 * head_dim, hidden] when attn_output_gate (qwen3_next): per head query then gate.
  // MLA (deepseek_v2/v3, glm4_moe_lite); q_proj above when q_lora_rank is null
  LinearWeights q_a_proj;     // [q_lora_rank, hidden]
  at::Tensor q_a_layernorm;   // [q_lora_rank]
  LinearWeights q_b_proj;     // [heads*q_head_dim, q_lora_rank]
  LinearWeights kv_a_proj;    // kv_a_proj_with_mqa: [kv_lora_rank + qk_rope_head_dim, hidden]
  at::Tensor kv_a_layernorm;  // [kv_lora_rank]
  LinearWeights kv_b_proj;    // [heads*(qk_nope_head_dim + v_head_dim), kv_lora_rank]
  // MLA with the latent KV cache (attention.h; a float32 CPU executor): kv_b_proj split per head into
  // the key up-projection transposed, W_UK_h^T [heads, kv_lora_rank, qk_nope_head_dim], which absorbs
  // into the query, and the value up-projection W_UV_h [heads, v_head_dim, kv_lora_rank], applied after
  // attention. BF16 when kv_b_proj is (exact copies), float32 otherwise (FP8: e4m3 * weight_scale_inv,
  // exact). Undefined on other executors and with ZIPMOE_MLA_KV_CACHE=heads (attention.h MlaLatentKvCache),
  // which cache per-head keys and values as the HF code does; defined is what selects the latent path.
  at::Tensor kv_b_k_t, kv_b_v;
  LinearWeights o_proj;       // [hidden, heads*v_dim]
  LinearWeights gate_proj;    // afmoe: [heads*head_dim, hidden], attn * sigmoid(gate_proj(x)) before o_proj
  at::Tensor sinks;           // gpt_oss: self_attn.sinks [heads] float32 on the CPU (a logit per head)
};

// Gated DeltaNet (qwen3_next Qwen3NextGatedDeltaNet, qwen3_5_moe Qwen3_5MoeGatedDeltaNet), with
// nk / nv key / value heads of width dk / dv, r = nv / nk, C = 2 nk dk + nv dv conv channels.
struct LinearAttentionWeights {
  // qwen3_next: in_proj_qkvz [nk (2 dk + 2 r dv), hidden], per key head j the rows
  // [q_j (dk) | k_j (dk) | v of value heads jr..jr+r-1 (r dv) | z of the same (r dv)]; in_proj_ba
  // [2 nv, hidden], per key head j [b of its r value heads | a of them].
  at::Tensor in_proj_qkvz, in_proj_ba;
  // qwen3_5_moe: in_proj_qkv [C, hidden] (channels q | k | v), in_proj_z [nv dv, hidden], in_proj_b /
  // in_proj_a [nv, hidden].
  at::Tensor in_proj_qkv, in_proj_z, in_proj_b, in_proj_a;
  at::Tensor conv1d;     // conv1d.weight [C, 1, K] as [C, K] float32 on the CPU (no bias)
  at::Tensor neg_exp_a;  // -exp(A_log) [nv] float32 on the CPU (A_log is float32 in the checkpoint)
  at::Tensor dt_bias;    // [nv] float32 on the CPU
  at::Tensor norm;       // the gated RMSNorm's weight [dv] float32 (not zero-centred)
  at::Tensor out_proj;   // [hidden, nv dv]
  // Mamba2 (granitemoehybrid's "mamba" layers, BambaMixer; Ci = d_inner, Cc = conv_dim, nh = mamba_n_heads):
  // in_proj [Ci + Cc + nh, hidden] (rows z | xBC | dt) with in_proj_bias [Ci + Cc + nh] when mamba_proj_bias;
  // conv1d above as [Cc, K] and conv_bias [Cc] (mamba_conv_bias) float32; neg_exp_a / dt_bias [nh]; d_skip
  // (D) [nh] float32; norm [Ci] (the gated RMSNorm over the whole inner width); out_proj [hidden, Ci] with
  // out_proj_bias [hidden] when mamba_proj_bias.
  at::Tensor in_proj, in_proj_bias, conv_bias, d_skip, out_proj_bias;
  // lfm2_moe's gated short convolution (Lfm2MoeShortConv; H = hidden): in_proj [3H, H] (rows B | C | x), conv1d
  // above as [H, K] (K = conv_L_cache), out_proj [H, H]; in_proj_bias [3H], conv_bias [H], out_proj_bias [H]
  // float32 iff conv_bias.
};

struct LayerWeights {
  at::Tensor input_layernorm;           // [hidden] (zero_centered_norms: 1 + w, float32)
  at::Tensor post_attention_layernorm;  // [hidden] (as input_layernorm): the MLP's input norm (afmoe: pre_mlp_layernorm)
  // afmoe's sandwich norms, applied to each branch's output before the residual add (its post_attention_layernorm
  // and post_mlp_layernorm); undefined for every other model.
  at::Tensor attn_out_norm, mlp_out_norm;
  AttentionWeights attn;                // full-attention layers
  bool linear_attention = false;        // Gated DeltaNet (qwen3_next / qwen3_5_moe), Mamba2 (granitemoehybrid) or
                                        // short-convolution (lfm2_moe) layers: linear_attn below
  LinearAttentionWeights linear_attn;
  bool is_moe = false;
  MlpWeights dense_mlp;            // !is_moe
  at::Tensor router;               // is_moe: [n_experts, hidden]; the gate runs in fp32 (CPU: BF16 weight)
  at::Tensor router_bias;          // noaux_tc: mlp.gate.e_score_correction_bias [n_experts] float32, on the CPU
  at::Tensor router_logit_bias;    // gpt_oss: mlp.router.bias [n_experts] float32 on the CPU, added to the logits
  // gpt_oss: the routed experts' biases, float32 on the CPU: gate / up [n_experts, I] (the even / odd
  // entries of gate_up_proj_bias), down [n_experts, hidden].
  at::Tensor expert_gate_bias, expert_up_bias, expert_down_bias;
  MlpWeights shared_expert;        // qwen2_moe shared_expert / DeepSeek-style shared_experts (if any)
  // FP8 checkpoints: each routed expert's weight_scale_inv per projection (ExpertProj order gate, up,
  // down), float32 [ceil(rows / block_rows), ceil(cols / block_cols)] in the mapped checkpoint / dense
  // file; empty otherwise. The experts' F8_E4M3 bytes come from the expert provider as usual.
  std::vector<std::array<const float*, 3>> expert_scales;
  at::Tensor shared_expert_gate;   // qwen2_moe, qwen3_next, qwen3_5_moe: [1, hidden] (sigmoid gate); else undefined
  bool has_shared_expert = false;
};

struct ModelWeights {
  at::Tensor embed_tokens;  // [vocab, hidden], checkpoint dtype (CPU: zero-copy view)
  at::Tensor norm;          // [hidden]
  at::Tensor lm_head;       // [vocab, hidden] (the same bytes as embed_tokens when tied, on the CPU)
  std::vector<LayerWeights> layers;
};

// switch_transformers (modeling_switch_transformers.py): one block of the encoder or the decoder,
// at its global layer id (model_config.h). Names are those of the HF state dict with
// P = {encoder|decoder}.block.{i}.layer:
//   P.0.layer_norm.weight, P.0.SelfAttention.{q,k,v,o}.weight (no biases);
//   decoder only: P.1.layer_norm.weight, P.1.EncDecAttention.{q,k,v,o}.weight;
//   FF at F = P.1 (encoder) / P.2 (decoder): F.layer_norm.weight, then dense F.mlp.{wi,wo}.weight or
//   sparse F.mlp.router.classifier.weight + routed experts F.mlp.experts.expert_{E}.{wi,wo}.weight.
struct SwitchBlockWeights {
  at::Tensor self_attn_norm;                         // [d_model]
  LinearWeights q, k, v;                             // [heads*d_kv, d_model]
  LinearWeights o;                                   // [d_model, heads*d_kv]
  at::Tensor cross_attn_norm;                        // decoder: [d_model]
  LinearWeights cross_q, cross_k, cross_v, cross_o;  // decoder: as q/k/v/o
  at::Tensor ff_norm;                                // [d_model]
  bool is_moe = false;
  at::Tensor wi, wo;                                 // dense: [d_ff, d_model], [d_model, d_ff]
  at::Tensor router;                                 // sparse: [n_experts, d_model] float32
};

struct SwitchWeights {
  at::Tensor shared;           // shared.weight [vocab, d_model] (CPU: zero-copy view); the input embedding of both stacks
  at::Tensor encoder_position_bias;  // encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight [buckets, heads]
  at::Tensor decoder_position_bias;  // decoder.block.0...relative_attention_bias.weight [buckets, heads]
  std::vector<SwitchBlockWeights> blocks;  // [num_hidden_layers]: encoder blocks, then decoder blocks
  at::Tensor encoder_final_norm;   // encoder.final_layer_norm.weight [d_model]
  at::Tensor decoder_final_norm;   // decoder.final_layer_norm.weight [d_model]
  at::Tensor lm_head;              // [vocab, d_model]: shared.weight when tie_word_embeddings, else lm_head.weight
};

struct LoadOptions {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;  // compute dtype: float32 (CPU) or bfloat16 (GPU)
  bool resident_experts = true;       // build a ResidentExpertProvider
  int n_threads = 0;                  // for FromStore decompression (0 = all cores)
  // The files loading maps in full: a checkpoint's every file with resident_experts, else a compressed
  // directory's dense.safetensors (a checkpoint's files without resident_experts are read on demand
  // and stay mapped). kBackground: mapped now, copied by LoadedModel::background_copy (CPU device only;
  // another device keeps kMapped).
  WeightsMemory weights_memory = WeightsMemory::kMapped;
};


// Everything a loaded model directory owns. Views in `weights` point into `checkpoint`/`dense`.
struct LoadedModel {
  LoadedModel() = default;
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel();  // detaches the FP8 scales of fp8_weights (torch_util.h AttachFp8Scales)

  std::string dir;
  ModelDirKind kind = ModelDirKind::kHuggingFace;
  ModelConfig config;
  ModelWeights weights;        // decoder-only archs
  SwitchWeights switch_weights;  // switch_transformers
  std::unique_ptr<Checkpoint> checkpoint;    // kHuggingFace
  std::unique_ptr<SafetensorsFile> dense;    // kCompressed
  std::unique_ptr<ExpertStore> store;        // kCompressed
  std::unique_ptr<ResidentExpertProvider> resident_experts;  // if LoadOptions::resident_experts
  std::vector<at::Tensor> fp8_weights;  // every FP8 linear weight whose scales are attached
  WeightsMemoryStats weights_memory;    // after loading (CurrentWeightsMemory: with the background copy's progress)
  // LoadOptions::weights_memory kBackground: copies the files it read in full into anonymous memory
  // while the model serves; destroyed first (~LoadedModel) so it never outlives the files.
  std::unique_ptr<BackgroundWeightsCopy> background_copy;
};

// `model.weights_memory`, or the background copy's current stats where there is one.
WeightsMemoryStats CurrentWeightsMemory(const LoadedModel& model);

// FP8 checkpoints (config.fp8()): every F8_E4M3 linear weight stays a zero-copy uint8 view with its
// `<name>_scale_inv` attached (torch_util.h Fp8Scales; shape checked against the config's blocks), on
// the CPU only: another device is refused (kInvalidArgument), as is an F8_E4M3 tensor in a model
// without a quantization_config or one without its scales (kNotFound naming it).
// Loads DIR. The dense weights' file, and with resident_experts a checkpoint's every file, are
// mapped in full before returning (MappedFile::Populate: no page fault inside a request).
// Errors: DetectModelDir's; LoadModelConfig's; Checkpoint/SafetensorsFile/ExpertStore open errors;
// kIoError from populating a mapping; kNotFound naming a missing tensor and DIR; kInvalidArgument naming a tensor whose
// shape differs from the config (expected and found shapes) or whose dtype is unsupported;
// provider construction errors (kCorruption from a damaged experts.bin); kInternal (torch).
Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& dir, const LoadOptions& options);

}  // namespace zipmoe::executor
