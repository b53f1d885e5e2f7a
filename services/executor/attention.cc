// Attention modules: Qwen2MoeAttention, MixtralAttention, Qwen3MoeAttention, OlmoeAttention,
// Glm4MoeAttention, DeepseekV3Attention, GptOssAttention, Qwen3NextAttention (eager paths of transformers) and DeepseekV2Attention
// (modeling_deepseek.py), in float32 on the CPU.
#include "services/executor/attention.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/dense_decode.h"
#include "services/executor/cpu_ops.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

// Stores t positions of `heads` heads of float32 rows (row i of head h at src + h * head_stride +
// i * row_stride, d floats) at positions [at, at + t) of a cache [heads, positions, d] held as float32
// (copied) or BF16 (rounded to nearest, ties to even).
template <typename T>
void StoreRows(T* dst, int64_t positions, int64_t at, const float* src, int64_t heads, int64_t t, int64_t d,
               int64_t head_stride, int64_t row_stride) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < t; ++i) {
      const float* row = src + h * head_stride + i * row_stride;
      T* out = dst + (h * positions + at + i) * d;
      if constexpr (std::is_same_v<T, float>) {
        std::copy_n(row, d, out);
      } else {
        for (int64_t j = 0; j < d; ++j) out[j] = T(row[j]);
      }
    }
}

// The CPU attention of t queries q [n_heads, t, dk] (contiguous) at positions pos0.. over positions
// [kv.first, total) of a cache's rows, into out [t, n_heads * dv].
cpu::AttentionArgs CacheAttention(const float* q, int64_t n_heads, int64_t t, int64_t dk, const KvCache::Rows& kv,
                                  int64_t n_kv, int64_t total, int64_t dv, int64_t pos0, double scale, int64_t window,
                                  const at::Tensor& sinks, float* out, int64_t v_row_stride = 0) {
  cpu::AttentionArgs a;
  a.key_begin = kv.first;
  a.v_row_stride = v_row_stride;
  a.q = q;
  a.n_heads = n_heads;
  a.t = t;
  a.dk = dk;
  a.k = kv.k;
  a.v = kv.v;
  a.k_bf16 = kv.k_bf16;
  a.v_bf16 = kv.v_bf16;
  a.k_head_stride = kv.k_head_stride;
  a.v_head_stride = kv.v_head_stride;
  a.n_kv = n_kv;
  a.total = total;
  a.dv = dv;
  a.pos0 = pos0;
  a.scale = static_cast<float>(scale);
  a.window = window;
  if (sinks.defined()) a.sinks = sinks.data_ptr<float>();
  a.out = out;
  return a;
}

}  // namespace

int64_t KvCache::WindowCapacity(int64_t window, int64_t t, int64_t page_positions) {
  const int64_t rows = window - 1 + t + std::max<int64_t>(64, page_positions);
  return page_positions > 0 ? (rows + page_positions - 1) / page_positions * page_positions : rows;
}

void KvCache::Reserve(Layer& l, int64_t t, int64_t window, int64_t n_kv, int64_t dk, int64_t dv,
                      const at::TensorOptions& options) {
  TORCH_CHECK(!l.k.defined() || l.window == window, "KvCache: a layer appended with window ", l.window,
              " is appended with window ", window);
  l.window = window;
  const int64_t need = length_ + t;
  const int64_t capacity = l.k.defined() ? l.k.size(1) : 0;
  // A BF16 cache on the CPU (set_bf16_storage); otherwise the computed dtype.
  const bool bf16 = bf16_storage_ && options.device().is_cpu() && options.dtype() == at::kFloat;
  const at::TensorOptions stored = bf16 ? options.dtype(at::kBFloat16) : options;
  // A trimmed sliding-window layer (set_trim_windows) holds WindowCapacity rows once its positions no longer
  // fit in them (or once trimmed): the rows before length_ - (window - 1), which no query at length_ or
  // later sees, are dropped, and the rest moved to the front when the room after them runs out; a
  // capacity made for a longer append (a prefill) shrinks back to it.
  const bool trims = trim_windows_ && window > 0 && options.device().is_cpu();
  const int64_t target = trims ? WindowCapacity(window, t, page_positions_) : 0;
  if (trims && (l.first > 0 || need > target)) {
    const int64_t keep = std::max(l.first, length_ - (window - 1));
    if (capacity != target || need - l.first > capacity) Relocate(l, target, keep, n_kv, dk, dv, stored);
    return;
  }
  if (need <= capacity) return;
  const auto whole_pages = [&](int64_t positions) {
    return page_positions_ > 0 ? (positions + page_positions_ - 1) / page_positions_ * page_positions_ : positions;
  };
  int64_t new_capacity = page_positions_ > 0 ? whole_pages(need) : std::max<int64_t>({need, 2 * capacity, 16});
  // The expected length (set_expected_positions), at most twice `need`: CPU memory only, whose pages are not
  // faulted in before a position is written to them (a device allocation would hold all of it at once).
  if (expected_positions_ > new_capacity && options.device().is_cpu())
    new_capacity = whole_pages(std::min(expected_positions_, std::max(new_capacity, 2 * need)));
  if (trims) new_capacity = std::min(new_capacity, target);
  Relocate(l, new_capacity, l.first, n_kv, dk, dv, stored);
}

