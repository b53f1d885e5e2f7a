#include "services/links/remote_cache_backend.h"

#include <unistd.h>

#include <utility>

#include <fmt/format.h>

#include "common/thread_name.h"
#include "common/trace_events.h"
#include "services/links/cache_wire.h"
#include "services/pipeline/offload_provider.h"

namespace zipmoe::runtime {

namespace cm = cache_manager;
namespace msg = messaging;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

constexpr milliseconds kHelloResend{2000};  // a Hello unanswered this long is sent again
constexpr milliseconds kPollSlice{100};     // while waiting for the Hello reply: check keep_waiting

cm::Pool PoolOfState(CompressionState s) {
  switch (s) {
    case CompressionState::kF: return cm::Pool::kF;
    case CompressionState::kC: return cm::Pool::kC;
    case CompressionState::kS: return cm::Pool::kS;
    default: return cm::Pool::kE;
  }
}

// The reply of the expected type (a peer could answer a request id with another table).
template <typename T>
Result<T> ReplyAs(msg::Body body, const std::string& endpoint) {
  T* reply = std::get_if<T>(&body);
  if (reply == nullptr) {
    return Status::Corruption(fmt::format("cache-manager at {} answered with a {}", endpoint, msg::BodyName(body)));
  }
  return std::move(*reply);
}

}  // namespace

RemoteCacheBackend::RemoteCacheBackend(RemoteCacheConfig config, std::unique_ptr<zmq::context_t> context,
                                       msg::Channel channel)
    : config_(std::move(config)), context_(std::move(context)), channel_(std::move(channel)) {}

