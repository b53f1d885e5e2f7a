// Tensor names/shapes per architecture, mirroring the transformers modules:
//   qwen2_moe:   Qwen2MoeAttention (q/k/v bias), Qwen2MoeSparseMoeBlock (gate, experts, shared_expert,
//                shared_expert_gate), dense Qwen2MoeMLP for mlp_only_layers / decoder_sparse_step.
//   mixtral:     MixtralAttention, MixtralSparseMoeBlock (block_sparse_moe.gate, experts.M.w1/w2/w3).
//   granitemoe / granitemoeshared: LlamaAttention, GraniteMoeMoE (block_sparse_moe.router.layer, fused
//                input_linear / output_linear), granitemoeshared's shared_mlp.input_linear / output_linear;
//                granitemoehybrid: those, with BambaMixer's mamba.* in place of self_attn on its "mamba" layers.
//   lfm2_moe:    Lfm2MoeDecoderLayer (conv.* short convolutions or self_attn.*, feed_forward.* dense or MoE):
//                BuildLfm2MoeLayout.
//   afmoe:       AfmoeDecoderLayer (gated attention, sandwich norms, mlp.router.gate + expert_bias, shared experts):
//                BuildAfmoeLayout.
//   qwen3_moe:   Qwen3MoeAttention (+ q_norm/k_norm over head_dim), Qwen3MoeSparseMoeBlock.
//   olmoe:       OlmoeAttention (+ q_norm [heads*head_dim], k_norm [kv_heads*head_dim]), OlmoeSparseMoeBlock.
//   deepseek_v2: DeepseekV2Attention (MLA), DeepseekV2MoE (experts, gate, shared_experts), dense
//                DeepseekV2MLP for layers < first_k_dense_replace.
//   deepseek_v3, glm4_moe_lite: the MLA of deepseek_v2; glm4_moe: Glm4MoeAttention (q/k/v bias when
//                attention_bias, q_norm/k_norm [head_dim] when use_qk_norm). All three: a MoE block of
//                gate (+ gate.e_score_correction_bias, F32 [n_experts]), experts, shared_experts, and
//                num_nextn_predict_layers multi-token-prediction layers after the decoder's
//                (model.layers.{N..}: a decoder layer plus embed_tokens, enorm, hnorm, eh_proj,
//                shared_head.norm / shared_head.head, as DeepSeek-V3 and GLM-4.5 ship them).
#include "services/synth/model_layout.h"

#include <algorithm>

#include <fmt/format.h>

namespace zipmoe::synth {
namespace {

using nlohmann::json;

// A required positive integer key.
Result<int64_t> GetPositive(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || !it->is_number_integer()) {
    return Status::InvalidArgument(fmt::format("config.json: '{}' must be an integer", key));
  }
  const int64_t v = it->get<int64_t>();
  if (v <= 0) return Status::InvalidArgument(fmt::format("config.json: '{}' must be > 0, got {}", key, v));
  return v;
}

// An optional non-negative integer key; missing or null gives `fallback`.
Result<int64_t> GetOptional(const json& config, const char* key, int64_t fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Status::InvalidArgument(fmt::format("config.json: '{}' must be a non-negative integer or null", key));
  }
  return it->get<int64_t>();
}

bool GetBool(const json& config, const char* key, bool fallback) {
  auto it = config.find(key);
  return (it != config.end() && it->is_boolean()) ? it->get<bool>() : fallback;
}

class LayoutBuilder {
 public:
  explicit LayoutBuilder(ModelLayout* layout) : layout_(layout) {}

  void Add(const std::string& name, std::vector<int64_t> shape, InitKind kind, float mean, float std,
           int32_t layer_id, int32_t expert_id = -1) {
    TensorRecipe r;
    r.spec.name = name;
    r.spec.dtype = DType::kBF16;
    r.spec.shape = std::move(shape);
    r.kind = kind;
    r.mean = mean;
    r.std = std;
    r.layer_id = layer_id;
    r.expert_id = expert_id;
    layout_->tensors.push_back(std::move(r));
  }
  // nn.Linear(in, out): weight [out, in] (+ bias [out]).
  void Linear(const std::string& prefix, int64_t out, int64_t in, int32_t layer_id, bool bias = false,
              int32_t expert_id = -1, bool reads_residual = false) {
    Add(prefix + ".weight", {out, in}, InitKind::kNormal, 0.0f, kProjectionStd, layer_id, expert_id);
    layout_->tensors.back().reads_residual = reads_residual;
    if (bias) Add(prefix + ".bias", {out}, InitKind::kNormal, 0.0f, kBiasStd, layer_id, expert_id);
  }
  // A Linear reading the normalised residual stream: in == hidden.
  void Reader(const std::string& prefix, int64_t out, int64_t hidden, int32_t layer_id, bool bias = false,
              int32_t expert_id = -1) {
    Linear(prefix, out, hidden, layer_id, bias, expert_id, /*reads_residual=*/true);
  }
  void Norm(const std::string& name, int64_t dim, int32_t layer_id) {
    Add(name, {dim}, InitKind::kNormal, kNormMean, kNormStd, layer_id);
  }
  void Router(const std::string& prefix, int64_t n_experts, int64_t hidden, int32_t layer_id,
              const std::string& norm_name) {
    Add(prefix + ".weight", {n_experts, hidden}, InitKind::kRouter, 0.0f, kProjectionStd, layer_id);
    layout_->moe_layers.push_back({layer_id, prefix + ".weight", norm_name});
  }
  // gate_proj / up_proj [inter, hidden], down_proj [hidden, inter] (Qwen/OLMoE/DeepSeek naming).
  void GatedMlp(const std::string& prefix, int64_t hidden, int64_t inter, int32_t layer_id,
                int32_t expert_id = -1) {
    Reader(prefix + ".gate_proj", inter, hidden, layer_id, false, expert_id);
    Reader(prefix + ".up_proj", inter, hidden, layer_id, false, expert_id);
    Linear(prefix + ".down_proj", hidden, inter, layer_id, false, expert_id);
  }

 private:
  ModelLayout* layout_;
};

// The sizes every MoE layout needs from `config` (the decoder's settings): hidden_size, vocab_size, num_experts,
// num_experts_per_tok (<= num_experts), and the norm epsilon under `eps_key` where given.
Status ReadMoeSizes(const json& config, const char* eps_key, ModelLayout* layout) {
  ZM_ASSIGN_OR_RETURN(layout->hidden_size, GetPositive(config, "hidden_size"));
  ZM_ASSIGN_OR_RETURN(layout->vocab_size, GetPositive(config, "vocab_size"));
  ZM_ASSIGN_OR_RETURN(layout->n_experts, GetPositive(config, "num_experts"));
  ZM_ASSIGN_OR_RETURN(layout->top_k, GetPositive(config, "num_experts_per_tok"));
  if (layout->top_k > layout->n_experts)
    return Status::InvalidArgument(fmt::format("config.json: num_experts_per_tok {} > num_experts {}", layout->top_k,
                                               layout->n_experts));
  auto eps = config.find(eps_key);
  if (eps != config.end() && eps->is_number()) layout->rms_norm_eps = eps->get<double>();
  return Status::Ok();
}