void KvCache::Relocate(Layer& l, int64_t capacity, int64_t keep, int64_t n_kv, int64_t dk, int64_t dv,
                       const at::TensorOptions& stored) {
  const int64_t rows = length_ - keep;  // the rows kept: positions [keep, length_)
  TORCH_CHECK(keep >= l.first && rows >= 0 && rows <= capacity && (rows == 0 || l.k.defined()),
              "KvCache: cannot keep positions [", keep, ", ", length_, ") of a layer holding [", l.first, ", ",
              length_, ") in ", capacity, " rows");
  const int64_t from = keep - l.first;  // their first row now
  const bool in_place = l.k.defined() && l.k.size(1) == capacity;
  // On the CPU each head's rows are one contiguous run in both tensors: moved by memcpy / memmove, not by
  // torch's copy_, whose parallel loop wakes torch's OpenMP workers, which then spin beside the matmul
  // pool's threads (issue 35; seen as a third busy thread in a decode step's profile).
  const auto move_rows = [&](at::Tensor& to, const at::Tensor& src) {
    if (rows == 0 || (in_place && from == 0)) return;
    if (to.is_cpu() && src.is_cpu() && to.scalar_type() == src.scalar_type() && to.is_contiguous() &&
        src.is_contiguous() && to.size(0) == src.size(0) && to.size(2) == src.size(2)) {
      const int64_t row_bytes = to.size(2) * static_cast<int64_t>(to.element_size());
      const auto* s = static_cast<const char*>(src.data_ptr());
      auto* d = static_cast<char*>(to.data_ptr());
      for (int64_t h = 0; h < to.size(0); ++h)
        std::memmove(d + h * to.size(1) * row_bytes, s + (h * src.size(1) + from) * row_bytes,
                     static_cast<size_t>(rows * row_bytes));
    } else {
      to.narrow(1, 0, rows).copy_(src.narrow(1, from, rows));
    }
  };
  if (in_place) {
    move_rows(l.k, l.k);
    move_rows(l.v, l.v);
  } else {
    at::Tensor nk = at::empty({n_kv, capacity, dk}, stored);
    at::Tensor nv = at::empty({n_kv, capacity, dv}, stored);
    move_rows(nk, l.k);
    move_rows(nv, l.v);
    l.k = nk;
    l.v = nv;
  }
  l.first = keep;
}

KvCache::Rows KvCache::AppendPosition(int64_t layer_id, const float* k, const float* v, int64_t n_kv, int64_t dk,
                                      int64_t dv, int64_t window) {
  Layer& l = layers_[static_cast<size_t>(layer_id)];
  Reserve(l, 1, window, n_kv, dk, dv, at::TensorOptions().dtype(at::kFloat));
  TORCH_CHECK(l.k.is_cpu() && l.k.size(0) == n_kv && l.k.size(2) == dk && l.v.size(0) == n_kv && l.v.size(2) == dv &&
                  l.k.is_contiguous() && l.v.is_contiguous(),
              "KvCache::AppendPosition: layer ", layer_id, " holds ", l.k.sizes(), " keys, ", l.v.sizes(),
              " values on ", l.k.device(), ", not CPU [", n_kv, ", *, ", dk, "] / [", n_kv, ", *, ", dv, "]");
  const int64_t positions = l.k.size(1);
  const int64_t at = length_ - l.first;  // the new position's row
  Rows r;
  r.first = l.first;
  r.k_head_stride = positions * dk;
  r.v_head_stride = positions * dv;
  if (l.k.scalar_type() == at::kBFloat16) {  // as Append stores them
    c10::BFloat16* kd = l.k.data_ptr<c10::BFloat16>();
    c10::BFloat16* vd = l.v.data_ptr<c10::BFloat16>();
    StoreRows(kd, positions, at, k, n_kv, 1, dk, dk, 0);
    StoreRows(vd, positions, at, v, n_kv, 1, dv, dv, 0);
    r.k_bf16 = reinterpret_cast<const uint16_t*>(kd);
    r.v_bf16 = reinterpret_cast<const uint16_t*>(vd);
    return r;
  }
  TORCH_CHECK(l.k.scalar_type() == at::kFloat && l.v.scalar_type() == at::kFloat,
              "KvCache::AppendPosition: layer ", layer_id, " stores ", l.k.scalar_type(), ", not float32 or BF16");
  float* kd = l.k.data_ptr<float>();
  float* vd = l.v.data_ptr<float>();
  StoreRows(kd, positions, at, k, n_kv, 1, dk, dk, 0);
  StoreRows(vd, positions, at, v, n_kv, 1, dv, dv, 0);
  r.k = kd;
  r.v = vd;
  return r;
}