Result<std::unique_ptr<RemoteCacheBackend>> RemoteCacheBackend::Connect(const RemoteCacheConfig& config,
                                                                        const Manifest& manifest,
                                                                        OffloadConfig* offload) {
  auto context = std::make_unique<zmq::context_t>(1);
  msg::ChannelOptions options;
  options.kind = msg::SocketKind::kDealer;
  options.endpoint = config.endpoint;
  options.sender = "scheduler";
  options.linger_ms = 200;  // lets the Disconnect of the destructor out
  options.security = config.security;
  ZM_ASSIGN_OR_RETURN(msg::Channel channel, msg::Channel::Open(*context, options));
  std::unique_ptr<RemoteCacheBackend> b(new RemoteCacheBackend(config, std::move(context), std::move(channel)));
  ZM_ASSIGN_OR_RETURN(b->layout_, cm::ModelLayout::FromManifest(manifest));

  // Hello until answered: the cache-manager may still be planning, or not yet bound.
  msg::CacheHelloReply reply;
  {
    MutexLock lock(&b->mu_);
    const auto give_up = Clock::now() + config.connect_timeout;
    bool told = false;
    bool answered = false;
    while (!answered) {
      const uint64_t id = b->next_id_++;
      msg::CacheHello hello;
      hello.request_id = id;
      hello.pid = static_cast<int32_t>(::getpid());
      hello.heartbeat_interval_ms = static_cast<uint32_t>(config.heartbeat_interval.count());
      hello.arena_name = config.arena_name;
      ZM_RETURN_IF_ERROR(b->SendLocked(std::move(hello)));
      const auto resend = Clock::now() + kHelloResend;
      while (!answered && Clock::now() < resend) {
        if (config.keep_waiting && !config.keep_waiting()) {
          return Status::Unavailable(fmt::format("stopped while waiting for the cache-manager at {}", config.endpoint));
        }
        if (Clock::now() > give_up) {
          return Status::DeadlineExceeded(fmt::format("the cache-manager at {} did not answer CacheHello within {} ms",
                                                      config.endpoint, config.connect_timeout.count()));
        }
        Result<msg::Received> got = b->channel_.Recv(kPollSlice);
        if (!got.ok()) continue;  // nothing yet, or a bad frame (counted)
        auto* r = std::get_if<msg::CacheHelloReply>(&got->message.body);
        if (r == nullptr || r->request_id != id) continue;  // stale
        reply = std::move(*r);
        b->confirmed_ = id + 1;
        answered = true;
      }
      if (!answered && !told && config.log) {
        config.log(fmt::format("waiting for the cache-manager at {}", config.endpoint));
        told = true;
      }
    }
    ++b->round_trips_;
  }
  if (const Status refused = msg::StatusOf(reply); !refused.ok()) {
    return refused.WithContext(fmt::format("cache-manager at {} refused this scheduler", config.endpoint));
  }
  if (!config.arena_name.empty() && reply.arena_name != config.arena_name) {
    return Status::InvalidArgument(fmt::format("arena mismatch: the cache-manager at {} serves arena {}, this "
                                               "scheduler is configured for {} (shm_name)",
                                               config.endpoint, reply.arena_name, config.arena_name));
  }
  ZM_ASSIGN_OR_RETURN(ShmRegion attached, ShmRegion::Attach(reply.arena_name));
  b->arena_.emplace(std::move(attached));
  if (b->arena_->size_bytes() != reply.arena_bytes) {
    return Status::InvalidArgument(fmt::format("arena mismatch: {} maps {} bytes here, the cache-manager at {} "
                                               "reports {}", reply.arena_name, b->arena_->size_bytes(),
                                               config.endpoint, reply.arena_bytes));
  }
  cm::StagingLayout& sl = b->staging_layout_;
  sl.e_sm_bytes = reply.staging_e_sm_bytes;
  sl.e_plane_offset = reply.staging_e_plane_offset;
  sl.bf16_offset = reply.staging_bf16_offset;
  sl.slot_bytes = reply.staging_slot_bytes;
  if (reply.staging_offsets.empty()) {
    return Status::InvalidArgument(fmt::format("cache-manager at {} granted no staging slot", config.endpoint));
  }
  for (uint64_t offset : reply.staging_offsets) {
    if (offset > reply.arena_bytes || sl.slot_bytes > reply.arena_bytes - offset) {
      return Status::InvalidArgument(fmt::format("cache-manager at {}: staging slot at offset {} (+{} bytes) lies "
                                                 "outside the arena ({} bytes)", config.endpoint, offset,
                                                 sl.slot_bytes, reply.arena_bytes));
    }
  }
  b->staging_offsets_ = reply.staging_offsets;
  b->device_f_slots_ = reply.device_f_slots;
  {
    MutexLock lock(&b->staging_mu_);  // not yet shared; taken so the slots are only ever touched under it
    for (uint32_t s = static_cast<uint32_t>(b->staging_offsets_.size()); s-- > 0;) b->free_slots_.push_back(s);
    b->released_at_.assign(b->staging_offsets_.size(), 0);
  }

  cm::CostModel& cost = b->plan_.cost;
  cost.sm_read_us = reply.sm_read_us;
  cost.e_read_us = reply.e_read_us;
  cost.decompress_us = reply.decompress_us;
  cost.recovery_us = reply.recovery_us;
  cost.expert_compute_us = reply.expert_compute_us;
  cost.n_shards = reply.n_shards;
  cost.n_workers = offload->n_workers;
  b->plan_.cost_source = "cache-manager";
  offload->memory_budget_bytes = reply.budget_bytes;
  offload->memory_budget_percent = 0;
  offload->policy = static_cast<cm::CachePolicy>(reply.policy);
  offload->pools = reply.pools;
  offload->staging_slots = static_cast<uint32_t>(b->staging_offsets_.size());
  offload->shm_name = reply.arena_name;
  {
    MutexLock lock(&b->mu_);  // not yet shared (the heartbeat starts below); taken all the same
    if (config.pipe) {
      if (const Status piped = b->OpenPipeLocked(); !piped.ok() && config.log) {
        config.log("W: the link to the cache-manager stays on ZeroMQ: " + piped.ToString());
      }
    }
    b->last_send_ = Clock::now();
  }
  RemoteCacheBackend* raw = b.get();
  b->heartbeat_ = std::thread([raw] {
    SetCurrentThreadName("zm-cache-hb");
    raw->HeartbeatLoop();
  });
  return b;
}

