// Internal to kernels/: SoftmaxValues's vector variants (attention_cpu_{avx2,avx512,neon}.cc), written
// once over an ISA's lane operations. Included only by those translation units, so each instantiation
// is compiled with its ISA's flags (and -ffp-contract=off: separate multiplications and additions, as
// the reference does them). Every lane does the reference's operations in its order
// (kernels/attention_cpu.h), so every variant gives the reference's bits:
//   - scale, exp and p_j = e_j / sum: lane by lane, whole vectors then the scalar tail;
//   - the sum: the reference's sixteen lanes (16 / kLanes vectors), the tail added lane by lane in the
//     same j % 16 slots, then the reference's fold;
//   - the values (JointValues, one row or several sharing each value vector's load): vectors of columns
//     accumulate in registers over all j (the reference's out[d] = out[d] + p_j * v_j[d], per column),
//     then the next columns.
// No std:: functions in the code (each ISA's translation unit would emit its own copy of an inline one
// with its flags, and the linker may keep any of them for every caller): comparisons are written out.
// V provides: Vec, kLanes, Load, LoadBf16 (kLanes BF16 values widened to float32), Store, Set1, Add, Sub, Mul, Div, Max (any order: the maximum of
// finite numbers), ZeroBelow(x, t, y) = (x < t ? 0 : y) per lane, Pow2(n) = 2^n for integral n in
// [-126, 127] (NaN lanes: any value).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// The value pass's software prefetch (JointValues kPrefetch): how far ahead in a head's value rows, and
// whether to: SoftmaxValuesArgs::prefetch, kAuto being the weights' scheme on this CPU
// (ActiveGemvPrefetch). Measured on the Intel Xeon VM of bench (m) (kAhead there; 2026-12-06,
// attention_bench, 24 layers of 8 KV heads of 128, float32, three alternated runs): 2048 positions
// 23.8-25.3 -> 24.1-27.3 GB/s, 8192 positions 23.4-25.7 -> 24.6-27.5; 1.5 KiB or 6 KiB ahead, or 2 KiB into
// L1, no faster than none. On a 2-core Zen 5 (kHardware) values prefetched 3 KiB ahead were 2-10 % slower
// (docs/benchmarks.md "a decode step's attention at long contexts"), so it follows the weights' scheme.
// (Those runs asked for each pass's own lines 3 KiB ahead; kValuePrefetchRows below replaced that.)
// Where kPrefetch, the first column group of each key block asks for whole value rows this many rows ahead
// (JointValues). On the Zen 3 VM (attention_bench, 24 layers, 32 query heads on 8 KV heads of 128, float32,
// 2026-12-07, binaries alternated twice) 2607-3389 -> 1692-2140 us a layer at 2048 positions against each
// group asking for its own lines 3 KiB ahead: with 4 rows sharing 16-column passes that was 6 rows ahead.
constexpr int64_t kValuePrefetchRows = 8;
// Keys per block of JointValues' value pass (see there). Measured on a 2-core Zen 3 VM (attention_bench, 24
// layers of 16 heads of 128, float32, 2026-12-07, binaries alternated twice): 2048 positions 2158-2179 ->
// 1957 us a layer, 8192 positions 8733-9036 -> 7458-7468 against one pass over all keys per column group.
constexpr int64_t kValueKeyBlock = 128;
inline bool ValuePrefetchAhead(const SoftmaxValuesArgs& a) {
  return (a.prefetch == GemvPrefetch::kAuto ? ActiveGemvPrefetch() : a.prefetch) == GemvPrefetch::kAhead;
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

// Step 6, out = sum_j p_j v_j (p_j in the scores), for R rows whose value rows are the same (one row:
// SoftmaxValues; several: SoftmaxValuesRows): kV vectors of columns at a time in registers, then single
// vectors, then lanes; each value vector is loaded once for all R rows while j < the smallest n, then
// each row goes on alone to its own n. Every column of every row is the reference's sum in its order
// (columns never mix, so how they are grouped changes no bits). R rows read the values once instead of R
// times: a causal prefill's value pass was bound by reading them from L2 (issue 35).
// kPrefetch: the first column group of each key block asks for whole value rows into L2 kValuePrefetchRows
// rows ahead of the row being read (GemvPrefetch::kAhead, the weights' scheme on this CPU; speed only: the
// same arithmetic).
template <class V, int R, int kV, class T, bool kPrefetch>
void JointValues(const SoftmaxValuesArgs* rows, const T* v) {
  using Vec = typename V::Vec;
  constexpr int64_t L = V::kLanes;
  const int64_t dv = rows[0].dv, ld = rows[0].v_row_stride;
  const float* s[R];
  int64_t n[R];
  int64_t n_min = rows[0].n;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    s[r] = rows[r].scores;
    n[r] = rows[r].n;
    n_min = n[r] < n_min ? n[r] : n_min;
  }
  const int64_t row_bytes = dv * static_cast<int64_t>(sizeof(T));
  // Columns [d, d + K * L) of every row over the keys [j0, j1) (j1 <= n_min: all R rows together), from the
  // running sums stored in out (or 0 for the first block); the last block (j1 == n_min) also takes each row on
  // alone to its own n. A stored and reloaded sum is the same float, so every column still gets the
  // reference's additions in ascending j.
  const auto columns = [&](int64_t d, auto k_vecs, int64_t j0, int64_t j1) __attribute__((always_inline)) {
    constexpr int K = decltype(k_vecs)::value;
    Vec o[R][K];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int k = 0; k < K; ++k) o[r][k] = j0 == 0 ? V::Set1(0.0f) : V::Load(rows[r].out + d + k * L);
    }
    const T* vj = v + d + j0 * ld;
    for (int64_t j = j0; j < j1; ++j, vj += ld) {
      if constexpr (kPrefetch) {
        // The first column group of a block asks for the whole value row kValuePrefetchRows ahead, one
        // prefetch per 64-byte line; the block's later groups then read from L2.
        if (d == 0) {
          const char* ahead = reinterpret_cast<const char*>(vj + kValuePrefetchRows * ld);
          for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(ahead + b, 0, 2);
        }
      }
      Vec w[K];
#pragma GCC unroll 8
      for (int k = 0; k < K; ++k) w[k] = LoadValues<V>(vj + k * L);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const Vec p = V::Set1(s[r][j]);
#pragma GCC unroll 8
        for (int k = 0; k < K; ++k) o[r][k] = V::Add(o[r][k], V::Mul(p, w[k]));
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (j1 == n_min) {
        const T* vr = v + d + n_min * ld;
        for (int64_t j = n_min; j < n[r]; ++j, vr += ld) {
          const Vec p = V::Set1(s[r][j]);
#pragma GCC unroll 8
          for (int k = 0; k < K; ++k) o[r][k] = V::Add(o[r][k], V::Mul(p, LoadValues<V>(vr + k * L)));
        }
      }
#pragma GCC unroll 8
      for (int k = 0; k < K; ++k) V::Store(rows[r].out + d + k * L, o[r][k]);
    }
  };
  // The keys in blocks of kValueKeyBlock, every column group over a block before the next block: a group's
  // pass reads one or two 64-byte lines of each value row, so passes over all n keys at once read a head's
  // values from memory once per group (its lines fall out of L2 before the next group's pass).
  for (int64_t j0 = 0;; j0 += kValueKeyBlock) {  // at least one block (the rows' own keys when n_min is 0)
    const int64_t j1 = n_min - j0 > kValueKeyBlock ? j0 + kValueKeyBlock : n_min;
    int64_t d = 0;
    for (; d + kV * L <= dv; d += kV * L) columns(d, std::integral_constant<int, kV>{}, j0, j1);
    for (; d + L <= dv; d += L) columns(d, std::integral_constant<int, 1>{}, j0, j1);
    if (j1 == n_min) break;
  }
  // The columns past the last whole vector, lane by lane.
  int64_t d = dv - dv % L;
  for (; d < dv; ++d) {
    for (int r = 0; r < R; ++r) {
      float o = 0.0f;
      for (int64_t j = 0; j < n[r]; ++j) o = o + s[r][j] * ValueAt(v, j * ld + d);
      rows[r].out[d] = o;
    }
  }
}

