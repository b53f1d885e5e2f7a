// RemoteCacheBackend: the CacheBackend (cache_backend.h) of a scheduler whose cache lives in the
// cache-manager process (cache_server.h), reached over ZeroMQ (DEALER -> ROUTER, messages of
// schemas/messages.fbs "scheduler <-> cache-manager"; docs/messaging.md "Cache manager").
//
//   Connect          CacheHello -> CacheHelloReply: arena name/size (attached here by name; a name
//                    other than the configured one is refused), plan (cost model, budget, policy,
//                    pools) and every staging slot, granted to this client
//   LookupLayer      CacheLookup -> CacheLookupReply: one round trip per MoE layer (with pool F on
//                    the executor's device, each expert's device slot and whether it was reserved
//                    at this lookup; the executor's device epoch goes with the lookup)
//   Admit            CacheAdmit, one-way (admission + lease release, done in order by the server);
//                    between HoldAdmits and FlushAdmits the items wait and go as one CacheAdmit
//   ReleaseLeases    CacheAdmit without admission, one-way
//   Acquire/ReleaseStaging  local, over the granted slots; a slot released after an Admit is reused
//                    only once a later round trip was answered (messages are processed in order, so
//                    the admission has copied its bytes out): a LookupLayer reply normally proves it;
//                    otherwise AcquireStaging makes one CacheAdmit{want_reply} round trip
//   Counters         CacheStatsRequest -> CacheStats
// With RemoteCacheConfig::pipe, Connect then offers a shared-memory pipe (PipeOpen, answered by an
// Ack over ZeroMQ; common/ipc/shm_pipe.h): on an OK answer every later message of the session (lookups
// and their replies, admissions, heartbeats, Disconnect) travels through it, with no ZeroMQ I/O
// thread on either side (issue 20). A refusal keeps ZeroMQ (logged).
// A heartbeat goes out after each silent interval, so the server can tell a dead scheduler (and
// reclaim its leases and staging slots) from an idle one. The destructor sends Disconnect.
// Admission outcomes (admit_totals) are those reported by the latest LookupLayer reply; a failed
// admission is returned by the next LookupLayer.
//
// Thread-safety: every method from any thread; one mutex serialises the socket (a round trip holds
// it until its reply arrives).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/shm_pipe.h"
#include "common/ipc/shm_region.h"
#include "services/pipeline/cache_backend.h"

namespace zipmoe::runtime {

struct RemoteCacheConfig {
  std::string endpoint;    // the cache-manager's ROUTER (endpoints.cache_manager)
  std::string arena_name;  // the arena this scheduler is configured for (shm_name); "" = the server's
  std::chrono::milliseconds timeout{60000};             // longest wait for one reply
  std::chrono::milliseconds connect_timeout{600000};    // longest wait for CacheHelloReply (planning)
  std::chrono::milliseconds heartbeat_interval{500};
  // Polled while waiting for the CacheHelloReply; returning false gives up (kUnavailable).
  std::function<bool()> keep_waiting;
  std::function<void(const std::string&)> log;  // may be empty
  bool pipe = false;  // offer a shared-memory pipe once the session is open (above)
  messaging::LinkSecurity security;  // CURVE to the cache-manager when the endpoint needs it (link_security.h)
};

class RemoteCacheBackend : public CacheBackend {
 public:
  // Connects, says hello, attaches the arena. Fills *config's budget, policy, pools and
  // staging_slots from the server's plan. Errors: Channel::Open's; kDeadlineExceeded / kUnavailable
  // (no reply); the server's refusal; kInvalidArgument (arena name or size differs from the
  // configured / attached one: "arena mismatch"); ShmRegion::Attach's; ModelLayout::FromManifest's.
  static Result<std::unique_ptr<RemoteCacheBackend>> Connect(const RemoteCacheConfig& config,
                                                             const Manifest& manifest, OffloadConfig* offload);
  ~RemoteCacheBackend() override;  // Disconnect, joins the heartbeat thread

