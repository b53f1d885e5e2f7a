// Parsing of Hugging Face config.json files into ModelConfig (see model_config.h).
#include "common/checkpoint/model_config.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/file_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;

// Reads keys of one config object, producing messages that name the key and the file.
class KeyReader {
 public:
  KeyReader(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool Has(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }

  Result<int64_t> Int(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Missing(key, "an integer");
    return AsInt(key, *it);
  }
  Result<int64_t> IntOr(const char* key, int64_t fallback) const {
    return Has(key) ? Int(key) : Result<int64_t>(fallback);
  }
  Result<int64_t> Positive(const char* key) const {
    ZM_ASSIGN_OR_RETURN(int64_t v, Int(key));
    if (v <= 0) return Status::InvalidArgument(fmt::format("{}: key '{}' must be > 0, got {}", source_, key, v));
    return v;
  }
  Result<int64_t> PositiveOr(const char* key, int64_t fallback) const {
    return Has(key) ? Positive(key) : Result<int64_t>(fallback);
  }
  Result<double> Number(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return Missing(key, "a number");
    if (!it->is_number()) return Mistyped(key, "a number", *it);
    return it->get<double>();
  }
  Result<double> NumberOr(const char* key, double fallback) const {
    return Has(key) ? Number(key) : Result<double>(fallback);
  }
  Result<bool> BoolOr(const char* key, bool fallback) const {
    if (!Has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) return Mistyped(key, "a boolean", v);
    return v.get<bool>();
  }
  Result<std::string> StringOr(const char* key, const std::string& fallback) const {
    if (!Has(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) return Mistyped(key, "a string", v);
    return v.get<std::string>();
  }
  // An int or a list of ints (eos_token_id); missing/null gives an empty list.
  Result<std::vector<int64_t>> IntOrIntList(const char* key) const {
    std::vector<int64_t> out;
    if (!Has(key)) return out;
    const json& v = j_.at(key);
    if (v.is_array()) {
      for (const json& e : v) {
        ZM_ASSIGN_OR_RETURN(int64_t x, AsInt(key, e));
        out.push_back(x);
      }
      return out;
    }
    ZM_ASSIGN_OR_RETURN(int64_t x, AsInt(key, v));
    out.push_back(x);
    return out;
  }
  Result<std::vector<int64_t>> IntList(const char* key) const {
    std::vector<int64_t> out;
    if (!Has(key)) return out;
    const json& v = j_.at(key);
    if (!v.is_array()) return Mistyped(key, "a list of integers", v);
    for (const json& e : v) {
      ZM_ASSIGN_OR_RETURN(int64_t x, AsInt(key, e));
      out.push_back(x);
    }
    return out;
  }

  Result<std::vector<std::string>> Strings(const char* key) const {
    std::vector<std::string> out;
    if (!Has(key)) return out;
    const json& v = j_.at(key);
    if (!v.is_array()) return Mistyped(key, "a list of strings", v);
    for (const json& e : v) {
      if (!e.is_string()) return Mistyped(key, "a list of strings", v);
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  Status Missing(const char* key, const char* want) const {
    return Status::InvalidArgument(fmt::format("{}: missing key '{}' ({})", source_, key, want));
  }
  Status Mistyped(const char* key, const char* want, const json& got) const {
    return Status::InvalidArgument(
        fmt::format("{}: key '{}' must be {}, got {} ({})", source_, key, want, got.type_name(), Clip(got.dump(), 60)));
  }

 private:
  Result<int64_t> AsInt(const char* key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    return Mistyped(key, "an integer", v);
  }

  const json& j_;
  const std::string& source_;
};

Result<ModelArch> ParseArch(const json& config, const std::string& source) {
  auto it = config.find("model_type");
  if (it == config.end() || it->is_null())
    return Status::InvalidArgument(fmt::format("{}: missing key 'model_type' (supported: {})", source,
                                               SupportedModelTypes()));
  if (!it->is_string())
    return Status::InvalidArgument(fmt::format("{}: key 'model_type' must be a string, got {}", source,
                                               it->type_name()));
  const std::string t = it->get<std::string>();
  for (ModelArch a : {ModelArch::kQwen2Moe, ModelArch::kMixtral, ModelArch::kQwen3Moe, ModelArch::kOlmoe,
                      ModelArch::kDeepseekV2, ModelArch::kSwitchTransformers, ModelArch::kDeepseekV3,
                      ModelArch::kGlm4Moe, ModelArch::kGlm4MoeLite, ModelArch::kErnie45Moe, ModelArch::kGptOss,
                      ModelArch::kQwen3Next, ModelArch::kQwen35Moe, ModelArch::kGraniteMoe,
                      ModelArch::kGraniteMoeShared, ModelArch::kGraniteMoeHybrid, ModelArch::kLfm2Moe, ModelArch::kAfmoe})
    if (t == ModelArchName(a)) return a;
  // Kimi-K2's published config.json names its own model_type for DeepSeek-V3's architecture
  // ("architectures": ["DeepseekV3ForCausalLM"], the same keys); Moonshot's README has users rename it.
  if (t == "kimi_k2") return ModelArch::kDeepseekV3;
  return Status::InvalidArgument(fmt::format("{}: unsupported model_type '{}' (supported: {})", source, t,
                                             SupportedModelTypes()));
}

// Rope scaling from `rope_scaling` (transformers 4.x) or, when that is absent or null, from
// `rope_parameters` (transformers 5 writes {"rope_type": ..., "rope_theta": ..., factor, ...} there).
Status ParseRopeScaling(const json& config, const std::string& source, ModelConfig& c) {
  const char* key = "rope_scaling";
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    key = "rope_parameters";
    it = config.find(key);
  }
  if (it == config.end() || it->is_null()) return Status::Ok();
  if (!it->is_object())
    return Status::InvalidArgument(
        fmt::format("{}: key '{}' must be an object or null, got {}", source, key, it->type_name()));
  const std::string where = source + " " + key;
  KeyReader r(*it, where);
  ZM_ASSIGN_OR_RETURN(std::string type, r.StringOr("type", ""));
  if (type.empty()) {
    ZM_ASSIGN_OR_RETURN(type, r.StringOr("rope_type", ""));
  }
  RopeScaling& s = c.rope_scaling;
  if (type == "default" || type.empty()) {
    s.type = RopeScaling::Type::kNone;
    return Status::Ok();
  }
  ZM_ASSIGN_OR_RETURN(s.factor, r.Number("factor"));
  if (!(s.factor > 0.0))
    return Status::InvalidArgument(fmt::format("{}: key 'factor' must be > 0, got {}", where, s.factor));
  if (type == "linear") {
    s.type = RopeScaling::Type::kLinear;
    return Status::Ok();
  }
  if (type == "yarn" && c.arch == ModelArch::kGptOss) {
    // HF's generic yarn: original_max_position_embeddings from the top level first; mscale only when
    // both mscale and mscale_all_dim are set (else get_mscale(factor), the same value for the defaults).
    s.type = RopeScaling::Type::kYarn;
    KeyReader top(config, source);
    ZM_ASSIGN_OR_RETURN(s.original_max_position_embeddings, r.PositiveOr("original_max_position_embeddings", 4096));
    ZM_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                        top.PositiveOr("original_max_position_embeddings", s.original_max_position_embeddings));
    ZM_ASSIGN_OR_RETURN(s.beta_fast, r.NumberOr("beta_fast", 32.0));
    ZM_ASSIGN_OR_RETURN(s.beta_slow, r.NumberOr("beta_slow", 1.0));
    ZM_ASSIGN_OR_RETURN(const double mscale, r.NumberOr("mscale", 0.0));
    ZM_ASSIGN_OR_RETURN(const double mscale_all_dim, r.NumberOr("mscale_all_dim", 0.0));
    if (mscale != 0.0 && mscale_all_dim != 0.0) {
      s.mscale = mscale;
      s.mscale_all_dim = mscale_all_dim;
    }
    ZM_ASSIGN_OR_RETURN(s.truncate, r.BoolOr("truncate", true));
    if (r.Has("attention_factor")) {
      ZM_ASSIGN_OR_RETURN(const double f, r.Number("attention_factor"));
      s.attention_factor = f;
    }
    return Status::Ok();
  }
  if (type == "yarn" && c.mla()) {
    s.type = RopeScaling::Type::kYarn;
    ZM_ASSIGN_OR_RETURN(s.original_max_position_embeddings, r.PositiveOr("original_max_position_embeddings", 4096));
    ZM_ASSIGN_OR_RETURN(s.beta_fast, r.NumberOr("beta_fast", 32.0));
    ZM_ASSIGN_OR_RETURN(s.beta_slow, r.NumberOr("beta_slow", 1.0));
    ZM_ASSIGN_OR_RETURN(s.mscale, r.NumberOr("mscale", 1.0));
    ZM_ASSIGN_OR_RETURN(s.mscale_all_dim, r.NumberOr("mscale_all_dim", 0.0));
    return Status::Ok();
  }
  return Status::InvalidArgument(fmt::format(
      "{}: unsupported rope_scaling type '{}' for model_type '{}' (supported: linear{})", source, type,
      c.model_type, c.mla() || c.arch == ModelArch::kGptOss ? ", yarn" : ""));
}

// partial_rotary_factor: top-level (GLM-4.5's config.json) or inside rope_parameters (transformers 5).
// Glm4MoeConfig defaults it to 0.5; the others to 1. Honoured by glm4_moe; another model with a
// factor != 1 is refused (on the MLA models transformers' rotary tables would not match q_pe's width).
Status ParsePartialRotary(const nlohmann::json& config, const std::string& source, ModelConfig& c) {
  double factor = c.arch == ModelArch::kGlm4Moe ? 0.5 : c.hybrid_linear_attention() ? 0.25 : 1.0;
  const char* key = "partial_rotary_factor";
  auto params = config.find("rope_parameters");
  if (params != config.end() && params->is_object()) {
    KeyReader pr(*params, source + " rope_parameters");
    ZM_ASSIGN_OR_RETURN(factor, pr.NumberOr(key, factor));
  }
  KeyReader r(config, source);
  ZM_ASSIGN_OR_RETURN(factor, r.NumberOr(key, factor));
  if (!(factor > 0.0 && factor <= 1.0))
    return Status::InvalidArgument(fmt::format("{}: key '{}' = {} is outside (0, 1]", source, key, factor));
  if (factor != 1.0 && c.arch != ModelArch::kGlm4Moe && !c.hybrid_linear_attention())
    return Status::InvalidArgument(fmt::format("{}: key '{}' = {} is not supported for model_type '{}' (expected 1)",
                                               source, key, factor, c.model_type));
  c.partial_rotary_factor = factor;
  const int64_t dim = c.rope_dim();
  if (dim <= 0 || dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: the rotary width {} (head width x {} = {}) must be even and > 0",
                                               source, key, factor, dim));
  return Status::Ok();
}

// quantization_config: FP8 block-scaled checkpoints (DeepSeek-V3 as released, GLM-4.5-Air-FP8,
// Qwen3-*-FP8: {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
// "weight_block_size": [128, 128]}) are served as stored (F8_E4M3 weights + weight_scale_inv);
// every other method (MXFP4, GPTQ, AWQ, bitsandbytes, ...) or FP8 variant is refused by name.
Status ParseQuantization(const nlohmann::json& config, const std::string& source, ModelConfig& c) {
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return Status::Ok();
  const std::string where = source + " quantization_config";
  if (!it->is_object())
    return Status::InvalidArgument(fmt::format("{}: must be an object, got {}", where, it->type_name()));
  KeyReader q(*it, where);
  ZM_ASSIGN_OR_RETURN(const std::string method, q.StringOr("quant_method", "?"));
  if (method == "mxfp4" && c.arch == ModelArch::kGptOss) {
    // gpt-oss as released: every layer's routed experts as *_blocks / *_scales, everything else BF16
    // (modules_to_not_convert lists those). Experts left unconverted there are refused by the loaders.
    c.mxfp4_experts = true;
    return Status::Ok();
  }
  if (method != "fp8")
    return Status::InvalidArgument(fmt::format(
        "{}: quant_method '{}' is not supported for model_type '{}' (supported: fp8 with block scales, mxfp4 for "
        "gpt_oss; or BF16, F16, F32 weights)", where, method, c.model_type));
  ZM_ASSIGN_OR_RETURN(const std::string fmt_name, q.StringOr("fmt", "e4m3"));
  if (fmt_name != "e4m3")
    return Status::InvalidArgument(fmt::format("{}: fmt '{}' is not supported (supported: e4m3)", where, fmt_name));
  ZM_ASSIGN_OR_RETURN(const std::string scheme, q.StringOr("activation_scheme", "dynamic"));
  if (scheme != "dynamic")
    return Status::InvalidArgument(fmt::format(
        "{}: activation_scheme '{}' is not supported (supported: dynamic; activations stay float32 here)", where,
        scheme));
  ZM_ASSIGN_OR_RETURN(const std::vector<int64_t> block, q.IntList("weight_block_size"));
  if (block.size() != 2 || block[0] <= 0 || block[1] <= 0 || block[1] % 16 != 0)
    return Status::InvalidArgument(fmt::format(
        "{}: weight_block_size must be [rows, cols] with rows > 0 and cols a positive multiple of 16 (per-tensor "
        "or per-channel FP8 is not supported), got {}",
        where, it->contains("weight_block_size") ? (*it)["weight_block_size"].dump() : std::string("nothing")));
  c.fp8_block_rows = block[0];
  c.fp8_block_cols = block[1];
  return Status::Ok();
}

Status ParseAttention(const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.Positive("num_attention_heads"));
  // Ernie4_5_MoeConfig defaults num_key_value_heads to 4; the others to the head count.
  ZM_ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveOr("num_key_value_heads", c.arch == ModelArch::kErnie45Moe
                                                                                    ? 4
                                                                                    : c.num_attention_heads));
  ZM_ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", false));
  if (c.mla()) {
    // MLA: every head has its own k_nope/v from kv_b_proj; k_pe is shared (no GQA grouping).
    c.num_key_value_heads = c.num_attention_heads;
    ZM_ASSIGN_OR_RETURN(c.q_lora_rank, r.IntOr("q_lora_rank", 0));
    if (c.q_lora_rank < 0)
      return Status::InvalidArgument(fmt::format("{}: key 'q_lora_rank' must be >= 0 or null", source));
    ZM_ASSIGN_OR_RETURN(c.kv_lora_rank, r.Positive("kv_lora_rank"));
    ZM_ASSIGN_OR_RETURN(c.qk_nope_head_dim, r.Positive("qk_nope_head_dim"));
    ZM_ASSIGN_OR_RETURN(c.qk_rope_head_dim, r.Positive("qk_rope_head_dim"));
    ZM_ASSIGN_OR_RETURN(c.v_head_dim, r.Positive("v_head_dim"));
    if (c.qk_rope_head_dim % 2 != 0)
      return Status::InvalidArgument(
          fmt::format("{}: qk_rope_head_dim {} must be even", source, c.qk_rope_head_dim));
    c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
    c.qkv_bias = attention_bias;  // q_a_proj / kv_a_proj_with_mqa
    c.o_bias = attention_bias;
    ZM_ASSIGN_OR_RETURN(c.rope_interleave, r.BoolOr("rope_interleave", true));
    if (c.arch == ModelArch::kDeepseekV2 && !c.rope_interleave)
      return Status::InvalidArgument(
          fmt::format("{}: rope_interleave = false is not supported for model_type 'deepseek_v2'", source));
    return Status::Ok();
  }
  if (r.Has("rope_interleave"))
    return Status::InvalidArgument(fmt::format("{}: key 'rope_interleave' is only supported for the MLA models "
                                               "(deepseek_v2, deepseek_v3, glm4_moe_lite), not '{}'",
                                               source, c.model_type));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::InvalidArgument(
        fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source,
                    c.num_attention_heads, c.num_key_value_heads));
  int64_t head_dim = 0;
  if (c.arch == ModelArch::kQwen3Moe || c.arch == ModelArch::kMixtral || c.arch == ModelArch::kGlm4Moe ||
      c.arch == ModelArch::kErnie45Moe) {
    ZM_ASSIGN_OR_RETURN(head_dim, r.PositiveOr("head_dim", 0));
  }
  if (head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      return Status::InvalidArgument(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}",
                                                 source, c.hidden_size, c.num_attention_heads));
    head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (head_dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: head_dim {} must be even for RoPE", source, head_dim));
  c.head_dim = head_dim;
  if (c.arch == ModelArch::kQwen2Moe) {
    c.qkv_bias = true;
    c.o_bias = false;
  } else if (c.arch == ModelArch::kMixtral) {
    c.qkv_bias = false;
    c.o_bias = false;
  } else if (c.arch == ModelArch::kErnie45Moe) {
    // use_bias puts biases on every Linear, the experts' too, which the expert kernels do not take.
    ZM_ASSIGN_OR_RETURN(const bool use_bias, r.BoolOr("use_bias", false));
    if (use_bias)
      return Status::InvalidArgument(fmt::format(
          "{}: use_bias = true is not supported for model_type 'ernie4_5_moe' (biased experts)", source));
    c.qkv_bias = false;
    c.o_bias = false;
  } else if (c.arch == ModelArch::kGlm4Moe) {  // Glm4MoeAttention: o_proj never has a bias
    c.qkv_bias = attention_bias;
    c.o_bias = false;
    ZM_ASSIGN_OR_RETURN(c.use_qk_norm, r.BoolOr("use_qk_norm", false));
  } else {
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  if (c.arch == ModelArch::kOlmoe && r.Has("clip_qkv")) {
    ZM_ASSIGN_OR_RETURN(double clip, r.Number("clip_qkv"));
    c.clip_qkv = clip;
  }
  if (c.arch == ModelArch::kMixtral && r.Has("sliding_window")) {
    ZM_ASSIGN_OR_RETURN(int64_t w, r.Positive("sliding_window"));
    c.sliding_window = w;
  }
  if (c.arch == ModelArch::kQwen2Moe || c.arch == ModelArch::kQwen3Moe) {
    ZM_ASSIGN_OR_RETURN(const bool use_sliding_window, r.BoolOr("use_sliding_window", false));
    if (use_sliding_window)
      return Status::InvalidArgument(
          fmt::format("{}: use_sliding_window = true is not supported for model_type '{}'", source, c.model_type));
  }
  return Status::Ok();
}

// The DeepSeek-style MoE keys (deepseek_v2: MoEGate of modeling_deepseek.py; deepseek_v3, glm4_moe,
// glm4_moe_lite: DeepseekV3TopkRouter / Glm4MoeTopkRouter of transformers, which always run noaux_tc
// with sigmoid scores whatever config.json says, so other values are refused there, naming the key).
Status ParseDeepseekMoe(const KeyReader& r, const std::string& source, ModelConfig& c) {
  const bool v2 = c.arch == ModelArch::kDeepseekV2;
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.IntOr("n_routed_experts", 0));
  ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.Positive("moe_intermediate_size"));
  ZM_ASSIGN_OR_RETURN(c.n_shared_experts, r.IntOr("n_shared_experts", v2 ? 0 : 1));
  if (c.n_shared_experts < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'n_shared_experts' must be >= 0", source));
  const int64_t default_first_dense = c.arch == ModelArch::kDeepseekV3 ? 3 : c.arch == ModelArch::kGlm4Moe ? 1 : 0;
  ZM_ASSIGN_OR_RETURN(c.first_k_dense_replace,
                      r.IntOr("first_k_dense_replace", c.arch == ModelArch::kGlm4MoeLite ? 1 : default_first_dense));
  if (c.first_k_dense_replace < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'first_k_dense_replace' must be >= 0", source));
  ZM_ASSIGN_OR_RETURN(c.moe_layer_freq, r.PositiveOr("moe_layer_freq", 1));
  if (c.moe_layer_freq != 1 && (c.arch == ModelArch::kGlm4Moe || c.arch == ModelArch::kGlm4MoeLite))
    return Status::InvalidArgument(fmt::format(
        "{}: moe_layer_freq {} is not supported for model_type '{}' (its decoder layer ignores it; expected 1)",
        source, c.moe_layer_freq, c.model_type));
  ZM_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", !v2));
  ZM_ASSIGN_OR_RETURN(c.routed_scaling_factor, r.NumberOr("routed_scaling_factor", 1.0));
  if (!std::isfinite(c.routed_scaling_factor))
    return Status::InvalidArgument(fmt::format("{}: key 'routed_scaling_factor' must be finite", source));
  ZM_ASSIGN_OR_RETURN(c.num_nextn_predict_layers, r.IntOr("num_nextn_predict_layers", 0));
  ZM_ASSIGN_OR_RETURN(std::string scoring, r.StringOr("scoring_func", v2 ? "softmax" : "sigmoid"));
  ZM_ASSIGN_OR_RETURN(std::string method, r.StringOr("topk_method", v2 ? "greedy" : "noaux_tc"));
  if (v2) {
    if (scoring != "softmax")
      return Status::InvalidArgument(
          fmt::format("{}: unsupported scoring_func '{}' for deepseek_v2 (supported: softmax)", source, scoring));
    if (method == "greedy") {
      c.topk_method = TopkMethod::kGreedy;
    } else if (method == "group_limited_greedy") {
      c.topk_method = TopkMethod::kGroupLimitedGreedy;
    } else {
      return Status::InvalidArgument(fmt::format(
          "{}: unsupported topk_method '{}' for deepseek_v2 (supported: greedy, group_limited_greedy)", source,
          method));
    }
    c.scoring_func = ScoringFunc::kSoftmax;
  } else {
    if (scoring != "sigmoid")
      return Status::InvalidArgument(fmt::format(
          "{}: unsupported scoring_func '{}' for model_type '{}' (supported: sigmoid)", source, scoring, c.model_type));
    if (method != "noaux_tc")
      return Status::InvalidArgument(fmt::format(
          "{}: unsupported topk_method '{}' for model_type '{}' (supported: noaux_tc)", source, method, c.model_type));
    c.topk_method = TopkMethod::kNoauxTc;
    c.scoring_func = ScoringFunc::kSigmoid;
  }
  ZM_ASSIGN_OR_RETURN(c.n_group, r.PositiveOr("n_group", 1));
  ZM_ASSIGN_OR_RETURN(c.topk_group, r.PositiveOr("topk_group", 1));
  const bool grouped = c.topk_method != TopkMethod::kGreedy;
  if (grouped && (c.num_experts % c.n_group != 0 || c.topk_group > c.n_group))
    return Status::InvalidArgument(
        fmt::format("{}: topk_method '{}' needs n_routed_experts {} divisible by n_group {} and topk_group {} <= n_group",
                    source, method, c.num_experts, c.n_group, c.topk_group));
  if (c.topk_method == TopkMethod::kNoauxTc && c.num_experts > 0 && c.num_experts / c.n_group < 2)
    return Status::InvalidArgument(fmt::format(
        "{}: noaux_tc scores each group by its two best experts: n_routed_experts / n_group must be >= 2, got {} / {}",
        source, c.num_experts, c.n_group));
  if (c.arch == ModelArch::kGlm4MoeLite && r.Has("mlp_layer_types")) {
    // Checked against num_hidden_layers by the caller (which has read it by now).
    auto types = r.Strings("mlp_layer_types");
    if (!types.ok()) return types.status();
    if (static_cast<int64_t>(types->size()) != c.num_hidden_layers)
      return Status::InvalidArgument(fmt::format("{}: key 'mlp_layer_types' has {} entries for {} num_hidden_layers",
                                                 source, types->size(), c.num_hidden_layers));
    for (size_t i = 0; i < types->size(); ++i) {
      const std::string& t = (*types)[i];
      if (t != "dense" && t != "sparse")
        return Status::InvalidArgument(fmt::format(
            "{}: key 'mlp_layer_types' entry {} is '{}' (expected \"dense\" or \"sparse\")", source, i, t));
      c.sparse_layers.push_back(t == "sparse" ? 1 : 0);
    }
  }
  return Status::Ok();
}

// ernie4_5_moe (Ernie4_5_MoeConfig; the attribute_map aliases num_experts / num_experts_per_tok are read
// when the moe_* keys are absent).
Status ParseErnieMoe(const KeyReader& r, const std::string& source, ModelConfig& c) {
  const char* experts_key = r.Has("moe_num_experts") ? "moe_num_experts" : "num_experts";
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.IntOr(experts_key, 64));
  const char* k_key = r.Has("moe_k") ? "moe_k" : "num_experts_per_tok";
  ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr(k_key, 6));
  ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.PositiveOr("moe_intermediate_size", 1536));
  ZM_ASSIGN_OR_RETURN(c.n_shared_experts, r.IntOr("moe_num_shared_experts", 2));
  if (c.n_shared_experts < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'moe_num_shared_experts' must be >= 0", source));
  ZM_ASSIGN_OR_RETURN(c.moe_layer_start, r.IntOr("moe_layer_start_index", 1));
  ZM_ASSIGN_OR_RETURN(c.moe_layer_end, r.IntOr("moe_layer_end_index", -1));
  if (c.moe_layer_end == -1) c.moe_layer_end = c.num_hidden_layers - 1;
  ZM_ASSIGN_OR_RETURN(c.moe_layer_freq, r.PositiveOr("moe_layer_interval", 1));
  ZM_ASSIGN_OR_RETURN(c.norm_min, r.NumberOr("moe_norm_min", 1e-12));
  if (!(std::isfinite(c.norm_min) && c.norm_min > 0.0))
    return Status::InvalidArgument(fmt::format("{}: key 'moe_norm_min' must be > 0, got {}", source, c.norm_min));
  ZM_ASSIGN_OR_RETURN(const std::string gate, r.StringOr("moe_gate", "topk"));
  if (gate != "topk")
    return Status::InvalidArgument(fmt::format("{}: unsupported moe_gate '{}' (supported: topk)", source, gate));
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 1.0;
  c.topk_method = TopkMethod::kNoauxTc;  // selection on score + bias, no groups
  c.scoring_func = ScoringFunc::kSoftmax;
  c.n_group = 1;
  c.topk_group = 1;
  return Status::Ok();
}

