// codec_bench: E-plane compression ratio against the Shannon bound, the zstd parameter exploration
// behind zipmoe's level 1, E-chunk decode speed (1..N threads), split/merge speed, and O_DIRECT vs
// buffered reads of the same bytes (ZipMoE §2.2, §3.1; results in docs/benchmarks.md).
//
// Usage: codec_bench [--sections=ratio,explore,decode,threads,split,io] [--io_dir=/tmp]
//                    [--io_mib=256] [--min_seconds=0.25] [--threads=N]
// Data: BF16 weights ~ N(0, 0.02²) from fixed seeds; an expert tensor is 1024x704 (720,896 values).
// Single-core speeds are medians by thread CPU time (robust to preemption on a shared machine),
// with the fastest wall-clock repetition in parentheses; parallel and I/O rows use wall time.
// Compare rows of one run rather than runs. Sections (a') and (e) are in codec_bench_explore.cc and
// codec_bench_io.cc; the shared parts in codec_bench.h.
#define ZSTD_STATIC_LINKING_ONLY
#include "bench/codec_bench.h"

#include <time.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/bitfield.h"
#include "common/codec.h"
#include "common/dtype.h"

namespace zipmoe::codec_bench {
namespace {

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

std::vector<uint16_t> GaussianBf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(n);
  for (auto& x : w) x = FloatToBf16(normal(rng));
  return w;
}

// K E-chunks of one plane, compressed independently (one zstd/lz4 frame each).
struct Chunks {
  std::vector<Bytes> stored;
  std::vector<uint64_t> raw_bytes;
  uint64_t stored_total = 0, raw_total = 0;
};

Chunks CompressShards(const CodecOptions& options, const Bytes& plane, int n_shards) {
  Chunks c;
  for (const auto& [offset, count] : ShardRanges(static_cast<int64_t>(plane.size()), n_shards)) {
    Bytes dst(CompressBoundBytes(options.codec, count));
    Result<uint64_t> size = CompressChunk(options, plane.data() + offset, count, dst.data(), dst.size());
    if (!size.ok()) Die(size.status().ToString());
    dst.resize(*size);
    c.stored_total += *size;
    c.raw_total += count;
    c.stored.push_back(std::move(dst));
    c.raw_bytes.push_back(count);
  }
  return c;
}

void DecodeAll(Codec codec, const Chunks& c, size_t first, size_t step, Bytes* out) {
  for (size_t i = first; i < c.stored.size(); i += step) {
    Status st = DecompressChunk(codec, c.stored[i].data(), c.stored[i].size(), out->data(), c.raw_bytes[i]);
    if (!st.ok()) Die(st.ToString());
  }
}

const std::vector<CodecOptions>& RatioConfigs() {
  static const std::vector<CodecOptions> configs = {{Codec::kZstd, 1},  {Codec::kZstd, 3}, {Codec::kZstd, 9},
                                                    {Codec::kZstd, 19}, {Codec::kLz4, -1}, {Codec::kLz4, 9},
                                                    {Codec::kLz4, 12},  {Codec::kNone, 0}};
  return configs;
}

}  // namespace

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Runs fn (which processes `bytes` bytes) at least 3 times and for at least min_seconds.
Rate Measure(double bytes, double min_seconds, const std::function<void()>& fn) {
  fn();  // warm-up: contexts, page faults
  std::vector<double> cpu, wall;
  const auto start = Clock::now();
  while (wall.size() < 3 || (Seconds(start) < min_seconds && wall.size() < 1000)) {
    const double c0 = ThreadCpuSeconds();
    const auto t0 = Clock::now();
    fn();
    wall.push_back(bytes / Seconds(t0));
    cpu.push_back(bytes / std::max(ThreadCpuSeconds() - c0, 1e-9));
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return {cpu[cpu.size() / 2], wall[wall.size() / 2], wall.back()};
}

// "cpu-time median (wall best)" in GB/s, for single-threaded work.
std::string CpuGbps(const Rate& r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (%.2f)", r.cpu / 1e9, r.best / 1e9);
  return buf;
}

// "wall median (wall best)" in GB/s, for multi-threaded work and I/O.
std::string WallGbps(const Rate& r) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f (%.2f)", r.wall / 1e9, r.best / 1e9);
  return buf;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "codec_bench: %s\n", what.c_str());
  std::exit(1);
}

Bytes ExponentPlane(int64_t n, uint64_t seed) {
  const std::vector<uint16_t> w = GaussianBf16(n, seed);
  Bytes e(n), sm(n);
  SplitBf16(w.data(), n, e.data(), sm.data());
  return e;
}

double EntropyBits(const Bytes& data) {
  uint64_t hist[256] = {};
  AccumulateHistogram(data.data(), static_cast<int64_t>(data.size()), hist);
  return ShannonEntropyBits(hist);
}

