#include "services/executor/cpu_ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/attention_cpu.h"
#include "services/executor/work_pool.h"

namespace zipmoe::executor::cpu {
namespace {

// Work is split on the kernels' row quantum (kernels::GemmRowQuantum: their row tiles, 4 rows; 64 for AMX).

struct Task {
  enum Kind { kGemm, kGateUp, kDown } kind;
  const void* what;  // const kernels::GemmArgs* (kGemm) or const MlpJob*
  int64_t r0, r1;
  int64_t cost;
};

// Cost of one output row: its weight bytes (~2 per element) plus its multiply-adds per token.
int64_t RowCost(int64_t cols, int64_t n) { return cols * (2 + n); }

// At most ~PiecesPerProduct() pieces of whole row tiles per product: fine enough to balance the
// threads (a thread that runs out steals half of what is left of another's share), few enough that
// building the list stays small beside the region (a decode region of qwen2_moe mini lasts 40-250 us;
// with 128 pieces a product on 2 threads, building its ~600 tasks took ~5 us of it, issue 35).
int64_t PiecesPerProduct() {
  return std::clamp<int64_t>(16 * static_cast<int64_t>(WorkPool::Shared().threads()), 16, 128);
}

void Split(std::vector<Task>& tasks, Task::Kind kind, const void* what, int64_t rows, int64_t row_cost) {
  static const int64_t kRowQuantum = kernels::GemmRowQuantum();
  const int64_t pieces = PiecesPerProduct();
  const int64_t tiles = (rows + kRowQuantum - 1) / kRowQuantum;
  const int64_t step = (tiles + pieces - 1) / pieces * kRowQuantum;
  for (int64_t r = 0; r < rows; r += step) {
    const int64_t r1 = std::min(rows, r + step);
    tasks.push_back({kind, what, r, r1, (r1 - r) * row_cost});
  }
}

void AddGemms(std::vector<Task>& tasks, const std::vector<kernels::GemmArgs>& args) {
  for (const kernels::GemmArgs& a : args)
    if (a.n > 0) Split(tasks, Task::kGemm, &a, a.w.rows, RowCost(a.w.cols, a.n));
}

void RunGemmRows(const kernels::GemmArgs& a, int64_t r0, int64_t r1) {
  kernels::GemmArgs part = a;
  part.row_begin = r0;
  part.row_end = r1;
  kernels::Bf16Gemm(part);
}

void RunTask(const Task& t) {
  if (t.kind == Task::kGemm) {
    RunGemmRows(*static_cast<const kernels::GemmArgs*>(t.what), t.r0, t.r1);
    return;
  }
  const MlpJob& j = *static_cast<const MlpJob*>(t.what);
  const int64_t inter = j.gate.rows;
  if (t.kind == Task::kGateUp) {
    kernels::GemmArgs gate = Product(j.gate, j.x, j.n, j.ldx, j.act, inter);
    kernels::GemmArgs up = Product(j.up, j.x, j.n, j.ldx, j.up_out, inter);
    gate.bias = j.gate_bias;
    up.bias = j.up_bias;
    RunGemmRows(gate, t.r0, t.r1);
    RunGemmRows(up, t.r0, t.r1);
    for (int64_t tok = 0; tok < j.n; ++tok) {
      float* act = j.act + tok * inter + t.r0;
      if (j.swiglu_limit > 0.0f) {
        ClampedSwiglu(act, j.up_out + tok * inter + t.r0, t.r1 - t.r0, j.swiglu_limit, j.swiglu_alpha, act);
      } else {
        SiluMul(act, j.up_out + tok * inter + t.r0, t.r1 - t.r0, act);
      }
    }
  } else {
    kernels::GemmArgs down = Product(j.down, j.act, j.n, inter, j.y, j.ldy);
    down.bias = j.down_bias;
    RunGemmRows(down, t.r0, t.r1);
  }
}

// Runs tasks [begin, end) in order, consecutive tasks of one product merged into one call (the
// kernels then prefetch across the whole range).
void RunRange(const std::vector<Task>& tasks, size_t begin, size_t end) {
  while (begin < end) {
    Task t = tasks[begin++];
    while (begin < end && tasks[begin].what == t.what && tasks[begin].kind == t.kind && tasks[begin].r0 == t.r1)
      t.r1 = tasks[begin++].r1;
    RunTask(t);
  }
}

// Tasks [front, back) of one thread's share not yet claimed, packed in one word so that the owner
// (from the front) and a thief (from the back) claim with one compare-and-swap.
class Share {
 public:
  void Reset(size_t front, size_t back) { word_.store(Pack(front, back), std::memory_order_relaxed); }
  size_t left() const {
    const uint64_t w = word_.load(std::memory_order_relaxed);
    return Back(w) - Front(w);
  }
  // The owner takes a quarter of what is left (at least one task) from the front: long runs first.
  bool ClaimFront(size_t* begin, size_t* end) {
    uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      const size_t f = Front(w), b = Back(w);
      if (f >= b) return false;
      const size_t take = std::max<size_t>(1, (b - f) / 4);
      if (word_.compare_exchange_weak(w, Pack(f + take, b), std::memory_order_relaxed)) {
        *begin = f;
        *end = f + take;
        return true;
      }
    }
  }
  // A thief takes half of what is left from the back.
  bool ClaimBack(size_t* begin, size_t* end) {
    uint64_t w = word_.load(std::memory_order_relaxed);
    for (;;) {
      const size_t f = Front(w), b = Back(w);
      if (f >= b) return false;
      const size_t take = std::max<size_t>(1, (b - f) / 2);
      if (word_.compare_exchange_weak(w, Pack(f, b - take), std::memory_order_relaxed)) {
        *begin = b - take;
        *end = b;
        return true;
      }
    }
  }

