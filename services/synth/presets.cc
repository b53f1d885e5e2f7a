// Preset table and config.json builders. Key sets and non-size values are copied from the real
// checkpoints' config.json: Qwen/Qwen1.5-MoE-A2.7B, mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B,
// allenai/OLMoE-1B-7B-0924, deepseek-ai/DeepSeek-V2-Lite, moonshotai/Moonlight-16B-A3B (deepseek_v3),
// zai-org/GLM-4.5-Air (glm4_moe), zai-org/GLM-4.7-Flash (glm4_moe_lite) and baidu/ERNIE-4.5-21B-A3B-PT
// (ernie4_5_moe), openai/gpt-oss-20b (gpt_oss), Qwen/Qwen3-Next-80B-A3B-Instruct (qwen3_next) and
// Qwen/Qwen3.5-35B-A3B (qwen3_5_moe), ibm-granite/granite-3.0-1b-a400m-instruct (granitemoe and, with a shared
// MLP, granitemoeshared), ibm-granite/granite-4.0-h-tiny (granitemoehybrid), LiquidAI/LFM2-8B-A1B (lfm2_moe), arcee-ai/Trinity-Nano
// (afmoe) (see docs/synth.md for known deviations).
#include "services/synth/presets.h"

#include <fmt/format.h>

#include "services/synth/tokenizer_files.h"

