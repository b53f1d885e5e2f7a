// membw_bench: memory read bandwidth of this machine, the denominator of the decode floor in
// bench/suite.py's experiment (m) (bytes one decode token reads / bandwidth).
//
//   membw_bench [--threads N] [--bytes B] [--reps R]
//
// Allocates one float buffer of B bytes (default 2 GiB, at least 1 GiB so that no cache level holds
// it; transparent huge pages asked for, as the model's weights get), writes every element (the pages
// exist; untouched anonymous memory would read the shared zero page), then R times (default 5) per
// read kernel lets N threads (default 2) sum disjoint contiguous slices of it with independent vector
// accumulators. The read kernels (issue 35: the floor must be at least as good a reader as any system
// it judges): "v8" (8-float vectors, whatever the compile target has), "avx2" and "avx512" (32- and
// 64-byte loads, 8 accumulators, software prefetch 1 KiB ahead; each only where the CPU has it), and
// "v8-l2" / "avx512-l2" (each line asked for into L2 3 KiB ahead, as the matmuls ask for weights),
// interleaved rep by rep so drift hits each alike. A repetition's GB/s = B / (wall time from the
// start signal to the last thread's finish). Prints one JSON object on stdout: best and median GB/s
// over every kernel's repetitions ("gbps" is the best of all: the floor's bandwidth), each kernel's
// best / median / runs, and the sum (so the loads cannot be optimised away). A small driver, not a
// timed test.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Eight floats; GCC/Clang lower it to AVX, SSE pairs or NEON, whatever the target has.
typedef float V8 __attribute__((vector_size(32)));

struct Args {
  int threads = 2;
  uint64_t bytes = 2ull << 30;
  int reps = 5;
};

bool ParseBytes(const char* s, uint64_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v <= 0) return false;
  double mul = 1;
  const std::string unit(end);
  if (unit == "" || unit == "B") {
    mul = 1;
  } else if (unit == "K" || unit == "KiB") {
    mul = 1024.0;
  } else if (unit == "M" || unit == "MiB") {
    mul = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB") {
    mul = 1024.0 * 1024 * 1024;
  } else {
    return false;
  }
  *out = static_cast<uint64_t>(v * mul);
  return true;
}

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (arg == "--threads") {
      a->threads = std::atoi(v);
    } else if (arg == "--reps") {
      a->reps = std::atoi(v);
    } else if (arg == "--bytes") {
      if (!ParseBytes(v, &a->bytes)) return false;
    } else {
      return false;
    }
  }
  return a->threads > 0 && a->reps > 0 && a->bytes >= (1ull << 30);
}

// Sums floats [begin, end) of `data` (a multiple of 32 floats long, 32-float aligned). kL2Prefetch: each
// 64-byte line 3 KiB ahead is asked for into L2 first (__builtin_prefetch locality 2), as the matmuls'
// weight streams are (kernels/bf16_gemm_tile.h PrefetchAhead, which read faster than any plain read
// kernel on an Intel Xeon VM: issue 35).
constexpr uint64_t kL2PrefetchFloats = 3072 / sizeof(float);
template <bool kL2Prefetch>
float SumSlice(const float* data, uint64_t begin, uint64_t end) {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (uint64_t i = begin; i < end; i += 32) {
    if (kL2Prefetch) {
      __builtin_prefetch(data + i + kL2PrefetchFloats, 0, 2);
      __builtin_prefetch(data + i + kL2PrefetchFloats + 16, 0, 2);
    }
    V8 x0, x1, x2, x3;
    std::memcpy(&x0, data + i, sizeof(V8));
    std::memcpy(&x1, data + i + 8, sizeof(V8));
    std::memcpy(&x2, data + i + 16, sizeof(V8));
    std::memcpy(&x3, data + i + 24, sizeof(V8));
    a0 += x0;
    a1 += x1;
    a2 += x2;
    a3 += x3;
  }
  const V8 s = (a0 + a1) + (a2 + a3);
  float total = 0;
  for (int j = 0; j < 8; ++j) total += s[j];
  return total;
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) float SumSliceAvx2(const float* data, uint64_t begin, uint64_t end) {
  __m256 a[8];
  for (auto& x : a) x = _mm256_setzero_ps();
  for (uint64_t i = begin; i < end; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(data + i) + 1024, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(data + i) + 1024 + 64, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(data + i) + 1024 + 128, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(data + i) + 1024 + 192, _MM_HINT_T0);
    for (int k = 0; k < 8; ++k) a[k] = _mm256_add_ps(a[k], _mm256_load_ps(data + i + 8 * k));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])),
                           _mm256_add_ps(_mm256_add_ps(a[4], a[5]), _mm256_add_ps(a[6], a[7])));
  float out[8];
  _mm256_storeu_ps(out, s);
  float total = 0;
  for (float x : out) total += x;
  return total;
}

