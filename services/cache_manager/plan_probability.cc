#include "services/cache_manager/plan_probability.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace zipmoe::cache_manager {
namespace {

// Values this close to 1 (0) are treated as always (never) selected.
constexpr double kCertainEps = 1e-13;
constexpr double kSumTolerance = 1e-6;

double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// Inclusion probabilities P(i ∈ S | Σ X = k) of independent Bernoulli(q_i) conditioned on exactly k
// successes: q_i Φ_{-i}(k-1) / Φ(k), with Φ_{-i} assembled from prefix and suffix DP tables
// (each truncated to k hits). Returns Φ(k); leaves `out` all zero if Φ(k) == 0.
double InclusionFromSelection(const std::vector<double>& q, int k, std::vector<double>* out) {
  const size_t n = q.size();
  const size_t width = static_cast<size_t>(k) + 1;
  // prefix[i * width + j] = P(j successes among q[0, i)); suffix[i * width + j] among q[i, n).
  std::vector<double> prefix((n + 1) * width, 0.0), suffix((n + 1) * width, 0.0);
  prefix[0] = 1.0;
  for (size_t i = 0; i < n; ++i) {
    const double* prev = &prefix[i * width];
    double* next = &prefix[(i + 1) * width];
    next[0] = prev[0] * (1.0 - q[i]);
    for (size_t j = 1; j < width; ++j) next[j] = prev[j] * (1.0 - q[i]) + prev[j - 1] * q[i];
  }
  suffix[n * width] = 1.0;
  for (size_t i = n; i-- > 0;) {
    const double* prev = &suffix[(i + 1) * width];
    double* next = &suffix[i * width];
    next[0] = prev[0] * (1.0 - q[i]);
    for (size_t j = 1; j < width; ++j) next[j] = prev[j] * (1.0 - q[i]) + prev[j - 1] * q[i];
  }
  const double phi_k = prefix[n * width + k];
  out->assign(n, 0.0);
  if (!(phi_k > 0)) return 0.0;
  for (size_t i = 0; i < n; ++i) {
    double without_i = 0;  // Φ_{-i}(k-1)
    for (int j = 0; j <= k - 1; ++j) without_i += prefix[i * width + j] * suffix[(i + 1) * width + (k - 1 - j)];
    (*out)[i] = q[i] * without_i / phi_k;
  }
  return phi_k;
}

// Shift t such that Σ sigmoid(lambda_i + t) = target (0 < target < lambda.size()).
double SolveShift(const std::vector<double>& lambda, double target) {
  auto sum_at = [&](double t, double* slope) {
    double s = 0, d = 0;
    for (double l : lambda) {
      const double q = Sigmoid(l + t);
      s += q;
      d += q * (1.0 - q);
    }
    *slope = d;
    return s;
  };
  // Bracket: the sum is increasing in t.
  double lo = -1.0, hi = 1.0, slope = 0;
  while (sum_at(lo, &slope) > target) lo *= 2;
  while (sum_at(hi, &slope) < target) hi *= 2;
  double t = 0.5 * (lo + hi);
  for (int it = 0; it < 200; ++it) {
    const double s = sum_at(t, &slope) - target;
    if (std::fabs(s) <= 1e-14 * target) break;
    if (s > 0) hi = t; else lo = t;
    double next = slope > 0 ? t - s / slope : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);  // Newton left the bracket: bisect
    t = next;
  }
  return t;
}

}  // namespace

std::vector<double> PoissonBinomial(const double* q, int64_t n, int64_t max_hits) {
  const int64_t width = std::min(n, std::max<int64_t>(max_hits, 0)) + 1;
  std::vector<double> phi(static_cast<size_t>(width), 0.0);
  phi[0] = 1.0;  // Alg. 2 line 4
  for (int64_t r = 0; r < n; ++r) {
    const int64_t top = std::min(r + 1, width - 1);
    for (int64_t h = top; h >= 1; --h) phi[h] = phi[h] * (1.0 - q[r]) + phi[h - 1] * q[r];  // line 8
    phi[0] *= 1.0 - q[r];                                                                    // line 10
  }
  return phi;
}

