// Model directory loading: tensor names and shapes per architecture follow the transformers modules
// (Qwen2MoeForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM, DeepseekV3ForCausalLM,
// Glm4MoeForCausalLM, Glm4MoeLiteForCausalLM, Ernie4_5_MoeForCausalLM, GptOssForCausalLM, Qwen3NextForCausalLM,
// Qwen3_5MoeForConditionalGeneration's text model, GraniteMoeForCausalLM, GraniteMoeSharedForCausalLM,
// GraniteMoeHybridForCausalLM, Lfm2MoeForCausalLM, AfmoeForCausalLM) and the Hub's modeling_deepseek.py
// (DeepseekV2ForCausalLM).
// Multi-token-prediction layers (model.layers.L with L >= num_hidden_layers) are never read.
#include "services/executor/model_weights.h"

#include <fmt/format.h>

#include <optional>
#include <tuple>

#include "common/file_util.h"
#include "common/checkpoint/fused_experts.h"
#include "common/checkpoint/manifest.h"
#include "kernels/fp8_dequant.h"
#include "services/executor/attention.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

// Name of routed expert `expert_id`'s projection in layer `layer_id`, as the checkpoint spells it.
std::string ExpertTensorName(const ModelConfig& c, int64_t layer_id, int64_t expert_id, ExpertProj proj) {
  if (c.arch == ModelArch::kSwitchTransformers) {
    const bool decoder = layer_id >= c.num_encoder_layers;
    return fmt::format("{}.block.{}.layer.{}.mlp.experts.expert_{}.{}.weight", decoder ? "decoder" : "encoder",
                       decoder ? layer_id - c.num_encoder_layers : layer_id, decoder ? 2 : 1, expert_id,
                       proj == ExpertProj::kUp ? "wi" : "wo");
  }
  if (c.arch == ModelArch::kGptOss || c.arch == ModelArch::kQwen35Moe || c.granite())  // fused (fused_experts.h)
    return UnfusedExpertName(static_cast<int32_t>(layer_id), static_cast<int32_t>(expert_id), proj);
  if (c.arch == ModelArch::kMixtral || c.short_conv()) {
    const char* w = proj == ExpertProj::kGate ? "w1" : proj == ExpertProj::kUp ? "w3" : "w2";
    return fmt::format("model.layers.{}.{}.experts.{}.{}.weight", layer_id,
                       c.short_conv() ? "feed_forward" : "block_sparse_moe", expert_id, w);
  }
  return fmt::format("{}layers.{}.mlp.experts.{}.{}.weight", c.weight_prefix, layer_id, expert_id, ExpertProjName(proj));
}

class Loader {
 public:
  Loader(const LoadedModel& model, const LoadOptions& options, std::vector<at::Tensor>* fp8_weights)
      : m_(model), o_(options), c_(model.config), fp8_weights_(fp8_weights) {}

  // The view of `name`. Errors: kNotFound naming the tensor and the directory.
  Result<TensorView> Find(const std::string& name) const {
    if (m_.checkpoint) return m_.checkpoint->Find(name);
    const TensorView* v = m_.dense->Find(name);
    if (v == nullptr)
      return Status::NotFound(fmt::format("{}: tensor '{}' not found (in {})", m_.dir, name, m_.dense->path()));
    return *v;
  }

  Status CheckShape(const std::string& file, const std::string& name, const std::vector<int64_t>& found,
                    const std::vector<int64_t>& want) const {
    if (found == want) return Status::Ok();
    return Status::InvalidArgument(fmt::format("{}: tensor '{}' has shape {}, expected {} from {}", file, name,
                                               ShapeString(found), ShapeString(want), c_.source));
  }

  // The weight_scale_inv of FP8 weight `name` [rows, cols]: float32 [ceil(rows/br), ceil(cols/bc)].
  Result<const float*> Fp8ScalesOf(const std::string& name, int64_t rows, int64_t cols) const {
    const std::string scale_name = name + "_scale_inv";
    auto found = Find(scale_name);
    if (!found.ok())
      return Status::NotFound(fmt::format("{}: FP8 tensor '{}' has no '{}' (block scales)", m_.dir, name, scale_name));
    const TensorView& s = *found;
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    ZM_RETURN_IF_ERROR(CheckShape(s.file, scale_name, s.spec.shape, {(rows + br - 1) / br, (cols + bc - 1) / bc}));
    if (s.spec.dtype != DType::kF32)
      return Status::InvalidArgument(
          fmt::format("{}: '{}' is {}, expected F32 block scales", s.file, scale_name, DTypeName(s.spec.dtype)));
    if (reinterpret_cast<uintptr_t>(s.data) % alignof(float) != 0)
      return Status::InvalidArgument(fmt::format("{}: '{}' is not 4-byte aligned in its file", s.file, scale_name));
    return reinterpret_cast<const float*>(s.data);
  }

  // An F8_E4M3 linear weight: for the CPU kernels (float32 on the CPU) a uint8 view with its scales
  // attached; otherwise (a GPU executor, or a BF16 compute dtype) the dequantized weight
  // (e4m3 * weight_scale_inv in float32, kernels/fp8_dequant.h) in the compute dtype.
  Result<at::Tensor> GetFp8(const TensorView& v, const std::string& name) const {
    if (!c_.fp8())
      return Status::InvalidArgument(fmt::format(
          "{}: tensor '{}' is F8_E4M3 but {} has no FP8 quantization_config (block sizes)", v.file, name, c_.source));
    if (v.spec.shape.size() != 2)
      return Status::InvalidArgument(fmt::format("{}: F8_E4M3 tensor '{}' is not a matrix", v.file, name));
    const int64_t rows = v.spec.shape[0], cols = v.spec.shape[1];
    ZM_ASSIGN_OR_RETURN(const float* scales, Fp8ScalesOf(name, rows, cols));
    if (!o_.device.is_cpu() || o_.dtype != at::kFloat) {  // not the CPU kernels: dequantized once, in the compute dtype
      at::Tensor w32 = at::empty({rows, cols}, at::TensorOptions().dtype(at::kFloat));
      kernels::DequantizeF8E4M3ToFloatReference(static_cast<const uint8_t*>(v.data), scales, rows, cols,
                                                c_.fp8_block_rows, c_.fp8_block_cols, w32.data_ptr<float>());
      return w32.to(o_.device, o_.dtype).contiguous();
    }
    at::Tensor weight =
        at::from_blob(const_cast<uint8_t*>(v.data), {rows, cols}, at::TensorOptions().dtype(at::kByte));
    const int64_t br = c_.fp8_block_rows, bc = c_.fp8_block_cols;
    Fp8Scales s;
    s.scale_inv = at::from_blob(const_cast<float*>(scales), {(rows + br - 1) / br, (cols + bc - 1) / bc},
                                at::TensorOptions().dtype(at::kFloat));
    s.block_rows = br;
    s.block_cols = bc;
    AttachFp8Scales(weight, std::move(s));
    fp8_weights_->push_back(weight);
    return weight;
  }

