// The softmax-and-values half of one query row's causal attention on the CPU (the executor's
// AttendCausal, services/executor/cpu_ops.h, computes the scores q·k_j with Bf16Gemm and hands each
// query row's visible scores here). Host API only; no torch, all float32.
//
// For a row of n visible scores s[0, n) (key j of the row's visible range), value rows
// v_j = v + j * v_row_stride ([dv] floats each), an optional sink logit (gpt-oss: one per head, joins
// the softmax's denominator and is dropped after it) and out [dv]:
//   1. s_j = s_j * scale
//   2. m = max over j of s_j (and the sink)
//   3. e_j = AttentionExp(s_j - m)
//   4. sum: sixteen partial sums, lane L taking e_j for j = L, L + 16, ... in ascending j (each starting
//      at 0), folded as lane[i] = lane[i] + lane[i + w] for w = 8, 4, 2, 1 (i < w); then, with a sink,
//      sum = sum + AttentionExp(sink - m)
//   5. p_j = e_j / sum (written back to s_j)
//   6. out[d] = 0; out[d] = out[d] + p_j * v_j[d] for j ascending (v_j[d] a BF16 value widened to
//      float32 when the cache holds BF16)
// Every operation is one fp32 multiplication, addition, subtraction or division rounded to nearest (no
// fused multiply-add; the translation units are compiled with -ffp-contract=off), lanes never mix
// except in the fixed fold of step 4: every variant is BIT-IDENTICAL to SoftmaxValuesReference, on
// every machine (no libm call: AttentionExp is the same arithmetic everywhere). A NaN score makes the
// whole output NaN (the executor then fails the sequence, as for NaN logits).
//
// AttentionExp(x) for x <= 0 (what step 3 passes): 0 below -87 (e^-87 = 1.6e-38, under FLT_MIN; a key
// that far below the row's maximum adds nothing a float sum could keep); otherwise e^x within 2 ulp
// (tests/kernels/attention_cpu_test.cc measures it against double-precision exp): n = round(x log2 e)
// (ties to even, by adding and subtracting 1.5 * 2^23), r = x - n ln2 with ln2 split in two (Cody and
// Waite), e^r by its Taylor polynomial to r^7 in Horner form, times 2^n built from the exponent bits.
// NaN stays NaN.
//
// Variants (the Bf16Gemm ISAs of kernels/bf16_gemm.h, chosen by BestGemmIsa and its ZIPMOE_GEMM_ISA
// override, each only where GemmIsaAvailable says so; each in its own translation unit):
//   kScalar  SoftmaxValuesReference; any CPU.
//   kAvx2    x86-64 AVX2: 8 lanes; values 64 columns per pass; SoftmaxValuesRows 4 rows x 16 columns
//            (attention_cpu_avx2.cc).
//   kAvx512  x86-64 AVX-512F: 16 lanes; values 128 columns per pass; SoftmaxValuesRows 8 rows x 32
//            columns (attention_cpu_avx512.cc).
//   kNeon    AArch64: 4 lanes; values 32 columns per pass; SoftmaxValuesRows 4 rows x 16 columns
//            (attention_cpu_neon.cc; tested under qemu, speed unmeasured).
// Where BestGemmIsa picks kAvx512Bf16 or kAmxBf16 this runs kAvx512, kNeonBf16 runs kNeon.
// Thread-safety: reentrant; one call is single-threaded (the executor runs KV heads in parallel).
#pragma once

#include <cstdint>
#include <cstring>

#include "common/status.h"
#include "kernels/bf16_gemm.h"