 private:
  static uint64_t Pack(size_t front, size_t back) { return (static_cast<uint64_t>(front) << 32) | back; }
  static size_t Front(uint64_t w) { return static_cast<size_t>(w >> 32); }
  static size_t Back(uint64_t w) { return static_cast<size_t>(w & 0xffffffffu); }
  std::atomic<uint64_t> word_{0};
};

// Thread i of T owns the contiguous tasks whose cumulative cost falls in [i C / T, (i + 1) C / T)
// (equal shares, each streamed as long row ranges) and works through them from the front; a
// thread done with its share steals half of the largest share left from its back. So a thread that
// shares its core with other work (the I/O thread, a decompression worker) ends up with less, and
// the others do not wait at the end for its fixed share. Every task writes disjoint outputs and
// computes them the same way whichever thread runs it: the results do not depend on who ran what.
// `on_caller` (may be empty) runs first on the calling thread, inside the region (see MlpGateUp).
void RunTasks(const std::vector<Task>& tasks, const std::function<void()>& on_caller = {}) {
  int64_t total = 0;
  for (const Task& t : tasks) total += t.cost;
  WorkPool& pool = WorkPool::Shared();
  const int64_t threads = std::min<int64_t>(pool.threads(), static_cast<int64_t>(tasks.size()));
  if (threads <= 1 || WorkPool::InRegion() || total < (int64_t{1} << 14)) {
    if (on_caller) on_caller();
    RunRange(tasks, 0, tasks.size());
    return;
  }
  ZM_CHECK(tasks.size() < (size_t{1} << 32)) << tasks.size() << " tasks";
  std::vector<Share> shares(static_cast<size_t>(threads));
  int64_t done = 0;
  size_t i = 0;
  for (int64_t k = 0; k < threads; ++k) {
    const size_t first = i;
    const int64_t target = total * (k + 1) / threads;
    while (i < tasks.size() && (k + 1 == threads || done + tasks[i].cost / 2 < target)) done += tasks[i++].cost;
    shares[static_cast<size_t>(k)].Reset(first, i);
  }
  // Cooperative (work_pool.h): the caller's slot alone would run every task, stealing the shares of
  // helpers that did not join (their cores held by other work), and it waits for none of those.
  pool.Run([&](int slot) {
    size_t begin = 0, end = 0;
    if (slot == 0 && on_caller) on_caller();
    if (slot < threads) {
      while (shares[static_cast<size_t>(slot)].ClaimFront(&begin, &end)) RunRange(tasks, begin, end);
    }
    for (;;) {  // steal from the share with the most left
      Share* victim = nullptr;
      size_t most = 0;
      for (Share& s : shares) {
        const size_t left = s.left();
        if (left > most) {
          most = left;
          victim = &s;
        }
      }
      if (victim == nullptr) break;
      if (victim->ClaimBack(&begin, &end)) RunRange(tasks, begin, end);
    }
  });
}

}  // namespace

