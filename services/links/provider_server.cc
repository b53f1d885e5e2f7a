// ProviderServer (services/links/remote_provider.h): the scheduler side of the executor protocol. A
// ROUTER loop (common/ipc/router_server.h) takes LayerRequests, lease releases and LayerEnds. The ready
// experts go back (those ready together in one ExpertsReady frame) from the thread that made them
// ready: the provider's ready listener (ExpertProvider::SetReadyListener) runs DeliverReady on the
// completion's thread, and the LayerRequest's handler delivers the cache hits. A provider without a
// listener gets a deliverer thread that waits in its NextReady. An executor that opened a shared-memory pipe (PipeOpen)
// is served by a reader thread on that pipe instead, and replies to it are written straight into the
// pipe by whichever thread posts them (no hop through the loop).
#include "services/links/remote_provider.h"

#include <algorithm>
#include <deque>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/event_fd.h"
#include "common/mutex.h"
#include "common/ipc/router_server.h"
#include "common/ipc/shm_pipe.h"
#include "common/thread_name.h"
#include "common/trace_events.h"

namespace zipmoe::runtime {

namespace msg = messaging;
using std::chrono::milliseconds;

namespace {
// The ProviderServer's loop waits this long when idle; a posted reply wakes it at once.
constexpr milliseconds kExecutorPollInterval{500};
// The peer name of messages that came through a pipe: never a ZeroMQ routing id (those are given by
// the executor's DEALER: random 5 bytes starting with 0).
constexpr char kPipePeerPrefix[] = "pipe:";
}  // namespace

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
  // With a ready listener (the provider calls DeliverReady on the thread that made an expert ready):
  // no deliverer thread; one thread at a time delivers (`deliver_busy`), another that finds it busy
  // leaves `deliver_pending` for it.
  bool listener = false;                              // constant after Start
  bool deliver_busy ZM_GUARDED_BY(mu) = false;
  bool deliver_pending ZM_GUARDED_BY(mu) = false;
  bool aborting ZM_GUARDED_BY(mu) = false;            // release leases as they come
  std::map<int32_t, std::unique_ptr<ExpertLease>> leases ZM_GUARDED_BY(mu);  // by expert id
  std::deque<std::pair<std::string, msg::Body>> outbox ZM_GUARDED_BY(mu);
  ProviderServerStats stats ZM_GUARDED_BY(mu);
  // The newest executor's pipe and the peer name its messages carry; a reply to an older pipe's peer
  // is dropped (that executor is gone).
  std::shared_ptr<msg::ShmPipe> pipe ZM_GUARDED_BY(mu);
  std::string pipe_peer ZM_GUARDED_BY(mu);

  // The pipe's reader: started and stopped by the loop thread (OpenPipe), and by Stop once the loop
  // has ended.
  std::unique_ptr<msg::PipeReader> pipe_reader;
  Mutex handle_mu;  // one Handle at a time: the loop's messages and the pipe's

  void Log(const std::string& line) const {
    if (config.log) config.log(line);
  }
  void Post(std::string to, msg::Body body) ZM_REQUIRES(mu) {
    if (to.rfind(kPipePeerPrefix, 0) == 0) {
      if (pipe == nullptr || to != pipe_peer) return;  // a replaced pipe: its executor is gone
      if (const Status st = pipe->Send(std::move(body), milliseconds(1000)); !st.ok()) {
        Log(fmt::format("E: reply to executor: {}", st.ToString()));
      }
      return;
    }
    outbox.emplace_back(std::move(to), std::move(body));
    server->Wake();
  }
  // PipeOpen (loop thread): attaches the executor's pipe, replaces the previous one and its reader,
  // and answers with an Ack over ZeroMQ.
  void OpenPipe(const std::string& from, const msg::PipeOpen& open);
  void StopPipeReader();
  void Deliver();
  // The listener's delivery: posts every expert of the open layer that is ready now (never waits).
  void DeliverReady() ZM_EXCLUDES(mu);
  // One NextReady result of the open layer (to_deliver counted down): a failure is posted after what
  // is in *ready; a lease is kept (its ExpertReady appended to *ready) or, aborting, dropped (mu
  // released meanwhile). False: the layer failed, nothing more to deliver.
  bool TakeLocked(Result<std::unique_ptr<ExpertLease>> lease, std::vector<msg::ExpertReady>* ready)
      ZM_REQUIRES(mu);
  // Posts *ready (one ExpertReady, or an ExpertsReady of several) to the layer's executor; clears it.
  void PostReady(std::vector<msg::ExpertReady>* ready) ZM_REQUIRES(mu);
  // msg::RouterServer::Handler, on the loop thread.
  void OnTick(std::chrono::steady_clock::time_point now) override;
  void OnMessage(msg::Received& got) override {
    if (const auto* open = std::get_if<msg::PipeOpen>(&got.message.body)) {
      OpenPipe(got.peer, *open);
      return;
    }
    Handle(got.peer, std::move(got.message.body));
  }
  void OnBadMessage(const Status& bad) override;
  void OnLoopError(const Status& error) override { Log("E: " + error.ToString()); }
  // Releases and retakes mu (held by the caller's `lock`) while the layer's leases go.
  void AbortLocked(MutexLock* lock) ZM_REQUIRES(mu);
  // Destroys the open layer's leases on `expert_ids` (admission, next wave), mu released meanwhile;
  // releases of another layer or of experts not held are stale and ignored.
  // `abandoned`: those of expert_ids the executor abandoned (ExpertLease::Abandon before release).
  void ReleaseLocked(int32_t layer, const std::vector<int32_t>& expert_ids, const std::vector<int32_t>& abandoned)
      ZM_REQUIRES(mu);
  void Handle(const std::string& peer, msg::Body body);
};

