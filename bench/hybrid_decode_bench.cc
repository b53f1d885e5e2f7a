// The two attention kinds of a hybrid model (qwen3_next / qwen3_5_moe) at decode, per token and layer,
// against context length: the Gated DeltaNet state path (the conv1d + SiLU with its carried inputs, the
// L2 norms and the delta rule: kernels/gated_delta.h, as services/executor/linear_attention.cc runs
// them) and the full attention's softmax(q kᵀ) v over the KV cache (services/executor/cpu_ops.h
// AttendCausal), at Qwen3-Next-80B-A3B's widths: DeltaNet 16 key / 32 value heads of 128 (a 2 MiB
// state), attention 16 query / 2 KV heads of 256. The projections, which cost the same at every
// context, are left out of both. Each round times every context once, in turn; the report gives the
// median over rounds (µs per token and layer), the DeltaNet / attention ratio at each context, and each
// kind's ratio between the longest and the shortest context (the DeltaNet's should be ~1: its state
// does not grow).
//
//   hybrid_decode_bench [--rounds R] [--contexts 128,512,2048] [--layers L]
//
// L layers of each kind, each with its own state / cache, so a step reads from memory as a real one
// does. One thread for the DeltaNet here; AttendCausal splits KV heads over torch's intra-op threads
// when the work is large: run with OMP_NUM_THREADS=1 to compare one core against one core.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/gated_delta.h"
#include "services/executor/cpu_ops.h"

