#include "services/links/remote_provider.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/mutex.h"
#include "common/trace_events.h"

namespace zipmoe::runtime {

namespace msg = messaging;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// ---- executor side (the scheduler side, ProviderServer, is provider_server.cc) ---------------------

namespace {
// A device epoch no other executor process is likely to draw: 64 random bits (never 0).
uint64_t NewDeviceEpoch() {
  std::random_device rd;
  uint64_t epoch = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                   static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^
                   (static_cast<uint64_t>(::getpid()) << 16);
  return epoch == 0 ? 1 : epoch;
}
}  // namespace

class RemoteExpertProvider::Lease : public ExpertLease {
 public:
  Lease(RemoteExpertProvider* owner, ExpertWeightsView view) : owner_(owner), view_(view) {}
  ~Lease() override { owner_->Release(view_.layer_id, view_.expert_id, abandoned_); }
  const ExpertWeightsView& weights() const override { return view_; }
  void Abandon() override { abandoned_ = true; }

 private:
  RemoteExpertProvider* owner_;
  ExpertWeightsView view_;
  bool abandoned_ = false;
};

RemoteExpertProvider::RemoteExpertProvider(const RemoteProviderConfig& config, ShmRegion arena,
                                           std::unique_ptr<zmq::context_t> context, msg::Channel channel)
    : config_(config),
      arena_(std::move(arena)),
      context_(std::move(context)),
      channel_(std::move(channel)),
      device_epoch_(NewDeviceEpoch()) {}

Result<std::unique_ptr<RemoteExpertProvider>> RemoteExpertProvider::Connect(const RemoteProviderConfig& config) {
  ZM_ASSIGN_OR_RETURN(ShmRegion arena, ShmRegion::Attach(config.arena_name));
  auto context = std::make_unique<zmq::context_t>(1);
  msg::ChannelOptions options;
  options.kind = msg::SocketKind::kDealer;
  options.endpoint = config.endpoint;
  options.sender = "executor";
  options.security = config.security;
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
  return pipe_ != nullptr ? channel_.stats() + pipe_->stats() : channel_.stats();
}

uint64_t RemoteExpertProvider::bad_messages() const { return channel_stats().bad_messages; }

bool RemoteExpertProvider::on_pipe() const {
  MutexLock lock(&mu_);
  return pipe_ != nullptr;
}

std::string RemoteExpertProvider::pipe_name() const {
  MutexLock lock(&mu_);
  return pipe_ != nullptr ? pipe_->name() : std::string();
}

Status RemoteExpertProvider::SendLocked(msg::Body body) {
  if (pipe_ != nullptr) return pipe_->Send(std::move(body), config_.timeout);
  return channel_.Send(std::move(body), config_.timeout);
}

Result<msg::Body> RemoteExpertProvider::RecvLocked(milliseconds timeout) const {
  if (pipe_ != nullptr) {
    ZM_ASSIGN_OR_RETURN(msg::Message got, pipe_->Recv(timeout));
    return std::move(got.body);
  }
  ZM_ASSIGN_OR_RETURN(msg::Received got, channel_.Recv(timeout));
  return std::move(got.message.body);
}

Status RemoteExpertProvider::OpenPipe(milliseconds wait) {
  if (unacked_ends_ > 0 || delivered_ < expected_) {
    return Status::InvalidArgument("OpenPipe: a layer is open; open the pipe before the first layer");
  }
  {
    MutexLock lock(&mu_);
    if (pipe_ != nullptr) return Status::InvalidArgument("OpenPipe: the pipe " + pipe_->name() + " is already open");
  }
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<msg::ShmPipe> pipe, msg::ShmPipe::CreateForThisProcess("executor", "executor"));
  MutexLock lock(&mu_);
  ZM_RETURN_IF_ERROR(msg::OfferPipe(channel_, *pipe, wait).WithContext("the scheduler"));
  pipe_ = std::move(pipe);
  return Status::Ok();
}

void RemoteExpertProvider::DropPipeLocked(const std::string& why) {
  std::fprintf(stderr, "W: executor: %s: back to ZeroMQ; a new pipe is offered at the next layer\n", why.c_str());
  pipe_.reset();
  pipe_lost_ = true;
  next_pipe_try_ = Clock::now();
}

