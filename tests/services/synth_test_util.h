// Helpers of the synth tests (synth_test.cc, synth_checkpoint_test.cc): tiny options per
// architecture, the tensor names/shapes and config keys Hugging Face expects (written out
// independently of model_layout.cc), directory sizes and weight statistics.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/checkpoint/safetensors.h"
#include "services/synth/synth.h"

namespace zipmoe::synth::test {

using nlohmann::json;
using Shape = std::vector<int64_t>;

inline constexpr uint64_t kMaxTinyBytes = 20ull << 20;

inline SynthOptions TinyOptions(const std::string& arch, const std::string& dir, uint64_t seed = 0) {
  SynthOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.out_dir = dir;
  o.seed = seed;
  o.n_threads = 2;
  return o;
}

// The tensor names/shapes the transformers modules register, written out independently of
// model_layout.cc from the HF modeling files.
inline std::map<std::string, Shape> ExpectedTensors(const json& c) {
  std::map<std::string, Shape> t;
  const std::string type = c["model_type"];
  const int64_t h = c["hidden_size"], v = c["vocab_size"], layers = c["num_hidden_layers"];
  const int64_t heads = c["num_attention_heads"], kv = c["num_key_value_heads"];
  const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>() : h / heads;
  t["model.embed_tokens.weight"] = {v, h};
  t["model.norm.weight"] = {h};
  t["lm_head.weight"] = {v, h};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    t[p + "input_layernorm.weight"] = {h};
    t[p + "post_attention_layernorm.weight"] = {h};
    auto mlp = [&](const std::string& q, int64_t inter) {
      t[q + ".gate_proj.weight"] = {inter, h};
      t[q + ".up_proj.weight"] = {inter, h};
      t[q + ".down_proj.weight"] = {h, inter};
    };
    if (type == "deepseek_v2") {
      const int64_t nope = c["qk_nope_head_dim"], rope = c["qk_rope_head_dim"], vd = c["v_head_dim"];
      const int64_t kvr = c["kv_lora_rank"];
      if (c["q_lora_rank"].is_null()) {
        t[p + "self_attn.q_proj.weight"] = {heads * (nope + rope), h};
      } else {
        const int64_t qr = c["q_lora_rank"];
        t[p + "self_attn.q_a_proj.weight"] = {qr, h};
        t[p + "self_attn.q_a_layernorm.weight"] = {qr};
        t[p + "self_attn.q_b_proj.weight"] = {heads * (nope + rope), qr};
      }
      t[p + "self_attn.kv_a_proj_with_mqa.weight"] = {kvr + rope, h};
      t[p + "self_attn.kv_a_layernorm.weight"] = {kvr};
      t[p + "self_attn.kv_b_proj.weight"] = {heads * (nope + vd), kvr};
      t[p + "self_attn.o_proj.weight"] = {h, heads * vd};
      if (l < c["first_k_dense_replace"].get<int64_t>()) {
        mlp(p + "mlp", c["intermediate_size"]);
      } else {
        const int64_t e_n = c["n_routed_experts"], mi = c["moe_intermediate_size"];
        t[p + "mlp.gate.weight"] = {e_n, h};
        for (int64_t e = 0; e < e_n; ++e) mlp(fmt::format("{}mlp.experts.{}", p, e), mi);
        mlp(p + "mlp.shared_experts", c["n_shared_experts"].get<int64_t>() * mi);
      }
      continue;
    }
    t[p + "self_attn.q_proj.weight"] = {heads * hd, h};
    t[p + "self_attn.k_proj.weight"] = {kv * hd, h};
    t[p + "self_attn.v_proj.weight"] = {kv * hd, h};
    t[p + "self_attn.o_proj.weight"] = {h, heads * hd};
    if (type == "qwen2_moe") {
      t[p + "self_attn.q_proj.bias"] = {heads * hd};
      t[p + "self_attn.k_proj.bias"] = {kv * hd};
      t[p + "self_attn.v_proj.bias"] = {kv * hd};
    }
    if (type == "qwen3_moe") {
      t[p + "self_attn.q_norm.weight"] = {hd};
      t[p + "self_attn.k_norm.weight"] = {hd};
    }
    if (type == "olmoe") {
      t[p + "self_attn.q_norm.weight"] = {h};
      t[p + "self_attn.k_norm.weight"] = {(h / heads) * kv};
    }
    if (type == "mixtral") {
      const int64_t e_n = c["num_local_experts"], f = c["intermediate_size"];
      t[p + "block_sparse_moe.gate.weight"] = {e_n, h};
      for (int64_t e = 0; e < e_n; ++e) {
        const std::string q = fmt::format("{}block_sparse_moe.experts.{}.", p, e);
        t[q + "w1.weight"] = {f, h};
        t[q + "w2.weight"] = {h, f};
        t[q + "w3.weight"] = {f, h};
      }
      continue;
    }
    const int64_t e_n = c["num_experts"];
    const int64_t mi = type == "olmoe" ? c["intermediate_size"] : c["moe_intermediate_size"];
    t[p + "mlp.gate.weight"] = {e_n, h};
    for (int64_t e = 0; e < e_n; ++e) mlp(fmt::format("{}mlp.experts.{}", p, e), mi);
    if (type == "qwen2_moe") {
      mlp(p + "mlp.shared_expert", c["shared_expert_intermediate_size"]);
      t[p + "mlp.shared_expert_gate.weight"] = {1, h};
    }
  }
  return t;
}