std::pair<at::Tensor, at::Tensor> KvCache::Append(int64_t layer_id, const at::Tensor& k, const at::Tensor& v,
                                                  int64_t window) {
  Layer& l = layers_[static_cast<size_t>(layer_id)];
  const int64_t t = k.size(1);
  Reserve(l, t, window, k.size(0), k.size(2), v.size(2), k.options());
  const int64_t at = length_ - l.first;  // the first new position's row
  const int64_t rows = at + t;
  // The new positions' rows copied in place: float32 on the CPU by row (a decode step's few rows cost
  // less than a torch copy's dispatch, issue 35), anything else by copy_.
  const auto append = [&](at::Tensor& cache, const at::Tensor& src) {
    const bool by_row = cache.is_cpu() && src.is_cpu() && src.scalar_type() == at::kFloat && cache.is_contiguous() &&
                        src.stride(2) == 1 && src.sizes() == at::IntArrayRef{cache.size(0), t, cache.size(2)};
    if (by_row && cache.scalar_type() == at::kFloat) {
      StoreRows(cache.data_ptr<float>(), cache.size(1), at, src.data_ptr<float>(), cache.size(0), t,
                cache.size(2), src.stride(0), src.stride(1));
    } else if (by_row && cache.scalar_type() == at::kBFloat16) {
      StoreRows(cache.data_ptr<c10::BFloat16>(), cache.size(1), at, src.data_ptr<float>(), cache.size(0), t,
                cache.size(2), src.stride(0), src.stride(1));
    } else {
      cache.narrow(1, at, t).copy_(src);
    }
  };
  append(l.k, k);
  append(l.v, v);
  return {l.k.narrow(1, 0, rows), l.v.narrow(1, 0, rows)};
}

int64_t KvCache::Bytes(bool held_positions_only) const {
  int64_t total = 0;
  for (const Layer& l : layers_) {
    if (!l.k.defined()) continue;
    const auto layer = static_cast<int64_t>(l.k.nbytes() + l.v.nbytes());
    const int64_t capacity = l.k.size(1);
    total += held_positions_only && capacity > 0 ? layer / capacity * std::min(length_ - l.first, capacity) : layer;
  }
  for (const LinearState& s : linear_) total += static_cast<int64_t>((s.conv.size() + s.recurrent.size()) * sizeof(float));
  return total;
}

int64_t KvCache::earliest_prefix() const {
  if (length_ == 0) return 0;
  if (has_recurrent_state()) return length_;
  int64_t earliest = 1;
  for (const Layer& l : layers_)
    if (l.first > 0) earliest = std::max(earliest, l.first + l.window - 1);
  return earliest;
}

KvCache KvCache::Prefix(int64_t n, bool continuing) const {
  TORCH_CHECK(n > 0 && n <= length_, "KvCache::Prefix: ", n, " positions of ", length_);
  TORCH_CHECK(!has_recurrent_state() || n == length_,
              "KvCache::Prefix: a Gated DeltaNet state holds all ", length_, " positions, not ", n);
  TORCH_CHECK(n >= earliest_prefix(), "KvCache::Prefix: a trimmed sliding-window layer no longer holds the window ",
              "of a query at position ", n, " (the shortest prefix is ", earliest_prefix(), ")");
  TORCH_CHECK(cross_.empty(), "KvCache::Prefix: an encoder-decoder cache is not shared");
  KvCache out(static_cast<int64_t>(layers_.size()));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& l = layers_[i];
    Layer& o = out.layers_[i];
    o.window = l.window;
    if (!l.k.defined()) continue;
    // A continuing copy of a trimmed sliding-window layer starts where a query at n first looks (the rows
    // before it would be dropped at the copy's first append: Reserve).
    const bool trims = continuing && trim_windows_ && l.window > 0 && l.k.is_cpu();
    const int64_t first = trims ? std::max(l.first, n - (l.window - 1)) : l.first;
    o.k = l.k.narrow(1, first - l.first, n - first).clone(at::MemoryFormat::Contiguous);
    o.v = l.v.narrow(1, first - l.first, n - first).clone(at::MemoryFormat::Contiguous);
    o.first = first;
  }
  out.linear_ = linear_;
  out.length_ = n;
  out.page_positions_ = page_positions_;
  out.bf16_storage_ = bf16_storage_;
  out.trim_windows_ = trim_windows_;
  return out;
}

