// MXFP4 vs BF16 expert matmuls on the CPU (issue 41): the same kernels (kernels/bf16_gemm.h), the same
// shapes, weights 4.25 bits (FP4 E2M1 nibbles + one E8M0 scale per 32, as gpt-oss ships its experts)
// against 16 bits (BF16). Decode (one token, GEMV) and a small prefill batch on gpt-oss-20b's expert
// shapes (gate_up_proj 5760 x 2880, down_proj 2880 x 2880), split by rows over T threads as the executor
// splits them; each shape's BF16 and MXFP4 runs alternate (R rounds), and the report gives per round the
// MXFP4 / BF16 time ratio and its median, so a slow spell of the machine lands on both.
//
//   mxfp4_gemm_bench [--threads T] [--rounds R] [--matrices M] [--tokens N1,N2] [--shapes ROWSxCOLS,...]
//
// The matrices (M of each shape) are distinct buffers larger than the caches, as one decode step's
// experts are.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/bf16_gemm.h"

namespace {

using zipmoe::kernels::Bf16Gemm;
using zipmoe::kernels::BestGemmIsa;
using zipmoe::kernels::GemmArgs;
using zipmoe::kernels::GemmIsaName;

struct Shape {
  int64_t rows, cols;
};

struct Options {
  int threads = 2;
  int rounds = 7;
  int matrices = 8;
  std::vector<int64_t> tokens = {1, 16};
  std::vector<Shape> shapes = {{5760, 2880}, {2880, 2880}};  // gpt-oss-20b gate_up_proj, down_proj
};

std::vector<std::string> Split(const char* s) {
  std::vector<std::string> out;
  std::string text(s);
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    out.push_back(text.substr(pos, comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

// One shape's weights: M matrices in BF16 and in MXFP4 (blocks + scales).
struct Weights {
  Shape shape;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<std::vector<uint8_t>> blocks, scales;
};

Weights MakeWeights(const Options& o, Shape s, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  Weights w{s, {}, {}, {}};
  const size_t numel = static_cast<size_t>(s.rows * s.cols);
  for (int m = 0; m < o.matrices; ++m) {
    std::vector<uint16_t> bf16(numel);
    for (uint16_t& b : bf16) {
      const float v = normal(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      b = static_cast<uint16_t>(bits >> 16);
    }
    std::vector<uint8_t> blocks(numel / 2), scales(numel / 32);
    for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
    for (uint8_t& c : scales) c = static_cast<uint8_t>(118 + rng() % 4);  // gpt-oss-like: 2^-9 .. 2^-6
    w.bf16.push_back(std::move(bf16));
    w.blocks.push_back(std::move(blocks));
    w.scales.push_back(std::move(scales));
  }
  return w;
}

// Seconds for one pass over every matrix with n tokens, rows split over the threads.
double Pass(const Options& o, bool mxfp4, const Weights& w, const std::vector<float>& x, std::vector<float>& y,
            int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t) {
    pool.emplace_back([&, t] {
      for (int m = 0; m < o.matrices; ++m) {
        GemmArgs a;
        a.w.rows = w.shape.rows;
        a.w.cols = w.shape.cols;
        if (mxfp4) {
          a.w.mxfp4 = w.blocks[static_cast<size_t>(m)].data();
          a.w.mxfp4_scales = w.scales[static_cast<size_t>(m)].data();
        } else {
          a.w.bf16 = w.bf16[static_cast<size_t>(m)].data();
        }
        a.x = x.data();
        a.n = n;
        a.ldx = w.shape.cols;
        a.y = y.data();
        a.ldy = w.shape.rows;
        a.row_begin = w.shape.rows * t / o.threads;
        a.row_end = w.shape.rows * (t + 1) / o.threads;
        Bf16Gemm(a);
      }
    });
  }
  for (std::thread& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool bad = argc % 2 == 0;  // a flag without its value
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--threads") {
      o.threads = std::atoi(argv[i + 1]);
    } else if (k == "--rounds") {
      o.rounds = std::atoi(argv[i + 1]);
    } else if (k == "--matrices") {
      o.matrices = std::atoi(argv[i + 1]);
    } else if (k == "--tokens") {
      o.tokens.clear();
      for (const std::string& v : Split(argv[i + 1])) o.tokens.push_back(std::strtoll(v.c_str(), nullptr, 10));
    } else if (k == "--shapes") {
      o.shapes.clear();
      for (const std::string& v : Split(argv[i + 1])) {
        const size_t xpos = v.find('x');
        o.shapes.push_back({std::strtoll(v.substr(0, xpos).c_str(), nullptr, 10),
                            xpos == std::string::npos ? 0 : std::strtoll(v.substr(xpos + 1).c_str(), nullptr, 10)});
      }
    } else {
      bad = true;
    }
  }
  bad = bad || o.rounds < 1 || o.threads < 1 || o.matrices < 1 || o.tokens.empty();
  for (const Shape& s : o.shapes) bad = bad || s.rows < 1 || s.cols < 32 || s.cols % 32 != 0;
  if (bad) {
    std::fprintf(stderr, "usage: mxfp4_gemm_bench [--threads T] [--rounds R] [--matrices M] [--tokens 1,16] "
                         "[--shapes 5760x2880,2880x2880]   (cols a multiple of 32)\n");
    return 2;
  }
  std::mt19937 rng(1);
  const int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  std::printf("mxfp4_gemm_bench: ISA %s, %d threads, %d matrices per shape, %d rounds\n", GemmIsaName(BestGemmIsa()),
              o.threads, o.matrices, o.rounds);
  for (const Shape& s : o.shapes) {
    const Weights w = MakeWeights(o, s, rng);
    const double numel = static_cast<double>(o.matrices) * static_cast<double>(s.rows * s.cols);
    const double bf16_bytes = 2 * numel, mxfp4_bytes = numel / 2 + numel / 32;
    std::printf("shape %ld x %ld: BF16 %.0f MiB, MXFP4 %.0f MiB\n", static_cast<long>(s.rows),
                static_cast<long>(s.cols), bf16_bytes / 1048576.0, mxfp4_bytes / 1048576.0);
    std::vector<float> x(static_cast<size_t>(max_tokens * s.cols), 0.5f), y(static_cast<size_t>(max_tokens * s.rows));
    for (int64_t n : o.tokens) {
      std::vector<double> ratios;
      double best_bf16 = 1e9, best_mxfp4 = 1e9;
      (void)Pass(o, false, w, x, y, n);  // warm-up: page in both sets
      (void)Pass(o, true, w, x, y, n);
      for (int r = 0; r < o.rounds; ++r) {
        const double tb = Pass(o, false, w, x, y, n);
        const double tm = Pass(o, true, w, x, y, n);
        best_bf16 = std::min(best_bf16, tb);
        best_mxfp4 = std::min(best_mxfp4, tm);
        ratios.push_back(tm / tb);
        std::printf("  tokens %ld round %d: BF16 %.2f ms (%.1f GB/s), MXFP4 %.2f ms (%.1f GB/s), MXFP4 / BF16 %.3f\n",
                    static_cast<long>(n), r + 1, tb * 1e3, bf16_bytes / tb / 1e9, tm * 1e3, mxfp4_bytes / tm / 1e9,
                    tm / tb);
      }
      std::sort(ratios.begin(), ratios.end());
      std::printf("shape %ld x %ld tokens %ld: MXFP4 / BF16 time median %.3f (best %.2f vs %.2f ms)\n",
                  static_cast<long>(s.rows), static_cast<long>(s.cols), static_cast<long>(n),
                  ratios[ratios.size() / 2], best_mxfp4 * 1e3, best_bf16 * 1e3);
    }
  }
  return 0;
}
