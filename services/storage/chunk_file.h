// ChunkFile: a read-only descriptor of experts.bin (or any file of 4 KiB-aligned chunks) read with
// pread, by default through O_DIRECT so every read is an honest SSD read that neither uses nor fills
// the page cache (design.md §1; ZipMoE §2.3 measures with and without the page cache).
//
// O_DIRECT needs 4 KiB-aligned file offsets, lengths and destinations: ReadAt reads the stored
// bytes rounded up to 4 KiB, which never passes EOF because the converter pads experts.bin to
// 4 KiB (docs/format.md); a file that is not padded ends in a short read, which is handled.
// When the filesystem refuses O_DIRECT (EINVAL at open, or at the first read), the file is reopened
// for buffered reads, `fell_back()` becomes true and one "W:" line goes to stderr.
//
// Ownership: move-only owner of the descriptor. Thread-compatible: one thread reads at a time (the
// storage service's I/O thread); direct_io()/fell_back() may be read from any thread.
// io_uring is left for later (liburing is not installed); see docs/benchmarks.md "Runtime: storage reads".
// ReadVAt reads chunks that lie back to back in the file with one preadv (StorageService coalesces them).
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/status.h"

namespace zipmoe::storage {

class ChunkFile {
 public:
  // Opens `path` with O_DIRECT unless page_cache (then buffered). Errors: kNotFound (no such file),
  // kIoError (open failed for another reason), each naming the path.
  static Result<ChunkFile> Open(const std::string& path, bool page_cache);

  ChunkFile(ChunkFile&& other) noexcept;
  ChunkFile& operator=(ChunkFile&&) = delete;
  ChunkFile(const ChunkFile&) = delete;
  ChunkFile& operator=(const ChunkFile&) = delete;
  ~ChunkFile() = default;

  // Reads the chunk at [file_offset, file_offset + stored_bytes) into dst.
  //   file_offset: multiple of 4096 when direct_io(); dst: [dst_capacity_bytes], 4 KiB-aligned and
  //   dst_capacity_bytes >= RoundUpBytes(stored_bytes) when direct_io() (the caller validates).
  // Returns the bytes transferred: >= stored_bytes normally (the 4 KiB padding is read too under
  // O_DIRECT), fewer only when EOF came first (the caller reports the truncation).
  // Errors: kIoError naming path, offset and errno text.
  Result<uint64_t> ReadAt(uint64_t file_offset, uint64_t stored_bytes, uint8_t* dst, uint64_t dst_capacity_bytes);

  // One vectored read (preadv) of the file range that starts at file_offset into `parts` in order:
  // parts[i] gets the next parts[i].iov_len bytes. Used for chunks that lie back to back in the file.
  //   file_offset, every iov_base and every iov_len: multiples of 4096 when direct_io().
  // Returns the bytes transferred: the sum of the lengths normally, fewer only when EOF came first.
  // Errors: kIoError naming path, offset and errno text.
  Result<uint64_t> ReadVAt(uint64_t file_offset, const std::vector<struct iovec>& parts);

  const std::string& path() const { return path_; }
  // True while reads go through O_DIRECT.
  bool direct_io() const { return direct_io_.load(std::memory_order_relaxed); }
  // True when O_DIRECT was asked for but refused by the filesystem (reads are buffered instead).
  bool fell_back() const { return fell_back_.load(std::memory_order_relaxed); }

 private:
  ChunkFile(std::string path, UniqueFd fd, bool direct_io, bool fell_back);
  // Reopens without O_DIRECT after the filesystem refused it; logs one "W:" line.
  Status FallBackToBuffered(const char* where);

  std::string path_;
  UniqueFd fd_;
  std::atomic<bool> direct_io_{false};
  std::atomic<bool> fell_back_{false};
};

}  // namespace zipmoe::storage
