// codec_bench: E-plane compression ratio against the Shannon bound, the zstd parameter exploration
// behind zipmoe's level 1, E-chunk decode speed (1..N threads), split/merge speed, and O_DIRECT vs
// buffered reads of the same bytes (ZipMoE §2.2, §3.1; results in docs/benchmarks.md).
//
// Usage: codec_bench [--sections=ratio,explore,decode,threads,split,io] [--io_dir=/tmp]
//                    [--io_mib=256] [--min_seconds=0.25] [--threads=N]
// Data: BF16 weights ~ N(0, 0.02²) from fixed seeds; an expert tensor is 1024x704 (720,896 values).
// Single-core speeds are medians by thread CPU time (robust to preemption on a shared machine),
// with the fastest wall-clock repetition in parentheses; parallel and I/O rows use wall time.
// Compare rows of one run rather than runs.
#define ZSTD_STATIC_LINKING_ONLY
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
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
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/bitfield.h"
#include "common/codec.h"
#include "common/dtype.h"

namespace zipmoe {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr int64_t kExpertRows = 1024;
constexpr int64_t kExpertCols = 704;
constexpr int64_t kExpertValues = kExpertRows * kExpertCols;  // 720,896 values, 1.4 MB of BF16
constexpr uint64_t kMiB = 1 << 20;

struct Flags {
  std::string sections = "ratio,explore,decode,threads,split,io";
  std::string io_dir = "/tmp";
  uint64_t io_mib = 256;
  double min_seconds = 0.25;  // per measured row
  int threads = 0;            // 0 = std::thread::hardware_concurrency()
  bool Has(const std::string& section) const {
    return ("," + sections + ",").find("," + section + ",") != std::string::npos;
  }
};

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Bytes per second. `cpu` divides by the calling thread's CPU time, so it is the per-core rate
// even when other processes preempt this one; it is meaningless when the caller only waits.
struct Rate {
  double cpu = 0;   // median over repetitions, by thread CPU time
  double wall = 0;  // median over repetitions, by wall-clock time
  double best = 0;  // fastest repetition, by wall-clock time
};

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

std::vector<uint16_t> GaussianBf16(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<uint16_t> w(n);
  for (auto& x : w) x = FloatToBf16(normal(rng));
  return w;
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

// Mean code length in bits/symbol of an optimal (unbounded-length) Huffman code for data: the
// floor for any Huffman literal coder such as zstd's, table description not counted. Analysis only.
double HuffmanBits(const uint8_t* data, size_t n) {
  uint64_t hist[256] = {};
  AccumulateHistogram(data, static_cast<int64_t>(n), hist);
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> heap;
  for (uint64_t c : hist)
    if (c > 0) heap.push(c);
  if (heap.size() < 2) return heap.empty() ? 0.0 : 1.0;
  uint64_t total_bits = 0;  // each merge adds one bit to every symbol below it
  while (heap.size() > 1) {
    const uint64_t a = heap.top();
    heap.pop();
    const uint64_t b = heap.top();
    heap.pop();
    total_bits += a + b;
    heap.push(a + b);
  }
  return static_cast<double>(total_bits) / n;
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

// Explored zstd parameter sets, set directly through the advanced API.
struct ZstdParams {
  const char* name;
  int level = 0;  // if non-zero, ZSTD_c_compressionLevel first
  std::vector<std::pair<ZSTD_cParameter, int>> params;
  bool literal_only_producer = false;
};

#if ZSTD_VERSION_NUMBER >= 10504
// A sequence producer that emits no match: every block becomes Huffman literals only (the floor
// reachable with zstd's entropy stage).
size_t NoMatchProducer(void*, ZSTD_Sequence* out, size_t capacity, const void*, size_t src_size, const void*, size_t,
                       int, size_t) {
  if (capacity < 1) return ZSTD_SEQUENCE_PRODUCER_ERROR;
  out[0] = ZSTD_Sequence{0, static_cast<unsigned>(src_size), 0, 0};
  return 1;
}
#endif

std::vector<ZstdParams> ExploredParams() {
  const auto fast7 = [](int window_log, int hash_log, int target_length, bool force_literals) {
    std::vector<std::pair<ZSTD_cParameter, int>> p = {
        {ZSTD_c_strategy, ZSTD_fast}, {ZSTD_c_windowLog, window_log}, {ZSTD_c_hashLog, hash_log},
        {ZSTD_c_minMatch, 7},         {ZSTD_c_searchLog, 1},          {ZSTD_c_targetLength, target_length}};
    if (force_literals) p.push_back({ZSTD_c_literalCompressionMode, ZSTD_ps_enable});
    return p;
  };
  const auto opt7 = [](ZSTD_strategy strategy, int min_match, int hash_log, int search_log) {
    return std::vector<std::pair<ZSTD_cParameter, int>>{{ZSTD_c_strategy, strategy},    {ZSTD_c_windowLog, 17},
                                                        {ZSTD_c_hashLog, hash_log},     {ZSTD_c_chainLog, hash_log},
                                                        {ZSTD_c_searchLog, search_log}, {ZSTD_c_minMatch, min_match},
                                                        {ZSTD_c_targetLength, 999}};
  };
  std::vector<ZstdParams> sets = {
      {"zstd -1 (plain level 1)", 1, {}},
      {"zstd -3", 3, {}},
      {"zstd -9", 9, {}},
      {"zstd -19 (btultra2)", 19, {}},
      {"zstd -22", 22, {}},
      {"L1 + minMatch 7", 1, {{ZSTD_c_minMatch, 7}}},
      {"fast ml7 wlog10 (1 KiB blocks)", 0, fast7(10, 6, 0, true)},
      {"fast ml7 wlog17 hlog14", 0, fast7(17, 14, 0, true)},
      {"fast ml7 wlog17 hlog6", 0, fast7(17, 6, 0, true)},
      {"fast ml7 wlog17 hlog6 tlen131072 (no lit. flag)", 0, fast7(17, 6, 131072, false)},
      {"fast ml7 wlog17 hlog6 tlen131072 lit=on [level 1]", 0, fast7(17, 6, 131072, true)},
      {"hlog6 + targetCBlockSize 16K", 0, fast7(17, 6, 131072, true)},
      {"btopt ml7 hlog6 slog1 tlen999", 0, opt7(ZSTD_btopt, 7, 6, 1)},
      {"btultra2 ml3 hlog17 slog9 tlen999", 0, opt7(ZSTD_btultra2, 3, 17, 9)},
  };
  sets[11].params.push_back({ZSTD_c_targetCBlockSize, 16384});
#if ZSTD_VERSION_NUMBER >= 10504
  sets.push_back({"literal-only sequence producer (floor)", 1, {}, true});
#endif
  return sets;
}

// (a') zstd parameter exploration on exponent planes at the chunk sizes zipmoe produces.
void RunExplore(const Flags& flags) {
  std::printf("\n## (a') zstd parameter exploration on exponent planes\n\n");
  const Bytes e = ExponentPlane(2 * kExpertValues, 42);
  const size_t chunk_sizes[] = {4096, 45056, 131072, 720896};
  std::printf("H = %.4f bits/value (entropy of the whole plane)\n\n", EntropyBits(e));
  std::printf(
      "| parameters | 4 KiB | 44 KiB | 128 KiB | 704 KiB | compress MB/s (44 KiB, CPU time) | decode GB/s (44 KiB) "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  // Bounds averaged over the chunks of each size.
  for (const char* bound : {"Shannon entropy H (per chunk)", "Huffman optimum (per chunk, no table)"}) {
    std::printf("| %s |", bound);
    for (size_t chunk : chunk_sizes) {
      const size_t n_chunks = e.size() / chunk;
      double sum = 0;
      for (size_t i = 0; i < n_chunks; ++i) {
        const Bytes one(e.begin() + i * chunk, e.begin() + (i + 1) * chunk);
        sum += bound[0] == 'S' ? EntropyBits(one) : HuffmanBits(one.data(), one.size());
      }
      std::printf(" %.4f |", sum / n_chunks);
    }
    std::printf(" | |\n");
  }
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  for (const ZstdParams& set : ExploredParams()) {
    std::printf("| %s |", set.name);
    double compress_mbps = 0;
    Rate decode;
    for (size_t chunk : chunk_sizes) {
      const size_t n_chunks = e.size() / chunk;
      std::vector<Bytes> stored(n_chunks);
      uint64_t stored_total = 0;
      const double c0 = ThreadCpuSeconds();
      for (size_t i = 0; i < n_chunks; ++i) {
        ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
        if (set.level != 0) ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, set.level);
        for (const auto& [param, value] : set.params) {
          const size_t rc = ZSTD_CCtx_setParameter(cctx.get(), param, value);
          if (ZSTD_isError(rc)) Die(std::string(set.name) + ": " + ZSTD_getErrorName(rc));
        }
#if ZSTD_VERSION_NUMBER >= 10504
        if (set.literal_only_producer) {
          ZSTD_registerSequenceProducer(cctx.get(), nullptr, NoMatchProducer);
          ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_enableSeqProducerFallback, 0);
        }
#endif
        stored[i].resize(ZSTD_compressBound(chunk));
        const size_t rc = ZSTD_compress2(cctx.get(), stored[i].data(), stored[i].size(), e.data() + i * chunk, chunk);
        if (ZSTD_isError(rc)) Die(std::string(set.name) + ": " + ZSTD_getErrorName(rc));
        stored[i].resize(rc);
        stored_total += rc;
      }
      const double seconds = ThreadCpuSeconds() - c0;
      std::printf(" %.4f |", 8.0 * stored_total / (n_chunks * chunk));
      if (chunk == 45056) {
        compress_mbps = n_chunks * chunk / seconds / 1e6;
        Bytes out(chunk);
        decode = Measure(static_cast<double>(n_chunks * chunk), flags.min_seconds / 2, [&] {
          for (const Bytes& s : stored) {
            const size_t rc = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), s.data(), s.size());
            if (rc != chunk) Die(std::string(set.name) + ": decode failed");
          }
        });
      }
    }
    std::printf(" %.1f | %s |\n", compress_mbps, CpuGbps(decode).c_str());
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

// Owns an fd; the file at `path` is removed by the caller.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void ReadWhole(const std::string& path, bool direct, uint64_t block_bytes, int threads, uint64_t file_bytes) {
  Fd f(::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0)));
  if (f.fd < 0) Die("open " + path + (direct ? " with O_DIRECT" : "") + ": " + std::strerror(errno));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      void* raw = nullptr;
      if (::posix_memalign(&raw, 4096, block_bytes) != 0) Die("posix_memalign");
      std::unique_ptr<void, void (*)(void*)> buf(raw, std::free);
      for (uint64_t off = t * block_bytes; off < file_bytes; off += threads * block_bytes) {
        const ssize_t got = ::pread(f.fd, buf.get(), block_bytes, static_cast<off_t>(off));
        if (got != static_cast<ssize_t>(std::min(block_bytes, file_bytes - off)))
          Die("pread " + path + "@" + std::to_string(off) + ": " + (got < 0 ? std::strerror(errno) : "short read"));
      }
    });
  }
  for (auto& thread : pool) thread.join();
}

