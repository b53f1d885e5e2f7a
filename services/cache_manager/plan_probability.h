// Probabilistic hit model of the cache planner (ZipMoE §3.4 "Hierarchical Cache Planning",
// Appendix C Alg. 2, Appendix D eq. 24).
//
// Experts of one MoE layer are identified by their popularity rank r = 0..N-1 (rank 0 = most
// often selected). A step selects exactly k experts. The planner models that selection as the
// conditional-Bernoulli ("exactly-k") distribution: every rank r is drawn independently with
// probability q_r and the draw is conditioned on exactly k successes, so
//   P(S) ∝ Π_{r∈S} q_r / (1 - q_r)   for |S| = k.
// FitSelectionProbabilities finds the q whose exactly-k model reproduces the observed inclusion
// probabilities f (Theorem D.1: this is the maximum-entropy distribution with those marginals).
// PoissonBinomial is Alg. 2; HitModel gives the joint hit-pattern probability of §3.4.
//
// Pure functions on value types; callable from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "services/cache_manager/pool.h"

namespace zipmoe::cache_manager {

// Poisson-binomial distribution of the number of successes among independent Bernoulli(q[i])
// trials (Alg. 2, the DP of §3.4): Φ(h) = P(Σ X_i = h).
//   q: [n] probabilities in [0, 1]
//   max_hits: entries h > max_hits are not computed (exact: Φ(h) only depends on Φ(h-1), Φ(h));
//             pass n (or more) for the whole distribution
// Returns [min(n, max_hits) + 1] doubles. Not validated (callers pass fitted q).
std::vector<double> PoissonBinomial(const double* q, int64_t n, int64_t max_hits);
inline std::vector<double> PoissonBinomial(const std::vector<double>& q) {
  return PoissonBinomial(q.data(), static_cast<int64_t>(q.size()), static_cast<int64_t>(q.size()));
}

// Rescales inclusion probabilities to sum to exactly `top_k`, capping at 1: values >= 1 (ranks
// selected at every step) stay 1, values that would exceed 1 after scaling are set to 1 and the rest
// rescaled again (repeated until no value exceeds 1). Preserves order.
//   f: [N] >= 0, any order; top_k in [1, N]
// Errors: kInvalidArgument if f has a negative or non-finite value, top_k is out of range, more than
// top_k values are >= 1, or fewer than top_k values are positive.
Result<std::vector<double>> NormalizeInclusion(const std::vector<double>& f, int top_k);

struct IpfOptions {
  int max_iterations = 20000;
  double tolerance = 1e-12;  // stop when max_r |f_r(q) - f_r| <= tolerance
  // After max_iterations, the best q seen is still returned when its error is at most this: the
  // fixed point converges only linearly when some f_r are close to 1, and the inputs (frequencies
  // from a finite trace, normalised to Σ f = k within 1e-6) are no more precise than this anyway.
  double acceptable_error = 1e-6;
};

struct SelectionFit {
  std::vector<double> q;  // [N] selection probabilities, scaled so that Σ q = k (see below)
  int iterations = 0;     // eq. 24 updates applied
  double max_error = 0;   // max_r |f_r(q) - f_r| of the returned q
};

// Modified iterative proportional fitting (Appendix D eq. 24, after Chen, Dempster & Liu 1994):
// finds q such that the exactly-k conditional-Bernoulli model has inclusion probabilities f.
// Weights w_r = q_r / (1 - q_r) start at f_r and are updated w_r ← w_r · f_r / f_r(w), with
//   f_r(w) = w_r R(k-1, N∖{r}) / R(k, N) = q_r Φ_{N∖{r}}(k-1) / Φ_N(k),
// evaluated through Poisson-binomial DPs (prefix/suffix tables) instead of raw elementary symmetric
// polynomials, which overflow for large N and k. The weights are only defined up to a common factor;
// after each update they are rescaled so that Σ q_r = k, which keeps Φ_N(k) far from underflow.
// Ranks with f_r = 0 get q_r = 0 and ranks with f_r = 1 get q_r = 1 (always selected).
//   f: [N] inclusion probabilities in [0, 1] summing to top_k (within 1e-6; use NormalizeInclusion)
// Errors: kInvalidArgument (f out of [0, 1], |Σ f - top_k| > 1e-6, top_k not in [1, N]),
// kInternal if after max_iterations the best error is still above `acceptable_error` (a q with an
// error in (tolerance, acceptable_error] is returned with it in max_error).
Result<SelectionFit> FitSelectionProbabilities(const std::vector<double>& f, int top_k,
                                               const IpfOptions& options = {});

// Inclusion probabilities P(r ∈ S | |S| = k) of the exactly-k model with selection probabilities q
// (the forward map of eq. 24). q: [N] in [0, 1]; requires Φ_N(k) > 0 (else returns all zeros).
std::vector<double> ConditionalInclusion(const std::vector<double>& q, int top_k);

// The hit model of one pool partition (§3.4, Alg. 4 lines 8-13). The pools occupy contiguous rank
// intervals in hierarchy order: F = [0, S_F), C = [S_F, S_F + S_C), …; ranks from Σ S_p to N-1 are
// the Miss pool M.
class HitModel {
 public:
  // capacities: experts per pool (already clipped so that Σ ≤ N; ZM_CHECKed).
  // q: [N] fitted selection probabilities; top_k: experts selected per step.
  HitModel(const std::vector<double>& q, int top_k, const std::array<int32_t, kPoolCount>& capacities);

  // Φ_p(h) for pool p (Alg. 2 on the pool's interval), h in [0, min(S_p, k)]; 0 outside.
  double PoolHits(int pool, int32_t hits) const;
  // Φ_M(h) for the Miss pool.
  double MissHits(int32_t hits) const;
  // Φ_N(k): probability that the unconditioned Bernoulli draw selects exactly k experts.
  double all_exactly_k() const { return phi_all_k_; }
  // P(h | Σ_{p ∈ Λ∪{M}} h_p = k) = Φ_M(k_rem) / Φ_N(k) · Π_p Φ_p(h_p), k_rem = k - Σ_p h_p
  // (0 if k_rem < 0). Sums to 1 over all patterns.
  double PatternProbability(const std::array<int32_t, kPoolCount>& hits) const;
  const std::array<int32_t, kPoolCount>& capacities() const { return capacities_; }
  int32_t miss_capacity() const { return miss_capacity_; }
  int top_k() const { return top_k_; }

 private:
  int top_k_;
  std::array<int32_t, kPoolCount> capacities_;
  int32_t miss_capacity_;
  std::array<std::vector<double>, kPoolCount> phi_pool_;  // [min(S_p, k) + 1] each
  std::vector<double> phi_miss_;                         // [min(S_M, k) + 1]
  double phi_all_k_;
};

}  // namespace zipmoe::cache_manager