RemoteCacheBackend::~RemoteCacheBackend() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    if (pipe_ != nullptr) {
      (void)pipe_->Send(msg::MakeDisconnect("scheduler stopping"), milliseconds(100));
    } else {
      (void)channel_.Send(msg::MakeDisconnect("scheduler stopping"), milliseconds(100));
    }
  }
  stop_cv_.NotifyAll();
  if (heartbeat_.joinable()) heartbeat_.join();
}

void RemoteCacheBackend::HeartbeatLoop() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    stop_cv_.WaitFor(&lock, config_.heartbeat_interval);
    if (stopping_) break;
    if (Clock::now() - last_send_ >= config_.heartbeat_interval) {
      (void)SendLocked(msg::MakeHeartbeat(static_cast<uint32_t>(config_.heartbeat_interval.count()), 0));
    }
  }
}

Status RemoteCacheBackend::SendHeldLocked() {
  if (!held_admit_.has_value()) return Status::Ok();
  msg::CacheAdmit batch = std::move(*held_admit_);
  held_admit_.reset();
  return SendLocked(std::move(batch));  // nothing is held now: it goes straight out
}

Status RemoteCacheBackend::SendRawLocked(msg::Body body) {
  if (pipe_ != nullptr) return pipe_->Send(std::move(body), config_.timeout);
  return channel_.Send(std::move(body), config_.timeout);
}

Result<msg::Body> RemoteCacheBackend::RecvLocked(milliseconds timeout) {
  if (pipe_ != nullptr) {
    ZM_ASSIGN_OR_RETURN(msg::Message got, pipe_->Recv(timeout));
    return std::move(got.body);
  }
  ZM_ASSIGN_OR_RETURN(msg::Received got, channel_.Recv(timeout));
  return std::move(got.message.body);
}

Status RemoteCacheBackend::OpenPipeLocked() {
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::ShmPipe> pipe, msg::ShmPipe::CreateForThisProcess("scheduler", "scheduler"));
  ZM_RETURN_IF_ERROR(msg::OfferPipe(channel_, *pipe, config_.timeout).WithContext("the cache-manager"));
  pipe_ = std::move(pipe);
  if (config_.log) config_.log(fmt::format("cache-manager link on the shared-memory pipe {}", pipe_->name()));
  return Status::Ok();
}

Status RemoteCacheBackend::SendLocked(msg::Body body) {
  ZM_RETURN_IF_ERROR(SendHeldLocked());
  const bool one_way = std::holds_alternative<msg::CacheAdmit>(body);
  Status st = SendRawLocked(std::move(body));
  if (st.ok()) {
    last_send_ = Clock::now();
    if (one_way) ++one_way_;
  }
  return st;
}

Result<msg::Body> RemoteCacheBackend::RoundTripLocked(uint64_t id, msg::Body body, const char* what) {
  // A lost session answers nothing more: fail at once rather than wait out the timeout once per call
  // (a provider thread looking up every layer in turn kept an "exiting" scheduler alive for minutes).
  if (session_lost_.load())
    return Status::Unavailable(fmt::format("the cache-manager at {} dropped this session; {} not sent",
                                           config_.endpoint, what));
  const trace::TraceSpan span("message", [&] { return std::string("round trip ") + what; });
  ZM_RETURN_IF_ERROR(SendHeldLocked());
  ZM_RETURN_IF_ERROR(SendRawLocked(std::move(body)));
  last_send_ = Clock::now();
  ++round_trips_;
  const auto deadline = Clock::now() + config_.timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() < 0) {
      if (pipe_ != nullptr) {
        // Nothing through the pipe: the cache-manager died (a restarted one never reads this pipe) or
        // hangs. Either way this session is gone; the scheduler exits on it and is started afresh.
        session_lost_.store(true);
        return Status::DeadlineExceeded(fmt::format("cache-manager at {} did not answer {} through the pipe {} within "
                                                    "{} ms: the session is lost", config_.endpoint, what,
                                                    pipe_->name(), config_.timeout.count()));
      }
      return Status::DeadlineExceeded(fmt::format("cache-manager at {} did not answer {} within {} ms",
                                                  config_.endpoint, what, config_.timeout.count()));
    }
    Result<msg::Body> got = RecvLocked(std::max(left, milliseconds(1)));
    if (!got.ok()) {
      if (pipe_ != nullptr && pipe_->broken()) return got.status();  // nothing more will come through it
      if (got.status().code() == StatusCode::kDeadlineExceeded || got.status().code() == StatusCode::kCorruption ||
          got.status().code() == StatusCode::kInvalidArgument) {
        continue;  // timeout (checked above) or a bad frame (counted, dropped)
      }
      return got.status();
    }
    msg::Body& reply = *got;
    uint64_t reply_id = 0;
    if (auto* r = std::get_if<msg::CacheLookupReply>(&reply)) reply_id = r->request_id;
    if (auto* r = std::get_if<msg::CacheReply>(&reply)) reply_id = r->request_id;
    if (auto* r = std::get_if<msg::CacheStats>(&reply)) reply_id = r->request_id;
    if (reply_id != id) continue;  // stale reply of a request that timed out
    if (confirmed_ < id + 1) confirmed_ = id + 1;
    return std::move(reply);
  }
}