namespace zipmoe::synth {
namespace {

using nlohmann::json;

// clang-format off
// arch, preset, hidden, layers, heads, kv_heads, head_dim, intermediate, moe_intermediate, shared,
// experts, top_k, vocab, kv_lora_rank, qk_nope, qk_rope, v_head, n_shared, first_k_dense, note
const std::vector<PresetRow> kPresets = {
  {"qwen2_moe",   "tiny", 128,  4, 4, 4,  0,  256,  64,  256, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "MHA like the real model"},
  {"mixtral",     "tiny", 128,  4, 4, 2,  0,  448,   0,    0,  8, 2,   2048,   0,   0,  0,   0, 0, 0,
   "GQA 4/2; ffn = 3.5 x hidden as the real model"},
  {"qwen3_moe",   "tiny", 128,  4, 4, 2, 64,  384,  64,    0, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "GQA 4/2; heads*head_dim = 256 != hidden as the real model (4096 vs 2048)"},
  {"olmoe",       "tiny", 128,  4, 4, 4,  0,   64,   0,    0, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "MHA like the real model"},
  {"deepseek_v2", "tiny", 128,  4, 4, 4,  0,  384,  64,    0, 16, 4,   2048,  64,  32, 16,  32, 2, 1,
   "layer 0 dense, layers 1-3 MoE; q_lora_rank null (set it with --q-lora-rank)"},
  {"qwen2_moe",   "mini", 1024, 24, 8, 8,  0, 2816, 704, 2816, 60, 4, 151936,   0,   0,  0,   0, 0, 0,
   "real depth/experts/vocab; heads 16->8 keeping head_dim 128"},
  {"mixtral",     "mini", 2048,  8, 16, 4, 0, 7168,   0,    0,  8, 2,  32000,   0,   0,  0,   0, 0, 0,
   "layers 32->8 (32 layers at half width would be ~23 GB); heads 32->16, kv 8->4"},
  {"qwen3_moe",   "mini", 1024, 24, 16, 2, 128, 3072, 384,  0, 128, 8, 151936,  0,   0,  0,   0, 0, 0,
   "layers 48->24 (48 layers at half width would be ~16 GB); heads 32->16, kv 4->2"},
  {"olmoe",       "mini", 1024, 16, 8, 8,  0,  512,   0,    0, 64, 8,  50304,   0,   0,  0,   0, 0, 0,
   "real depth/experts/vocab; heads 16->8 keeping head_dim 128"},
  {"deepseek_v2", "mini", 1024, 27, 8, 8,  0, 5472, 704,    0, 64, 6, 102400, 256, 128, 64, 128, 2, 1,
   "real depth/experts/vocab; heads 16->8, kv_lora_rank 512->256, MLA head dims kept"},
  // The newer DeepSeek-style MoEs: trailing q_lora_rank, n_group, topk_group, MTP layers, use_qk_norm.
  {"deepseek_v3", "tiny", 128,  4, 4, 4,  0,  384,  64,    0, 16, 4,   2048,  64,  32, 16,  32, 2, 1,
   "Moonlight's layout with DeepSeek-V3's group-limited routing (n_group 4, topk_group 2) and one MTP layer",
   0, 4, 2, 1, false},
  {"deepseek_v3", "mini", 1024, 27, 8, 8,  0, 5632, 704,    0, 64, 6, 163840, 256, 128, 64, 128, 2, 1,
   "Moonlight-16B-A3B at half width: real depth/experts/vocab; heads 16->8, kv_lora_rank 512->256",
   0, 1, 1, 0, false},
  {"glm4_moe",    "tiny", 128,  4, 4, 2, 64,  384,  64,    0, 16, 4,   2048,   0,   0,  0,   0, 1, 1,
   "GQA 4/2, heads*head_dim = 256 != hidden as the real model; use_qk_norm on (GLM-4.5) and one MTP layer",
   0, 1, 1, 1, true},
  {"glm4_moe",    "mini", 1024, 12, 24, 2, 128, 2736, 352, 0, 128, 8, 151552,  0,   0,  0,   0, 1, 1,
   "GLM-4.5-Air at quarter width: layers 46->12 (128 experts a layer); heads 96->24, kv 8->2, head_dim 128 kept",
   0, 1, 1, 0, false},
  {"glm4_moe_lite", "tiny", 128, 4, 4, 4, 0,  384,  64,    0, 16, 4,   2048,  64,  48, 16,  64, 1, 1,
   "MLA with a low-rank query (q_lora_rank 48) as the real model",
   48, 1, 1, 0, false},
  {"glm4_moe_lite", "mini", 1024, 16, 10, 10, 0, 5120, 768, 0, 64, 4, 154880, 256, 192, 64, 256, 1, 1,
   "GLM-4.7-Flash at half width: layers 47->16; heads 20->10, q_lora_rank 768->384, kv_lora_rank 512->256",
   384, 1, 1, 0, false},
  {"ernie4_5_moe", "tiny", 128, 4, 4, 2, 0,  384,  64,    0, 16, 4,   2048,   0,   0,  0,   0, 2, 1,
   "GQA 4/2 as the real model (20/4), two shared experts, layer 0 dense, tied embeddings", 0, 1, 1, 0, false},
  {"ernie4_5_moe", "mini", 1280, 12, 10, 2, 128, 6144, 768, 0, 64, 6, 103424, 0,   0,  0,   0, 2, 1,
   "ERNIE-4.5-21B-A3B at half width: layers 28->12; heads 20->10, kv 4->2, head_dim 128 kept", 0, 1, 1, 0, false},
  // gpt_oss: MXFP4 experts (intermediate = the expert width, a multiple of 32), sliding window 8 in tiny
  // (so a 16-token prompt crosses it) and 128 (the real one) in mini.
  {"gpt_oss",     "tiny", 128,  4, 4, 2, 32,  128,   0,    0, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "GQA 4/2 with head_dim 32; sliding window 8 (128 in the real model) so a short prompt crosses it"},
  {"gpt_oss",     "mini", 1440, 24, 32, 4, 64, 1440,  0,    0, 32, 4, 201088,   0,   0,  0,   0, 0, 0,
   "gpt-oss-20b at half width: real depth/experts/vocab/head_dim; heads 64->32, kv 8->4"},
  // The hybrids: layers 3 Gated DeltaNet + 1 gated full attention, repeated; every layer MoE with a
  // shared expert; one MTP layer (mtp.*) never read. Trailing: q_lora_rank, n_group, topk_group,
  // mtp_layers, use_qk_norm, linear key heads, linear value heads, linear head dim (dk = dv).
  {"qwen3_next",  "tiny", 128,  4, 4, 2, 64,  256,  64,   64, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "3 linear + 1 full layer; GQA 4/2, head_dim 64 (rotary 16); linear heads 2 key / 4 value of 32",
   0, 1, 1, 1, false, 2, 4, 32},
  {"qwen3_next",  "mini", 1024, 12, 8, 2, 256, 2560, 256, 256, 128, 10, 151936, 0,  0,  0,   0, 0, 0,
   "Qwen3-Next-80B-A3B at half width: layers 48->12 (9 linear + 3 full), experts 512->128 (top-10 kept); "
   "heads 16->8 with the real head_dim 256, linear heads 16/32->8/16 of the real 128",
   0, 1, 1, 1, false, 8, 16, 128},
  {"qwen3_5_moe", "tiny", 128,  4, 4, 2, 64,    0,  64,   64, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "3 linear + 1 full layer; GQA 4/2, head_dim 64 (rotary 16); linear heads 2 key / 4 value of 32; fused experts",
   0, 1, 1, 1, false, 2, 4, 32},
  {"qwen3_5_moe", "mini", 1024, 12, 8, 2, 256,    0, 256, 256, 128, 8, 248320, 0,  0,  0,   0, 0, 0,
   "Qwen3.5-35B-A3B at half width: layers 40->12 (9 linear + 3 full), experts 256->128 (top-8 kept); "
   "heads 16->8 with the real head_dim 256, linear heads 16/32->8/16 of the real 128",
   0, 1, 1, 1, false, 8, 16, 128},
  // granitemoe: the intermediate width is the expert width; mini is ibm-granite/granite-3.0-1b-a400m's real
  // shape. granitemoeshared (no small release to copy): the same with a shared MLP (`shared` column).
  {"granitemoe",  "tiny", 128,  4, 4, 2,  0,   64,   0,    0, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "GQA 4/2; the real multipliers (embedding 12, residual 0.22, attention 1/64, logits / 6), tied embeddings"},
  {"granitemoe",  "mini", 1024, 24, 16, 8, 0,  512,   0,    0, 32, 8,  49155,   0,   0,  0,   0, 0, 0,
   "granite-3.0-1b-a400m's real shape (1.3 B parameters, 400 M active)"},
  {"granitemoeshared", "tiny", 128, 4, 4, 2, 0, 64,  0,  128, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "granitemoe tiny plus a 128-wide shared MLP"},
  {"granitemoeshared", "mini", 1024, 24, 16, 8, 0, 512, 0, 1024, 32, 8, 49155,   0,   0,  0,   0, 0, 0,
   "granitemoe mini plus a 1024-wide shared MLP (no small granitemoeshared release to copy)"},
  // granitemoehybrid (Granite 4.0-H): Mamba2 layers with a few attention layers (GraniteMoeHybridConfig() writes
  // the Mamba sizes and layer_types: tiny 8 heads x 32, d_state 16, layers mamba / attention / mamba / mamba;
  // mini granite-4.0-h-tiny's widths, 48 heads x 64, d_state 128, layer 5 of 10 attention).
  {"granitemoehybrid", "tiny", 128, 4, 4, 2, 0,  64,   0,  128, 16, 4,   2048,   0,   0,  0,   0, 0, 0,
   "3 Mamba2 + 1 attention layer (no positional embedding), shared MLP 128, the real multipliers"},
  {"granitemoehybrid", "mini", 1536, 10, 12, 4, 0, 512,  0, 1024, 64, 6, 100352,   0,   0,  0,   0, 0, 0,
   "granite-4.0-h-tiny's widths (64 experts top-6, shared 1024, Mamba 48 x 64, d_state 128); layers 40->10"},
  // lfm2_moe (LFM2-8B-A1B): gated short convolutions with a few attention layers, the first layers dense
  // (first_k_dense column = num_dense_layers). tiny: conv / attention / conv / conv, layer 0 dense; mini: the
  // release's 24-layer pattern (attention at 2, 6, 10, 14, 18, 21) at half width.
  {"lfm2_moe",    "tiny", 128,  4, 4, 2,  0,  448,  64,    0, 16, 4,   2048,   0,   0,  0,   0, 0, 1,
   "1 dense + 3 MoE layers (conv, attention, conv, conv); GQA 4/2, head_dim 32; expert bias; tied embeddings"},
  {"lfm2_moe",    "mini", 1024, 24, 16, 4, 0, 3584, 896,    0, 32, 4,  65536,   0,   0,  0,   0, 0, 2,
   "LFM2-8B-A1B at half width: real depth / layer pattern / experts (32, top-4) / vocab / head_dim 64; heads "
   "32->16, kv 8->4"},
  // afmoe (Arcee Trinity): 3 sliding-window layers to 1 full-attention layer (NoPE), gated attention, sandwich norms,
  // the first layers dense (first_k_dense column), shared experts (n_shared column). tiny: window 8 so a 16-token
  // prompt crosses it; mini: Trinity-Nano's widths, 14 of its 56 layers.
  {"afmoe",       "tiny", 128,  4, 4, 2, 32,  448,  64,    0, 16, 4,   2048,   0,   0,  0,   0, 1, 1,
   "sliding, sliding, sliding, full (NoPE); GQA 4/2 of 32 with an output gate; layer 0 dense; 1 shared expert; mup"},
  {"afmoe",       "mini", 1024, 14, 8, 2, 128, 3072, 256,    0, 128, 8, 200192,  0,   0,  0,   0, 1, 2,
   "Trinity-Nano's widths (128 experts top-8 x 256, 1 shared, 8 / 2 heads of 128, window 2048); layers 56->14"},
};
// clang-format on

// bos/eos/pad ids of the synthetic tokenizer (see tokenizer_files.h for the id layout).
Status AddTokenIds(const std::string& arch, int64_t vocab_size, json& config) {
  ZM_ASSIGN_OR_RETURN(SpecialTokenLayout layout, SpecialTokensForArch(arch, vocab_size));
  if (!layout.bos_token.empty()) config["bos_token_id"] = layout.IdOf(layout.bos_token);
  config["eos_token_id"] = layout.IdOf(layout.eos_token);
  if (arch == "olmoe") config["pad_token_id"] = layout.IdOf(layout.pad_token);
  if (arch == "ernie4_5_moe") config["pad_token_id"] = layout.IdOf(layout.pad_token);
  if (arch == "granitemoe" || arch == "granitemoeshared" || arch == "granitemoehybrid" || arch == "lfm2_moe" ||
      arch == "afmoe")
    config["pad_token_id"] = layout.IdOf(layout.pad_token);
  if (arch == "gpt_oss") {  // stops on <|return|>; <|endoftext|> pads (the real ids 200002 / 199999)
    config["pad_token_id"] = layout.IdOf(layout.pad_token);
    config.erase("bos_token_id");
  }
  if (arch == "qwen3_5_moe") {  // text_config eos <|endoftext|> as the real 248044; vision ids at the top
    config.erase("bos_token_id");
    config.erase("eos_token_id");
    config["text_config"]["eos_token_id"] = layout.IdOf("<|endoftext|>");
    config["image_token_id"] = layout.IdOf("<|image_pad|>");
    config["video_token_id"] = layout.IdOf("<|video_pad|>");
    config["vision_start_token_id"] = layout.IdOf("<|vision_start|>");
    config["vision_end_token_id"] = layout.IdOf("<|vision_end|>");
  }
  if (arch == "glm4_moe" || arch == "glm4_moe_lite") {  // GLM stops on <|endoftext|>, <|user|>, <|observation|>
    config["eos_token_id"] = {layout.IdOf("<|endoftext|>"), layout.IdOf("<|user|>"), layout.IdOf("<|observation|>")};
    config["pad_token_id"] = layout.IdOf(layout.pad_token);
  }
  return Status::Ok();
}

json Qwen2MoeConfig(const PresetRow& p) {
  return json{
      {"architectures", {"Qwen2MoeForCausalLM"}},
      {"attention_dropout", 0.0},
      {"decoder_sparse_step", 1},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 8192},
      {"max_window_layers", 21},
      {"mlp_only_layers", json::array()},
      {"model_type", "qwen2_moe"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"norm_topk_prob", false},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"output_router_logits", false},
      {"rms_norm_eps", 1e-06},
      {"rope_theta", 1000000.0},
      {"router_aux_loss_coef", 0.001},
      {"shared_expert_intermediate_size", p.shared_intermediate},
      {"sliding_window", 32768},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.40.0.dev0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", p.vocab_size},
  };
}