// GraniteMoeConfig's four scalars (default 1.0 each): each must be finite and > 0.
Status ParseGraniteMultipliers(const KeyReader& r, const std::string& source, ModelConfig& c) {
  double attention = 1.0;
  for (auto [key, out] : {std::pair<const char*, double*>{"embedding_multiplier", &c.embedding_multiplier},
                          {"residual_multiplier", &c.residual_multiplier},
                          {"logits_scaling", &c.logits_scaling},
                          {"attention_multiplier", &attention}}) {
    ZM_ASSIGN_OR_RETURN(*out, r.NumberOr(key, 1.0));
    if (!(std::isfinite(*out) && *out > 0.0))
      return Status::InvalidArgument(fmt::format("{}: key '{}' = {} must be finite and > 0", source, key, *out));
  }
  c.attention_multiplier = attention;
  return Status::Ok();
}

// config.json's `layer_types` as one flag per decoder layer: 1 where the entry is `one`, 0 where it is `zero`;
// empty when the key is absent or null. Errors (naming the key, and the entry): not a list of num_hidden_layers
// entries, an entry that is neither name.
Result<std::vector<uint8_t>> LayerTypeFlags(const json& config, const std::string& source, int64_t n_layers,
                                            const char* one, const char* zero) {
  std::vector<uint8_t> flags;
  auto types = config.find("layer_types");
  if (types == config.end() || types->is_null()) return flags;
  if (!types->is_array() || static_cast<int64_t>(types->size()) != n_layers)
    return Status::InvalidArgument(
        fmt::format("{}: key 'layer_types' must list num_hidden_layers ({}) entries", source, n_layers));
  for (size_t i = 0; i < types->size(); ++i) {
    const json& t = (*types)[i];
    const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
    if (name != one && name != zero)
      return Status::InvalidArgument(
          fmt::format("{}: layer_types[{}] is '{}' (expected {} or {})", source, i, name, one, zero));
    flags.push_back(name == one ? 1 : 0);
  }
  return flags;
}

