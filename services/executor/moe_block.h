// The sparse MoE block of one decoder layer (Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock,
// Qwen3MoeSparseMoeBlock, OlmoeSparseMoeBlock, DeepseekV2MoE), with routed experts supplied by an
// ExpertProvider (common/expert_provider.h):
//   1. router_logits = gate(x) in float32, softmax in float32, top-k + weights (routing.h);
//   2. BeginLayer(routing) with the selected experts ascending and their token counts;
//   3. NextReady() once per selected expert, in whatever order the provider delivers: the expert's
//      tokens are gathered (index_select), run through down(silu(gate(x)) * up(x)) as one matmul
//      each, scaled by their combine weights, and the lease is released;
//   4. EndLayer; outputs are summed with index_add_ in ascending expert id order (the HF loop's
//      order), so the result never depends on arrival order;
//   5. shared experts: qwen2_moe adds shared_expert(x) * sigmoid(shared_expert_gate(x)); deepseek_v2
//      adds shared_experts(x) unscaled.
// Expert weights arrive as BF16 (interleaved or as E/SM planes); the CPU path reads them in place
// with the BF16 kernels and computes in float32 (ExpertForward).
//
// Internal to services/executor. One thread drives a block at a time (as the provider requires).
#pragma once

#include <ATen/ATen.h>

#include <array>

#include <cstdint>
#include <functional>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "services/executor/model_weights.h"
#include "services/executor/routing.h"
#include "services/scheduler/device_assignment.h"