namespace zipmoe::kernels {

// The constants of AttentionExp, shared by the reference and the vector variants.
namespace attention_exp {
constexpr float kMinInput = -87.0f;          // below: 0
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kShifter = 12582912.0f;      // 1.5 * 2^23: (t + kShifter) - kShifter rounds t to an integer
constexpr float kLn2Hi = 0.693145751953125f;  // ln 2's first 16 bits: n * kLn2Hi is exact for |n| < 2^8
constexpr float kLn2Lo = 1.42860682030941723e-6f;  // ln 2 - kLn2Hi
// 1/k! for k = 7 .. 1 (Horner from the highest power down), then 1.
constexpr float kC7 = 1.0f / 5040.0f, kC6 = 1.0f / 720.0f, kC5 = 1.0f / 120.0f, kC4 = 1.0f / 24.0f,
                kC3 = 1.0f / 6.0f, kC2 = 0.5f;
}  // namespace attention_exp

// e^x as described above (the reference; the variants do the same operations lane by lane).
inline float AttentionExp(float x) {
  namespace c = attention_exp;
  if (x != x) return x;  // NaN (the vector variants' arithmetic keeps it NaN too)
  if (x < c::kMinInput) return 0.0f;
  const float n = (x * c::kLog2e + c::kShifter) - c::kShifter;
  const float r = (x - n * c::kLn2Hi) - n * c::kLn2Lo;
  float p = c::kC7;
  p = p * r + c::kC6;
  p = p * r + c::kC5;
  p = p * r + c::kC4;
  p = p * r + c::kC3;
  p = p * r + c::kC2;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n from its exponent bits (n in [-126, 127] for the inputs above -87 and up to 88; NaN: any bits,
  // the product stays NaN).
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// Step 4's fold of the sixteen partial sums: lane[i] = lane[i] + lane[i + w] for w = 8, 4, 2, 1 (i < w);
// returns lane[0].
inline float FoldSixteenLanes(float (&lanes)[16]) {
  for (int w = 8; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) lanes[i] = lanes[i] + lanes[i + w];
  return lanes[0];
}

struct SoftmaxValuesArgs {
  float* scores = nullptr;     // [n] in: the row's visible scores q·k_j; out: p_j
  int64_t n = 0;               // visible keys (>= 1)
  float scale = 1.0f;          // applied to the scores first (1 / sqrt(dk) usually)
  const float* sink = nullptr; // one logit beside the scores (gpt-oss), or null
  const float* v = nullptr;    // value row j at v + j * v_row_stride, dv floats, j < n
  // A BF16 KV cache (GeneratorOptions::kv_cache_bf16): the value rows as BF16 bit patterns, laid out as
  // v; used instead of v when set. Each is widened to float32 exactly, then step 6 as above.
  const uint16_t* v_bf16 = nullptr;
  int64_t v_row_stride = 0;    // floats between value rows (>= dv)
  int64_t dv = 0;              // value head dimension
  float* out = nullptr;        // [dv] written; may not overlap scores or v
  // The value rows' software prefetch (speed only, the same bits): kAhead asks for each row's lines into L2
  // 3 KiB ahead, kHardware leaves them to the core's prefetchers, kAuto follows the weights' scheme
  // (ActiveGemvPrefetch, kernels/bf16_gemm.h). SoftmaxValuesRows uses rows[0]'s.
  GemvPrefetch prefetch = GemvPrefetch::kAuto;
};

// Checks sizes and pointers. Errors: kInvalidArgument naming the field (n < 1, dv < 1, a value row
// stride below dv, a null pointer). Values are not read.
Status ValidateSoftmaxValuesArgs(const SoftmaxValuesArgs& a);

// The scalar reference: the steps above as plain loops. No validation.
void SoftmaxValuesReference(const SoftmaxValuesArgs& a);

// The ISA SoftmaxValues runs (see above), detected once per process.
GemmIsa AttentionIsa();
// True when `isa` has a variant here and the CPU runs it.
bool AttentionIsaAvailable(GemmIsa isa);
// AttentionIsa()'s variant. No validation (AttendCausal's shapes come from the loaded model).
void SoftmaxValues(const SoftmaxValuesArgs& a);
// Validates, then runs `isa`'s variant (tests compare the variants). kUnavailable when
// !AttentionIsaAvailable(isa).
Status SoftmaxValuesWithIsa(GemmIsa isa, const SoftmaxValuesArgs& a);

// Several query rows at once (a causal prefill's consecutive rows of one head): rows[i]'s scores and
// out are exactly SoftmaxValues(rows[i])'s, bit for bit. Rows whose value rows are the same (equal v or
// v_bf16, v_row_stride and dv; their n may differ) share one pass over them: each value vector is
// loaded once for all of them while j is below the smallest n, so count rows read the values once
// instead of count times (the value pass of a 2000-token prefill was bound by reading them from L2;
// issue 35). count in [1, kSoftmaxValuesMaxRows]; rows' scores and outs must not overlap one another.
// Measured (bench/attention_bench.cc --queries 512 --layers 4, 2 threads, Zen 5 VM, with AttendCausal's
// per-block order): 512 queries after 1536 positions 22.0-22.6 -> 15.1 ms a layer, after 0 positions
// 3.0-3.2 -> 2.4 ms.
constexpr int kSoftmaxValuesMaxRows = 8;
// SoftmaxValuesReference per row.
void SoftmaxValuesRowsReference(const SoftmaxValuesArgs* rows, int count);
// AttentionIsa()'s variant. No validation.
void SoftmaxValuesRows(const SoftmaxValuesArgs* rows, int count);
// Validates count and each row (errors name the row), then runs `isa`'s variant. kUnavailable when
// !AttentionIsaAvailable(isa).
Status SoftmaxValuesRowsWithIsa(GemmIsa isa, const SoftmaxValuesArgs* rows, int count);

}  // namespace zipmoe::kernels