  Status LookupLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                     std::vector<CachedExpert>* out) override;
  // A CacheLookup{pin_only} round trip (CacheManager::Pin on the server).
  Status PinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, std::vector<CachedExpert>* out) override;
  Status Admit(const CacheAdmitRequest& request) override;
  void ReleaseLeases(const std::vector<uint64_t>& leases) override;
  void HoldAdmits() override;
  Status FlushAdmits() override;
  Result<uint32_t> AcquireStaging() override;
  void ReleaseStaging(uint32_t slot) override;
  uint64_t StagingOffset(uint32_t slot) const override { return staging_offsets_.at(slot); }
  const cache_manager::StagingLayout& staging_layout() const override { return staging_layout_; }
  uint32_t staging_slots() const override { return static_cast<uint32_t>(staging_offsets_.size()); }
  uint8_t* arena_base() const override { return arena_->data(); }
  uint64_t arena_bytes() const override { return arena_->size_bytes(); }
  const std::string& arena_name() const override { return arena_->name(); }
  const cache_manager::ModelLayout& layout() const override { return layout_; }
  const cache_manager::PlanBuild& plan() const override { return plan_; }
  Result<cache_manager::CacheCounters> Counters() override;
  AdmitTotals admit_totals() const override;
  // Kept until the next LookupLayer of that layer, which carries them to the cache-manager
  // (CacheLookup.scores): no extra message.
  void ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores) override;
  // The cache-manager's pool F slots on the executor's device (CacheHelloReply.device_f_slots), -1 for none.
  int64_t device_f_slots() const override { return device_f_slots_; }
  // Sent with every later CacheLookup (CacheLookup.device_epoch).
  void SetDeviceEpoch(uint64_t epoch) override;

  uint64_t round_trips() const;    // request/reply exchanges so far (Hello included)
  uint64_t one_way_sends() const;  // admissions, releases, heartbeats
  uint64_t bad_messages() const;   // frames dropped on receipt
  messaging::ChannelStats channel_stats() const;  // messages to / from the cache-manager (ZeroMQ + pipe)
  bool on_pipe() const;  // the session runs over a shared-memory pipe
  // The cache-manager no longer knows this client (it missed `liveness` heartbeats, e.g. a stalled
  // process, or a newer scheduler said hello): its leases and staging slots were reclaimed, so this
  // session cannot go on (also: no answer through the pipe within the timeout: a restarted
  // cache-manager never reads the old pipe). The scheduler service exits on it and `zipmoe up` starts
  // a fresh one.
  bool session_lost() const { return session_lost_.load(); }

 private:
  Status NoteSessionLoss(Status status);  // sets session_lost_ on the server's "unknown client"; returns status
  Status LookupOrPinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, bool pin_only,
                          std::vector<CachedExpert>* out);

 public:

 private:
  RemoteCacheBackend(RemoteCacheConfig config, std::unique_ptr<zmq::context_t> context, messaging::Channel channel);
  // Sends `body` (request id `id`) and waits for the reply with that id.
  Result<messaging::Body> RoundTripLocked(uint64_t id, messaging::Body body, const char* what) ZM_REQUIRES(mu_);
  Status SendLocked(messaging::Body body) ZM_REQUIRES(mu_);
  // One message over the link in use, as Channel::Send / Recv.
  Status SendRawLocked(messaging::Body body) ZM_REQUIRES(mu_);
  Result<messaging::Body> RecvLocked(std::chrono::milliseconds timeout) ZM_REQUIRES(mu_);
  // PipeOpen -> Ack over ZeroMQ (OfferPipe); on OK the session moves onto the pipe. Errors:
  // ShmPipe::Create's, OfferPipe's.
  Status OpenPipeLocked() ZM_REQUIRES(mu_);
  // Sends the held admissions (held_admit_), if any, as one CacheAdmit.
  Status SendHeldLocked() ZM_REQUIRES(mu_);
  Status Sync();                             // a CacheAdmit{want_reply} round trip
  void HeartbeatLoop();

  // Constant after Connect.
  RemoteCacheConfig config_;
  cache_manager::ModelLayout layout_;
  cache_manager::PlanBuild plan_;
  std::optional<ShmRegion> arena_;  // set by Connect
  cache_manager::StagingLayout staging_layout_;
  std::vector<uint64_t> staging_offsets_;
  int64_t device_f_slots_ = -1;
  std::unique_ptr<zmq::context_t> context_;  // outlives channel_ (declared before it)

  // Guards the socket and every field below but the atomics: next_id_ and confirmed_ change only
  // under it and are also read under staging_mu_ alone; session_lost_ is set and read with or without it.
  mutable Mutex mu_;
  messaging::Channel channel_ ZM_GUARDED_BY(mu_);
  std::unique_ptr<messaging::ShmPipe> pipe_ ZM_GUARDED_BY(mu_);  // the link once OpenPipeLocked succeeded
  std::atomic<uint64_t> next_id_{1};     // id of the next message sent
  std::atomic<uint64_t> confirmed_{0};   // every message with an id below this was processed by the server
  std::atomic<bool> session_lost_{false};
  std::chrono::steady_clock::time_point last_send_ ZM_GUARDED_BY(mu_);
  AdmitTotals totals_ ZM_GUARDED_BY(mu_);
  uint64_t round_trips_ ZM_GUARDED_BY(mu_) = 0;
  uint64_t one_way_ ZM_GUARDED_BY(mu_) = 0;
  int admit_holds_ ZM_GUARDED_BY(mu_) = 0;                        // HoldAdmits nesting depth
  std::optional<messaging::CacheAdmit> held_admit_ ZM_GUARDED_BY(mu_);  // admissions not yet sent
  int32_t scores_layer_ ZM_GUARDED_BY(mu_) = -1;    // ObserveScores' layer, -1 = none pending
  std::vector<float> scores_ ZM_GUARDED_BY(mu_);    // its scores
  uint64_t device_epoch_ ZM_GUARDED_BY(mu_) = 0;    // SetDeviceEpoch's
  bool stopping_ ZM_GUARDED_BY(mu_) = false;
  CondVar stop_cv_;  // waits on mu_

  mutable Mutex staging_mu_;  // guards the two below
  std::vector<uint32_t> free_slots_ ZM_GUARDED_BY(staging_mu_);
  // [slot] next_id_ when it was released: clean once confirmed_ >= it
  std::vector<uint64_t> released_at_ ZM_GUARDED_BY(staging_mu_);

  std::thread heartbeat_;
};

// A CacheBackendFactory (OffloadConfig::cache) connecting with `config`.
CacheBackendFactory RemoteCacheBackendFactory(RemoteCacheConfig config);

}  // namespace zipmoe::runtime
