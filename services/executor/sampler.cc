#include "services/executor/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace zipmoe::executor {
namespace {

// SplitMix64 finaliser: decorrelates (seed, stream) pairs into mt19937_64 seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

int32_t Argmax(const float* logits, int64_t vocab) {
  // Two passes, each a loop the compiler vectorises (a decode step's greedy pick over ~150k logits was a
  // branchy scalar loop, ~0.1 ms a token: issue 35): the largest non-NaN value (`v > m ? v : m` keeps m
  // when v is NaN), then the first index holding it. The same answer as one pass keeping the first
  // strict maximum: ties (also +0 / -0) go to the lowest index, NaN never wins, a row of NaN gives 0.
  constexpr int64_t kLanes = 16;
  float lane[kLanes];
  for (float& m : lane) m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= vocab; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      lane[j] = v > lane[j] ? v : lane[j];
    }
  float best_v = -std::numeric_limits<float>::infinity();
  for (const float m : lane) best_v = m > best_v ? m : best_v;
  for (; i < vocab; ++i) best_v = logits[i] > best_v ? logits[i] : best_v;
  for (int64_t k = 0; k < vocab; ++k)
    if (logits[k] == best_v) return static_cast<int32_t>(k);
  return 0;  // every logit NaN
}

Sampler::Sampler(const SamplingParams& params, uint64_t stream)
    : params_(params), rng_(Mix(params.seed ^ Mix(stream))) {}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (greedy()) return Argmax(logits, vocab);
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  // Candidates sorted by logit, descending, ties by id (NaN excluded).
  order_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) order_.push_back(static_cast<int32_t>(i));
  if (order_.empty()) {  // every logit NaN: still one draw, so Skip stays exact
    (void)rng_();
    return 0;
  }
  auto by_logit = [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t keep = order_.size();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < keep) {
    keep = static_cast<size_t>(params_.top_k);
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.end(), by_logit);
    order_.resize(keep);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax of logits / temperature over the kept candidates.
  probs_.resize(keep);
  const double max_scaled = static_cast<double>(logits[order_[0]]) * inv_t;
  double sum = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    probs_[i] = std::exp(static_cast<double>(logits[order_[i]]) * inv_t - max_scaled);
    sum += probs_[i];
  }
  for (size_t i = 0; i < keep; ++i) probs_[i] /= sum;
  // Keeps the first n candidates, their probabilities renormalised.
  const auto truncate = [&](size_t n) {
    keep = n;
    sum = 0.0;
    for (size_t i = 0; i < keep; ++i) sum += probs_[i];
    for (size_t i = 0; i < keep; ++i) probs_[i] /= sum;
  };
  // Nucleus: smallest prefix whose mass reaches top_p.
  if (params_.top_p < 1.0f) {
    double mass = 0.0;
    size_t n = 0;
    while (n < keep) {
      mass += probs_[n++];
      if (mass >= static_cast<double>(params_.top_p)) break;
    }
    truncate(std::max<size_t>(n, 1));
  }
  // min_p: the candidates are sorted, so those at least min_p x the first's probability are a prefix.
  if (params_.min_p > 0.0f) {
    const double floor = static_cast<double>(params_.min_p) * probs_[0];
    size_t n = 1;
    while (n < keep && probs_[n] >= floor) ++n;
    if (n < keep) truncate(n);
  }
  // u in [0, 1) from the top 53 bits (portable, unlike std::uniform_real_distribution).
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
  double cumulative = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probs_[i];
    if (u < cumulative) return order_[i];
  }
  return order_[keep - 1];
}

void AdjustLogits(const SamplingParams& params, const std::vector<int32_t>& prompt_tokens,
                  const std::unordered_map<int32_t, int32_t>& generated, float* logits, int64_t vocab) {
  for (const auto& [t, bias] : params.logit_bias)
    if (t >= 0 && t < vocab) logits[t] += bias;
  if (params.repetition_penalty != 1.0f) {
    const float penalty = params.repetition_penalty;
    const auto apply = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      logits[t] = logits[t] > 0.0f ? logits[t] / penalty : logits[t] * penalty;
    };
    for (int32_t t : prompt_tokens) apply(t);
    for (const auto& [t, count] : generated)
      if (!std::binary_search(prompt_tokens.begin(), prompt_tokens.end(), t)) apply(t);
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    for (const auto& [t, count] : generated)
      if (t >= 0 && t < vocab)
        logits[t] -= static_cast<float>(count) * params.frequency_penalty + params.presence_penalty;
  }
}

bool AdjustsLogits(const SamplingParams& params, bool any_prompt_token, bool any_generated) {
  return !params.logit_bias.empty() ||
         (params.repetition_penalty != 1.0f && (any_prompt_token || any_generated)) ||
         ((params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) && any_generated);
}

std::vector<int32_t> PromptTokenSet(const std::vector<int32_t>& prompt) {
  std::vector<int32_t> set = prompt;
  std::sort(set.begin(), set.end());
  set.erase(std::unique(set.begin(), set.end()), set.end());
  return set;
}

void Sampler::Skip(uint64_t n) {
  if (!greedy()) rng_.discard(n);
}

}  // namespace zipmoe::executor