// Dense-vs-sparse rule of Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer.
bool QwenLayerIsSparse(const json& config, int64_t layer_id, int64_t n_experts, int64_t sparse_step) {
  auto it = config.find("mlp_only_layers");
  if (it != config.end() && it->is_array()) {
    for (const json& v : *it) {
      if (v.is_number_integer() && v.get<int64_t>() == layer_id) return false;
    }
  }
  return n_experts > 0 && (layer_id + 1) % sparse_step == 0;
}

// e_score_correction_bias: large enough against the sigmoid scores' spread (~0.06 at tiny widths) to
// change which experts are selected, so a router that ignored it would be caught.
constexpr float kSelectionBiasStd = 0.05f;

bool IsMla(const std::string& type) {
  return type == "deepseek_v2" || type == "deepseek_v3" || type == "glm4_moe_lite";
}

bool IsNoauxTc(const std::string& type) {
  return type == "deepseek_v3" || type == "glm4_moe" || type == "glm4_moe_lite";
}

// gpt_oss (GptOssDecoderLayer): attention with q/k/v/o biases and sinks [heads]; mlp.router.{weight,
// bias}; the experts fused and MXFP4 as released (gate_up_proj_blocks U8 [E, 2I, H/32, 16], _scales
// [E, 2I, H/32], _bias [E, 2I]; down_proj_* [E, H, I/32, 16], [E, H, I/32], [E, H]), quantized from
// float weight recipes that are not written themselves (FillMxfp4).
constexpr float kSinkStd = 0.5f;        // a sink logit against attention scores of about +-1
constexpr float kRouterBiasStd = 0.1f;  // against router logits of std ~0.2 at tiny widths: changes choices