kernels::GemmArgs Product(const kernels::GemmWeights& w, const float* x, int64_t n, int64_t ldx, float* y,
                          int64_t ldy) {
  kernels::GemmArgs a;
  a.w = w;
  a.x = x;
  a.n = n;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.row_end = w.rows;
  return a;
}

void RmsNorm(const float* x, int64_t n, int64_t d, const float* weight, float eps, float* y) {
  const auto rows = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* xr = x + t * d;
      float* yr = y + t * d;
      double sum = 0.0;
      for (int64_t i = 0; i < d; ++i) sum += static_cast<double>(xr[i]) * xr[i];
      const float variance = static_cast<float>(sum / static_cast<double>(d));
      const float inv = 1.0f / std::sqrt(variance + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = weight[i] * (xr[i] * inv);
    }
  };
  if (n * d < (int64_t{1} << 16) || WorkPool::InRegion()) {
    rows(0, n);
  } else {
    WorkPool::Shared().ParallelFor(n, std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, d)), rows);
  }
}

void RotateHalf(float* x, int64_t n, int64_t heads, int64_t head_dim, int64_t d, const float* cos, const float* sin) {
  const int64_t half = d / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float* c = cos + t * d;
    const float* s = sin + t * d;
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c[i] + -x2 * s[i];
        v[i + half] = x2 * c[i + half] + x1 * s[i + half];
      }
    }
  }
}