at::Tensor AttendCausal(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t pos0, double scale,
                        int64_t window, const at::Tensor& sinks, int64_t key_begin) {
  const int64_t n_heads = q.size(0), t = q.size(1), dk = q.size(2);
  const int64_t n_kv = k.size(0), rows = k.size(1), total = key_begin + rows, dv = v.size(2);
  TORCH_CHECK(key_begin == 0 || (key_begin > 0 && window > 0 && pos0 - window + 1 >= key_begin),
              "AttendCausal: keys from position ", key_begin, " on, but the query at ", pos0, " sees window ", window);
  const int64_t group = n_heads / n_kv;
  const bool bf16_cache = k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16;
  if (q.is_cpu() && q.scalar_type() == at::kFloat &&
      ((k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat) || bf16_cache) && k.is_cpu() && v.is_cpu() &&
      k.stride(2) == 1 && k.stride(1) == dk && v.stride(2) == 1 && v.stride(1) >= dv && n_heads % n_kv == 0) {
    const at::Tensor qc = q.contiguous();
    at::Tensor out = at::empty({t, n_heads * dv}, q.options());
    KvCache::Rows kv;
    if (bf16_cache) {  // a BF16 KV cache (GeneratorOptions::kv_cache_bf16)
      kv.k_bf16 = static_cast<const uint16_t*>(k.data_ptr());
      kv.v_bf16 = static_cast<const uint16_t*>(v.data_ptr());
    } else {
      kv.k = k.data_ptr<float>();
      kv.v = v.data_ptr<float>();
    }
    kv.k_head_stride = k.stride(0);
    kv.v_head_stride = v.stride(0);
    kv.first = key_begin;
    cpu::AttendCausal(CacheAttention(qc.data_ptr<float>(), n_heads, t, dk, kv, n_kv, total, dv, pos0, scale, window,
                                     sinks, out.data_ptr<float>(), v.stride(1)));
    return out;
  }
  // One decode token's attention on a GPU: one launch (kernels/dense_decode.h) instead of ~10 torch
  // operators; the query at position pos0, which must be the last key (the new one, just appended).
  if (q.is_cuda() && t == 1 && key_begin == 0 && pos0 == total - 1 && q.scalar_type() == at::kBFloat16 &&
      k.scalar_type() == at::kBFloat16 && v.scalar_type() == at::kBFloat16 && k.is_cuda() && v.is_cuda() &&
      k.stride(2) == 1 && k.stride(1) == dk && v.stride(2) == 1 && v.stride(1) == dv && n_heads % n_kv == 0) {
    const at::Tensor qc = q.contiguous();
    at::Tensor out = at::empty({1, n_heads * dv}, q.options());
    at::Tensor scores = at::empty({n_heads, total}, q.options().dtype(at::kFloat));
    at::Tensor sinks32;
    kernels::DecodeAttentionBf16Args a;
    if (sinks.defined()) {
      sinks32 = sinks.to(q.device(), at::kFloat).contiguous();
      a.sinks = sinks32.data_ptr<float>();
    }
    a.q = static_cast<const uint16_t*>(qc.data_ptr());
    a.k = static_cast<const uint16_t*>(k.data_ptr());
    a.v = static_cast<const uint16_t*>(v.data_ptr());
    a.k_head_stride = k.stride(0);
    a.v_head_stride = v.stride(0);
    a.n_heads = n_heads;
    a.n_kv = n_kv;
    a.dk = dk;
    a.dv = dv;
    a.total = total;
    a.pos = pos0;
    a.window = window;
    a.scale = static_cast<float>(scale);
    a.scores = scores.data_ptr<float>();
    a.out = static_cast<uint16_t*>(out.data_ptr());
    if (DeviceKernelRan(kernels::LaunchDecodeAttentionBf16(a, /*stream=*/nullptr))) return out;
  }
  // [n_heads, t, dk] -> [n_kv, group * t, dk]: query head h = kv * group + g.
  const at::Tensor qg = q.reshape({n_kv, group * t, dk});
  at::Tensor scores = at::bmm(qg, k.to(q.scalar_type()).transpose(1, 2)) * scale;  // [n_kv, group * t, T]
  scores = scores.to(at::kFloat);
  const bool causal_needed = t > 1 || (pos0 + t < total);
  if (causal_needed || window > 0) {
    const at::TensorOptions long_opts = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor qpos = at::arange(pos0, pos0 + t, long_opts).unsqueeze(1);  // [t, 1]
    const at::Tensor kpos = at::arange(key_begin, total, long_opts).unsqueeze(0);  // [1, T]
    at::Tensor hidden = kpos > qpos;
    if (window > 0) hidden = hidden.logical_or(qpos - kpos >= window);
    const at::Tensor mask = at::zeros({t, rows}, scores.options())
                                .masked_fill(hidden, -std::numeric_limits<float>::infinity());
    scores = (scores.view({n_kv, group, t, rows}) + mask).view({n_kv, group * t, rows});
  }
  at::Tensor probs;
  if (sinks.defined()) {  // gpt_oss: softmax over [scores, sink] per row, the sink column dropped
    const at::Tensor sink = sinks.to(scores.device(), at::kFloat).view({n_kv, group, 1, 1}).expand({n_kv, group, t, 1});
    const at::Tensor combined = at::cat({scores.view({n_kv, group, t, rows}), sink}, -1);
    probs = at::softmax(combined, -1).narrow(-1, 0, rows).reshape({n_kv, group * t, rows}).to(q.scalar_type());
  } else {
    probs = at::softmax(scores, -1).to(q.scalar_type());
  }
  const at::Tensor out = at::bmm(probs, v.to(q.scalar_type()));  // [n_kv, group * t, dv]
  // -> [n_heads, t, dv] -> [t, n_heads, dv] -> [t, n_heads * dv]
  return out.reshape({n_heads, t, dv}).permute({1, 0, 2}).reshape({t, n_heads * dv});
}

