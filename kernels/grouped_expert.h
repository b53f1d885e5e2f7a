// Grouped routed-expert MLP of one MoE layer on the GPU (issue 36 item 3): every selected expert of
// the layer in three launches, reading BF16 expert weights where they lie (device memory, or host
// memory the device can address), so a decode step issues no launch per expert:
//   1. gate/up:  act[p, r] = silu(gate_e[r] · x[t_p]) * (up_e[r] · x[t_p])     for every pair p
//   2. down:     out[p, h] = (down_e[h] · act[p]) * w_p
//   3. combine:  y[t, h]   = Σ_{p of token t, ascending expert} out[p, h]
// where a "pair" p = (selected expert e_p, token t_p, routing weight w_p) is one top-k choice of one
// token (HF: the rows of `expert_mask`; modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock.forward). The
// sum of step 3 runs in ascending expert order, as the HF loop and the CPU path add experts, so the
// result never depends on where an expert's bytes came from or in which order experts arrived.
//
// Arithmetic (fixed, so the CPU reference below reproduces it): x and weights BF16 widened to fp32;
// each dot product is computed by one warp: lane l accumulates, with fused multiply-adds in index
// order, the products of elements [256·i + 8·l, 256·i + 8·l + 8) for i = 0, 1, ... (8-element
// chunks, vector path) — or elements l, l + 32, l + 64, ... (scalar path, when a row's length is not a
// multiple of 8) —, then the 32 partial sums are added by a butterfly (xor 16, 8, 4, 2, 1). act and
// out are fp32; silu(g) = g / (1 + exp(-g)) in fp32. The path depends on the lengths alone (as the
// reference's), never on where the bytes lie.
// The result is independent of how many tokens share an expert (each token's sums are its own).
// The vector paths read 16 bytes at a time: x, act and every weight matrix must then be 16-byte
// aligned (cudaMalloc'd / torch-allocated buffers and the executor's device slots are): the launcher
// refuses a misaligned x or act, and GroupedExpertWeightsAligned checks the weight addresses on the
// host before they are uploaded.
//
// Shapes and dtypes (all row-major, contiguous):
//   x:       [n_tokens, hidden] BF16 bit patterns (uint16)
//   weights: [n_experts_sel × 3] addresses (uint64) of each selected expert's gate [inter, hidden],
//            up [inter, hidden] and down [hidden, inter] BF16 matrices
//   expert_pair_offsets: [n_experts_sel + 1] int32: expert j's pairs are [off[j], off[j+1])
//   pair_token: [n_pairs] int32 token row of x;  pair_weight: [n_pairs] float32 routing weight
//   token_pair_offsets: [n_tokens + 1] int32 and token_pairs: [n_pairs] int32: token t's pairs,
//            ascending (pairs are ordered by expert, so ascending pair index = ascending expert)
//   act: [n_pairs, inter] float32 scratch; out: [n_pairs, hidden] float32 scratch;
//   y:   [n_tokens, hidden] float32 result (every element written; tokens with no pair get 0)
//
// Thread-safety: reentrant; launches on the caller's stream, which orders them with the caller's
// other work (torch's ops on the legacy default stream when stream is nullptr).
#pragma once

#include <cstdint>

#include "common/status.h"

namespace zipmoe::kernels {

struct GroupedExpertArgs {
  const uint16_t* x = nullptr;
  int64_t n_tokens = 0;
  int64_t hidden = 0;
  int64_t inter = 0;
  const uint64_t* weights = nullptr;
  int32_t n_experts = 0;  // selected experts of the layer (rows of `weights` / 3)
  const int32_t* expert_pair_offsets = nullptr;
  int32_t n_pairs = 0;
  const int32_t* pair_token = nullptr;
  const float* pair_weight = nullptr;
  const int32_t* token_pair_offsets = nullptr;
  const int32_t* token_pairs = nullptr;
  float* act = nullptr;
  float* out = nullptr;
  float* y = nullptr;
};

// Checks shapes and the pair tables' consistency on the host (pointers must then be host-readable:
// the reference's arguments, or a host copy of the device tables). Errors: kInvalidArgument naming
// the first bad field (non-positive sizes, offsets not non-decreasing from 0 to n_pairs, a token
// outside [0, n_tokens), a token's pair list not ascending or not listing its pairs).
Status ValidateGroupedExpertTables(const GroupedExpertArgs& args);

// CPU reference of the three steps with the GPU's arithmetic (header comment): host pointers;
// `weights` holds host addresses. Errors: ValidateGroupedExpertTables's.
Status GroupedExpertMlpReference(const GroupedExpertArgs& args);

// Whether every address of `weights` (n_experts × 3 host-side values, as uploaded to args.weights) is
// 16-byte aligned where the vector paths read it: gate/up when hidden % 8 == 0, down when inter % 8 == 0.
bool GroupedExpertWeightsAligned(const uint64_t* weights, int32_t n_experts, int64_t hidden, int64_t inter);

// GPU: the three launches on `stream` (a cudaStream_t as void*; nullptr = the legacy default
// stream). Device pointers (or host memory mapped for the device); enqueues only. The tables are
// not validated here (they live on the device): validate their host copy before uploading.
// Errors: kInvalidArgument (non-positive sizes, null pointers, x or act not 16-byte aligned on a
// vector path), kUnavailable (built without CUDA),
// kInternal (launch error, with the CUDA error string).
Status LaunchGroupedExpertMlp(const GroupedExpertArgs& args, void* stream);

// Test/bench helper: `host` as for GroupedExpertMlpReference (host pointers; weights holds host
// addresses); copies x, the weights and the tables to fresh device buffers, runs
// LaunchGroupedExpertMlp, copies act, out and y back into host's buffers; syncs. `repeats` > 1 runs
// the launch that many times and, with `seconds`, reports the mean time of one launch (CUDA events).
// Errors: ValidateGroupedExpertTables's, kUnavailable (built without CUDA, no device), kInternal.
Status GroupedExpertMlpOnDevice(const GroupedExpertArgs& host, int repeats = 1, double* seconds = nullptr);

}  // namespace zipmoe::kernels
