// Internal to kernels/: SoftmaxValues's vector variants (attention_cpu_{avx2,avx512,neon}.cc), written
// once over an ISA's lane operations. Included only by those translation units, so each instantiation
// is compiled with its ISA's flags (and -ffp-contract=off: separate multiplications and additions, as
// the reference does them). Every lane does the reference's operations in its order
// (kernels/attention_cpu.h), so every variant gives the reference's bits:
//   - scale, exp and p_j = e_j / sum: lane by lane, whole vectors then the scalar tail;
//   - the sum: the reference's sixteen lanes (16 / kLanes vectors), the tail added lane by lane in the
//     same j % 16 slots, then the reference's fold;
//   - the values: kVecs vectors of columns accumulate in registers over all j (the reference's
//     out[d] = out[d] + p_j * v_j[d], per column), then the next columns.
// V provides: Vec, kLanes, Load, LoadBf16 (kLanes BF16 values widened to float32), Store, Set1, Add, Sub, Mul, Div, Max (any order: the maximum of
// finite numbers), ZeroBelow(x, t, y) = (x < t ? 0 : y) per lane, Pow2(n) = 2^n for integral n in
// [-126, 127] (NaN lanes: any value).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/attention_cpu.h"

namespace zipmoe::kernels::attention_tile {

template <class V>
typename V::Vec Exp(typename V::Vec x) {
  namespace c = attention_exp;
  using Vec = typename V::Vec;
  const Vec n = V::Sub(V::Add(V::Mul(x, V::Set1(c::kLog2e)), V::Set1(c::kShifter)), V::Set1(c::kShifter));
  const Vec r = V::Sub(V::Sub(x, V::Mul(n, V::Set1(c::kLn2Hi))), V::Mul(n, V::Set1(c::kLn2Lo)));
  Vec p = V::Set1(c::kC7);
  p = V::Add(V::Mul(p, r), V::Set1(c::kC6));
  p = V::Add(V::Mul(p, r), V::Set1(c::kC5));
  p = V::Add(V::Mul(p, r), V::Set1(c::kC4));
  p = V::Add(V::Mul(p, r), V::Set1(c::kC3));
  p = V::Add(V::Mul(p, r), V::Set1(c::kC2));
  p = V::Add(V::Mul(p, r), V::Set1(1.0f));
  p = V::Add(V::Mul(p, r), V::Set1(1.0f));
  return V::ZeroBelow(x, c::kMinInput, V::Mul(p, V::Pow2(n)));
}

// A value: float32 as stored, or BF16 widened exactly.
inline float ValueAt(const float* v, int64_t i) { return v[i]; }
inline float ValueAt(const uint16_t* v, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(v[i]) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}
template <class V>
typename V::Vec LoadValues(const float* p) { return V::Load(p); }
template <class V>
typename V::Vec LoadValues(const uint16_t* p) { return V::LoadBf16(p); }

// Step 6: out = sum_j p_j v_j (p_j in a.scores), kVecs vectors of columns at a time in registers, then
// single vectors, then lanes.
template <class V, int kVecs, class T>
void Values(const SoftmaxValuesArgs& a, const T* v) {
  using Vec = typename V::Vec;
  constexpr int64_t L = V::kLanes;
  const float* s = a.scores;
  const int64_t n = a.n, dv = a.dv, ld = a.v_row_stride;
  int64_t d = 0;
  for (; d + kVecs * L <= dv; d += kVecs * L) {
    Vec o[kVecs];
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) o[k] = V::Set1(0.0f);
    const T* vj = v + d;
    for (int64_t j = 0; j < n; ++j, vj += ld) {
      const Vec p = V::Set1(s[j]);
#pragma GCC unroll 8
      for (int k = 0; k < kVecs; ++k) o[k] = V::Add(o[k], V::Mul(p, LoadValues<V>(vj + k * L)));
    }
#pragma GCC unroll 8
    for (int k = 0; k < kVecs; ++k) V::Store(a.out + d + k * L, o[k]);
  }
  for (; d + L <= dv; d += L) {
    Vec o = V::Set1(0.0f);
    const T* vj = v + d;
    for (int64_t j = 0; j < n; ++j, vj += ld) o = V::Add(o, V::Mul(V::Set1(s[j]), LoadValues<V>(vj)));
    V::Store(a.out + d, o);
  }
  for (; d < dv; ++d) {
    float o = 0.0f;
    for (int64_t j = 0; j < n; ++j) o = o + s[j] * ValueAt(v, j * ld + d);
    a.out[d] = o;
  }
}

template <class V, int kVecs>
void SoftmaxValues(const SoftmaxValuesArgs& a) {
  using Vec = typename V::Vec;
  constexpr int64_t L = V::kLanes;
  static_assert(16 % L == 0, "the sum's sixteen lanes are whole vectors");
  constexpr int kSumVecs = static_cast<int>(16 / L);
  float* s = a.scores;
  const int64_t n = a.n, full = n / L * L;
  // 1-2: scale, maximum.
  const Vec scale = V::Set1(a.scale);
  float m = a.sink != nullptr ? *a.sink : s[0] * a.scale;
  Vec mv = V::Set1(m);
  for (int64_t j = 0; j < full; j += L) {
    const Vec x = V::Mul(V::Load(s + j), scale);
    V::Store(s + j, x);
    mv = V::Max(mv, x);
  }
  float lanes[16];
  V::Store(lanes, mv);
  for (int64_t i = 0; i < L; ++i) m = std::max(m, lanes[i]);
  for (int64_t j = full; j < n; ++j) {
    s[j] = s[j] * a.scale;
    m = s[j] > m ? s[j] : m;
  }
  // 3-4: exp and the sixteen-lane sum.
  const Vec mb = V::Set1(m);
  Vec acc[kSumVecs];
  for (int k = 0; k < kSumVecs; ++k) acc[k] = V::Set1(0.0f);
  const int64_t full16 = n / 16 * 16;
  for (int64_t j = 0; j < full16; j += 16) {
    for (int k = 0; k < kSumVecs; ++k) {
      const Vec e = Exp<V>(V::Sub(V::Load(s + j + k * L), mb));
      V::Store(s + j + k * L, e);
      acc[k] = V::Add(acc[k], e);
    }
  }
  for (int k = 0; k < kSumVecs; ++k) V::Store(lanes + k * L, acc[k]);
  for (int64_t j = full16; j < n; ++j) {
    s[j] = AttentionExp(s[j] - m);
    lanes[j % 16] = lanes[j % 16] + s[j];
  }
  float sum = FoldSixteenLanes(lanes);
  if (a.sink != nullptr) sum = sum + AttentionExp(*a.sink - m);
  // 5: p_j.
  const Vec sv = V::Set1(sum);
  for (int64_t j = 0; j < full; j += L) V::Store(s + j, V::Div(V::Load(s + j), sv));
  for (int64_t j = full; j < n; ++j) s[j] = s[j] / sum;
  // 6: the values.
  if (a.v_bf16 != nullptr) {
    Values<V, kVecs>(a, a.v_bf16);
  } else {
    Values<V, kVecs>(a, a.v);
  }
}

}  // namespace zipmoe::kernels::attention_tile
