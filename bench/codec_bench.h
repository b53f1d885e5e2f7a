// codec_bench's shared parts (bench/codec_bench.cc, the program; codec_bench_explore.cc, section
// (a'); codec_bench_io.cc, section (e)): flags, the measuring loop and its GB/s formats, and the test
// data (exponent planes of BF16 weights ~ N(0, 0.02²)). Single-threaded driver code; Measure may be
// called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zipmoe::codec_bench {

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

// CPU time of the calling thread, in seconds.
double ThreadCpuSeconds();

// Bytes per second. `cpu` divides by the calling thread's CPU time, so it is the per-core rate
// even when other processes preempt this one; it is meaningless when the caller only waits.
struct Rate {
  double cpu = 0;   // median over repetitions, by thread CPU time
  double wall = 0;  // median over repetitions, by wall-clock time
  double best = 0;  // fastest repetition, by wall-clock time
};

// Runs fn (which processes `bytes` bytes) at least 3 times and for at least min_seconds.
Rate Measure(double bytes, double min_seconds, const std::function<void()>& fn);

// "cpu-time median (wall best)" in GB/s, for single-threaded work.
std::string CpuGbps(const Rate& r);

// "wall median (wall best)" in GB/s, for multi-threaded work and I/O.
std::string WallGbps(const Rate& r);

// Prints "codec_bench: <what>" to stderr and exits with status 1.
void Die(const std::string& what);

// The exponent plane of `n` BF16 weights ~ N(0, 0.02²) drawn from `seed`.
Bytes ExponentPlane(int64_t n, uint64_t seed);

// Shannon entropy of `data` in bits per byte.
double EntropyBits(const Bytes& data);

// (a') zstd parameter exploration (codec_bench_explore.cc).
void RunExplore(const Flags& flags);

// (e) Raw read speed of the disk holding --io_dir (codec_bench_io.cc).
void RunIo(const Flags& flags);

}  // namespace zipmoe::codec_bench