// granitemoehybrid's layer_types and Mamba2 sizes (GraniteMoeHybridConfig; BambaMixer), and its
// position_embedding_type (rotary only for "rope").
Status ParseMambaLayers(const nlohmann::json& config, const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(c.linear_layers, LayerTypeFlags(config, source, c.num_hidden_layers, "mamba", "attention"));
  if (c.linear_layers.empty())
    c.linear_layers.assign(static_cast<size_t>(c.num_hidden_layers), 1);  // layers_block_type: all "mamba"
  ZM_ASSIGN_OR_RETURN(c.mamba_n_heads, r.PositiveOr("mamba_n_heads", 128));
  ZM_ASSIGN_OR_RETURN(c.mamba_n_groups, r.PositiveOr("mamba_n_groups", 1));
  ZM_ASSIGN_OR_RETURN(c.mamba_d_state, r.PositiveOr("mamba_d_state", 256));
  ZM_ASSIGN_OR_RETURN(c.mamba_d_conv, r.PositiveOr("mamba_d_conv", 4));
  ZM_ASSIGN_OR_RETURN(const int64_t expand, r.PositiveOr("mamba_expand", 2));
  ZM_ASSIGN_OR_RETURN(c.mamba_conv_bias, r.BoolOr("mamba_conv_bias", true));
  ZM_ASSIGN_OR_RETURN(c.mamba_proj_bias, r.BoolOr("mamba_proj_bias", false));
  const int64_t inner = expand * c.hidden_size;
  auto head = config.find("mamba_d_head");
  if (head == config.end() || head->is_null() || (head->is_string() && head->get<std::string>() == "auto")) {
    if (inner % c.mamba_n_heads != 0)
      return Status::InvalidArgument(fmt::format("{}: mamba_n_heads {} does not divide mamba_expand x hidden_size = {}",
                                                 source, c.mamba_n_heads, inner));
    c.mamba_head_dim = inner / c.mamba_n_heads;
  } else {
    ZM_ASSIGN_OR_RETURN(c.mamba_head_dim, r.Positive("mamba_d_head"));
  }
  if (c.mamba_head_dim * c.mamba_n_heads != inner)
    return Status::InvalidArgument(fmt::format("{}: mamba_d_head {} x mamba_n_heads {} != mamba_expand x hidden_size = {}",
                                               source, c.mamba_head_dim, c.mamba_n_heads, inner));
  if (c.mamba_n_heads % c.mamba_n_groups != 0)
    return Status::InvalidArgument(fmt::format("{}: mamba_n_groups {} does not divide mamba_n_heads {}", source,
                                               c.mamba_n_groups, c.mamba_n_heads));
  if (c.mamba_d_state > 4096 || c.mamba_d_conv > 64 || c.mamba_n_heads > 65536)
    return Status::InvalidArgument(fmt::format("{}: Mamba sizes out of range (d_state {}, d_conv {}, heads {})", source,
                                               c.mamba_d_state, c.mamba_d_conv, c.mamba_n_heads));
  auto pe = config.find("position_embedding_type");
  const std::string pe_name = pe == config.end() || pe->is_null() ? std::string("null")
                              : pe->is_string()                   ? pe->get<std::string>()
                                                                  : pe->dump();
  if (pe_name != "rope" && pe_name != "nope" && pe_name != "null")
    return Status::InvalidArgument(fmt::format("{}: position_embedding_type '{}' (expected rope, nope or null)", source,
                                               pe_name));
  c.no_rope = pe_name != "rope";
  return Status::Ok();
}