namespace zipmoe::executor {

class DeviceExpertCache;  // device_expert_cache.h

// down(silu(gate(x)) * up(x)); x: [n, hidden] -> [n, hidden].
at::Tensor MlpForward(const MlpWeights& w, const at::Tensor& x);

// The shared experts' contribution to a MoE layer's output (x: [n, hidden] -> [n, hidden], x's dtype):
// qwen2_moe's shared_expert(x) * sigmoid(shared_expert_gate(x)), deepseek_v2's shared_experts(x);
// undefined when the layer has none.
at::Tensor SharedExpertForward(const ModelConfig& config, const LayerWeights& w, const at::Tensor& x);

// The block scales of one FP8 expert (LayerWeights::expert_scales: gate, up, down
// `weight_scale_inv`, float32 [ceil(rows / block_rows), ceil(cols / block_cols)] each, host memory).
struct Fp8ExpertScales {
  std::array<const float*, 3> scale_inv{};
  int64_t block_rows = 0;
  int64_t block_cols = 0;
};

// The scales of expert `ew` of layer `layer_id` when it is FP8 (all null otherwise). Errors:
// kInvalidArgument naming the layer and expert when an FP8 expert has none (no FP8
// quantization_config, or no weight_scale_inv in the checkpoint).
Result<Fp8ExpertScales> ExpertFp8Scales(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                                        const ExpertWeightsView& ew);

// gpt_oss's expert terms (transformers' GptOssExperts): per-expert biases after gate, up and down
// (float32 on the host: gate/up [intermediate], down [hidden]) and the clamped SwiGLU
// (up.clamp(-limit, limit) + 1) * gate.clamp(max=limit) * sigmoid(alpha * gate.clamp(max=limit)).
// All null for the other architectures.
struct ExpertBiases {
  const float* gate = nullptr;
  const float* up = nullptr;
  const float* down = nullptr;
  float swiglu_limit = 0.0f;
  float swiglu_alpha = 0.0f;
};
// Expert `expert_id`'s terms from the layer's weights (empty when the layer has no expert biases).
ExpertBiases ExpertBiasesOf(const ModelConfig& config, const LayerWeights& w, int32_t expert_id);

// gpt_oss's expert on x: [m, hidden] with its matrices in x's dtype and device (gate/up [inter, hidden],
// down [hidden, inter]): down(act) + b_down with act the clamped SwiGLU of gate(x) + b_gate and
// up(x) + b_up, computed in float32, returned in x's dtype.
at::Tensor BiasedExpertForward(const MlpWeights& expert, const ExpertBiases& biases, const at::Tensor& x);

// One routed expert, down(silu(gate(x)) * up(x)) (or down(relu(up(x))) for a gate-less expert,
// ExpertWeightsView::gated false), on its tokens x: [m, hidden] -> [m, hidden].
// CPU float32: BF16 weights are read in place by the kernels (kernels/bf16_gemm.h), from the
// interleaved BF16 tensors or, when the provider serves the expert unrecovered, straight from its
// E/SM planes (recovery fused into the matmul; the same bits either way); F32 experts are read in
// place and F16 ones widened (exact), through the same kernels (Linear). On the GPU the tensors are
// converted to x's dtype and device (planes recovered on the CPU first; FP8 dequantized to float32
// with `fp8`'s scales first, MXFP4 dequantized likewise, kernels/fp8_dequant.h); with `biases` (gpt_oss)
// the biased projections and the clamped SwiGLU, computed in float32.
at::Tensor ExpertForward(const ExpertWeightsView& ew, const at::Tensor& x, const Fp8ExpertScales& fp8 = {},
                         const ExpertBiases& biases = {});

// The next MoE layer, for prefetching (ExpertProvider::Prefetch): its id, weights (its router) and,
// for PrefetchMode::kResidual, the calibrated residual r added to this layer's router input
// ([hidden] float32, or undefined for none).
struct NextMoeLayer {
  int32_t layer_id = -1;
  const LayerWeights* weights = nullptr;
  at::Tensor residual;
};

// The prediction handed to Prefetch: scores [n_tokens, n_experts] float32 softmax probabilities of
// the next layer's router; per token the experts the architecture's top-k selection picks
// (SelectExperts), ranked over the batch by how many tokens picked them (the workload), then by the
// sum of their probabilities, then lower id; best first. tokens_per_expert: how many tokens picked each.
// selection_bias: the next layer's e_score_correction_bias (SelectionBias), null for none.
LayerRouting RankPredictedExperts(const ModelConfig& config, int32_t layer_id, const float* scores, int64_t n_tokens,
                                  const float* selection_bias = nullptr);

// The layer's e_score_correction_bias as a float32 pointer (noaux_tc routers), else null.
const float* SelectionBias(const LayerWeights& w);

// Router scores from router logits [N, n_experts] float32 on any device: softmax over the experts
// or sigmoid per value (config.scoring_func).
at::Tensor RouterScores(const ModelConfig& config, const at::Tensor& logits);

// ---- Steps shared by the MoE block's paths (moe_block.cc; the GPU executor's moe_device.cc) ----

// Whether the block predicts the next layer's experts for `provider` at all.
bool Predicts(const ExpertProvider& provider, const NextMoeLayer* next);

// A layer's routing: the per-expert token rows and weights, and the LayerRouting for BeginLayer.
struct RoutedLayer {
  ExpertAssignment assign;
  LayerRouting routing;  // every selected expert (ascending), tokens, mean scores, substitutions
};
// Top-k selection (SelectExperts) over scores [n, n_experts] (ScoreRows' router scores; selection_bias
// the layer's SelectionBias), SMoE
// substitution when substitution_alpha > 0 (an expert counts as cached when the provider's
// CachedExperts or `also_cached` says so), grouping by expert. Does not call BeginLayer.
Result<RoutedLayer> RouteExperts(const ModelConfig& config, int32_t layer_id, const float* scores,
                                 const float* selection_bias, int64_t n, ExpertProvider& provider,
                                 double substitution_alpha,
                                 const std::function<bool(int32_t)>& also_cached);
// Checks a delivered lease against the layer's request; returns its index in assign.expert_ids.
// Errors: kInvalidArgument (an expert not requested or delivered twice, dimensions other than the
// config's, planes of a non-BF16 expert, a gate-less expert, an expert held only in a device slot
// when `device_slots` is false: a path that does not read the GPU executor's slots), naming layer and
// expert.
Result<size_t> CheckLease(const ModelConfig& config, const ExpertAssignment& assign, int32_t layer_id, int64_t hidden,
                          const ExpertWeightsView& ew, const std::vector<bool>& delivered, bool device_slots = false);

// The executor's CPU/accelerator expert placement: the cost model (warm-up profiled,
// device_profile.h) and what it decided so far. One per Model; not thread-safe (as Forward).
struct DevicePlacement {
  scheduler::DeviceCostModel cost;
  scheduler::DeviceAssignmentStats stats;
};

// x: [N, hidden] (after post_attention_layernorm), in the compute dtype -> [N, hidden].
// With `next` (and a provider whose prefetch_mode() is not kNone) the next layer's router is applied
// to x (+ next->residual) in the same parallel region as this layer's, and its prediction is passed
// to Prefetch right after BeginLayer; it never changes the result.
// substitution_alpha > 0 turns on SMoE's expert substitution (SubstituteExperts, routing.h) with the
// provider's CachedExperts: the result then differs from the exact model's; 0 = exact.
// With `placement`, when the block runs on torch's device path (x on an accelerator, or a non-float32
// CPU tensor) the activated experts are split by GreedyAssign between the CPU (ExpertForward on
// float32 CPU copies of their tokens, the BF16 kernels) and x's device; each expert is issued as the
// provider delivers it, the accelerator's asynchronously and the CPU's on the calling thread, so the
// two run at once. It never changes which experts run or how they are weighted,
// only where: CPU experts compute in float32, so the output differs from an all-accelerator run by
// rounding. On the float32 CPU path there is no accelerator and `placement` is ignored.
// Errors: the provider's (BeginLayer / NextReady / EndLayer, e.g. kCorruption from storage),
// kInvalidArgument if a lease is for an expert that was not requested, is delivered twice, or its
// dimensions differ from the config (naming layer and expert).
// With `device_cache` (the GPU executor: x on a CUDA device, no placement) the block runs
// MoeForwardDevice (moe_device.h): experts in device slots, recovered there, grouped launches.
Result<at::Tensor> MoeForward(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                              const at::Tensor& x, ExpertProvider& provider, const NextMoeLayer* next = nullptr,
                              double substitution_alpha = 0.0, DevicePlacement* placement = nullptr,
                              DeviceExpertCache* device_cache = nullptr);

}  // namespace zipmoe::executor