void AttendCausal(const AttentionArgs& a) {
  const int64_t group = a.n_heads / a.n_kv;
  // Query rows go to the score product in blocks, each against the keys its rows can see (a causal
  // prefill skips the masked half; every score is the same dot product in the kernels' order whatever
  // the block); each block's softmax and values run right after its scores, while they are in L2 (the
  // whole head's scores, 16 MiB at 2000 positions, went through memory before), up to eight rows at a time
  // sharing one pass over the values (kernels::SoftmaxValuesRows: the same bits as row by row).
  // A decode step (one position) of a grouped-query model takes the group's query heads as one block, so
  // each KV head's keys and values are read once for all of them instead of once per query head (a 2000-
  // position step of a 32-query / 4-KV-head model read them 8 times).
  constexpr int64_t kQueryBlock = 64;
  const int64_t v_row = a.v_row_stride > 0 ? a.v_row_stride : a.dv;
  const bool grouped = a.t == 1 && group > 1;
  const int64_t block_rows = grouped ? group : std::min(kQueryBlock, a.t);
  // The keys position `pos` sees: [first, last] (none when first > last), as rows of the cache (position
  // key_begin is row 0; `span` rows).
  const int64_t span = a.total - a.key_begin;
  const auto visible = [&](int64_t pos) {
    return std::pair<int64_t, int64_t>((a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0) - a.key_begin,
                                       std::min(pos, a.total - 1) - a.key_begin);
  };
  if (a.key_begin < 0 || a.key_begin > a.total ||
      (a.key_begin > 0 && (a.window <= 0 || a.pos0 - a.window + 1 < a.key_begin)))
    throw std::invalid_argument("cpu::AttendCausal: the cache starts at position " + std::to_string(a.key_begin) +
                                ", after keys the query at " + std::to_string(a.pos0) + " sees (window " +
                                std::to_string(a.window) + ", " + std::to_string(a.total) + " positions)");
  // Work units: a KV head's query heads in `slices` runs [g0, g1) of the group. One slice a KV head
  // unless there are fewer KV heads than threads (a multi-query cache: MLA's latent one, n_kv = 1; two
  // KV heads on more cores), where a head's query heads are shared out too (each unit then reads its
  // head's keys and values itself). Each output is computed alike whatever the units.
  const int64_t threads = WorkPool::Shared().threads();
  const int64_t slices = a.n_kv >= threads ? 1 : std::min<int64_t>(group, (threads + a.n_kv - 1) / a.n_kv);
  const int64_t per_slice = (group + slices - 1) / slices;
  const auto units = [&](int64_t u0, int64_t u1) {
    const std::unique_ptr<float[]> scores(new float[static_cast<size_t>(block_rows * span)]);
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t h = u / slices, g0 = (u % slices) * per_slice, g1 = std::min(group, g0 + per_slice);
      if (g0 >= g1) continue;
      kernels::GemmWeights keys;  // the cached keys of kv head h as "weights" [total, dk]
      if (a.k_bf16 != nullptr) {
        keys.bf16 = a.k_bf16 + h * a.k_head_stride;
      } else {
        keys.f32 = a.k + h * a.k_head_stride;
      }
      keys.rows = span;
      keys.cols = a.dk;
      const float* vh = a.v_bf16 != nullptr ? nullptr : a.v + h * a.v_head_stride;
      const uint16_t* vh_bf16 = a.v_bf16 != nullptr ? a.v_bf16 + h * a.v_head_stride : nullptr;
      // The scores of `n` query rows at q, `ldq` floats apart, against keys [first, last], into the
      // rows of `scores` (nothing when first > last).
      const auto score = [&](const float* q, int64_t n, int64_t ldq, int64_t first, int64_t last) {
        if (first > last) return;
        kernels::GemmArgs product = Product(keys, q, n, ldq, scores.get(), span);
        product.row_begin = first;
        product.row_end = last + 1;
        // The keys' rows are short (dk values, 512 bytes in float32): prefetched ahead whatever the CPU's
        // GEMV default (speed only). On the 2-core Zen 5 VM, whose default leaves weight rows to the
        // hardware, a decode step's attention over 512-8192 positions read 32-37 GB/s that way and 38-48
        // with this (bench/attention_bench.cc, 4 alternated runs; docs/benchmarks.md "long contexts").
        product.prefetch = kernels::GemvPrefetch::kAhead;
        kernels::Bf16Gemm(product);
      };
      // The softmax over a row's visible keys (gpt_oss: with the head's sink logit) and the weighted sum
      // of their values into o (kernels/attention_cpu.h: the same bits on every ISA and machine), up to
      // kSoftmaxValuesMaxRows rows at a time sharing one pass over the values.
      kernels::SoftmaxValuesArgs rows[kernels::kSoftmaxValuesMaxRows];
      int count = 0;
      const auto flush = [&] {
        if (count > 0) kernels::SoftmaxValuesRows(rows, count);
        count = 0;
      };
      const auto add_row = [&](float* row_scores, int64_t pos, int64_t qh, float* o) {
        const auto [first, last] = visible(pos);
        if (first > last) {
          std::fill_n(o, a.dv, 0.0f);
          return;
        }
        kernels::SoftmaxValuesArgs& sv = rows[count++];
        sv = kernels::SoftmaxValuesArgs{};
        sv.scores = row_scores + first;
        sv.n = last - first + 1;
        sv.scale = a.scale;
        sv.sink = a.sinks != nullptr ? a.sinks + qh : nullptr;
        if (vh_bf16 != nullptr) {
          sv.v_bf16 = vh_bf16 + first * v_row;
        } else {
          sv.v = vh + first * v_row;
        }
        sv.v_row_stride = v_row;
        sv.dv = a.dv;
        sv.out = o;
        if (count == kernels::kSoftmaxValuesMaxRows) flush();
      };
      if (grouped) {  // one position: every query head of the unit sees the same keys
        const auto [first, last] = visible(a.pos0);
        score(a.q + (h * group + g0) * a.dk, g1 - g0, a.dk, first, last);
        for (int64_t g = g0; g < g1; ++g)
          add_row(scores.get() + (g - g0) * span, a.pos0, h * group + g, a.out + (h * group + g) * a.dv);
        flush();
        continue;
      }
      // query heads h * group + g0 .. h * group + g1 - 1, t rows each, in blocks of kQueryBlock positions
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t qh = h * group + g;
        for (int64_t i0 = 0; i0 < a.t; i0 += kQueryBlock) {
          const int64_t nr = std::min(kQueryBlock, a.t - i0);
          score(a.q + (h * group * a.t + g * a.t + i0) * a.dk, nr, a.dk, visible(a.pos0 + i0).first,
                visible(a.pos0 + i0 + nr - 1).second);
          for (int64_t b = 0; b < nr; ++b)
            add_row(scores.get() + b * span, a.pos0 + i0 + b, qh, a.out + (i0 + b) * a.n_heads * a.dv + qh * a.dv);
          flush();
        }
      }
    }
  };
  // KV heads are shared out among the threads from a few positions on: a head costs a product call, an
  // allocation and its softmax besides its multiply-adds, so even a short context's heads outweigh
  // waking the others (below 2^20 multiply-adds, ~500 positions of qwen2_moe mini, they used to run on
  // the calling thread alone: decode TPOT 5-10 % and a 16-token prefill 5-10 % slower on 2 cores,
  // issue 35). Each head's outputs are computed alike whichever thread runs it.
  const int64_t work = a.n_heads * a.t * span * (a.dk + a.dv);
  const int64_t n_units = a.n_kv * slices;
  if (work < (int64_t{1} << 14) || n_units < 2 || WorkPool::InRegion()) {
    units(0, n_units);
  } else {
    WorkPool::Shared().ParallelFor(n_units, 1, units);
  }
}