Status ParseMoe(const KeyReader& r, const std::string& source, ModelConfig& c) {
  switch (c.arch) {
    case ModelArch::kQwen2Moe:
    case ModelArch::kQwen3Moe: {
      ZM_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
      ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.Positive("moe_intermediate_size"));
      ZM_ASSIGN_OR_RETURN(c.decoder_sparse_step, r.PositiveOr("decoder_sparse_step", 1));
      ZM_ASSIGN_OR_RETURN(c.mlp_only_layers, r.IntList("mlp_only_layers"));
      ZM_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", false));
      if (c.arch == ModelArch::kQwen2Moe) {
        ZM_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size, r.Int("shared_expert_intermediate_size"));
      }
      break;
    }
    case ModelArch::kMixtral: {
      ZM_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_local_experts"));
      c.moe_intermediate_size = c.intermediate_size;
      c.norm_topk_prob = true;  // MixtralSparseMoeBlock always renormalises
      break;
    }
    case ModelArch::kOlmoe: {
      ZM_ASSIGN_OR_RETURN(c.num_experts, r.Int("num_experts"));
      c.moe_intermediate_size = c.intermediate_size;
      ZM_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", false));
      break;
    }
    case ModelArch::kGraniteMoe:
    case ModelArch::kGraniteMoeShared:
    case ModelArch::kGraniteMoeHybrid: {
      // GraniteMoeConfig: num_local_experts 8, num_experts_per_tok 2; every expert is intermediate_size
      // wide. JetMoeTopKGating's softmax over the k best logits is mixtral's renormalised top-k.
      ZM_ASSIGN_OR_RETURN(c.num_experts, r.IntOr("num_local_experts", 8));
      c.moe_intermediate_size = c.intermediate_size;
      c.norm_topk_prob = true;
      if (c.arch != ModelArch::kGraniteMoe) {  // GraniteMoeHybridConfig defaults it to 1024
        ZM_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                            r.IntOr("shared_intermediate_size", c.mamba() ? 1024 : 0));
        if (c.shared_expert_intermediate_size < 0)
          return Status::InvalidArgument(fmt::format("{}: key 'shared_intermediate_size' must be >= 0", source));
      }
      if (c.num_experts <= 0)
        return Status::InvalidArgument(fmt::format("{}: key 'num_local_experts' must be >= 1 for '{}'{}", source,
                                                   c.model_type, c.mamba() ? " (a dense Granite 4.0-H is not an MoE)" : ""));
      ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr("num_experts_per_tok", 2));
      break;
    }
    case ModelArch::kDeepseekV2:
    case ModelArch::kDeepseekV3:
    case ModelArch::kGlm4Moe:
    case ModelArch::kGlm4MoeLite:
      ZM_RETURN_IF_ERROR(ParseDeepseekMoe(r, source, c));
      break;
    case ModelArch::kErnie45Moe:
      ZM_RETURN_IF_ERROR(ParseErnieMoe(r, source, c));
      break;
    case ModelArch::kSwitchTransformers:  // parsed on their own paths, never here
    case ModelArch::kGptOss:
    case ModelArch::kQwen3Next:
    case ModelArch::kQwen35Moe:
    case ModelArch::kLfm2Moe:
    case ModelArch::kAfmoe:
      return Status::Internal(fmt::format("{}: ParseMoe called for {}", source, c.model_type));
  }
  if (c.num_experts < 0)
    return Status::InvalidArgument(fmt::format("{}: number of experts must be >= 0, got {}", source, c.num_experts));
  if (c.num_experts > 0) {
    if (c.arch != ModelArch::kErnie45Moe && !c.granite()) {  // ernie4_5_moe read moe_k, granite its default
      ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.Positive("num_experts_per_tok"));
    }
    if (c.num_experts_per_tok > c.num_experts)
      return Status::InvalidArgument(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", source,
                                                 c.num_experts_per_tok, c.num_experts));
  }
  return Status::Ok();
}

// rope_theta: the top-level key, else the one inside the first object of rope_scaling / rope_parameters
// (transformers 5 moves it there), else `fallback` (the config class's default).
Result<double> RopeTheta(const json& config, const KeyReader& r, const std::string& source, double fallback) {
  double theta = fallback;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    auto it = config.find(key);
    if (it != config.end() && it->is_object()) {
      KeyReader pr(*it, source + " " + key);
      ZM_ASSIGN_OR_RETURN(theta, pr.NumberOr("rope_theta", theta));
      break;
    }
  }
  return r.NumberOr("rope_theta", theta);
}

// gpt_oss (GptOssConfig; defaults as its __init__ for keys the file omits). The RoPE and quantization
// keys are read by ParseRopeScaling / ParseQuantization afterwards.
Status ParseGptOssConfig(const json& config, const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveOr("vocab_size", 201088));
  ZM_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveOr("hidden_size", 2880));
  ZM_ASSIGN_OR_RETURN(c.num_hidden_layers, r.PositiveOr("num_hidden_layers", 36));
  ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveOr("intermediate_size", 2880));
  c.moe_intermediate_size = c.intermediate_size;
  ZM_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveOr("max_position_embeddings", 131072));
  ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("rms_norm_eps", 1e-5));
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveOr("num_attention_heads", 64));
  // An explicit null means MHA (num_key_value_heads) / hidden_size / heads (head_dim).
  const bool kv_null = config.contains("num_key_value_heads") && config["num_key_value_heads"].is_null();
  ZM_ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveOr("num_key_value_heads", kv_null ? c.num_attention_heads : 8));
  const bool hd_null = config.contains("head_dim") && config["head_dim"].is_null();
  ZM_ASSIGN_OR_RETURN(c.head_dim, r.PositiveOr("head_dim", hd_null ? c.hidden_size / c.num_attention_heads : 64));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::InvalidArgument(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                               source, c.num_attention_heads, c.num_key_value_heads));
  if (c.head_dim <= 0 || c.head_dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: head_dim {} must be even and > 0 for RoPE", source, c.head_dim));
  ZM_ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", true));
  if (!attention_bias)
    return Status::InvalidArgument(fmt::format(
        "{}: attention_bias = false is not supported for model_type 'gpt_oss' (its attention always has q/k/v/o biases "
        "in transformers 4.55-5.0)", source));
  c.qkv_bias = true;
  c.o_bias = true;
  c.attention_sinks = true;
  ZM_ASSIGN_OR_RETURN(c.rope_theta, RopeTheta(config, r, source, 150000.0));
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", false));
  // Layers: sliding (window) or full attention; default alternating, sliding first.
  ZM_ASSIGN_OR_RETURN(const std::vector<std::string> types, r.Strings("layer_types"));
  if (types.empty()) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back((i + 1) % 2 != 0 ? 1 : 0);
  } else {
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      return Status::InvalidArgument(fmt::format("{}: key 'layer_types' has {} entries for {} num_hidden_layers", source,
                                                 types.size(), c.num_hidden_layers));
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] != "sliding_attention" && types[i] != "full_attention")
        return Status::InvalidArgument(fmt::format(
            "{}: key 'layer_types' entry {} is '{}' (expected \"sliding_attention\" or \"full_attention\")", source, i,
            types[i]));
      c.sliding_layers.push_back(types[i] == "sliding_attention" ? 1 : 0);
    }
  }
  const bool window_null = config.contains("sliding_window") && config["sliding_window"].is_null();
  if (!window_null) {
    ZM_ASSIGN_OR_RETURN(const int64_t window, r.PositiveOr("sliding_window", 128));
    c.sliding_window = window;
  }
  if (!c.sliding_window && std::find(c.sliding_layers.begin(), c.sliding_layers.end(), 1) != c.sliding_layers.end())
    return Status::InvalidArgument(
        fmt::format("{}: sliding_attention layers need a key 'sliding_window' >= 1, got null", source));
  // MoE on every layer.
  const char* experts_key = r.Has("num_local_experts") ? "num_local_experts" : "num_experts";
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.PositiveOr(experts_key, 128));
  if (r.Has("num_local_experts") && r.Has("num_experts")) {
    ZM_ASSIGN_OR_RETURN(const int64_t alias, r.Int("num_experts"));
    if (alias != c.num_experts)
      return Status::InvalidArgument(fmt::format("{}: key 'num_experts' {} differs from 'num_local_experts' {}", source,
                                                 alias, c.num_experts));
  }
  ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr("num_experts_per_tok", 4));
  if (c.num_experts_per_tok > c.num_experts)
    return Status::InvalidArgument(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", source,
                                               c.num_experts_per_tok, c.num_experts));
  // softmax over the k selected logits = the renormalised top-k of the softmax over all of them.
  c.norm_topk_prob = true;
  c.scoring_func = ScoringFunc::kSoftmax;
  c.router_logit_bias = true;
  c.expert_bias = true;
  ZM_ASSIGN_OR_RETURN(c.swiglu_limit, r.NumberOr("swiglu_limit", 7.0));
  ZM_ASSIGN_OR_RETURN(c.swiglu_alpha, r.NumberOr("swiglu_alpha", 1.702));
  if (!(std::isfinite(c.swiglu_limit) && c.swiglu_limit > 0.0 && std::isfinite(c.swiglu_alpha)))
    return Status::InvalidArgument(fmt::format("{}: keys 'swiglu_limit' ({}) / 'swiglu_alpha' ({}) must be finite, the "
                                               "limit > 0", source, c.swiglu_limit, c.swiglu_alpha));
  ZM_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
  (void)act;  // GptOssExperts compute the clamped SwiGLU whatever hidden_act says (as transformers)
  // GptOssConfig's default rope_scaling when the file has none.
  const auto has_rope = [&](const char* key) {
    auto it = config.find(key);
    return it != config.end() && !it->is_null();
  };
  if (!has_rope("rope_scaling") && !has_rope("rope_parameters")) {
    c.rope_scaling.type = RopeScaling::Type::kYarn;
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.beta_fast = 32.0;
    c.rope_scaling.beta_slow = 1.0;
    c.rope_scaling.truncate = false;
    c.rope_scaling.original_max_position_embeddings = 4096;
  }
  return Status::Ok();
}

