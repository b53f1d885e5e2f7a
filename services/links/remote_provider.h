// The ExpertProvider interface (common/expert_provider.h) across processes: the executor process
// uses a RemoteExpertProvider; the scheduler process runs a ProviderServer in front of its
// OffloadExpertProvider. Expert bytes stay in the cache manager's shared arena: a message names the
// arena offsets of an expert's three BF16 tensors, which the executor reads in its own mapping.
//
//   executor                               scheduler
//   BeginLayer  -- LayerRequest -->        OffloadExpertProvider::BeginLayer
//   NextReady   <-- ExpertReady(s) --      NextReady on the thread that made them ready (the provider's
//                                          ready listener); experts ready together in one frame
//   ~Lease      -- LeaseRelease -->        the leases are destroyed (admission, next wave); a group's
//                                          releases in one message, sent at the next NextReady (an
//                                          abandoned lease, ExpertLease::Abandon, is named as such:
//                                          released without admission)
//   EndLayer    -- LayerEnd -->            the last group's releases, then EndLayer; its Ack is not
//                                          waited for (below)
//               <-- Ack --                 read by the executor's next receive
//   Prefetch    -- LayerRequest{prefetch} -->  Prefetch (no answer)
//
// Transport. Connect opens a ZeroMQ DEALER; OpenPipe then moves the link onto a shared-memory pipe
// (common/ipc/shm_pipe.h) the executor creates and the scheduler attaches (PipeOpen, answered by an Ack
// over ZeroMQ). Every message above then goes through the pipe: no ZeroMQ I/O thread on either side,
// and the scheduler writes ExpertReady straight into it from the thread that made the expert ready
// (issue 20). The server answers
// each message on the link it came from, so a scheduler that refuses the pipe keeps ZeroMQ.
//
// EndLayer is pipelined: it sends LayerEnd and returns without the round trip (issue 20: the
// LayerEnd / Ack wait cost ~0.13 ms per layer, 3 ms of a 23 ms decode step on 2 cores). The
// scheduler handles one peer's messages in order, so the next LayerRequest still finds the layer
// ended. An error in the Ack (a LayerEnd the scheduler refused) is returned by the next call that
// reads from the scheduler (BeginLayer, NextReady, Flush).
//
// Pool F on the executor's device (issue 36 item 1, as in embedded mode): the scheduler's answer to
// Ping says how many F slots the cache-manager keeps on the executor's device (device_f_slots(); -1:
// none, the executor keeps its own device tier); each ExpertReady then names the expert's slot and
// whether the slot already holds it. Every LayerRequest carries this provider's device epoch (a
// random value of its own), so a cache-manager that outlived an earlier executor empties F before it
// names a slot as holding anything (CacheManager::ClearDeviceF). A layer error (corrupt chunk, ...)
// arrives as an ExpertReady with a non-OK status and is returned by NextReady. If a new executor connects while a layer of the old one is open, the server
// releases that layer's leases, ends it and serves the new one.
// Thread-safety: as ExpertProvider (one driving thread; leases released from any thread);
// ProviderServer's methods from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <zmq.hpp>

#include "common/expert_provider.h"
#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/shm_pipe.h"
#include "common/ipc/shm_region.h"
#include "common/status.h"
#include "kernels/host_registration.h"
#include "services/links/provider_wire.h"

