// File helpers: owned descriptors, read-only memory maps, and atomic (temp + rename) writes.
//
// Ownership: UniqueFd and MappedFile are move-only owners of their OS handles. AtomicFile writes to
// "<path>.tmp.<pid>" and only Commit() makes the file visible under its final name (fsync + rename);
// destroying an uncommitted AtomicFile removes the temp file, so a failure leaves nothing half-written.
// None of these types is safe to use from two threads at once; a MappedFile's bytes may be read
// concurrently.
#pragma once

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
  // (data() and every pointer into it stay valid; the bytes are the file's as read now): reserved
  // 2 MiB-aligned and asked for transparent huge pages (MADV_HUGEPAGE) before the copy touches it,
  // then moved over the mapping in one mremap. What it is for: weights that compute kernels stream
  // on every token read faster from such memory than from the page cache on some machines (issue
  // 35: on a 2-vCPU Xeon VM a BF16 GEMV over a mapped, PMD-mapped checkpoint ran at 13-17 GB/s
  // against 18-26 GB/s over the same bytes copied, and decode took ~11 % less time; docs/benchmarks.md
  // "Background: (m) on other machines"). The copy is not page cache: it is not shared with other
  // processes and the kernel cannot drop it under memory pressure, so callers check that it fits
  // first (services/executor/weights_memory.h WeightsMemory::kAnonymous). Afterwards later changes
  // to the file are no longer seen. A no-op for an empty file or one already copied. Errors: kIoError
  // naming the path (no memory for the copy; the move failed); the file mapping is then left as it was.
  Status CopyToAnonymousMemory();
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
