// The decoder stack of a supported MoE model over a ragged batch of sequences:
//   h = embed_tokens[ids]
//   per layer: h = h + attn(input_layernorm(h)); h = h + mlp_or_moe(post_attention_layernorm(h))
//   logits = lm_head(norm(h)) in float32.
// Linear and MoE layers run once over all new tokens of the batch (concatenated); attention runs
// per sequence against that sequence's KvCache (attention.h). Deterministic: the same inputs give
// bit-identical logits whatever provider supplies the experts, whatever the thread count and
// whichever other sequences share the batch (on the CPU: the BF16 kernels' fixed summation order).
//
// Internal to services/executor. A Model borrows the LoadedModel and the provider (both must
// outlive it); Forward is driven by one thread at a time.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/expert_provider.h"
#include "common/status.h"
#include "services/executor/attention.h"
#include "services/executor/device_expert_cache.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_block.h"
#include "services/executor/rope.h"
#include "services/executor/switch_model.h"

namespace zipmoe::executor {

class Model {
 public:
  // `provider` supplies routed experts (may be null for a model without MoE layers).
  Model(const LoadedModel& model, ExpertProvider* provider, at::Device device, at::ScalarType dtype);

  const ModelConfig& config() const { return model_.config; }
  // A sequence's cache size: bytes per cached position (every attention layer's keys and values in the
  // compute dtype; switch_transformers: decoder self- and cross-attention) and bytes that do not grow
  // (the Gated DeltaNet layers' conv inputs and state, float32).
  int64_t KvBytesPerPosition() const;
  int64_t KvFixedBytes() const;
  // The sliding-window layers' part of KvBytesPerPosition as (window, bytes per position) pairs, one per
  // distinct window, when the caches trim those layers (KvCache::set_trim_windows: at most
  // KvCache::WindowCapacity rows each); empty when every layer holds every position.
  std::vector<std::pair<int64_t, int64_t>> KvWindowedBytesPerPosition() const;
  KvCache NewCache() const {
    if (switch_) return switch_->NewCache();
    KvCache cache(model_.config.num_hidden_layers);
    cache.set_bf16_storage(kv_cache_bf16_);
    cache.set_trim_windows(trims_windows());
    return cache;
  }
  // Sliding-window layers' caches hold every position (GeneratorOptions::kv_window_full) instead of their
  // window's (the default on the CPU executor; a device cache always holds every position).
  void set_kv_window_full(bool full) { kv_window_full_ = full; }
  bool trims_windows() const { return !kv_window_full_ && !switch_ && device_.is_cpu(); }
  // Keys and values in BF16 on the CPU executor (GeneratorOptions::kv_cache_bf16); no effect on an
  // encoder-decoder model or where the compute dtype is not float32 (a GPU's cache is BF16 already).
  void set_kv_cache_bf16(bool bf16) { kv_cache_bf16_ = bf16 && !switch_ && dtype_ == at::kFloat; }
  // Logits rows a sequence's step yields for its `n_fed` new tokens: n_fed, except an
  // encoder-decoder model's first step (the prompt feeds the encoder; one row, for the decoder's
  // start token).
  int64_t LogitsRows(int64_t n_fed, bool first_step) const { return switch_ && first_step ? 1 : n_fed; }

  // Feeds tokens[i] to the sequence of caches[i] (positions caches[i]->length() onward) and advances
  // the caches. Returns float32 logits on the CPU: [sum of tokens[i].size(), vocab] when all_logits,
  // else [n_sequences, vocab] (each sequence's last new position). Every tokens[i] must be non-empty.
  // Errors: kInvalidArgument (token id outside [0, vocab_size), a sequence beyond
  // max_position_embeddings, empty input); MoeForward's errors; kInternal (torch). After an error
  // the caches of this call are unusable.
  // switch_transformers: delegated to SwitchModel::Forward (the first step of a sequence feeds its
  // encoder; see switch_model.h).
  Result<at::Tensor> Forward(const std::vector<const std::vector<int32_t>*>& tokens,
                             const std::vector<KvCache*>& caches, bool all_logits);

  // CoServe's dependency estimate for request grouping (Generator::PredictExperts): per layer
  // ([num_hidden_layers]; empty for dense layers) the distinct experts, ascending, that each MoE
  // layer's router selects (SelectExperts) for the embeddings of `tokens` normalised by that layer's
  // post_attention_layernorm, i.e. skipping attention and every earlier layer. Cheap (one router
  // GEMV per layer and distinct token) and approximate. Errors: kInvalidArgument (a token id outside
  // [0, vocab_size)); kInternal (torch).
  Result<std::vector<std::vector<int32_t>>> PredictExperts(const std::vector<int32_t>& tokens) const;
  // DALI residuals for PrefetchMode::kResidual: residuals[l] ([hidden] float32, or undefined) is
  // added to MoE layer l's router input before the next MoE layer's router predicts its experts.
  void set_prefetch_residuals(std::vector<at::Tensor> residuals) { residuals_ = std::move(residuals); }
  // SMoE expert substitution threshold α (MoeForward, routing.h SubstituteExperts): 0 = exact (the
  // default); in (0, 1) low-score experts the provider does not hold may be replaced.
  void set_substitution_alpha(double alpha) { substitution_alpha_ = alpha; }
  // DALI's CPU/accelerator expert assignment (MoeForward's placement) with this cost model; a model
  // on the CPU in float32 has no accelerator and ignores it. Resets the stats.
  void set_device_placement(const scheduler::DeviceCostModel& cost) {
    placement_.emplace(DevicePlacement{cost, scheduler::DeviceAssignmentStats{}});
  }
  // The placement's cost model and what it decided so far; null without set_device_placement.
  const DevicePlacement* device_placement() const { return placement_ ? &*placement_ : nullptr; }
  // The GPU executor's device F slots (device_expert_cache.h): with a cache, MoE layers on a CUDA
  // device run MoeForwardDevice (moe_device.h) unless a device placement is set.
  void set_device_expert_cache(std::unique_ptr<DeviceExpertCache> cache) { device_experts_ = std::move(cache); }
  const DeviceExpertCache* device_expert_cache() const { return device_experts_.get(); }
  // Called in Forward with every MoE layer's router input (post_attention_layernorm output,
  // [tokens, hidden] in the compute dtype), before the layer runs; empty = none (calibration).
  void set_router_input_observer(std::function<void(int32_t layer_id, const at::Tensor& x)> observer) {
    router_input_observer_ = std::move(observer);
  }

 private:
  // The embedding rows of `ids` (each in [0, vocab_size)) on the compute device and dtype, [ids, hidden],
  // times config.embedding_multiplier (Granite; 1 for every other model). Forward's and PredictExperts' one lookup.
  at::Tensor Embed(const std::vector<int64_t>& ids) const;

  const LoadedModel& model_;
  ExpertProvider* provider_;
  at::Device device_;
  at::ScalarType dtype_;
  RotaryEmbedding rope_;
  std::vector<at::Tensor> residuals_;  // [n_layers] (set_prefetch_residuals)
  std::vector<int32_t> next_moe_;       // [n_layers]: the next MoE layer after each, -1 for none
  double substitution_alpha_ = 0.0;
  std::optional<DevicePlacement> placement_;
  std::function<void(int32_t, const at::Tensor&)> router_input_observer_;
  std::unique_ptr<SwitchModel> switch_;  // switch_transformers only
  std::unique_ptr<DeviceExpertCache> device_experts_;
  bool kv_cache_bf16_ = false;
  bool kv_window_full_ = false;
};

}  // namespace zipmoe::executor
