#include "common/ipc/shm_region.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace zipmoe {
namespace {

constexpr size_t kMaxShmNameChars = 251;  // "/" + 250; NAME_MAX is 255 on Linux
constexpr int kCreateAttempts = 3;        // reclaim a stale name, then give up

std::string ErrnoText(int err) { return std::strerror(err); }

// The object behind an shm descriptor (device, inode): identifies it across names and opens.
bool SameObject(int fd_a, int fd_b) {
  struct stat a {}, b {};
  if (::fstat(fd_a, &a) != 0 || ::fstat(fd_b, &b) != 0) return false;
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Outcome of looking at an existing object of the same name.
enum class Existing { kGone, kStaleRemoved, kLive };

// `name` exists: removes it if no live owner holds its lock (see the header); with `require_sized`
// only if it is also sized (its creator got past flock). Errors: kIoError.
Result<Existing> ReclaimIfStale(const std::string& name, bool require_sized = false, uint64_t* size_out = nullptr) {
  UniqueFd old(::shm_open(name.c_str(), O_RDWR, 0));
  if (!old.valid()) {
    if (errno == ENOENT) return Existing::kGone;  // vanished meanwhile: try creating again
    return Status::IoError(fmt::format("shm region '{}': exists and cannot be opened to check its owner: {}",
                                       name, ErrnoText(errno)));
  }
  if (::flock(old.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Existing::kLive;
    return Status::IoError(fmt::format("shm region '{}': flock: {}", name, ErrnoText(errno)));
  }
  struct stat st {};
  if (::fstat(old.get(), &st) != 0) {
    return Status::IoError(fmt::format("shm region '{}': fstat: {}", name, ErrnoText(errno)));
  }
  if (require_sized && st.st_size <= 0) return Existing::kLive;  // maybe a Create between shm_open and flock
  if (size_out != nullptr) *size_out = static_cast<uint64_t>(st.st_size);
  // Nobody holds the owner lock: the creator is gone. Unlink only if the name still names the
  // object we locked (and not a fresh region another Create made meanwhile).
  UniqueFd again(::shm_open(name.c_str(), O_RDWR, 0));
  if (!again.valid()) return Existing::kGone;
  if (!SameObject(old.get(), again.get())) return Existing::kGone;
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return Status::IoError(fmt::format("shm region '{}': unlink stale region: {}", name, ErrnoText(errno)));
  }
  return Existing::kStaleRemoved;
}

}  // namespace

Result<ShmRegion::Reclaimed> ShmRegion::ReclaimStale(const std::string& prefix) {
  if (!IsValidName(prefix)) {
    return Status::InvalidArgument(fmt::format(
        "shm sweep: invalid prefix '{}' (want '/' followed by 1..250 characters without '/')", prefix));
  }
  Reclaimed out;
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir("/dev/shm"), &::closedir);
  if (dir == nullptr) {
    if (errno == ENOENT) return out;
    return Status::IoError(fmt::format("shm sweep: list /dev/shm: {}", ErrnoText(errno)));
  }
  const std::string stem = prefix.substr(1);
  std::vector<std::string> names;
  const uid_t me = ::geteuid();
  while (const dirent* e = ::readdir(dir.get())) {
    const std::string entry = e->d_name;
    if (entry.compare(0, stem.size(), stem) != 0) continue;
    struct stat st {};
    // Another user's regions are theirs to sweep (we could not open them: mode 0600).
    if (::fstatat(::dirfd(dir.get()), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_uid != me) continue;
    if (!S_ISREG(st.st_mode)) continue;
    names.push_back("/" + entry);
  }
  for (const std::string& name : names) {
    uint64_t size = 0;
    ZM_ASSIGN_OR_RETURN(Existing existing, ReclaimIfStale(name, /*require_sized=*/true, &size));
    if (existing != Existing::kStaleRemoved) continue;
    ++out.regions;
    out.bytes += size;
  }
  return out;
}

void ShmRegion::ReclaimStaleAndLog(const std::string& prefix, const std::string& who) {
  Result<Reclaimed> swept = ReclaimStale(prefix);
  if (!swept.ok()) {
    std::fprintf(stderr, "W: %s: could not sweep stale arenas: %s\n", who.c_str(), swept.status().ToString().c_str());
  } else if (swept->regions > 0) {
    std::fprintf(stderr, "I: %s: removed %d stale arena(s) of dead processes from /dev/shm (%.1f MiB)\n", who.c_str(),
                 swept->regions, static_cast<double>(swept->bytes) / (1 << 20));
  }
}

bool ShmRegion::IsValidName(const std::string& name) {
  if (name.size() < 2 || name.size() > kMaxShmNameChars || name[0] != '/') return false;
  if (name.find('/', 1) != std::string::npos) return false;
  return name != "/." && name != "/..";
}

namespace {

// Maps every page of a fresh mapping now (MADV_POPULATE_WRITE, Linux >= 5.14): the expert pools
// are filled page by page during decoding, and a minor fault per 4 KiB page of a multi-GiB arena
// costs seconds of kernel time inside the first requests. Best effort: an older kernel, or a
// failure, leaves the mapping to fault lazily as before.
void PopulatePageTables(void* data, uint64_t size_bytes) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14 uapi; glibc 2.36 headers may lack it
#endif
  (void)::madvise(data, size_bytes, MADV_POPULATE_WRITE);
}

}  // namespace