// afmoe (AfmoeConfig; defaults as its __init__ for keys the file omits).
Status ParseAfmoeConfig(const json& config, const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
  if (act != "silu")
    return Status::InvalidArgument(fmt::format("{}: unsupported hidden_act '{}' (supported: silu)", source, act));
  ZM_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveOr("vocab_size", 200192));
  ZM_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveOr("hidden_size", 2048));
  ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveOr("intermediate_size", 6144));
  ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.PositiveOr("moe_intermediate_size", 1408));
  ZM_ASSIGN_OR_RETURN(c.num_hidden_layers, r.PositiveOr("num_hidden_layers", 32));
  ZM_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveOr("max_position_embeddings", 16384));
  ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("rms_norm_eps", 1e-5));
  ZM_ASSIGN_OR_RETURN(c.rope_theta, RopeTheta(config, r, source, 10000.0));
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", false));
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveOr("num_attention_heads", 16));
  ZM_ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveOr("num_key_value_heads", c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::InvalidArgument(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                               source, c.num_attention_heads, c.num_key_value_heads));
  ZM_ASSIGN_OR_RETURN(c.head_dim, r.PositiveOr("head_dim", 128));
  if (c.head_dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: head_dim {} must be even for RoPE", source, c.head_dim));
  c.use_qk_norm = true;
  c.attn_gate_proj = true;
  c.sandwich_norms = true;
  c.rope_on_sliding_only = true;
  ZM_ASSIGN_OR_RETURN(const bool mup, r.BoolOr("mup_enabled", false));
  if (mup) c.embedding_multiplier = std::sqrt(static_cast<double>(c.hidden_size));  // hidden_size ** 0.5
  // Which layers slide: layer_types, else every global_attn_every_n_layers-th layer full attention.
  ZM_ASSIGN_OR_RETURN(const int64_t every, r.PositiveOr("global_attn_every_n_layers", 4));
  ZM_ASSIGN_OR_RETURN(c.sliding_layers,
                      LayerTypeFlags(config, source, c.num_hidden_layers, "sliding_attention", "full_attention"));
  if (c.sliding_layers.empty())
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back((i + 1) % every != 0 ? 1 : 0);
  ZM_ASSIGN_OR_RETURN(const int64_t window, r.PositiveOr("sliding_window", 1024));
  c.sliding_window = window;
  const bool any_sliding = std::find(c.sliding_layers.begin(), c.sliding_layers.end(), 1) != c.sliding_layers.end();
  if (any_sliding && config.contains("sliding_window") && config["sliding_window"].is_null())
    return Status::InvalidArgument(fmt::format(
        "{}: key 'sliding_window' is null but layer_types has sliding_attention layers (transformers' mask needs a "
        "window)", source));
  // AfmoeConfig sets attention_bias false, but a config.json key would override it and give q/k/v/o biases.
  ZM_ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", false));
  if (attention_bias)
    return Status::InvalidArgument(fmt::format(
        "{}: attention_bias = true is not supported for model_type 'afmoe' (released models have none)", source));
  // The MoE block (AfmoeMoE): noaux_tc's selection without groups over mlp.expert_bias, w / (sum + 1e-20).
  ZM_ASSIGN_OR_RETURN(c.first_k_dense_replace, r.IntOr("num_dense_layers", 1));
  if (c.first_k_dense_replace < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'num_dense_layers' must be >= 0", source));
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.PositiveOr("num_experts", 64));
  ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr("num_experts_per_tok", 6));
  if (c.num_experts_per_tok > c.num_experts)
    return Status::InvalidArgument(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", source,
                                               c.num_experts_per_tok, c.num_experts));
  ZM_ASSIGN_OR_RETURN(c.n_shared_experts, r.IntOr("num_shared_experts", 2));
  if (c.n_shared_experts < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'num_shared_experts' must be >= 0", source));
  ZM_ASSIGN_OR_RETURN(c.routed_scaling_factor, r.NumberOr("route_scale", 1.0));
  if (!std::isfinite(c.routed_scaling_factor))
    return Status::InvalidArgument(fmt::format("{}: key 'route_scale' must be finite", source));
  // Keys of the released configs that transformers' AfmoeTokenChoiceRouter does not read: accepted where they
  // say what it does, refused where they would change it.
  ZM_ASSIGN_OR_RETURN(const bool route_norm, r.BoolOr("route_norm", true));
  if (!route_norm)
    return Status::InvalidArgument(fmt::format(
        "{}: route_norm = false is not supported for model_type 'afmoe' (its router always normalises)", source));
  ZM_ASSIGN_OR_RETURN(const std::string score, r.StringOr("score_func", "sigmoid"));
  if (score != "sigmoid")
    return Status::InvalidArgument(fmt::format(
        "{}: score_func '{}' is not supported for model_type 'afmoe' (supported: sigmoid)", source, score));
  for (const char* key : {"n_group", "topk_group", "num_expert_groups", "num_limited_groups"}) {
    ZM_ASSIGN_OR_RETURN(const int64_t groups, r.IntOr(key, 1));
    if (groups != 1)
      return Status::InvalidArgument(fmt::format(
          "{}: key '{}' = {} is not supported for model_type 'afmoe' (its router selects without groups: 1)", source,
          key, groups));
  }
  c.norm_topk_prob = true;
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopkMethod::kNoauxTc;
  return Status::Ok();
}

// lfm2_moe (Lfm2MoeConfig; defaults as its __init__ for keys the file omits). Which layers are short
// convolutions comes from layer_types ("conv" / "full_attention"), or from the older full_attn_idxs (the
// attention layers' indices) that LFM2's first config.json files carried.
Status ParseLfm2MoeConfig(const json& config, const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
  if (act != "silu")
    return Status::InvalidArgument(fmt::format("{}: unsupported hidden_act '{}' (supported: silu)", source, act));
  ZM_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveOr("vocab_size", 65536));
  ZM_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveOr("hidden_size", 2048));
  ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveOr("intermediate_size", 7168));
  ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.PositiveOr("moe_intermediate_size", 1792));
  ZM_ASSIGN_OR_RETURN(c.num_hidden_layers, r.PositiveOr("num_hidden_layers", 32));
  ZM_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveOr("max_position_embeddings", 128000));
  ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("norm_eps", 1e-5));
  ZM_ASSIGN_OR_RETURN(c.rope_theta, RopeTheta(config, r, source, 1e6));
  // Lfm2MoeConfig: tie_word_embeddings = kwargs.get("tie_embedding", tie_word_embeddings), default true.
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", true));
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_embedding", c.tie_word_embeddings));
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveOr("num_attention_heads", 32));
  ZM_ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveOr("num_key_value_heads", 8));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::InvalidArgument(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                               source, c.num_attention_heads, c.num_key_value_heads));
  // Lfm2MoeAttention: getattr(config, "head_dim", hidden_size // num_attention_heads).
  if (!r.Has("head_dim") && c.hidden_size % c.num_attention_heads != 0)
    return Status::InvalidArgument(fmt::format("{}: hidden_size {} is not a multiple of num_attention_heads {}", source,
                                               c.hidden_size, c.num_attention_heads));
  ZM_ASSIGN_OR_RETURN(c.head_dim, r.PositiveOr("head_dim", c.hidden_size / c.num_attention_heads));
  if (c.head_dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: head_dim {} must be even for RoPE", source, c.head_dim));
  c.use_qk_norm = true;  // q_layernorm / k_layernorm over head_dim, always
  ZM_ASSIGN_OR_RETURN(c.short_conv_bias, r.BoolOr("conv_bias", false));
  ZM_ASSIGN_OR_RETURN(c.linear_conv_kernel_dim, r.PositiveOr("conv_L_cache", 3));
  if (c.linear_conv_kernel_dim > 64)
    return Status::InvalidArgument(fmt::format("{}: key 'conv_L_cache' = {} is above 64", source, c.linear_conv_kernel_dim));
  ZM_ASSIGN_OR_RETURN(c.linear_layers, LayerTypeFlags(config, source, c.num_hidden_layers, "conv", "full_attention"));
  if (c.linear_layers.empty() && r.Has("full_attn_idxs")) {
    ZM_ASSIGN_OR_RETURN(const std::vector<int64_t> attention, r.IntList("full_attn_idxs"));
    c.linear_layers.assign(static_cast<size_t>(c.num_hidden_layers), 1);
    for (int64_t l : attention) {
      if (l < 0 || l >= c.num_hidden_layers)
        return Status::InvalidArgument(fmt::format("{}: full_attn_idxs names layer {} of {}", source, l,
                                                   c.num_hidden_layers));
      c.linear_layers[static_cast<size_t>(l)] = 0;
    }
  } else if (c.linear_layers.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: missing key 'layer_types' (a list of conv / full_attention, one per layer; or full_attn_idxs)", source));
  }
  // The MoE block (Lfm2MoeSparseMoeBlock): noaux_tc's selection without groups.
  ZM_ASSIGN_OR_RETURN(c.first_k_dense_replace, r.IntOr("num_dense_layers", 2));
  if (c.first_k_dense_replace < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'num_dense_layers' must be >= 0", source));
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.PositiveOr("num_experts", 32));
  ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr("num_experts_per_tok", 4));
  if (c.num_experts_per_tok > c.num_experts)
    return Status::InvalidArgument(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", source,
                                               c.num_experts_per_tok, c.num_experts));
  ZM_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", true));
  ZM_ASSIGN_OR_RETURN(c.routed_scaling_factor, r.NumberOr("routed_scaling_factor", 1.0));
  if (!std::isfinite(c.routed_scaling_factor))
    return Status::InvalidArgument(fmt::format("{}: key 'routed_scaling_factor' must be finite", source));
  ZM_ASSIGN_OR_RETURN(c.selection_bias_tensor, r.BoolOr("use_expert_bias", true));
  c.scoring_func = ScoringFunc::kSigmoid;
  c.topk_method = TopkMethod::kNoauxTc;
  c.topk_norm_epsilon = 1e-6;
  return Status::Ok();
}

