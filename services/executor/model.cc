#include "services/executor/model.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "common/trace_events.h"
#include "services/executor/linear_attention.h"
#include "services/executor/moe_block.h"
#include "services/executor/routing.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {

Model::Model(const LoadedModel& model, ExpertProvider* provider, at::Device device, at::ScalarType dtype)
    : model_(model), provider_(provider), device_(device), dtype_(dtype), rope_(model.config, device) {
  // The next MoE layer after each layer (prefetch predictions), once: -1 after the last.
  if (model.config.arch == ModelArch::kSwitchTransformers)
    switch_ = std::make_unique<SwitchModel>(model, provider, device, dtype);
  const std::vector<LayerWeights>& layers = model.weights.layers;
  next_moe_.assign(layers.size(), -1);
  for (int64_t l = static_cast<int64_t>(layers.size()) - 2; l >= 0; --l) {
    const size_t n = static_cast<size_t>(l + 1);
    next_moe_[static_cast<size_t>(l)] = layers[n].is_moe ? static_cast<int32_t>(n) : next_moe_[n];
  }
}

int64_t Model::KvBytesPerPosition() const {
  const ModelConfig& c = model_.config;
  const int64_t elem = kv_cache_bf16_ ? 2 : static_cast<int64_t>(c10::elementSize(dtype_));
  if (switch_) return 2 * c.num_decoder_layers * 2 * c.num_attention_heads * c.head_dim * elem;  // self + cross
  int64_t per_layer = 0;
  const std::vector<LayerWeights>& layers = model_.weights.layers;
  if (c.mla() && std::any_of(layers.begin(), layers.end(),
                             [](const LayerWeights& l) { return l.attn.kv_b_k_t.defined(); })) {
    per_layer = c.kv_lora_rank + c.qk_rope_head_dim;  // the latent cache: keys only (attention.h)
  } else if (c.mla()) {
    per_layer = c.num_attention_heads * (c.q_head_dim() + c.v_dim());
  } else {
    per_layer = c.num_key_value_heads * 2 * c.head_dim;
  }
  int64_t total = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (!c.IsLinearAttentionLayer(l)) total += per_layer * elem;
  return total;
}

std::vector<std::pair<int64_t, int64_t>> Model::KvWindowedBytesPerPosition() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  if (!trims_windows()) return out;
  const ModelConfig& c = model_.config;
  const int64_t elem = kv_cache_bf16_ ? 2 : static_cast<int64_t>(c10::elementSize(dtype_));
  // Windowed layers are GQA ones (gpt_oss, afmoe, mixtral): keys and values of every KV head.
  const int64_t per_layer = c.num_key_value_heads * 2 * c.head_dim * elem;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t window = c.attention_window(l);
    if (window <= 0 || c.IsLinearAttentionLayer(l) || c.mla()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == window; });
    if (it == out.end()) {
      out.emplace_back(window, per_layer);
    } else {
      it->second += per_layer;
    }
  }
  return out;
}

int64_t Model::KvFixedBytes() const {
  const ModelConfig& c = model_.config;
  const int64_t channels = 2 * c.linear_num_key_heads * c.linear_key_head_dim +
                           c.linear_num_value_heads * c.linear_value_head_dim;
  // A Gated DeltaNet layer's delta-rule state and conv history; a Mamba2 layer's SSM state [nh, P, N] and
  // conv history [K-1, Cc] (linear_attention.h).
  // An lfm2_moe short convolution's last K-1 inputs [K-1, H].
  const int64_t per_layer =
      c.mamba()        ? c.mamba_n_heads * c.mamba_head_dim * c.mamba_d_state + (c.mamba_d_conv - 1) * c.mamba_conv_dim()
      : c.short_conv() ? (c.linear_conv_kernel_dim - 1) * c.hidden_size
                       : c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim +
                             (c.linear_conv_kernel_dim - 1) * channels;
  int64_t total = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.IsLinearAttentionLayer(l)) total += per_layer * static_cast<int64_t>(sizeof(float));
  return total;
}

at::Tensor Model::Embed(const std::vector<int64_t>& ids) const {
  const at::Tensor& table = model_.weights.embed_tokens;
  const at::Tensor id_tensor = at::tensor(ids, at::TensorOptions().dtype(at::kLong)).to(table.device());
  at::Tensor h = table.index_select(0, id_tensor).to(device_, dtype_);
  const double scale = model_.config.embedding_multiplier;  // GraniteMoeModel; 1 elsewhere
  return scale == 1.0 ? h : h * scale;
}

