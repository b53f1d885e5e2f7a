// Self-attention of one decoder layer over a ragged batch, with a per-sequence KV cache:
//   - grouped-query attention (qwen2_moe with q/k/v bias, mixtral, qwen3_moe with per-head q/k
//     RMSNorm over head_dim, olmoe with q/k RMSNorm over the whole projection and clip_qkv);
//   - DeepSeek-V2 multi-head latent attention (q_proj or q_a_proj -> q_a_layernorm -> q_b_proj;
//     kv_a_proj_with_mqa -> [compressed kv, k_pe]; kv_a_layernorm; kv_b_proj -> k_nope, v per
//     head; k_pe shared by all heads; interleaved RoPE on q_pe/k_pe). The float32 CPU executor caches
//     the latent form: one KV head of keys [1, T, kv_lora_rank + rope] (normalised compressed kv, then
//     rotated k_pe) whose first kv_lora_rank columns are also the values (its value tensors are
//     [1, T, 0]), with W_UK absorbed into the query and W_UV applied after attention (attention.cc
//     MlaLatentForward); the GPU executor caches
//     the full per-head keys [heads, T, q_head_dim] and values [heads, T, v_head_dim], as the HF code does.
// Projections run once over all N rows of the batch; the softmax(q k^T * scale + causal mask) v
// part runs per sequence against that sequence's cache. Softmax is computed in float32.
//
// Internal to services/executor. KvCache is owned by one sequence and used by one thread.
#pragma once

#include <ATen/ATen.h>

#include <utility>
#include <vector>

#include "common/checkpoint/model_config.h"
#include "services/executor/model_weights.h"
#include "services/executor/rope.h"

namespace zipmoe::executor {

// Keys and values of one sequence for every layer, grown by doubling (and the Gated DeltaNet layers'
// fixed-size state). A sliding-window layer of a CPU cache may hold only the positions a later query can
// still see (set_trim_windows): its rows then start at first_position(layer), not at 0.
class KvCache {
 public:
  KvCache() = default;
  explicit KvCache(int64_t n_layers) : layers_(static_cast<size_t>(n_layers)) {}

  // Positions cached (the next token's position).
  int64_t length() const { return length_; }
  // Growth in whole pages of `positions` (a KV budget counts pages: generator.h kv_budget_bytes)
  // instead of doubling; 0 = doubling (the default).
  void set_page_positions(int64_t positions) { page_positions_ = positions; }
  // Positions the sequence may reach (its prompt plus the new tokens it may still generate), a hint: a CPU
  // cache that has to grow reserves room for up to that many positions at once, though never more than
  // twice the positions it needs then (what doubling reserves anyway), so a request's decode steps append
  // in place instead of copying every cached position into a larger tensor. That copy writes fresh memory:
  // at 2000 positions of qwen2_moe mini (384 MB of float32 keys and values) it took ~0.8 s of the first
  // decode step on a 2-vCPU VM whose page faults cost ~8 us each, and under a KV budget it recurred every
  // page. 0 = no hint (growth as set_page_positions says). Values and their order are the same either way.
  void set_expected_positions(int64_t positions) { expected_positions_ = positions; }
  // Keys and values of the CPU executor stored as BF16 (GeneratorOptions::kv_cache_bf16: each float32
  // value rounded to the nearest BF16, ties to even, as it is appended; attention reads them widened
  // back exactly): half the bytes a position takes and a decode step reads. Set before the first Append.
  void set_bf16_storage(bool bf16) { bf16_storage_ = bf16; }
  // Sliding-window layers (Append's `window` > 0) of a CPU cache hold only what a later query can see, as
  // llama.cpp's SWA cache does: the last window - 1 positions and room to append (WindowCapacity), instead
  // of every position, so such a layer's bytes stop growing past its window (gpt_oss: half the layers at
  // window 128; afmoe: three layers in four). A cache moves its last window - 1 rows to the front when that
  // room runs out (amortised: under one row a step for 64 rows of room). The attention reads the same rows
  // in the same order: the same bits as a cache of every position. What it costs: Prefix can no longer cut
  // such a cache before earliest_prefix(). Off by default here (the Model turns it on: GeneratorOptions::
  // kv_window_full); set before the first Append. No effect on a device cache (it holds every position).
  void set_trim_windows(bool trim) { trim_windows_ = trim; }
  bool trims_windows() const { return trim_windows_; }
  // Rows a trimmed sliding-window layer of `window` positions holds while t positions are appended: the
  // window - 1 positions a new query still sees, the t new ones and 64 rows (or a page, when larger) of room,
  // in whole pages of `page_positions` (0: no pages). The KV budget counts these (generator.cc KvBudget).
  static int64_t WindowCapacity(int64_t window, int64_t t, int64_t page_positions);
  // Appends k [n, t, dk], v [n, t, dv] at position length() of `layer_id` and returns views of the
  // cache of that layer from first_position(layer_id) on: k [n, length()+t - first, dk], v [n, length()+t -
  // first, dv]. `window` > 0: the layer's sliding window (ModelConfig::attention_window), the same on every
  // call, which lets a trimming cache (set_trim_windows) drop positions before length() - (window - 1).
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer_id, const at::Tensor& k, const at::Tensor& v,
                                           int64_t window = 0);
  // The position of the first row layer `layer_id` holds: 0, or for a trimmed sliding-window layer the
  // earliest position a query at length() or later can see (or earlier).
  int64_t first_position(int64_t layer_id) const { return layers_[static_cast<size_t>(layer_id)].first; }

