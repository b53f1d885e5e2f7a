#include "services/runtime/remote_provider.h"

#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/event_fd.h"
#include "common/mutex.h"
#include "common/router_server.h"
#include "common/trace_events.h"

namespace zipmoe::runtime {

namespace msg = messaging;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {
// The ProviderServer's loop waits this long when idle; a posted reply wakes it at once.
constexpr milliseconds kExecutorPollInterval{500};
}  // namespace

// ---- executor side --------------------------------------------------------------------------------

class RemoteExpertProvider::Lease : public ExpertLease {
 public:
  Lease(RemoteExpertProvider* owner, ExpertWeightsView view) : owner_(owner), view_(view) {}
  ~Lease() override { owner_->Release(view_.layer_id, view_.expert_id); }
  const ExpertWeightsView& weights() const override { return view_; }

 private:
  RemoteExpertProvider* owner_;
  ExpertWeightsView view_;
};

RemoteExpertProvider::RemoteExpertProvider(const RemoteProviderConfig& config, ShmRegion arena,
                                           std::unique_ptr<zmq::context_t> context, msg::Channel channel)
    : config_(config), arena_(std::move(arena)), context_(std::move(context)), channel_(std::move(channel)) {}

Result<std::unique_ptr<RemoteExpertProvider>> RemoteExpertProvider::Connect(const RemoteProviderConfig& config) {
  ZM_ASSIGN_OR_RETURN(ShmRegion arena, ShmRegion::Attach(config.arena_name));
  auto context = std::make_unique<zmq::context_t>(1);
  msg::ChannelOptions options;
  options.kind = msg::SocketKind::kDealer;
  options.endpoint = config.endpoint;
  options.sender = "executor";
  ZM_ASSIGN_OR_RETURN(msg::Channel channel, msg::Channel::Open(*context, options));
  std::optional<kernels::HostRegistration> registration;
  if (config.register_with_cuda) {
    Result<kernels::HostRegistration> r = kernels::HostRegistration::Register(arena.data(), arena.size_bytes());
    if (r.ok()) {
      registration.emplace(std::move(r).value());
    } else if (r.status().code() == StatusCode::kUnavailable) {
      std::fprintf(stderr, "I: executor: arena %s not registered with CUDA (%s)\n", config.arena_name.c_str(),
                   r.status().ToString().c_str());
    } else {
      return r.status().WithContext("registering the arena " + config.arena_name + " with CUDA");
    }
  }
  auto provider = std::unique_ptr<RemoteExpertProvider>(
      new RemoteExpertProvider(config, std::move(arena), std::move(context), std::move(channel)));
  provider->registration_ = std::move(registration);
  return provider;
}

messaging::ChannelStats RemoteExpertProvider::channel_stats() const {
  MutexLock lock(&mu_);
  return channel_.stats();
}

uint64_t RemoteExpertProvider::bad_messages() const {
  MutexLock lock(&mu_);
  return channel_.stats().bad_messages;
}

Result<msg::Body> RemoteExpertProvider::Receive(const char* what) {
  const auto deadline = Clock::now() + config_.timeout;
  while (true) {
    {
      MutexLock lock(&mu_);
      if (!inbox_.empty()) {
        msg::Body body = std::move(inbox_.front());
        inbox_.pop_front();
        return body;
      }
      Result<msg::Received> got = channel_.Recv(milliseconds(5));
      if (got.ok()) return std::move(got->message.body);
      if (got.status().code() != StatusCode::kDeadlineExceeded) continue;  // bad frame: counted, dropped
    }
    if (Clock::now() > deadline) {
      return Status::DeadlineExceeded(fmt::format("scheduler at {} did not answer {} within {} ms", config_.endpoint,
                                                  what, config_.timeout.count()));
    }
  }
}

bool RemoteExpertProvider::NextIsReady() const {
  if (delivered_ >= expected_) return false;
  const auto ready_here = [this](const msg::Body& body) {
    const auto* ready = std::get_if<msg::ExpertReady>(&body);
    return ready != nullptr && ready->layer_id == layer_id_;
  };
  MutexLock lock(&mu_);
  for (const msg::Body& body : inbox_) {
    if (ready_here(body)) return true;
  }
  for (;;) {  // what has arrived, without waiting
    Result<msg::Received> got = channel_.Recv(milliseconds(0));
    if (!got.ok()) {
      const StatusCode code = got.status().code();
      if (code == StatusCode::kCorruption || code == StatusCode::kInvalidArgument) continue;  // a bad frame: dropped
      return false;  // nothing more now (or a broken socket, which NextReady reports)
    }
    inbox_.push_back(std::move(got->message.body));
    if (ready_here(inbox_.back())) return true;
  }
}

bool RemoteExpertProvider::AbsorbAck(const msg::Body& body) {
  const auto* ack = std::get_if<msg::Ack>(&body);
  if (ack == nullptr) return false;
  if (unacked_ends_ > 0) --unacked_ends_;
  if (const Status st = msg::StatusOf(*ack); !st.ok() && deferred_.ok()) {
    deferred_ = st.WithContext("the scheduler refused a LayerEnd");
  }
  return true;
}

Status RemoteExpertProvider::TakeDeferred() {
  Status st = std::move(deferred_);
  deferred_ = Status::Ok();
  return st;
}

Status RemoteExpertProvider::Flush() {
  {
    MutexLock lock(&mu_);
    FlushReleasesLocked();
  }
  while (unacked_ends_ > 0) {
    ZM_ASSIGN_OR_RETURN(msg::Body body, Receive("LayerEnd"));
    (void)AbsorbAck(body);  // anything else here is stale (heartbeat answers, an aborted layer's)
  }
  return TakeDeferred();
}

Status RemoteExpertProvider::Ping(milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  MutexLock lock(&mu_);
  for (const msg::Body& body : inbox_) (void)AbsorbAck(body);  // the rest is stale here, as below
  inbox_.clear();
  ZM_RETURN_IF_ERROR(channel_.Send(msg::MakeHeartbeat(0, 0), wait));
  while (Clock::now() < deadline) {
    Result<msg::Received> got = channel_.Recv(milliseconds(5));
    if (!got.ok()) continue;
    if (std::holds_alternative<msg::Heartbeat>(got->message.body)) return Status::Ok();
    (void)AbsorbAck(got->message.body);
  }
  return Status::Unavailable(fmt::format("scheduler at {} did not answer within {} ms", config_.endpoint,
                                         wait.count()));
}

void RemoteExpertProvider::Prefetch(const LayerRouting& predicted) {
  if (config_.prefetch == PrefetchMode::kNone) return;
  MutexLock lock(&mu_);
  (void)channel_.Send(LayerRequestToWire(predicted, /*prefetch=*/true), config_.timeout);
}

Status RemoteExpertProvider::BeginLayer(const LayerRouting& routing) {
  if (trace::Enabled()) {
    trace::Instant("message", fmt::format("send LayerRequest (layer {}, {} experts)", routing.layer_id,
                                          routing.expert_ids.size()));
  }
  if (routing.expert_ids.size() != routing.tokens_per_expert.size()) {
    return Status::InvalidArgument(fmt::format("BeginLayer({}): {} experts but {} token counts", routing.layer_id,
                                               routing.expert_ids.size(), routing.tokens_per_expert.size()));
  }
  ZM_RETURN_IF_ERROR(TakeDeferred());
  {
    MutexLock lock(&mu_);
    FlushReleasesLocked();  // leases that outlived their layer (an error path): the server drops them
    ZM_RETURN_IF_ERROR(channel_.Send(LayerRequestToWire(routing, /*prefetch=*/false), config_.timeout));
  }
  layer_id_ = routing.layer_id;
  expected_ = routing.expert_ids.size();
  delivered_ = 0;
  return Status::Ok();
}

Result<std::unique_ptr<ExpertLease>> RemoteExpertProvider::NextReady() {
  if (delivered_ >= expected_) {
    return Status::InvalidArgument(fmt::format("NextReady: all {} experts of layer {} were delivered", expected_,
                                               layer_id_));
  }
  {
    // The leases of the group computed since the last NextReady, in one message (as soon as the
    // one-by-one sends would have gone: the executor releases a group before taking the next).
    MutexLock lock(&mu_);
    FlushReleasesLocked();
  }
  const trace::TraceSpan span("message", [&] { return fmt::format("recv ExpertReady (layer {})", layer_id_); });
  while (true) {
    ZM_ASSIGN_OR_RETURN(msg::Body body, Receive("NextReady"));
    if (AbsorbAck(body)) {  // the previous layer's LayerEnd answered
      ZM_RETURN_IF_ERROR(TakeDeferred());
      continue;
    }
    auto* ready = std::get_if<msg::ExpertReady>(&body);
    if (ready == nullptr) continue;  // a stale heartbeat
    if (const Status failed = msg::StatusOf(*ready); !failed.ok()) return failed;
    if (ready->layer_id != layer_id_) continue;  // stale message of an aborted layer
    ZM_ASSIGN_OR_RETURN(const ExpertWeightsView view, ExpertWeightsFromWire(*ready, arena_, config_.endpoint));
    ++delivered_;
    return std::unique_ptr<ExpertLease>(new Lease(this, view));
  }
}

void RemoteExpertProvider::Release(int32_t layer_id, int32_t expert_id) {
  MutexLock lock(&mu_);
  if (!released_.empty() && released_layer_ != layer_id) FlushReleasesLocked();
  released_layer_ = layer_id;
  released_.push_back(expert_id);
}

void RemoteExpertProvider::FlushReleasesLocked() {
  if (released_.empty()) return;
  msg::LeaseRelease release;
  release.layer_id = released_layer_;
  release.expert_ids = std::move(released_);
  released_.clear();
  (void)channel_.Send(std::move(release), config_.timeout);
}

Status RemoteExpertProvider::EndLayer(int32_t layer_id) {
  const trace::TraceSpan span("message", [&] { return fmt::format("send LayerEnd (layer {})", layer_id); });
  {
    MutexLock lock(&mu_);
    if (!released_.empty() && released_layer_ != layer_id) FlushReleasesLocked();
    msg::LayerEnd end;
    end.layer_id = layer_id;
    end.released_expert_ids = std::move(released_);  // the last group's releases ride along
    released_.clear();
    ZM_RETURN_IF_ERROR(channel_.Send(std::move(end), config_.timeout));
  }
  ++unacked_ends_;
  return TakeDeferred();
}

// ---- scheduler side -------------------------------------------------------------------------------

struct ProviderServer::State : msg::RouterServer::Handler {
  State(ProviderServerConfig c, ExpertProvider* p, const uint8_t* base, uint64_t bytes,
        std::unique_ptr<msg::RouterServer> r)
      : config(std::move(c)), provider(p), arena_base(base), arena_bytes(bytes), server(std::move(r)) {}