Status BuildGptOssLayers(const json& config, ModelLayout& layout, LayoutBuilder& b) {
  const int64_t hidden = layout.hidden_size, n_experts = layout.n_experts;
  ZM_ASSIGN_OR_RETURN(const int64_t n_layers, GetPositive(config, "num_hidden_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_heads, GetPositive(config, "num_attention_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_kv, GetPositive(config, "num_key_value_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t head_dim, GetPositive(config, "head_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t inter, GetPositive(config, "intermediate_size"));
  if (hidden % 32 != 0 || inter % 32 != 0)
    return Status::InvalidArgument(fmt::format(
        "config.json: gpt_oss MXFP4 experts need hidden_size {} and intermediate_size {} to be multiples of 32", hidden,
        inter));
  for (int32_t l = 0; l < static_cast<int32_t>(n_layers); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string post_norm = p + "post_attention_layernorm.weight";
    b.Reader(p + "self_attn.q_proj", n_heads * head_dim, hidden, l, true);
    b.Reader(p + "self_attn.k_proj", n_kv * head_dim, hidden, l, true);
    b.Reader(p + "self_attn.v_proj", n_kv * head_dim, hidden, l, true);
    b.Linear(p + "self_attn.o_proj", hidden, n_heads * head_dim, l, true);
    b.Add(p + "self_attn.sinks", {n_heads}, InitKind::kNormal, 0.0f, kSinkStd, l);
    b.Router(p + "mlp.router", n_experts, hidden, l, post_norm);
    b.Add(p + "mlp.router.bias", {n_experts}, InitKind::kNormal, 0.0f, kRouterBiasStd, l);
    struct Fused {
      const char* name;
      int64_t rows, cols;
      bool reads_residual;
    };
    for (const Fused& f : {Fused{"gate_up_proj", 2 * inter, hidden, true}, Fused{"down_proj", hidden, inter, false}}) {
      const std::string source = p + "mlp.experts." + f.name;
      b.Add(source, {n_experts, f.rows, f.cols}, InitKind::kNormal, 0.0f, kProjectionStd, l);
      layout.tensors.back().reads_residual = f.reads_residual;
      layout.tensors.back().source_only = true;
      b.Add(source + "_blocks", {n_experts, f.rows, f.cols / 32, 16}, InitKind::kNormal, 0.0f, 0.0f, l);
      layout.tensors.back().spec.dtype = DType::kU8;
      layout.tensors.back().mxfp4_source = source;
      b.Add(source + "_scales", {n_experts, f.rows, f.cols / 32}, InitKind::kNormal, 0.0f, 0.0f, l);
      layout.tensors.back().spec.dtype = DType::kU8;
      layout.tensors.back().mxfp4_source = source;
      layout.tensors.back().mxfp4_scales = true;
      b.Add(source + "_bias", {n_experts, f.rows}, InitKind::kNormal, 0.0f, kBiasStd, l);
    }
    b.Norm(p + "input_layernorm.weight", hidden, l);
    b.Norm(post_norm, hidden, l);
  }
  return Status::Ok();
}

// qwen3_next / qwen3_5_moe (Qwen3NextDecoderLayer / Qwen3_5MoeDecoderLayer): `config` is the decoder's
// settings (qwen3_5_moe: text_config), `prefix` "model." or "model.language_model.". Per layer a Gated
// DeltaNet (linear_attn.*) or a gated full attention (self_attn.*: q_proj [2 * heads * head_dim, H]
// gives query and gate per head, q_norm / k_norm [head_dim]), then the MoE block: mlp.gate, the routed
// experts (qwen3_next one module per expert; qwen3_5_moe fused: mlp.experts.gate_up_proj [E, 2I, H],
// gate rows first, and mlp.experts.down_proj [E, H, I], no .weight suffix), mlp.shared_expert and
// mlp.shared_expert_gate [1, H]. RMSNorm weights are zero-centred (applied as 1 + w) except the
// DeltaNet's gated norm. After the decoder, mtp_num_hidden_layers MTP layers as released (mtp.fc,
// mtp.pre_fc_norm_{embedding,hidden}, mtp.layers.N.* a full-attention MoE layer, mtp.norm) and, for
// qwen3_5_moe, the vision tower's patch embedding (model.visual.*): never read by a text decoder.
//
// Scales (docs/synth.md "Gated DeltaNet"): conv1d N(0, kConvStd²) as nn.Conv1d's default init for
// kernel 4; A_log = log U(1, 16) (transformers: log U(0, 16)); dt_bias = softplus⁻¹(dt), dt log-uniform
// in [0.001, 0.1] as Mamba2, so exp(g) per token spans ~0.2 (short memory) to ~0.999 (long memory);
// the gated norm's weight 1 + N(0, 0.02²) as the other norms (transformers: ones).
constexpr float kConvStd = 0.3f;
constexpr float kALogLo = 1.0f, kALogHi = 16.0f;
constexpr float kDtLo = 0.001f, kDtHi = 0.1f;

Status BuildQwen3NextLayers(const json& config, const std::string& prefix, ModelLayout& layout, LayoutBuilder& b) {
  const bool v35 = layout.model_type == "qwen3_5_moe";
  const int64_t hidden = layout.hidden_size, n_experts = layout.n_experts;
  ZM_ASSIGN_OR_RETURN(const int64_t n_layers, GetPositive(config, "num_hidden_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_heads, GetPositive(config, "num_attention_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_kv, GetPositive(config, "num_key_value_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t head_dim, GetPositive(config, "head_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t moe_inter, GetPositive(config, "moe_intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t shared_inter, GetPositive(config, "shared_expert_intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t nk, GetPositive(config, "linear_num_key_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t nv, GetPositive(config, "linear_num_value_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t dk, GetPositive(config, "linear_key_head_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t dv, GetPositive(config, "linear_value_head_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t kernel, GetPositive(config, "linear_conv_kernel_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_mtp, GetOptional(config, "mtp_num_hidden_layers", 0));
  if (n_heads % n_kv != 0 || nv % nk != 0)
    return Status::InvalidArgument(fmt::format(
        "config.json: num_attention_heads {} / linear_num_value_heads {} must be multiples of num_key_value_heads {} "
        "/ linear_num_key_heads {}", n_heads, nv, n_kv, nk));
  if (n_experts < 1) return Status::InvalidArgument("config.json: 'num_experts' must be > 0");
  std::vector<bool> linear(static_cast<size_t>(n_layers));
  auto types = config.find("layer_types");
  if (types != config.end() && types->is_array()) {
    if (static_cast<int64_t>(types->size()) != n_layers)
      return Status::InvalidArgument("config.json: 'layer_types' must have num_hidden_layers entries");
    for (size_t i = 0; i < linear.size(); ++i) {
      const std::string t = (*types)[i].is_string() ? (*types)[i].get<std::string>() : "";
      if (t != "linear_attention" && t != "full_attention")
        return Status::InvalidArgument(fmt::format("config.json: layer_types[{}] '{}' is not linear_attention or "
                                                   "full_attention", i, t));
      linear[i] = t == "linear_attention";
    }
  } else {
    ZM_ASSIGN_OR_RETURN(const int64_t interval, GetOptional(config, "full_attention_interval", 4));
    if (interval == 0) return Status::InvalidArgument("config.json: 'full_attention_interval' must be > 0");
    for (int64_t i = 0; i < n_layers; ++i) linear[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  }
  auto zc_norm = [&](const std::string& name, int64_t dim, int32_t l) {
    b.Add(name, {dim}, InitKind::kNormal, 0.0f, kZeroCentredNormStd, l);
  };
  const int64_t kd = nk * dk, vd = nv * dv, channels = 2 * kd + vd;
  // One decoder layer under p (MTP layers: full attention, their router a plain tensor).
  auto layer = [&](const std::string& p, int32_t l, bool is_linear, bool mtp) {
    const std::string post_norm = p + "post_attention_layernorm.weight";
    zc_norm(p + "input_layernorm.weight", hidden, l);
    zc_norm(post_norm, hidden, l);
    if (is_linear) {
      const std::string a = p + "linear_attn.";
      if (v35) {
        b.Reader(a + "in_proj_qkv", channels, hidden, l);
        b.Reader(a + "in_proj_z", vd, hidden, l);
        b.Reader(a + "in_proj_b", nv, hidden, l);
        b.Reader(a + "in_proj_a", nv, hidden, l);
      } else {
        b.Reader(a + "in_proj_qkvz", channels + vd, hidden, l);
        b.Reader(a + "in_proj_ba", 2 * nv, hidden, l);
      }
      b.Add(a + "conv1d.weight", {channels, 1, kernel}, InitKind::kNormal, 0.0f, kConvStd, l);
      b.Add(a + "dt_bias", {nv}, InitKind::kInvSoftplusDt, 0.0f, 0.0f, l);
      layout.tensors.back().uniform_lo = kDtLo;
      layout.tensors.back().uniform_hi = kDtHi;
      b.Add(a + "A_log", {nv}, InitKind::kLogUniform, 0.0f, 0.0f, l);
      layout.tensors.back().uniform_lo = kALogLo;
      layout.tensors.back().uniform_hi = kALogHi;
      b.Norm(a + "norm.weight", dv, l);
      b.Linear(a + "out_proj", hidden, vd, l);
    } else {
      const std::string a = p + "self_attn.";
      b.Reader(a + "q_proj", 2 * n_heads * head_dim, hidden, l);
      b.Reader(a + "k_proj", n_kv * head_dim, hidden, l);
      b.Reader(a + "v_proj", n_kv * head_dim, hidden, l);
      b.Linear(a + "o_proj", hidden, n_heads * head_dim, l);
      zc_norm(a + "q_norm.weight", head_dim, l);
      zc_norm(a + "k_norm.weight", head_dim, l);
    }
    if (mtp) {
      b.Add(p + "mlp.gate.weight", {n_experts, hidden}, InitKind::kNormal, 0.0f, kProjectionStd, l);
    } else {
      b.Router(p + "mlp.gate", n_experts, hidden, l, post_norm);
    }
    if (v35) {
      b.Add(p + "mlp.experts.gate_up_proj", {n_experts, 2 * moe_inter, hidden}, InitKind::kNormal, 0.0f,
            kProjectionStd, l);
      layout.tensors.back().reads_residual = true;
      b.Add(p + "mlp.experts.down_proj", {n_experts, hidden, moe_inter}, InitKind::kNormal, 0.0f, kProjectionStd, l);
    } else {
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e)
        b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, moe_inter, l, e);
    }
    b.GatedMlp(p + "mlp.shared_expert", hidden, shared_inter, l);
    b.Reader(p + "mlp.shared_expert_gate", 1, hidden, l);
  };
  for (int32_t l = 0; l < static_cast<int32_t>(n_layers); ++l)
    layer(fmt::format("{}layers.{}.", prefix, l), l, linear[static_cast<size_t>(l)], false);
  for (int32_t m = 0; m < static_cast<int32_t>(n_mtp); ++m) {
    const int32_t l = static_cast<int32_t>(n_layers) + m;
    if (m == 0) {
      b.Linear("mtp.fc", hidden, 2 * hidden, l);
      zc_norm("mtp.pre_fc_norm_embedding.weight", hidden, l);
      zc_norm("mtp.pre_fc_norm_hidden.weight", hidden, l);
    }
    layer(fmt::format("mtp.layers.{}.", m), l, false, true);
    if (m + 1 == n_mtp) zc_norm("mtp.norm.weight", hidden, l);
  }
  return Status::Ok();
}

Status BuildLayers(const json& config, ModelLayout& layout, LayoutBuilder& b) {
  if (layout.model_type == "gpt_oss") return BuildGptOssLayers(config, layout, b);
  const std::string& type = layout.model_type;
  const bool mla = IsMla(type);
  const bool deepseek_moe = mla || type == "glm4_moe";
  const bool ernie = type == "ernie4_5_moe";
  const int64_t hidden = layout.hidden_size;
  ZM_ASSIGN_OR_RETURN(const int64_t n_layers, GetPositive(config, "num_hidden_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_heads, GetPositive(config, "num_attention_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_kv_heads, GetOptional(config, "num_key_value_heads", n_heads));
  if (n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    return Status::InvalidArgument(fmt::format(
        "config.json: num_attention_heads {} is not a multiple of num_key_value_heads {}", n_heads, n_kv_heads));
  }
  int64_t head_dim = hidden / n_heads;
  if (!mla) {
    ZM_ASSIGN_OR_RETURN(head_dim, GetOptional(config, "head_dim", 0));
    if (head_dim == 0) {
      if (hidden % n_heads != 0) {
        return Status::InvalidArgument(fmt::format(
            "config.json: hidden_size {} is not a multiple of num_attention_heads {}", hidden, n_heads));
      }
      head_dim = hidden / n_heads;
    }
  }
  const bool attention_bias = GetBool(config, "attention_bias", false);
  const int64_t n_experts = layout.n_experts;

  // Architecture-specific sizes.
  int64_t inter = 0, moe_inter = 0, shared_inter = 0, sparse_step = 1, first_dense = 0, moe_freq = 1;
  int64_t n_shared = 0, q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
  ZM_ASSIGN_OR_RETURN(inter, GetPositive(config, "intermediate_size"));
  if (type == "qwen2_moe" || type == "qwen3_moe") {
    ZM_ASSIGN_OR_RETURN(moe_inter, GetPositive(config, "moe_intermediate_size"));
    ZM_ASSIGN_OR_RETURN(sparse_step, GetOptional(config, "decoder_sparse_step", 1));
    if (sparse_step == 0) return Status::InvalidArgument("config.json: 'decoder_sparse_step' must be > 0");
  }
  if (type == "qwen2_moe") {
    ZM_ASSIGN_OR_RETURN(shared_inter, GetOptional(config, "shared_expert_intermediate_size", 0));
  }
  if (type == "granitemoeshared" || type == "granitemoehybrid") {  // GraniteMoeHybridConfig: 1024 by default
    ZM_ASSIGN_OR_RETURN(shared_inter, GetOptional(config, "shared_intermediate_size",
                                                  type == "granitemoehybrid" ? 1024 : 0));
  }
  int64_t n_mtp = 0;
  int64_t ernie_start = 1, ernie_end = -1, ernie_interval = 1;
  if (ernie) {
    ZM_ASSIGN_OR_RETURN(moe_inter, GetPositive(config, "moe_intermediate_size"));
    ZM_ASSIGN_OR_RETURN(n_shared, GetOptional(config, "moe_num_shared_experts", 2));
    ZM_ASSIGN_OR_RETURN(ernie_start, GetOptional(config, "moe_layer_start_index", 1));
    auto end = config.find("moe_layer_end_index");
    if (end != config.end() && end->is_number_integer()) ernie_end = end->get<int64_t>();
    if (ernie_end < 0) ernie_end = n_layers - 1;
    ZM_ASSIGN_OR_RETURN(ernie_interval, GetOptional(config, "moe_layer_interval", 1));
    if (ernie_interval == 0) return Status::InvalidArgument("config.json: 'moe_layer_interval' must be > 0");
  }
  std::vector<bool> sparse_by_type;  // glm4_moe_lite mlp_layer_types
  if (deepseek_moe) {
    ZM_ASSIGN_OR_RETURN(moe_inter, GetPositive(config, "moe_intermediate_size"));
    ZM_ASSIGN_OR_RETURN(n_shared, GetOptional(config, "n_shared_experts", type == "deepseek_v2" ? 0 : 1));
    ZM_ASSIGN_OR_RETURN(first_dense, GetOptional(config, "first_k_dense_replace", type == "deepseek_v2" ? 0 : 1));
    ZM_ASSIGN_OR_RETURN(moe_freq, GetOptional(config, "moe_layer_freq", 1));
    if (moe_freq == 0) return Status::InvalidArgument("config.json: 'moe_layer_freq' must be > 0");
    ZM_ASSIGN_OR_RETURN(n_mtp, GetOptional(config, "num_nextn_predict_layers", 0));
    auto types = config.find("mlp_layer_types");
    if (type == "glm4_moe_lite" && types != config.end() && types->is_array()) {
      for (const json& t : *types) sparse_by_type.push_back(t.is_string() && t.get<std::string>() == "sparse");
      if (static_cast<int64_t>(sparse_by_type.size()) != n_layers)
        return Status::InvalidArgument("config.json: 'mlp_layer_types' must have num_hidden_layers entries");
    }
  }
  if (mla) {
    ZM_ASSIGN_OR_RETURN(q_lora, GetOptional(config, "q_lora_rank", 0));
    ZM_ASSIGN_OR_RETURN(kv_lora, GetPositive(config, "kv_lora_rank"));
    ZM_ASSIGN_OR_RETURN(qk_nope, GetPositive(config, "qk_nope_head_dim"));
    ZM_ASSIGN_OR_RETURN(qk_rope, GetPositive(config, "qk_rope_head_dim"));
    ZM_ASSIGN_OR_RETURN(v_head, GetPositive(config, "v_head_dim"));
  }

  const bool use_qk_norm = type == "glm4_moe" && GetBool(config, "use_qk_norm", false);
  // granitemoehybrid (GraniteMoeHybridConfig, BambaMixer): which layers are Mamba2, and their sizes.
  std::vector<bool> mamba_layer;
  int64_t m_heads = 0, m_head_dim = 0, m_groups = 0, m_state = 0, m_conv = 0;
  bool m_conv_bias = true, m_proj_bias = false;
  if (type == "granitemoehybrid") {
    auto types = config.find("layer_types");
    for (int64_t l = 0; l < n_layers; ++l)
      mamba_layer.push_back(types == config.end() || !types->is_array() || static_cast<int64_t>(types->size()) <= l ||
                            (*types)[static_cast<size_t>(l)] != "attention");
    ZM_ASSIGN_OR_RETURN(m_heads, GetOptional(config, "mamba_n_heads", 128));
    ZM_ASSIGN_OR_RETURN(m_groups, GetOptional(config, "mamba_n_groups", 1));
    ZM_ASSIGN_OR_RETURN(m_state, GetOptional(config, "mamba_d_state", 256));
    ZM_ASSIGN_OR_RETURN(m_conv, GetOptional(config, "mamba_d_conv", 4));
    ZM_ASSIGN_OR_RETURN(const int64_t expand, GetOptional(config, "mamba_expand", 2));
    if (m_heads <= 0 || (expand * hidden) % m_heads != 0)
      return Status::InvalidArgument("config.json: 'mamba_n_heads' must divide mamba_expand x hidden_size");
    m_head_dim = expand * hidden / m_heads;
    m_conv_bias = GetBool(config, "mamba_conv_bias", true);
    m_proj_bias = GetBool(config, "mamba_proj_bias", false);
  }
  for (int32_t l = 0; l < static_cast<int32_t>(n_layers + n_mtp); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string post_norm = p + "post_attention_layernorm.weight";
    const bool mtp = l >= n_layers;  // a multi-token-prediction layer: not routed by the model
    if (mtp) {
      b.Add(p + "embed_tokens.weight", {layout.vocab_size, hidden}, InitKind::kNormal, 0.0f, kProjectionStd, l);
      b.Norm(p + "enorm.weight", hidden, l);
      b.Norm(p + "hnorm.weight", hidden, l);
      b.Linear(p + "eh_proj", hidden, 2 * hidden, l);
      b.Norm(p + "shared_head.norm.weight", hidden, l);
      b.Linear(p + "shared_head.head", layout.vocab_size, hidden, l);
    }
    // --- attention ---
    if (!mamba_layer.empty() && mamba_layer[static_cast<size_t>(l)]) {
      // BambaMixer: in_proj [z | xBC | dt], conv1d over xBC, dt_bias / A_log / D per head, the gated norm.
      const std::string a = p + "mamba.";
      const int64_t inner = m_heads * m_head_dim, conv_dim = inner + 2 * m_groups * m_state;
      b.Reader(a + "in_proj", inner + conv_dim + m_heads, hidden, l, m_proj_bias);
      b.Add(a + "conv1d.weight", {conv_dim, 1, m_conv}, InitKind::kNormal, 0.0f, kConvStd, l);
      if (m_conv_bias) b.Add(a + "conv1d.bias", {conv_dim}, InitKind::kNormal, 0.0f, kBiasStd, l);
      b.Add(a + "dt_bias", {m_heads}, InitKind::kInvSoftplusDt, 0.0f, 0.0f, l);
      layout.tensors.back().uniform_lo = kDtLo;
      layout.tensors.back().uniform_hi = kDtHi;
      b.Add(a + "A_log", {m_heads}, InitKind::kLogUniform, 0.0f, 0.0f, l);
      layout.tensors.back().uniform_lo = kALogLo;
      layout.tensors.back().uniform_hi = kALogHi;
      b.Add(a + "D", {m_heads}, InitKind::kNormal, 1.0f, 0.1f, l);
      b.Norm(a + "norm.weight", inner, l);
      b.Linear(a + "out_proj", hidden, inner, l, m_proj_bias);
    } else if (mla) {
      const int64_t q_head_dim = qk_nope + qk_rope;
      if (q_lora == 0) {
        b.Reader(p + "self_attn.q_proj", n_heads * q_head_dim, hidden, l);
      } else {
        b.Reader(p + "self_attn.q_a_proj", q_lora, hidden, l, attention_bias);
        b.Norm(p + "self_attn.q_a_layernorm.weight", q_lora, l);
        b.Linear(p + "self_attn.q_b_proj", n_heads * q_head_dim, q_lora, l);
      }
      b.Reader(p + "self_attn.kv_a_proj_with_mqa", kv_lora + qk_rope, hidden, l, attention_bias);
      b.Norm(p + "self_attn.kv_a_layernorm.weight", kv_lora, l);
      b.Linear(p + "self_attn.kv_b_proj", n_heads * (qk_nope + v_head), kv_lora, l);
      b.Linear(p + "self_attn.o_proj", hidden, n_heads * v_head, l, attention_bias);
    } else {
      const bool qkv_bias = type == "qwen2_moe" || (attention_bias && !ernie);
      const bool o_bias = type != "qwen2_moe" && type != "glm4_moe" && !ernie && attention_bias;
      b.Reader(p + "self_attn.q_proj", n_heads * head_dim, hidden, l, qkv_bias);
      b.Reader(p + "self_attn.k_proj", n_kv_heads * head_dim, hidden, l, qkv_bias);
      b.Reader(p + "self_attn.v_proj", n_kv_heads * head_dim, hidden, l, qkv_bias);
      b.Linear(p + "self_attn.o_proj", hidden, n_heads * head_dim, l, o_bias);
      if (type == "qwen3_moe" || use_qk_norm) {
        b.Norm(p + "self_attn.q_norm.weight", head_dim, l);
        b.Norm(p + "self_attn.k_norm.weight", head_dim, l);
      } else if (type == "olmoe") {
        b.Norm(p + "self_attn.q_norm.weight", n_heads * head_dim, l);
        b.Norm(p + "self_attn.k_norm.weight", n_kv_heads * head_dim, l);
      }
    }
    // --- MLP / MoE ---
    if (type == "granitemoe" || type == "granitemoeshared" || type == "granitemoehybrid") {
      // GraniteMoeMoE: router.layer, then the experts fused (input_linear [E, 2I, H], gate rows first;
      // output_linear [E, H, I]); granitemoeshared's shared_mlp input_linear [2S, H] / output_linear [H, S].
      b.Router(p + "block_sparse_moe.router.layer", n_experts, hidden, l, post_norm);
      b.Add(p + "block_sparse_moe.input_linear.weight", {n_experts, 2 * inter, hidden}, InitKind::kNormal, 0.0f,
            kProjectionStd, l);
      layout.tensors.back().reads_residual = true;
      b.Add(p + "block_sparse_moe.output_linear.weight", {n_experts, hidden, inter}, InitKind::kNormal, 0.0f,
            kProjectionStd, l);
      if (shared_inter > 0) {
        b.Reader(p + "shared_mlp.input_linear", 2 * shared_inter, hidden, l);
        b.Linear(p + "shared_mlp.output_linear", hidden, shared_inter, l);
      }
    } else if (type == "mixtral") {
      b.Router(p + "block_sparse_moe.gate", n_experts, hidden, l, post_norm);
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
        const std::string ep = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
        b.Reader(ep + "w1", inter, hidden, l, false, e);
        b.Linear(ep + "w2", hidden, inter, l, false, e);
        b.Reader(ep + "w3", inter, hidden, l, false, e);
      }
    } else if (type == "olmoe") {
      b.Router(p + "mlp.gate", n_experts, hidden, l, post_norm);
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
        b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, inter, l, e);
      }
    } else if (type == "qwen2_moe" || type == "qwen3_moe") {
      if (QwenLayerIsSparse(config, l, n_experts, sparse_step)) {
        b.Router(p + "mlp.gate", n_experts, hidden, l, post_norm);
        for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
          b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, moe_inter, l, e);
        }
        if (type == "qwen2_moe" && shared_inter > 0) {
          b.GatedMlp(p + "mlp.shared_expert", hidden, shared_inter, l);
          b.Reader(p + "mlp.shared_expert_gate", 1, hidden, l);
        }
      } else {
        b.GatedMlp(p + "mlp", hidden, inter, l);
      }
    } else if (ernie) {  // Ernie4_5_MoeSparseMoeBlock: gate (F32), moe_statics, experts, shared_experts
      if (n_experts > 0 && (l + 1) % ernie_interval == 0 && l >= ernie_start && l <= ernie_end) {
        b.Router(p + "mlp.gate", n_experts, hidden, l, post_norm);
        layout.tensors.back().spec.dtype = DType::kF32;  // _keep_in_fp32_modules_strict
        b.Add(p + "mlp.moe_statics.e_score_correction_bias", {1, n_experts}, InitKind::kNormal, 0.0f,
              kSelectionBiasStd / 4, l);  // against softmax probabilities (~1/E each)
        layout.tensors.back().spec.dtype = DType::kF32;
        for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
          b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, moe_inter, l, e);
        }
        if (n_shared > 0) b.GatedMlp(p + "mlp.shared_experts", hidden, n_shared * moe_inter, l);
      } else {
        b.GatedMlp(p + "mlp", hidden, inter, l);
      }
    } else {  // DeepSeek-style: deepseek_v2/v3, glm4_moe, glm4_moe_lite
      bool sparse = n_experts > 0 && l >= first_dense;
      if (type == "deepseek_v2" || type == "deepseek_v3") sparse = sparse && l % moe_freq == 0;
      if (!sparse_by_type.empty() && !mtp) sparse = n_experts > 0 && sparse_by_type[static_cast<size_t>(l)];
      if (mtp) sparse = n_experts > 0;
      if (sparse) {
        for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
          b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, moe_inter, l, e);
        }
        if (mtp) {
          b.Add(p + "mlp.gate.weight", {n_experts, hidden}, InitKind::kNormal, 0.0f, kProjectionStd, l);
        } else {
          b.Router(p + "mlp.gate", n_experts, hidden, l, post_norm);
        }
        if (IsNoauxTc(type)) {
          b.Add(p + "mlp.gate.e_score_correction_bias", {n_experts}, InitKind::kNormal, 0.0f, kSelectionBiasStd, l);
          layout.tensors.back().spec.dtype = DType::kF32;
        }
        if (n_shared > 0) b.GatedMlp(p + "mlp.shared_experts", hidden, n_shared * moe_inter, l);
      } else {
        b.GatedMlp(p + "mlp", hidden, inter, l);
      }
    }
    b.Norm(p + "input_layernorm.weight", hidden, l);
    b.Norm(post_norm, hidden, l);
  }
  return Status::Ok();
}

}  // namespace