  // The tensor `name` with shape `want` on the compute device, in the compute dtype (or `dtype`).
  // On the CPU a BF16 matrix stays a zero-copy BF16 view of the file (Linear reads it as
  // stored: no fp32 copy of any weight); BF16 vectors (norms, biases) are upcast to float32 (exact);
  // an F8_E4M3 matrix stays a uint8 view with its block scales attached (GetFp8).
  Result<at::Tensor> Get(const std::string& name, const std::vector<int64_t>& want,
                         c10::optional<at::ScalarType> dtype = c10::nullopt) const {
    ZM_ASSIGN_OR_RETURN(TensorView v, Find(name));
    ZM_RETURN_IF_ERROR(CheckShape(v.file, name, v.spec.shape, want));
    if (v.spec.dtype == DType::kF8E4M3) return GetFp8(v, name);
    const at::ScalarType want_dtype = dtype.value_or(o_.dtype);
    if (v.spec.dtype == DType::kBF16 && o_.device.is_cpu() && want_dtype == at::kFloat) {
      if (want.size() == 2) return WrapView(v);
      return UpcastBf16(reinterpret_cast<const uint16_t*>(v.data), v.spec.shape);  // exact, fast
    }
    ZM_ASSIGN_OR_RETURN(at::Tensor t, WrapView(v));
    return t.to(o_.device, want_dtype).contiguous();
  }

  // An RMSNorm weight [d]: as stored, or (zero_centered_norms: Qwen3NextRMSNorm) 1 + w computed in
  // float32 as the module does, then in the compute dtype.
  Result<at::Tensor> GetNorm(const std::string& name, int64_t d) const {
    if (!c_.zero_centered_norms) return Get(name, {d});
    ZM_ASSIGN_OR_RETURN(at::Tensor w, Get(name, {d}, at::kFloat));
    return (w.to(at::kFloat) + 1.0).to(o_.dtype);  // a new tensor: never written through the file's view
  }

  // Gated DeltaNet weights of a linear-attention layer (prefix p = "...layers.L.linear_attn.").
  Result<LinearAttentionWeights> GetLinearAttention(const std::string& p) const {
    if (!o_.device.is_cpu())
      return Status::InvalidArgument(fmt::format(
          "{}: {}'s Gated DeltaNet layers run on the CPU executor; the {} path does not have them yet", m_.dir,
          c_.model_type, o_.device.str()));
    const int64_t h = c_.hidden_size, nk = c_.linear_num_key_heads, nv = c_.linear_num_value_heads;
    const int64_t dk = c_.linear_key_head_dim, dv = c_.linear_value_head_dim, kk = c_.linear_conv_kernel_dim;
    const int64_t channels = 2 * nk * dk + nv * dv;
    LinearAttentionWeights a;
    if (c_.arch == ModelArch::kQwen3Next) {
      ZM_ASSIGN_OR_RETURN(a.in_proj_qkvz, Get(p + "in_proj_qkvz.weight", {channels + nv * dv, h}));
      ZM_ASSIGN_OR_RETURN(a.in_proj_ba, Get(p + "in_proj_ba.weight", {2 * nv, h}));
    } else {
      ZM_ASSIGN_OR_RETURN(a.in_proj_qkv, Get(p + "in_proj_qkv.weight", {channels, h}));
      ZM_ASSIGN_OR_RETURN(a.in_proj_z, Get(p + "in_proj_z.weight", {nv * dv, h}));
      ZM_ASSIGN_OR_RETURN(a.in_proj_b, Get(p + "in_proj_b.weight", {nv, h}));
      ZM_ASSIGN_OR_RETURN(a.in_proj_a, Get(p + "in_proj_a.weight", {nv, h}));
    }
    ZM_ASSIGN_OR_RETURN(a.conv1d, Get(p + "conv1d.weight", {channels, 1, kk}, at::kFloat));
    a.conv1d = a.conv1d.to(at::kFloat).reshape({channels, kk}).contiguous();
    ZM_ASSIGN_OR_RETURN(at::Tensor a_log, Get(p + "A_log", {nv}, at::kFloat));
    a.neg_exp_a = -at::exp(a_log.to(at::kFloat));  // Qwen3NextGatedDeltaNet.forward: -self.A_log.float().exp()
    ZM_ASSIGN_OR_RETURN(a.dt_bias, Get(p + "dt_bias", {nv}, at::kFloat));
    a.dt_bias = a.dt_bias.to(at::kFloat).contiguous();
    ZM_ASSIGN_OR_RETURN(a.norm, Get(p + "norm.weight", {dv}, at::kFloat));
    a.norm = a.norm.to(at::kFloat).contiguous();
    ZM_ASSIGN_OR_RETURN(a.out_proj, Get(p + "out_proj.weight", {h, nv * dv}));
    return a;
  }

