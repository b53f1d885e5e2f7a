// PullWorker: the worker side of the pull protocol between the scheduler and its storage /
// decompressor processes (docs/messaging.md "Pull workers"; Paranoid Pirate, ZeroMQ guide ch. 4).
//
// Run() connects a DEALER to the scheduler's ROUTER, announces itself with WorkerReady (role,
// threads, credits, arena), then loops: requests (ReadRequest / DecodeRequest / DecodeRequests) go to
// the handler on the loop thread; completions queued with Post() / PostAll() from any thread are sent,
// those queued together in one frame (BatchCompletions); a Heartbeat goes out
// after each silent interval; when the scheduler has been silent for `liveness` intervals the socket
// is closed and re-opened with exponential backoff (kReconnectBackoffMin .. Max) and WorkerReady is
// sent again. Completions of work that finished while disconnected are still sent (the scheduler
// drops duplicates). A malformed frame is logged, counted (stats().bad_messages) and dropped. On stop
// it sends Disconnect so the scheduler re-issues what it held at once.
//
// Shared-memory pipe (PullWorkerConfig::pipe, issue 20). Each connect creates a fresh pipe
// (common/ipc/shm_pipe.h, "/zipmoe-pipe-<pid>-<n>") and names it in WorkerReady. Once the scheduler
// answers with an OK Ack (over ZeroMQ), requests, heartbeats and Disconnect arrive through the pipe
// and the loop waits on it (the ZeroMQ socket is still drained after every wake-up and at least once
// per heartbeat interval), and Post() writes completions into the pipe from the posting thread: a
// completion costs one wake-up of the scheduler instead of this loop's, two ZeroMQ I/O threads' and
// the scheduler's. A refusing Ack, or none (an older scheduler), keeps ZeroMQ for everything.
//
// Thread-safety: Run() on one thread; Post(), RequestStop() and stats() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/ipc/event_fd.h"
#include "common/ipc/link_security.h"
#include "common/ipc/messaging.h"
#include "common/mutex.h"
#include "common/ipc/shm_pipe.h"
#include "common/status.h"

namespace zipmoe::messaging {

struct PullWorkerConfig {
  std::string endpoint;      // the scheduler's worker ROUTER (inproc/ipc/tcp URL)
  std::string identity;      // routing id, e.g. "decompressor-<host>-<pid>"; unique per replica
  std::string role;          // kRoleDecompressor / kRoleStorage
  int32_t n_threads = 1;     // L of the replica
  int32_t credits = 1;       // requests (decodes, or chunk reads for storage) it accepts at once
  std::string arena_name;    // shm arena it mapped (the scheduler refuses a different one)
  uint64_t arena_bytes = 0;
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;
  int liveness = kDefaultLiveness;
  std::function<void(const std::string&)> log;  // one line per event (connects, bad frames); may be empty
  bool pipe = false;         // offer a shared-memory pipe with each WorkerReady (above)
  LinkSecurity security;     // CURVE when the endpoint needs it (common/ipc/link_security.h); default plaintext
};

struct PullWorkerStats {
  uint64_t bad_messages = 0;  // frames dropped on receipt
  uint64_t connects = 0;      // WorkerReady sent (1 + reconnects)
  uint64_t requests = 0;      // ReadRequests and decodes (a DecodeRequests counts its items) handled
  uint64_t completions = 0;   // completions sent (a batch counts its items)
  uint64_t frames = 0;        // messages those completions were sent in
  uint64_t pipe_frames = 0;   // of those frames, the ones that went through the pipe
};

// Most completions one frame carries (a longer run of queued completions is split).
inline constexpr size_t kMaxCompletionsPerFrame = 256;

// The frames to send for `bodies`, in order: each run of consecutive ReadCompletions becomes one
// ReadCompletions, each run of DecodeCompletions one DecodeCompletions (up to
// kMaxCompletionsPerFrame items; a run of one stays as it is); anything else is sent alone.
std::vector<Body> BatchCompletions(std::deque<Body> bodies);

class PullWorker {
 public:
  // handler: called on the loop thread for every ReadRequest / DecodeRequest / DecodeRequests. It either queues
  // the work and returns, or does it right there (the storage worker reads a request's chunks: no second thread
  // to wake) and Post()s its completions as they come: over ZeroMQ those leave when the handler returns. Either
  // way it must not wait for anything but its own work (the scheduler's silence is counted from its return).
  // Other message types are handled here.
  using Handler = std::function<void(const Body& request)>;

  static Result<std::unique_ptr<PullWorker>> Create(zmq::context_t& context, PullWorkerConfig config);

  // Runs until RequestStop(). Errors: kInvalidArgument (bad endpoint/identity: never retried).
  Status Run(const Handler& handler);
  void Post(Body completion);  // any thread; written into the pipe at once when one is in use
  // Queues completions that are ready together (one wakeup of the loop; they share a frame).
  void PostAll(std::vector<Body> completions);  // any thread
  void RequestStop();          // any thread; Run() sends Disconnect and returns
  PullWorkerStats stats() const;

 private:
  PullWorker(zmq::context_t& context, PullWorkerConfig config, EventFd wake);
  void Log(const std::string& line) const;
  // Sends `completions` (batched: BatchCompletions) through `pipe`, or `channel` when it is null (the
  // loop thread's only), counting them.
  void SendCompletions(std::deque<Body> completions, ShmPipe* pipe, Channel* channel);

  zmq::context_t& context_;
  const PullWorkerConfig config_;
  EventFd wake_;
  std::atomic<bool> stop_{false};
  void SleepUnlessStopped(std::chrono::milliseconds d) const;  // returns early on RequestStop
  mutable Mutex mu_;
  std::deque<Body> outbox_ ZM_GUARDED_BY(mu_);
  std::shared_ptr<ShmPipe> pipe_ ZM_GUARDED_BY(mu_);  // the accepted pipe of this connection, if any
  std::chrono::steady_clock::time_point last_sent_ ZM_GUARDED_BY(mu_);  // any send, any thread
  PullWorkerStats stats_ ZM_GUARDED_BY(mu_);
};

}  // namespace zipmoe::messaging
