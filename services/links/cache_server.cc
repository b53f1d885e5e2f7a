#include "services/links/cache_server.h"

#include <map>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/event_fd.h"
#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/router_server.h"
#include "common/ipc/shm_pipe.h"
#include "common/thread_name.h"
#include "common/trace_events.h"
#include "services/links/cache_wire.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;
namespace msg = messaging;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {
constexpr milliseconds kReplyTimeout{1000};  // longest wait for a reply to be queued

msg::CacheReply CacheReplyOf(uint64_t request_id, const Status& status) {
  msg::CacheReply reply;
  reply.request_id = request_id;
  msg::SetStatus(&reply, status);
  return reply;
}
}  // namespace

struct CacheServer::State : msg::RouterServer::Handler {
  struct Client {
    std::unordered_set<uint64_t> leases;
    std::vector<uint32_t> staging;
    milliseconds interval{500};
    Clock::time_point last_seen;
    AdmitTotals totals;
    Status admit_error;  // first failed admission since the last CacheLookupReply
  };

  State(CacheServerConfig c, LocalCacheBackend* b, std::unique_ptr<msg::RouterServer> r)
      : config(std::move(c)), backend(b), server(std::move(r)) {}

  const CacheServerConfig config;
  LocalCacheBackend* const backend;
  const std::unique_ptr<msg::RouterServer> server;  // its channel: the loop thread's only
  // One message (or tick) at a time: the loop thread and the pipes' reader threads.
  Mutex loop_mu;
  std::map<std::string, Client> clients ZM_GUARDED_BY(loop_mu);
  std::vector<std::pair<std::string, msg::Body>> pending_replies ZM_GUARDED_BY(loop_mu);
  // The executor device epoch F's device slots belong to (CacheLookup.device_epoch), 0 = none seen.
  uint64_t device_epoch ZM_GUARDED_BY(loop_mu) = 0;
  // A client's pipe (and the thread reading it), by the client's routing id.
  std::map<std::string, std::shared_ptr<msg::PipeReader>> pipes ZM_GUARDED_BY(loop_mu);
  std::vector<std::shared_ptr<msg::PipeReader>> retired ZM_GUARDED_BY(loop_mu);  // stopping, to be joined

  mutable Mutex mu;  // guards the two below
  bool joined ZM_GUARDED_BY(mu) = false;
  CacheServerStats stats ZM_GUARDED_BY(mu);

  void Log(const std::string& line) const {
    if (config.log) config.log(line);
  }
  void Bad(const std::string& what) {
    {
      MutexLock lock(&mu);
      ++stats.bad_messages;
    }
    Log("E: dropped a bad message: " + what);
  }
  // Replies are queued while a message is handled and sent by Handle after PublishCounts, so a client
  // that has its reply also sees stats() that include the request (tests and metrics read them).
  void Reply(const std::string& peer, msg::Body body) ZM_REQUIRES(loop_mu) {
    pending_replies.emplace_back(peer, std::move(body));
  }
  // A reply to a client with a pipe goes into it; to another one through the ROUTER, which only the
  // loop thread may use (a reader thread's sender always has its pipe; if it was just retired, the
  // reply is dropped: that client is gone).
  void FlushReplies(bool on_loop_thread) ZM_REQUIRES(loop_mu) {
    for (auto& [peer, body] : pending_replies) {
      Status st;
      if (auto it = pipes.find(peer); it != pipes.end()) {
        st = it->second->pipe()->Send(std::move(body), kReplyTimeout);
      } else if (on_loop_thread) {
        st = server->channel().SendTo(peer, std::move(body), kReplyTimeout);
      } else {
        continue;
      }
      if (!st.ok()) Log(fmt::format("E: reply to {}: {}", msg::PrintableId(peer), st.ToString()));
    }
    pending_replies.clear();
  }
  // keep_pipe: the client said hello again through the pipe it keeps.
  void Reclaim(const std::string& peer, const std::string& why, bool keep_pipe = false) ZM_REQUIRES(loop_mu);
  void RetirePipe(const std::string& peer) ZM_REQUIRES(loop_mu);
  void JoinRetired() ZM_EXCLUDES(loop_mu);
  void OpenPipe(const std::string& peer, const msg::PipeOpen& open) ZM_REQUIRES(loop_mu);
  // msg::RouterServer::Handler, on the loop thread.
  void OnTick(Clock::time_point now) override;
  void OnMessage(msg::Received& got) override {
    MutexLock lock(&loop_mu);
    if (const auto* open = std::get_if<msg::PipeOpen>(&got.message.body)) {
      OpenPipe(got.peer, *open);
      return;
    }
    Handle(got.peer, got.message.body, /*on_loop_thread=*/true);
  }
  void OnBadMessage(const Status& bad) override { Bad(bad.ToString()); }
  void OnLoopError(const Status& error) override { Log("E: " + error.ToString()); }
  void Handle(const std::string& peer, msg::Body& body, bool on_loop_thread) ZM_REQUIRES(loop_mu);
  void HandleHello(const std::string& peer, const msg::CacheHello& hello) ZM_REQUIRES(loop_mu);
  void HandleLookup(const std::string& peer, const msg::CacheLookup& lookup) ZM_REQUIRES(loop_mu);
  void HandleAdmit(const std::string& peer, const msg::CacheAdmit& admit) ZM_REQUIRES(loop_mu);
  void PublishCounts() ZM_REQUIRES(loop_mu);
};

