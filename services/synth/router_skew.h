// Router skew: a controllable, consistent per-expert bias of the router logits, plus the top-10%-share
// measurement (docs/synth.md "Router skew").
//
// Mechanism (all weights stay plain Gaussians apart from one rank-1 direction):
//   μ̂ [hidden]          a random unit direction derived from the run seed.
//   embedding row t      e_t = σ_e·n_t + a·μ̂,  a = κ·σ_e·√hidden   (the "channel": equal for all tokens;
//                        σ_e = SynthOptions::embedding_std)
//   residual readers     q/k/v/q_a/kv_a, gate/up of every MLP, shared_expert_gate, lm_head have their
//                        rows projected ⊥ μ̂, so nothing but the routers (and RMSNorm's scale) sees it.
//   router row e         r_e = σ·(g_e − (g_e·μ̂)μ̂) + β_e·μ̂,  β_e = X·z_e·σ/κ  (σ = 0.02, the router's std)
//   z_e                  z for popularity rank r is Φ⁻¹(1 − (r + ½)/E), ranks assigned to experts by a
//                        random permutation per layer (different hot experts in every layer).
// After RMSNorm the channel contributes β_e·κ√hidden/√(1+κ²) to logit e, and the token-dependent part
// of the logit has std σ·√hidden/√(1+κ²) (RMSNorm removes σ_e), so expert e's logit is shifted by X·z_e token-std units for
// every token. The channel is carried by the residual stream through every layer (sublayer outputs are
// random w.r.t. μ̂), but its relative size shrinks as the residual grows with depth; the executor issue
// re-measures the end-to-end share.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/synth/model_layout.h"
#include "services/synth/synth.h"

namespace zipmoe::synth {

struct SkewModel {
  double skew = 0.0;             // X
  double channel_scale = 1.0;    // κ
  float channel_amplitude = 0.0f;  // a = κ·σ_embed·√hidden
  std::vector<float> direction;  // μ̂ [hidden], unit L2 norm; empty when disabled
  bool enabled() const { return skew > 0.0; }
};

// embedding_std: σ_embed of the token-specific part of the embedding rows (SynthOptions::embedding_std).
// Errors: kInvalidArgument if skew < 0, channel_scale <= 0, embedding_std <= 0, or hidden < 2.
Result<SkewModel> MakeSkewModel(int64_t hidden, uint64_t seed, double skew, double channel_scale,
                                double embedding_std = kProjectionStd);

// z_e for the n_experts rows of one router (see above); `router_seed` = TensorSeed(seed, router name).
std::vector<float> ExpertSkewScores(uint64_t router_seed, int64_t n_experts);

// Top-k selections per expert. x: [n_tokens, hidden] float32 router inputs; router: [n_experts, hidden]
// float32. Ties go to the lower expert id. Returns counts [n_experts], summing to n_tokens * top_k.
std::vector<int64_t> CountTopKSelections(const std::vector<float>& x, const std::vector<float>& router,
                                         int64_t hidden, int64_t top_k);

// Fraction of all selections taken by the n_hot = ceil(0.1 * n_experts) most-selected experts.
double TopDecileShare(const std::vector<int64_t>& counts, int64_t* n_hot);

// Reads rows [row, row + n_rows) of a tensor (a 1-D tensor is one row) as float32.
using TensorRowReader =
    std::function<Result<std::vector<float>>(const std::string& name, int64_t row, int64_t n_rows)>;

// The measurement of synth.h's RouterShareReport over `layout`'s MoE layers. n_tokens token ids are
// drawn uniformly from [0, vocab) with SplitMix64(sample_seed). Errors: kInvalidArgument (no MoE
// layer, n_tokens < 1) or whatever `read` returns.
Result<RouterShareReport> MeasureTopShare(const ModelLayout& layout, const TensorRowReader& read,
                                          int64_t n_tokens, uint64_t sample_seed);

}  // namespace zipmoe::synth