template <class V, int R, int kV>
void JointValuesOf(const SoftmaxValuesArgs* rows) {
  const bool ahead = ValuePrefetchAhead(rows[0]);
  if (rows[0].v_bf16 != nullptr) {
    if (ahead) JointValues<V, R, kV, uint16_t, true>(rows, rows[0].v_bf16);
    else JointValues<V, R, kV, uint16_t, false>(rows, rows[0].v_bf16);
  } else {
    if (ahead) JointValues<V, R, kV, float, true>(rows, rows[0].v);
    else JointValues<V, R, kV, float, false>(rows, rows[0].v);
  }
}

// Steps 1-5 of one row: the scores become p_j in place.
template <class V>
void Probabilities(const SoftmaxValuesArgs& a) {
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
  for (int64_t i = 0; i < L; ++i) m = m < lanes[i] ? lanes[i] : m;  // std::max's choice, without std:: code
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
}

template <class V, int kVecs>
void SoftmaxValues(const SoftmaxValuesArgs& a) {
  Probabilities<V>(a);
  JointValuesOf<V, 1, kVecs>(&a);  // 6: the values
}

// SoftmaxValuesRows (kernels/attention_cpu.h): each row's probabilities, then the rows in groups of
// kJointRows: one value pass (kJointVecs vectors of columns at a time, kJointRows x kJointVecs
// accumulators in registers) for a group that shares its value rows, else SoftmaxValues's per row.
template <class V, int kVecs, int kJointRows, int kJointVecs>
void SoftmaxValuesRows(const SoftmaxValuesArgs* rows, int count) {
  static_assert(kJointRows >= 1 && kJointRows <= kSoftmaxValuesMaxRows, "a group fits the API's rows");
  for (int r = 0; r < count; ++r) Probabilities<V>(rows[r]);
  for (int r0 = 0; r0 < count; r0 += kJointRows) {
    const SoftmaxValuesArgs* g = rows + r0;
    const int c = count - r0 < kJointRows ? count - r0 : kJointRows;
    bool shared = c >= 2;
    for (int r = 1; r < c; ++r)
      shared = shared && g[r].v == g[0].v && g[r].v_bf16 == g[0].v_bf16 && g[r].v_row_stride == g[0].v_row_stride &&
               g[r].dv == g[0].dv;
    if (shared) {
      if constexpr (kJointRows >= 2) if (c == 2) { JointValuesOf<V, 2, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 3) if (c == 3) { JointValuesOf<V, 3, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 4) if (c == 4) { JointValuesOf<V, 4, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 5) if (c == 5) { JointValuesOf<V, 5, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 6) if (c == 6) { JointValuesOf<V, 6, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 7) if (c == 7) { JointValuesOf<V, 7, kJointVecs>(g); continue; }
      if constexpr (kJointRows >= 8) if (c == 8) { JointValuesOf<V, 8, kJointVecs>(g); continue; }
    }
    for (int r = 0; r < c; ++r) JointValuesOf<V, 1, kVecs>(&g[r]);
  }
}

}  // namespace zipmoe::kernels::attention_tile
