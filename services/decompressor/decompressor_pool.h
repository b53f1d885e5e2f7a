// DecompressorPool: the L CPU worker threads of ZipMoE §3.3 (L = n_workers) that decode E-chunks
// (and, on the no-GPU path, recover BF16 tensors) while the I/O thread keeps reading.
//
// Flow for a scheduler:
//   1. Add(op, ready=false) registers a decode op when its E-chunk read is submitted; the op waits.
//   2. When the storage service reports that E-chunk read OK, MarkReady(op_id). (Ops whose inputs are
//      already in memory, e.g. cached E-chunks, are added with ready=true.)
//      When the read failed, Cancel(op_id, read_status): the op completes with that status and is
//      never decoded.
//   3. Work-conserving dispatch: an idle worker always takes the READY op with the lowest `priority`
//      value (ties: Add order); ops that are not READY are never taken.
//   4. `on_complete(DecompressCompletion)` reports each op exactly once: on the worker that ran it;
//      on the caller of Cancel(); or, for ops still pending at Stop(), on the caller of Stop() with
//      kUnavailable. Decode errors are kCorruption naming tensor and chunk.
//
// Thread-safety: every method may be called from any thread, including from `on_complete` (except
// Stop: it joins the workers). Lock order: stop_mu_ before mu_; mu_ is never held while an op runs
// or a callback is called. Op pointers must stay valid until the op completes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "services/decompressor/decompress_op.h"

namespace zipmoe::decompressor {

// max(1, CPUs this process may run on - 1) (its affinity mask, common/cpu_topology.h): one CPU is
// left to the I/O thread and the caller.
int DefaultWorkerCount();

struct DecompressCompletion {
  uint64_t op_id = 0;
  Status status;          // OK: the op's destination holds its output
  int worker_index = -1;  // the worker that ran it; -1 when it never ran (Cancel / Stop)
  uint64_t run_us = 0;    // time running the op (c in ZipMoE §3.3 for a decode)
};

struct DecompressorConfig {
  int n_workers = 0;  // L; 0 = DefaultWorkerCount()
  // Called once per op (see the flow above). Must not throw and must not call Stop(). May call Add,
  // MarkReady, Cancel. Empty = no callback.
  std::function<void(const DecompressCompletion&)> on_complete;
  bool retain_completions = false;  // keep completions until WaitFor(op_id) takes them
};

struct DecompressorStats {
  uint64_t ops_ok = 0;
  uint64_t ops_failed = 0;     // ran and failed (kCorruption, ...)
  uint64_t ops_cancelled = 0;  // Cancel()
  uint64_t ops_unavailable = 0;  // pending at Stop()
  uint64_t run_us = 0;         // total worker time spent running ops
};

class DecompressorPool {
 public:
  // Starts the workers. Errors: kInvalidArgument (n_workers < 0).
  static Result<std::unique_ptr<DecompressorPool>> Create(const DecompressorConfig& config);
  ~DecompressorPool();  // Stop()
  DecompressorPool(const DecompressorPool&) = delete;
  DecompressorPool& operator=(const DecompressorPool&) = delete;

  // Registers `op`, READY at once if `ready`. Errors: kInvalidArgument (ValidateOp, or op_id in use
  // by an op not yet completed or not yet waited for), kUnavailable (stopped).
  Status Add(DecompressOp op, bool ready = false);
  // Makes a waiting op READY (no-op if it already is). Errors: kNotFound (unknown, running or
  // completed), kUnavailable (stopped).
  Status MarkReady(uint64_t op_id);
  // Completes a pending (waiting or READY, not running) op with `reason` (must be non-OK) without
  // running it; the callback runs on this thread. Errors: kNotFound (unknown, running or completed),
  // kInvalidArgument (reason is OK).
  Status Cancel(uint64_t op_id, Status reason);

  // Blocks until op_id completes; returns and forgets its completion. Errors: kInvalidArgument
  // (retain_completions is off), kNotFound (never added, or already waited for).
  Result<DecompressCompletion> WaitFor(uint64_t op_id);

  // Begins stopping without waiting: Add/MarkReady fail from now on and idle workers take no more
  // ops; running ops finish. Callable from any thread, on_complete included.
  void RequestStop();
  // RequestStop(), lets running ops finish, joins the workers, then completes every op still pending
  // (READY ones by priority, then waiting ones in Add order) with kUnavailable on this thread.
  // Idempotent; not callable from a worker.
  void Stop();

  int n_workers() const { return static_cast<int>(workers_.size()); }
  DecompressorStats stats() const;

 private:
  struct Pending {
    DecompressOp op;
    uint64_t seq = 0;   // Add order, breaks priority ties
    bool ready = false;
  };
  using ReadyKey = std::tuple<int32_t, uint64_t, uint64_t>;  // (priority, seq, op_id)

  explicit DecompressorPool(DecompressorConfig config);
  void WorkerLoop(int worker_index);
  void Complete(const DecompressCompletion& completion);

  const DecompressorConfig config_;  // constant after construction

  Mutex stop_mu_;  // serialises Stop() calls
  bool joined_ ZM_GUARDED_BY(stop_mu_) = false;

  mutable Mutex mu_;  // guards every field below
  CondVar work_cv_;   // ready_ non-empty or stopping_
  CondVar done_cv_;   // a completion was published
  std::unordered_map<uint64_t, Pending> pending_ ZM_GUARDED_BY(mu_);  // added, not yet taken by a worker
  std::set<ReadyKey> ready_ ZM_GUARDED_BY(mu_);  // READY subset of pending_, most urgent first
  std::unordered_set<uint64_t> running_ ZM_GUARDED_BY(mu_);  // taken by a worker or being completed, not yet published
  std::unordered_map<uint64_t, DecompressCompletion> completions_ ZM_GUARDED_BY(mu_);  // when retain_completions
  uint64_t next_seq_ ZM_GUARDED_BY(mu_) = 0;
  bool stopping_ ZM_GUARDED_BY(mu_) = false;
  DecompressorStats stats_ ZM_GUARDED_BY(mu_);

  std::vector<std::thread> workers_;  // started in Create, joined in Stop; size constant after Create
};

}  // namespace zipmoe::decompressor