Result<msg::Body> RemoteExpertProvider::Receive(const char* what) {
  const auto deadline = Clock::now() + config_.timeout;
  auto next_peer_check = Clock::now() + milliseconds(100);
  while (true) {
    {
      MutexLock lock(&mu_);
      if (!inbox_.empty()) {
        msg::Body body = std::move(inbox_.front());
        inbox_.pop_front();
        return body;
      }
      Result<msg::Body> got = RecvLocked(milliseconds(5));
      if (got.ok()) {
        InboxLocked(std::move(got).value());
        continue;  // taken from the inbox above
      }
      if (pipe_ != nullptr && pipe_->broken()) {
        // Nothing more will come through it (the answers of this layer went into the broken ring:
        // this call fails).
        DropPipeLocked(got.status().ToString());
        return got.status();
      }
      if (got.status().code() != StatusCode::kDeadlineExceeded) continue;  // bad frame: counted, dropped
      // The scheduler at the pipe's other end exited (up restarts it; the new one never reads this
      // pipe): give up now instead of at the timeout (the first request after a restart waited 20 s).
      if (pipe_ != nullptr && Clock::now() >= next_peer_check) {
        next_peer_check = Clock::now() + milliseconds(100);
        if (pipe_->PeerGone()) {
          const std::string why = fmt::format("the scheduler at the other end of the pipe {} exited", pipe_->name());
          DropPipeLocked(why);
          return Status::Unavailable(fmt::format("scheduler at {}: {} before answering {}", config_.endpoint, why, what));
        }
      }
    }
    if (Clock::now() > deadline) {
      MutexLock lock(&mu_);
      if (pipe_ != nullptr) {
        DropPipeLocked(fmt::format("nothing from the scheduler through the pipe {} for {} ms", pipe_->name(),
                                   config_.timeout.count()));
      }
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
    Result<msg::Body> got = RecvLocked(milliseconds(0));
    if (!got.ok()) {
      const StatusCode code = got.status().code();
      const bool broken = pipe_ != nullptr && pipe_->broken();
      if (!broken && (code == StatusCode::kCorruption || code == StatusCode::kInvalidArgument)) continue;  // dropped
      return false;  // nothing more now (or a broken link, which NextReady reports)
    }
    const size_t before = inbox_.size();
    InboxLocked(std::move(got).value());
    for (size_t i = before; i < inbox_.size(); ++i) {
      if (ready_here(inbox_[i])) return true;
    }
  }
}

void RemoteExpertProvider::InboxLocked(msg::Body body) const {
  if (auto* batch = std::get_if<msg::ExpertsReady>(&body)) {
    for (std::unique_ptr<msg::ExpertReady>& item : batch->items) {
      if (item != nullptr) inbox_.emplace_back(std::move(*item));
    }
    return;
  }
  inbox_.push_back(std::move(body));
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
  ZM_RETURN_IF_ERROR(SendLocked(msg::MakeHeartbeat(0, 0)));
  while (Clock::now() < deadline) {
    Result<msg::Body> got = RecvLocked(milliseconds(5));
    if (!got.ok()) continue;
    if (const auto* answer = std::get_if<msg::Heartbeat>(&*got)) {
      device_f_slots_.store(answer->device_f_slots);
      return Status::Ok();
    }
    (void)AbsorbAck(*got);
  }
  return Status::Unavailable(fmt::format("scheduler at {} did not answer within {} ms", config_.endpoint,
                                         wait.count()));
}

void RemoteExpertProvider::Prefetch(const LayerRouting& predicted) {
  if (config_.prefetch == PrefetchMode::kNone) return;
  MutexLock lock(&mu_);
  (void)SendLocked(LayerRequestToWire(predicted, /*prefetch=*/true));
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
  if (pipe_lost_ && Clock::now() >= next_pipe_try_) {
    // The scheduler that had the pipe is gone (or was silent); its answers went with it.
    unacked_ends_ = 0;
    expected_ = delivered_ = 0;
    {
      MutexLock lock(&mu_);
      inbox_.clear();
    }
    Status reopened = Ping(milliseconds(500));
    if (reopened.ok()) reopened = OpenPipe(milliseconds(1000));
    if (reopened.ok()) {
      pipe_lost_ = false;
    } else {
      next_pipe_try_ = Clock::now() + std::chrono::seconds(1);
      std::fprintf(stderr, "W: executor: no new pipe yet, staying on ZeroMQ: %s\n", reopened.ToString().c_str());
    }
  }
  {
    MutexLock lock(&mu_);
    FlushReleasesLocked();  // leases that outlived their layer (an error path): the server drops them
    msg::LayerRequest request = LayerRequestToWire(routing, /*prefetch=*/false);
    if (device_f_slots_.load() >= 0) request.device_epoch = device_epoch_;  // pool F in this device's slots
    ZM_RETURN_IF_ERROR(SendLocked(std::move(request)));
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

void RemoteExpertProvider::Release(int32_t layer_id, int32_t expert_id, bool abandoned) {
  MutexLock lock(&mu_);
  if (!released_.empty() && released_layer_ != layer_id) FlushReleasesLocked();
  released_layer_ = layer_id;
  released_.push_back(expert_id);
  if (abandoned) abandoned_.push_back(expert_id);
}

void RemoteExpertProvider::FlushReleasesLocked() {
  if (released_.empty()) return;
  msg::LeaseRelease release;
  release.layer_id = released_layer_;
  release.expert_ids = std::move(released_);
  release.abandoned_expert_ids = std::move(abandoned_);
  released_.clear();
  abandoned_.clear();
  (void)SendLocked(std::move(release));
}

Status RemoteExpertProvider::EndLayer(int32_t layer_id) {
  const trace::TraceSpan span("message", [&] { return fmt::format("send LayerEnd (layer {})", layer_id); });
  {
    MutexLock lock(&mu_);
    if (!released_.empty() && released_layer_ != layer_id) FlushReleasesLocked();
    msg::LayerEnd end;
    end.layer_id = layer_id;
    end.released_expert_ids = std::move(released_);  // the last group's releases ride along
    end.abandoned_expert_ids = std::move(abandoned_);
    released_.clear();
    abandoned_.clear();
    ZM_RETURN_IF_ERROR(SendLocked(std::move(end)));
  }
  ++unacked_ends_;
  return TakeDeferred();
}

}  // namespace zipmoe::runtime