  // Mamba2 weights of a granitemoehybrid "mamba" layer (prefix p = "model.layers.L.mamba."; BambaMixer).
  Result<LinearAttentionWeights> GetMamba(const std::string& p) const {
    if (!o_.device.is_cpu())
      return Status::InvalidArgument(fmt::format(
          "{}: {}'s Mamba2 layers run on the CPU executor; the {} path does not have them yet", m_.dir, c_.model_type,
          o_.device.str()));
    const int64_t h = c_.hidden_size, nh = c_.mamba_n_heads, inner = c_.mamba_d_inner(), conv = c_.mamba_conv_dim();
    const int64_t k = c_.mamba_d_conv, proj = inner + conv + nh;
    LinearAttentionWeights a;
    ZM_ASSIGN_OR_RETURN(a.in_proj, Get(p + "in_proj.weight", {proj, h}));
    ZM_ASSIGN_OR_RETURN(a.conv1d, Get(p + "conv1d.weight", {conv, 1, k}, at::kFloat));
    a.conv1d = a.conv1d.to(at::kFloat).reshape({conv, k}).contiguous();
    if (c_.mamba_conv_bias) {
      ZM_ASSIGN_OR_RETURN(a.conv_bias, Get(p + "conv1d.bias", {conv}, at::kFloat));
      a.conv_bias = a.conv_bias.to(at::kFloat).contiguous();
    }
    if (c_.mamba_proj_bias) {
      ZM_ASSIGN_OR_RETURN(a.in_proj_bias, Get(p + "in_proj.bias", {proj}, at::kFloat));
      a.in_proj_bias = a.in_proj_bias.to(at::kFloat).contiguous();
      ZM_ASSIGN_OR_RETURN(a.out_proj_bias, Get(p + "out_proj.bias", {h}, at::kFloat));
      a.out_proj_bias = a.out_proj_bias.to(at::kFloat).contiguous();
    }
    ZM_ASSIGN_OR_RETURN(at::Tensor a_log, Get(p + "A_log", {nh}, at::kFloat));
    a.neg_exp_a = (-at::exp(a_log.to(at::kFloat))).contiguous();  // A = -torch.exp(self.A_log.float())
    ZM_ASSIGN_OR_RETURN(a.dt_bias, Get(p + "dt_bias", {nh}, at::kFloat));
    a.dt_bias = a.dt_bias.to(at::kFloat).contiguous();
    ZM_ASSIGN_OR_RETURN(a.d_skip, Get(p + "D", {nh}, at::kFloat));
    a.d_skip = a.d_skip.to(at::kFloat).contiguous();
    ZM_ASSIGN_OR_RETURN(a.norm, Get(p + "norm.weight", {inner}, at::kFloat));
    a.norm = a.norm.to(at::kFloat).contiguous();
    ZM_ASSIGN_OR_RETURN(a.out_proj, Get(p + "out_proj.weight", {h, inner}));
    return a;
  }

  // An lfm2_moe "conv" layer's gated short convolution (prefix p = "model.layers.L.conv."; Lfm2MoeShortConv):
  // in_proj [3H, H], conv.weight [H, 1, K] (or [H, K]) as [H, K] float32, out_proj [H, H]; biases iff conv_bias.
  Result<LinearAttentionWeights> GetShortConv(const std::string& p) const {
    if (!o_.device.is_cpu())
      return Status::InvalidArgument(fmt::format(
          "{}: {}'s short-convolution layers run on the CPU executor; the {} path does not have them yet", m_.dir,
          c_.model_type, o_.device.str()));
    const int64_t h = c_.hidden_size, k = c_.linear_conv_kernel_dim;
    LinearAttentionWeights a;
    ZM_ASSIGN_OR_RETURN(a.in_proj, Get(p + "in_proj.weight", {3 * h, h}));
    const std::string conv_name = p + "conv.weight";
    ZM_ASSIGN_OR_RETURN(TensorView conv_view, Find(conv_name));
    const bool squeezed = conv_view.spec.shape == std::vector<int64_t>{h, k};  // some exporters drop the 1
    ZM_ASSIGN_OR_RETURN(a.conv1d, Get(conv_name, squeezed ? std::vector<int64_t>{h, k} : std::vector<int64_t>{h, 1, k},
                                      at::kFloat));
    a.conv1d = a.conv1d.to(at::kFloat).reshape({h, k}).contiguous();
    ZM_ASSIGN_OR_RETURN(a.out_proj, Get(p + "out_proj.weight", {h, h}));
    if (c_.short_conv_bias) {
      for (auto [name, out, n] : {std::tuple<const char*, at::Tensor*, int64_t>{"in_proj.bias", &a.in_proj_bias, 3 * h},
                                  {"conv.bias", &a.conv_bias, h},
                                  {"out_proj.bias", &a.out_proj_bias, h}}) {
        ZM_ASSIGN_OR_RETURN(*out, Get(p + name, {n}, at::kFloat));
        *out = out->to(at::kFloat).contiguous();
      }
    }
    return a;
  }

  // The token embedding `name` [vocab, hidden] in its stored dtype: on the CPU a zero-copy view
  // whose rows are upcast on lookup (exact), on another device a contiguous copy there.
  Result<at::Tensor> GetEmbedding(const std::string& name, int64_t vocab, int64_t hidden) const {
    ZM_ASSIGN_OR_RETURN(TensorView v, Find(name));
    ZM_RETURN_IF_ERROR(CheckShape(v.file, v.spec.name, v.spec.shape, {vocab, hidden}));
    ZM_ASSIGN_OR_RETURN(at::Tensor embed, WrapView(v));
    return o_.device.is_cpu() ? embed : embed.to(o_.device).contiguous();
  }

  Result<LinearWeights> GetLinear(const std::string& prefix, int64_t out, int64_t in, bool bias) const {
    LinearWeights w;
    ZM_ASSIGN_OR_RETURN(w.weight, Get(prefix + ".weight", {out, in}));
    if (bias) {
      ZM_ASSIGN_OR_RETURN(w.bias, Get(prefix + ".bias", {out}));
    }
    return w;
  }

