// The dense parts of a decode step on the GPU (issue 36 item 3: few launches per layer): RMSNorm,
// rotate-half rotary embedding and one query token's causal attention over the KV cache, each one
// launch on BF16 tensors, where the torch path issued ~8 (RMSNorm: to(float), pow, mean, add, rsqrt,
// mul, to(bf16), mul), ~8 per rotated tensor and ~10 (bmm, scale, softmax, casts, bmm, reshapes).
// A plain C++ API taking device pointers and a stream (no CUDA or torch headers), so the executor's
// torch code calls it with its tensors' data pointers; dense_decode.cu with CUDA, dense_decode_ref.cc
// holds the CPU references (and kUnavailable launches without CUDA).
//
// Arithmetic (fixed, so the CPU references reproduce it; BF16 values are uint16 bit patterns, widened
// exactly to fp32, results rounded to BF16 to nearest even, NaN -> 0x7fc0 as c10::BFloat16 does):
//   RMSNorm (HF Qwen2RMSNorm / LlamaRMSNorm in BF16: x.float(), variance, x * rsqrt(var + eps),
//     .to(bf16), weight * ...): one block of kNormThreads per row; thread i accumulates x_j² with FMAs
//     for j = i, i + kNormThreads, ... ascending; warps add their lanes by a xor butterfly (16, 8, 4,
//     2, 1) and the warp sums are added in ascending warp order; var = sum / d, inv = 1 / sqrt(var +
//     eps) (IEEE division and square root), y_j = bf16(w_j * bf16(x_j * inv)).
//   Rotary (apply_rotary_pos_emb, rotate-half, the first `rotary_dim` dims of each head; the rest pass
//     through): for i < rotary_dim / 2, x1 = x[i], x2 = x[i + half]:
//     x[i] = bf16(x1 * cos[i] + (-x2) * sin[i]), x[i + half] = bf16(x2 * cos[i + half] + x1 * sin[i + half])
//     (products and sum each rounded in fp32, no fused multiply-add: torch's elementwise order).
//   Decode attention (one query token at position `pos` per head; key j visible iff j <= pos and, with
//     a window, pos - j < window): one block of kAttentionThreads per query head, kv head h / group
//     (repeat_kv); s_j = dot(q, k_j) * scale, the dot product by one warp (lane l: FMAs over dims l, l +
//     32, ... ascending, then the xor butterfly), warp w taking keys first + w, first + w + W, ...;
//     m = max(s, sink); e_j = exp(s_j - m); Σ e: thread i adds e_j for j = first + i, + kAttentionThreads,
//     ... in order, the butterfly, warps in order, then + exp(sink - m) (gpt_oss's sink logit, when
//     given); out[d] = bf16(Σ_j (e_j / Σ e) v_j[d]) with FMAs in ascending j. exp is CUDA's expf on
//     the device and std::exp on the CPU (they may differ by an ulp: device tests compare within a
//     tolerance; everything else is bit-for-bit the same order).
// The results depend only on the inputs (never on timing or the grid), so the GPU path stays
// byte-identical run to run, as docs/architecture.md "GPU executor" requires; against the fp32 CPU
// path it differs by BF16 rounding of the hidden states, as the torch path did.
//
// Thread-safety: reentrant; launches enqueue on the caller's stream (nullptr: the legacy default
// stream, which orders them with torch's operators there).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace zipmoe::kernels {

constexpr int kNormThreads = 256;
constexpr int kAttentionThreads = 128;

// y [rows, d] = RMSNorm of x [rows, d] (BF16, row-major, contiguous) with weight [d] (BF16); y may be x.
struct RmsNormBf16Args {
  const uint16_t* x = nullptr;
  const uint16_t* weight = nullptr;
  uint16_t* y = nullptr;
  int64_t rows = 0;
  int64_t d = 0;
  float eps = 1e-6f;
};

// Rotate-half rotary embedding in place of up to two tensors (q and k of one step): a [n, a_heads,
// head_dim] and b [n, b_heads, head_dim] (BF16, contiguous; b may be null with b_heads 0), cos / sin
// [n, rotary_dim] float32 (row t: token t's position, as RotaryEmbedding::CosSin gives them).
// rotary_dim even and <= head_dim.
struct RotaryBf16Args {
  uint16_t* a = nullptr;
  int64_t a_heads = 0;
  uint16_t* b = nullptr;
  int64_t b_heads = 0;
  int64_t n = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;
  const float* cos = nullptr;
  const float* sin = nullptr;
};

// One query token against a sequence's KV cache: q [n_heads, dk] (BF16, contiguous); key j of kv head
// h at k + h * k_head_stride + j * dk (v likewise with dv), j < total (BF16); the query sits at
// position pos (total - 1 at decode, the new key already appended). out [n_heads * dv] BF16; scores
// [n_heads, total] float32 scratch (a visible key's entry ends as its probability; a hidden key's is
// not written). sinks: [n_heads] float32 (gpt_oss) or null.
// window: 0 = none, else keys with pos - j >= window are hidden (sliding-window layers).
struct DecodeAttentionBf16Args {
  const uint16_t* q = nullptr;
  const uint16_t* k = nullptr;
  const uint16_t* v = nullptr;
  int64_t k_head_stride = 0;
  int64_t v_head_stride = 0;
  int64_t n_heads = 0;
  int64_t n_kv = 0;
  int64_t dk = 0;
  int64_t dv = 0;
  int64_t total = 0;
  int64_t pos = 0;
  int64_t window = 0;
  float scale = 1.0f;
  const float* sinks = nullptr;
  float* scores = nullptr;
  uint16_t* out = nullptr;
};

// Host checks of the sizes (pointers not dereferenced). Errors: kInvalidArgument naming the field.
Status ValidateRmsNormBf16(const RmsNormBf16Args& a);
Status ValidateRotaryBf16(const RotaryBf16Args& a);
Status ValidateDecodeAttentionBf16(const DecodeAttentionBf16Args& a);

// CPU references of the arithmetic above (host pointers). Errors: the Validate* ones.
Status RmsNormBf16Reference(const RmsNormBf16Args& a);
Status RotaryBf16Reference(const RotaryBf16Args& a);
Status DecodeAttentionBf16Reference(const DecodeAttentionBf16Args& a);

// GPU: one launch each on `stream` (a cudaStream_t as void*; nullptr = the legacy default stream);
// device pointers; enqueue only. Errors: the Validate* ones, kInvalidArgument (null pointer),
// kUnavailable (built without CUDA), kInternal (launch error, with CUDA's message).
Status LaunchRmsNormBf16(const RmsNormBf16Args& a, void* stream);
Status LaunchRotaryBf16(const RotaryBf16Args& a, void* stream);
Status LaunchDecodeAttentionBf16(const DecodeAttentionBf16Args& a, void* stream);

// Test helpers: host pointers in and out; copy the inputs to fresh device buffers, launch, copy the
// outputs back (y; a and b; out and scores), synchronise. Errors: as the launches, kUnavailable also
// when there is no device.
Status RmsNormBf16OnDevice(const RmsNormBf16Args& host);
Status RotaryBf16OnDevice(const RotaryBf16Args& host);
Status DecodeAttentionBf16OnDevice(const DecodeAttentionBf16Args& host);

}  // namespace zipmoe::kernels