namespace {

// (a) Ratio of the E plane and of the whole stored expert (E-chunks + raw SM plane) vs the bound.
void RunRatio(const Flags& flags) {
  std::printf("\n## (a) Compression ratio vs entropy bound (N(0,0.02^2) BF16)\n");
  std::printf("stored/raw = (E bytes + SM bytes) / BF16 bytes; bound = (H + 8) / 16; target <= 66.5%%\n\n");
  std::printf(
      "| tensor | codec | level | K | chunk KiB | E bits/value | H bits | stored/raw | bound | compress MB/s (CPU "
      "time) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  struct Tensor {
    const char* name;
    int64_t n;
    std::vector<int> ks;
  };
  const Tensor tensors[] = {{"2x 1024x704 expert", 2 * kExpertValues, {1, 4, 16}}, {"tiny 64x128", 64 * 128, {1, 4}}};
  for (const Tensor& t : tensors) {
    const Bytes e = ExponentPlane(t.n, 1234);
    const double h = EntropyBits(e);
    for (const CodecOptions& options : RatioConfigs()) {
      for (int k : t.ks) {
        // Shards never span the two experts of the first row: compress each expert's K shards.
        const int64_t tensor_values = t.n == 2 * kExpertValues ? kExpertValues : t.n;
        Chunks all;
        const double c0 = ThreadCpuSeconds();
        for (int64_t base = 0; base < t.n; base += tensor_values) {
          const Bytes one(e.begin() + base, e.begin() + base + tensor_values);
          Chunks c = CompressShards(options, one, k);
          all.stored_total += c.stored_total;
          all.raw_total += c.raw_total;
        }
        const double compress_mbps = all.raw_total / (ThreadCpuSeconds() - c0) / 1e6;
        const double bits = 8.0 * all.stored_total / all.raw_total;
        std::printf("| %s | %s | %d | %d | %.1f | %.4f | %.4f | %.2f%% | %.2f%% | %.1f |\n", t.name,
                    CodecName(options.codec), options.level, k, tensor_values / 1024.0 / k, bits, h,
                    100.0 * (bits + 8) / 16, 100.0 * (h + 8) / 16, compress_mbps);
      }
    }
  }
}

// (b) Single-core decode speed per codec and chunk size (GB/s of decoded output).
void RunDecode(const Flags& flags) {
  std::printf("\n## (b) E-chunk decode, one core (GB/s of exponent bytes out; CPU-time median (wall best))\n\n");
  const Bytes e = ExponentPlane(4 * kExpertValues, 77);
  struct Layout {
    const char* name;
    int64_t tensor_values;
    int k;
  };
  const Layout layouts[] = {{"4 KiB (tiny, K=1)", 4096, 1},
                            {"44 KiB (expert, K=16)", kExpertValues, 16},
                            {"176 KiB (expert, K=4)", kExpertValues, 4},
                            {"704 KiB (expert, K=1)", kExpertValues, 1}};
  std::printf("| codec | level |");
  for (const Layout& l : layouts) std::printf(" %s |", l.name);
  std::printf("\n|---|---|---|---|---|---|\n");
  for (const CodecOptions& options : RatioConfigs()) {
    if (options.codec == Codec::kZstd && options.level == 19) continue;  // decodes like level 1
    std::printf("| %s | %d |", CodecName(options.codec), options.level);
    for (const Layout& l : layouts) {
      Chunks all;
      for (int64_t base = 0; base + l.tensor_values <= static_cast<int64_t>(e.size()); base += l.tensor_values) {
        Chunks c = CompressShards(options, Bytes(e.begin() + base, e.begin() + base + l.tensor_values), l.k);
        for (size_t i = 0; i < c.stored.size(); ++i) {
          all.stored.push_back(std::move(c.stored[i]));
          all.raw_bytes.push_back(c.raw_bytes[i]);
        }
        all.raw_total += c.raw_total;
        if (all.raw_total >= 4 * kMiB) break;
      }
      Bytes out(*std::max_element(all.raw_bytes.begin(), all.raw_bytes.end()));
      const Rate r = Measure(static_cast<double>(all.raw_total), flags.min_seconds,
                             [&] { DecodeAll(options.codec, all, 0, 1, &out); });
      std::printf(" %s |", CpuGbps(r).c_str());
    }
    std::printf("\n");
  }
}

// (c) 1..N threads decoding disjoint E-chunks of the default codec in parallel.
void RunThreads(const Flags& flags) {
  const int max_threads = flags.threads > 0 ? flags.threads : std::max(1u, std::thread::hardware_concurrency());
  std::printf(
      "\n## (c) Parallel E-chunk decode, zstd level %d, 8 experts (aggregate GB/s; wall median (wall best))\n\n",
      DefaultCodecLevel(Codec::kZstd));
  std::printf(
      "| threads | K=16 (44 KiB chunks) | per thread | K=4 (176 KiB chunks) | per thread |\n|---|---|---|---|---|\n");
  const Bytes e = ExponentPlane(8 * kExpertValues, 99);
  Chunks by_k[2];
  const int ks[2] = {16, 4};
  for (int j = 0; j < 2; ++j) {
    for (int x = 0; x < 8; ++x) {
      Chunks c = CompressShards({Codec::kZstd, 0},
                                Bytes(e.begin() + x * kExpertValues, e.begin() + (x + 1) * kExpertValues), ks[j]);
      for (size_t i = 0; i < c.stored.size(); ++i) {
        by_k[j].stored.push_back(std::move(c.stored[i]));
        by_k[j].raw_bytes.push_back(c.raw_bytes[i]);
      }
      by_k[j].raw_total += c.raw_total;
    }
  }
  for (int threads = 1; threads <= max_threads; ++threads) {
    std::printf("| %d |", threads);
    for (const Chunks& chunks : by_k) {
      // Threads persist across repetitions so contexts are created once (as in the worker pool).
      std::mutex mu;
      std::condition_variable cv;
      int generation = 0, done = 0;  // guarded by mu
      bool stop = false;             // guarded by mu
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          Bytes out(*std::max_element(chunks.raw_bytes.begin(), chunks.raw_bytes.end()));
          int seen = 0;
          while (true) {
            {
              std::unique_lock<std::mutex> lock(mu);
              cv.wait(lock, [&] { return stop || generation != seen; });
              if (stop) return;
              seen = generation;
            }
            DecodeAll(Codec::kZstd, chunks, t, threads, &out);
            std::lock_guard<std::mutex> lock(mu);
            if (++done == threads) cv.notify_all();
          }
        });
      }
      const Rate r = Measure(static_cast<double>(chunks.raw_total), flags.min_seconds, [&] {
        std::unique_lock<std::mutex> lock(mu);
        done = 0;
        ++generation;
        cv.notify_all();
        cv.wait(lock, [&] { return done == threads; });
      });
      {
        std::lock_guard<std::mutex> lock(mu);
        stop = true;
      }
      cv.notify_all();
      for (auto& thread : pool) thread.join();
      std::printf(" %s | %.2f |", WallGbps(r).c_str(), r.wall / 1e9 / threads);
    }
    std::printf("\n");
  }
}