void ProviderServer::State::PostReady(std::vector<msg::ExpertReady>* ready) {
  if (ready->empty()) return;
  if (ready->size() == 1) {
    Post(peer, std::move(ready->front()));
  } else {
    msg::ExpertsReady batch;
    for (msg::ExpertReady& r : *ready) batch.items.push_back(std::make_unique<msg::ExpertReady>(std::move(r)));
    Post(peer, std::move(batch));
  }
  ready->clear();
}

bool ProviderServer::State::TakeLocked(Result<std::unique_ptr<ExpertLease>> lease,
                                       std::vector<msg::ExpertReady>* ready) {
  --to_deliver;
  if (!lease.ok()) {
    PostReady(ready);  // what was ready before the failure goes first
    msg::ExpertReady failed;
    failed.layer_id = layer_id;
    msg::SetStatus(&failed, lease.status());
    Post(peer, std::move(failed));
    to_deliver = 0;
    return false;
  }
  if (aborting) {
    ready->clear();
    std::unique_ptr<ExpertLease> drop = std::move(lease).value();
    mu.Unlock();
    drop.reset();
    mu.Lock();
    return true;
  }
  const ExpertWeightsView& v = (*lease)->weights();
  ready->push_back(ExpertReadyToWire(v, arena_base));
  leases[v.expert_id] = std::move(lease).value();
  return true;
}

void ProviderServer::State::DeliverReady() {
  MutexLock lock(&mu);
  deliver_pending = true;
  if (deliver_busy) return;  // that thread delivers this too
  deliver_busy = true;
  std::vector<msg::ExpertReady> ready;  // taken, not yet posted: the experts ready together
  while (deliver_pending && !stopping) {
    deliver_pending = false;
    while (active && to_deliver > 0 && !stopping) {
      lock.Unlock();
      const bool now = provider->NextIsReady();
      lock.Lock();
      if (!now || !active || to_deliver == 0 || stopping) break;
      lock.Unlock();
      Result<std::unique_ptr<ExpertLease>> lease = provider->NextReady();  // ready: returns at once
      lock.Lock();
      if (!TakeLocked(std::move(lease), &ready)) break;
    }
    if (aborting) ready.clear();
    PostReady(&ready);  // one frame for what was ready together
  }
  deliver_busy = false;
  cv.NotifyAll();  // AbortLocked waits for the token
}