std::vector<TensorSpec> ModelLayout::Specs() const {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorRecipe& r : tensors)
    if (!r.source_only) specs.push_back(r.spec);
  return specs;
}

uint64_t ModelLayout::total_bytes() const {
  uint64_t total = 0;
  for (const TensorRecipe& r : tensors)
    if (!r.source_only) total += r.spec.size_bytes();
  return total;
}

// switch_transformers (SwitchTransformersForConditionalGeneration's state dict as saved to safetensors:
// the tied aliases encoder/decoder.embed_tokens and lm_head are not stored). F32 like the released
// checkpoints. Block i of a stack with sparse step s is sparse iff s > 0 and (i % s == 1 or s == 1).
Result<ModelLayout> BuildSwitchLayout(const nlohmann::json& config, ModelLayout layout) {
  ZM_ASSIGN_OR_RETURN(const int64_t d, GetPositive(config, "d_model"));
  ZM_ASSIGN_OR_RETURN(const int64_t d_kv, GetPositive(config, "d_kv"));
  ZM_ASSIGN_OR_RETURN(const int64_t d_ff, GetPositive(config, "d_ff"));
  ZM_ASSIGN_OR_RETURN(const int64_t heads, GetPositive(config, "num_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_enc, GetPositive(config, "num_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_dec, GetPositive(config, "num_decoder_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t buckets, GetPositive(config, "relative_attention_num_buckets"));
  ZM_ASSIGN_OR_RETURN(const int64_t enc_step, GetOptional(config, "encoder_sparse_step", 0));
  ZM_ASSIGN_OR_RETURN(const int64_t dec_step, GetOptional(config, "decoder_sparse_step", 0));
  ZM_ASSIGN_OR_RETURN(layout.vocab_size, GetPositive(config, "vocab_size"));
  ZM_ASSIGN_OR_RETURN(layout.n_experts, GetPositive(config, "num_experts"));
  layout.hidden_size = d;
  layout.top_k = 1;
  if (config.contains("layer_norm_epsilon") && config["layer_norm_epsilon"].is_number())
    layout.rms_norm_eps = config["layer_norm_epsilon"].get<double>();
  LayoutBuilder b(&layout);
  layout.embed_name = "shared.weight";
  b.Add(layout.embed_name, {layout.vocab_size, d}, InitKind::kEmbedding, 0.0f, kProjectionStd, -1);
  const int64_t inner = heads * d_kv;
  for (int64_t g = 0; g < n_enc + n_dec; ++g) {
    const bool decoder = g >= n_enc;
    const int64_t i = decoder ? g - n_enc : g;
    const int64_t step = decoder ? dec_step : enc_step;
    const int32_t l = static_cast<int32_t>(g);
    const std::string p = fmt::format("{}.block.{}.layer.", decoder ? "decoder" : "encoder", i);
    for (const char* m : {"q", "k", "v"}) b.Reader(p + "0.SelfAttention." + m, inner, d, l);
    b.Linear(p + "0.SelfAttention.o", d, inner, l);
    if (i == 0) b.Add(p + "0.SelfAttention.relative_attention_bias.weight", {buckets, heads}, InitKind::kNormal, 0.0f,
                      kRelativeBiasStd, l);
    b.Norm(p + "0.layer_norm.weight", d, l);
    if (decoder) {
      for (const char* m : {"q", "k", "v"}) b.Linear(p + "1.EncDecAttention." + m, inner, d, l);
      b.Linear(p + "1.EncDecAttention.o", d, inner, l);
      b.Norm(p + "1.layer_norm.weight", d, l);
    }
    const std::string f = p + (decoder ? "2." : "1.");
    if (step > 0 && (i % step == 1 || step == 1)) {
      b.Router(f + "mlp.router.classifier", layout.n_experts, d, l, f + "layer_norm.weight");
      for (int64_t e = 0; e < layout.n_experts; ++e) {
        const std::string x = fmt::format("{}mlp.experts.expert_{}.", f, e);
        b.Reader(x + "wi", d_ff, d, l, false, static_cast<int32_t>(e));
        b.Linear(x + "wo", d, d_ff, l, false, static_cast<int32_t>(e));
      }
    } else {
      b.Reader(f + "mlp.wi", d_ff, d, l);
      b.Linear(f + "mlp.wo", d, d_ff, l);
    }
    b.Norm(f + "layer_norm.weight", d, l);
    if (i + 1 == (decoder ? n_dec : n_enc)) b.Norm(fmt::format("{}.final_layer_norm.weight", decoder ? "decoder" : "encoder"), d, -1);
  }
  if (!GetBool(config, "tie_word_embeddings", true)) b.Reader("lm_head", layout.vocab_size, d, -1);
  for (TensorRecipe& r : layout.tensors) r.spec.dtype = DType::kF32;
  return layout;
}

// qwen3_next / qwen3_5_moe: the decoder's settings at the top level / in text_config; tensors under
// model. / model.language_model. (lm_head.weight at the top level either way); qwen3_5_moe's vision
// tower reduced to its patch embedding (Conv3d [hidden, in_channels, temporal, patch, patch] + bias).
Result<ModelLayout> BuildQwen3NextLayout(const nlohmann::json& config, ModelLayout layout) {
  const bool v35 = layout.model_type == "qwen3_5_moe";
  const json* settings = &config;
  if (v35) {
    auto it = config.find("text_config");
    if (it == config.end() || !it->is_object())
      return Status::InvalidArgument("config.json: model_type 'qwen3_5_moe' needs an object 'text_config'");
    settings = &*it;
  }
  const json& c = *settings;
  const std::string prefix = v35 ? "model.language_model." : "model.";
  ZM_RETURN_IF_ERROR(ReadMoeSizes(c, "rms_norm_eps", &layout));
  layout.zero_centred_norms = true;
  LayoutBuilder b(&layout);
  layout.embed_name = prefix + "embed_tokens.weight";
  b.Add(layout.embed_name, {layout.vocab_size, layout.hidden_size}, InitKind::kEmbedding, 0.0f, kProjectionStd, -1);
  ZM_RETURN_IF_ERROR(BuildQwen3NextLayers(c, prefix, layout, b));
  b.Add(prefix + "norm.weight", {layout.hidden_size}, InitKind::kNormal, 0.0f, kZeroCentredNormStd, -1);
  if (!GetBool(c, "tie_word_embeddings", GetBool(config, "tie_word_embeddings", false)))
    b.Reader("lm_head", layout.vocab_size, layout.hidden_size, -1);
  if (v35) {
    auto vit = config.find("vision_config");
    if (vit != config.end() && vit->is_object()) {
      const json& v = *vit;
      const int64_t vh = v.value("hidden_size", int64_t{32}), patch = v.value("patch_size", int64_t{16});
      const int64_t ch = v.value("in_channels", int64_t{3}), temporal = v.value("temporal_patch_size", int64_t{2});
      b.Add("model.visual.patch_embed.proj.weight", {vh, ch, temporal, patch, patch}, InitKind::kNormal, 0.0f,
            kProjectionStd, -1);
      b.Add("model.visual.patch_embed.proj.bias", {vh}, InitKind::kNormal, 0.0f, kBiasStd, -1);
    }
  }
  return layout;
}

// lfm2_moe (Lfm2MoeForCausalLM as LiquidAI/LFM2-8B-A1B ships it): per layer operator_norm / ffn_norm, then a
// gated short convolution (conv.in_proj [3H, H], conv.conv.weight [H, 1, K], conv.out_proj [H, H], biases iff
// conv_bias) on its "conv" layers or attention (self_attn.q/k/v_proj, out_proj, q_layernorm / k_layernorm
// [head_dim]); the first num_dense_layers a dense feed_forward.w1 / w3 [I, H], w2 [H, I], the others
// feed_forward.gate [E, H], feed_forward.expert_bias F32 [E] (use_expert_bias) and per-expert
// feed_forward.experts.E.w1 / w3 / w2; model.embedding_norm last; lm_head only when untied.
// conv.in_proj is drawn wider (kShortConvInProjStd) than the other projections so that B * x and C * conv are
// not vanishingly small products at tiny widths: a loader or kernel that got the conv wrong would show.
constexpr float kShortConvInProjStd = 0.1f;

Result<ModelLayout> BuildLfm2MoeLayout(const nlohmann::json& config, ModelLayout layout) {
  ZM_RETURN_IF_ERROR(ReadMoeSizes(config, "norm_eps", &layout));
  const int64_t hidden = layout.hidden_size, n_experts = layout.n_experts;
  ZM_ASSIGN_OR_RETURN(const int64_t n_layers, GetPositive(config, "num_hidden_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_heads, GetPositive(config, "num_attention_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_kv, GetPositive(config, "num_key_value_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t inter, GetPositive(config, "intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t moe_inter, GetPositive(config, "moe_intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t kernel, GetOptional(config, "conv_L_cache", 3));
  ZM_ASSIGN_OR_RETURN(const int64_t n_dense, GetOptional(config, "num_dense_layers", 2));
  ZM_ASSIGN_OR_RETURN(int64_t head_dim, GetOptional(config, "head_dim", 0));
  if (head_dim == 0) head_dim = hidden / n_heads;
  if (kernel == 0 || head_dim == 0 || n_heads % n_kv != 0)
    return Status::InvalidArgument("config.json: lfm2_moe needs conv_L_cache > 0 and heads dividing as GQA");
  const bool bias = GetBool(config, "conv_bias", false);
  auto types = config.find("layer_types");
  if (types == config.end() || !types->is_array() || static_cast<int64_t>(types->size()) != n_layers)
    return Status::InvalidArgument("config.json: 'layer_types' must list num_hidden_layers entries");
  LayoutBuilder b(&layout);
  layout.embed_name = "model.embed_tokens.weight";
  b.Add(layout.embed_name, {layout.vocab_size, hidden}, InitKind::kEmbedding, 0.0f, kProjectionStd, -1);
  for (int32_t l = 0; l < static_cast<int32_t>(n_layers); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string ffn_norm = p + "ffn_norm.weight";
    if ((*types)[static_cast<size_t>(l)] == "conv") {
      b.Reader(p + "conv.in_proj", 3 * hidden, hidden, l, bias);
      layout.tensors[layout.tensors.size() - (bias ? 2 : 1)].std = kShortConvInProjStd;
      b.Add(p + "conv.conv.weight", {hidden, 1, kernel}, InitKind::kNormal, 0.0f, kConvStd, l);
      if (bias) b.Add(p + "conv.conv.bias", {hidden}, InitKind::kNormal, 0.0f, kBiasStd, l);
      b.Linear(p + "conv.out_proj", hidden, hidden, l, bias);
    } else {
      b.Reader(p + "self_attn.q_proj", n_heads * head_dim, hidden, l);
      b.Reader(p + "self_attn.k_proj", n_kv * head_dim, hidden, l);
      b.Reader(p + "self_attn.v_proj", n_kv * head_dim, hidden, l);
      b.Linear(p + "self_attn.out_proj", hidden, n_heads * head_dim, l);
      b.Norm(p + "self_attn.q_layernorm.weight", head_dim, l);
      b.Norm(p + "self_attn.k_layernorm.weight", head_dim, l);
    }
    if (l < n_dense) {
      b.Reader(p + "feed_forward.w1", inter, hidden, l);
      b.Reader(p + "feed_forward.w3", inter, hidden, l);
      b.Linear(p + "feed_forward.w2", hidden, inter, l);
    } else {
      b.Router(p + "feed_forward.gate", n_experts, hidden, l, ffn_norm);
      if (GetBool(config, "use_expert_bias", true)) {
        b.Add(p + "feed_forward.expert_bias", {n_experts}, InitKind::kNormal, 0.0f, kSelectionBiasStd, l);
        layout.tensors.back().spec.dtype = DType::kF32;
      }
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e) {
        const std::string ep = fmt::format("{}feed_forward.experts.{}.", p, e);
        b.Reader(ep + "w1", moe_inter, hidden, l, false, e);
        b.Linear(ep + "w2", hidden, moe_inter, l, false, e);
        b.Reader(ep + "w3", moe_inter, hidden, l, false, e);
      }
    }
    b.Norm(p + "operator_norm.weight", hidden, l);
    b.Norm(ffn_norm, hidden, l);
  }
  b.Norm("model.embedding_norm.weight", hidden, -1);
  if (!GetBool(config, "tie_embedding", GetBool(config, "tie_word_embeddings", true)))
    b.Reader("lm_head", layout.vocab_size, hidden, -1);
  return layout;
}

// afmoe (AfmoeForCausalLM as arcee-ai/Trinity-Nano ships it): per layer input_layernorm / post_attention_layernorm
// around attention and pre_mlp_layernorm / post_mlp_layernorm around the MLP; self_attn.q/k/v/o_proj, gate_proj
// [heads * head_dim, H], q_norm / k_norm [head_dim]; the first num_dense_layers a dense mlp.gate/up/down_proj, the
// others mlp.router.gate [E, H], mlp.expert_bias F32 [E], mlp.experts.E.* and mlp.shared_experts.* (num_shared_experts
// x moe_intermediate_size); model.norm; lm_head unless tied.
Result<ModelLayout> BuildAfmoeLayout(const nlohmann::json& config, ModelLayout layout) {
  ZM_RETURN_IF_ERROR(ReadMoeSizes(config, "rms_norm_eps", &layout));
  const int64_t hidden = layout.hidden_size, n_experts = layout.n_experts;
  ZM_ASSIGN_OR_RETURN(const int64_t n_layers, GetPositive(config, "num_hidden_layers"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_heads, GetPositive(config, "num_attention_heads"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_kv, GetOptional(config, "num_key_value_heads", n_heads));
  ZM_ASSIGN_OR_RETURN(const int64_t head_dim, GetPositive(config, "head_dim"));
  ZM_ASSIGN_OR_RETURN(const int64_t inter, GetPositive(config, "intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t moe_inter, GetPositive(config, "moe_intermediate_size"));
  ZM_ASSIGN_OR_RETURN(const int64_t n_dense, GetOptional(config, "num_dense_layers", 1));
  ZM_ASSIGN_OR_RETURN(const int64_t n_shared, GetOptional(config, "num_shared_experts", 2));
  if (n_kv == 0 || n_heads % n_kv != 0)
    return Status::InvalidArgument("config.json: afmoe needs num_key_value_heads dividing num_attention_heads");
  LayoutBuilder b(&layout);
  layout.embed_name = "model.embed_tokens.weight";
  b.Add(layout.embed_name, {layout.vocab_size, hidden}, InitKind::kEmbedding, 0.0f, kProjectionStd, -1);
  for (int32_t l = 0; l < static_cast<int32_t>(n_layers); ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    const std::string pre_mlp = p + "pre_mlp_layernorm.weight";
    b.Reader(p + "self_attn.q_proj", n_heads * head_dim, hidden, l);
    b.Reader(p + "self_attn.k_proj", n_kv * head_dim, hidden, l);
    b.Reader(p + "self_attn.v_proj", n_kv * head_dim, hidden, l);
    b.Reader(p + "self_attn.gate_proj", n_heads * head_dim, hidden, l);
    b.Linear(p + "self_attn.o_proj", hidden, n_heads * head_dim, l);
    b.Norm(p + "self_attn.q_norm.weight", head_dim, l);
    b.Norm(p + "self_attn.k_norm.weight", head_dim, l);
    if (l < n_dense) {
      b.GatedMlp(p + "mlp", hidden, inter, l);
    } else {
      b.Router(p + "mlp.router.gate", n_experts, hidden, l, pre_mlp);
      b.Add(p + "mlp.expert_bias", {n_experts}, InitKind::kNormal, 0.0f, kSelectionBiasStd, l);
      layout.tensors.back().spec.dtype = DType::kF32;
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e)
        b.GatedMlp(fmt::format("{}mlp.experts.{}", p, e), hidden, moe_inter, l, e);
      if (n_shared > 0) b.GatedMlp(p + "mlp.shared_experts", hidden, n_shared * moe_inter, l);
    }
    b.Norm(p + "input_layernorm.weight", hidden, l);
    b.Norm(p + "post_attention_layernorm.weight", hidden, l);
    b.Norm(pre_mlp, hidden, l);
    b.Norm(p + "post_mlp_layernorm.weight", hidden, l);
  }
  b.Norm("model.norm.weight", hidden, -1);
  if (!GetBool(config, "tie_word_embeddings", false)) b.Reader("lm_head", layout.vocab_size, hidden, -1);
  return layout;
}

Result<ModelLayout> BuildModelLayout(const nlohmann::json& config) {
  if (!config.is_object()) return Status::InvalidArgument("config.json: not a JSON object");
  ModelLayout layout;
  layout.model_type = config.value("model_type", "");
  const std::string& type = layout.model_type;
  if (type == "switch_transformers") return BuildSwitchLayout(config, std::move(layout));
  const char* experts_key = nullptr;
  if (type == "qwen2_moe" || type == "qwen3_moe" || type == "olmoe") experts_key = "num_experts";
  if (type == "mixtral") experts_key = "num_local_experts";
  if (type == "deepseek_v2" || IsNoauxTc(type)) experts_key = "n_routed_experts";
  if (type == "ernie4_5_moe") experts_key = "moe_num_experts";
  if (type == "gpt_oss" || type == "granitemoe" || type == "granitemoeshared" || type == "granitemoehybrid")
    experts_key = "num_local_experts";
  if (type == "qwen3_next" || type == "qwen3_5_moe") return BuildQwen3NextLayout(config, std::move(layout));
  if (type == "lfm2_moe") return BuildLfm2MoeLayout(config, std::move(layout));
  if (type == "afmoe") return BuildAfmoeLayout(config, std::move(layout));
  if (experts_key == nullptr) {
    return Status::InvalidArgument(fmt::format(
        "config.json: unsupported model_type '{}' (expected qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2, "
        "deepseek_v3, glm4_moe, glm4_moe_lite, ernie4_5_moe, gpt_oss, qwen3_next, qwen3_5_moe, granitemoe, "
        "granitemoeshared, granitemoehybrid, lfm2_moe, afmoe, switch_transformers)",
        type));
  }
  ZM_ASSIGN_OR_RETURN(layout.hidden_size, GetPositive(config, "hidden_size"));
  ZM_ASSIGN_OR_RETURN(layout.vocab_size, GetPositive(config, "vocab_size"));
  ZM_ASSIGN_OR_RETURN(layout.n_experts, GetOptional(config, experts_key, 0));
  ZM_ASSIGN_OR_RETURN(layout.top_k, GetPositive(config, type == "ernie4_5_moe" ? "moe_k" : "num_experts_per_tok"));
  if (layout.n_experts > 0 && layout.top_k > layout.n_experts) {
    return Status::InvalidArgument(fmt::format("config.json: num_experts_per_tok {} > {} {}", layout.top_k,
                                               experts_key, layout.n_experts));
  }
  if (config.contains("rms_norm_eps") && config["rms_norm_eps"].is_number()) {
    layout.rms_norm_eps = config["rms_norm_eps"].get<double>();
  }
  LayoutBuilder b(&layout);
  layout.embed_name = "model.embed_tokens.weight";
  b.Add(layout.embed_name, {layout.vocab_size, layout.hidden_size}, InitKind::kEmbedding, 0.0f,
        kProjectionStd, -1);
  ZM_RETURN_IF_ERROR(BuildLayers(config, layout, b));
  b.Norm("model.norm.weight", layout.hidden_size, -1);
  if (!GetBool(config, "tie_word_embeddings", type == "ernie4_5_moe")) {
    b.Reader("lm_head", layout.vocab_size, layout.hidden_size, -1);
  }
  return layout;
}

}  // namespace zipmoe::synth