namespace zipmoe::runtime {

struct RemoteProviderConfig {
  std::string endpoint;    // the scheduler's executor endpoint (ProviderServer)
  std::string arena_name;  // the shared arena's POSIX shm name
  std::chrono::milliseconds timeout{60000};  // longest wait for one reply before kDeadlineExceeded
  // cudaHostRegister the attached arena (kernels/host_registration.h) so a CUDA executor reads
  // expert bytes in place (zero-copy on Jetson). kUnavailable (no CUDA build, no device) is logged
  // and the arena stays unregistered; any other registration error fails Connect.
  bool register_with_cuda = false;
  // The predictor the executor runs for the scheduler's prefetching (the service config's
  // `prefetch`, resolved like the runtime flag); kNone: no predictions are sent.
  PrefetchMode prefetch = PrefetchMode::kNone;
  messaging::LinkSecurity security;  // CURVE to the scheduler when the endpoint needs it (link_security.h)
};

class RemoteExpertProvider : public ExpertProvider {
 public:
  // Attaches the arena and connects (on a ZeroMQ context of its own). Errors: ShmRegion::Attach's
  // (kNotFound: no arena yet), Channel::Open's.
  static Result<std::unique_ptr<RemoteExpertProvider>> Connect(const RemoteProviderConfig& config);
  // Round trip to the scheduler: a Heartbeat that its ProviderServer answers with a Heartbeat. The
  // server starts only once the scheduler holds its cache-manager session, so an answer means the
  // scheduler is ready to serve layers (a ZeroMQ connect alone succeeds with nobody listening).
  // Errors: kUnavailable (no answer within `wait`, naming the endpoint).
  Status Ping(std::chrono::milliseconds wait);
  // Pool F's slots on this executor's device as the scheduler's latest Ping answer said, -1 for none
  // (or before the first answer).
  int64_t device_f_slots() const override { return device_f_slots_.load(); }
  // This provider's device epoch (LayerRouting::device_epoch), never 0.
  uint64_t device_epoch() const { return device_epoch_; }
  // Moves the link onto a shared-memory pipe. If nothing arrives through it within the timeout (the
  // scheduler died: a restarted one never reads the old pipe) or it is found broken (a record length
  // outside its ring: the call that found it fails with kCorruption, issue 37), the link falls back
  // to ZeroMQ, and the next BeginLayer pings the scheduler and offers a new pipe (at most once a
  // second).
  // Creates it (POSIX shm "/zipmoe-pipe-<pid>-<n>", swept
  // by the next executor if this process dies), sends PipeOpen and waits up to `wait` for the
  // scheduler's Ack. Call after Ping answered and before the first layer. On an error the link
  // stays on ZeroMQ and works as before. Errors: kInvalidArgument (a layer is open, or a pipe is
  // already open), ShmPipe::Create's, the scheduler's refusal (e.g. kNotFound: it cannot see this
  // host's /dev/shm), kUnavailable (no answer within `wait`: an older scheduler ignores PipeOpen).
  Status OpenPipe(std::chrono::milliseconds wait);
  // Whether the link runs over a shared-memory pipe (OpenPipe succeeded).
  bool on_pipe() const;
  // The pipe's shared-memory name ("/zipmoe-pipe-<pid>-<n>"), "" on ZeroMQ.
  std::string pipe_name() const;
  // Whether the arena is registered with CUDA (register_with_cuda and it worked).
  bool cuda_registered() const { return registration_.has_value(); }
  Status BeginLayer(const LayerRouting& routing) override;
  // Errors: the scheduler's layer error; kDeadlineExceeded (no answer within the timeout, naming the
  // endpoint); kCorruption (an expert outside the arena).
  Result<std::unique_ptr<ExpertLease>> NextReady() override;
  // True when an ExpertReady of the layer has already arrived (messages waiting on the socket are
  // taken into an inbox, in order, without blocking), so the executor computes the experts that
  // arrived together (the cache hits the scheduler answers at once) in one parallel region.
  bool NextIsReady() const override;
  // Sends LayerEnd and returns at once; a deferred error of an earlier LayerEnd is returned here too.
  Status EndLayer(int32_t layer_id) override;
  // Waits until the scheduler has answered every LayerEnd sent. Errors: the first refused
  // LayerEnd's status; kDeadlineExceeded (no answer within the timeout, naming the endpoint).
  Status Flush();
  PrefetchMode prefetch_mode() const override { return config_.prefetch; }
  // One-way LayerRequest{prefetch = true} to the scheduler, which calls its provider's Prefetch. A
  // send that fails is dropped (a prediction is a hint).
  void Prefetch(const LayerRouting& predicted) override;
  uint64_t bad_messages() const;
  messaging::ChannelStats channel_stats() const;  // messages to / from the scheduler (ZeroMQ + pipe)

