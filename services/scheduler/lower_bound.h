// Lower bound on the makespan of one MoE layer (ZipMoE Appendix B, Lemma B.3):
//   OPT >= max{ I, C/L, P, Z }
//   I = Σ_j v_j          total I/O: v_j = (1+ρ)u for M, u for E, ρu for S, 0 for C and F
//   C = Σ_j K·c          total decode work over the tasks that decode (all but F)
//   P = Σ_n pₙ           total expert compute, each routed expert counted once
//                        (the paper's Σ_j p_n(j) / |{i : n(i) = n(j)}|)
//   Z = max_j z_j        longest single-task critical path
// plus, when CostModel::recovery_us > 0 (not in the paper's model), R = Σ_j recovery_us over the tasks
// that decode, since recoveries share one stream. With recovery_us = 0, R = 0 and the bound is
// exactly Lemma B.3's, except for z_j below.
//
// z_j. Definition B.2 prints z_j = ρu·1[M,S] + max{Kc/min(K,L), u·1[M,E]} + pₙ. That is not a lower
// bound when decode pipelines with reading: decode i needs only E-chunk i, so with c >> ρu/K a lone
// S-task finishes near ρu/K + K·c/L, below ρu + K·c/L. TaskCriticalPathUs therefore uses a path
// that every schedule must pay (all terms hold for any I/O order and worker assignment):
//   ready_j = max{ D_j, v_j }, with
//   D_j = max_{1<=i<=K} ( i·ρu/K + ceil((K-i+1)/L)·c )  if E-chunks are read (M, S): the i-th E-chunk
//         of j cannot arrive before i·ρu/K, and the K-i+1 decodes of the later chunks need
//         ceil((K-i+1)/L) rounds of c;
//   D_j = ceil(K/L)·c                                     if E-chunks are cached (E, C);
//   z_j = ready_j + recovery_us + pₙ for decoded tasks, z_j = pₙ for F.
// z_j >= ρu + c for M and S (the i = K term), which is what Theorem 3.1's proof uses of Z.
// PaperCriticalPathUs returns the printed formula, for comparison only.
//
// Pure functions, callable from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "services/scheduler/scheduler_types.h"

namespace zipmoe::scheduler {

struct LowerBound {
  double io_us = 0.0;             // I
  double decode_us = 0.0;         // C / L
  double compute_us = 0.0;        // P
  double critical_path_us = 0.0;  // Z
  double recover_us = 0.0;        // R (0 when CostModel::recovery_us == 0)
  double bound_us = 0.0;          // max of the above
};

// Theorem 3.1's guarantee: the scheduler's makespan is at most (3 - 1/L) times the optimum.
inline double ApproximationFactor(int32_t n_workers) { return 3.0 - 1.0 / n_workers; }

// v_j: I/O time of one task in `state` (Lemma B.3). Expects a valid cost model.
double TaskIoUs(CompressionState state, const CostModel& cost);

// z_j as described above; expert_compute_us is pₙ of the task's expert. Expects a valid cost model.
double TaskCriticalPathUs(CompressionState state, double expert_compute_us, const CostModel& cost);

// Definition B.2 as printed (F: pₙ). Not a valid lower bound in general; see the file comment.
double PaperCriticalPathUs(CompressionState state, double expert_compute_us, const CostModel& cost);

// The bound for one layer's tasks (empty tasks: all zero).
// Errors: kInvalidArgument from ValidateCostModel / ValidateTasks.
Result<LowerBound> ComputeLowerBound(const std::vector<ExpertTask>& tasks, const CostModel& cost);

}  // namespace zipmoe::scheduler
