// bitfield_bench: SplitBf16 / MergeBf16 throughput (common/bitfield.h) with Google Benchmark.
// bytes_per_second counts BF16 bytes (2 per value). codec_bench section (d) prints the same
// measurement in the docs/benchmarks.md table format.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "common/bitfield.h"
#include "common/dtype.h"

namespace zipmoe {
namespace {

std::vector<uint16_t> GaussianBf16(int64_t n) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(n);
  for (auto& x : w) x = FloatToBf16(normal(rng));
  return w;
}

void BM_SplitBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<uint16_t> w = GaussianBf16(n);
  std::vector<uint8_t> e(n), sm(n);
  for (auto _ : state) {
    SplitBf16(w.data(), n, e.data(), sm.data());
    benchmark::DoNotOptimize(e.data());
    benchmark::DoNotOptimize(sm.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * n);
}

void BM_MergeBf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<uint16_t> w = GaussianBf16(n);
  std::vector<uint8_t> e(n), sm(n);
  SplitBf16(w.data(), n, e.data(), sm.data());
  std::vector<uint16_t> out(n);
  for (auto _ : state) {
    MergeBf16(e.data(), sm.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * n);
}

// 64 Ki values (L2-resident), one 1024x704 expert, 16 Mi values (DRAM-bound).
BENCHMARK(BM_SplitBf16)->Arg(64 << 10)->Arg(1024 * 704)->Arg(16 << 20);
BENCHMARK(BM_MergeBf16)->Arg(64 << 10)->Arg(1024 * 704)->Arg(16 << 20);

}  // namespace
}  // namespace zipmoe

BENCHMARK_MAIN();