// kL2Prefetch: 3 KiB ahead into L2 (prefetcht1) instead of 1 KiB ahead into L1.
template <bool kL2Prefetch>
__attribute__((target("avx512f"))) float SumSliceAvx512(const float* data, uint64_t begin, uint64_t end) {
  __m512 a[8];
  for (auto& x : a) x = _mm512_setzero_ps();
  for (uint64_t i = begin; i < end; i += 128) {
    for (int k = 0; k < 8; ++k) {
      if (kL2Prefetch) {
        _mm_prefetch(reinterpret_cast<const char*>(data + i + 16 * k + kL2PrefetchFloats), _MM_HINT_T1);
      } else {
        _mm_prefetch(reinterpret_cast<const char*>(data + i + 16 * k) + 1024, _MM_HINT_T0);
      }
    }
    for (int k = 0; k < 8; ++k) a[k] = _mm512_add_ps(a[k], _mm512_load_ps(data + i + 16 * k));
  }
  for (int k = 1; k < 8; ++k) a[0] = _mm512_add_ps(a[0], a[k]);
  return _mm512_reduce_add_ps(a[0]);
}
#endif

using SumFn = float (*)(const float*, uint64_t, uint64_t);

// The read kernels this CPU can run, by name.
std::vector<std::pair<std::string, SumFn>> Kernels() {
  std::vector<std::pair<std::string, SumFn>> k = {{"v8", &SumSlice<false>}, {"v8-l2", &SumSlice<true>}};
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) k.emplace_back("avx2", &SumSliceAvx2);
  if (__builtin_cpu_supports("avx512f")) {
    k.emplace_back("avx512", &SumSliceAvx512<false>);
    k.emplace_back("avx512-l2", &SumSliceAvx512<true>);
  }
#endif
  return k;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: membw_bench [--threads N] [--bytes B (>= 1GiB; suffix K/M/G)] [--reps R]\n");
    return 2;
  }
  const uint64_t n = args.bytes / sizeof(float) / 128 * 128;  // whole 128-float blocks (every kernel's step)
  const uint64_t bytes = n * sizeof(float);
  float* data = static_cast<float*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  if (data == nullptr) {
    std::fprintf(stderr, "E: cannot allocate %llu bytes\n", static_cast<unsigned long long>(bytes));
    return 1;
  }
  (void)::madvise(data, (bytes + 4095) / 4096 * 4096, MADV_HUGEPAGE);  // a hint; fine when refused
  // Slices of whole 32-float blocks, one per thread; the same split initialises and reads.
  const int t = args.threads;
  std::vector<uint64_t> edge(static_cast<size_t>(t) + 1);
  for (int i = 0; i <= t; ++i) edge[static_cast<size_t>(i)] = n / 128 * static_cast<uint64_t>(i) / t * 128;
  {
    std::vector<std::thread> init;
    for (int i = 0; i < t; ++i) {
      init.emplace_back([&, i] {
        for (uint64_t k = edge[i]; k < edge[i + 1]; ++k) data[k] = static_cast<float>(k % 7) * 0.25f;
      });
    }
    for (auto& th : init) th.join();
  }
  const std::vector<std::pair<std::string, SumFn>> kernels = Kernels();
  std::map<std::string, std::vector<double>> gbps;
  double checksum = 0;
  for (int rep = 0; rep < args.reps; ++rep) {
    for (const auto& [name, fn] : kernels) {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::vector<float> sums(static_cast<size_t>(t), 0.0f);
      std::vector<std::thread> workers;
      for (int i = 0; i < t; ++i) {
        workers.emplace_back([&, i, fn = fn] {
          ready.fetch_add(1);
          while (!go.load(std::memory_order_acquire)) {
          }
          sums[static_cast<size_t>(i)] = fn(data, edge[i], edge[i + 1]);
        });
      }
      while (ready.load() < t) {
      }
      const auto start = std::chrono::steady_clock::now();
      go.store(true, std::memory_order_release);
      for (auto& th : workers) th.join();
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      gbps[name].push_back(static_cast<double>(bytes) / sec / 1e9);
      for (float x : sums) checksum += x;
    }
  }
  std::vector<double> all;
  std::string per_kernel, best_kernel;
  double best = 0;
  for (const auto& [name, fn] : kernels) {
    std::vector<double> runs = gbps[name];
    all.insert(all.end(), runs.begin(), runs.end());
    std::string list;
    for (size_t i = 0; i < runs.size(); ++i) list += (i ? "," : "") + std::to_string(runs[i]);
    std::sort(runs.begin(), runs.end());
    if (runs.back() > best) best = runs.back(), best_kernel = name;
    per_kernel += (per_kernel.empty() ? "" : ", ") + std::string("\"") + name + "\": {\"gbps\": " +
                  std::to_string(runs.back()) + ", \"gbps_median\": " + std::to_string(runs[runs.size() / 2]) +
                  ", \"gbps_runs\": [" + list + "]}";
  }
  std::sort(all.begin(), all.end());
  std::string runs;
  for (size_t i = 0; i < gbps[best_kernel].size(); ++i) runs += (i ? "," : "") + std::to_string(gbps[best_kernel][i]);
  std::printf(
      "{\"threads\": %d, \"bytes\": %llu, \"reps\": %d, \"gbps\": %.3f, \"gbps_median\": %.3f, \"gbps_runs\": [%s], "
      "\"best_kernel\": \"%s\", \"kernels\": {%s}, \"checksum\": %.6g}\n",
      t, static_cast<unsigned long long>(bytes), args.reps, best, all[all.size() / 2], runs.c_str(), best_kernel.c_str(),
      per_kernel.c_str(), checksum);
  std::free(data);
  return 0;
}