json MixtralConfig(const PresetRow& p) {
  return json{
      {"architectures", {"MixtralForCausalLM"}},
      {"attention_dropout", 0.0},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 32768},
      {"model_type", "mixtral"},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_local_experts", p.num_experts},
      {"output_router_logits", false},
      {"rms_norm_eps", 1e-05},
      {"rope_theta", 1000000.0},
      {"router_aux_loss_coef", 0.02},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.36.0.dev0"},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
}

json Qwen3MoeConfig(const PresetRow& p) {
  return json{
      {"architectures", {"Qwen3MoeForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"decoder_sparse_step", 1},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 40960},
      {"max_window_layers", 48},
      {"mlp_only_layers", json::array()},
      {"model_type", "qwen3_moe"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"output_router_logits", false},
      {"rms_norm_eps", 1e-06},
      {"rope_scaling", nullptr},
      {"rope_theta", 1000000.0},
      {"router_aux_loss_coef", 0.001},
      {"sliding_window", nullptr},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.51.0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", p.vocab_size},
  };
}

json OlmoeConfig(const PresetRow& p) {
  return json{
      {"architectures", {"OlmoeForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"clip_qkv", nullptr},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 4096},
      {"model_type", "olmoe"},
      {"norm_topk_prob", false},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"output_router_logits", false},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", nullptr},
      {"rope_theta", 10000.0},
      {"router_aux_loss_coef", 0.01},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.43.0.dev0"},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
}

json DeepseekV2Config(const PresetRow& p) {
  return json{
      {"architectures", {"DeepseekV2ForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"auto_map",
       {{"AutoConfig", "configuration_deepseek.DeepseekV2Config"},
        {"AutoModel", "modeling_deepseek.DeepseekV2Model"},
        {"AutoModelForCausalLM", "modeling_deepseek.DeepseekV2ForCausalLM"}}},
      {"aux_loss_alpha", 0.001},
      {"ep_size", 1},
      {"first_k_dense_replace", p.first_k_dense_replace},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"kv_lora_rank", p.kv_lora_rank},
      {"max_position_embeddings", 163840},
      {"model_type", "deepseek_v2"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"moe_layer_freq", 1},
      {"n_group", 1},
      {"n_routed_experts", p.num_experts},
      {"n_shared_experts", p.n_shared_experts},
      {"norm_topk_prob", false},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"pretraining_tp", 1},
      {"q_lora_rank", nullptr},
      {"qk_nope_head_dim", p.qk_nope_head_dim},
      {"qk_rope_head_dim", p.qk_rope_head_dim},
      {"rms_norm_eps", 1e-06},
      {"rope_scaling",
       {{"beta_fast", 32},
        {"beta_slow", 1},
        {"factor", 40},
        {"mscale", 0.707},
        {"mscale_all_dim", 0.707},
        {"original_max_position_embeddings", 4096},
        {"type", "yarn"}}},
      {"rope_theta", 10000},
      {"routed_scaling_factor", 1.0},
      {"scoring_func", "softmax"},
      {"seq_aux", true},
      {"tie_word_embeddings", false},
      {"topk_group", 1},
      {"topk_method", "greedy"},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.33.1"},
      {"use_cache", true},
      {"v_head_dim", p.v_head_dim},
      {"vocab_size", p.vocab_size},
  };
}

// moonshotai/Moonlight-16B-A3B's config.json key set (model_type deepseek_v3), n_group/topk_group and
// num_nextn_predict_layers from the preset row (DeepSeek-V3 itself: 8 / 4 / 1).
json DeepseekV3Config(const PresetRow& p) {
  return json{
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"auto_map",
       {{"AutoConfig", "configuration_deepseek.DeepseekV3Config"},
        {"AutoModel", "modeling_deepseek.DeepseekV3Model"},
        {"AutoModelForCausalLM", "modeling_deepseek.DeepseekV3ForCausalLM"}}},
      {"aux_loss_alpha", 0.001},
      {"ep_size", 1},
      {"first_k_dense_replace", p.first_k_dense_replace},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"kv_lora_rank", p.kv_lora_rank},
      {"max_position_embeddings", 8192},
      {"model_type", "deepseek_v3"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"moe_layer_freq", 1},
      {"n_group", p.n_group},
      {"n_routed_experts", p.num_experts},
      {"n_shared_experts", p.n_shared_experts},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_nextn_predict_layers", p.mtp_layers},
      {"pretraining_tp", 1},
      {"q_lora_rank", p.q_lora_rank > 0 ? json(p.q_lora_rank) : json(nullptr)},
      {"qk_nope_head_dim", p.qk_nope_head_dim},
      {"qk_rope_head_dim", p.qk_rope_head_dim},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", nullptr},
      {"rope_theta", 50000.0},
      {"routed_scaling_factor", 2.446},
      {"scoring_func", "sigmoid"},
      {"seq_aux", true},
      {"tie_word_embeddings", false},
      {"topk_group", p.topk_group},
      {"topk_method", "noaux_tc"},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.48.2"},
      {"use_cache", true},
      {"v_head_dim", p.v_head_dim},
      {"vocab_size", p.vocab_size},
  };
}

// zai-org/GLM-4.5-Air's config.json key set (model_type glm4_moe).
json Glm4MoeConfig(const PresetRow& p) {
  return json{
      {"architectures", {"Glm4MoeForCausalLM"}},
      {"attention_bias", true},
      {"attention_dropout", 0.0},
      {"first_k_dense_replace", p.first_k_dense_replace},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 131072},
      {"model_type", "glm4_moe"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"n_group", p.n_group},
      {"n_routed_experts", p.num_experts},
      {"n_shared_experts", p.n_shared_experts},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_nextn_predict_layers", p.mtp_layers},
      {"partial_rotary_factor", 0.5},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", nullptr},
      {"rope_theta", 1000000},
      {"routed_scaling_factor", 1.0},
      {"tie_word_embeddings", false},
      {"topk_group", p.topk_group},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.54.0"},
      {"use_cache", true},
      {"use_qk_norm", p.use_qk_norm},
      {"vocab_size", p.vocab_size},
  };
}