namespace {

// q [N, n_heads, dk], k [N, n_kv, dk], v [N, n_kv, dv] -> [N, n_heads * dv], per sequence. With
// values_in_keys > 0 (MLA's latent cache) v is ignored: the values are the first values_in_keys columns of
// the keys, which the cache holds once (its value tensors are [n_kv, T, 0]).
at::Tensor AttendBatch(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v_given, int64_t layer_id,
                       const BatchLayout& batch, double scale, int64_t window, const at::Tensor& sinks = at::Tensor(),
                       int64_t values_in_keys = 0) {
  const at::Tensor v = values_in_keys > 0 ? at::empty({k.size(0), k.size(1), 0}, k.options()) : v_given;
  // A decode step on the CPU (one new position per sequence, float32 rows): the cache rows and the
  // attention by raw pointers, without the dozen torch operators a sequence costs below (~15 us a layer
  // on 2 cores, issue 35). The same values stored, the same kernel: the same bits.
  const int64_t n_heads = q.size(1), n_kv = k.size(1), dk = q.size(2), dv = values_in_keys > 0 ? values_in_keys : v.size(2);
  bool decode = q.is_cpu() && k.is_cpu() && v.is_cpu() && q.scalar_type() == at::kFloat &&
                k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat && q.is_contiguous() &&
                k.is_contiguous() && v.is_contiguous() && k.size(2) == dk && n_heads % n_kv == 0 &&
                (!sinks.defined() || (sinks.is_cpu() && sinks.scalar_type() == at::kFloat && sinks.is_contiguous()));
  for (size_t i = 0; decode && i < batch.lengths.size(); ++i) decode = batch.lengths[i] == 1;
  if (decode) {
    at::Tensor out = at::empty({q.size(0), n_heads * dv}, q.options());
    for (size_t i = 0; i < batch.starts.size(); ++i) {
      const int64_t row = batch.starts[i];
      KvCache* cache = batch.caches[i];
      // With values in the keys the cache stores no values (dv 0; the pointer is not read).
      const float* k_row = k.data_ptr<float>() + row * n_kv * dk;
      const float* v_row = values_in_keys > 0 ? k_row : v.data_ptr<float>() + row * n_kv * dv;
      KvCache::Rows kv = cache->AppendPosition(layer_id, k_row, v_row, n_kv, dk, v.size(2), window);
      if (values_in_keys > 0) {
        kv.v = kv.k;
        kv.v_bf16 = kv.k_bf16;
        kv.v_head_stride = kv.k_head_stride;
      }
      // q's row [n_heads, dk] is [n_heads, 1, dk]
      cpu::AttendCausal(CacheAttention(q.data_ptr<float>() + row * n_heads * dk, n_heads, 1, dk, kv, n_kv,
                                       cache->length() + 1, dv, cache->length(), scale, window, sinks,
                                       out.data_ptr<float>() + row * n_heads * dv, values_in_keys > 0 ? dk : 0));
    }
    return out;
  }
  std::vector<at::Tensor> outs;
  outs.reserve(batch.starts.size());
  for (size_t i = 0; i < batch.starts.size(); ++i) {
    const int64_t start = batch.starts[i], len = batch.lengths[i];
    KvCache* cache = batch.caches[i];
    const int64_t pos0 = cache->length();
    // [len, n, d] -> [n, len, d]
    const at::Tensor qs = q.narrow(0, start, len).transpose(0, 1).contiguous();
    const at::Tensor ks = k.narrow(0, start, len).transpose(0, 1);
    const at::Tensor vs = v.narrow(0, start, len).transpose(0, 1);
    auto [k_all, v_all] = cache->Append(layer_id, ks, vs, window);
    if (values_in_keys > 0) v_all = k_all.narrow(2, 0, values_in_keys);
    outs.push_back(AttendCausal(qs, k_all, v_all, pos0, scale, window, sinks, cache->first_position(layer_id)));
  }
  return outs.size() == 1 ? outs[0] : at::cat(outs, 0);
}

// Rotate-half rotary of q [n, heads, hd] and k [n, kv_heads, hd] (BF16 CUDA, contiguous) in place, the
// first rd dims of each head, in one launch (kernels/dense_decode.h). False when the binary has no
// CUDA kernels (the caller then uses torch operators).
bool RotateOnDevice(at::Tensor& q, at::Tensor& k, const BatchLayout& batch, int64_t rd) {
  kernels::RotaryBf16Args a;
  a.a = static_cast<uint16_t*>(q.data_ptr());
  a.a_heads = q.size(1);
  a.b = static_cast<uint16_t*>(k.data_ptr());
  a.b_heads = k.size(1);
  a.n = q.size(0);
  a.head_dim = q.size(2);
  a.rotary_dim = rd;
  a.cos = batch.cos.data_ptr<float>();
  a.sin = batch.sin.data_ptr<float>();
  return DeviceKernelRan(kernels::LaunchRotaryBf16(a, /*stream=*/nullptr));
}

at::Tensor GqaForward(const ModelConfig& c, const AttentionWeights& w, int64_t layer_id, const at::Tensor& x,
                      const BatchLayout& batch) {
  const int64_t n = x.size(0), hd = c.head_dim;
  std::vector<std::pair<at::Tensor, at::Tensor>> projections = {
      {w.q_proj.weight, w.q_proj.bias}, {w.k_proj.weight, w.k_proj.bias}, {w.v_proj.weight, w.v_proj.bias}};
  if (w.gate_proj.weight.defined()) projections.emplace_back(w.gate_proj.weight, w.gate_proj.bias);
  const std::vector<at::Tensor> qkv = Linears(x, projections);
  at::Tensor q = qkv[0], k = qkv[1], v = qkv[2];
  // The output gate: attn_output_gate (Qwen3NextAttention: q_proj gives [query | gate] per head) or afmoe's own
  // gate_proj; attn * sigmoid(gate) before o_proj either way.
  at::Tensor gate = qkv.size() > 3 ? qkv[3] : at::Tensor();
  if (c.attn_output_gate) {
    const at::Tensor qg = q.view({n, c.num_attention_heads, 2 * hd});
    gate = qg.narrow(-1, hd, hd).reshape({n, c.num_attention_heads * hd});
    q = qg.narrow(-1, 0, hd).contiguous().view({n, c.num_attention_heads * hd});
  }
  if (c.arch == ModelArch::kOlmoe) {  // OlmoeAttention: RMSNorm over the whole projection, then clip
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
    if (c.clip_qkv) {
      const double clip = *c.clip_qkv;
      q = q.clamp(-clip, clip);
      k = k.clamp(-clip, clip);
      v = v.clamp(-clip, clip);
    }
  }
  q = q.view({n, c.num_attention_heads, hd});
  k = k.view({n, c.num_key_value_heads, hd});
  v = v.view({n, c.num_key_value_heads, hd});
  if (w.q_norm.defined() && c.arch != ModelArch::kOlmoe) {  // Qwen3MoeAttention / Glm4MoeAttention use_qk_norm: RMSNorm per head over head_dim
    q = RmsNorm(q, w.q_norm, c.rms_norm_eps);
    k = RmsNorm(k, w.k_norm, c.rms_norm_eps);
  }
  // Partial rotary (glm4_moe): the first rope_dim dims of each head rotate, the rest pass through.
  const int64_t rd = batch.cos.size(-1);
  if (!c.LayerHasRope(layer_id)) {
    // granitemoehybrid without position_embedding_type "rope", afmoe's full-attention layers: no positional
    // embedding (Mamba2 layers / the sliding-window layers' rotary carry the order).
  } else if (c.arch == ModelArch::kErnie45Moe) {
    // Ernie4_5_Moe's interleaved ("GLM") RoPE on pairs (2i, 2i+1): the same values as rotate-half on
    // the de-interleaved head, in another order that q and k share, so every q.k product is the same.
    q = RotaryEmbedding::Apply(q, batch.cos, batch.sin, /*interleaved=*/true);
    k = RotaryEmbedding::Apply(k, batch.cos, batch.sin, /*interleaved=*/true);
  } else if (q.is_cpu() && q.scalar_type() == at::kFloat && q.is_contiguous() && k.is_contiguous() &&
      batch.cos.is_cpu() && batch.cos.scalar_type() == at::kFloat && batch.cos.is_contiguous() &&
      batch.sin.is_contiguous() && rd <= hd) {
    // q, k are this step's own projections (fresh tensors): rotated in place.
    cpu::RotateHalf(q.data_ptr<float>(), n, c.num_attention_heads, hd, rd, batch.cos.data_ptr<float>(),
                    batch.sin.data_ptr<float>());
    cpu::RotateHalf(k.data_ptr<float>(), n, c.num_key_value_heads, hd, rd, batch.cos.data_ptr<float>(),
                    batch.sin.data_ptr<float>());
  } else if (q.is_cuda() && q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 && q.is_contiguous() &&
             k.is_contiguous() && batch.cos.is_cuda() && batch.cos.scalar_type() == at::kFloat &&
             batch.sin.scalar_type() == at::kFloat && batch.cos.is_contiguous() && batch.sin.is_contiguous() &&
             rd <= hd && rd % 2 == 0 && RotateOnDevice(q, k, batch, rd)) {
    // rotated in place by one launch (q and k are this step's own tensors, as above)
  } else if (rd == hd) {
    q = RotaryEmbedding::Apply(q, batch.cos, batch.sin, /*interleaved=*/false);
    k = RotaryEmbedding::Apply(k, batch.cos, batch.sin, /*interleaved=*/false);
  } else {
    q = at::cat({RotaryEmbedding::Apply(q.narrow(-1, 0, rd), batch.cos, batch.sin, false), q.narrow(-1, rd, hd - rd)}, -1);
    k = at::cat({RotaryEmbedding::Apply(k.narrow(-1, 0, rd), batch.cos, batch.sin, false), k.narrow(-1, rd, hd - rd)}, -1);
  }
  at::Tensor attn = AttendBatch(q, k, v, layer_id, batch, c.softmax_scale(), c.attention_window(layer_id), w.sinks);
  if (gate.defined()) attn = attn * at::sigmoid(gate);
  return Linear(attn, w.o_proj.weight, w.o_proj.bias);
}

// Head h's rows of a per-head weight [heads, rows, cols] held as one matrix [heads * rows, cols].
kernels::GemmWeights HeadRows(const kernels::GemmWeights& all, int64_t h, int64_t rows) {
  kernels::GemmWeights w = all;
  if (w.bf16 != nullptr) {
    w.bf16 += h * rows * all.cols;
  } else {
    w.f32 += h * rows * all.cols;
  }
  w.rows = rows;
  return w;
}

// y_h = x_h · W_hᵀ for every head h in one parallel region: x_h at x + h * x_head (row stride ldx),
// W_h = head h of `per_head` [heads, rows, cols] (BF16 or float32), y_h at y + h * y_head (row stride ldy).
void PerHeadProducts(const at::Tensor& per_head, const float* x, int64_t n, int64_t x_head, int64_t ldx, float* y,
                     int64_t y_head, int64_t ldy) {
  const int64_t heads = per_head.size(0), rows = per_head.size(1);
  const kernels::GemmWeights all = GemmWeightsOf(per_head.view({heads * rows, per_head.size(2)}));
  std::vector<kernels::GemmArgs> args;
  args.reserve(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h)
    args.push_back(cpu::Product(HeadRows(all, h, rows), x + h * x_head, n, ldx, y + h * y_head, ldy));
  cpu::Gemms(args);
}

// MLA over the latent KV cache, the float32 CPU executor's path (DeepSeek-V2 paper §2.1.2-2.1.3: the
// up-projections absorbed, as llama.cpp and vLLM run MLA). A position caches the normalised compressed
// KV c [kv_lora_rank] and the rotated shared key k_pe [rope] as one KV head of all query heads: key
// [c | k_pe], whose first kv_lora_rank columns are the value c (stored once). Head h's score
// q_nope_h · (W_UK_h c) + q_pe_h · k_pe is computed as (W_UK_h^T q_nope_h) · c + q_pe_h · k_pe, and its
// output W_UV_h (Σ_j p_j c_j) in place of Σ_j p_j (W_UV_h c_j): the same sums of products grouped
// otherwise (float32 rounding apart; checked against the fp32 reference, tests/reference). A position
// then takes kv_lora_rank + rope floats a layer instead of heads * (q_head_dim + v_head_dim): 8x fewer in
// the deepseek_v2 mini, 8.9x in DeepSeek-V2-Lite, 17.8x in GLM-4.7-Flash; the prefill's attention does
// more multiply-adds per key (kv_lora_rank + rope and kv_lora_rank against q_head_dim and v_head_dim a head).
at::Tensor MlaLatentForward(const ModelConfig& c, const AttentionWeights& w, int64_t layer_id, const at::Tensor& x,
                            const BatchLayout& batch) {
  const int64_t n = x.size(0), heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, r = c.kv_lora_rank, vd = c.v_head_dim;
  const int64_t dq = nope + rope, dl = r + rope;
  // The query's first projection and kv_a_proj read the same x: one parallel region for both.
  const LinearWeights& first = c.q_lora_rank == 0 ? w.q_proj : w.q_a_proj;
  const std::vector<at::Tensor> p =
      Linears(x, {{first.weight, first.bias}, {w.kv_a_proj.weight, w.kv_a_proj.bias}});
  const at::Tensor q = (c.q_lora_rank == 0 ? p[0]
                                           : Linear(RmsNorm(p[0], w.q_a_layernorm, c.rms_norm_eps), w.q_b_proj.weight))
                           .contiguous();  // [n, heads * dq]
  const at::Tensor& compressed = p[1];      // [n, r + rope]
  const at::Tensor ckv = RmsNorm(compressed.narrow(-1, 0, r), w.kv_a_layernorm, c.rms_norm_eps).contiguous();
  const at::Tensor k_pe = RotaryEmbedding::Apply(compressed.narrow(-1, r, rope).reshape({n, 1, rope}), batch.cos,
                                                 batch.sin, c.rope_interleave);
  const at::Tensor q_pe = RotaryEmbedding::Apply(q.view({n, heads, dq}).narrow(-1, nope, rope), batch.cos, batch.sin,
                                                 c.rope_interleave);
  // query [n, heads, r + rope]: W_UK_h^T q_nope_h, then q_pe_h; key [n, 1, r + rope]: c, then k_pe. Rows
  // copied by memcpy (torch's copy of a long prompt's rows would wake its OpenMP threads beside the pool's).
  at::Tensor query = at::empty({n, heads, dl}, x.options());
  PerHeadProducts(w.kv_b_k_t, q.data_ptr<float>(), n, dq, heads * dq, query.data_ptr<float>(), dl, heads * dl);
  at::Tensor key = at::empty({n, 1, dl}, x.options());
  {
    const at::Tensor qp = q_pe.contiguous(), kp = k_pe.contiguous();
    const float* qs = qp.data_ptr<float>();
    const float* ks = kp.data_ptr<float>();
    const float* cs = ckv.data_ptr<float>();
    float* qd = query.data_ptr<float>();
    float* kd = key.data_ptr<float>();
    const size_t rope_bytes = static_cast<size_t>(rope) * sizeof(float), r_bytes = static_cast<size_t>(r) * sizeof(float);
    for (int64_t i = 0; i < n * heads; ++i) std::memcpy(qd + i * dl + r, qs + i * rope, rope_bytes);
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(kd + i * dl, cs + i * r, r_bytes);
      std::memcpy(kd + i * dl + r, ks + i * rope, rope_bytes);
    }
  }
  const at::Tensor latent =
      AttendBatch(query, key, at::Tensor(), layer_id, batch, c.softmax_scale(), 0, at::Tensor(), /*values_in_keys=*/r);
  at::Tensor out = at::empty({n, heads * vd}, x.options());  // [n, heads * r] -> per head W_UV_h
  PerHeadProducts(w.kv_b_v, latent.data_ptr<float>(), n, r, heads * r, out.data_ptr<float>(), vd, heads * vd);
  return Linear(out, w.o_proj.weight, w.o_proj.bias);
}