  // gate_proj / up_proj / down_proj, or (`w123`: Mixtral-style naming, lfm2_moe's feed_forward) w1 / w3 / w2.
  Result<MlpWeights> GetMlp(const std::string& prefix, int64_t inter, bool w123 = false) const {
    const int64_t h = c_.hidden_size;
    MlpWeights w;
    ZM_ASSIGN_OR_RETURN(w.gate, Get(prefix + (w123 ? ".w1.weight" : ".gate_proj.weight"), {inter, h}));
    ZM_ASSIGN_OR_RETURN(w.up, Get(prefix + (w123 ? ".w3.weight" : ".up_proj.weight"), {inter, h}));
    ZM_ASSIGN_OR_RETURN(w.down, Get(prefix + (w123 ? ".w2.weight" : ".down_proj.weight"), {h, inter}));
    return w;
  }

  // A SwiGLU MLP stored as Granite's shared_mlp: prefix.input_linear.weight [2 * inter, hidden] (gate rows,
  // then up rows) and prefix.output_linear.weight [hidden, inter]. gate / up are the two row blocks (views
  // of one tensor: contiguous, zero-copy where Get's tensor is).
  Result<MlpWeights> GetFusedMlp(const std::string& prefix, int64_t inter) const {
    const int64_t h = c_.hidden_size;
    MlpWeights w;
    const std::string gate_up_name = prefix + ".input_linear.weight";
    ZM_ASSIGN_OR_RETURN(TensorView gate_up_view, Find(gate_up_name));
    if (gate_up_view.spec.dtype == DType::kF8E4M3)  // the block scales would have to be split as well
      return Status::InvalidArgument(fmt::format("{}: '{}' is F8_E4M3; FP8 Granite shared MLPs are not supported",
                                                 gate_up_view.file, gate_up_name));
    ZM_ASSIGN_OR_RETURN(at::Tensor gate_up, Get(gate_up_name, {2 * inter, h}));
    w.gate = gate_up.narrow(0, 0, inter);
    w.up = gate_up.narrow(0, inter, inter);
    ZM_ASSIGN_OR_RETURN(w.down, Get(prefix + ".output_linear.weight", {h, inter}));
    return w;
  }

  // kv_b_proj per head as the latent KV cache uses it (AttentionWeights::kv_b_k_t, kv_b_v), from the
  // loaded a->kv_b_proj (`name` is its tensor, read again when it is F8_E4M3).
  Status SplitMlaUpProjections(const std::string& name, AttentionWeights* a) const {
    const int64_t heads = c_.num_attention_heads, nope = c_.qk_nope_head_dim, vd = c_.v_head_dim,
                  r = c_.kv_lora_rank, rows = heads * (nope + vd);
    at::Tensor w = a->kv_b_proj.weight;
    if (w.scalar_type() == at::kByte) {  // FP8 (GetFp8's view): dequantized in float32, exactly
      ZM_ASSIGN_OR_RETURN(TensorView v, Find(name));
      ZM_ASSIGN_OR_RETURN(const float* scales, Fp8ScalesOf(name, rows, r));
      w = at::empty({rows, r}, at::TensorOptions().dtype(at::kFloat));
      kernels::DequantizeF8E4M3ToFloatReference(static_cast<const uint8_t*>(v.data), scales, rows, r,
                                                c_.fp8_block_rows, c_.fp8_block_cols, w.data_ptr<float>());
    } else if (w.scalar_type() != at::kBFloat16 && w.scalar_type() != at::kFloat) {
      return Status::InvalidArgument(fmt::format("{}: '{}' is {}, expected BF16, F32 or F8_E4M3 on the CPU", m_.dir,
                                                 name, c10::toString(w.scalar_type())));
    }
    const at::Tensor per_head = w.view({heads, nope + vd, r});
    a->kv_b_k_t = per_head.narrow(1, 0, nope).transpose(1, 2).contiguous();  // [heads, r, nope]
    a->kv_b_v = per_head.narrow(1, nope, vd).contiguous();                   // [heads, vd, r]
    return Status::Ok();
  }

  Result<AttentionWeights> GetAttention(const std::string& p) const {
    const int64_t h = c_.hidden_size, n_heads = c_.num_attention_heads;
    AttentionWeights a;
    if (c_.mla()) {
      const int64_t q_out = n_heads * c_.q_head_dim();
      if (c_.q_lora_rank == 0) {
        ZM_ASSIGN_OR_RETURN(a.q_proj, GetLinear(p + "q_proj", q_out, h, false));
      } else {
        ZM_ASSIGN_OR_RETURN(a.q_a_proj, GetLinear(p + "q_a_proj", c_.q_lora_rank, h, c_.qkv_bias));
        ZM_ASSIGN_OR_RETURN(a.q_a_layernorm, Get(p + "q_a_layernorm.weight", {c_.q_lora_rank}));
        ZM_ASSIGN_OR_RETURN(a.q_b_proj, GetLinear(p + "q_b_proj", q_out, c_.q_lora_rank, false));
      }
      ZM_ASSIGN_OR_RETURN(a.kv_a_proj,
                          GetLinear(p + "kv_a_proj_with_mqa", c_.kv_lora_rank + c_.qk_rope_head_dim, h, c_.qkv_bias));
      ZM_ASSIGN_OR_RETURN(a.kv_a_layernorm, Get(p + "kv_a_layernorm.weight", {c_.kv_lora_rank}));
      ZM_ASSIGN_OR_RETURN(a.kv_b_proj, GetLinear(p + "kv_b_proj", n_heads * (c_.qk_nope_head_dim + c_.v_head_dim),
                                                 c_.kv_lora_rank, false));
      if (o_.device.is_cpu() && o_.dtype == at::kFloat && MlaLatentKvCache()) {  // the one place deciding it
        ZM_RETURN_IF_ERROR(SplitMlaUpProjections(p + "kv_b_proj.weight", &a));
      }
      ZM_ASSIGN_OR_RETURN(a.o_proj, GetLinear(p + "o_proj", h, n_heads * c_.v_head_dim, c_.o_bias));
      return a;
    }
    const int64_t hd = c_.head_dim, kv = c_.num_key_value_heads;
    ZM_ASSIGN_OR_RETURN(a.q_proj, GetLinear(p + "q_proj", (c_.attn_output_gate ? 2 : 1) * n_heads * hd, h, c_.qkv_bias));
    ZM_ASSIGN_OR_RETURN(a.k_proj, GetLinear(p + "k_proj", kv * hd, h, c_.qkv_bias));
    ZM_ASSIGN_OR_RETURN(a.v_proj, GetLinear(p + "v_proj", kv * hd, h, c_.qkv_bias));
    ZM_ASSIGN_OR_RETURN(a.o_proj, GetLinear(p + (c_.short_conv() ? "out_proj" : "o_proj"), h, n_heads * hd, c_.o_bias));
    if (c_.attn_gate_proj) {  // AfmoeAttention.gate_proj (no bias)
      ZM_ASSIGN_OR_RETURN(a.gate_proj, GetLinear(p + "gate_proj", n_heads * hd, h, false));
    }
    if (c_.attention_sinks) {  // gpt_oss: one learned logit per query head, float32 on the CPU
      ZM_ASSIGN_OR_RETURN(a.sinks, Get(p + "sinks", {n_heads}, at::kFloat));
      a.sinks = a.sinks.to(at::kCPU).contiguous();
    }
    if (c_.arch == ModelArch::kQwen3Moe || c_.use_qk_norm) {  // lfm2_moe: q_layernorm / k_layernorm
      ZM_ASSIGN_OR_RETURN(a.q_norm, GetNorm(p + (c_.short_conv() ? "q_layernorm.weight" : "q_norm.weight"), hd));
      ZM_ASSIGN_OR_RETURN(a.k_norm, GetNorm(p + (c_.short_conv() ? "k_layernorm.weight" : "k_norm.weight"), hd));
    } else if (c_.arch == ModelArch::kOlmoe) {
      ZM_ASSIGN_OR_RETURN(a.q_norm, Get(p + "q_norm.weight", {n_heads * hd}));
      ZM_ASSIGN_OR_RETURN(a.k_norm, Get(p + "k_norm.weight", {kv * hd}));
    }
    return a;
  }