// zai-org/GLM-4.7-Flash's config.json key set (model_type glm4_moe_lite).
json Glm4MoeLiteConfig(const PresetRow& p) {
  return json{
      {"architectures", {"Glm4MoeLiteForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"first_k_dense_replace", p.first_k_dense_replace},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"kv_lora_rank", p.kv_lora_rank},
      {"max_position_embeddings", 202752},
      {"model_type", "glm4_moe_lite"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"n_group", p.n_group},
      {"n_routed_experts", p.num_experts},
      {"n_shared_experts", p.n_shared_experts},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_nextn_predict_layers", p.mtp_layers},
      {"q_lora_rank", p.q_lora_rank > 0 ? json(p.q_lora_rank) : json(nullptr)},
      {"qk_nope_head_dim", p.qk_nope_head_dim},
      {"qk_rope_head_dim", p.qk_rope_head_dim},
      {"rms_norm_eps", 1e-05},
      {"rope_interleave", true},
      {"rope_scaling", nullptr},
      {"rope_theta", 1000000},
      {"routed_scaling_factor", 1.8},
      {"tie_word_embeddings", false},
      {"topk_group", p.topk_group},
      {"topk_method", "noaux_tc"},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "5.0.0.dev0"},
      {"use_cache", true},
      {"v_head_dim", p.v_head_dim},
      {"vocab_size", p.vocab_size},
  };
}

// baidu/ERNIE-4.5-21B-A3B-PT's config.json key set (model_type ernie4_5_moe).
json Ernie45MoeConfig(const PresetRow& p) {
  json c{
      {"architectures", {"Ernie4_5_MoeForCausalLM"}},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"intermediate_size", p.intermediate_size},
      {"max_position_embeddings", 131072},
      {"model_type", "ernie4_5_moe"},
      {"moe_gate", "topk"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"moe_k", p.top_k},
      {"moe_layer_interval", 1},
      {"moe_layer_start_index", p.first_k_dense_replace},
      {"moe_num_experts", p.num_experts},
      {"moe_num_shared_experts", p.n_shared_experts},
      {"moe_use_aux_free", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"rms_norm_eps", 1e-05},
      {"rope_theta", 500000},
      {"tie_word_embeddings", true},
      {"torch_dtype", "bfloat16"},
      {"use_bias", false},
      {"use_cache", false},
      {"vocab_size", p.vocab_size},
  };
  if (p.head_dim > 0) c["head_dim"] = p.head_dim;
  return c;
}

