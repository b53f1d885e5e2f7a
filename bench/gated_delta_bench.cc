// Gated DeltaNet recurrence on the CPU (kernels/gated_delta.h), per ISA variant: the time of one
// decode step (t = 1) and of a short prefill chunk per token, for Qwen3-Next-80B-A3B's linear-attention
// shapes (16 key heads, 32 value heads, dk = dv = 128: a 2 MiB float32 state per layer). Every layer's
// state is its own buffer (36 layers, 72 MiB: larger than the caches, as in a real decode step), value
// heads split over T threads as the executor splits them. Each round runs every available variant
// once, in turn, so a slow spell of the machine lands on all of them; the report gives per variant the
// median over rounds of the time per token and layer, and the state traffic (each call reads and writes
// every state byte once: 2 x 2 MiB per layer) in GB/s.
//
//   gated_delta_bench [--threads T] [--rounds R] [--layers L] [--tokens N1,N2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/gated_delta.h"

namespace {

using zipmoe::kernels::GatedDeltaArgs;
using zipmoe::kernels::GatedDeltaIsaAvailable;
using zipmoe::kernels::GatedDeltaRecurrentWithIsa;
using zipmoe::kernels::GemmIsa;
using zipmoe::kernels::GemmIsaName;

constexpr int64_t kKeyHeads = 16;  // Qwen3-Next-80B-A3B linear_num_key_heads
constexpr int64_t kValueHeads = 32;  // linear_num_value_heads
constexpr int64_t kHeadDim = 128;  // linear_key_head_dim = linear_value_head_dim

struct Options {
  int threads = 1;
  int rounds = 7;
  int layers = 36;  // Qwen3-Next-80B-A3B: 36 of its 48 layers are Gated DeltaNet
  std::vector<int64_t> tokens = {1, 16};
};

std::vector<int64_t> ParseList(const char* s) {
  std::vector<int64_t> out;
  std::string text(s);
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    out.push_back(std::strtoll(text.substr(pos, comma - pos).c_str(), nullptr, 10));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// The inputs of n tokens laid out as the conv output [n, channels] (q, k, v slices), shared by every layer.
struct Inputs {
  int64_t channels = 2 * kKeyHeads * kHeadDim + kValueHeads * kHeadDim;
  std::vector<float> x, g, beta, out;

  explicit Inputs(int64_t n) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    x.resize(static_cast<size_t>(n * channels));
    for (float& v : x) v = normal(rng);
    zipmoe::kernels::L2NormalizeHeads(x.data(), n, 2 * kKeyHeads, kHeadDim, channels, 1.0f);
    g.resize(static_cast<size_t>(n * kValueHeads));
    beta.resize(g.size());
    for (float& v : g) v = -0.5f * unit(rng);
    for (float& v : beta) v = unit(rng);
    out.resize(static_cast<size_t>(n * kValueHeads * kHeadDim));
  }
};

// Seconds for one call per layer with n tokens, value heads split over the threads.
double Pass(const Options& o, GemmIsa isa, std::vector<std::vector<float>>& states, Inputs& in, int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int th = 0; th < o.threads; ++th) {
    pool.emplace_back([&, th] {
      for (std::vector<float>& state : states) {
        GatedDeltaArgs a;
        a.q = in.x.data();
        a.k = a.q + kKeyHeads * kHeadDim;
        a.v = a.k + kKeyHeads * kHeadDim;
        a.g = in.g.data();
        a.beta = in.beta.data();
        a.state = state.data();
        a.out = in.out.data();
        a.t = n;
        a.n_k = kKeyHeads;
        a.n_v = kValueHeads;
        a.dk = a.dv = kHeadDim;
        a.q_token_stride = a.k_token_stride = a.v_token_stride = in.channels;
        a.out_token_stride = kValueHeads * kHeadDim;
        a.head_begin = kValueHeads * th / o.threads;
        a.head_end = kValueHeads * (th + 1) / o.threads;
        if (!GatedDeltaRecurrentWithIsa(isa, a).ok()) std::abort();
      }
    });
  }
  for (std::thread& t : pool) t.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--threads") o.threads = std::atoi(argv[i + 1]);
    else if (k == "--rounds") o.rounds = std::atoi(argv[i + 1]);
    else if (k == "--layers") o.layers = std::atoi(argv[i + 1]);
    else if (k == "--tokens") o.tokens = ParseList(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: gated_delta_bench [--threads T] [--rounds R] [--layers L] [--tokens 1,16]\n");
      return 2;
    }
  }
  std::vector<GemmIsa> isas;
  for (GemmIsa isa : {GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512, GemmIsa::kNeon}) {
    if (GatedDeltaIsaAvailable(isa)) isas.push_back(isa);
  }
  const int64_t state_floats = kValueHeads * kHeadDim * kHeadDim;
  const double state_bytes = static_cast<double>(state_floats) * sizeof(float);
  std::vector<std::vector<float>> states(static_cast<size_t>(o.layers), std::vector<float>(state_floats, 0.0f));
  std::printf("gated_delta_bench: n_k %ld, n_v %ld, dk = dv = %ld, %d layers of %.1f MiB state (%.0f MiB), "
              "%d threads, %d rounds\n",
              static_cast<long>(kKeyHeads), static_cast<long>(kValueHeads), static_cast<long>(kHeadDim), o.layers,
              state_bytes / 1048576.0, o.layers * state_bytes / 1048576.0, o.threads, o.rounds);
  for (int64_t n : o.tokens) {
    Inputs in(n);
    std::vector<std::vector<double>> times(isas.size());
    for (GemmIsa isa : isas) (void)Pass(o, isa, states, in, n);  // warm-up: page in, settle clocks
    for (int r = 0; r < o.rounds; ++r) {
      for (size_t v = 0; v < isas.size(); ++v) times[v].push_back(Pass(o, isas[v], states, in, n));
    }
    for (size_t v = 0; v < isas.size(); ++v) {
      std::sort(times[v].begin(), times[v].end());
      const double median = times[v][times[v].size() / 2];
      const double per_token_layer_us = median / static_cast<double>(n * o.layers) * 1e6;
      std::printf("tokens %3ld  %-7s median %8.1f us per token and layer, %7.1f ms per token (%d layers), "
                  "state traffic %.1f GB/s (%.1f MiB per token and layer), vs scalar %.2fx\n",
                  static_cast<long>(n), GemmIsaName(isas[v]), per_token_layer_us,
                  per_token_layer_us * o.layers / 1e3, o.layers, 2.0 * state_bytes * o.layers / median / 1e9,
                  2.0 * state_bytes / static_cast<double>(n) / 1048576.0, times[0][times[0].size() / 2] / median);
    }
  }
  return 0;
}