  // gpt-oss's fused experts (MXFP4 or dense) of layer `layer_id` in an HF directory: every expert, gate/up [I, H],
  // down [H, I] (ListFusedExperts checks the fused tensors against each other).
  Status CheckFusedExperts(int64_t layer_id) const {
    if (!fused_refs_) {  // listed (and checked) once per load, not once per layer
      ZM_ASSIGN_OR_RETURN(std::vector<FusedExpertRef> refs, ListFusedExperts(*m_.checkpoint));
      fused_refs_ = std::move(refs);
    }
    int64_t found = 0;
    for (const FusedExpertRef& r : *fused_refs_) {
      if (r.id.layer_id != layer_id) continue;
      ++found;
      const bool down = r.id.proj == ExpertProj::kDown;
      const std::vector<int64_t> want = down ? std::vector<int64_t>{c_.hidden_size, c_.moe_intermediate_size}
                                             : std::vector<int64_t>{c_.moe_intermediate_size, c_.hidden_size};
      ZM_RETURN_IF_ERROR(CheckShape(m_.dir, r.name + " (from the fused experts)", r.shape, want));
    }
    if (found != 3 * c_.num_experts)
      return Status::NotFound(fmt::format("{}: layer {} has {} fused expert projections, expected 3 x {} experts "
                                          "({}layers.{}.mlp.experts.gate_up_proj[_blocks / _scales], down_proj*; Granite: "
                                          "block_sparse_moe.input_linear / output_linear)",
                                          m_.dir, layer_id, found, c_.num_experts, c_.weight_prefix, layer_id));
    return Status::Ok();
  }

