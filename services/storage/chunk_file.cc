#include "services/storage/chunk_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/checkpoint/manifest.h"
#include "services/storage/aligned_buffer.h"

namespace zipmoe::storage {
namespace {

Result<UniqueFd> OpenFd(const std::string& path, bool direct, int* open_errno) {
  // O_NONBLOCK: a FIFO in the file's place fails the regular-file check instead of blocking open().
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (direct ? O_DIRECT : 0);
  UniqueFd fd(::open(path.c_str(), flags));
  *open_errno = fd.valid() ? 0 : errno;
  if (fd.valid()) {
    ZM_RETURN_IF_ERROR(RegularFileSize(fd.get(), path).status());
    return fd;
  }
  if (*open_errno == ENOENT) return Status::NotFound(path + ": no such file");
  return Status::IoError(fmt::format("{}: open{}: {}", path, direct ? " (O_DIRECT)" : "", std::strerror(*open_errno)));
}

void LogFallBack(const std::string& path, const char* where) {
  std::fprintf(stderr, "W: storage: %s: O_DIRECT refused by the filesystem (EINVAL at %s); using buffered reads "
               "(page cache)\n", path.c_str(), where);
}

}  // namespace

ChunkFile::ChunkFile(std::string path, UniqueFd fd, bool direct_io, bool fell_back)
    : path_(std::move(path)), fd_(std::move(fd)), direct_io_(direct_io), fell_back_(fell_back) {}

ChunkFile::ChunkFile(ChunkFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::move(other.fd_)),
      direct_io_(other.direct_io_.load()),
      fell_back_(other.fell_back_.load()) {}

Result<ChunkFile> ChunkFile::Open(const std::string& path, bool page_cache) {
  int err = 0;
  if (!page_cache) {
    Result<UniqueFd> direct = OpenFd(path, /*direct=*/true, &err);
    if (direct.ok()) return ChunkFile(path, std::move(direct).value(), /*direct_io=*/true, /*fell_back=*/false);
    if (err != EINVAL) return direct.status();
    LogFallBack(path, "open");
  }
  ZM_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(path, /*direct=*/false, &err));
  return ChunkFile(path, std::move(fd), /*direct_io=*/false, /*fell_back=*/!page_cache);
}

Status ChunkFile::FallBackToBuffered(const char* where) {
  int err = 0;
  ZM_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(path_, /*direct=*/false, &err));
  fd_ = std::move(fd);
  direct_io_.store(false, std::memory_order_relaxed);
  fell_back_.store(true, std::memory_order_relaxed);
  LogFallBack(path_, where);
  return Status::Ok();
}

Result<uint64_t> ChunkFile::ReadAt(uint64_t file_offset, uint64_t stored_bytes, uint8_t* dst,
                                   uint64_t dst_capacity_bytes) {
  uint64_t done = 0;
  for (;;) {
    const bool direct = direct_io();
    // Under O_DIRECT the length must be a multiple of 4 KiB: read the padding too.
    const uint64_t want = direct ? RoundUpBytes(stored_bytes) : stored_bytes;
    if (done >= want) break;
    ZM_CHECK(want <= dst_capacity_bytes) << path_ << "@" << file_offset << ": " << want << " > " << dst_capacity_bytes;
    const ssize_t n = ::pread(fd_.get(), dst + done, want - done, static_cast<off_t>(file_offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      // Some filesystems accept O_DIRECT at open and refuse it at the first read.
      if (errno == EINVAL && direct && done == 0 && !fell_back()) {
        ZM_RETURN_IF_ERROR(FallBackToBuffered("read"));
        continue;
      }
      return Status::IoError(fmt::format("{}@{}: pread of {} bytes{}: {}", path_, file_offset + done, want - done,
                                         direct ? " (O_DIRECT)" : "", std::strerror(errno)));
    }
    if (n == 0) break;  // EOF
    done += static_cast<uint64_t>(n);
    // A short O_DIRECT read that leaves the position unaligned only happens at EOF of a file that is
    // not padded to 4 KiB; another pread from an unaligned offset would fail with EINVAL.
    if (direct && done % kChunkAlignmentBytes != 0) break;
  }
  return done;
}

Result<uint64_t> ChunkFile::ReadVAt(uint64_t file_offset, const std::vector<struct iovec>& parts) {
  uint64_t want = 0;
  for (const struct iovec& p : parts) want += p.iov_len;
  std::vector<struct iovec> rest = parts;  // what is still to read, advanced after a short read
  size_t first = 0;
  uint64_t done = 0;
  while (done < want) {
    const bool direct = direct_io();
    const int n_parts = static_cast<int>(std::min<size_t>(rest.size() - first, IOV_MAX));
    const ssize_t n = ::preadv(fd_.get(), rest.data() + first, n_parts, static_cast<off_t>(file_offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && direct && done == 0 && !fell_back()) {
        ZM_RETURN_IF_ERROR(FallBackToBuffered("read"));
        continue;
      }
      return Status::IoError(fmt::format("{}@{}: preadv of {} bytes in {} parts{}: {}", path_, file_offset + done,
                                         want - done, rest.size() - first, direct ? " (O_DIRECT)" : "",
                                         std::strerror(errno)));
    }
    if (n == 0) break;  // EOF
    done += static_cast<uint64_t>(n);
    // Skip the parts filled completely; shorten the one filled in part.
    uint64_t left = static_cast<uint64_t>(n);
    while (first < rest.size() && left >= rest[first].iov_len) left -= rest[first++].iov_len;
    if (left > 0) {
      rest[first].iov_base = static_cast<uint8_t*>(rest[first].iov_base) + left;
      rest[first].iov_len -= left;
    }
    if (direct && done % kChunkAlignmentBytes != 0) break;  // EOF of a file not padded to 4 KiB (see ReadAt)
  }
  return done;
}

}  // namespace zipmoe::storage