Result<at::Tensor> Model::Forward(const std::vector<const std::vector<int32_t>*>& tokens,
                                  const std::vector<KvCache*>& caches, bool all_logits) {
  if (switch_) return switch_->Forward(tokens, caches, all_logits);
  const ModelConfig& c = model_.config;
  if (tokens.empty() || tokens.size() != caches.size())
    return Status::InvalidArgument(
        fmt::format("Forward: {} token lists for {} caches", tokens.size(), caches.size()));
  BatchLayout batch;
  std::vector<int64_t> ids;
  std::vector<int64_t> positions;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::vector<int32_t>& seq = *tokens[i];
    if (seq.empty()) return Status::InvalidArgument(fmt::format("Forward: sequence {} has no new tokens", i));
    const int64_t pos0 = caches[i]->length();
    const int64_t len = static_cast<int64_t>(seq.size());
    if (pos0 + len > c.max_position_embeddings)
      return Status::InvalidArgument(fmt::format(
          "sequence {}: {} positions exceed max_position_embeddings {} of {}", i, pos0 + len,
          c.max_position_embeddings, c.source));
    batch.starts.push_back(static_cast<int64_t>(ids.size()));
    batch.lengths.push_back(len);
    batch.caches.push_back(caches[i]);
    for (int64_t j = 0; j < len; ++j) {
      const int32_t id = seq[static_cast<size_t>(j)];
      if (id < 0 || id >= c.vocab_size)
        return Status::InvalidArgument(
            fmt::format("sequence {}: token id {} is outside the vocabulary [0, {})", i, id, c.vocab_size));
      ids.push_back(id);
      positions.push_back(pos0 + j);
    }
  }

  at::Tensor logits;
  const trace::TraceSpan step_span("step", [&] {
    return trace::SpanText(fmt::format("forward {} tokens", ids.size()),
                           fmt::format(R"({{"tokens": {}, "sequences": {}}})", ids.size(), tokens.size()));
  }, trace::Activity::kForward);
  ZM_RETURN_IF_ERROR(TorchBoundary("forward", [&]() -> Status {
    // Straight to the CPU/CUDA kernels, past autograd's dispatch and view tracking: nothing here is
    // differentiated, and a decode step's few dozen small torch operators a layer (views, narrow,
    // transpose) cost ~30 % less this way (issue 35; the tensors stay ordinary, unlike InferenceMode's).
    const at::AutoDispatchBelowADInplaceOrView no_autograd;
    const ModelWeights& w = model_.weights;
    const at::TensorOptions long_opts = at::TensorOptions().dtype(at::kLong);
    at::Tensor h = Embed(ids);
    const double residual_scale = c.residual_multiplier;               // GraniteMoeDecoderLayer
    std::tie(batch.cos, batch.sin) = rope_.CosSin(at::tensor(positions, long_opts));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
      trace::TraceSpan attention_span("layer", [&] { return fmt::format("attention {}", l); });
      const at::Tensor attn_in = RmsNorm(h, lw.input_layernorm, c.rms_norm_eps);
      at::Tensor attn_out = lw.linear_attention ? LinearAttentionForward(c, lw.linear_attn, l, attn_in, batch)
                                                : AttentionForward(c, lw.attn, l, attn_in, batch);
      if (lw.attn_out_norm.defined()) attn_out = RmsNorm(attn_out, lw.attn_out_norm, c.rms_norm_eps);  // afmoe
      h = AddResidual(std::move(h), attn_out, residual_scale);
      attention_span.End();
      const trace::TraceSpan mlp_span("layer", [&] { return fmt::format("{} {}", lw.is_moe ? "moe" : "mlp", l); });
      const at::Tensor mlp_in = RmsNorm(h, lw.post_attention_layernorm, c.rms_norm_eps);
      if (lw.is_moe) {
        if (provider_ == nullptr)
          return Status::InvalidArgument(fmt::format("layer {} is a MoE layer but no expert provider is set", l));
        if (router_input_observer_) router_input_observer_(static_cast<int32_t>(l), mlp_in);
        NextMoeLayer next;
        const PrefetchMode prefetch = provider_->prefetch_mode();
        if (prefetch != PrefetchMode::kNone && next_moe_[static_cast<size_t>(l)] >= 0) {
          next.layer_id = next_moe_[static_cast<size_t>(l)];
          next.weights = &w.layers[static_cast<size_t>(next.layer_id)];
          if (prefetch == PrefetchMode::kResidual && static_cast<size_t>(l) < residuals_.size())
            next.residual = residuals_[static_cast<size_t>(l)];
        }
        ZM_ASSIGN_OR_RETURN(at::Tensor moe_out,
                            MoeForward(c, lw, static_cast<int32_t>(l), mlp_in, *provider_, next.weights ? &next : nullptr,
                                       substitution_alpha_, placement_ ? &*placement_ : nullptr,
                                       device_experts_.get()));
        if (lw.mlp_out_norm.defined()) moe_out = RmsNorm(moe_out, lw.mlp_out_norm, c.rms_norm_eps);  // afmoe
        h = AddResidual(std::move(h), moe_out, residual_scale);
      } else {
        at::Tensor mlp_out = MlpForward(lw.dense_mlp, mlp_in);
        if (lw.mlp_out_norm.defined()) mlp_out = RmsNorm(mlp_out, lw.mlp_out_norm, c.rms_norm_eps);
        h = AddResidual(std::move(h), mlp_out, residual_scale);
      }
    }
    // Each sequence's last row (a decode step's rows are those already: one token a sequence).
    if (!all_logits && static_cast<size_t>(h.size(0)) != batch.starts.size()) {
      std::vector<int64_t> last;
      for (size_t i = 0; i < batch.starts.size(); ++i) last.push_back(batch.starts[i] + batch.lengths[i] - 1);
      h = h.index_select(0, at::tensor(last, long_opts).to(device_));
    }
    // The final norm and lm_head, and (on a GPU) the step's last wait for the device.
    const trace::TraceSpan head_span("layer", [] { return std::string("final norm and lm_head"); });
    logits = Linear(RmsNorm(h, w.norm, c.rms_norm_eps), w.lm_head);
    if (c.logits_scaling != 1.0) logits = logits / c.logits_scaling;  // GraniteMoeForCausalLM
    logits = logits.to(at::kCPU, at::kFloat).contiguous();
    return Status::Ok();
  }));
  for (size_t i = 0; i < caches.size(); ++i) caches[i]->Advance(batch.lengths[i]);
  return logits;
}

