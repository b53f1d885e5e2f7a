// The storage service's body (`zipmoe service storage`): a StorageService (O_DIRECT reads, xxh64 per
// chunk) without an I/O thread of its own, fed by a PullWorker (common/ipc/pull_worker.h) connected to the
// scheduler: the PullWorker's thread reads each request's chunks itself (StorageService::RunQueued),
// so a request starts its read without waking a second thread.
// ReadRequests name arena offsets in the cache manager's shared arena; each is bounds- and
// alignment-checked (a bad op completes with kInvalidArgument and nothing is read). Ops whose op_id
// is already being read here (re-issued after a reconnect) are skipped. The completions of one read
// (a coalesced read's chunks) go back together, in one ReadCompletions frame.
// Thread-safety: Run() on one thread; RequestStop() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>

#include "common/mutex.h"
#include "common/ipc/pull_worker.h"
#include "common/ipc/shm_region.h"
#include "services/storage/storage_service.h"

namespace zipmoe::storage {

// The wire form of a chunk read (the scheduler's dispatcher sends it, StorageWorker reads it):
// pointers into the shared arena travel as offsets from its base, which every process maps.
// ChunkReadToWire: op.dst must lie in the arena at `arena_base`. ChunkReadFromWire does not check
// the destination's range (StorageWorker checks it against its mapping first).
messaging::ChunkRead ChunkReadToWire(const ReadOp& op, const uint8_t* arena_base, uint32_t attempt);
ReadOp ChunkReadFromWire(const messaging::ChunkRead& r, uint8_t* arena_base);
// The wire form of a read's completion (StorageWorker sends it, the dispatcher reads it); `attempt`
// is the ChunkRead's, copied back so the dispatcher can drop a stale completion.
messaging::ReadCompletion ReadCompletionToWire(const ReadCompletion& c, uint32_t attempt);
ReadCompletion ReadCompletionFromWire(const messaging::ReadCompletion& done);

struct StorageWorkerOptions {
  messaging::PullWorkerConfig pull;  // endpoint, identity, heartbeat; role/credits/arena are set here
  std::string experts_path;          // the compressed directory's experts.bin
  bool page_cache = false;
  int32_t queue_depth = 64;          // chunk reads accepted at once (credits)
  // Called after each read, on the reading thread: kind, stored bytes, seconds in pread, ok.
  std::function<void(ChunkKind kind, uint64_t stored_bytes, double seconds, bool ok)> on_read;
};

class StorageWorker {
 public:
  static Result<std::unique_ptr<StorageWorker>> Create(zmq::context_t& context, const ShmRegion& arena,
                                                       StorageWorkerOptions options);
  Status Run();  // until RequestStop()
  void RequestStop();
  messaging::PullWorkerStats stats() const { return pull_->stats(); }
  bool direct_io() const { return service_->direct_io(); }
  uint64_t queued() const;  // reads accepted and not completed
  StorageStats storage_stats() const { return service_->stats(); }  // the reads' counters

 private:
  StorageWorker() = default;
  void Handle(const messaging::Body& body);

  const ShmRegion* arena_ = nullptr;
  StorageWorkerOptions options_;
  std::unique_ptr<messaging::PullWorker> pull_;
  std::unique_ptr<StorageService> service_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, uint32_t> in_flight_ ZM_GUARDED_BY(mu_);  // op_id -> attempt
  std::vector<messaging::Body> read_done_;  // the current read's completions; the reading thread's only
};

}  // namespace zipmoe::storage