void CacheServer::State::PublishCounts() {
  uint64_t leases = 0;
  for (const auto& [peer, c] : clients) leases += c.leases.size();
  MutexLock lock(&mu);
  stats.clients = clients.size();
  stats.leases_held = leases;
  stats.pipes = pipes.size();
}

void CacheServer::State::RetirePipe(const std::string& peer) {
  auto it = pipes.find(peer);
  if (it == pipes.end()) return;
  it->second->RequestStop();
  retired.push_back(std::move(it->second));
  pipes.erase(it);
}

void CacheServer::State::JoinRetired() {
  std::vector<std::shared_ptr<msg::PipeReader>> done;
  {
    MutexLock lock(&loop_mu);
    done.swap(retired);
  }
  for (const std::shared_ptr<msg::PipeReader>& reader : done) reader->Stop();
}

void CacheServer::State::OpenPipe(const std::string& peer, const msg::PipeOpen& open) {
  Result<std::unique_ptr<msg::ShmPipe>> attached = msg::AttachOfferedPipe(open, "cache-manager");
  if (attached.ok()) {
    RetirePipe(peer);  // an earlier pipe of the same client
    auto reader = std::make_shared<msg::PipeReader>(std::move(attached).value());
    msg::PipeReader* raw = reader.get();
    reader->Start(
        "zm-cache-pipe",
        [this, peer, raw](msg::Message& got) {
          MutexLock lock(&loop_mu);
          if (raw->stop_requested()) return false;  // retired meanwhile
          Handle(peer, got.body, /*on_loop_thread=*/false);
          return true;
        },
        [this](const Status& bad) { Bad(bad.ToString()); });  // a broken pipe: the client goes silent, is reclaimed
    pipes[peer] = std::move(reader);
    PublishCounts();
    Log(fmt::format("client {} on the shared-memory pipe {}", msg::PrintableId(peer), open.name));
  } else {
    Log(fmt::format("W: client {}: cannot attach its pipe, ZeroMQ carries everything: {}", msg::PrintableId(peer),
                    attached.status().ToString()));
  }
  // The answer goes over ZeroMQ: the client reads its pipe only once it has it.
  Status st = server->channel().SendTo(peer, msg::PipeOpenAck(open, attached.status()), kReplyTimeout);
  if (!st.ok()) Log(fmt::format("E: reply to {}: {}", msg::PrintableId(peer), st.ToString()));
}

