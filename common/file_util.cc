#include "common/file_util.h"

#include <fcntl.h>
#include <ftw.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

namespace zipmoe {
namespace {
std::string ErrnoText() { return std::strerror(errno); }

constexpr uint64_t kHugePageBytes = uint64_t{1} << 21;

// mmap of `size` bytes at an address that is a multiple of 2 MiB when size >= 2 MiB (a reservation
// of size + 2 MiB, the mapping placed inside it, the rest given back), so that transparent huge
// pages can map it with 2 MiB entries and an anonymous copy can be moved onto it (mremap) without
// splitting them. MAP_FAILED with errno on failure.
void* MapAligned(uint64_t size, int prot, int flags, int fd) {
  if (size < kHugePageBytes) return ::mmap(nullptr, size, prot, flags, fd, 0);
  const uint64_t span = size + kHugePageBytes;
  void* reserved = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) return MAP_FAILED;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t aligned = (begin + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
  void* p = ::mmap(reinterpret_cast<void*>(aligned), size, prot, flags | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int saved = errno;
    ::munmap(reserved, span);
    errno = saved;
    return MAP_FAILED;
  }
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t end = aligned + (size + page - 1) / page * page;
  if (aligned > begin) ::munmap(reserved, aligned - begin);
  if (begin + span > end) ::munmap(reinterpret_cast<void*>(end), begin + span - end);
  return p;
}
}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) ::close(fd_);
}

Result<uint64_t> RegularFileSize(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::IoError(path + ": fstat: " + ErrnoText());
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  return static_cast<uint64_t>(st.st_size);
}

Result<UniqueFd> OpenRegularFile(const std::string& path, uint64_t* size) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::NotFound(path + ": no such file");
    return Status::IoError(path + ": open: " + ErrnoText());
  }
  ZM_ASSIGN_OR_RETURN(*size, RegularFileSize(fd.get(), path));
  return fd;
}

Result<MappedFile> MappedFile::Open(const std::string& path) {
  MappedFile m;
  ZM_ASSIGN_OR_RETURN(const UniqueFd fd, OpenRegularFile(path, &m.size_));
  m.path_ = path;
  if (m.size_ > 0) {
    void* p = MapAligned(m.size_, PROT_READ, MAP_PRIVATE, fd.get());
    if (p == MAP_FAILED) return Status::IoError(path + ": mmap: " + ErrnoText());
    m.data_ = static_cast<const uint8_t*>(p);
  }
  return m;
}

Status MappedFile::CopyToAnonymousMemory(const std::atomic<bool>* cancel) {
  if (data_ == nullptr || anonymous_) return Status::Ok();
  // Piece by piece, so that the process never holds more than one piece twice (its file pages and its
  // copy): each piece of anonymous memory is 2 MiB-aligned and asked for huge pages before the first
  // touch, filled, made read-only and moved over its range of the mapping (which starts on a 2 MiB
  // boundary, as MapAligned placed it, so the huge pages move as they are).
  constexpr uint64_t kPiece = uint64_t{32} << 20;  // a multiple of 2 MiB
  for (uint64_t off = 0; off < size_; off += kPiece) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed))
      return Status::Unavailable(path_ + ": copy into anonymous memory cancelled after " + std::to_string(off) +
                                 " of " + std::to_string(size_) + " bytes");
    const uint64_t n = std::min(kPiece, size_ - off);
    void* copy = MapAligned(n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    if (copy == MAP_FAILED)
      return Status::IoError(path_ + ": anonymous memory for a copy of its bytes " + std::to_string(off) + ".." +
                             std::to_string(off + n) + ": " + ErrnoText());
    (void)::madvise(copy, n, MADV_HUGEPAGE);
    std::memcpy(copy, data_ + off, n);
    void* dest = const_cast<uint8_t*>(data_ + off);
    if (::mprotect(copy, n, PROT_READ) != 0 ||
        ::mremap(copy, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, dest) == MAP_FAILED) {
      const std::string why = ErrnoText();
      ::munmap(copy, n);
      return Status::IoError(path_ + ": moving the anonymous copy of bytes " + std::to_string(off) + ".." +
                             std::to_string(off + n) + " over the file mapping: " + why);
    }
  }
  anonymous_ = true;
  return Status::Ok();
}

Status MappedFile::Populate() const {
  if (data_ == nullptr) return Status::Ok();
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14 uapi; glibc 2.36 headers may lack it
#endif
  void* addr = const_cast<uint8_t*>(data_);
  (void)::madvise(addr, size_, MADV_HUGEPAGE);  // a hint: EINVAL without THP support is fine
  if (::madvise(addr, size_, MADV_POPULATE_READ) == 0) return Status::Ok();
  if (errno != EINVAL) return Status::IoError(path_ + ": populating the memory map: " + ErrnoText());
  // Kernel without MADV_POPULATE_READ: touch one byte per page.
  const long page = ::sysconf(_SC_PAGESIZE);
  volatile uint8_t sink = 0;
  for (uint64_t off = 0; off < size_; off += static_cast<uint64_t>(page > 0 ? page : 4096)) sink ^= data_[off];
  (void)sink;
  return Status::Ok();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(other.data_), size_(other.size_), anonymous_(other.anonymous_), path_(std::move(other.path_)) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.anonymous_ = false;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = other.data_;
    size_ = other.size_;
    anonymous_ = other.anonymous_;
    path_ = std::move(other.path_);
    other.data_ = nullptr;
    other.size_ = 0;
    other.anonymous_ = false;
  }
  return *this;
}

MappedFile::~MappedFile() { Reset(); }

void MappedFile::Reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
  anonymous_ = false;
}