void DropCache(const std::string& path) {
  Fd f(::open(path.c_str(), O_RDONLY));
  if (f.fd < 0 || ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED) != 0) Die("posix_fadvise DONTNEED " + path);
}

// (e) Raw read speed of the disk holding --io_dir, page cache bypassed (O_DIRECT) and not.
void RunIo(const Flags& flags) {
  const uint64_t file_bytes = flags.io_mib * kMiB;
  const std::string path = flags.io_dir + "/codec_bench_io_" + std::to_string(::getpid()) + ".bin";
  std::printf("\n## (e) Sequential read of a %llu MiB file in %s (GB/s; wall median (wall best))\n\n",
              static_cast<unsigned long long>(flags.io_mib), flags.io_dir.c_str());
  {
    Fd f(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600));
    if (f.fd < 0) Die("create " + path + ": " + std::strerror(errno));
    Bytes block(4 * kMiB);
    std::mt19937_64 rng(3);
    for (uint64_t written = 0; written < file_bytes; written += block.size()) {
      for (size_t i = 0; i < block.size(); i += 8) {
        const uint64_t v = rng();
        std::memcpy(block.data() + i, &v, 8);
      }
      const size_t want = std::min<uint64_t>(block.size(), file_bytes - written);
      if (::write(f.fd, block.data(), want) != static_cast<ssize_t>(want)) Die("write " + path);
    }
    if (::fsync(f.fd) != 0) Die("fsync " + path);
  }
  struct Case {
    const char* name;
    bool direct;
    uint64_t block_bytes;
    int threads;
    bool drop_cache;
  };
  const Case cases[] = {
      {"O_DIRECT, 128 KiB reads, 1 thread", true, 128 << 10, 1, true},
      {"O_DIRECT, 1 MiB reads, 1 thread", true, kMiB, 1, true},
      {"O_DIRECT, 4 MiB reads, 1 thread", true, 4 * kMiB, 1, true},
      {"O_DIRECT, 1 MiB reads, 2 threads", true, kMiB, 2, true},
      {"O_DIRECT, 1 MiB reads, 4 threads", true, kMiB, 4, true},
      {"buffered, 1 MiB reads, cold (fadvise DONTNEED)", false, kMiB, 1, true},
      {"buffered, 1 MiB reads, warm page cache", false, kMiB, 1, false},
  };
  std::printf("| read | GB/s |\n|---|---|\n");
  for (const Case& c : cases) {
    const Rate r = Measure(static_cast<double>(file_bytes), flags.min_seconds, [&] {
      if (c.drop_cache) DropCache(path);
      ReadWhole(path, c.direct, c.block_bytes, c.threads, file_bytes);
    });
    std::printf("| %s | %s |\n", c.name, WallGbps(r).c_str());
  }
  if (::unlink(path.c_str()) != 0) Die("unlink " + path);
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
}  // namespace zipmoe

int main(int argc, char** argv) {
  using namespace zipmoe;
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