Result<std::vector<std::vector<int32_t>>> Model::PredictExperts(const std::vector<int32_t>& tokens) const {
  const ModelConfig& c = model_.config;
  std::vector<int32_t> ids(tokens);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int32_t id : ids) {
    if (id < 0 || id >= c.vocab_size)
      return Status::InvalidArgument(fmt::format("token id {} is outside the vocabulary [0, {})", id, c.vocab_size));
  }
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(c.num_hidden_layers));
  if (ids.empty() || switch_) return out;  // no estimate for encoder-decoder models (their prompt feeds the encoder)
  ZM_RETURN_IF_ERROR(TorchBoundary("predict experts", [&]() -> Status {
    const ModelWeights& w = model_.weights;
    const at::Tensor h = Embed(std::vector<int64_t>(ids.begin(), ids.end()));
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> topk_ids(static_cast<size_t>(n * c.num_experts_per_tok));
    std::vector<float> topk_weights(topk_ids.size());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
      if (!lw.is_moe) continue;
      const at::Tensor x = RmsNorm(h, lw.post_attention_layernorm, c.rms_norm_eps).to(at::kFloat);
      const at::Tensor scores = RouterScores(c, Linear(x, lw.router)).to(at::kCPU).contiguous();
      SelectExperts(scores.data_ptr<float>(), n, RouterParamsFor(c, SelectionBias(lw)), topk_ids.data(),
                    topk_weights.data());
      std::vector<int32_t>& layer = out[static_cast<size_t>(l)];
      layer.assign(topk_ids.begin(), topk_ids.end());
      std::sort(layer.begin(), layer.end());
      layer.erase(std::unique(layer.begin(), layer.end()), layer.end());
    }
    return Status::Ok();
  }));
  return out;
}

}  // namespace zipmoe::executor