namespace {

namespace kernels = zipmoe::kernels;
namespace cpu = zipmoe::executor::cpu;

constexpr int64_t kKeyHeads = 16, kValueHeads = 32, kLinearDim = 128, kConvKernel = 4;
constexpr int64_t kHeads = 16, kKvHeads = 2, kHeadDim = 256;
constexpr int64_t kChannels = 2 * kKeyHeads * kLinearDim + kValueHeads * kLinearDim;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<float> Random(size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Linear {
  std::vector<float> conv_w, conv_state, state, g, beta;
};

// One decode token through `layers` DeltaNet state paths; returns seconds.
double DeltaNetStep(std::vector<Linear>& layers, const std::vector<float>& input, std::vector<float>& mixed,
                    std::vector<float>& out) {
  const auto t0 = std::chrono::steady_clock::now();
  for (Linear& l : layers) {
    kernels::CausalConvArgs c;
    c.x = input.data();
    c.w = l.conv_w.data();
    c.state = l.conv_state.data();
    c.out = mixed.data();
    c.t = 1;
    c.channels = kChannels;
    c.kernel = kConvKernel;
    c.x_token_stride = c.out_token_stride = kChannels;
    kernels::CausalConv1d(c);
    const int64_t kd = kKeyHeads * kLinearDim;
    kernels::L2NormalizeHeads(mixed.data(), 1, kKeyHeads, kLinearDim, kChannels, 1.0f / std::sqrt(128.0f));
    kernels::L2NormalizeHeads(mixed.data() + kd, 1, kKeyHeads, kLinearDim, kChannels, 1.0f);
    kernels::GatedDeltaArgs a;
    a.q = mixed.data();
    a.k = mixed.data() + kd;
    a.v = mixed.data() + 2 * kd;
    a.g = l.g.data();
    a.beta = l.beta.data();
    a.state = l.state.data();
    a.out = out.data();
    a.t = 1;
    a.n_k = kKeyHeads;
    a.n_v = kValueHeads;
    a.dk = a.dv = kLinearDim;
    a.q_token_stride = a.k_token_stride = a.v_token_stride = kChannels;
    a.out_token_stride = kValueHeads * kLinearDim;
    a.head_begin = 0;
    a.head_end = kValueHeads;
    kernels::GatedDeltaRecurrent(a);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One decode token through `caches.size()` full-attention layers at context `total`; returns seconds.
double AttentionStep(const std::vector<std::vector<float>>& k_caches, const std::vector<std::vector<float>>& v_caches,
                     int64_t total, const std::vector<float>& q, std::vector<float>& out) {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t l = 0; l < k_caches.size(); ++l) {
    cpu::AttentionArgs a;
    a.q = q.data();
    a.n_heads = kHeads;
    a.t = 1;
    a.dk = kHeadDim;
    a.k = k_caches[l].data();
    a.v = v_caches[l].data();
    a.k_head_stride = a.v_head_stride = total * kHeadDim;
    a.n_kv = kKvHeads;
    a.total = total;
    a.dv = kHeadDim;
    a.pos0 = total - 1;
    a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    a.out = out.data();
    cpu::AttendCausal(a);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9, n_layers = 8;
  std::vector<int64_t> contexts = {128, 512, 2048};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--layers" && i + 1 < argc) {
      n_layers = std::atoi(argv[++i]);
    } else if (a == "--contexts" && i + 1 < argc) {
      contexts.clear();
      for (std::string s = argv[++i]; !s.empty();) {
        const size_t comma = s.find(',');
        contexts.push_back(std::atoll(s.substr(0, comma).c_str()));
        s = comma == std::string::npos ? "" : s.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr, "usage: hybrid_decode_bench [--rounds R] [--contexts 128,512,2048] [--layers L]\n");
      return 2;
    }
  }
  if (rounds < 1 || n_layers < 1 || contexts.empty()) return 2;
  std::mt19937 rng(7);
  std::vector<Linear> linear(static_cast<size_t>(n_layers));
  for (Linear& l : linear) {
    l.conv_w = Random(kChannels * kConvKernel, rng, 0.5f);
    l.conv_state = Random((kConvKernel - 1) * kChannels, rng, 1.0f);
    l.state = Random(kValueHeads * kLinearDim * kLinearDim, rng, 0.1f);
    l.g.assign(kValueHeads, -0.05f);
    l.beta.assign(kValueHeads, 0.5f);
  }
  const std::vector<float> input = Random(kChannels, rng, 1.0f);
  std::vector<float> mixed(kChannels), lin_out(kValueHeads * kLinearDim);
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  std::vector<std::vector<float>> k_caches, v_caches;
  for (int l = 0; l < n_layers; ++l) {
    k_caches.push_back(Random(static_cast<size_t>(kKvHeads * longest * kHeadDim), rng, 1.0f));
    v_caches.push_back(Random(static_cast<size_t>(kKvHeads * longest * kHeadDim), rng, 1.0f));
  }
  const std::vector<float> q = Random(kHeads * kHeadDim, rng, 1.0f);
  std::vector<float> attn_out(kHeads * kHeadDim);
  std::vector<std::vector<double>> lin_times(contexts.size()), attn_times(contexts.size());
  DeltaNetStep(linear, input, mixed, lin_out);  // warm-up
  for (int r = 0; r < rounds; ++r) {
    for (size_t c = 0; c < contexts.size(); ++c) {
      // The DeltaNet step does not depend on the context; it is timed beside each context's attention
      // step so both see the same spell of the machine.
      lin_times[c].push_back(DeltaNetStep(linear, input, mixed, lin_out) / n_layers * 1e6);
      attn_times[c].push_back(AttentionStep(k_caches, v_caches, contexts[c], q, attn_out) / n_layers * 1e6);
    }
  }
  std::printf("hybrid_decode_bench: Gated DeltaNet (16/32 heads of 128, %s) vs full attention (16/2 heads of 256), "
              "%d layers each, %d rounds, medians, us per token and layer\n",
              kernels::GemmIsaName(kernels::GatedDeltaIsa()), n_layers, rounds);
  std::printf("| context | DeltaNet state path us | attention us | DeltaNet / attention |\n|---|---|---|---|\n");
  std::vector<double> lin_med, attn_med;
  for (size_t c = 0; c < contexts.size(); ++c) {
    lin_med.push_back(Median(lin_times[c]));
    attn_med.push_back(Median(attn_times[c]));
    std::printf("| %lld | %.1f | %.1f | %.2f |\n", static_cast<long long>(contexts[c]), lin_med.back(),
                attn_med.back(), lin_med.back() / attn_med.back());
  }
  const size_t lo = static_cast<size_t>(std::min_element(contexts.begin(), contexts.end()) - contexts.begin());
  const size_t hi = static_cast<size_t>(std::max_element(contexts.begin(), contexts.end()) - contexts.begin());
  std::printf("context %lld vs %lld: DeltaNet %.2fx, attention %.2fx\n", static_cast<long long>(contexts[hi]),
              static_cast<long long>(contexts[lo]), lin_med[hi] / lin_med[lo], attn_med[hi] / attn_med[lo]);
  return 0;
}