  const ProviderServerConfig config;
  ExpertProvider* const provider;
  const uint8_t* const arena_base;
  const uint64_t arena_bytes;
  const std::unique_ptr<msg::RouterServer> server;  // its channel: the loop thread's only
  std::thread deliver_thread;
  Mutex stop_mu;  // one Stop at a time; guards joined
  bool joined ZM_GUARDED_BY(stop_mu) = false;

  Mutex mu;  // guards everything below
  CondVar cv;  // waits on mu
  bool stopping ZM_GUARDED_BY(mu) = false;
  // The open layer.
  bool active ZM_GUARDED_BY(mu) = false;
  int32_t layer_id ZM_GUARDED_BY(mu) = -1;
  std::string peer ZM_GUARDED_BY(mu);                 // the executor that opened it
  size_t to_deliver ZM_GUARDED_BY(mu) = 0;            // NextReady calls the deliverer still has to make
  bool delivering ZM_GUARDED_BY(mu) = false;          // the deliverer is inside the layer
  bool aborting ZM_GUARDED_BY(mu) = false;            // release leases as they come
  std::map<int32_t, std::unique_ptr<ExpertLease>> leases ZM_GUARDED_BY(mu);  // by expert id
  std::deque<std::pair<std::string, msg::Body>> outbox ZM_GUARDED_BY(mu);
  ProviderServerStats stats ZM_GUARDED_BY(mu);

