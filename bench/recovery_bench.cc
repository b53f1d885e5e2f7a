// recovery_bench: BF16 recovery throughput (ZipMoE §3.3 "Memory-Coalesced Tensor Recovery Kernel",
// kernels/recovery.h) with Google Benchmark. n runs over 64 Ki .. 64 Mi elements (x4 steps).
// bytes_per_second counts 4 bytes per element: e and sm read (2n), out written (2n).
//   BM_RecoverReference       RecoverBf16Reference (scalar reference, common/bitfield.h MergeBf16)
//   BM_RecoverCpu             RecoverBf16Cpu (the dispatched best CPU variant)
//   BM_RecoverCpuIsa/<isa>    RecoverBf16CpuWithIsa, every variant available here
//   BM_RecoverGpu             LaunchRecoverBf16 on 256-byte-aligned device planes (vec16 path)
//   BM_RecoverGpuExpert       LaunchRecoverBf16Batch of three n/3-element tensors (an expert's gate, up and
//                             down) in one launch, as the GPU executor recovers a missed expert
//   BM_CudaMemcpyD2D          cudaMemcpy device-to-device of 2n bytes (the same 4n bytes of traffic)
// GPU benchmarks time each iteration with CUDA events and are registered only when a device is
// visible; otherwise a line says they were skipped.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "kernels/recovery.h"