Result<std::vector<double>> NormalizeInclusion(const std::vector<double>& f, int top_k) {
  const int64_t n = static_cast<int64_t>(f.size());
  if (top_k < 1 || top_k > n) {
    return Status::InvalidArgument(fmt::format("top_k = {}: must be in [1, n_experts = {}]", top_k, n));
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(f[i]) || f[i] < 0) {
      return Status::InvalidArgument(fmt::format("rank_freq[{}] = {}: must be finite and >= 0", i, f[i]));
    }
    sum += f[i];
  }
  if (!(sum > 0)) return Status::InvalidArgument("rank_freq sums to 0: no activations recorded");
  std::vector<double> out(f);
  std::vector<bool> capped(n, false);
  for (int64_t i = 0; i < n; ++i) {
    if (out[i] >= 1.0) {  // selected at every step: stays certain
      out[i] = 1.0;
      capped[i] = true;
    }
  }
  for (int64_t round = 0; round <= n; ++round) {
    double free_sum = 0;
    int64_t n_capped = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (capped[i]) ++n_capped; else free_sum += out[i];
    }
    if (n_capped > top_k) {
      return Status::InvalidArgument(
          fmt::format("rank_freq has {} ranks with frequency >= 1, more than top_k = {}", n_capped, top_k));
    }
    if (n_capped == top_k) {
      for (int64_t i = 0; i < n; ++i) {
        if (!capped[i]) out[i] = 0.0;
      }
      break;
    }
    if (!(free_sum > 0)) {
      return Status::InvalidArgument(fmt::format(
          "rank_freq has only {} ranks with positive frequency, fewer than top_k = {}", n_capped, top_k));
    }
    const double scale = static_cast<double>(top_k - n_capped) / free_sum;
    bool changed = false;
    for (int64_t i = 0; i < n; ++i) {
      if (capped[i]) continue;
      out[i] *= scale;
      if (out[i] >= 1.0) {
        out[i] = 1.0;
        capped[i] = true;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return out;
}

std::vector<double> ConditionalInclusion(const std::vector<double>& q, int top_k) {
  std::vector<double> out;
  InclusionFromSelection(q, top_k, &out);
  return out;
}

Result<SelectionFit> FitSelectionProbabilities(const std::vector<double>& f, int top_k, const IpfOptions& options) {
  const int64_t n = static_cast<int64_t>(f.size());
  if (top_k < 1 || top_k > n) {
    return Status::InvalidArgument(fmt::format("top_k = {}: must be in [1, n_experts = {}]", top_k, n));
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!(f[i] >= 0 && f[i] <= 1)) {
      return Status::InvalidArgument(fmt::format("rank_freq[{}] = {}: must be in [0, 1]", i, f[i]));
    }
    sum += f[i];
  }
  if (std::fabs(sum - top_k) > kSumTolerance) {
    return Status::InvalidArgument(
        fmt::format("rank_freq sums to {:.9g}, expected top_k = {} (see NormalizeInclusion)", sum, top_k));
  }

  SelectionFit fit;
  fit.q.assign(n, 0.0);
  std::vector<int64_t> free_idx;
  int n_certain = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (f[i] >= 1.0 - kCertainEps) {
      fit.q[i] = 1.0;
      ++n_certain;
    } else if (f[i] > kCertainEps) {
      free_idx.push_back(i);
    }
  }
  const int k_free = top_k - n_certain;
  if (k_free > 0 && static_cast<int64_t>(free_idx.size()) > k_free) {
    // λ_r = log w_r, w_r = q_r / (1 - q_r); eq. 24 in log form: λ_r += log f_r - log f_r(w).
    const size_t m = free_idx.size();
    std::vector<double> lambda(m), target(m), q(m), current;
    for (size_t i = 0; i < m; ++i) {
      target[i] = f[free_idx[i]];
      lambda[i] = std::log(target[i]);  // w^(0) = f
    }
    std::vector<double> best_q;
    double best_err = std::numeric_limits<double>::infinity();
    for (;; ++fit.iterations) {
      const double shift = SolveShift(lambda, static_cast<double>(k_free));  // Σ q = k_free
      for (size_t i = 0; i < m; ++i) {
        lambda[i] += shift;
        q[i] = Sigmoid(lambda[i]);
      }
      InclusionFromSelection(q, k_free, &current);
      double err = 0;
      for (size_t i = 0; i < m; ++i) err = std::max(err, std::fabs(current[i] - target[i]));
      if (err < best_err) {
        best_err = err;
        best_q = q;
      }
      if (err <= options.tolerance) break;
      if (fit.iterations >= options.max_iterations) {
        if (best_err <= options.acceptable_error) {
          q = best_q;  // linear convergence ran out of iterations within what the inputs can tell apart
          break;
        }
        return Status::Internal(fmt::format(
            "iterative proportional fitting did not converge: max |f(q) - f| = {:.3g} after {} iterations "
            "(tolerance {:.3g}, acceptable {:.3g})", best_err, fit.iterations, options.tolerance,
            options.acceptable_error));
      }
      for (size_t i = 0; i < m; ++i) {
        if (current[i] > 0) lambda[i] += std::log(target[i]) - std::log(current[i]);
        else lambda[i] += 50.0;  // underflowed: push the weight up hard
      }
    }
    for (size_t i = 0; i < m; ++i) fit.q[free_idx[i]] = q[i];
  } else if (k_free > 0) {
    // Exactly k_free candidates with positive f: they are always selected together.
    for (int64_t i : free_idx) fit.q[i] = 1.0;
  }
  const std::vector<double> achieved = ConditionalInclusion(fit.q, top_k);
  for (int64_t i = 0; i < n; ++i) fit.max_error = std::max(fit.max_error, std::fabs(achieved[i] - f[i]));
  return fit;
}

