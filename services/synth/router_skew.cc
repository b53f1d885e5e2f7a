// Router-skew channel construction and the top-10%-share measurement (see router_skew.h).
#include "services/synth/router_skew.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "services/synth/gaussian.h"

namespace zipmoe::synth {

Result<SkewModel> MakeSkewModel(int64_t hidden, uint64_t seed, double skew, double channel_scale,
                                double embedding_std) {
  if (!(skew >= 0.0) || !std::isfinite(skew)) {
    return Status::InvalidArgument(fmt::format("router skew must be a finite value >= 0, got {}", skew));
  }
  if (!(channel_scale > 0.0) || !std::isfinite(channel_scale)) {
    return Status::InvalidArgument(fmt::format("skew channel scale must be > 0, got {}", channel_scale));
  }
  if (!(embedding_std > 0.0) || !std::isfinite(embedding_std)) {
    return Status::InvalidArgument(fmt::format("embedding std must be > 0, got {}", embedding_std));
  }
  if (hidden < 2) return Status::InvalidArgument(fmt::format("hidden_size {} < 2", hidden));
  SkewModel model;
  model.skew = skew;
  model.channel_scale = channel_scale;
  if (!model.enabled()) return model;
  model.direction.resize(static_cast<size_t>(hidden));
  StandardNormals(TensorSeed(seed, "synth.router_skew.direction"), 0, hidden, model.direction.data());
  double norm2 = 0.0;
  for (float v : model.direction) norm2 += static_cast<double>(v) * v;
  const double inv = 1.0 / std::sqrt(norm2);
  for (float& v : model.direction) v = static_cast<float>(v * inv);
  model.channel_amplitude =
      static_cast<float>(channel_scale * embedding_std * std::sqrt(static_cast<double>(hidden)));
  return model;
}

std::vector<float> ExpertSkewScores(uint64_t router_seed, int64_t n_experts) {
  std::vector<int64_t> perm(static_cast<size_t>(n_experts));
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix64 rng(Mix64(router_seed ^ 0xA0761D6478BD642Full));
  for (int64_t i = n_experts - 1; i > 0; --i) {  // Fisher–Yates
    std::swap(perm[static_cast<size_t>(i)], perm[rng.NextBelow(static_cast<uint64_t>(i) + 1)]);
  }
  std::vector<float> z(static_cast<size_t>(n_experts));
  for (int64_t rank = 0; rank < n_experts; ++rank) {
    const double p = 1.0 - (static_cast<double>(rank) + 0.5) / static_cast<double>(n_experts);
    z[static_cast<size_t>(perm[static_cast<size_t>(rank)])] = static_cast<float>(InverseNormalCdf(p));
  }
  return z;
}

std::vector<int64_t> CountTopKSelections(const std::vector<float>& x, const std::vector<float>& router,
                                         int64_t hidden, int64_t top_k) {
  const int64_t n_experts = static_cast<int64_t>(router.size()) / hidden;
  const int64_t n_tokens = static_cast<int64_t>(x.size()) / hidden;
  std::vector<int64_t> counts(static_cast<size_t>(n_experts), 0);
  std::vector<std::pair<float, int64_t>> logits(static_cast<size_t>(n_experts));
  const int64_t k = std::min(top_k, n_experts);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* xt = x.data() + t * hidden;
    for (int64_t e = 0; e < n_experts; ++e) {
      const float* re = router.data() + e * hidden;
      double acc = 0.0;
      for (int64_t j = 0; j < hidden; ++j) acc += static_cast<double>(re[j]) * xt[j];
      logits[static_cast<size_t>(e)] = {static_cast<float>(acc), e};
    }
    std::partial_sort(logits.begin(), logits.begin() + k, logits.end(), [](const auto& a, const auto& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    for (int64_t i = 0; i < k; ++i) ++counts[static_cast<size_t>(logits[static_cast<size_t>(i)].second)];
  }
  return counts;
}

double TopDecileShare(const std::vector<int64_t>& counts, int64_t* n_hot) {
  const int64_t n = static_cast<int64_t>(counts.size());
  const int64_t hot = std::max<int64_t>(1, (n + 9) / 10);  // ceil(0.1 * n)
  if (n_hot != nullptr) *n_hot = hot;
  std::vector<int64_t> sorted = counts;
  std::sort(sorted.begin(), sorted.end(), std::greater<int64_t>());
  const int64_t total = std::accumulate(sorted.begin(), sorted.end(), int64_t{0});
  if (total == 0) return 0.0;
  const int64_t top = std::accumulate(sorted.begin(), sorted.begin() + std::min(hot, n), int64_t{0});
  return static_cast<double>(top) / static_cast<double>(total);
}

Result<RouterShareReport> MeasureTopShare(const ModelLayout& layout, const TensorRowReader& read,
                                          int64_t n_tokens, uint64_t sample_seed) {
  if (layout.moe_layers.empty()) {
    return Status::InvalidArgument(fmt::format("model_type '{}': no MoE layer to measure", layout.model_type));
  }
  if (n_tokens < 1) return Status::InvalidArgument(fmt::format("n_tokens must be >= 1, got {}", n_tokens));
  const int64_t hidden = layout.hidden_size;

  // Normalised embedding rows of random tokens: RMSNorm without the weight (applied per layer).
  std::vector<float> normed(static_cast<size_t>(n_tokens * hidden));
  SplitMix64 rng(Mix64(sample_seed ^ 0x2545F4914F6CDD1Dull));
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t token = static_cast<int64_t>(rng.NextBelow(static_cast<uint64_t>(layout.vocab_size)));
    ZM_ASSIGN_OR_RETURN(std::vector<float> row, read(layout.embed_name, token, 1));
    if (static_cast<int64_t>(row.size()) != hidden) {
      return Status::InvalidArgument(fmt::format("'{}' row {}: {} values, expected hidden_size {}",
                                                 layout.embed_name, token, row.size(), hidden));
    }
    double ms = 0.0;
    for (float v : row) ms += static_cast<double>(v) * v;
    const double inv_rms = 1.0 / std::sqrt(ms / static_cast<double>(hidden) + layout.rms_norm_eps);
    for (int64_t j = 0; j < hidden; ++j) normed[static_cast<size_t>(t * hidden + j)] = static_cast<float>(row[j] * inv_rms);
  }

  RouterShareReport report;
  report.n_tokens = n_tokens;
  report.n_experts = layout.n_experts;
  report.top_k = layout.top_k;
  std::vector<float> x(normed.size());
  for (const MoeLayerInfo& moe : layout.moe_layers) {
    ZM_ASSIGN_OR_RETURN(std::vector<float> norm, read(moe.norm_name, 0, 1));
    ZM_ASSIGN_OR_RETURN(std::vector<float> router, read(moe.router_name, 0, layout.n_experts));
    if (static_cast<int64_t>(norm.size()) != hidden ||
        static_cast<int64_t>(router.size()) != layout.n_experts * hidden) {
      return Status::InvalidArgument(fmt::format("layer {}: '{}' / '{}' have {} / {} values, expected {} / {}",
                                                 moe.layer_id, moe.norm_name, moe.router_name, norm.size(),
                                                 router.size(), hidden, layout.n_experts * hidden));
    }
    if (layout.zero_centred_norms)
      for (float& w : norm) w += 1.0f;  // Qwen3NextRMSNorm: x * (1 + w)
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t j = 0; j < hidden; ++j) {
        const size_t i = static_cast<size_t>(t * hidden + j);
        x[i] = normed[i] * norm[static_cast<size_t>(j)];
      }
    }
    const std::vector<int64_t> counts = CountTopKSelections(x, router, hidden, layout.top_k);
    report.layer_ids.push_back(moe.layer_id);
    report.top_share.push_back(TopDecileShare(counts, &report.n_hot));
  }
  report.mean_top_share = std::accumulate(report.top_share.begin(), report.top_share.end(), 0.0) /
                          static_cast<double>(report.top_share.size());
  report.uniform_share = static_cast<double>(report.n_hot) / static_cast<double>(layout.n_experts);
  return report;
}

}  // namespace zipmoe::synth