void SiluMul(const float* g, const float* u, int64_t count, float* act) {
  for (int64_t i = 0; i < count; ++i) act[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void ClampedSwiglu(const float* g, const float* u, int64_t count, float limit, float alpha, float* act) {
  for (int64_t i = 0; i < count; ++i) {
    const float gate = std::min(g[i], limit);
    const float up = std::min(std::max(u[i], -limit), limit);
    const float glu = gate * (1.0f / (1.0f + std::exp(-(gate * alpha))));
    act[i] = (up + 1.0f) * glu;
  }
}

void Gemms(const std::vector<kernels::GemmArgs>& args) {
  std::vector<Task> tasks;
  tasks.reserve(args.size() * static_cast<size_t>(PiecesPerProduct()));
  AddGemms(tasks, args);
  RunTasks(tasks);
}

void MlpGateUp(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra,
               const std::function<void()>& on_caller) {
  std::vector<Task> tasks;
  tasks.reserve((jobs.size() + extra.size()) * static_cast<size_t>(PiecesPerProduct()));
  for (const MlpJob& j : jobs)
    if (j.n > 0) Split(tasks, Task::kGateUp, &j, j.gate.rows, 2 * RowCost(j.gate.cols, j.n));
  AddGemms(tasks, extra);
  RunTasks(tasks, on_caller);
}

void MlpGateUp(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra) {
  MlpGateUp(jobs, extra, {});
}

void MlpDown(const std::vector<MlpJob>& jobs, const std::vector<kernels::GemmArgs>& extra) {
  std::vector<Task> tasks;
  tasks.reserve((jobs.size() + extra.size()) * static_cast<size_t>(PiecesPerProduct()));
  for (const MlpJob& j : jobs)
    if (j.n > 0) Split(tasks, Task::kDown, &j, j.down.rows, RowCost(j.down.cols, j.n));
  AddGemms(tasks, extra);
  RunTasks(tasks);
}

}  // namespace zipmoe::executor::cpu