HitModel::HitModel(const std::vector<double>& q, int top_k, const std::array<int32_t, kPoolCount>& capacities)
    : top_k_(top_k), capacities_(capacities) {
  const int64_t n = static_cast<int64_t>(q.size());
  int64_t begin = 0;
  for (int p = 0; p < kPoolCount; ++p) {
    ZM_CHECK(capacities[p] >= 0 && begin + capacities[p] <= n) << "pool " << p << " capacity " << capacities[p];
    phi_pool_[p] = PoissonBinomial(q.data() + begin, capacities[p], top_k);  // Alg. 4 line 10
    begin += capacities[p];
  }
  miss_capacity_ = static_cast<int32_t>(n - begin);
  phi_miss_ = PoissonBinomial(q.data() + begin, n - begin, top_k);
  const std::vector<double> all = PoissonBinomial(q.data(), n, top_k);  // Alg. 4 line 13
  phi_all_k_ = top_k < static_cast<int64_t>(all.size()) ? all[top_k] : 0.0;
}

double HitModel::PoolHits(int pool, int32_t hits) const {
  const auto& phi = phi_pool_[pool];
  return hits >= 0 && hits < static_cast<int32_t>(phi.size()) ? phi[hits] : 0.0;
}

double HitModel::MissHits(int32_t hits) const {
  return hits >= 0 && hits < static_cast<int32_t>(phi_miss_.size()) ? phi_miss_[hits] : 0.0;
}

double HitModel::PatternProbability(const std::array<int32_t, kPoolCount>& hits) const {
  int32_t k_rem = top_k_;
  double p = 1.0;
  for (int i = 0; i < kPoolCount; ++i) {
    k_rem -= hits[i];
    p *= PoolHits(i, hits[i]);
  }
  if (k_rem < 0 || !(phi_all_k_ > 0)) return 0.0;
  return p * MissHits(k_rem) / phi_all_k_;
}

}  // namespace zipmoe::cache_manager
