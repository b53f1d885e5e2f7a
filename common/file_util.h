// File helpers: owned descriptors, read-only memory maps, and atomic (temp + rename) writes.
//
// Ownership: UniqueFd and MappedFile are move-only owners of their OS handles. AtomicFile writes to
// "<path>.tmp.<pid>" and only Commit() makes the file visible under its final name (fsync + rename);
// destroying an uncommitted AtomicFile removes the temp file, so a failure leaves nothing half-written.
// None of these types is safe to use from two threads at once; a MappedFile's bytes may be read
// concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace zipmoe {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

// The size of open file `fd` (named `path` in errors) if it is a regular file. Errors: kIoError (fstat,
// with errno's text), kInvalidArgument "<path>: not a regular file" (a FIFO, directory or device in a
// model file's place).
Result<uint64_t> RegularFileSize(int fd, const std::string& path);

// `path` opened read-only (O_CLOEXEC) as a regular file, and its size. O_NONBLOCK: a FIFO in its place
// is refused (RegularFileSize) instead of blocking open() until a writer comes; the flag changes
// nothing for regular files. Errors: kNotFound (no such file), kIoError (open, with errno's text), and
// RegularFileSize's.
Result<UniqueFd> OpenRegularFile(const std::string& path, uint64_t* size);

// Read-only, private memory map of a whole file. Empty files map to data()==nullptr, size()==0.
class MappedFile {
 public:
  // Errors: kNotFound (no such file), kIoError (open/stat/mmap failed), message names `path`.
  static Result<MappedFile> Open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Reads the whole file in and maps every page now (madvise MADV_POPULATE_READ, Linux >= 5.14;
  // older kernels: one read per page), so later accesses take no page faults: for weights that are
  // all used, and streamed by compute kernels, once per process. Asks for transparent huge pages
  // first (MADV_HUGEPAGE): pages not yet in the page cache are then read as 2 MiB folios and mapped
  // as such, so streaming a weight matrix walks one TLB entry per 2 MiB instead of per 4 KiB (issue
  // 35; a hint, ignored where THP is off). Errors: kIoError naming the path (an I/O error while
  // reading the file in).
  Status Populate() const;

  // Replaces the file mapping by a private anonymous copy of the whole file at the same addresses
  // (data() and every pointer into it stay valid; the bytes are the file's as read now), 32 MiB at a
  // time: each piece reserved 2 MiB-aligned and asked for transparent huge pages (MADV_HUGEPAGE) before
  // the copy touches it, then moved over its range of the mapping with one mremap, so the process holds
  // at most one piece twice (RSS stays within 32 MiB of the file's size). What it is for: weights that
  // compute kernels stream on every token read faster from such memory than from the page cache on
  // some machines (issue 35: on a 2-vCPU Xeon VM a BF16 GEMV over a mapped, PMD-mapped checkpoint ran
  // at 13-19 GB/s against 18-28 GB/s over the same bytes copied, and decode took 6-33 % less time;
  // docs/benchmarks.md "Background: (m) on other machines"). The copy is not page cache: it is not
  // shared with other processes and the kernel cannot drop it under memory pressure, so callers check
  // that it fits first (services/executor/weights_memory.h). Afterwards later changes to the file are
  // no longer seen. A no-op for an empty file or one already copied. Errors: kIoError naming the path
  // and the byte range (no memory for a piece; a move failed): the pieces moved before stay
  // anonymous, the rest mapped (every byte is the file's either way), anonymous() stays false and a
  // later call copies the whole file again.
  //
  // Other threads may read data() while it runs (WeightsMemory::kBackground copies while the model
  // serves): a piece reads as the file mapping until its move and as the copy after it, and each move
  // is one mremap under the address space's write lock, so a read at any moment sees the file's bytes
  // (tests/common/file_util_test.cc checks with readers running). Only anonymous() must not be read
  // concurrently. `cancel` (optional) is checked before each piece: once it reads true the call returns
  // kUnavailable naming the path, the pieces already moved anonymous and the rest mapped, as on errors.
  Status CopyToAnonymousMemory(const std::atomic<bool>* cancel = nullptr);
  // True once CopyToAnonymousMemory succeeded.
  bool anonymous() const { return anonymous_; }

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool anonymous_ = false;
  std::string path_;
};

// /proc/meminfo's MemAvailable in bytes (memory the kernel can hand out without swapping, page
// cache that it can drop counted as available); 0 where it cannot be read (not Linux, no /proc).
int64_t MemAvailableBytes();

// What this process may still add in memory it cannot give back (anonymous memory): MemAvailable,
// lowered to the room left under the memory limit of its control group and of every group above it
// (cgroup v2 `memory.max` less `memory.current` plus the group's page cache, `file` in memory.stat;
// cgroup v1 `memory.limit_in_bytes` less `memory.usage_in_bytes` plus `total_cache`), where such a
// limit is set: a copy that fits MemAvailable may still not fit the group a container or a benchmark
// runs it in. `proc_root` / `cgroup_root` default to /proc and /sys/fs/cgroup (tests pass a fake
// tree). 0 where MemAvailable cannot be read.
int64_t MemoryHeadroomBytes(const std::string& proc_root = "/proc", const std::string& cgroup_root = "/sys/fs/cgroup");

class AtomicFile {
 public:
  // Creates "<path>.tmp.<pid>". Errors: kIoError naming the temp path.
  static Result<AtomicFile> Create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temp file unless committed

  // Appends bytes at the current end. Errors: kIoError (short write, ENOSPC, ...).
  Status Write(const void* data, uint64_t size_bytes);
  // Writes at an absolute offset (pwrite); does not move the append position.
  Status WriteAt(uint64_t offset, const void* data, uint64_t size_bytes);
  // Appends zero bytes until the append position is a multiple of `alignment`.
  Status PadTo(uint64_t alignment);
  uint64_t position() const { return position_; }
  // fsync, close and rename onto the final path. Errors: kIoError.
  Status Commit();
  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, std::string tmp_path, UniqueFd fd)
      : path_(std::move(path)), tmp_path_(std::move(tmp_path)), fd_(std::move(fd)) {}
  std::string path_;
  std::string tmp_path_;
  UniqueFd fd_;
  uint64_t position_ = 0;
  bool committed_ = false;
};

// Whole-file helpers. ReadFile errors: kNotFound / kIoError naming the path.
Result<std::string> ReadFileToString(const std::string& path);
// Atomic write (temp + fsync + rename).
Status WriteFileAtomic(const std::string& path, std::string_view contents);
// Joins two path components with a single '/'.
std::string JoinPath(const std::string& a, const std::string& b);
bool FileExists(const std::string& path);
bool IsDirectory(const std::string& path);
// mkdir -p. Errors: kIoError.
Status CreateDirectories(const std::string& path);
// rm -rf: removes `path` and everything under it without following symbolic links (nftw, depth
// first); a missing path is not an error. Used instead of std::filesystem::remove_all, which PyPI's
// libtorch.so (torch 2.x) exports in a broken copy that can win symbol lookup process-wide.
// Errors: kIoError naming the first entry that could not be removed (what was removed stays removed).
Status RemoveTree(const std::string& path);

}  // namespace zipmoe