void ProviderServer::State::Deliver() {
  MutexLock lock(&mu);
  std::vector<msg::ExpertReady> ready;  // taken, not yet posted: the experts ready together
  while (true) {
    cv.Wait(&lock, [&]() ZM_REQUIRES(mu) { return stopping || to_deliver > 0; });
    if (stopping) return;
    delivering = true;
    while (to_deliver > 0 && !stopping) {
      lock.Unlock();
      Result<std::unique_ptr<ExpertLease>> lease = provider->NextReady();
      lock.Lock();
      if (!TakeLocked(std::move(lease), &ready)) break;
      if (aborting) continue;
      // One frame for the experts ready now (NextIsReady never blocks): a layer's cache hits travel
      // together instead of one message each.
      bool more = false;
      if (to_deliver > 0 && !stopping) {
        lock.Unlock();
        more = provider->NextIsReady();
        lock.Lock();
      }
      if (!more || aborting || stopping) PostReady(&ready);
    }
    if (aborting) ready.clear();
    PostReady(&ready);
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
  if (listener) {
    // No deliverer thread: take the delivery token and drop what is left, waiting for each (its ops
    // complete; their listener calls find the token taken and return).
    cv.Wait(lock, [&]() ZM_REQUIRES(mu) { return !deliver_busy; });
    deliver_busy = true;
    std::vector<msg::ExpertReady> none;
    while (to_deliver > 0) {
      mu.Unlock();
      Result<std::unique_ptr<ExpertLease>> lease = provider->NextReady();
      mu.Lock();
      if (!TakeLocked(std::move(lease), &none)) break;
    }
    deliver_busy = false;
    deliver_pending = false;
  }
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

void ProviderServer::State::ReleaseLocked(int32_t layer, const std::vector<int32_t>& expert_ids,
                                          const std::vector<int32_t>& abandoned) {
  if (!active || layer != layer_id) return;  // stale
  std::vector<std::unique_ptr<ExpertLease>> released;
  for (int32_t expert : expert_ids) {
    auto it = leases.find(expert);
    if (it == leases.end()) continue;  // stale
    if (std::find(abandoned.begin(), abandoned.end(), expert) != abandoned.end()) it->second->Abandon();
    released.push_back(std::move(it->second));
    leases.erase(it);
  }
  if (released.empty()) return;
  mu.Unlock();
  provider->ReleaseAll(&released);  // admissions (one message to a remote cache) + next wave
  mu.Lock();
}

void ProviderServer::State::OpenPipe(const std::string& from, const msg::PipeOpen& open) {
  Result<std::unique_ptr<msg::ShmPipe>> attached = msg::AttachOfferedPipe(open, "scheduler");
  const Status st = attached.status();
  if (st.ok()) {
    StopPipeReader();  // the previous executor's
    std::shared_ptr<msg::ShmPipe> opened = std::move(attached).value();
    {
      MutexLock lock(&mu);
      pipe = opened;
      pipe_peer = kPipePeerPrefix + opened->name();
    }
    pipe_reader = std::make_unique<msg::PipeReader>(opened);
    pipe_reader->Start(
        "zm-pipe",
        [this, peer = kPipePeerPrefix + opened->name()](msg::Message& got) {
          Handle(peer, std::move(got.body));
          return true;
        },
        [this](const Status& bad) { OnBadMessage(bad); });
    Log(fmt::format("executor link on the shared-memory pipe {}", open.name));
  } else {
    Log(fmt::format("W: executor pipe refused, the link stays on ZeroMQ: {}", st.ToString()));
  }
  MutexLock lock(&mu);
  Post(from, msg::PipeOpenAck(open, st));
}

void ProviderServer::State::StopPipeReader() {
  if (pipe_reader == nullptr) return;
  pipe_reader->Stop();
  pipe_reader.reset();
}

void ProviderServer::State::Handle(const std::string& from, msg::Body body) {
  const trace::TraceSpan span("message", [&] { return std::string("handle ") + msg::BodyName(body); },
                               trace::Activity::kHandleMessage);
  MutexLock handle_lock(&handle_mu);
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
    if (listener) {
      lock.Unlock();
      DeliverReady();  // the cache hits, at once, in one frame
    }
    return;
  }
  if (auto* release = std::get_if<msg::LeaseRelease>(&body)) {
    ReleaseLocked(release->layer_id, release->expert_ids, release->abandoned_expert_ids);
    return;
  }
  if (auto* end = std::get_if<msg::LayerEnd>(&body)) {
    ReleaseLocked(end->layer_id, end->released_expert_ids, end->abandoned_expert_ids);
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
  // A ping of an executor that is connecting (RemoteExpertProvider::Ping): answer it, with the slots of
  // pool F its device is to hold (-1: none).
  if (std::holds_alternative<msg::Heartbeat>(body)) {
    msg::Heartbeat answer = msg::MakeHeartbeat(0, 0);
    answer.device_f_slots = provider->device_f_slots();
    Post(from, std::move(answer));
  }
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
  options.security = config.security;
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::RouterServer> router, msg::RouterServer::Bind(context, options));
  auto state = std::make_unique<State>(std::move(config), provider, arena_base, arena_bytes, std::move(router));
  std::unique_ptr<ProviderServer> server(new ProviderServer(std::move(state)));
  State* s = server->s_.get();
  // The provider calls back on the thread that made an expert ready (a completion's), which sends it
  // on: one thread less to wake per expert. A provider without that gets a deliverer thread waiting in
  // NextReady.
  s->listener = provider->SetReadyListener([s] { s->DeliverReady(); });
  if (!s->listener) {
    s->deliver_thread = std::thread([s] {
      SetCurrentThreadName("zm-deliver");
      s->Deliver();
    });
  }
  s->server->Start(s, kExecutorPollInterval, "zm-provider");
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
  s_->StopPipeReader();  // the loop, which also starts readers, has ended
  // Waits for a listener call in progress; none starts after (the provider outlives this server).
  if (s_->listener) s_->provider->SetReadyListener(nullptr);
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