// qwen3_next (Qwen3NextConfig) and the text settings of qwen3_5_moe (Qwen3_5MoeTextConfig), with their
// defaults for keys the file omits. The RoPE, partial-rotary and quantization keys are read by the
// common parsers afterwards.
Status ParseQwen3NextConfig(const json& config, const KeyReader& r, const std::string& source, ModelConfig& c) {
  const bool v35 = c.arch == ModelArch::kQwen35Moe;
  ZM_ASSIGN_OR_RETURN(const std::string act, r.StringOr("hidden_act", "silu"));
  if (act != "silu")
    return Status::InvalidArgument(fmt::format(
        "{}: unsupported hidden_act '{}' for model_type '{}' (supported: silu: the experts, the conv1d and the gated "
        "norm)", source, act, c.model_type));
  ZM_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveOr("vocab_size", v35 ? 248320 : 151936));
  ZM_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveOr("hidden_size", 2048));
  ZM_ASSIGN_OR_RETURN(c.num_hidden_layers, r.PositiveOr("num_hidden_layers", v35 ? 40 : 48));
  ZM_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveOr("max_position_embeddings", 32768));
  ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("rms_norm_eps", 1e-6));
  ZM_ASSIGN_OR_RETURN(c.rope_theta, RopeTheta(config, r, source, 10000.0));
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", false));
  // Gated full attention.
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveOr("num_attention_heads", 16));
  ZM_ASSIGN_OR_RETURN(c.num_key_value_heads, r.PositiveOr("num_key_value_heads", 2));
  ZM_ASSIGN_OR_RETURN(c.head_dim, r.PositiveOr("head_dim", 256));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::InvalidArgument(fmt::format("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}",
                                               source, c.num_attention_heads, c.num_key_value_heads));
  if (c.head_dim % 2 != 0)
    return Status::InvalidArgument(fmt::format("{}: head_dim {} must be even for RoPE", source, c.head_dim));
  ZM_ASSIGN_OR_RETURN(const bool attention_bias, r.BoolOr("attention_bias", false));
  c.qkv_bias = attention_bias;
  c.o_bias = attention_bias;
  ZM_ASSIGN_OR_RETURN(c.attn_output_gate, r.BoolOr("attn_output_gate", true));
  if (!c.attn_output_gate)
    return Status::InvalidArgument(fmt::format(
        "{}: attn_output_gate = false is not supported for model_type '{}' (transformers always gates its full "
        "attention)", source, c.model_type));
  ZM_ASSIGN_OR_RETURN(const bool use_sliding_window, r.BoolOr("use_sliding_window", false));
  if (use_sliding_window)
    return Status::InvalidArgument(
        fmt::format("{}: use_sliding_window = true is not supported for model_type '{}'", source, c.model_type));
  c.use_qk_norm = true;
  c.zero_centered_norms = true;
  // Gated DeltaNet.
  ZM_ASSIGN_OR_RETURN(c.linear_num_key_heads, r.PositiveOr("linear_num_key_heads", 16));
  ZM_ASSIGN_OR_RETURN(c.linear_num_value_heads, r.PositiveOr("linear_num_value_heads", 32));
  ZM_ASSIGN_OR_RETURN(c.linear_key_head_dim, r.PositiveOr("linear_key_head_dim", 128));
  ZM_ASSIGN_OR_RETURN(c.linear_value_head_dim, r.PositiveOr("linear_value_head_dim", 128));
  ZM_ASSIGN_OR_RETURN(c.linear_conv_kernel_dim, r.PositiveOr("linear_conv_kernel_dim", 4));
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    return Status::InvalidArgument(fmt::format(
        "{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", source, c.linear_num_value_heads,
        c.linear_num_key_heads));
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"linear_num_value_heads", c.linear_num_value_heads},
                               {"linear_key_head_dim", c.linear_key_head_dim},
                               {"linear_value_head_dim", c.linear_value_head_dim},
                               {"linear_conv_kernel_dim", c.linear_conv_kernel_dim}})
    if (v > 4096) return Status::InvalidArgument(fmt::format("{}: key '{}' = {} is above 4096", source, key, v));
  ZM_ASSIGN_OR_RETURN(const std::vector<std::string> types, r.Strings("layer_types"));
  if (types.empty()) {
    ZM_ASSIGN_OR_RETURN(const int64_t interval, r.PositiveOr("full_attention_interval", 4));
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.linear_layers.push_back((i + 1) % interval == 0 ? 0 : 1);
  } else {
    if (static_cast<int64_t>(types.size()) != c.num_hidden_layers)
      return Status::InvalidArgument(fmt::format("{}: key 'layer_types' has {} entries for {} num_hidden_layers", source,
                                                 types.size(), c.num_hidden_layers));
    for (size_t i = 0; i < types.size(); ++i) {
      // transformers maps the legacy names "attention" / "mamba" onto these two.
      const std::string& t = types[i];
      const bool linear = t == "linear_attention" || t == "mamba";
      if (!linear && t != "full_attention" && t != "attention")
        return Status::InvalidArgument(fmt::format(
            "{}: key 'layer_types' entry {} is '{}' (expected \"linear_attention\" or \"full_attention\")", source, i, t));
      c.linear_layers.push_back(linear ? 1 : 0);
    }
  }
  // MoE: the qwen2_moe block (softmax router, top-k, a shared expert gated by sigmoid(shared_expert_gate)).
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.IntOr("num_experts", v35 ? 256 : 512));
  if (c.num_experts < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'num_experts' must be >= 0, got {}", source, c.num_experts));
  ZM_ASSIGN_OR_RETURN(c.num_experts_per_tok, r.PositiveOr("num_experts_per_tok", v35 ? 8 : 10));
  ZM_ASSIGN_OR_RETURN(c.moe_intermediate_size, r.PositiveOr("moe_intermediate_size", 512));
  ZM_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size, r.IntOr("shared_expert_intermediate_size", 512));
  if (c.shared_expert_intermediate_size < 1)
    return Status::InvalidArgument(fmt::format(
        "{}: key 'shared_expert_intermediate_size' = {} is not supported for model_type '{}' (its MoE block always has "
        "a shared expert)", source, c.shared_expert_intermediate_size, c.model_type));
  if (v35) {
    ZM_ASSIGN_OR_RETURN(const int64_t step, r.IntOr("decoder_sparse_step", 1));
    ZM_ASSIGN_OR_RETURN(const std::vector<int64_t> mlp_only, r.IntList("mlp_only_layers"));
    ZM_ASSIGN_OR_RETURN(const bool norm_topk, r.BoolOr("norm_topk_prob", true));
    if (step != 1 || !mlp_only.empty() || !norm_topk)
      return Status::InvalidArgument(fmt::format(
          "{}: decoder_sparse_step {} / mlp_only_layers / norm_topk_prob {} are not supported for model_type "
          "'qwen3_5_moe' (every Qwen3.5-MoE layer is sparse and its router always renormalises)", source, step,
          norm_topk));
    if (c.num_experts < 1)
      return Status::InvalidArgument(fmt::format("{}: key 'num_experts' must be >= 1 for qwen3_5_moe", source));
    c.norm_topk_prob = true;
  } else {
    ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveOr("intermediate_size", 5632));
    ZM_ASSIGN_OR_RETURN(c.decoder_sparse_step, r.PositiveOr("decoder_sparse_step", 1));
    ZM_ASSIGN_OR_RETURN(c.mlp_only_layers, r.IntList("mlp_only_layers"));
    ZM_ASSIGN_OR_RETURN(c.norm_topk_prob, r.BoolOr("norm_topk_prob", true));
  }
  if (c.num_experts > 0 && c.num_experts_per_tok > c.num_experts)
    return Status::InvalidArgument(fmt::format("{}: num_experts_per_tok {} exceeds the {} experts", source,
                                               c.num_experts_per_tok, c.num_experts));
  c.scoring_func = ScoringFunc::kSoftmax;
  c.topk_method = TopkMethod::kGreedy;
  ZM_ASSIGN_OR_RETURN(c.num_nextn_predict_layers, r.IntOr("mtp_num_hidden_layers", 0));
  return Status::Ok();
}