// MLA as modeling_deepseek.py's eager DeepseekV2Attention (per-head keys and values in the cache): the
// GPU executor's and a BF16 compute dtype's path.
at::Tensor MlaForward(const ModelConfig& c, const AttentionWeights& w, int64_t layer_id, const at::Tensor& x,
                      const BatchLayout& batch) {
  // The loader split kv_b_proj exactly where the latent cache is used (a float32 CPU executor, not
  // ZIPMOE_MLA_KV_CACHE=heads).
  if (w.kv_b_k_t.defined()) return MlaLatentForward(c, w, layer_id, x, batch);
  const int64_t n = x.size(0), heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, vd = c.v_head_dim;
  at::Tensor q;
  if (c.q_lora_rank == 0) {
    q = Linear(x, w.q_proj.weight);
  } else {
    q = Linear(RmsNorm(Linear(x, w.q_a_proj.weight, w.q_a_proj.bias), w.q_a_layernorm, c.rms_norm_eps),
               w.q_b_proj.weight);
  }
  q = q.view({n, heads, nope + rope});
  const at::Tensor q_nope = q.narrow(-1, 0, nope);
  at::Tensor q_pe = q.narrow(-1, nope, rope);

  const at::Tensor compressed = Linear(x, w.kv_a_proj.weight, w.kv_a_proj.bias);  // [N, kv_lora + rope]
  const at::Tensor ckv = compressed.narrow(-1, 0, c.kv_lora_rank);
  at::Tensor k_pe = compressed.narrow(-1, c.kv_lora_rank, rope).reshape({n, 1, rope});
  const at::Tensor kv =
      Linear(RmsNorm(ckv, w.kv_a_layernorm, c.rms_norm_eps), w.kv_b_proj.weight).view({n, heads, nope + vd});
  const at::Tensor k_nope = kv.narrow(-1, 0, nope);
  const at::Tensor v = kv.narrow(-1, nope, vd);

  q_pe = RotaryEmbedding::Apply(q_pe, batch.cos, batch.sin, c.rope_interleave);
  k_pe = RotaryEmbedding::Apply(k_pe, batch.cos, batch.sin, c.rope_interleave);
  const at::Tensor query = at::cat({q_nope, q_pe}, -1);                            // [N, heads, q_head_dim]
  const at::Tensor key = at::cat({k_nope, k_pe.expand({n, heads, rope})}, -1);  // k_pe shared by heads
  const at::Tensor attn = AttendBatch(query, key, v, layer_id, batch, c.softmax_scale(), 0);
  return Linear(attn, w.o_proj.weight, w.o_proj.bias);
}

}  // namespace

bool MlaLatentKvCache() {
  static const bool latent = [] {
    const char* env = std::getenv("ZIPMOE_MLA_KV_CACHE");
    if (env == nullptr || *env == '\0' || std::string(env) == "latent") return true;
    if (std::string(env) == "heads") return false;
    std::fprintf(stderr, "zipmoe: ZIPMOE_MLA_KV_CACHE=%s is neither \"latent\" nor \"heads\"; using \"latent\"\n",
                 env);
    return true;
  }();
  return latent;
}

at::Tensor AttentionForward(const ModelConfig& config, const AttentionWeights& w, int64_t layer_id,
                            const at::Tensor& x, const BatchLayout& batch) {
  if (config.mla()) return MlaForward(config, w, layer_id, x, batch);
  return GqaForward(config, w, layer_id, x, batch);
}

}  // namespace zipmoe::executor