// (d) Split/merge of BF16 into E/SM planes (GB/s of BF16 bytes).
void RunSplit(const Flags& flags) {
  std::printf("\n## (d) Bit-field split / merge, one core (GB/s of BF16 bytes; CPU-time median (wall best))\n\n");
  const int64_t n = 16 * kMiB;  // 32 MiB of BF16
  const std::vector<uint16_t> w = GaussianBf16(n, 5);
  Bytes e(n), sm(n);
  std::vector<uint16_t> out(n);
  const Rate split = Measure(2.0 * n, flags.min_seconds, [&] { SplitBf16(w.data(), n, e.data(), sm.data()); });
  const Rate merge = Measure(2.0 * n, flags.min_seconds, [&] { MergeBf16(e.data(), sm.data(), n, out.data()); });
  if (out != w) Die("merge did not invert split");
  std::printf("| op | GB/s |\n|---|---|\n| SplitBf16 (32 MiB) | %s |\n| MergeBf16 (32 MiB) | %s |\n",
              CpuGbps(split).c_str(), CpuGbps(merge).c_str());
}

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq), value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--sections")
      flags.sections = value;
    else if (key == "--io_dir")
      flags.io_dir = value;
    else if (key == "--io_mib")
      flags.io_mib = std::stoull(value);
    else if (key == "--min_seconds")
      flags.min_seconds = std::stod(value);
    else if (key == "--threads")
      flags.threads = std::stoi(value);
    else
      Die("unknown flag " + arg + " (see the usage line at the top of bench/codec_bench.cc)");
  }
  return flags;
}

}  // namespace
}  // namespace zipmoe::codec_bench

int main(int argc, char** argv) {
  using namespace zipmoe::codec_bench;
  const Flags flags = ParseFlags(argc, argv);
  std::printf("# codec_bench: %u hardware threads, zstd %s\n", std::thread::hardware_concurrency(),
              ZSTD_versionString());
  if (flags.Has("ratio")) RunRatio(flags);
  if (flags.Has("explore")) RunExplore(flags);
  if (flags.Has("decode")) RunDecode(flags);
  if (flags.Has("threads")) RunThreads(flags);
  if (flags.Has("split")) RunSplit(flags);
  if (flags.Has("io")) RunIo(flags);
  return 0;
}