// switch_transformers (SwitchTransformersConfig; defaults as its __init__). The sparse steps: a
// config.json written by transformers carries encoder_sparse_step / decoder_sparse_step, which
// PretrainedConfig sets after __init__ derived them, so they win; without them the step is derived
// as __init__ does: num_layers // num_sparse_encoder_layers (default 3), or num_layers when that is 0.
Status ParseSwitchConfig(const KeyReader& r, const std::string& source, ModelConfig& c) {
  ZM_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveOr("vocab_size", 32128));
  ZM_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveOr("d_model", 768));
  ZM_ASSIGN_OR_RETURN(c.head_dim, r.PositiveOr("d_kv", 64));
  ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveOr("d_ff", 2048));
  c.moe_intermediate_size = c.intermediate_size;
  ZM_ASSIGN_OR_RETURN(c.num_encoder_layers, r.PositiveOr("num_layers", 12));
  ZM_ASSIGN_OR_RETURN(c.num_decoder_layers, r.PositiveOr("num_decoder_layers", c.num_encoder_layers));
  c.num_hidden_layers = c.num_encoder_layers + c.num_decoder_layers;
  ZM_ASSIGN_OR_RETURN(c.num_attention_heads, r.PositiveOr("num_heads", 12));
  c.num_key_value_heads = c.num_attention_heads;
  ZM_ASSIGN_OR_RETURN(c.num_experts, r.PositiveOr("num_experts", 8));
  c.num_experts_per_tok = 1;
  ZM_ASSIGN_OR_RETURN(c.expert_capacity, r.IntOr("expert_capacity", 64));
  if (c.expert_capacity < 0)
    return Status::InvalidArgument(fmt::format("{}: key 'expert_capacity' must be >= 0, got {}", source, c.expert_capacity));
  struct Stack {
    const char* step_key;
    const char* sparse_key;
    int64_t n_layers;
    int64_t* step;
  };
  for (const Stack& s : {Stack{"encoder_sparse_step", "num_sparse_encoder_layers", c.num_encoder_layers, &c.encoder_sparse_step},
                         Stack{"decoder_sparse_step", "num_sparse_decoder_layers", c.num_decoder_layers, &c.decoder_sparse_step}}) {
    if (r.Has(s.step_key)) {
      ZM_ASSIGN_OR_RETURN(*s.step, r.Int(s.step_key));
    } else {
      ZM_ASSIGN_OR_RETURN(const int64_t n_sparse, r.IntOr(s.sparse_key, 3));
      *s.step = n_sparse > 0 ? s.n_layers / n_sparse : s.n_layers;
    }
    if (*s.step < 0)
      return Status::InvalidArgument(fmt::format("{}: key '{}' must be >= 0, got {}", source, s.step_key, *s.step));
  }
  ZM_ASSIGN_OR_RETURN(c.relative_attention_num_buckets, r.PositiveOr("relative_attention_num_buckets", 32));
  ZM_ASSIGN_OR_RETURN(c.relative_attention_max_distance, r.PositiveOr("relative_attention_max_distance", 128));
  if (c.relative_attention_num_buckets < 4)
    return Status::InvalidArgument(fmt::format("{}: key 'relative_attention_num_buckets' must be >= 4, got {}", source,
                                               c.relative_attention_num_buckets));
  ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.NumberOr("layer_norm_epsilon", 1e-6));
  ZM_ASSIGN_OR_RETURN(const std::string router_dtype, r.StringOr("router_dtype", "float32"));
  if (router_dtype != "float32")
    return Status::InvalidArgument(
        fmt::format("{}: unsupported router_dtype '{}' (supported: float32)", source, router_dtype));
  ZM_ASSIGN_OR_RETURN(const bool router_bias, r.BoolOr("router_bias", false));
  if (router_bias)
    return Status::InvalidArgument(fmt::format("{}: router_bias = true is not supported", source));
  // SwitchTransformersConfig reads dense_act_fn (default "relu"); feed_forward_proj is T5's spelling
  // ("relu" or "gated-relu"), accepted when present. Only the plain ReLU DenseActDense exists in
  // modeling_switch_transformers.py.
  for (const char* key : {"dense_act_fn", "feed_forward_proj"}) {
    ZM_ASSIGN_OR_RETURN(const std::string act, r.StringOr(key, "relu"));
    if (act != "relu")
      return Status::InvalidArgument(fmt::format("{}: unsupported {} '{}' (supported: relu; gated variants are not)",
                                                 source, key, act));
  }
  ZM_ASSIGN_OR_RETURN(const bool is_gated_act, r.BoolOr("is_gated_act", false));
  if (is_gated_act)
    return Status::InvalidArgument(fmt::format("{}: is_gated_act = true is not supported (relu only)", source));
  ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", true));
  ZM_ASSIGN_OR_RETURN(const int64_t pad, r.IntOr("pad_token_id", 0));
  ZM_ASSIGN_OR_RETURN(const int64_t start, r.IntOr("decoder_start_token_id", pad));
  if (pad < 0 || pad >= c.vocab_size || start < 0 || start >= c.vocab_size)
    return Status::InvalidArgument(fmt::format("{}: pad_token_id {} / decoder_start_token_id {} outside [0, {})",
                                               source, pad, start, c.vocab_size));
  c.pad_token_id = static_cast<int32_t>(pad);
  c.decoder_start_token_id = static_cast<int32_t>(start);
  if (r.Has("eos_token_id")) {
    ZM_ASSIGN_OR_RETURN(std::vector<int64_t> eos, r.IntOrIntList("eos_token_id"));
    for (int64_t id : eos) c.eos_token_ids.push_back(static_cast<int32_t>(id));
  } else {
    c.eos_token_ids.push_back(1);  // SwitchTransformersConfig default
  }
  c.max_position_embeddings = kSwitchMaxPositions;
  return Status::Ok();
}

}  // namespace

const char* ModelArchName(ModelArch arch) {
  switch (arch) {
    case ModelArch::kQwen2Moe: return "qwen2_moe";
    case ModelArch::kMixtral: return "mixtral";
    case ModelArch::kQwen3Moe: return "qwen3_moe";
    case ModelArch::kOlmoe: return "olmoe";
    case ModelArch::kDeepseekV2: return "deepseek_v2";
    case ModelArch::kSwitchTransformers: return "switch_transformers";
    case ModelArch::kDeepseekV3: return "deepseek_v3";
    case ModelArch::kGlm4Moe: return "glm4_moe";
    case ModelArch::kGlm4MoeLite: return "glm4_moe_lite";
    case ModelArch::kErnie45Moe: return "ernie4_5_moe";
    case ModelArch::kGptOss: return "gpt_oss";
    case ModelArch::kQwen3Next: return "qwen3_next";
    case ModelArch::kQwen35Moe: return "qwen3_5_moe";
    case ModelArch::kGraniteMoe: return "granitemoe";
    case ModelArch::kGraniteMoeShared: return "granitemoeshared";
    case ModelArch::kGraniteMoeHybrid: return "granitemoehybrid";
    case ModelArch::kLfm2Moe: return "lfm2_moe";
    case ModelArch::kAfmoe: return "afmoe";
  }
  return "unknown";
}

const char* SupportedModelTypes() {
  return "qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2, deepseek_v3 (and kimi_k2), glm4_moe, glm4_moe_lite, "
         "ernie4_5_moe, gpt_oss, qwen3_next, qwen3_5_moe, granitemoe, granitemoeshared, granitemoehybrid, lfm2_moe, "
         "afmoe, switch_transformers";
}

bool ModelConfig::mla() const {
  return arch == ModelArch::kDeepseekV2 || arch == ModelArch::kDeepseekV3 || arch == ModelArch::kGlm4MoeLite;
}

bool ModelConfig::deepseek_moe() const {
  return mla() || arch == ModelArch::kGlm4Moe || arch == ModelArch::kErnie45Moe;
}

bool ModelConfig::IsMoeLayer(int64_t layer_id) const {
  if (num_experts <= 0) return false;
  switch (arch) {
    case ModelArch::kMixtral:
    case ModelArch::kOlmoe:
    case ModelArch::kGptOss:
      return true;
    case ModelArch::kQwen35Moe:
    case ModelArch::kGraniteMoe:
    case ModelArch::kGraniteMoeShared:
    case ModelArch::kGraniteMoeHybrid:
      return true;
    case ModelArch::kQwen2Moe:
    case ModelArch::kQwen3Moe:
    case ModelArch::kQwen3Next:
      if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer_id) != mlp_only_layers.end())
        return false;
      return (layer_id + 1) % decoder_sparse_step == 0;
    case ModelArch::kDeepseekV2:
    case ModelArch::kDeepseekV3:
      return layer_id >= first_k_dense_replace && layer_id % moe_layer_freq == 0;
    case ModelArch::kGlm4Moe:
    case ModelArch::kLfm2Moe:
    case ModelArch::kAfmoe:
      return layer_id >= first_k_dense_replace;
    case ModelArch::kErnie45Moe:
      return (layer_id + 1) % moe_layer_freq == 0 && layer_id >= moe_layer_start && layer_id <= moe_layer_end;
    case ModelArch::kGlm4MoeLite:
      if (!sparse_layers.empty())
        return layer_id >= 0 && layer_id < static_cast<int64_t>(sparse_layers.size()) &&
               sparse_layers[static_cast<size_t>(layer_id)] != 0;
      return layer_id >= first_k_dense_replace;
    case ModelArch::kSwitchTransformers: {
      if (layer_id < 0 || layer_id >= num_encoder_layers + num_decoder_layers) return false;
      const bool decoder = layer_id >= num_encoder_layers;
      const int64_t i = decoder ? layer_id - num_encoder_layers : layer_id;
      const int64_t step = decoder ? decoder_sparse_step : encoder_sparse_step;
      return step > 0 && (i % step == 1 || step == 1);
    }
  }
  return false;
}

int64_t ModelConfig::rope_dim() const {
  const int64_t width = mla() ? qk_rope_head_dim : head_dim;
  if (partial_rotary_factor == 1.0) return width;
  return static_cast<int64_t>(static_cast<double>(width) * partial_rotary_factor);
}

int64_t ModelConfig::q_head_dim() const { return mla() ? qk_nope_head_dim + qk_rope_head_dim : head_dim; }

int64_t ModelConfig::v_dim() const { return mla() ? v_head_dim : head_dim; }

double ModelConfig::softmax_scale() const {
  if (attention_multiplier) return *attention_multiplier;  // GraniteMoeAttention: self.scaling
  double scale = 1.0 / std::sqrt(static_cast<double>(q_head_dim()));
  // DeepseekV2Attention: `if self.config.rope_scaling is not None: mscale_all_dim = ...get("mscale_all_dim", 0);
  // if mscale_all_dim: scale *= yarn_get_mscale(factor, mscale_all_dim) ** 2` (any scaling type with
  // a factor; yarn_get_mscale(s, m) = 0.1 * m * ln(s) + 1 for s > 1, else 1).
  if (mla() && rope_scaling.type != RopeScaling::Type::kNone &&
      rope_scaling.mscale_all_dim != 0.0) {
    const double f = rope_scaling.factor;
    const double m = f <= 1.0 ? 1.0 : 0.1 * rope_scaling.mscale_all_dim * std::log(f) + 1.0;
    scale *= m * m;
  }
  return scale;
}

bool ModelConfig::LayerHasRope(int64_t layer_id) const {
  if (no_rope) return false;
  if (!rope_on_sliding_only) return true;
  return layer_id >= 0 && layer_id < static_cast<int64_t>(sliding_layers.size()) &&
         sliding_layers[static_cast<size_t>(layer_id)] != 0;
}

int64_t ModelConfig::attention_window(int64_t layer_id) const {
  if (arch == ModelArch::kGptOss || arch == ModelArch::kAfmoe)
    return layer_id >= 0 && layer_id < static_cast<int64_t>(sliding_layers.size()) &&
                   sliding_layers[static_cast<size_t>(layer_id)] != 0
               ? sliding_window.value_or(0)
               : 0;
  return sliding_window.value_or(0);
}