void CacheServer::State::Reclaim(const std::string& peer, const std::string& why, bool keep_pipe) {
  if (!keep_pipe) RetirePipe(peer);
  auto it = clients.find(peer);
  if (it == clients.end()) return;
  const std::vector<uint64_t> leases(it->second.leases.begin(), it->second.leases.end());
  const std::vector<uint32_t> staging = std::move(it->second.staging);
  clients.erase(it);
  // Counts first, the cache second: whoever sees the pins gone also sees the client gone from stats().
  {
    MutexLock lock(&mu);
    ++stats.reclaimed_clients;
    stats.reclaimed_leases += leases.size();
  }
  PublishCounts();
  backend->ReleaseLeases(leases);
  for (uint32_t slot : staging) backend->ReleaseStaging(slot);
  Log(fmt::format("client {} {}: reclaimed {} lease(s) and {} staging slot(s)", msg::PrintableId(peer), why,
                  leases.size(), staging.size()));
}

void CacheServer::State::HandleHello(const std::string& peer, const msg::CacheHello& hello) {
  // One scheduler at a time: a Hello replaces every earlier client (and an earlier session of the sender).
  std::vector<std::string> old;
  for (const auto& [p, c] : clients) old.push_back(p);
  for (const std::string& p : old) {
    Reclaim(p, p == peer ? "said hello again" : "replaced by a new scheduler", /*keep_pipe=*/p == peer);
  }
  msg::CacheHelloReply reply;
  reply.request_id = hello.request_id;
  if (!hello.arena_name.empty() && hello.arena_name != backend->arena_name()) {
    msg::SetStatus(&reply, Status::InvalidArgument(fmt::format("arena mismatch: this cache-manager serves arena {}, "
                                                               "the client expects {}", backend->arena_name(),
                                                               hello.arena_name)));
    Log(fmt::format("E: refused client {} (pid {}): {}", msg::PrintableId(peer), hello.pid, reply.message));
    Reply(peer, std::move(reply));
    return;
  }
  Client c;
  c.interval = hello.heartbeat_interval_ms > 0 ? milliseconds(hello.heartbeat_interval_ms) : config.heartbeat_interval;
  c.last_seen = Clock::now();
  while (true) {
    Result<uint32_t> slot = backend->AcquireStaging();
    if (!slot.ok()) break;
    c.staging.push_back(*slot);
    reply.staging_offsets.push_back(backend->StagingOffset(*slot));
  }
  const cm::StagingLayout& sl = backend->staging_layout();
  const cm::CacheConfig& cc = backend->manager().config();
  const cm::CostModel& cost = backend->plan().cost;
  reply.arena_name = backend->arena_name();
  reply.arena_bytes = backend->arena_bytes();
  reply.budget_bytes = cc.budget_bytes;
  reply.policy = static_cast<uint8_t>(cc.policy);
  reply.pools = cc.pools;
  reply.staging_e_sm_bytes = sl.e_sm_bytes;
  reply.staging_e_plane_offset = sl.e_plane_offset;
  reply.staging_bf16_offset = sl.bf16_offset;
  reply.staging_slot_bytes = sl.slot_bytes;
  reply.sm_read_us = cost.sm_read_us;
  reply.e_read_us = cost.e_read_us;
  reply.decompress_us = cost.decompress_us;
  reply.recovery_us = cost.recovery_us;
  reply.expert_compute_us = cost.expert_compute_us;
  reply.n_shards = cost.n_shards;
  reply.device_f_slots = backend->device_f_slots();
  Log(fmt::format("client {} (pid {}) connected: {} staging slot(s) granted", msg::PrintableId(peer), hello.pid,
                  c.staging.size()));
  clients[peer] = std::move(c);
  {
    MutexLock lock(&mu);
    ++stats.hellos;
  }
  Reply(peer, std::move(reply));
}

