// storage_bench: pread throughput of the storage service's access pattern (one I/O thread, queue depth
// 1, 4 KiB-aligned offsets and destinations) at read sizes 4 KiB..4 MiB: O_DIRECT sequential and
// random, O_DIRECT + xxh64 verification (what StorageService does per chunk), and buffered cold reads.
// io_uring is not measured: liburing is not installed (docs/benchmarks.md "Runtime: storage reads").
//
//   storage_bench [--file PATH] [--file-mib 256] [--point-mib 32] [--passes 3]
// PATH defaults to $TMPDIR (or /tmp)/zipmoe_storage_bench.bin; it is created (random bytes, fsync)
// and removed at exit. Prints a markdown table: median MB/s over passes (best in parentheses),
// reads/s, mean wall and CPU microseconds per read, all from the median pass; and xxh64's speed alone.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <ctime>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/hash.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kMiB = 1 << 20;

struct Options {
  std::string file;
  uint64_t file_mib = 256;
  uint64_t point_mib = 32;  // bytes read per measured pass
  int passes = 3;
};

struct Buffer {
  uint8_t* data = nullptr;
  explicit Buffer(uint64_t n) {
    if (::posix_memalign(reinterpret_cast<void**>(&data), kAlign, n) != 0) data = nullptr;
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

bool WriteRandomFile(const std::string& path, uint64_t bytes) {
  zipmoe::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return false;
  std::vector<uint64_t> block(kMiB / 8);
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (uint64_t done = 0; done < bytes; done += kMiB) {
    for (auto& v : block) {  // xorshift64: incompressible, cheap
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      v = x;
    }
    if (::write(fd.get(), block.data(), kMiB) != static_cast<ssize_t>(kMiB)) return false;
  }
  return ::fsync(fd.get()) == 0;
}

enum class Mode { kDirectSeq, kDirectRandom, kDirectSeqVerify, kBufferedColdSeq };
const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kDirectSeq: return "O_DIRECT seq";
    case Mode::kDirectRandom: return "O_DIRECT random";
    case Mode::kDirectSeqVerify: return "O_DIRECT seq + xxh64";
    case Mode::kBufferedColdSeq: return "buffered cold seq";
  }
  return "?";
}

struct Pass {
  double mb_per_s = 0;
  double reads_per_s = 0;
  double us_per_read = 0;
  double cpu_us_per_read = 0;  // this thread's CPU time (syscall + copy + hash), robust to a busy machine
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One pass of `n_reads` reads of `size` bytes. Returns false on an I/O error.
bool RunPass(const Options& o, Mode mode, uint64_t size, uint64_t n_reads, uint8_t* buf, uint64_t seed,
             Pass* out) {
  const bool direct = mode != Mode::kBufferedColdSeq;
  zipmoe::UniqueFd fd(::open(o.file.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0)));
  if (!fd.valid()) {
    std::fprintf(stderr, "E: open %s: %s\n", o.file.c_str(), std::strerror(errno));
    return false;
  }
  if (!direct) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_DONTNEED);  // cold: drop cached pages
  const uint64_t file_bytes = o.file_mib * kMiB;
  const uint64_t slots = file_bytes / size;
  std::mt19937_64 rng(seed);
  uint64_t sink = 0;
  const double cpu_start = ThreadCpuSeconds();
  const auto start = Clock::now();
  for (uint64_t i = 0; i < n_reads; ++i) {
    const uint64_t slot = mode == Mode::kDirectRandom ? rng() % slots : i % slots;
    const uint64_t off = slot * size;
    uint64_t done = 0;
    while (done < size) {
      const ssize_t n = ::pread(fd.get(), buf + done, size - done, static_cast<off_t>(off + done));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        std::fprintf(stderr, "E: pread %s@%llu: %s\n", o.file.c_str(), static_cast<unsigned long long>(off + done),
                     n < 0 ? std::strerror(errno) : "EOF");
        return false;
      }
      done += static_cast<uint64_t>(n);
    }
    if (mode == Mode::kDirectSeqVerify) sink ^= zipmoe::Xxh64(buf, size);
  }
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_s = ThreadCpuSeconds() - cpu_start;
  if (sink == 1) std::fprintf(stderr, " ");  // keep the hash live
  out->mb_per_s = static_cast<double>(n_reads * size) / s / 1e6;
  out->reads_per_s = static_cast<double>(n_reads) / s;
  out->us_per_read = s * 1e6 / static_cast<double>(n_reads);
  out->cpu_us_per_read = cpu_s * 1e6 / static_cast<double>(n_reads);
  return true;
}

