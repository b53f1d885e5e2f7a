// FP8 vs BF16 expert matmuls on the CPU (issue 40): the same kernels (kernels/bf16_gemm.h), the same
// shapes, weights 1 byte (F8_E4M3 + 128x128 weight_scale_inv blocks) against 2 bytes (BF16). Decode
// (one token, GEMV) and a small prefill batch, split by rows over T threads as the executor splits
// them; each shape's BF16 and FP8 runs alternate (R rounds), and the report gives per round the
// FP8 / BF16 time ratio and its median, so a slow spell of the machine lands on both.
//
//   fp8_gemm_bench [--threads T] [--rounds R] [--rows N] [--cols K] [--matrices M] [--tokens N1,N2] [--uniform-codes]
//
// The matrices (M of them, N x K each) lie one after the other in one buffer per dtype, larger than
// the caches and advised into 2 MiB pages (MADV_HUGEPAGE), as a decode step's resident experts are
// (common/file_util.h MappedFile).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "common/dtype.h"
#include "kernels/bf16_gemm.h"

namespace {

using zipmoe::kernels::Bf16Gemm;
using zipmoe::kernels::BestGemmIsa;
using zipmoe::kernels::GemmArgs;
using zipmoe::kernels::GemmIsaName;

struct Options {
  int threads = 2;
  int rounds = 5;
  int64_t rows = 1408;
  int64_t cols = 4096;
  int matrices = 48;
  std::vector<int64_t> tokens = {1, 16};
  bool uniform_codes = false;
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

// `bytes` in 2 MiB-aligned memory advised into huge pages (a hint; fine when refused); never freed.
void* HugePageBuffer(size_t bytes) {
  const size_t huge = size_t{2} << 20, rounded = (bytes + huge - 1) / huge * huge;
  void* p = std::aligned_alloc(huge, rounded);
  if (p == nullptr) {
    std::fprintf(stderr, "fp8_gemm_bench: cannot allocate %zu bytes\n", rounded);
    std::exit(1);
  }
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

// Seconds for one pass over every matrix with n tokens, rows split over the threads.
double Pass(const Options& o, bool fp8, const uint16_t* bf16, const uint8_t* f8, const std::vector<float>& scales, const std::vector<float>& x,
            std::vector<float>& y, int64_t n) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < o.threads; ++t) {
    pool.emplace_back([&, t] {
      for (int m = 0; m < o.matrices; ++m) {
        GemmArgs a;
        a.w.rows = o.rows;
        a.w.cols = o.cols;
        if (fp8) {
          a.w.f8 = f8 + m * o.rows * o.cols;
          a.w.f8_scale = scales.data();
          a.w.block_rows = 128;
          a.w.block_cols = 128;
        } else {
          a.w.bf16 = bf16 + m * o.rows * o.cols;
        }
        a.x = x.data();
        a.n = n;
        a.ldx = o.cols;
        a.y = y.data();
        a.ldy = o.rows;
        a.row_begin = o.rows * t / o.threads;
        a.row_end = o.rows * (t + 1) / o.threads;
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
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (k == "--uniform-codes") {
      o.uniform_codes = true;
      continue;
    }
    if (v == nullptr || (k != "--threads" && k != "--rounds" && k != "--rows" && k != "--cols" && k != "--matrices" &&
                         k != "--tokens")) {
      std::fprintf(stderr, "usage: fp8_gemm_bench [--threads T] [--rounds R] [--rows N] [--cols K] [--matrices M] "
                           "[--tokens 1,16] [--uniform-codes]\n");
      return 2;
    }
    ++i;
    if (k == "--threads") o.threads = std::atoi(v);
    else if (k == "--rounds") o.rounds = std::atoi(v);
    else if (k == "--rows") o.rows = std::atoll(v);
    else if (k == "--cols") o.cols = std::atoll(v);
    else if (k == "--matrices") o.matrices = std::atoi(v);
    else o.tokens = ParseList(v);
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const size_t count = static_cast<size_t>(o.matrices * o.rows * o.cols);
  uint16_t* bf16 = static_cast<uint16_t*>(HugePageBuffer(count * sizeof(uint16_t)));
  uint8_t* f8 = static_cast<uint8_t*>(HugePageBuffer(count));
  for (size_t i = 0; i < count; ++i) {
    const float v = normal(rng);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    bf16[i] = static_cast<uint16_t>(bits >> 16);
    // Codes as a checkpoint's quantizer makes them (DeepSeek-V3's act_quant / weight scale = amax / 448 per
    // 128x128 block, amax ~ 5 sigma: values ~ N(0, 90), E4M3 subnormals ~1e-4 of them), or with
    // --uniform-codes every non-NaN code alike (1 in 8 subnormal: CPUs that take a microcode assist on a
    // subnormal float input, as the Intel Xeon of docs/benchmarks.md, show the worst case there).
    f8[i] = o.uniform_codes ? static_cast<uint8_t>(rng() & 0xf7) : zipmoe::FloatToF8E4M3(v * (448.0f / (5 * 0.02f)));
  }
  std::vector<float> scales(static_cast<size_t>(((o.rows + 127) / 128) * ((o.cols + 127) / 128)), 1e-3f);
  const int64_t max_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  std::vector<float> x(static_cast<size_t>(max_tokens * o.cols), 0.5f), y(static_cast<size_t>(max_tokens * o.rows));
  std::printf("fp8_gemm_bench: ISA %s, %d threads, %d matrices of %ld x %ld (BF16 %.0f MiB, FP8 %.0f MiB)\n",
              GemmIsaName(BestGemmIsa()), o.threads, o.matrices, static_cast<long>(o.rows), static_cast<long>(o.cols),
              o.matrices * o.rows * o.cols * 2 / 1048576.0, o.matrices * o.rows * o.cols / 1048576.0);
  for (int64_t n : o.tokens) {
    std::vector<double> ratios;
    double best_bf16 = 1e9, best_fp8 = 1e9;
    (void)Pass(o, false, bf16, f8, scales, x, y, n);  // warm-up: page in both sets
    (void)Pass(o, true, bf16, f8, scales, x, y, n);
    for (int r = 0; r < o.rounds; ++r) {
      const double tb = Pass(o, false, bf16, f8, scales, x, y, n);
      const double tf = Pass(o, true, bf16, f8, scales, x, y, n);
      best_bf16 = std::min(best_bf16, tb);
      best_fp8 = std::min(best_fp8, tf);
      ratios.push_back(tf / tb);
      std::printf("  tokens %ld round %d: BF16 %.2f ms (%.1f GB/s), FP8 %.2f ms (%.1f GB/s), FP8 / BF16 %.3f\n",
                  static_cast<long>(n), r + 1, tb * 1e3, o.matrices * o.rows * o.cols * 2 / tb / 1e9, tf * 1e3,
                  o.matrices * o.rows * o.cols / tf / 1e9, tf / tb);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("tokens %ld: FP8 / BF16 time median %.3f (best %.2f vs %.2f ms)\n", static_cast<long>(n),
                ratios[ratios.size() / 2], best_fp8 * 1e3, best_bf16 * 1e3);
  }
  return 0;
}