// openai/gpt-oss-20b's config.json key set (model_type gpt_oss), MXFP4 experts as released.
json GptOssConfig(const PresetRow& p, bool tiny) {
  json layer_types = json::array();
  for (int64_t i = 0; i < p.num_hidden_layers; ++i) layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return json{
      {"architectures", {"GptOssForCausalLM"}},
      {"attention_bias", true},
      {"attention_dropout", 0.0},
      {"experts_per_token", p.top_k},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initial_context_length", 4096},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"layer_types", layer_types},
      {"max_position_embeddings", 131072},
      {"model_type", "gpt_oss"},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_local_experts", p.num_experts},
      {"output_router_logits", false},
      {"quantization_config",
       {{"modules_to_not_convert",
         {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
        {"quant_method", "mxfp4"}}},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling",
       {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0}, {"original_max_position_embeddings", 4096},
        {"rope_type", "yarn"}, {"truncate", false}}},
      {"rope_theta", 150000},
      {"router_aux_loss_coef", 0.9},
      {"sliding_window", tiny ? 8 : 128},
      {"swiglu_limit", 7.0},
      {"tie_word_embeddings", false},
      {"transformers_version", "4.55.0.dev0"},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
}

// Qwen/Qwen3-Next-80B-A3B-Instruct's config.json key set (model_type qwen3_next): no layer_types key,
// full_attention_interval 4 places the full-attention layers (3, 7, ...).
json Qwen3NextConfig(const PresetRow& p) {
  return json{
      {"architectures", {"Qwen3NextForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"decoder_sparse_step", 1},
      {"full_attention_interval", 4},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"linear_conv_kernel_dim", 4},
      {"linear_key_head_dim", p.linear_head_dim},
      {"linear_num_key_heads", p.linear_key_heads},
      {"linear_num_value_heads", p.linear_value_heads},
      {"linear_value_head_dim", p.linear_head_dim},
      {"max_position_embeddings", 262144},
      {"mlp_only_layers", json::array()},
      {"model_type", "qwen3_next"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"mtp_num_hidden_layers", p.mtp_layers},
      {"mtp_use_dedicated_embeddings", false},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"output_router_logits", false},
      {"partial_rotary_factor", 0.25},
      {"rms_norm_eps", 1e-06},
      {"rope_scaling", nullptr},
      {"rope_theta", 10000000},
      {"router_aux_loss_coef", 0.001},
      {"shared_expert_intermediate_size", p.shared_intermediate},
      {"tie_word_embeddings", false},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.57.0.dev0"},
      {"use_cache", true},
      {"use_sliding_window", false},
      {"vocab_size", p.vocab_size},
  };
}

// Qwen/Qwen3.5-35B-A3B's config.json (model_type qwen3_5_moe): the decoder in text_config (explicit
// layer_types, rope_parameters with the multimodal RoPE sections, which change nothing for text), a
// small vision_config: synth writes only the vision tower's patch embedding (model.visual.*), which
// text serving never reads. The token ids are filled in by AddTokenIds.
json Qwen35MoeConfig(const PresetRow& p, bool tiny) {
  json layer_types = json::array();
  for (int64_t i = 0; i < p.num_hidden_layers; ++i)
    layer_types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  // mrope_section sums to the rotary half-width: head_dim * 0.25 / 2 (the real 11 + 11 + 10 = 32 of 256).
  const int64_t half = p.head_dim / 8;
  const int64_t sec = (half + 2) / 3;
  json text{
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attn_output_gate", true},
      {"dtype", "bfloat16"},
      {"full_attention_interval", 4},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"layer_types", layer_types},
      {"linear_conv_kernel_dim", 4},
      {"linear_key_head_dim", p.linear_head_dim},
      {"linear_num_key_heads", p.linear_key_heads},
      {"linear_num_value_heads", p.linear_value_heads},
      {"linear_value_head_dim", p.linear_head_dim},
      {"mamba_ssm_dtype", "float32"},
      {"max_position_embeddings", 262144},
      {"model_type", "qwen3_5_moe_text"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"mtp_num_hidden_layers", p.mtp_layers},
      {"mtp_use_dedicated_embeddings", false},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"rms_norm_eps", 1e-06},
      {"rope_parameters",
       {{"mrope_interleaved", true},
        {"mrope_section", {sec, sec, half - 2 * sec}},
        {"partial_rotary_factor", 0.25},
        {"rope_theta", 10000000},
        {"rope_type", "default"}}},
      {"shared_expert_intermediate_size", p.shared_intermediate},
      {"tie_word_embeddings", false},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
  json vision{
      {"depth", 0},  // synth writes no vision block (docs/synth.md)
      {"hidden_size", tiny ? 32 : 576},
      {"in_channels", 3},
      {"model_type", "qwen3_5_moe"},
      {"out_hidden_size", p.hidden_size},
      {"patch_size", 16},
      {"spatial_merge_size", 2},
      {"temporal_patch_size", 2},
  };
  return json{
      {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
      {"model_type", "qwen3_5_moe"},
      {"text_config", text},
      {"tie_word_embeddings", false},
      {"transformers_version", "5.2.0.dev0"},
      {"vision_config", vision},
  };
}

// switch_transformers: google/switch-base-128's config.json key set. tiny: small for unit tests, with
// expert_capacity 2 so a prompt of a dozen tokens overflows experts; mini: Switch-Base shapes (d_model
// 768, d_ff 3072, 12 heads, d_kv 64, sparse step 2, capacity 64) at 2+2 blocks and 32 experts (128
// F32 experts of one layer alone are 2.4 GB), real vocab: ~1.4 GB.
json SwitchConfig(const std::string& preset) {
  const bool tiny = preset == "tiny";
  const int64_t layers = 2;
  return json{
      {"architectures", {"SwitchTransformersForConditionalGeneration"}},
      {"add_router_probs", false},
      {"batch_prioritized_routing", false},
      {"d_ff", tiny ? 128 : 3072},
      {"d_kv", tiny ? 16 : 64},
      {"d_model", tiny ? 64 : 768},
      {"decoder_sparse_step", 2},
      {"decoder_start_token_id", 0},
      {"dense_act_fn", "relu"},
      {"dropout_rate", 0.1},
      {"encoder_sparse_step", 2},
      {"eos_token_id", 1},
      {"expert_capacity", tiny ? 2 : 64},
      {"feed_forward_proj", "relu"},
      {"initializer_factor", 1.0},
      {"is_encoder_decoder", true},
      {"is_gated_act", false},
      {"layer_norm_epsilon", 1e-06},
      {"model_type", "switch_transformers"},
      {"num_decoder_layers", layers},
      {"num_experts", tiny ? 8 : 32},
      {"num_heads", tiny ? 4 : 12},
      {"num_layers", layers},
      {"num_selected_experts", 1},
      {"num_sparse_decoder_layers", layers / 2},
      {"num_sparse_encoder_layers", layers / 2},
      {"pad_token_id", 0},
      {"relative_attention_max_distance", 128},
      {"relative_attention_num_buckets", 32},
      {"router_aux_loss_coef", 0.001},
      {"router_bias", false},
      {"router_dtype", "float32"},
      {"router_ignore_padding_tokens", false},
      {"router_jitter_noise", 0.01},
      {"router_type", "tokens_masked"},
      {"router_z_loss_coef", 0.001},
      {"tie_word_embeddings", true},
      {"torch_dtype", "float32"},
      {"transformers_version", "4.25.0.dev0"},
      {"use_cache", true},
      {"vocab_size", tiny ? 512 : 32128},
  };
}

// ibm-granite/granite-3.0-1b-a400m-instruct's config.json (model_type granitemoe); granitemoeshared adds
// shared_intermediate_size (GraniteMoeSharedConfig).
json GraniteMoeConfig(const PresetRow& p) {
  const bool shared = std::string(p.arch) == "granitemoeshared";
  json c{
      {"architectures", {shared ? "GraniteMoeSharedForCausalLM" : "GraniteMoeForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attention_multiplier", 0.015625},
      {"embedding_multiplier", 12.0},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"logits_scaling", 6.0},
      {"max_position_embeddings", 4096},
      {"model_type", p.arch},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_local_experts", p.num_experts},
      {"output_router_logits", false},
      {"residual_multiplier", 0.22},
      {"rms_norm_eps", 1e-06},
      {"rope_scaling", nullptr},
      {"rope_theta", 10000},
      {"router_aux_loss_coef", 0.0},
      {"tie_word_embeddings", true},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.46.0.dev0"},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
  if (shared) c["shared_intermediate_size"] = p.shared_intermediate;
  return c;
}

// ibm-granite/granite-4.0-h-tiny's config.json (model_type granitemoehybrid): its keys, the Mamba sizes per
// preset (tiny: 8 heads of 32, d_state 16; mini: the release's 48 of 64, d_state 128) and layer_types.
json GraniteMoeHybridConfig(const PresetRow& p, bool tiny) {
  json types = json::array();
  for (int64_t l = 0; l < p.num_hidden_layers; ++l)
    types.push_back((tiny ? l == 1 : l % 10 == 5) ? "attention" : "mamba");
  return json{
      {"architectures", {"GraniteMoeHybridForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attention_multiplier", 0.0078125},
      {"embedding_multiplier", 12},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"init_method", "mup"},
      {"initializer_range", 0.1},
      {"intermediate_size", p.intermediate_size},
      {"layer_types", types},
      {"logits_scaling", 6},
      {"mamba_chunk_size", 256},
      {"mamba_conv_bias", true},
      {"mamba_d_conv", 4},
      {"mamba_d_head", tiny ? 32 : 64},
      {"mamba_d_state", tiny ? 16 : 128},
      {"mamba_expand", 2},
      {"mamba_n_groups", 1},
      {"mamba_n_heads", tiny ? 8 : 48},
      {"mamba_proj_bias", false},
      {"max_position_embeddings", 131072},
      {"model_type", "granitemoehybrid"},
      {"normalization_function", "rmsnorm"},
      {"num_attention_heads", p.num_attention_heads},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_local_experts", p.num_experts},
      {"output_router_logits", false},
      {"position_embedding_type", "nope"},
      {"residual_multiplier", 0.22},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", nullptr},
      {"rope_theta", 10000},
      {"router_aux_loss_coef", 0.0},
      {"shared_intermediate_size", p.shared_intermediate},
      {"tie_word_embeddings", true},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.56.0"},
      {"use_cache", true},
      {"vocab_size", p.vocab_size},
  };
}

// LiquidAI/LFM2-8B-A1B's config.json (model_type lfm2_moe): its keys (the original `tie_embedding` as the
// release writes it; Lfm2MoeConfig reads it as tie_word_embeddings), layer_types per preset.
json Lfm2MoeConfig(const PresetRow& p, bool tiny) {
  json types = json::array();
  for (int64_t l = 0; l < p.num_hidden_layers; ++l) {
    const bool attention = tiny ? l == 1 : (l == 2 || l == 6 || l == 10 || l == 14 || l == 18 || l == 21);
    types.push_back(attention ? "full_attention" : "conv");
  }
  return json{
      {"architectures", {"Lfm2MoeForCausalLM"}},
      {"conv_L_cache", 3},
      {"conv_bias", false},
      {"dtype", "bfloat16"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"layer_types", types},
      {"max_position_embeddings", 128000},
      {"model_type", "lfm2_moe"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"norm_eps", 1e-05},
      {"norm_topk_prob", true},
      {"num_attention_heads", p.num_attention_heads},
      {"num_dense_layers", p.first_k_dense_replace},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"rope_theta", 1000000.0},
      {"routed_scaling_factor", 1.0},
      {"tie_embedding", true},
      {"transformers_version", "4.57.0.dev0"},
      {"use_cache", true},
      {"use_expert_bias", true},
      {"vocab_size", p.vocab_size},
  };
}

// arcee-ai/Trinity-Nano's config.json (model_type afmoe): its keys, the router keys transformers does not read
// (route_norm, score_func, n_group, ...) as released, layer_types per preset, window 8 (tiny) / 2048 (mini).
json AfmoeConfig(const PresetRow& p, bool tiny) {
  json types = json::array();
  for (int64_t l = 0; l < p.num_hidden_layers; ++l) types.push_back((l + 1) % 4 == 0 ? "full_attention" : "sliding_attention");
  return json{
      {"architectures", {"AfmoeForCausalLM"}},
      {"attention_dropout", 0.0},
      {"dtype", "bfloat16"},
      {"global_attn_every_n_layers", 4},
      {"head_dim", p.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", p.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", p.intermediate_size},
      {"layer_types", types},
      {"max_position_embeddings", 131072},
      {"model_type", "afmoe"},
      {"moe_intermediate_size", p.moe_intermediate_size},
      {"mup_enabled", true},
      {"n_group", 1},
      {"num_attention_heads", p.num_attention_heads},
      {"num_dense_layers", p.first_k_dense_replace},
      {"num_expert_groups", 1},
      {"num_experts", p.num_experts},
      {"num_experts_per_tok", p.top_k},
      {"num_hidden_layers", p.num_hidden_layers},
      {"num_key_value_heads", p.num_key_value_heads},
      {"num_limited_groups", 1},
      {"num_shared_experts", p.n_shared_experts},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", nullptr},
      {"rope_theta", 10000},
      {"route_norm", true},
      {"route_scale", 2.826},
      {"score_func", "sigmoid"},
      {"sliding_window", tiny ? 8 : 2048},
      {"tie_word_embeddings", false},
      {"topk_group", 1},
      {"transformers_version", "4.57.3"},
      {"use_cache", true},
      {"use_grouped_mm", true},
      {"vocab_size", p.vocab_size},
  };
}

}  // namespace