  // One layer of a CPU cache as raw rows (what cpu::AttendCausal reads): key j of kv head h at
  // k + h * k_head_stride + (j - first) * dk (v likewise with dv); k_bf16 / v_bf16 instead when the cache
  // stores BF16 (set_bf16_storage), the others null.
  struct Rows {
    int64_t first = 0;  // first_position(layer)
    const float* k = nullptr;
    const float* v = nullptr;
    const uint16_t* k_bf16 = nullptr;
    const uint16_t* v_bf16 = nullptr;
    int64_t k_head_stride = 0;
    int64_t v_head_stride = 0;
  };
  // A decode step's Append without torch operators: one position of float32 rows on the CPU, k [n_kv, dk]
  // and v [n_kv, dv] contiguous, stored at position length() of `layer_id` as Append would store
  // k [n_kv, 1, dk], v [n_kv, 1, dv] (the same growth, the same values, the same `window`); returns the
  // layer's rows, positions [first, length()] valid. The layer's cache must be a CPU one of those shapes, or
  // not made yet.
  Rows AppendPosition(int64_t layer_id, const float* k, const float* v, int64_t n_kv, int64_t dk, int64_t dv,
                      int64_t window = 0);
  // Commits t new positions once every layer has appended them.
  void Advance(int64_t t) { length_ += t; }

  // Bytes the cache holds: every layer's key and value tensors (their whole capacity) and the Gated
  // DeltaNet layers' state.
  int64_t bytes() const { return Bytes(false); }
  // The part of bytes() that holds positions [0, length()) (the rest is room reserved for growth).
  int64_t length_bytes() const { return Bytes(true); }
  // Whether a Gated DeltaNet layer ran: its state summarises every position, so the cache can be
  // reused at its full length only (a KV cache can be cut at any position).
  bool has_recurrent_state() const { return !linear_.empty(); }
  // A copy holding positions [0, n) of every layer (a trimmed sliding-window layer: [its first position,
  // n)), each key / value tensor sized to the rows it holds (a prompt that starts with those n tokens
  // continues from it: prefix_cache.h). Requires earliest_prefix() <= n <= length(), n > 0, and no
  // cross-attention state (encoder-decoder caches are not shared). Throws c10::Error otherwise.
  // `continuing`: the copy only goes on from position n (a prefix-cache hit, prefix_cache.h), so a trimmed
  // sliding-window layer (set_trim_windows) copies only the window - 1 rows before n that a query at n or
  // later can still see, not the rows it would drop at its next append; the copy's earliest_prefix() is then
  // n when such a layer dropped rows. The values a later query reads are the same.
  KvCache Prefix(int64_t n, bool continuing = false) const;
  // The shortest prefix Prefix can cut: length() when has_recurrent_state(); else the most, over trimmed
  // sliding-window layers, of first position + window - 1 (a query at n must still see its window); else
  // 1 (or 0 for an empty cache).
  int64_t earliest_prefix() const;

  // Gated DeltaNet layers (linear_attention.h): the conv1d's last K-1 inputs [K-1, C] and the delta
  // rule's state [nv, dk, dv], float32 row-major, empty until the layer first runs (then zeros).
  struct LinearState {
    std::vector<float> conv;
    std::vector<float> recurrent;
  };
  LinearState& linear_state(int64_t layer_id) {
    if (linear_.size() < layers_.size()) linear_.resize(layers_.size());
    return linear_[static_cast<size_t>(layer_id)];
  }

