// WorkerDispatcher: the scheduler's side of the pull protocol (docs/messaging.md "Pull workers"):
// a ReadEngine and a DecodeEngine (engines.h) whose ops run in storage and decompressor *processes*
// that connect to one ROUTER socket and pull work (common/ipc/pull_worker.h).
//
// - A worker announces itself with WorkerReady{role, credits, arena}; a worker whose arena name or
//   size differs from the scheduler's is refused (Disconnect, logged).
// - Reads go to storage workers in submission order (the Alg. 1 I/O order), at most `credits`
//   chunk reads outstanding per worker. Decodes go to decompressor workers, READY op with the
//   smallest priority first (the DecompressorPool rule), one per credit.
// - Liveness: any message from a worker renews it; a worker silent for `liveness` heartbeat
//   intervals, or one that sends Disconnect, is dead: every op it held is re-issued to the others
//   with attempt + 1 (same op_id, same arena destination, so a duplicate writes identical bytes).
//   The first completion of an op is delivered; later ones are counted as duplicates and dropped.
// - The dispatcher heart-beats each worker after a silent interval.
// - Malformed frames are logged, counted (stats().bad_messages) and dropped.
// - Shared-memory pipes (issue 20): a worker that names a pipe in WorkerReady (PullWorker's `pipe`)
//   is attached and answered with an OK Ack over ZeroMQ; from then on its requests, heartbeats and
//   Disconnect go into the pipe, and a reader thread per pipe handles what the worker sends. That
//   thread also hands out at once the work its completions made ready (to pipe workers), as do
//   SubmitReads / AddDecode / MarkReady: no hop through the dispatcher thread, which keeps
//   liveness, heartbeats and the ZeroMQ workers. A pipe that cannot be attached is refused with an
//   error Ack and the worker stays on ZeroMQ.
// Completions go to EngineSetup::on_read / on_decode on the dispatcher thread or a pipe's reader
// thread, with no lock held.
//
// Open point (documented in docs/messaging.md): a worker that is stalled, not dead, may still write
// an op's destination after the op was re-issued and completed elsewhere.
//
// Thread-safety: every public method from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "common/ipc/link_security.h"
#include "common/ipc/messaging.h"
#include "common/status.h"
#include "services/pipeline/engines.h"

namespace zipmoe::runtime {

struct DispatcherConfig {
  std::string endpoint;  // ROUTER bind URL (inproc/ipc/tcp)
  std::chrono::milliseconds heartbeat_interval = messaging::kDefaultHeartbeatInterval;
  int liveness = messaging::kDefaultLiveness;
  bool direct_io = true;  // what ReadEngine::direct_io() reports (the storage worker's mode)
  std::function<void(const std::string&)> log;  // may be empty
  messaging::LinkSecurity security;  // CURVE on the endpoint when it needs it (common/ipc/link_security.h)
};

struct DispatcherStats {
  int32_t decompressors = 0;       // live decompressor workers
  int32_t decompressor_threads = 0;
  int32_t storage_workers = 0;     // live storage workers
  uint64_t reissued = 0;           // ops re-issued after their worker died
  uint64_t duplicates = 0;         // completions dropped (op already completed or unknown)
  uint64_t bad_messages = 0;       // frames dropped on receipt
  uint64_t refused_workers = 0;    // WorkerReady with another arena or role
  uint64_t reads_waiting = 0;      // reads not yet sent to a worker
  uint64_t reads_in_flight = 0;
  uint64_t decodes_waiting = 0;    // READY or not, not yet sent
  uint64_t decodes_in_flight = 0;
  int32_t pipe_workers = 0;        // live workers served through a shared-memory pipe
};

class WorkerDispatcher;

// An EngineFactory (engines.h) whose engines are one WorkerDispatcher bound at config.endpoint.
// `out` (optional) receives the dispatcher, for stats and tests.
EngineFactory RemoteEngineFactory(zmq::context_t& context, DispatcherConfig config,
                                  std::shared_ptr<WorkerDispatcher>* out = nullptr);

class WorkerDispatcher {
 public:
  // Binds the ROUTER and starts the dispatcher thread. Errors: Channel::Open's (address in use...),
  // kInvalidArgument when setup has no shared arena (arena_name empty).
  static Result<std::shared_ptr<WorkerDispatcher>> Start(zmq::context_t& context, DispatcherConfig config,
                                                         const EngineSetup& setup);
  ~WorkerDispatcher();  // Stop()

  Status SubmitReads(std::vector<storage::ReadOp> ops);
  Status AddDecode(decompressor::DecompressOp op, bool ready);
  Status MarkReady(uint64_t op_id);
  Status Cancel(uint64_t op_id, Status reason);
  // Sends Disconnect to every worker, completes every op not completed with kUnavailable, joins.
  void Stop();

  DispatcherStats stats() const;
  const std::string& endpoint() const;  // the bound URL (resolved port for tcp://...:*)
  const DispatcherConfig& config() const;

 private:
  struct State;
  explicit WorkerDispatcher(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace zipmoe::runtime
