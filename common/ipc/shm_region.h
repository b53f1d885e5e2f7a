// ShmRegion: a move-only owner of one POSIX shared-memory mapping (shm_open + mmap MAP_SHARED), the
// arena every zipmoe service maps so expert bytes never travel over ZeroMQ (design.md §2).
//
// Ownership. Create() makes a new object under `name` (O_CREAT|O_EXCL, mode 0600), sizes it and
// maps it; that object *owns the name*: its destructor unmaps and shm_unlink()s. Attach() maps an
// existing object and never unlinks. A moved-from ShmRegion is empty (data() == nullptr) and its
// destructor does nothing.
//
// Liveness and stale names. The creator keeps the shm descriptor open with an exclusive flock()
// for its whole life. The kernel drops that lock when the creator exits, however it exits (crash,
// SIGKILL), so the lock tells a live owner from a dead one:
//   - Create() finding `name` already present tries flock(LOCK_EX|LOCK_NB) on it. If the lock is
//     granted nobody owns the object: it is the leftover of a crashed run, so Create() unlinks it
//     and creates a fresh one (its old bytes are never reused). If the lock is refused a live
//     ShmRegion owns the name and Create() fails with kUnavailable.
//   - Only the creating process unlinks: a copy inherited through fork() (same object, different
//     pid) unmaps but neither unlinks nor closes the lock early for the parent.
// Two processes reclaiming the same stale name at the same instant are not supported (the arena has
// exactly one owner, the cache manager); each Create() of a *live* name fails cleanly.
// Names that are never created again (per-process names such as "/zipmoe-arena-<pid>-<n>") are
// swept by ReclaimStale(prefix), which a process calls before creating its own.
//
// Memory. Create() reserves the pages with posix_fallocate(), so a /dev/shm that is too small
// (docker's default 64 MiB) fails here with kIoError instead of SIGBUS on first touch.
//
// Thread-safety: a ShmRegion is thread-compatible (do not move/destroy it while others use it);
// the mapped bytes may be read and written from any thread or process, synchronised by the caller.
#pragma once

#include <cstdint>
#include <string>

#include "common/file_util.h"
#include "common/status.h"

namespace zipmoe {

class ShmRegion {
 public:
  // name: POSIX shm name, "/" followed by 1..250 characters without another "/" (it appears as
  // /dev/shm/<name without the slash> on Linux). size_bytes > 0.
  // Errors: kInvalidArgument (bad name, size 0), kUnavailable (a live owner holds `name`),
  // kIoError (shm_open/ftruncate/fallocate/mmap failed; the message names the region and errno).
  static Result<ShmRegion> Create(const std::string& name, uint64_t size_bytes);  // owns the name
  // Maps an existing region read-write, size taken from the object. Errors: kInvalidArgument (bad
  // name), kNotFound (no such region), kUnavailable (size 0: its creator has not sized it yet),
  // kIoError (open/fstat/mmap failed).
  static Result<ShmRegion> Attach(const std::string& name);  // never unlinks
  // Both map every page of the region at once (MADV_POPULATE_WRITE where the kernel has it), so
  // filling a multi-GiB arena later takes no page fault per 4 KiB page.

  ShmRegion(ShmRegion&& other) noexcept;
  ShmRegion& operator=(ShmRegion&& other) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;
  ~ShmRegion();  // munmap; shm_unlink only if this object created it (and in the creating process)

  uint8_t* data() const { return data_; }            // page-aligned; nullptr when empty/moved-from
  uint64_t size_bytes() const { return size_bytes_; }
  const std::string& name() const { return name_; }
  bool owns_name() const { return owner_pid_ != 0; }  // true for Create(), false for Attach()

  // Whether `name` is a valid POSIX shm name for this class (see Create).
  static bool IsValidName(const std::string& name);

  // What ReclaimStale removed.
  struct Reclaimed {
    int regions = 0;      // names unlinked
    uint64_t bytes = 0;   // their sizes, summed (the tmpfs memory given back once unmapped)
  };
  // Unlinks every region in /dev/shm whose name starts with `prefix` and whose creator is gone: it is
  // sized (> 0 bytes; Create takes the owner lock before sizing, so an unsized object may be a
  // Create in progress and is kept) and nobody holds its owner lock (see "Liveness" above). Regions
  // of live owners are kept, and so are other users' regions (not ours to open). A system without
  // /dev/shm has nothing to sweep (returns zero).
  // prefix: "/" followed by at least one character without another "/", e.g. "/zipmoe-arena-".
  // Errors: kInvalidArgument (bad prefix), kIoError (/dev/shm cannot be listed, or a stale region
  // cannot be unlinked; the message names it).
  static Result<Reclaimed> ReclaimStale(const std::string& prefix);
  // ReclaimStale as a best-effort start-up step: one stderr line, prefixed "<who>: ", when it
  // removed something ("I: ...") or failed ("W: ..."); never fails the caller.
  static void ReclaimStaleAndLog(const std::string& prefix, const std::string& who);

 private:
  ShmRegion() = default;
  void Reset();

  uint8_t* data_ = nullptr;
  uint64_t size_bytes_ = 0;
  std::string name_;
  int owner_pid_ = 0;  // pid of the creating process; 0 for attached or empty regions
  UniqueFd lock_fd_;   // creator only: holds flock(LOCK_EX) for the region's life
};

}  // namespace zipmoe