int Run(const Options& o) {
  std::fprintf(stderr, "I: writing %llu MiB to %s\n", static_cast<unsigned long long>(o.file_mib), o.file.c_str());
  if (!WriteRandomFile(o.file, o.file_mib * kMiB)) {
    std::fprintf(stderr, "E: cannot write %s: %s\n", o.file.c_str(), std::strerror(errno));
    return 1;
  }
  const std::vector<uint64_t> sizes = {4 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20};
  const Mode modes[] = {Mode::kDirectSeq, Mode::kDirectRandom, Mode::kDirectSeqVerify, Mode::kBufferedColdSeq};
  Buffer buf(sizes.back());
  if (buf.data == nullptr) return 1;
  // Hashing alone, on a warm buffer: the I/O thread's verification cost per byte.
  {
    Buffer warm(4 * kMiB);
    if (warm.data == nullptr) return 1;
    std::memset(warm.data, 0x5a, 4 * kMiB);
    uint64_t sink = 0;
    const double cpu0 = ThreadCpuSeconds();
    for (int i = 0; i < 256; ++i) sink ^= zipmoe::Xxh64(warm.data, 4 * kMiB);
    const double cpu_s = ThreadCpuSeconds() - cpu0;
    std::printf("xxh64, warm 4 MiB buffer: %.2f GB/s of CPU time%s\n\n", 256.0 * 4 * kMiB / cpu_s / 1e9,
                sink == 1 ? " " : "");
  }
  std::printf("| read size | mode | MB/s median (best) | reads/s | us/read | CPU us/read |\n|---|---|---|---|---|---|\n");
  for (uint64_t size : sizes) {
    const uint64_t n_reads = std::max<uint64_t>(o.point_mib * kMiB / size, 16);
    for (Mode mode : modes) {
      std::vector<Pass> passes;
      for (int p = 0; p < o.passes; ++p) {
        Pass pass;
        if (!RunPass(o, mode, size, n_reads, buf.data, 1000 + static_cast<uint64_t>(p), &pass)) return 1;
        passes.push_back(pass);
      }
      std::sort(passes.begin(), passes.end(), [](const Pass& a, const Pass& b) { return a.mb_per_s < b.mb_per_s; });
      const Pass& med = passes[passes.size() / 2];
      std::printf("| %llu KiB | %s | %.0f (%.0f) | %.0f | %.1f | %.1f |\n", static_cast<unsigned long long>(size >> 10),
                  ModeName(mode), med.mb_per_s, passes.back().mb_per_s, med.reads_per_s, med.us_per_read,
                  med.cpu_us_per_read);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const char* tmp = std::getenv("TMPDIR");
  o.file = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/zipmoe_storage_bench.bin";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--file") o.file = value;
    else if (flag == "--file-mib") o.file_mib = std::stoull(value);
    else if (flag == "--point-mib") o.point_mib = std::stoull(value);
    else if (flag == "--passes") o.passes = std::stoi(value);
    else {
      std::fprintf(stderr, "E: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.file_mib < 8 || o.passes < 1) {
    std::fprintf(stderr, "E: --file-mib >= 8 and --passes >= 1\n");
    return 2;
  }
  const int rc = Run(o);
  ::unlink(o.file.c_str());
  return rc;
}
