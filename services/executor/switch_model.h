// The encoder-decoder forward pass of switch_transformers (SwitchTransformersForConditionalGeneration,
// transformers' modeling_switch_transformers.py) over a ragged batch of sequences, with routed experts
// supplied by an ExpertProvider under the global layer numbering of model_config.h (encoder blocks
// 0..num_layers-1, decoder blocks after them), so every provider, policy and budget applies.
//
//   T5 layer norm: w * (x * rsqrt(mean(x², -1) + eps)) in float32 (no mean, no bias; RmsNorm);
//   attention: softmax(q kᵀ + position_bias [+ mask]) v, with NO 1/sqrt(d_kv) scaling; the position
//     bias of a stack comes from its block 0's relative_attention_bias [buckets, heads] and every block
//     of the stack adds it (RelativePositionBucket: bidirectional in the encoder, causal in the
//     decoder); cross-attention has no position bias, and its K/V are computed once per sequence
//     from the encoder output and kept in the sequence's KvCache;
//   dense FF: wo(relu(wi(x))); sparse FF (SwitchTransformersSparseMLP, Top1Router): router logits =
//     classifier(x) in float32, softmax in float32, expert = argmax (first on ties), and a token is
//     kept iff it is among the first expert_capacity tokens of its sequence (in this forward call)
//     routed to that expert (cumsum of the one-hot over the sequence); output = max prob * expert(x)
//     for kept tokens and 0 for dropped ones (transformers >= 4.4x: `next_states = zeros`; older
//     releases passed x through), then the layer adds the residual;
//   logits: decoder final_layer_norm, times d_model^-0.5 when tie_word_embeddings, then lm_head.
// A ragged batch (each sequence attends only to itself) equals HF with right padding and an attention
// mask: padded keys get weight exp(finfo.min) = 0 and padded tokens come after every real one in the
// capacity cumsum. Generation (HF with use_cache) feeds one decoder token per step, so decode steps
// never drop tokens; only the encoder pass (and a multi-token decoder call) can.
//
// Internal to services/executor. A SwitchModel borrows the LoadedModel and the provider (both must
// outlive it); Forward is driven by one thread at a time.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "services/executor/attention.h"
#include "services/executor/model_weights.h"

namespace zipmoe::executor {

// SwitchTransformersAttention._relative_position_bucket for one relative position (memory position
// minus query position). bidirectional (encoder): half the buckets per sign, a positive offset adds
// num_buckets/2; causal (decoder): n = -min(relative_position, 0). Then n < max_exact = buckets/2 is
// its own bucket, larger n maps to max_exact + int(log(n / max_exact) / log(max_distance / max_exact)
// * (buckets - max_exact)) computed in float32 as torch does, clipped to buckets - 1. Pure.
int64_t RelativePositionBucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                               int64_t max_distance);

// Top1Router with expert capacity over a ragged batch. probs: [n_tokens, n_experts] float32 softmax
// rows; sequences are the row ranges [starts[i], starts[i] + lengths[i]). Fills, per token, the
// argmax expert (first on ties) or -1 if it was dropped (its sequence already sent `capacity` earlier
// tokens to that expert), and its max probability (kept for dropped tokens too). Pure.
struct SwitchRoute {
  std::vector<int32_t> expert;  // [n_tokens]: expert id, or -1 for a dropped token
  std::vector<float> prob;      // [n_tokens]: max router probability
};
SwitchRoute RouteTop1WithCapacity(const float* probs, int64_t n_experts, const std::vector<int64_t>& starts,
                                  const std::vector<int64_t>& lengths, int64_t capacity);

class SwitchModel {
 public:
  SwitchModel(const LoadedModel& model, ExpertProvider* provider, at::Device device, at::ScalarType dtype);

  // A sequence's state: the decoder's self-attention cache (one layer per decoder block) and, once the
  // encoder ran, the cross-attention K/V.
  KvCache NewCache() const { return KvCache(model_.config.num_decoder_layers); }

  // One step of a ragged batch. A sequence whose cache has no encoder state yet (has_cross() false)
  // is fed its ENCODER input: the encoder runs over tokens[i], its cross-attention K/V are stored, and
  // the decoder is fed decoder_start_token_id (one logits row). Otherwise tokens[i] are decoder tokens
  // at positions caches[i]->length() onward (one row each). Returns float32 CPU logits: every row
  // when all_logits, else each sequence's last row ([n_sequences, vocab]).
  // Errors: kInvalidArgument (token id outside [0, vocab_size), empty input, more than
  // max_position_embeddings tokens, a lease for an unrequested/gated expert or with other shapes);
  // the provider's errors; kInternal (torch). After an error the caches of this call are unusable.
  Result<at::Tensor> Forward(const std::vector<const std::vector<int32_t>*>& tokens,
                             const std::vector<KvCache*>& caches, bool all_logits);

 private:
  struct Batch;
  Result<at::Tensor> Stack(bool decoder, const at::Tensor& h_in, Batch& batch);
  Result<at::Tensor> SparseFf(int32_t layer_id, const SwitchBlockWeights& w, const at::Tensor& x, const Batch& batch);

  const LoadedModel& model_;
  ExpertProvider* provider_;
  at::Device device_;
  at::ScalarType dtype_;
};

}  // namespace zipmoe::executor