#ifdef ZIPMOE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace zipmoe::kernels {
namespace {

constexpr int64_t kMinElements = int64_t{64} << 10;
constexpr int64_t kMaxElements = int64_t{64} << 20;

// Planes with exponents around 2^-6 and arbitrary sign|mantissa bytes (values do not change the
// cost; the bit formula is data-independent).
struct HostPlanes {
  explicit HostPlanes(int64_t n) : e(n), sm(n), out(n) {
    uint32_t x = 12345;
    for (int64_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      e[i] = static_cast<uint8_t>(0x76 + (x >> 29));
      sm[i] = static_cast<uint8_t>(x >> 16);
    }
  }
  std::vector<uint8_t> e, sm;
  std::vector<uint16_t> out;
};

void SetBytes(benchmark::State& state, int64_t n) { state.SetBytesProcessed(state.iterations() * 4 * n); }

void BM_RecoverReference(benchmark::State& state) {
  const int64_t n = state.range(0);
  HostPlanes p(n);
  for (auto _ : state) {
    RecoverBf16Reference(p.e.data(), p.sm.data(), p.out.data(), n);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  SetBytes(state, n);
}

void BM_RecoverCpu(benchmark::State& state) {
  const int64_t n = state.range(0);
  HostPlanes p(n);
  for (auto _ : state) {
    RecoverBf16Cpu(p.e.data(), p.sm.data(), p.out.data(), n);
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  state.SetLabel(CpuRecoveryIsaName(BestCpuRecoveryIsa()));
  SetBytes(state, n);
}

void BM_RecoverCpuIsa(benchmark::State& state, CpuRecoveryIsa isa) {
  const int64_t n = state.range(0);
  HostPlanes p(n);
  for (auto _ : state) {
    Status st = RecoverBf16CpuWithIsa(isa, p.e.data(), p.sm.data(), p.out.data(), n);
    if (!st.ok()) {
      state.SkipWithError(st.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(p.out.data());
    benchmark::ClobberMemory();
  }
  SetBytes(state, n);
}

#ifdef ZIPMOE_HAVE_CUDA
// Device buffers for one size: e, sm [n] uint8 and out [n] uint16 (cudaMalloc: 256-byte aligned).
struct DevicePlanes {
  explicit DevicePlanes(int64_t n) {
    ok = cudaMalloc(&e, n) == cudaSuccess && cudaMalloc(&sm, n) == cudaSuccess &&
         cudaMalloc(&out, 2 * n) == cudaSuccess && cudaMemset(e, 0x7e, n) == cudaSuccess &&
         cudaMemset(sm, 0x35, n) == cudaSuccess && cudaEventCreate(&start) == cudaSuccess &&
         cudaEventCreate(&stop) == cudaSuccess;
  }
  ~DevicePlanes() {
    cudaFree(e);
    cudaFree(sm);
    cudaFree(out);
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
  }
  DevicePlanes(const DevicePlanes&) = delete;
  DevicePlanes& operator=(const DevicePlanes&) = delete;

  // Times one enqueue of `body` on the default stream; false (and skips the benchmark) on errors.
  template <typename Body>
  bool TimeOnce(benchmark::State& state, Body body) {
    cudaEventRecord(start);
    const std::string error = body();
    cudaEventRecord(stop);
    const cudaError_t sync = cudaEventSynchronize(stop);
    if (!error.empty() || sync != cudaSuccess) {
      state.SkipWithError((error.empty() ? cudaGetErrorString(sync) : error).c_str());
      return false;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
    return true;
  }

  bool ok = false;
  uint8_t* e = nullptr;
  uint8_t* sm = nullptr;
  uint16_t* out = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
};

void BM_RecoverGpu(benchmark::State& state) {
  const int64_t n = state.range(0);
  DevicePlanes d(n);
  if (!d.ok) {
    state.SkipWithError("cudaMalloc/cudaEventCreate failed");
    return;
  }
  state.SetLabel(RecoveryKernelPathName(SelectRecoveryKernelPath(d.e, d.sm, d.out)));
  for (auto _ : state) {
    const bool timed = d.TimeOnce(state, [&] {
      Status st = LaunchRecoverBf16(d.e, d.sm, d.out, n, nullptr);
      return st.ok() ? std::string() : st.ToString();
    });
    if (!timed) break;
  }
  SetBytes(state, n);
}

void BM_RecoverGpuExpert(benchmark::State& state) {
  const int64_t n = state.range(0), part = n / 3 / 16 * 16;  // three 256-byte-aligned matrices
  DevicePlanes d(n);
  if (!d.ok) {
    state.SkipWithError("cudaMalloc/cudaEventCreate failed");
    return;
  }
  RecoverySegment segments[3];
  for (int m = 0; m < 3; ++m) segments[m] = {d.e + m * part, d.sm + m * part, d.out + m * part, part};
  for (auto _ : state) {
    const bool timed = d.TimeOnce(state, [&] {
      Status st = LaunchRecoverBf16Batch(segments, 3, nullptr);
      return st.ok() ? std::string() : st.ToString();
    });
    if (!timed) break;
  }
  SetBytes(state, 3 * part);
}

void BM_CudaMemcpyD2D(benchmark::State& state) {
  const int64_t n = state.range(0);
  DevicePlanes d(n);
  if (!d.ok) {
    state.SkipWithError("cudaMalloc/cudaEventCreate failed");
    return;
  }
  // 2n bytes copied = 2n read + 2n written: the recovery kernel's traffic.
  uint8_t* src = nullptr;
  if (cudaMalloc(&src, 2 * n) != cudaSuccess) {
    state.SkipWithError("cudaMalloc src failed");
    return;
  }
  for (auto _ : state) {
    const bool timed = d.TimeOnce(state, [&] {
      const cudaError_t err = cudaMemcpy(d.out, src, 2 * n, cudaMemcpyDeviceToDevice);
      return err == cudaSuccess ? std::string() : std::string(cudaGetErrorString(err));
    });
    if (!timed) break;
  }
  cudaFree(src);
  SetBytes(state, n);
}
#endif

void Sizes(benchmark::internal::Benchmark* b) { b->RangeMultiplier(4)->Range(kMinElements, kMaxElements); }

void RegisterAll() {
  Sizes(benchmark::RegisterBenchmark("BM_RecoverReference", BM_RecoverReference));
  Sizes(benchmark::RegisterBenchmark("BM_RecoverCpu", BM_RecoverCpu));
  for (CpuRecoveryIsa isa :
       {CpuRecoveryIsa::kPortable, CpuRecoveryIsa::kSse2, CpuRecoveryIsa::kAvx2, CpuRecoveryIsa::kNeon}) {
    if (!CpuRecoveryIsaAvailable(isa)) continue;
    const std::string name = std::string("BM_RecoverCpuIsa/") + CpuRecoveryIsaName(isa);
    Sizes(benchmark::RegisterBenchmark(name.c_str(), BM_RecoverCpuIsa, isa));
  }
#ifdef ZIPMOE_HAVE_CUDA
  if (CudaDeviceCount() > 0) {
    Sizes(benchmark::RegisterBenchmark("BM_RecoverGpu", BM_RecoverGpu)->UseManualTime());
    Sizes(benchmark::RegisterBenchmark("BM_RecoverGpuExpert", BM_RecoverGpuExpert)->UseManualTime());
    Sizes(benchmark::RegisterBenchmark("BM_CudaMemcpyD2D", BM_CudaMemcpyD2D)->UseManualTime());
    return;
  }
#endif
  std::fprintf(stderr,
               "recovery_bench: %s; GPU benchmarks (BM_RecoverGpu, BM_RecoverGpuExpert, BM_CudaMemcpyD2D) skipped\n",
               BuiltWithCuda() ? "no CUDA device visible" : "built without CUDA");
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