  void Log(const std::string& line) const {
    if (config.log) config.log(line);
  }
  void Post(std::string to, msg::Body body) ZM_REQUIRES(mu) {
    outbox.emplace_back(std::move(to), std::move(body));
    server->Wake();
  }
  void Deliver();
  // msg::RouterServer::Handler, on the loop thread.
  void OnTick(std::chrono::steady_clock::time_point now) override;
  void OnMessage(msg::Received& got) override { Handle(got.peer, std::move(got.message.body)); }
  void OnBadMessage(const Status& bad) override;
  void OnLoopError(const Status& error) override { Log("E: " + error.ToString()); }
  // Releases and retakes mu (held by the caller's `lock`) while the layer's leases go.
  void AbortLocked(MutexLock* lock) ZM_REQUIRES(mu);
  // Destroys the open layer's leases on `expert_ids` (admission, next wave), mu released meanwhile;
  // releases of another layer or of experts not held are stale and ignored.
  void ReleaseLocked(int32_t layer, const std::vector<int32_t>& expert_ids) ZM_REQUIRES(mu);
  void Handle(const std::string& peer, msg::Body body);
};

void ProviderServer::State::Deliver() {
  MutexLock lock(&mu);
  while (true) {
    cv.Wait(&lock, [&]() ZM_REQUIRES(mu) { return stopping || to_deliver > 0; });
    if (stopping) return;
    delivering = true;
    while (to_deliver > 0 && !stopping) {
      lock.Unlock();
      Result<std::unique_ptr<ExpertLease>> lease = provider->NextReady();
      lock.Lock();
      --to_deliver;
      if (!lease.ok()) {
        msg::ExpertReady failed;
        failed.layer_id = layer_id;
        msg::SetStatus(&failed, lease.status());
        Post(peer, std::move(failed));
        to_deliver = 0;
        break;
      }
      const ExpertWeightsView& v = (*lease)->weights();
      if (aborting) {
        std::unique_ptr<ExpertLease> drop = std::move(lease).value();
        lock.Unlock();
        drop.reset();
        lock.Lock();
        continue;
      }
      msg::ExpertReady ready = ExpertReadyToWire(v, arena_base);
      leases[v.expert_id] = std::move(lease).value();
      Post(peer, std::move(ready));
    }
    delivering = false;
    cv.NotifyAll();
  }
}

void ProviderServer::State::AbortLocked(MutexLock* lock) {
  if (!active) return;
  ++stats.aborted_layers;
  Log(fmt::format("aborting layer {} of a previous executor", layer_id));
  aborting = true;
  std::map<int32_t, std::unique_ptr<ExpertLease>> held;
  held.swap(leases);
  mu.Unlock();
  held.clear();  // releases: later waves can start, so the deliverer finishes
  mu.Lock();
  cv.Wait(lock, [&]() ZM_REQUIRES(mu) { return !delivering && to_deliver == 0; });
  held.swap(leases);
  const int32_t ending = layer_id;  // only Handle (this thread) changes it
  mu.Unlock();
  held.clear();
  (void)provider->EndLayer(ending);
  mu.Lock();
  aborting = false;
  active = false;
}

void ProviderServer::State::ReleaseLocked(int32_t layer, const std::vector<int32_t>& expert_ids) {
  if (!active || layer != layer_id) return;  // stale
  std::vector<std::unique_ptr<ExpertLease>> released;
  for (int32_t expert : expert_ids) {
    auto it = leases.find(expert);
    if (it == leases.end()) continue;  // stale
    released.push_back(std::move(it->second));
    leases.erase(it);
  }
  if (released.empty()) return;
  mu.Unlock();
  released.clear();  // admission + next wave (OffloadExpertProvider::OnLeaseReleased)
  mu.Lock();
}

void ProviderServer::State::Handle(const std::string& from, msg::Body body) {
  const trace::TraceSpan span("message", [&] { return std::string("handle ") + msg::BodyName(body); },
                               trace::Activity::kHandleMessage);
  MutexLock lock(&mu);
  if (auto* request = std::get_if<msg::LayerRequest>(&body); request != nullptr && request->prefetch) {
    // A prediction for a later layer of the same executor: the open layer stays open.
    const LayerRouting predicted = LayerRoutingFromWire(*request);
    lock.Unlock();
    provider->Prefetch(predicted);
    return;
  }
  if (auto* request = std::get_if<msg::LayerRequest>(&body)) {
    if (active) AbortLocked(&lock);
    const LayerRouting routing = LayerRoutingFromWire(*request);
    lock.Unlock();
    Status st = provider->BeginLayer(routing);
    lock.Lock();
    if (!st.ok()) {
      msg::ExpertReady failed;
      failed.layer_id = request->layer_id;
      msg::SetStatus(&failed, st);
      Post(from, std::move(failed));
      return;
    }
    active = true;
    layer_id = request->layer_id;
    peer = from;
    to_deliver = request->expert_ids.size();
    cv.NotifyAll();
    return;
  }
  if (auto* release = std::get_if<msg::LeaseRelease>(&body)) {
    ReleaseLocked(release->layer_id, release->expert_ids);
    return;
  }
  if (auto* end = std::get_if<msg::LayerEnd>(&body)) {
    ReleaseLocked(end->layer_id, end->released_expert_ids);
    Status st;
    if (!active || end->layer_id != layer_id) {
      st = Status::InvalidArgument(fmt::format("EndLayer({}): the open layer is {}", end->layer_id,
                                               active ? std::to_string(layer_id) : std::string("none")));
    } else if (delivering || to_deliver > 0 || !leases.empty()) {
      st = Status::InvalidArgument(fmt::format("EndLayer({}): {} experts not yet taken, {} leases held", end->layer_id,
                                               to_deliver, leases.size()));
    } else {
      lock.Unlock();
      st = provider->EndLayer(end->layer_id);
      lock.Lock();
      active = false;
      ++stats.layers;
    }
    msg::Ack ack;
    msg::SetStatus(&ack, st);
    Post(from, std::move(ack));
    return;
  }
  // A ping of an executor that is connecting (RemoteExpertProvider::Ping): answer it.
  if (std::holds_alternative<msg::Heartbeat>(body)) Post(from, msg::MakeHeartbeat(0, 0));
  // Anything else: nothing to do.
}

void ProviderServer::State::OnTick(std::chrono::steady_clock::time_point) {
  std::deque<std::pair<std::string, msg::Body>> out;
  {
    MutexLock lock(&mu);
    out.swap(outbox);
  }
  for (auto& [to, body] : out) {
    Status st = server->channel().SendTo(to, std::move(body), milliseconds(1000));
    if (!st.ok()) Log(fmt::format("E: reply to executor: {}", st.ToString()));
  }
}

void ProviderServer::State::OnBadMessage(const Status& bad) {
  MutexLock lock(&mu);
  ++stats.bad_messages;
  Log(fmt::format("E: dropped a bad message: {}", bad.ToString()));
}

ProviderServer::ProviderServer(std::unique_ptr<State> s) : s_(std::move(s)) {}

Result<std::unique_ptr<ProviderServer>> ProviderServer::Start(zmq::context_t& context, ProviderServerConfig config,
                                                              ExpertProvider* provider, const uint8_t* arena_base,
                                                              uint64_t arena_bytes) {
  msg::ChannelOptions options;
  options.endpoint = config.endpoint;
  options.sender = "scheduler";
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::RouterServer> router, msg::RouterServer::Bind(context, options));
  auto state = std::make_unique<State>(std::move(config), provider, arena_base, arena_bytes, std::move(router));
  std::unique_ptr<ProviderServer> server(new ProviderServer(std::move(state)));
  State* s = server->s_.get();
  s->deliver_thread = std::thread([s] { s->Deliver(); });
  s->server->Start(s, kExecutorPollInterval);
  return server;
}

ProviderServer::~ProviderServer() { Stop(); }

void ProviderServer::Stop() {
  MutexLock stop_lock(&s_->stop_mu);
  if (s_->joined) return;
  std::map<int32_t, std::unique_ptr<ExpertLease>> held;
  {
    MutexLock lock(&s_->mu);
    s_->stopping = true;
    held.swap(s_->leases);
  }
  held.clear();
  s_->cv.NotifyAll();
  s_->server->Stop();
  // The deliverer may sit in NextReady until the provider's engines stop (the provider's owner does that).
  if (s_->deliver_thread.joinable()) s_->deliver_thread.join();
  {
    MutexLock lock(&s_->mu);  // both threads are gone; taken so the leases are only ever touched under it
    held.swap(s_->leases);
  }
  held.clear();
  s_->joined = true;
}

ProviderServerStats ProviderServer::stats() const {
  MutexLock lock(&s_->mu);
  return s_->stats;
}

std::string ProviderServer::endpoint() const { return s_->server->endpoint(); }

}  // namespace zipmoe::runtime