void RemoteCacheBackend::SetDeviceEpoch(uint64_t epoch) {
  MutexLock lock(&mu_);
  device_epoch_ = epoch;
}

void RemoteCacheBackend::ObserveScores(int32_t layer_id, const std::vector<float>& mean_scores) {
  MutexLock lock(&mu_);
  scores_layer_ = layer_id;
  scores_ = mean_scores;
}

Status RemoteCacheBackend::LookupLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                                       std::vector<CachedExpert>* out) {
  return LookupOrPinLayer(layer_id, expert_ids, /*pin_only=*/false, out);
}

Status RemoteCacheBackend::PinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids,
                                    std::vector<CachedExpert>* out) {
  return LookupOrPinLayer(layer_id, expert_ids, /*pin_only=*/true, out);
}

Status RemoteCacheBackend::LookupOrPinLayer(int32_t layer_id, const std::vector<int32_t>& expert_ids, bool pin_only,
                                            std::vector<CachedExpert>* out) {
  msg::CacheLookupReply reply;
  {
    MutexLock lock(&mu_);
    const uint64_t id = next_id_++;
    msg::CacheLookup lookup;
    lookup.request_id = id;
    lookup.layer_id = layer_id;
    lookup.expert_ids = expert_ids;
    lookup.pin_only = pin_only;
    lookup.device_epoch = device_epoch_;
    if (!pin_only && scores_layer_ == layer_id) {  // this step's (ObserveScores)
      lookup.scores = std::move(scores_);
      scores_layer_ = -1;
      scores_.clear();
    }
    ZM_ASSIGN_OR_RETURN(msg::Body body, RoundTripLocked(id, std::move(lookup), pin_only ? "CacheLookup(pin)" : "CacheLookup"));
    ZM_ASSIGN_OR_RETURN(reply, ReplyAs<msg::CacheLookupReply>(std::move(body), config_.endpoint));
    totals_.calls = reply.admit_calls;
    for (size_t o = 0; o < totals_.outcomes.size() && o < reply.admit_outcomes.size(); ++o) {
      totals_.outcomes[o] = reply.admit_outcomes[o];
    }
  }
  if (const Status st = msg::StatusOf(reply); !st.ok()) return NoteSessionLoss(st);
  std::vector<uint64_t> leases;
  for (const msg::CacheEntry& e : reply.entries) {
    if (e.lease_id() != kNoLease) leases.push_back(e.lease_id());
  }
  auto fail = [&](Status st) {
    if (!leases.empty()) ReleaseLeases(leases);
    return st;
  };
  if (const Status admit = msg::StatusFrom(reply.admit_status_code, reply.admit_message); !admit.ok()) {
    return fail(admit.WithContext("an earlier admission failed"));
  }
  if (reply.entries.size() != expert_ids.size()) {
    return fail(Status::Corruption(fmt::format("cache-manager at {}: {} entries for the {} experts of layer {}",
                                               config_.endpoint, reply.entries.size(), expert_ids.size(), layer_id)));
  }
  const bool device_f = !reply.device_slots.empty();
  if (device_f && (device_f_slots_ < 0 || reply.device_slots.size() != expert_ids.size() ||
                   reply.device_fills.size() != expert_ids.size())) {
    return fail(Status::Corruption(fmt::format(
        "cache-manager at {}: {} device slots and {} reservations for the {} experts of layer {} (pool F on the "
        "device: {} slots)", config_.endpoint, reply.device_slots.size(), reply.device_fills.size(),
        expert_ids.size(), layer_id, device_f_slots_)));
  }
  out->clear();
  out->reserve(expert_ids.size());
  uint8_t* base = arena_->data();
  const uint64_t size = arena_->size_bytes();
  for (size_t i = 0; i < expert_ids.size(); ++i) {
    const msg::CacheEntry& e = reply.entries[i];
    CachedExpert c;
    c.layer_id = layer_id;
    c.expert_id = expert_ids[i];
    c.state = static_cast<CompressionState>(e.state());
    c.layout = layout_.Find(layer_id, c.expert_id);
    c.lease = e.lease_id();
    if (e.expert_id() != c.expert_id || c.layout == nullptr) {
      return fail(Status::Corruption(fmt::format("cache-manager at {}: entry {} of layer {} is expert {}, asked {}",
                                                 config_.endpoint, i, layer_id, e.expert_id(), c.expert_id)));
    }
    if (device_f && reply.device_slots[i] >= 0) {
      if (reply.device_slots[i] >= device_f_slots_) {
        return fail(Status::Corruption(fmt::format("cache-manager at {}: layer {} expert {} in device slot {} of {}",
                                                   config_.endpoint, layer_id, c.expert_id, reply.device_slots[i],
                                                   device_f_slots_)));
      }
      c.device_slot = reply.device_slots[i];
      c.device_fill = reply.device_fills[i];
    }
    if (c.state == CompressionState::kF && c.device_slot >= 0 && !c.device_fill) {
      // An F hit on the executor's device: its bytes are there, none in the arena.
    } else if (c.state != CompressionState::kMiss) {
      const cm::Pool pool = PoolOfState(c.state);
      const uint64_t bytes = c.layout->PoolBytes(pool);
      if (e.slot_offset() > size || bytes > size - e.slot_offset()) {
        return fail(Status::Corruption(fmt::format("cache-manager at {}: layer {} expert {} in pool {} at offset {} "
                                                   "(+{} bytes) lies outside the arena {} ({} bytes)",
                                                   config_.endpoint, layer_id, c.expert_id, cm::PoolLetter(pool),
                                                   e.slot_offset(), bytes, arena_->name(), size)));
      }
      c.slot_offset = e.slot_offset();
      uint8_t* slot = base + e.slot_offset();
      if (cm::PoolHoldsE(pool)) c.e_part = slot;
      if (cm::PoolHoldsSm(pool)) c.sm_part = slot + c.layout->SmPartOffset(pool);
      if (cm::PoolHoldsBf16(pool)) c.f_part = slot;
    }
    out->push_back(c);
  }
  return Status::Ok();
}