// The real config.json key sets (Qwen1.5-MoE-A2.7B, Mixtral-8x7B-v0.1, Qwen3-30B-A3B,
// OLMoE-1B-7B-0924, DeepSeek-V2-Lite); qwen2_moe adds mlp_only_layers, a Qwen2MoeConfig default.
inline std::set<std::string> ExpectedConfigKeys(const std::string& arch) {
  const std::map<std::string, std::set<std::string>> keys = {
      {"qwen2_moe",
       {"architectures", "attention_dropout", "bos_token_id", "decoder_sparse_step", "eos_token_id", "hidden_act",
        "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "max_window_layers",
        "mlp_only_layers", "model_type", "moe_intermediate_size", "norm_topk_prob", "num_attention_heads",
        "num_experts", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "output_router_logits",
        "rms_norm_eps", "rope_theta", "router_aux_loss_coef", "shared_expert_intermediate_size", "sliding_window",
        "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache", "use_sliding_window",
        "vocab_size"}},
      {"mixtral",
       {"architectures", "attention_dropout", "bos_token_id", "eos_token_id", "hidden_act", "hidden_size",
        "initializer_range", "intermediate_size", "max_position_embeddings", "model_type", "num_attention_heads",
        "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "num_local_experts",
        "output_router_logits", "rms_norm_eps", "rope_theta", "router_aux_loss_coef", "sliding_window",
        "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache", "vocab_size"}},
      {"qwen3_moe",
       {"architectures", "attention_bias", "attention_dropout", "bos_token_id", "decoder_sparse_step",
        "eos_token_id", "head_dim", "hidden_act", "hidden_size", "initializer_range", "intermediate_size",
        "max_position_embeddings", "max_window_layers", "mlp_only_layers", "model_type", "moe_intermediate_size",
        "norm_topk_prob", "num_attention_heads", "num_experts", "num_experts_per_tok", "num_hidden_layers",
        "num_key_value_heads", "output_router_logits", "rms_norm_eps", "rope_scaling", "rope_theta",
        "router_aux_loss_coef", "sliding_window", "tie_word_embeddings", "torch_dtype", "transformers_version",
        "use_cache", "use_sliding_window", "vocab_size"}},
      {"olmoe",
       {"architectures", "attention_bias", "attention_dropout", "clip_qkv", "eos_token_id", "hidden_act",
        "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "model_type",
        "norm_topk_prob", "num_attention_heads", "num_experts", "num_experts_per_tok", "num_hidden_layers",
        "num_key_value_heads", "output_router_logits", "pad_token_id", "rms_norm_eps", "rope_scaling",
        "rope_theta", "router_aux_loss_coef", "tie_word_embeddings", "torch_dtype", "transformers_version",
        "use_cache", "vocab_size"}},
      {"deepseek_v2",
       {"architectures", "attention_bias", "attention_dropout", "auto_map", "aux_loss_alpha", "bos_token_id",
        "eos_token_id", "ep_size", "first_k_dense_replace", "hidden_act", "hidden_size", "initializer_range",
        "intermediate_size", "kv_lora_rank", "max_position_embeddings", "model_type", "moe_intermediate_size",
        "moe_layer_freq", "n_group", "n_routed_experts", "n_shared_experts", "norm_topk_prob",
        "num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
        "pretraining_tp", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "rms_norm_eps", "rope_scaling",
        "rope_theta", "routed_scaling_factor", "scoring_func", "seq_aux", "tie_word_embeddings", "topk_group",
        "topk_method", "torch_dtype", "transformers_version", "use_cache", "v_head_dim", "vocab_size"}},
  };
  return keys.at(arch);
}

inline uint64_t DirectoryBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) total += e.file_size();
  return total;
}

inline std::vector<float> ToFloats(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.spec.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, v.data + 2 * i, 2);
    out[i] = Bf16ToFloat(bits);
  }
  return out;
}

inline void MeanStd(const std::vector<float>& x, double* mean, double* std) {
  double s = 0, s2 = 0;
  for (float v : x) {
    s += v;
    s2 += static_cast<double>(v) * v;
  }
  *mean = s / x.size();
  *std = std::sqrt(s2 / x.size() - *mean * *mean);
}

}  // namespace zipmoe::synth::test
