// The decompressor service's body (`zipmoe service decompressor`): a DecompressorPool of L threads
// fed by a PullWorker (common/ipc/pull_worker.h) connected to the scheduler. DecodeRequests name arena
// offsets; they are resolved in this process's mapping of the cache manager's shared arena,
// bounds-checked (an op outside the arena completes with kInvalidArgument, nothing is touched) and
// run with DecompressorPool priorities. A request whose op_id is already running here (re-issued
// after a reconnect) is ignored: the running op's completion answers it.
//
// Completions go back per expert: while other ops of the same (layer, expert) are still queued or
// running here, a successful op's completion is held, and the expert's completions leave together,
// back to back, when its last op here ends (or at once with any failed one). The scheduler needs an
// expert's every op before it can hand the expert on, so this delays nothing it can use, and a burst
// costs each process on the path one wakeup instead of one per op (docs/benchmarks.md (h),
// "context switches"). Ops without an expert label (layer_id or expert_id < 0) complete alone.
// Thread-safety: Run() on one thread; RequestStop() from any thread (e.g. a signal watcher).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <zmq.hpp>

#include "common/mutex.h"
#include "common/ipc/pull_worker.h"
#include "common/ipc/shm_region.h"
#include "services/decompressor/completion_groups.h"
#include "services/decompressor/decompressor_pool.h"

namespace zipmoe::decompressor {

// The wire form of a decode op (the scheduler's dispatcher sends it, DecompressorWorker reads it):
// pointers into the shared arena travel as offsets from its base, which every process maps.
// DecodeRequestToWire: op.src/sm/dst must lie in the arena at `arena_base` (sm may be null: offset 0).
// DecodeRequestFromWire does not check the ranges (DecompressorWorker checks them against its mapping
// first); sm is null unless the op is a recovery.
messaging::DecodeRequest DecodeRequestToWire(const DecompressOp& op, const uint8_t* arena_base, uint32_t attempt);
DecompressOp DecodeRequestFromWire(const messaging::DecodeRequest& r, uint8_t* arena_base);
// The wire form of an op's completion; `attempt` is the DecodeRequest's, copied back.
messaging::DecodeCompletion DecodeCompletionToWire(const DecompressCompletion& c, uint32_t attempt);
DecompressCompletion DecodeCompletionFromWire(const messaging::DecodeCompletion& done);

struct DecompressorWorkerOptions {
  messaging::PullWorkerConfig pull;  // endpoint, identity, heartbeat; role/credits/threads/arena are set here
  int n_threads = 1;                 // L
  // Decode requests the replica holds at once (its pull credits; at least n_threads): those beyond
  // the running ones wait in the pool, most urgent first, so a thread that finishes starts the next
  // op without a round trip to the scheduler. On a 2-core VM a depth of 32 instead of 1 cut `zipmoe
  // up`'s 32-token request on mini at 50 % from 28 s to 16 s (each round trip costs process wakeups).
  int queue_depth = 32;
  // Called after each op ran (recover = BF16 recovery, else E-chunk decode), on a pool thread.
  std::function<void(bool recover, double seconds)> on_op;
};

class DecompressorWorker {
 public:
  // `arena`: the attached shared arena (kept mapped by the caller for the worker's life).
  static Result<std::unique_ptr<DecompressorWorker>> Create(zmq::context_t& context, const ShmRegion& arena,
                                                            DecompressorWorkerOptions options);
  Status Run();          // until RequestStop(); then stops the pool (pending ops are dropped: re-issued)
  void RequestStop();
  messaging::PullWorkerStats stats() const { return pull_->stats(); }

 private:
  DecompressorWorker() = default;
  void Handle(const messaging::Body& body);
  // Bounds-checks `request` (a refusal is answered at once) and records it as running here, counted
  // for its expert; false when refused or already running (a re-issue).
  bool Accept(const messaging::DecodeRequest& request);

  const ShmRegion* arena_ = nullptr;
  DecompressorWorkerOptions options_;
  std::unique_ptr<messaging::PullWorker> pull_;
  std::unique_ptr<DecompressorPool> pool_;
  Mutex mu_;
  using ExpertKey = CompletionGroups<messaging::DecodeCompletion>::ExpertKey;  // (layer, expert); -1 = none
  struct Running {
    uint32_t attempt = 0;  // copied into the completion
    bool recover = false;  // BF16 recovery (else E-chunk decode), for metrics
    ExpertKey expert{-1, -1};
  };
  // Called by the pool for every op; posts the completion now or holds it for its expert's burst.
  void OnComplete(const DecompressCompletion& c);
  std::unordered_map<uint64_t, Running> running_ ZM_GUARDED_BY(mu_);  // by op_id
  CompletionGroups<messaging::DecodeCompletion> groups_ ZM_GUARDED_BY(mu_);  // what to hold, what to send
};

}  // namespace zipmoe::decompressor