Status RemoteCacheBackend::Admit(const CacheAdmitRequest& request) {
  MutexLock lock(&mu_);
  if (admit_holds_ > 0) {
    // Held: the item's id is taken now (ReleaseStaging compares with it); the batch carries the last.
    if (!held_admit_.has_value()) held_admit_.emplace();
    held_admit_->request_id = next_id_++;
    held_admit_->items.push_back(std::make_unique<msg::CacheAdmitItem>(CacheAdmitToWire(request)));
    return Status::Ok();
  }
  msg::CacheAdmit admit;
  admit.request_id = next_id_++;
  admit.items.push_back(std::make_unique<msg::CacheAdmitItem>(CacheAdmitToWire(request)));
  return SendLocked(std::move(admit));
}

void RemoteCacheBackend::HoldAdmits() {
  MutexLock lock(&mu_);
  ++admit_holds_;
}

Status RemoteCacheBackend::FlushAdmits() {
  MutexLock lock(&mu_);
  if (admit_holds_ > 0) --admit_holds_;
  if (admit_holds_ > 0) return Status::Ok();
  return SendHeldLocked();
}

void RemoteCacheBackend::ReleaseLeases(const std::vector<uint64_t>& leases) {
  msg::CacheAdmit release;
  for (uint64_t lease : leases) {
    auto item = std::make_unique<msg::CacheAdmitItem>();
    item->lease_id = lease;
    release.items.push_back(std::move(item));
  }
  MutexLock lock(&mu_);
  release.request_id = next_id_++;
  Status st = SendLocked(std::move(release));
  if (!st.ok() && config_.log) config_.log("E: releasing leases at the cache-manager: " + st.ToString());
}

