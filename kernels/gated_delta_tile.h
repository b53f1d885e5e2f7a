// Internal to kernels/: the loops of GatedDeltaRecurrent's vector variants (gated_delta_{avx2,avx512,
// neon}.cc), written once over an ISA's lane operations. Included only by those translation units, so
// each instantiation is compiled with its ISA's flags (and -ffp-contract=off: separate multiplications
// and additions, as the reference does them).
//
// The state's columns are taken kBlock vectors (kBlock * kLanes columns) at a time; a block runs through
// all t tokens before the next block starts, so its dk x kBlock * kLanes floats stay in the near caches
// between the two passes of a token and between tokens (column j of S, and out[., ., j], depend on
// column j only).
// The loops over a block's vectors are unrolled (kBlock <= 8) so the accumulators live in registers.
// Columns left over after the full blocks go one vector at a time, then one lane at a time through
// ScalarLanes. Each lane does the steps of kernels/gated_delta.h in their order, so every variant gives
// the reference's bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/gated_delta.h"

namespace zipmoe::kernels::gated_delta_tile {

// One lane per "vector": the columns after the last full vector.
struct ScalarLanes {
  using Vec = float;
  static constexpr int64_t kLanes = 1;
  static Vec Load(const float* p) { return *p; }
  static void Store(float* p, Vec v) { *p = v; }
  static Vec Set1(float x) { return x; }
  static Vec Add(Vec a, Vec b) { return a + b; }
  static Vec Sub(Vec a, Vec b) { return a - b; }
  static Vec Mul(Vec a, Vec b) { return a * b; }
};

// Head h's columns [j0, j0 + kVecs * V::kLanes) through all tokens.
template <class V, int kVecs>
void Columns(const GatedDeltaArgs& a, int64_t h, int64_t j0) {
  using Vec = typename V::Vec;
  constexpr int64_t kLanes = V::kLanes;
  const int64_t dk = a.dk, dv = a.dv;
  const int64_t hk = h / (a.n_v / a.n_k);
  float* state = a.state + h * dk * dv + j0;
  for (int64_t s = 0; s < a.t; ++s) {
    const float* q = a.q + s * a.q_token_stride + hk * dk;
    const float* k = a.k + s * a.k_token_stride + hk * dk;
    const float* v = a.v + s * a.v_token_stride + h * dv + j0;
    float* out = a.out + s * a.out_token_stride + h * dv + j0;
    const Vec decay = V::Set1(std::exp(a.g[s * a.n_v + h]));
    const Vec beta = V::Set1(a.beta[s * a.n_v + h]);
    // Pass 1: decay the state, kv = S^T k.
    Vec acc[kVecs];
#pragma GCC unroll 8
    for (int n = 0; n < kVecs; ++n) acc[n] = V::Set1(0.0f);
    for (int64_t i = 0; i < dk; ++i) {
      float* row = state + i * dv;
      const Vec ki = V::Set1(k[i]);
#pragma GCC unroll 8
      for (int n = 0; n < kVecs; ++n) {
        const Vec x = V::Mul(V::Load(row + n * kLanes), decay);
        V::Store(row + n * kLanes, x);
        acc[n] = V::Add(acc[n], V::Mul(x, ki));
      }
    }
    Vec delta[kVecs];
#pragma GCC unroll 8
    for (int n = 0; n < kVecs; ++n) {
      delta[n] = V::Mul(V::Sub(V::Load(v + n * kLanes), acc[n]), beta);
      acc[n] = V::Set1(0.0f);
    }
    // Pass 2: the rank-one update S += k delta^T, o = S^T q.
    for (int64_t i = 0; i < dk; ++i) {
      float* row = state + i * dv;
      const Vec ki = V::Set1(k[i]), qi = V::Set1(q[i]);
#pragma GCC unroll 8
      for (int n = 0; n < kVecs; ++n) {
        const Vec x = V::Add(V::Load(row + n * kLanes), V::Mul(ki, delta[n]));
        V::Store(row + n * kLanes, x);
        acc[n] = V::Add(acc[n], V::Mul(x, qi));
      }
    }
#pragma GCC unroll 8
    for (int n = 0; n < kVecs; ++n) V::Store(out + n * kLanes, acc[n]);
  }
}

// GatedDeltaRecurrent for the ISA V (V::kBlock vectors per column block).
template <class V>
void Recurrent(const GatedDeltaArgs& a) {
  constexpr int64_t kBlockLanes = V::kBlock * V::kLanes;
  for (int64_t h = a.head_begin; h < a.head_end; ++h) {
    int64_t j = 0;
    for (; j + kBlockLanes <= a.dv; j += kBlockLanes) Columns<V, V::kBlock>(a, h, j);
    for (; j + V::kLanes <= a.dv; j += V::kLanes) Columns<V, 1>(a, h, j);
    for (; j < a.dv; ++j) Columns<ScalarLanes, 1>(a, h, j);
  }
}

}  // namespace zipmoe::kernels::gated_delta_tile
