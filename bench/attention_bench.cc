// The CPU executor's causal attention over the KV cache (services/executor/cpu_ops.h AttendCausal):
// time per call and layer against context length, for a decode step (one query) and a prefill chunk
// (t queries ending at the context's last position), with the bytes of keys and values it reads and
// the rate it reads them at. Shapes default to qwen2_moe mini's (8 query / 8 KV heads of 128); any
// GQA shape can be given. Each round times every context once, in turn; the report gives the median
// over rounds.
//
//   attention_bench [--rounds R] [--contexts 512,2048,8192] [--heads H] [--kv-heads K] [--dim D]
//                   [--queries T] [--layers L] [--threads N] [--bf16]
//
// L layers, each with its own cache, so a step reads the keys and values from memory as a real one
// does (the default 24 caches of mini at 8192 positions: 1.5 GiB). AttendCausal splits KV heads over
// the executor's thread pool (WorkPool::Shared) when the work is large: --threads sets how many
// (default 2, as the executor's --threads). --bf16: keys and values cached as BF16 (`--kv-cache-dtype bf16`), half the bytes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "services/executor/cpu_ops.h"
#include "services/executor/work_pool.h"

namespace {

namespace cpu = zipmoe::executor::cpu;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t comma = text.find(',', pos);
    out.push_back(std::stoll(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  int64_t heads = 8, kv_heads = 8, dim = 128, queries = 1, layers = 24, threads = 2;
  bool bf16 = false;
  std::vector<int64_t> contexts = {512, 2048, 8192};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rounds") {
      rounds = std::stoi(next());
    } else if (a == "--contexts") {
      contexts = ParseList(next());
    } else if (a == "--heads") {
      heads = std::stoll(next());
    } else if (a == "--kv-heads") {
      kv_heads = std::stoll(next());
    } else if (a == "--dim") {
      dim = std::stoll(next());
    } else if (a == "--queries") {
      queries = std::stoll(next());
    } else if (a == "--layers") {
      layers = std::stoll(next());
    } else if (a == "--threads") {
      threads = std::stoll(next());
    } else if (a == "--bf16") {
      bf16 = true;
    } else {
      std::fprintf(stderr,
                   "usage: attention_bench [--rounds R] [--contexts 512,2048,8192] [--heads H] [--kv-heads K] "
                   "[--dim D] [--queries T] [--layers L] [--threads N] [--bf16]\n");
      return 2;
    }
  }
  if (rounds < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || dim < 1 || queries < 1 || layers < 1 ||
      threads < 1 || contexts.empty() || *std::min_element(contexts.begin(), contexts.end()) < queries) {
    std::fprintf(stderr, "attention_bench: bad arguments (heads a multiple of kv-heads, contexts >= queries)\n");
    return 2;
  }
  at::set_num_threads(static_cast<int>(threads));
  // AttendCausal shares KV heads out over the executor's pool (services/executor/work_pool.h), not torch's.
  zipmoe::executor::WorkPool::SetSharedThreads(static_cast<int>(threads));
  const int64_t max_ctx = *std::max_element(contexts.begin(), contexts.end());
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const auto fill = [&](std::vector<float>& v) {
    for (float& x : v) x = normal(rng);
  };
  std::vector<std::vector<float>> k(static_cast<size_t>(layers)), v(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    k[static_cast<size_t>(l)].resize(static_cast<size_t>(kv_heads * max_ctx * dim));
    v[static_cast<size_t>(l)].resize(static_cast<size_t>(kv_heads * max_ctx * dim));
    fill(k[static_cast<size_t>(l)]);
    fill(v[static_cast<size_t>(l)]);
  }
  // BF16 copies (the top half of each float32: any BF16 pattern times alike).
  std::vector<std::vector<uint16_t>> k16(static_cast<size_t>(layers)), v16(static_cast<size_t>(layers));
  if (bf16) {
    for (int64_t l = 0; l < layers; ++l) {
      for (auto [from, to] : {std::pair{&k, &k16}, std::pair{&v, &v16}}) {
        const std::vector<float>& f = (*from)[static_cast<size_t>(l)];
        std::vector<uint16_t>& h = (*to)[static_cast<size_t>(l)];
        h.resize(f.size());
        for (size_t i = 0; i < f.size(); ++i) {
          uint32_t bits;
          std::memcpy(&bits, &f[i], sizeof(bits));
          h[i] = static_cast<uint16_t>(bits >> 16);
        }
        (*from)[static_cast<size_t>(l)].clear();
        (*from)[static_cast<size_t>(l)].shrink_to_fit();
      }
    }
  }
  std::vector<float> q(static_cast<size_t>(heads * queries * dim)), out(static_cast<size_t>(queries * heads * dim));
  fill(q);
  std::vector<std::vector<double>> us(contexts.size());
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < contexts.size(); ++c) {
      const int64_t total = contexts[c];
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t l = 0; l < layers; ++l) {
        cpu::AttentionArgs a;
        a.q = q.data();
        a.n_heads = heads;
        a.t = queries;
        a.dk = dim;
        if (bf16) {
          a.k_bf16 = k16[static_cast<size_t>(l)].data();
          a.v_bf16 = v16[static_cast<size_t>(l)].data();
        } else {
          a.k = k[static_cast<size_t>(l)].data();
          a.v = v[static_cast<size_t>(l)].data();
        }
        a.k_head_stride = max_ctx * dim;
        a.v_head_stride = max_ctx * dim;
        a.n_kv = kv_heads;
        a.total = total;
        a.dv = dim;
        a.pos0 = total - queries;
        a.scale = 1.0f / std::sqrt(static_cast<float>(dim));
        a.out = out.data();
        cpu::AttendCausal(a);
      }
      us[c].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                      static_cast<double>(layers));
    }
  }
  std::printf(
      "attention_bench: %lld heads / %lld KV heads of %lld, %lld queries, %lld layers, %lld threads, %s cache, median "
      "of %d rounds\n",
      static_cast<long long>(heads), static_cast<long long>(kv_heads), static_cast<long long>(dim),
      static_cast<long long>(queries), static_cast<long long>(layers), static_cast<long long>(threads),
      bf16 ? "bf16" : "f32", rounds);
  std::printf("%10s %14s %14s %12s\n", "context", "us/layer", "KV MiB/layer", "KV GB/s");
  for (size_t c = 0; c < contexts.size(); ++c) {
    const double m = Median(us[c]);
    const double bytes = 2.0 * static_cast<double>(kv_heads * contexts[c] * dim) * (bf16 ? 2 : sizeof(float));
    std::printf("%10lld %14.1f %14.2f %12.1f\n", static_cast<long long>(contexts[c]), m, bytes / (1 << 20),
                bytes / (m * 1e-6) / 1e9);
  }
  return 0;
}