void CacheServer::State::HandleLookup(const std::string& peer, const msg::CacheLookup& lookup) {
  msg::CacheLookupReply reply;
  reply.request_id = lookup.request_id;
  reply.layer_id = lookup.layer_id;
  auto it = clients.find(peer);
  if (it == clients.end()) {
    msg::SetStatus(&reply, Status::Unavailable("no CacheHello from this client (or it was replaced): connect again"));
    Reply(peer, std::move(reply));
    return;
  }
  Client& c = it->second;
  if (!lookup.scores.empty()) backend->ObserveScores(lookup.layer_id, lookup.scores);
  if (lookup.device_epoch != 0 && lookup.device_epoch != device_epoch) {
    // Another executor's device memory (a restarted executor): what F records is not in its slots.
    const int64_t cleared = backend->manager().ClearDeviceF();
    if (device_epoch != 0 || cleared > 0) {
      Log(fmt::format("a new executor device (epoch {:x}): {} expert(s) taken out of pool F", lookup.device_epoch,
                      cleared));
    }
    device_epoch = lookup.device_epoch;
  }
  std::vector<CachedExpert> found;
  msg::SetStatus(&reply, lookup.pin_only ? backend->PinLayer(lookup.layer_id, lookup.expert_ids, &found)
                                         : backend->LookupLayer(lookup.layer_id, lookup.expert_ids, &found));
  const bool device_f = backend->device_f_slots() >= 0;
  for (const CachedExpert& e : found) {
    reply.entries.emplace_back(e.expert_id, static_cast<uint8_t>(e.state), e.slot_offset, e.lease);
    if (device_f) {
      reply.device_slots.push_back(e.device_slot);
      reply.device_fills.push_back(e.device_fill);
    }
    if (e.lease != kNoLease) c.leases.insert(e.lease);
  }
  reply.admit_calls = c.totals.calls;
  reply.admit_outcomes.assign(c.totals.outcomes.begin(), c.totals.outcomes.end());
  msg::StatusTo(c.admit_error, &reply.admit_status_code, &reply.admit_message);
  c.admit_error = Status::Ok();
  {
    MutexLock lock(&mu);
    ++stats.lookups;
  }
  Reply(peer, std::move(reply));
}

void CacheServer::State::HandleAdmit(const std::string& peer, const msg::CacheAdmit& admit) {
  auto it = clients.find(peer);
  if (it == clients.end()) {
    Log(fmt::format("E: CacheAdmit from {} without CacheHello (replaced client?): ignored", msg::PrintableId(peer)));
    if (admit.want_reply) {
      Reply(peer, CacheReplyOf(admit.request_id, Status::Unavailable("no CacheHello from this client")));
    }
    return;
  }
  Client& c = it->second;
  uint64_t admits = 0, errors = 0, releases = 0;
  for (const std::unique_ptr<msg::CacheAdmitItem>& admitted : admit.items) {
    const msg::CacheAdmitItem& item = *admitted;
    uint64_t lease = kNoLease;
    if (item.lease_id != kNoLease) {
      if (c.leases.erase(item.lease_id) > 0) {
        lease = item.lease_id;
      } else {
        Log(fmt::format("E: client {} released lease {} it does not hold: ignored", msg::PrintableId(peer),
                        item.lease_id));
      }
    }
    if (!item.admit) {
      if (lease != kNoLease) backend->ReleaseLeases({lease});
      releases += lease != kNoLease;
      continue;
    }
    CacheAdmitRequest request;
    const Status shape = CacheAdmitFromWire(item, backend->layout().Find(item.layer_id, item.expert_id), &request);
    request.lease = lease;
    Status st = shape;
    if (st.ok()) {
      Result<cm::AdmitResult> result = backend->AdmitWithResult(request);  // releases `lease` after it
      st = result.status();
      ++c.totals.calls;
      if (result.ok()) ++c.totals.outcomes[static_cast<int>(result->outcome)];
    } else if (lease != kNoLease) {
      backend->ReleaseLeases({lease});
    }
    ++admits;
    if (!st.ok()) {
      ++errors;
      Log(fmt::format("E: admission from {}: {}", msg::PrintableId(peer), st.ToString()));
      if (c.admit_error.ok()) c.admit_error = st;
    }
  }
  {
    MutexLock lock(&mu);
    stats.admits += admits;
    stats.admit_errors += errors;
    stats.releases += releases;
  }
  if (admit.want_reply) Reply(peer, CacheReplyOf(admit.request_id, Status::Ok()));
}