namespace {

// MemAvailable of a meminfo file, in bytes; 0 where it cannot be read.
int64_t MemAvailableIn(const std::string& meminfo) {
  std::ifstream in(meminfo);
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace

int64_t MemAvailableBytes() { return MemAvailableIn("/proc/meminfo"); }

namespace {

// The first line of `path` ("" when it cannot be read).
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The value of `key` in a "key value" file such as memory.stat; -1 when absent.
int64_t StatValue(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return -1;
}

// A limit file's value: -1 for none ("max", unreadable, or cgroup v1's "unlimited" near 2^63).
int64_t LimitValue(const std::string& path) {
  const std::string line = FirstLine(path);
  if (line.empty() || line == "max") return -1;
  char* end = nullptr;
  const long long v = std::strtoll(line.c_str(), &end, 10);
  if (end == line.c_str() || v < 0 || v >= (int64_t{1} << 62)) return -1;
  return static_cast<int64_t>(v);
}

}  // namespace

int64_t MemoryHeadroomBytes(const std::string& proc_root, const std::string& cgroup_root) {
  int64_t headroom = MemAvailableIn(proc_root + "/meminfo");
  if (headroom <= 0) return 0;
  // /proc/self/cgroup: "0::/path" (v2) or "N:controllers:/path" lines (v1; the one naming memory).
  std::ifstream groups(proc_root + "/self/cgroup");
  std::string line;
  while (std::getline(groups, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? std::string::npos : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    const bool v1 = !controllers.empty();  // v2's line has no controller list
    bool memory = !v1;
    for (size_t p = 0; v1 && p <= controllers.size();) {
      const size_t q = std::min(controllers.find(',', p), controllers.size());
      memory = memory || controllers.compare(p, q - p, "memory") == 0;
      p = q + 1;
    }
    if (!memory) continue;
    if (path.find("..") != std::string::npos) continue;
    const std::string base = v1 ? cgroup_root + "/memory" : cgroup_root;
    // This group and every one above it (a parent's limit binds its children too).
    for (;;) {
      const std::string dir = base + (path == "/" ? "" : path);
      const int64_t limit = LimitValue(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"));
      if (limit >= 0) {
        const int64_t used = LimitValue(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"));
        int64_t cache = StatValue(dir + "/memory.stat", v1 ? "total_cache" : "file");
        if (v1 && cache < 0) cache = StatValue(dir + "/memory.stat", "cache");
        if (used >= 0) headroom = std::min(headroom, std::max<int64_t>(0, limit - used + std::max<int64_t>(0, cache)));
      }
      if (path.empty() || path == "/") break;
      const size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  }
  return headroom;
}

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) return Status::IoError(tmp + ": create: " + ErrnoText());
  return AtomicFile(path, tmp, std::move(fd));
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_path_(std::move(other.tmp_path_)),
      fd_(std::move(other.fd_)),
      position_(other.position_),
      committed_(other.committed_) {
  other.committed_ = true;  // the moved-from object owns nothing to clean up
}

AtomicFile::~AtomicFile() {
  if (!committed_ && !tmp_path_.empty()) {
    fd_ = UniqueFd();
    ::unlink(tmp_path_.c_str());
  }
}

Status AtomicFile::WriteAt(uint64_t offset, const void* data, uint64_t size_bytes) {
  const char* p = static_cast<const char*>(data);
  while (size_bytes > 0) {
    ssize_t n = ::pwrite(fd_.get(), p, size_bytes, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(tmp_path_ + "@" + std::to_string(offset) + ": write: " + ErrnoText());
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    size_bytes -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status AtomicFile::Write(const void* data, uint64_t size_bytes) {
  ZM_RETURN_IF_ERROR(WriteAt(position_, data, size_bytes));
  position_ += size_bytes;
  return Status::Ok();
}

Status AtomicFile::PadTo(uint64_t alignment) {
  uint64_t rem = position_ % alignment;
  if (rem == 0) return Status::Ok();
  std::vector<char> zeros(alignment - rem, 0);
  return Write(zeros.data(), zeros.size());
}

Status AtomicFile::Commit() {
  if (committed_) return Status::Internal(path_ + ": committed twice");
  if (::fsync(fd_.get()) != 0) return Status::IoError(tmp_path_ + ": fsync: " + ErrnoText());
  int fd = fd_.release();
  if (::close(fd) != 0) return Status::IoError(tmp_path_ + ": close: " + ErrnoText());
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    return Status::IoError(tmp_path_ + " -> " + path_ + ": rename: " + ErrnoText());
  committed_ = true;
  return Status::Ok();
}

Result<std::string> ReadFileToString(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  return std::string(reinterpret_cast<const char*>(m.data()), m.size());
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  ZM_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  ZM_RETURN_IF_ERROR(f.Write(contents.data(), contents.size()));
  return f.Commit();
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

Status CreateDirectories(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) return Status::IoError(path + ": mkdir: " + ec.message());
  return Status::Ok();
}

namespace {
thread_local std::string g_remove_tree_error;  // nftw's callback takes no user pointer
int RemoveTreeEntry(const char* path, const struct stat*, int /*type*/, struct FTW*) {
  if (::remove(path) == 0 || errno == ENOENT) return 0;
  g_remove_tree_error = std::string(path) + ": remove: " + std::strerror(errno);
  return -1;
}
}  // namespace

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IoError(path + ": stat: " + std::strerror(errno));
  }
  g_remove_tree_error.clear();
  if (::nftw(path.c_str(), RemoveTreeEntry, 16, FTW_DEPTH | FTW_PHYS) != 0) {
    if (!g_remove_tree_error.empty()) return Status::IoError(g_remove_tree_error);
    return Status::IoError(path + ": walk: " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace zipmoe