  // Checks that all routed experts of `layer_id` exist with gate/up [I, H], down [H, I].
  Status CheckExperts(int64_t layer_id) const {
    if (m_.checkpoint && HasFusedExperts(m_.checkpoint->config())) return CheckFusedExperts(layer_id);
    const std::vector<int64_t> in_shape = {c_.moe_intermediate_size, c_.hidden_size};
    const std::vector<int64_t> out_shape = {c_.hidden_size, c_.moe_intermediate_size};
    for (int64_t e = 0; e < c_.num_experts; ++e) {
      for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
        if (proj == ExpertProj::kGate && c_.arch == ModelArch::kSwitchTransformers) continue;  // wi/wo only
        const std::string name = ExpertTensorName(c_, layer_id, e, proj);
        const std::vector<int64_t>& want = proj == ExpertProj::kDown ? out_shape : in_shape;
        if (m_.checkpoint) {
          ZM_ASSIGN_OR_RETURN(TensorView v, m_.checkpoint->Find(name));
          ZM_RETURN_IF_ERROR(CheckShape(v.file, name, v.spec.shape, want));
        } else {
          const ExpertTensorInfo* t =
              m_.store->Find(static_cast<int32_t>(layer_id), static_cast<int32_t>(e), proj);
          if (t == nullptr)
            return Status::NotFound(fmt::format("{}: tensor '{}' (layer {}, expert {}) not found in {}", m_.dir,
                                                name, layer_id, e, kManifestFileName));
          ZM_RETURN_IF_ERROR(CheckShape(m_.dir + "/" + kManifestFileName, name, t->shape, want));
        }
      }
    }
    return Status::Ok();
  }

  Result<LayerWeights> GetLayer(int64_t l) const {
    const std::string p = fmt::format("{}layers.{}.", c_.weight_prefix, l);
    const int64_t h = c_.hidden_size;
    LayerWeights w;
    const bool lfm2 = c_.short_conv();  // Lfm2MoeDecoderLayer: operator_norm, ffn_norm, conv / self_attn, feed_forward
    ZM_ASSIGN_OR_RETURN(w.input_layernorm, GetNorm(p + (lfm2 ? "operator_norm.weight" : "input_layernorm.weight"), h));
    if (c_.sandwich_norms) {  // AfmoeDecoderLayer: input / post_attention around attention, pre_mlp / post_mlp around the MLP
      ZM_ASSIGN_OR_RETURN(w.attn_out_norm, GetNorm(p + "post_attention_layernorm.weight", h));
      ZM_ASSIGN_OR_RETURN(w.post_attention_layernorm, GetNorm(p + "pre_mlp_layernorm.weight", h));
      ZM_ASSIGN_OR_RETURN(w.mlp_out_norm, GetNorm(p + "post_mlp_layernorm.weight", h));
    } else {
      ZM_ASSIGN_OR_RETURN(w.post_attention_layernorm,
                          GetNorm(p + (lfm2 ? "ffn_norm.weight" : "post_attention_layernorm.weight"), h));
    }
    w.linear_attention = c_.IsLinearAttentionLayer(l);
    if (w.linear_attention && lfm2) {
      ZM_ASSIGN_OR_RETURN(w.linear_attn, GetShortConv(p + "conv."));
    } else if (w.linear_attention && c_.mamba()) {
      ZM_ASSIGN_OR_RETURN(w.linear_attn, GetMamba(p + "mamba."));
    } else if (w.linear_attention) {
      ZM_ASSIGN_OR_RETURN(w.linear_attn, GetLinearAttention(p + "linear_attn."));
    } else {
      ZM_ASSIGN_OR_RETURN(w.attn, GetAttention(p + "self_attn."));
    }
    w.is_moe = c_.IsMoeLayer(l);
    if (!w.is_moe) {
      ZM_ASSIGN_OR_RETURN(w.dense_mlp, GetMlp(p + (lfm2 ? "feed_forward" : "mlp"), c_.intermediate_size, lfm2));
      return w;
    }
    const std::string moe = c_.arch == ModelArch::kMixtral || c_.granite() ? p + "block_sparse_moe."
                            : lfm2                                          ? p + "feed_forward."
                                                                            : p + "mlp.";
    if (c_.granite()) {  // GraniteMoeTopKGating: block_sparse_moe.router.layer (no bias)
      ZM_ASSIGN_OR_RETURN(w.router, Get(moe + "router.layer.weight", {c_.num_experts, h}, at::kFloat));
    } else if (c_.arch == ModelArch::kGptOss) {  // GptOssTopKRouter: mlp.router.{weight, bias}
      ZM_ASSIGN_OR_RETURN(w.router, Get(moe + "router.weight", {c_.num_experts, h}, at::kFloat));
      ZM_ASSIGN_OR_RETURN(w.router_logit_bias, Get(moe + "router.bias", {c_.num_experts}, at::kFloat));
      w.router_logit_bias = w.router_logit_bias.to(at::kCPU).contiguous();
      // The experts' biases, float32 on the CPU: gate_up [E, 2I] interleaved (gate = even), down [E, H].
      ZM_ASSIGN_OR_RETURN(at::Tensor gate_up_bias,
                          Get(moe + "experts.gate_up_proj_bias", {c_.num_experts, 2 * c_.moe_intermediate_size}, at::kFloat));
      gate_up_bias = gate_up_bias.to(at::kCPU, at::kFloat).contiguous().view({c_.num_experts, c_.moe_intermediate_size, 2});
      w.expert_gate_bias = gate_up_bias.select(2, 0).contiguous();
      w.expert_up_bias = gate_up_bias.select(2, 1).contiguous();
      ZM_ASSIGN_OR_RETURN(w.expert_down_bias, Get(moe + "experts.down_proj_bias", {c_.num_experts, h}, at::kFloat));
      w.expert_down_bias = w.expert_down_bias.to(at::kCPU, at::kFloat).contiguous();
    } else if (c_.arch == ModelArch::kAfmoe) {  // AfmoeTokenChoiceRouter: mlp.router.gate (no bias)
      ZM_ASSIGN_OR_RETURN(w.router, Get(moe + "router.gate.weight", {c_.num_experts, h}, at::kFloat));
    } else {
      ZM_ASSIGN_OR_RETURN(w.router, Get(moe + "gate.weight", {c_.num_experts, h}, at::kFloat));
    }
    if ((c_.arch == ModelArch::kQwen2Moe || c_.hybrid_linear_attention()) && c_.shared_expert_intermediate_size > 0) {
      w.has_shared_expert = true;
      ZM_ASSIGN_OR_RETURN(w.shared_expert, GetMlp(moe + "shared_expert", c_.shared_expert_intermediate_size));
      ZM_ASSIGN_OR_RETURN(w.shared_expert_gate, Get(moe + "shared_expert_gate.weight", {1, h}));
    } else if ((c_.arch == ModelArch::kGraniteMoeShared || c_.mamba()) && c_.shared_expert_intermediate_size > 0) {
      // GraniteMoeSharedMLP: input_linear [2S, H] (rows [0, S) the activated gate, [S, 2S) up), output_linear
      // [H, S]; added to the routed output without a gate, as deepseek's shared experts.
      w.has_shared_expert = true;
      ZM_ASSIGN_OR_RETURN(w.shared_expert, GetFusedMlp(p + "shared_mlp", c_.shared_expert_intermediate_size));
    } else if ((c_.deepseek_moe() || c_.arch == ModelArch::kAfmoe) && c_.n_shared_experts > 0) {
      w.has_shared_expert = true;
      ZM_ASSIGN_OR_RETURN(w.shared_expert,
                          GetMlp(moe + "shared_experts", c_.n_shared_experts * c_.moe_intermediate_size));
    }
    if (c_.has_selection_bias()) {  // a float32 buffer in transformers (_keep_in_fp32_modules_strict)
      // ernie4_5_moe keeps it in Ernie4_5_MoeStatics as [1, n_experts].
      const bool ernie = c_.arch == ModelArch::kErnie45Moe;
      const std::string name = moe + (ernie                                            ? "moe_statics.e_score_correction_bias"
                                      : lfm2 || c_.arch == ModelArch::kAfmoe ? "expert_bias"  // LFM2's buffer, AfmoeMoE's
                                                                             : "gate.e_score_correction_bias");
      ZM_ASSIGN_OR_RETURN(TensorView v, Find(name));
      if (!(ernie && v.spec.shape == std::vector<int64_t>{1, c_.num_experts}))
        ZM_RETURN_IF_ERROR(CheckShape(v.file, name, v.spec.shape, {c_.num_experts}));
      ZM_ASSIGN_OR_RETURN(at::Tensor bias, WrapView(v));
      w.router_bias = bias.reshape({c_.num_experts}).to(at::kCPU, at::kFloat).contiguous();
    }
    ZM_RETURN_IF_ERROR(CheckExperts(l));
    if (c_.fp8()) ZM_RETURN_IF_ERROR(GetExpertScales(l, &w));
    return w;
  }

  // FP8 checkpoints: the scales of every routed expert of layer `l` whose weights are F8_E4M3 (as
  // the checkpoint or the compressed directory's manifest records them).
  Status GetExpertScales(int64_t l, LayerWeights* w) const {
    w->expert_scales.assign(static_cast<size_t>(c_.num_experts), {nullptr, nullptr, nullptr});
    for (int64_t e = 0; e < c_.num_experts; ++e) {
      for (ExpertProj proj : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
        const std::string name = ExpertTensorName(c_, l, e, proj);
        DType dtype = DType::kBF16;
        if (m_.checkpoint) {
          ZM_ASSIGN_OR_RETURN(TensorView v, m_.checkpoint->Find(name));
          dtype = v.spec.dtype;
        } else if (const ExpertTensorInfo* t = m_.store->Find(static_cast<int32_t>(l), static_cast<int32_t>(e), proj)) {
          dtype = t->dtype;
        }
        if (dtype != DType::kF8E4M3) continue;
        const bool down = proj == ExpertProj::kDown;
        const int64_t rows = down ? c_.hidden_size : c_.moe_intermediate_size;
        const int64_t cols = down ? c_.moe_intermediate_size : c_.hidden_size;
        ZM_ASSIGN_OR_RETURN(w->expert_scales[static_cast<size_t>(e)][static_cast<int>(proj)],
                            Fp8ScalesOf(name, rows, cols));
      }
    }
    return Status::Ok();
  }

  Result<SwitchBlockWeights> GetSwitchBlock(int64_t l) const {
    const bool decoder = l >= c_.num_encoder_layers;
    const std::string p = fmt::format("{}.block.{}.layer.", decoder ? "decoder" : "encoder",
                                      decoder ? l - c_.num_encoder_layers : l);
    const int64_t d = c_.hidden_size, inner = c_.num_attention_heads * c_.head_dim, ff = c_.intermediate_size;
    SwitchBlockWeights w;
    ZM_ASSIGN_OR_RETURN(w.self_attn_norm, Get(p + "0.layer_norm.weight", {d}));
    ZM_ASSIGN_OR_RETURN(w.q, GetLinear(p + "0.SelfAttention.q", inner, d, false));
    ZM_ASSIGN_OR_RETURN(w.k, GetLinear(p + "0.SelfAttention.k", inner, d, false));
    ZM_ASSIGN_OR_RETURN(w.v, GetLinear(p + "0.SelfAttention.v", inner, d, false));
    ZM_ASSIGN_OR_RETURN(w.o, GetLinear(p + "0.SelfAttention.o", d, inner, false));
    if (decoder) {
      ZM_ASSIGN_OR_RETURN(w.cross_attn_norm, Get(p + "1.layer_norm.weight", {d}));
      ZM_ASSIGN_OR_RETURN(w.cross_q, GetLinear(p + "1.EncDecAttention.q", inner, d, false));
      ZM_ASSIGN_OR_RETURN(w.cross_k, GetLinear(p + "1.EncDecAttention.k", inner, d, false));
      ZM_ASSIGN_OR_RETURN(w.cross_v, GetLinear(p + "1.EncDecAttention.v", inner, d, false));
      ZM_ASSIGN_OR_RETURN(w.cross_o, GetLinear(p + "1.EncDecAttention.o", d, inner, false));
    }
    const std::string f = p + (decoder ? "2." : "1.");
    ZM_ASSIGN_OR_RETURN(w.ff_norm, Get(f + "layer_norm.weight", {d}));
    w.is_moe = c_.IsMoeLayer(l);
    if (!w.is_moe) {
      ZM_ASSIGN_OR_RETURN(w.wi, Get(f + "mlp.wi.weight", {ff, d}));
      ZM_ASSIGN_OR_RETURN(w.wo, Get(f + "mlp.wo.weight", {d, ff}));
      return w;
    }
    ZM_ASSIGN_OR_RETURN(w.router, Get(f + "mlp.router.classifier.weight", {c_.num_experts, d}, at::kFloat));
    ZM_RETURN_IF_ERROR(CheckExperts(l));
    return w;
  }

  Result<SwitchWeights> GetSwitch() const {
    SwitchWeights w;
    const int64_t d = c_.hidden_size, vocab = c_.vocab_size;
    ZM_ASSIGN_OR_RETURN(w.shared, GetEmbedding("shared.weight", vocab, d));
    const std::vector<int64_t> bias_shape = {c_.relative_attention_num_buckets, c_.num_attention_heads};
    ZM_ASSIGN_OR_RETURN(w.encoder_position_bias,
                        Get("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", bias_shape, at::kFloat));
    ZM_ASSIGN_OR_RETURN(w.decoder_position_bias,
                        Get("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", bias_shape, at::kFloat));
    ZM_ASSIGN_OR_RETURN(w.encoder_final_norm, Get("encoder.final_layer_norm.weight", {d}));
    ZM_ASSIGN_OR_RETURN(w.decoder_final_norm, Get("decoder.final_layer_norm.weight", {d}));
    // A tied model's safetensors hold shared.weight only (transformers drops the tied aliases
    // encoder/decoder.embed_tokens and lm_head when saving); an untied one has lm_head.weight.
    ZM_ASSIGN_OR_RETURN(w.lm_head, Get(c_.tie_word_embeddings ? "shared.weight" : "lm_head.weight", {vocab, d}));
    w.blocks.reserve(static_cast<size_t>(c_.num_hidden_layers));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      ZM_ASSIGN_OR_RETURN(SwitchBlockWeights block, GetSwitchBlock(l));
      w.blocks.push_back(std::move(block));
    }
    return w;
  }

  Result<ModelWeights> GetAll() const {
    ModelWeights w;
    const int64_t h = c_.hidden_size, vocab = c_.vocab_size;
    const std::string embed = c_.weight_prefix + "embed_tokens.weight";
    ZM_ASSIGN_OR_RETURN(w.embed_tokens, GetEmbedding(embed, vocab, h));
    // Lfm2MoeModel names its final norm embedding_norm (applied after the last layer, as every other model's norm).
    ZM_ASSIGN_OR_RETURN(w.norm, GetNorm(c_.weight_prefix + (c_.short_conv() ? "embedding_norm.weight" : "norm.weight"), h));
    if (c_.tie_word_embeddings) {
      ZM_ASSIGN_OR_RETURN(w.lm_head, Get(embed, {vocab, h}));
    } else {
      ZM_ASSIGN_OR_RETURN(w.lm_head, Get("lm_head.weight", {vocab, h}));
    }
    w.layers.reserve(static_cast<size_t>(c_.num_hidden_layers));
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      ZM_ASSIGN_OR_RETURN(LayerWeights layer, GetLayer(l));
      w.layers.push_back(std::move(layer));
    }
    return w;
  }

 private:
  const LoadedModel& m_;
  const LoadOptions& o_;
  const ModelConfig& c_;
  std::vector<at::Tensor>* fp8_weights_;
  mutable std::optional<std::vector<FusedExpertRef>> fused_refs_;  // gpt-oss in an HF directory
};

}  // namespace