 private:
  class Lease;
  RemoteExpertProvider(const RemoteProviderConfig& config, ShmRegion arena,
                       std::unique_ptr<zmq::context_t> context, messaging::Channel channel);
  Result<messaging::Body> Receive(const char* what);  // next message (mu_ taken per slice)
  // One message over the link in use (the pipe once open, else the channel).
  Status SendLocked(messaging::Body body) ZM_REQUIRES(mu_);
  Result<messaging::Body> RecvLocked(std::chrono::milliseconds timeout) const ZM_REQUIRES(mu_);
  // Closes the pipe (silent or broken, `why` logged) and falls back to ZeroMQ; the next BeginLayer
  // offers a new one. Driving thread.
  void DropPipeLocked(const std::string& why) ZM_REQUIRES(mu_);
  // Appends a received message to inbox_; an ExpertsReady as its items, one ExpertReady each.
  void InboxLocked(messaging::Body body) const ZM_REQUIRES(mu_);
  // A lease's release is buffered; the buffer goes out as one LeaseRelease at the next NextReady
  // (the group computed since), with the LayerEnd, or before BeginLayer / Flush.
  void Release(int32_t layer_id, int32_t expert_id, bool abandoned);
  void FlushReleasesLocked() ZM_REQUIRES(mu_);
  // Takes in an Ack (a LayerEnd's answer); true if `body` was one.
  bool AbsorbAck(const messaging::Body& body);
  // The deferred error of a refused LayerEnd, once (then cleared).
  Status TakeDeferred();

  RemoteProviderConfig config_;
  ShmRegion arena_;
  std::optional<kernels::HostRegistration> registration_;  // after arena_: unregistered before unmapping
  std::unique_ptr<zmq::context_t> context_;  // outlives channel_ (declared before it)
  mutable Mutex mu_;        // guards channel_ and inbox_
  // mutable: NextIsReady() (const) moves the messages that already arrived into inbox_.
  mutable messaging::Channel channel_ ZM_GUARDED_BY(mu_);
  std::unique_ptr<messaging::ShmPipe> pipe_ ZM_GUARDED_BY(mu_);  // the link once OpenPipe succeeded
  mutable std::deque<messaging::Body> inbox_ ZM_GUARDED_BY(mu_);  // received, not yet read by Receive
  std::vector<int32_t> released_ ZM_GUARDED_BY(mu_);  // experts whose leases were released, not yet sent
  std::vector<int32_t> abandoned_ ZM_GUARDED_BY(mu_);  // those of released_ abandoned (ExpertLease::Abandon)
  int32_t released_layer_ ZM_GUARDED_BY(mu_) = -1;
  const uint64_t device_epoch_;  // random, never 0 (constructor)
  std::atomic<int64_t> device_f_slots_{-1};  // from the latest Ping answer
  int32_t layer_id_ = -1;
  size_t expected_ = 0;
  size_t delivered_ = 0;
  int unacked_ends_ = 0;  // LayerEnds sent whose Ack has not arrived (driving thread only)
  bool pipe_lost_ = false;  // the pipe went silent or broke: offer a new one (driving thread only)
  std::chrono::steady_clock::time_point next_pipe_try_;
  Status deferred_;       // the first refused LayerEnd not yet returned (driving thread only)
};

struct ProviderServerConfig {
  std::string endpoint;  // ROUTER bind URL
  std::function<void(const std::string&)> log;
  messaging::LinkSecurity security;  // CURVE on the endpoint when it needs it (common/ipc/link_security.h)
};

struct ProviderServerStats {
  uint64_t layers = 0;        // layers served
  uint64_t bad_messages = 0;  // frames dropped
  uint64_t aborted_layers = 0;
};

class ProviderServer {
 public:
  // `provider` must outlive the server; its leases must lie in [arena_base, + arena_bytes).
  static Result<std::unique_ptr<ProviderServer>> Start(zmq::context_t& context, ProviderServerConfig config,
                                                       ExpertProvider* provider, const uint8_t* arena_base,
                                                       uint64_t arena_bytes);
  ~ProviderServer();  // Stop()
  // Releases held leases, removes the provider's ready listener (waiting for a call in progress) and
  // joins. With a provider that has no ready listener a deliverer thread waits in its NextReady, and is
  // only released when the provider fails the layer: stop that provider's engines first.
  void Stop();
  ProviderServerStats stats() const;
  std::string endpoint() const;

 private:
  struct State;
  explicit ProviderServer(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

}  // namespace zipmoe::runtime
