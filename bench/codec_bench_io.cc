// codec_bench section (e): sequential reads of one file in --io_dir, O_DIRECT and buffered (cold and
// warm page cache), 1..4 threads (see codec_bench.cc for the program and docs/benchmarks.md for results).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/codec_bench.h"

namespace zipmoe::codec_bench {
namespace {

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

}  // namespace

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

}  // namespace zipmoe::codec_bench