Result<ModelDirKind> DetectModelDir(const std::string& dir) {
  if (FileExists(JoinPath(dir, kManifestFileName))) return ModelDirKind::kCompressed;
  if (FileExists(JoinPath(dir, "config.json"))) return ModelDirKind::kHuggingFace;
  return Status::NotFound(fmt::format("{}: not a model directory (no {} and no config.json)", dir,
                                      kManifestFileName));
}

LoadedModel::~LoadedModel() {
  background_copy.reset();  // cancels and joins: the files below must outlive it
  for (const at::Tensor& w : fp8_weights) DetachFp8Scales(w);
}

WeightsMemoryStats CurrentWeightsMemory(const LoadedModel& model) {
  return model.background_copy ? model.background_copy->stats() : model.weights_memory;
}

Result<std::unique_ptr<LoadedModel>> LoadModel(const std::string& dir, const LoadOptions& options) {
  auto model = std::make_unique<LoadedModel>();
  model->dir = dir;
  ZM_ASSIGN_OR_RETURN(model->kind, DetectModelDir(dir));
  ZM_ASSIGN_OR_RETURN(model->config, LoadModelConfig(dir));
  if (model->kind == ModelDirKind::kHuggingFace) {
    ZM_ASSIGN_OR_RETURN(model->checkpoint, Checkpoint::Open(dir));
  } else {
    ZM_ASSIGN_OR_RETURN(model->dense, SafetensorsFile::Open(JoinPath(dir, kDenseFileName)));
    ZM_ASSIGN_OR_RETURN(model->store, ExpertStore::Open(dir));
  }
  // Every dense weight is used by every token, and with resident experts every expert file page
  // may be: read them all in now, not one page fault at a time inside the first requests, into
  // anonymous memory where asked and where it fits (LoadOptions::weights_memory).
  std::vector<SafetensorsFile*> whole;
  if (model->checkpoint && options.resident_experts) {
    for (const auto& file : model->checkpoint->files()) whole.push_back(file.get());
  } else if (model->dense) {
    whole.push_back(model->dense.get());
  }
  const bool copy = options.weights_memory == WeightsMemory::kAnonymous && options.device.is_cpu();
  const bool background = options.weights_memory == WeightsMemory::kBackground && options.device.is_cpu();
  for (SafetensorsFile* file : whole) {
    const auto bytes = static_cast<int64_t>(file->size_bytes());
    if (copy && bytes > 0 && MemoryHeadroomBytes() >= bytes + kAnonymousWeightsReserveBytes) {
      ZM_RETURN_IF_ERROR(file->CopyToAnonymousMemory());
      model->weights_memory.anonymous_bytes += bytes;
      continue;
    }
    ZM_RETURN_IF_ERROR(file->Populate());
    model->weights_memory.mapped_bytes += bytes;
    if (copy && bytes > 0) ++model->weights_memory.files_left_mapped;
  }
  // Lossless means every byte served is checked: expert chunks are hashed when read, dense tensors
  // here, once, against the manifest.
  if (model->dense) ZM_RETURN_IF_ERROR(VerifyDenseTensors(model->store->manifest(), *model->dense));
  ZM_RETURN_IF_ERROR(TorchBoundary("loading " + dir, [&]() -> Status {
    Loader loader(*model, options, &model->fp8_weights);
    if (model->config.arch == ModelArch::kSwitchTransformers) {
      ZM_ASSIGN_OR_RETURN(model->switch_weights, loader.GetSwitch());
      return Status::Ok();
    }
    ZM_ASSIGN_OR_RETURN(model->weights, loader.GetAll());
    return Status::Ok();
  }));
  if (options.resident_experts && model->config.num_experts > 0) {
    if (model->checkpoint) {
      ZM_ASSIGN_OR_RETURN(model->resident_experts, ResidentExpertProvider::FromCheckpoint(*model->checkpoint));
    } else {
      ZM_ASSIGN_OR_RETURN(model->resident_experts, ResidentExpertProvider::FromStore(*model->store, options.n_threads));
    }
  }
  // kBackground: the files just read in full are moved into anonymous memory by a thread of its own
  // while the model serves (weights_memory.h).
  if (background) {
    std::vector<BackgroundWeightsCopy::File> files;
    for (SafetensorsFile* file : whole) {
      if (file->size_bytes() == 0) continue;
      files.push_back({file->path(), static_cast<int64_t>(file->size_bytes()),
                       [file](const std::atomic<bool>* cancel) { return file->CopyToAnonymousMemory(cancel); }});
    }
    if (!files.empty())
      model->background_copy = std::make_unique<BackgroundWeightsCopy>(std::move(files), model->weights_memory,
                                                                        [] { return MemoryHeadroomBytes(); });
  }
  return model;
}

}  // namespace zipmoe::executor