std::string ModelConfig::UnusedParts() const {
  std::string out;
  if (num_nextn_predict_layers > 0)
    out = fmt::format("{} multi-token-prediction layer{}", num_nextn_predict_layers,
                      num_nextn_predict_layers == 1 ? "" : "s");
  if (vision_tower) out += out.empty() ? "the vision tower" : " and the vision tower";
  return out;
}

bool ModelConfig::IsLinearAttentionLayer(int64_t layer_id) const {
  return layer_id >= 0 && layer_id < static_cast<int64_t>(linear_layers.size()) &&
         linear_layers[static_cast<size_t>(layer_id)] != 0;
}

bool ModelConfig::IsEos(int32_t token_id) const {
  return std::find(eos_token_ids.begin(), eos_token_ids.end(), token_id) != eos_token_ids.end();
}

namespace {

// Bounds on the sizes and constants a checkpoint's config.json may give (issue 37): far above any
// released model, far below what would make the executor allocate without bound or compute
// nonsense (1e9 layers, a negative rope_theta, an epsilon of 1e308). Errors name the key.
Status CheckRanges(const ModelConfig& c) {
  const auto size = [&](const char* key, int64_t v, int64_t hi) -> Status {
    if (v > hi) return Status::InvalidArgument(fmt::format("{}: key '{}' = {} is above {}", c.source, key, v, hi));
    return Status::Ok();
  };
  ZM_RETURN_IF_ERROR(size("vocab_size", c.vocab_size, int64_t{1} << 24));
  ZM_RETURN_IF_ERROR(size("hidden_size", c.hidden_size, int64_t{1} << 17));
  ZM_RETURN_IF_ERROR(size("num_hidden_layers", c.num_hidden_layers, 4096));
  ZM_RETURN_IF_ERROR(size("intermediate_size", c.intermediate_size, int64_t{1} << 20));
  ZM_RETURN_IF_ERROR(size("max_position_embeddings", c.max_position_embeddings, int64_t{1} << 24));
  ZM_RETURN_IF_ERROR(size("num_attention_heads", c.num_attention_heads, 4096));
  ZM_RETURN_IF_ERROR(size("moe_intermediate_size", c.moe_intermediate_size, int64_t{1} << 20));
  ZM_RETURN_IF_ERROR(size("shared_expert_intermediate_size", c.shared_expert_intermediate_size, int64_t{1} << 20));
  ZM_RETURN_IF_ERROR(size("num_experts", c.num_experts, int64_t{1} << 16));
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0 && c.rms_norm_eps < 1))
    return Status::InvalidArgument(
        fmt::format("{}: key 'rms_norm_eps' = {} is outside (0, 1)", c.source, c.rms_norm_eps));
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0 && c.rope_theta <= 1e12))
    return Status::InvalidArgument(fmt::format("{}: key 'rope_theta' = {} is outside (0, 1e12]", c.source, c.rope_theta));
  return Status::Ok();
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const nlohmann::json& config, const std::string& source_path) {
  if (!config.is_object())
    return Status::InvalidArgument(fmt::format("{}: config is not a JSON object", source_path));
  ModelConfig c;
  c.source = source_path;
  ZM_ASSIGN_OR_RETURN(c.arch, ParseArch(config, source_path));
  c.model_type = ModelArchName(c.arch);
  // qwen3_5_moe: the decoder's settings nest in text_config; tie_word_embeddings may sit at either level.
  nlohmann::json text;
  if (c.arch == ModelArch::kQwen35Moe) {
    auto it = config.find("text_config");
    if (it == config.end() || !it->is_object())
      return Status::InvalidArgument(fmt::format("{}: model_type 'qwen3_5_moe' needs an object 'text_config'", source_path));
    text = *it;
    const auto type_it = text.find("model_type");
    const std::string text_type = type_it == text.end() ? std::string("qwen3_5_moe_text")
                                  : type_it->is_string() ? type_it->get<std::string>()
                                                         : type_it->dump();
    if (text_type != "qwen3_5_moe_text")
      return Status::InvalidArgument(fmt::format("{}: text_config.model_type '{}' (expected qwen3_5_moe_text)",
                                                 source_path, text_type));
    auto top_tie = config.find("tie_word_embeddings");
    if (top_tie != config.end() && top_tie->is_boolean()) {
      auto text_tie = text.find("tie_word_embeddings");
      if (text_tie == text.end() || text_tie->is_null()) {
        text["tie_word_embeddings"] = *top_tie;
      } else if (*text_tie != *top_tie) {
        return Status::InvalidArgument(fmt::format(
            "{}: tie_word_embeddings {} differs from text_config's {}", source_path, top_tie->dump(), text_tie->dump()));
      }
    }
    c.weight_prefix = "model.language_model.";
    auto vision = config.find("vision_config");
    c.vision_tower = vision != config.end() && vision->is_object();
  }
  const nlohmann::json& settings = c.arch == ModelArch::kQwen35Moe ? text : config;
  const std::string settings_source = c.arch == ModelArch::kQwen35Moe ? source_path + " text_config" : source_path;
  KeyReader r(settings, settings_source);
  if (c.arch == ModelArch::kSwitchTransformers) {
    ZM_RETURN_IF_ERROR(ParseSwitchConfig(r, source_path, c));
    return c;
  }

  if (c.arch == ModelArch::kGptOss) {  // sizes, attention and MoE with GptOssConfig's defaults
    ZM_RETURN_IF_ERROR(ParseGptOssConfig(config, r, source_path, c));
  } else if (c.hybrid_linear_attention()) {
    ZM_RETURN_IF_ERROR(ParseQwen3NextConfig(settings, r, settings_source, c));
  } else if (c.short_conv()) {
    ZM_RETURN_IF_ERROR(ParseLfm2MoeConfig(config, r, source_path, c));
  } else if (c.arch == ModelArch::kAfmoe) {
    ZM_RETURN_IF_ERROR(ParseAfmoeConfig(config, r, source_path, c));
  } else {
    ZM_ASSIGN_OR_RETURN(std::string act, r.StringOr("hidden_act", "silu"));
    if (act != "silu")
      return Status::InvalidArgument(fmt::format("{}: unsupported hidden_act '{}' (supported: silu)", source_path, act));
    ZM_ASSIGN_OR_RETURN(c.vocab_size, r.Positive("vocab_size"));
    ZM_ASSIGN_OR_RETURN(c.hidden_size, r.Positive("hidden_size"));
    ZM_ASSIGN_OR_RETURN(c.num_hidden_layers, r.Positive("num_hidden_layers"));
    ZM_ASSIGN_OR_RETURN(c.intermediate_size, r.Positive("intermediate_size"));
    ZM_ASSIGN_OR_RETURN(c.max_position_embeddings, r.Positive("max_position_embeddings"));
    ZM_ASSIGN_OR_RETURN(c.rms_norm_eps, r.Number("rms_norm_eps"));
    // transformers 5 moves rope_theta into `rope_parameters`; the top-level key wins when present.
    double default_theta = c.arch == ModelArch::kMixtral ? 1e6 : c.arch == ModelArch::kErnie45Moe ? 500000.0 : 10000.0;
    auto params = config.find("rope_parameters");
    if (params != config.end() && params->is_object()) {
      KeyReader pr(*params, source_path + " rope_parameters");
      ZM_ASSIGN_OR_RETURN(default_theta, pr.NumberOr("rope_theta", default_theta));
    }
    ZM_ASSIGN_OR_RETURN(c.rope_theta, r.NumberOr("rope_theta", default_theta));
    ZM_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.BoolOr("tie_word_embeddings", c.arch == ModelArch::kErnie45Moe));
    ZM_RETURN_IF_ERROR(ParseAttention(r, source_path, c));
    if (c.granite()) ZM_RETURN_IF_ERROR(ParseGraniteMultipliers(r, source_path, c));
    if (c.mamba()) ZM_RETURN_IF_ERROR(ParseMambaLayers(config, r, source_path, c));
  }
  ZM_RETURN_IF_ERROR(ParseRopeScaling(settings, settings_source, c));
  ZM_RETURN_IF_ERROR(ParsePartialRotary(settings, settings_source, c));
  ZM_RETURN_IF_ERROR(ParseQuantization(config, source_path, c));
  if (c.arch != ModelArch::kGptOss && !c.hybrid_linear_attention() && !c.short_conv() && c.arch != ModelArch::kAfmoe)
    ZM_RETURN_IF_ERROR(ParseMoe(r, source_path, c));

  ZM_ASSIGN_OR_RETURN(std::vector<int64_t> eos, r.IntOrIntList("eos_token_id"));
  if (c.arch == ModelArch::kQwen35Moe) {  // the top level may name more
    ZM_ASSIGN_OR_RETURN(const std::vector<int64_t> top, KeyReader(config, source_path).IntOrIntList("eos_token_id"));
    for (int64_t id : top)
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
  }
  for (int64_t id : eos) c.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (r.Has("bos_token_id")) {
    ZM_ASSIGN_OR_RETURN(int64_t bos, r.Int("bos_token_id"));
    c.bos_token_id = static_cast<int32_t>(bos);
  }
  ZM_RETURN_IF_ERROR(CheckRanges(c));
  return c;
}

Result<ModelConfig> LoadModelConfig(const std::string& dir) {
  const std::string path = JoinPath(dir, "config.json");
  if (!FileExists(path)) return Status::NotFound(fmt::format("{}: no config.json", dir));
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::Corruption(fmt::format("{}: not valid JSON", path));
  ZM_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(j, path));

  const std::string gen_path = JoinPath(dir, "generation_config.json");
  if (FileExists(gen_path)) {
    ZM_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
    json g = json::parse(gen_text, nullptr, /*allow_exceptions=*/false);
    if (g.is_discarded() || !g.is_object())
      return Status::Corruption(fmt::format("{}: not a valid JSON object", gen_path));
    KeyReader gr(g, gen_path);
    ZM_ASSIGN_OR_RETURN(std::vector<int64_t> eos, gr.IntOrIntList("eos_token_id"));
    for (int64_t id : eos)
      if (!c.IsEos(static_cast<int32_t>(id))) c.eos_token_ids.push_back(static_cast<int32_t>(id));
  }
  return c;
}

}  // namespace zipmoe
