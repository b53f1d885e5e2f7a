// recovery_fp_bench: F32 and F16 CPU recovery throughput (kernels/recovery.h, lossless FP32/F16
// experts) with Google Benchmark, against the BF16 fast path measured in the same run. n runs over
// 64 Ki .. 16 Mi elements (x4 steps). bytes_per_second counts the planes read and out written:
// BF16 4 bytes/element, F32 8 (1 e + 3 sm + 4 out), F16 4.375 (1 e + 1.375 sm + 2 out).
//   BM_RecoverBf16Cpu     RecoverBf16Cpu (baseline)
//   BM_RecoverF32Reference / BM_RecoverF32Cpu    MergeF32 / the blocked fast path
//   BM_RecoverF16Reference / BM_RecoverF16Cpu    MergeF16 / the group-at-a-time fast path
// The CUDA kernels are compared with the reference in tests/kernels/recovery_fp_test.cc, not timed here.
#include <benchmark/benchmark.h>

#include <vector>

#include "common/bitfield.h"
#include "kernels/recovery.h"

namespace zipmoe::kernels {
namespace {

// Planes of n elements of `dtype` with exponents around 2^-6 and arbitrary sign|mantissa bytes.
struct Planes {
  Planes(DType dtype, int64_t n) : e(static_cast<size_t>(n)), sm(SmPlaneBytes(dtype, n)) {
    uint32_t x = 12345;
    for (auto& b : e) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<uint8_t>((dtype == DType::kF16 ? 0x0a : 0x76) + (x >> 29));
    }
    for (auto& b : sm) {
      x = x * 1664525u + 1013904223u;
      b = static_cast<uint8_t>(x >> 16);
    }
  }
  std::vector<uint8_t> e, sm;
};

template <typename Out, void (*Fn)(const uint8_t*, const uint8_t*, Out*, int64_t)>
void BM_Recover(benchmark::State& state, DType dtype, double bytes_per_element) {
  const int64_t n = state.range(0);
  Planes p(dtype, n);
  std::vector<Out> out(static_cast<size_t>(n));
  for (auto _ : state) {
    Fn(p.e.data(), p.sm.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(static_cast<double>(state.iterations()) * bytes_per_element *
                                               static_cast<double>(n)));
}

void Sizes(benchmark::internal::Benchmark* b) { b->RangeMultiplier(4)->Range(int64_t{64} << 10, int64_t{16} << 20); }

void RegisterAll() {
  Sizes(benchmark::RegisterBenchmark("BM_RecoverBf16Cpu", BM_Recover<uint16_t, RecoverBf16Cpu>, DType::kBF16, 4.0));
  Sizes(benchmark::RegisterBenchmark("BM_RecoverF32Reference", BM_Recover<uint32_t, RecoverF32Reference>,
                                     DType::kF32, 8.0));
  Sizes(benchmark::RegisterBenchmark("BM_RecoverF32Cpu", BM_Recover<uint32_t, RecoverF32Cpu>, DType::kF32, 8.0));
  Sizes(benchmark::RegisterBenchmark("BM_RecoverF16Reference", BM_Recover<uint16_t, RecoverF16Reference>,
                                     DType::kF16, 4.375));
  Sizes(benchmark::RegisterBenchmark("BM_RecoverF16Cpu", BM_Recover<uint16_t, RecoverF16Cpu>, DType::kF16, 4.375));
}

}  // namespace
}  // namespace zipmoe::kernels

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  zipmoe::kernels::RegisterAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