  // Encoder-decoder models (switch_model.h): per decoder layer the cross-attention keys and values
  // [heads, T_encoder, d_kv], computed once from the encoder output. Empty before the encoder ran.
  bool has_cross() const { return !cross_.empty(); }
  const std::vector<std::pair<at::Tensor, at::Tensor>>& cross() const { return cross_; }
  void set_cross(std::vector<std::pair<at::Tensor, at::Tensor>> cross) { cross_ = std::move(cross); }

 private:
  struct Layer {
    at::Tensor k;        // [n, capacity, dk]: row i holds position first + i
    at::Tensor v;        // [n, capacity, dv]
    int64_t first = 0;   // the position of row 0 (> 0 only for a trimmed sliding-window layer)
    int64_t window = 0;  // the sliding window Append was given (0: none)
  };
  // Room for t more positions in `l` (copying the cached ones into a larger tensor: pages, or doubling,
  // or up to expected_positions_; a trimmed sliding-window layer: WindowCapacity rows, its rows before
  // length_ - (window - 1) dropped); `options` those of the appended float32 values (the stored dtype is
  // BF16 under bf16_storage_).
  void Reserve(Layer& l, int64_t t, int64_t window, int64_t n_kv, int64_t dk, int64_t dv,
               const at::TensorOptions& options);
  // Moves l's rows for positions [keep, length_) into fresh tensors of `capacity` rows (or, when
  // capacity is l's own, to the front of its tensors); l.first becomes keep.
  void Relocate(Layer& l, int64_t capacity, int64_t keep, int64_t n_kv, int64_t dk, int64_t dv,
                const at::TensorOptions& stored);
  // bytes(), or with held_positions_only its part for positions [0, length_) (length_bytes()).
  int64_t Bytes(bool held_positions_only) const;
  std::vector<Layer> layers_;
  std::vector<LinearState> linear_;  // [n_layers] once a Gated DeltaNet layer ran
  int64_t length_ = 0;
  int64_t page_positions_ = 0;
  int64_t expected_positions_ = 0;
  bool bf16_storage_ = false;
  bool trim_windows_ = false;
  std::vector<std::pair<at::Tensor, at::Tensor>> cross_;
};

// How the N rows of a batch map onto sequences: rows [starts[i], starts[i] + lengths[i]) belong to
// caches[i], whose first new position is caches[i]->length().
struct BatchLayout {
  std::vector<int64_t> starts;
  std::vector<int64_t> lengths;
  std::vector<KvCache*> caches;
  at::Tensor cos, sin;  // [N, rope_dim] float32 for each row's position
};

// softmax(q k^T * scale + mask) v for one sequence, heads grouped as repeat_kv does (query head h
// uses kv head h / (n_heads / n_kv_heads)). Query i sits at absolute position pos0 + i; key j at j.
// Key j is visible to query i iff j <= pos0 + i and (no window or pos0 + i - j < window).
// `sinks` (gpt_oss; undefined = none): [n_heads] float32 logits appended to each head's softmax rows
// and dropped after it (GptOssAttention's eager path).
//   q: [n_heads, t, dk], k: [n_kv_heads, T, dk], v: [n_kv_heads, T, dv] -> [t, n_heads * dv]; v's rows may
//   be strided (MLA's latent cache passes the keys' first dv columns).
//   key_begin: the position of k's and v's first row (KvCache::first_position; a trimmed sliding-window
//   layer), key j then at row j - key_begin, key_begin <= j < key_begin + T; every query must see no key
//   before it (c10::Error otherwise).
at::Tensor AttendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t pos0, double scale,
                        int64_t window, const at::Tensor& sinks = at::Tensor(), int64_t key_begin = 0);

// Whether a float32 CPU executor runs MLA over the latent KV cache (the default; attention.cc
// MlaLatentForward) or, with ZIPMOE_MLA_KV_CACHE=heads, over per-head keys and values as the HF code
// does (8-18x the bytes a position; for comparisons). Read once per process; another value is reported
// on stderr and the default kept.
bool MlaLatentKvCache();

// Attention of layer `layer_id`: x [N, hidden] (after input_layernorm) -> [N, hidden] (after o_proj).
// Appends each sequence's new keys/values to its cache (the caller calls Advance afterwards).
at::Tensor AttentionForward(const ModelConfig& config, const AttentionWeights& w, int64_t layer_id,
                            const at::Tensor& x, const BatchLayout& batch);

}  // namespace zipmoe::executor