Result<ShmRegion> ShmRegion::Create(const std::string& name, uint64_t size_bytes) {
  if (!IsValidName(name)) {
    return Status::InvalidArgument(fmt::format(
        "shm region '{}': invalid name (want '/' followed by 1..250 characters without '/')", name));
  }
  if (size_bytes == 0) return Status::InvalidArgument(fmt::format("shm region '{}': size 0", name));

  UniqueFd fd;
  for (int attempt = 0; attempt < kCreateAttempts && !fd.valid(); ++attempt) {
    fd = UniqueFd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600));
    if (fd.valid()) break;
    if (errno != EEXIST) {
      return Status::IoError(fmt::format("shm region '{}': shm_open: {}", name, ErrnoText(errno)));
    }
    ZM_ASSIGN_OR_RETURN(Existing existing, ReclaimIfStale(name));
    if (existing == Existing::kLive) {
      return Status::Unavailable(fmt::format("shm region '{}': already owned by a live process", name));
    }
  }
  if (!fd.valid()) {
    return Status::Unavailable(fmt::format("shm region '{}': name kept reappearing while reclaiming it", name));
  }

  // From here on the name is ours: any failure unlinks it again.
  auto fail = [&name](const std::string& what, int err) {
    ::shm_unlink(name.c_str());
    return Status::IoError(fmt::format("shm region '{}': {}: {}", name, what, ErrnoText(err)));
  };
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return fail("flock", errno);
  if (::fchmod(fd.get(), 0600) != 0) return fail("fchmod 0600", errno);  // independent of umask
  if (::ftruncate(fd.get(), static_cast<off_t>(size_bytes)) != 0) return fail("ftruncate", errno);
  int err = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(size_bytes));
  if (err == ENOSPC) {
    return fail(fmt::format("reserve {} bytes (is /dev/shm large enough? docker: --shm-size)", size_bytes), err);
  }
  if (err != 0 && err != EOPNOTSUPP && err != EINVAL) return fail("posix_fallocate", err);
  void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return fail(fmt::format("mmap {} bytes", size_bytes), errno);
  PopulatePageTables(p, size_bytes);

  ShmRegion region;
  region.data_ = static_cast<uint8_t*>(p);
  region.size_bytes_ = size_bytes;
  region.name_ = name;
  region.owner_pid_ = static_cast<int>(::getpid());
  region.lock_fd_ = std::move(fd);
  return region;
}

Result<ShmRegion> ShmRegion::Attach(const std::string& name) {
  if (!IsValidName(name)) {
    return Status::InvalidArgument(fmt::format(
        "shm region '{}': invalid name (want '/' followed by 1..250 characters without '/')", name));
  }
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR, 0));
  if (!fd.valid()) {
    if (errno == ENOENT) return Status::NotFound(fmt::format("shm region '{}': no such region", name));
    return Status::IoError(fmt::format("shm region '{}': shm_open: {}", name, ErrnoText(errno)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return Status::IoError(fmt::format("shm region '{}': fstat: {}", name, ErrnoText(errno)));
  }
  if (st.st_size <= 0) return Status::Unavailable(fmt::format("shm region '{}': not sized yet", name));
  const auto size_bytes = static_cast<uint64_t>(st.st_size);
  void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    return Status::IoError(fmt::format("shm region '{}': mmap {} bytes: {}", name, size_bytes, ErrnoText(errno)));
  }
  PopulatePageTables(p, size_bytes);
  ShmRegion region;
  region.data_ = static_cast<uint8_t*>(p);
  region.size_bytes_ = size_bytes;
  region.name_ = name;
  return region;  // the mapping outlives the descriptor
}

ShmRegion::ShmRegion(ShmRegion&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      name_(std::move(other.name_)),
      owner_pid_(std::exchange(other.owner_pid_, 0)),
      lock_fd_(std::move(other.lock_fd_)) {}

ShmRegion& ShmRegion::operator=(ShmRegion&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    name_ = std::move(other.name_);
    owner_pid_ = std::exchange(other.owner_pid_, 0);
    lock_fd_ = std::move(other.lock_fd_);
  }
  return *this;
}

ShmRegion::~ShmRegion() { Reset(); }

void ShmRegion::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_bytes_);
  // Unlink before releasing the lock (closing lock_fd_), so no reclaimer sees an unlocked live name.
  if (owner_pid_ != 0 && owner_pid_ == static_cast<int>(::getpid())) ::shm_unlink(name_.c_str());
  lock_fd_ = UniqueFd();
  data_ = nullptr;
  size_bytes_ = 0;
  owner_pid_ = 0;
}

}  // namespace zipmoe