const std::vector<PresetRow>& PresetTable() { return kPresets; }

const std::vector<std::string>& ArchNames() {
  static const std::vector<std::string> names = {"qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2",
                                                 "deepseek_v3", "glm4_moe", "glm4_moe_lite", "ernie4_5_moe",
                                                 "gpt_oss", "qwen3_next", "qwen3_5_moe", "granitemoe",
                                                 "granitemoeshared", "granitemoehybrid", "lfm2_moe", "afmoe"};
  return names;
}

const std::vector<std::string>& PresetNames() {
  static const std::vector<std::string> names = {"tiny", "mini"};
  return names;
}

Result<nlohmann::json> BuildPresetConfig(const std::string& arch, const std::string& preset,
                                         int64_t q_lora_rank) {
  if (arch == "switch_transformers") {
    if (preset != "tiny" && preset != "mini")
      return Status::InvalidArgument(fmt::format("unknown preset '{}' for arch '{}' (expected tiny or mini)", preset, arch));
    if (q_lora_rank != 0)
      return Status::InvalidArgument(
          fmt::format("q_lora_rank {} given for arch '{}': only the MLA models (deepseek_v2, deepseek_v3, "
                      "glm4_moe_lite) have it", q_lora_rank, arch));
    return SwitchConfig(preset);
  }
  const PresetRow* row = nullptr;
  for (const PresetRow& p : kPresets) {
    if (arch == p.arch && preset == p.preset) row = &p;
  }
  if (row == nullptr) {
    bool arch_known = false;
    for (const std::string& a : ArchNames()) arch_known |= (a == arch);
    if (!arch_known) {
      return Status::InvalidArgument(fmt::format(
          "unknown arch '{}' (expected one of qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2, deepseek_v3, "
          "glm4_moe, glm4_moe_lite, ernie4_5_moe, gpt_oss, qwen3_next, qwen3_5_moe, granitemoe, granitemoeshared, "
          "granitemoehybrid, lfm2_moe, afmoe, switch_transformers)",
          arch));
    }
    return Status::InvalidArgument(
        fmt::format("unknown preset '{}' for arch '{}' (expected tiny or mini)", preset, arch));
  }
  if (q_lora_rank < 0) {
    return Status::InvalidArgument(fmt::format("q_lora_rank must be >= 0, got {}", q_lora_rank));
  }
  const bool mla = arch == "deepseek_v2" || arch == "deepseek_v3" || arch == "glm4_moe_lite";
  if (q_lora_rank > 0 && !mla) {
    return Status::InvalidArgument(fmt::format(
        "q_lora_rank {} given for arch '{}': only the MLA models (deepseek_v2, deepseek_v3, glm4_moe_lite) have it",
        q_lora_rank, arch));
  }
  json config;
  if (arch == "qwen2_moe") config = Qwen2MoeConfig(*row);
  if (arch == "mixtral") config = MixtralConfig(*row);
  if (arch == "qwen3_moe") config = Qwen3MoeConfig(*row);
  if (arch == "olmoe") config = OlmoeConfig(*row);
  if (arch == "deepseek_v2") config = DeepseekV2Config(*row);
  if (arch == "deepseek_v3") config = DeepseekV3Config(*row);
  if (arch == "glm4_moe") config = Glm4MoeConfig(*row);
  if (arch == "glm4_moe_lite") config = Glm4MoeLiteConfig(*row);
  if (arch == "ernie4_5_moe") config = Ernie45MoeConfig(*row);
  if (arch == "gpt_oss") config = GptOssConfig(*row, preset == "tiny");
  if (arch == "qwen3_next") config = Qwen3NextConfig(*row);
  if (arch == "qwen3_5_moe") config = Qwen35MoeConfig(*row, preset == "tiny");
  if (arch == "granitemoe" || arch == "granitemoeshared") config = GraniteMoeConfig(*row);
  if (arch == "granitemoehybrid") config = GraniteMoeHybridConfig(*row, preset == "tiny");
  if (arch == "lfm2_moe") config = Lfm2MoeConfig(*row, preset == "tiny");
  if (arch == "afmoe") config = AfmoeConfig(*row, preset == "tiny");
  if (q_lora_rank > 0) config["q_lora_rank"] = q_lora_rank;
  ZM_RETURN_IF_ERROR(AddTokenIds(arch, row->vocab_size, config));
  return config;
}

}  // namespace zipmoe::synth