Status RemoteCacheBackend::Sync() {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  msg::CacheAdmit sync;
  sync.request_id = id;
  sync.want_reply = true;
  ZM_ASSIGN_OR_RETURN(msg::Body body, RoundTripLocked(id, std::move(sync), "CacheAdmit (sync)"));
  ZM_ASSIGN_OR_RETURN(msg::CacheReply reply, ReplyAs<msg::CacheReply>(std::move(body), config_.endpoint));
  return NoteSessionLoss(msg::StatusOf(reply));
}

Status RemoteCacheBackend::NoteSessionLoss(Status status) {
  // The cache-manager's words for a client it does not know (cache_server.cc).
  if (status.code() == StatusCode::kUnavailable && status.message().find("no CacheHello") != std::string::npos) {
    session_lost_.store(true);
  }
  return status;
}

Result<uint32_t> RemoteCacheBackend::AcquireStaging() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      MutexLock lock(&staging_mu_);
      if (free_slots_.empty()) {
        return Status::Unavailable(fmt::format("all {} staging slots are in use", staging_offsets_.size()));
      }
      const uint64_t confirmed = confirmed_.load();
      for (size_t i = free_slots_.size(); i-- > 0;) {
        const uint32_t slot = free_slots_[i];
        if (released_at_[slot] <= confirmed) {
          free_slots_.erase(free_slots_.begin() + static_cast<std::ptrdiff_t>(i));
          return slot;
        }
      }
    }
    // Every free slot may still be an admission's source: wait until the server has done them.
    ZM_RETURN_IF_ERROR(Sync());
  }
  return Status::Internal("staging slot still unconfirmed after a sync");
}

void RemoteCacheBackend::ReleaseStaging(uint32_t slot) {
  MutexLock lock(&staging_mu_);
  ZM_CHECK(slot < staging_offsets_.size()) << slot;
  released_at_[slot] = next_id_.load();
  free_slots_.push_back(slot);
}

Result<cm::CacheCounters> RemoteCacheBackend::Counters() {
  MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  msg::CacheStatsRequest request;
  request.request_id = id;
  ZM_ASSIGN_OR_RETURN(msg::Body body, RoundTripLocked(id, std::move(request), "CacheStatsRequest"));
  ZM_ASSIGN_OR_RETURN(msg::CacheStats stats, ReplyAs<msg::CacheStats>(std::move(body), config_.endpoint));
  return CacheCountersFromWire(stats);
}

AdmitTotals RemoteCacheBackend::admit_totals() const {
  MutexLock lock(&mu_);
  return totals_;
}

uint64_t RemoteCacheBackend::round_trips() const {
  MutexLock lock(&mu_);
  return round_trips_;
}

uint64_t RemoteCacheBackend::one_way_sends() const {
  MutexLock lock(&mu_);
  return one_way_;
}

messaging::ChannelStats RemoteCacheBackend::channel_stats() const {
  MutexLock lock(&mu_);
  return pipe_ != nullptr ? channel_.stats() + pipe_->stats() : channel_.stats();
}

uint64_t RemoteCacheBackend::bad_messages() const { return channel_stats().bad_messages; }

bool RemoteCacheBackend::on_pipe() const {
  MutexLock lock(&mu_);
  return pipe_ != nullptr;
}

CacheBackendFactory RemoteCacheBackendFactory(RemoteCacheConfig config) {
  return [config](OffloadConfig* offload, const Manifest& manifest) -> Result<std::unique_ptr<CacheBackend>> {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<RemoteCacheBackend> b, RemoteCacheBackend::Connect(config, manifest, offload));
    return std::unique_ptr<CacheBackend>(std::move(b));
  };
}

}  // namespace zipmoe::runtime
