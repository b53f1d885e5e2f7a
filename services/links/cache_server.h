// CacheServer: the cache-manager process's side of the cache protocol (remote_cache_backend.h is the
// scheduler's side; schemas/messages.fbs "scheduler <-> cache-manager"; docs/messaging.md). It
// serves a LocalCacheBackend (the CacheManager and its arena, created by this process) on a ROUTER
// socket, one message at a time in arrival order, on one loop thread:
//
//   CacheHello        drops every lease and staging slot held by any client (a replaced or restarted
//                     scheduler), then grants all staging slots to the sender; replies with the
//                     arena, the plan and the slots (CacheHelloReply)
//   CacheLookup       LookupLayer; the leases are recorded for the sender (CacheLookupReply, with the
//                     sender's cumulative admission outcomes and its first failed admission since;
//                     with pool F on the executor's device, each expert's device slot and reservation).
//                     A device_epoch other than the last one seen empties F first (ClearDeviceF: the
//                     slots are a new executor's memory)
//   CacheAdmit        per item: admission (sources as arena offsets, each range checked against the
//                     arena and the expert's layout) then release of the lease, or release only; a
//                     lease that is not the sender's is ignored; CacheReply only when want_reply
//   CacheStatsRequest CacheStats (the CacheManager's counters)
//   Heartbeat         liveness only
//   Disconnect        reclaims the sender's leases and staging slots at once
//   PipeOpen          attaches the client's shared-memory pipe (common/ipc/shm_pipe.h) and answers with an
//                     Ack over ZeroMQ; a reader thread then handles what the client sends through it,
//                     as from that client, and replies to the client go into the pipe (issue 20)
// A client silent for `liveness` of its heartbeat intervals is dead: its leases and staging slots
// are reclaimed. A message from a client that has not said CacheHello gets an error reply.
// Malformed frames and unexpected tables are logged ("E: ... dropped a bad message"), counted
// (stats().bad_messages) and dropped.
//
// Thread-safety: every public method from any thread. The backend must outlive the server.
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
#include "services/pipeline/cache_backend.h"

namespace zipmoe::runtime {

struct CacheServerConfig {
  std::string endpoint;  // ROUTER bind URL (endpoints.cache_manager)
  // Poll timeout, and a client's heartbeat interval when its CacheHello gives none.
  std::chrono::milliseconds heartbeat_interval = messaging::kDefaultHeartbeatInterval;
  int liveness = messaging::kDefaultLiveness;
  std::function<void(const std::string&)> log;  // may be empty
  messaging::LinkSecurity security;  // CURVE on the endpoint when it needs it (common/ipc/link_security.h)
};

struct CacheServerStats {
  uint64_t hellos = 0;             // CacheHello handled
  uint64_t lookups = 0;            // CacheLookup handled
  uint64_t admits = 0;             // admissions done
  uint64_t admit_errors = 0;       // admissions refused (bad offsets, unknown expert)
  uint64_t releases = 0;           // leases released by their client
  uint64_t bad_messages = 0;       // frames dropped on receipt, unexpected tables
  uint64_t reclaimed_clients = 0;  // clients dropped (replaced, disconnected, silent)
  uint64_t reclaimed_leases = 0;   // leases released on their behalf
  uint64_t clients = 0;            // now
  uint64_t leases_held = 0;        // now, over all clients
  uint64_t pipes = 0;              // clients served through a shared-memory pipe, now
};

class CacheServer {
 public:
  // Binds the ROUTER and starts the loop thread. Errors: Channel::Open's, EventFd::Create's.
  static Result<std::unique_ptr<CacheServer>> Start(zmq::context_t& context, CacheServerConfig config,
                                                    LocalCacheBackend* backend);
  ~CacheServer();  // Stop()
  CacheServer(const CacheServer&) = delete;
  CacheServer& operator=(const CacheServer&) = delete;
  // Joins the loop and releases every client's leases and staging slots. Idempotent.
  void Stop();
  CacheServerStats stats() const;
  std::string endpoint() const;

 private:
  struct State;
  explicit CacheServer(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace zipmoe::runtime