void CacheServer::State::Handle(const std::string& peer, msg::Body& body, bool on_loop_thread) {
  const trace::TraceSpan span("message", [&] { return std::string("handle ") + msg::BodyName(body); },
                               trace::Activity::kHandleMessage);
  auto known = clients.find(peer);
  if (known != clients.end()) known->second.last_seen = Clock::now();
  if (auto* m = std::get_if<msg::CacheHello>(&body)) {
    HandleHello(peer, *m);
  } else if (auto* m = std::get_if<msg::CacheLookup>(&body)) {
    HandleLookup(peer, *m);
  } else if (auto* m = std::get_if<msg::CacheAdmit>(&body)) {
    HandleAdmit(peer, *m);
  } else if (auto* m = std::get_if<msg::CacheStatsRequest>(&body)) {
    Result<cm::CacheCounters> counters = backend->Counters();
    msg::CacheStats reply;
    reply.request_id = m->request_id;
    if (counters.ok()) reply = CacheStatsToWire(m->request_id, *counters);
    Reply(peer, std::move(reply));
  } else if (std::holds_alternative<msg::Disconnect>(body)) {
    Reclaim(peer, "disconnected");
  } else if (!std::holds_alternative<msg::Heartbeat>(body)) {
    Bad(fmt::format("unexpected {} from {}", msg::BodyName(body), msg::PrintableId(peer)));
  }
  PublishCounts();
  FlushReplies(on_loop_thread);
}

void CacheServer::State::OnTick(Clock::time_point now) {
  JoinRetired();
  MutexLock lock(&loop_mu);
  // Liveness: a client silent for `liveness` of its intervals is dead.
  std::vector<std::string> dead;
  for (const auto& [peer, c] : clients) {
    if (now - c.last_seen > c.interval * config.liveness) dead.push_back(peer);
  }
  for (const std::string& peer : dead) Reclaim(peer, "went silent");  // each publishes the counts
}

CacheServer::CacheServer(std::unique_ptr<State> s) : s_(std::move(s)) {}

Result<std::unique_ptr<CacheServer>> CacheServer::Start(zmq::context_t& context, CacheServerConfig config,
                                                        LocalCacheBackend* backend) {
  msg::ChannelOptions options;
  options.endpoint = config.endpoint;
  options.sender = "cache-manager";
  options.security = config.security;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::RouterServer> router, msg::RouterServer::Bind(context, options));
  auto state = std::make_unique<State>(std::move(config), backend, std::move(router));
  std::unique_ptr<CacheServer> server(new CacheServer(std::move(state)));
  State* s = server->s_.get();
  s->server->Start(s, s->config.heartbeat_interval, "zm-cache-srv");
  return server;
}

CacheServer::~CacheServer() { Stop(); }

void CacheServer::Stop() {
  {
    MutexLock lock(&s_->mu);
    if (s_->joined) return;
  }
  s_->server->Stop();
  {
    MutexLock loop_lock(&s_->loop_mu);  // nothing arrives through a pipe any more
    std::vector<std::string> piped;
    for (const auto& [peer, link] : s_->pipes) piped.push_back(peer);
    for (const std::string& peer : piped) s_->RetirePipe(peer);
  }
  s_->JoinRetired();
  {
    MutexLock loop_lock(&s_->loop_mu);
    std::vector<std::string> peers;
    for (const auto& [peer, c] : s_->clients) peers.push_back(peer);
    for (const std::string& peer : peers) s_->Reclaim(peer, "dropped at shutdown");
    s_->PublishCounts();
  }
  MutexLock lock(&s_->mu);
  s_->joined = true;
}

CacheServerStats CacheServer::stats() const {
  MutexLock lock(&s_->mu);
  return s_->stats;
}

std::string CacheServer::endpoint() const { return s_->server->endpoint(); }

}  // namespace zipmoe::runtime
