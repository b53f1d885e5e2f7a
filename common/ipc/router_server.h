// RouterServer: the skeleton every ROUTER-side server of zipmoe shares (the broker side of the
// ZeroMQ guide's Paranoid Pirate pattern, ch. 4): one bound ROUTER Channel, an EventFd other
// threads use to wake it, and one loop thread that repeats
//   1. handler.OnTick(now)        periodic work: queued sends, heartbeats, liveness (bounded);
//   2. wait up to poll_interval   for a message or a Wake() (messaging::WaitReadable);
//   3. handler.OnMessage(got)     for every message queued now (messaging::ReceiveAll), and
//      handler.OnBadMessage(err)  for every frame dropped (already counted in the channel's stats);
//   4. handler.OnMessagesDone()   once after a batch (callbacks best run outside per-message work);
// until Stop(); then handler.OnLoopEnd() on the loop thread (e.g. Disconnect to every peer).
// A poll error ends the loop after handler.OnLoopError(status).
//
// Users: the scheduler's WorkerDispatcher (services/links/worker_dispatcher.cc), its executor-facing
// ProviderServer (remote_provider.cc) and the cache-manager's CacheServer (cache_server.cc). The
// protocol constants (heartbeat interval, liveness, reconnect backoff) live in common/ipc/messaging.h.
//
// Thread-safety: channel() and the handler's callbacks belong to the loop thread (after Start);
// Wake(), stop_requested() and Stop() may be called from any thread. Stop() is idempotent and
// joins the loop; it must not be called from the loop thread itself.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "common/ipc/event_fd.h"
#include "common/ipc/messaging_channel.h"
#include "common/status.h"

namespace zipmoe::messaging {

class RouterServer {
 public:
  using Clock = std::chrono::steady_clock;

  // What a server does in its loop (all called on the loop thread).
  class Handler {
   public:
    virtual ~Handler() = default;
    virtual void OnTick(Clock::time_point now) { (void)now; }
    virtual void OnMessage(Received& got) = 0;
    virtual void OnBadMessage(const Status& bad) = 0;
    virtual void OnMessagesDone() {}
    virtual void OnLoopEnd() {}
    virtual void OnLoopError(const Status& error) { (void)error; }
  };

  // Opens `options` as a bound ROUTER (options.kind and options.bind are set here). Nothing runs
  // until Start. Errors: Channel::Open's, EventFd::Create's.
  static Result<std::unique_ptr<RouterServer>> Bind(zmq::context_t& context, ChannelOptions options);
  ~RouterServer();  // Stop()
  RouterServer(const RouterServer&) = delete;
  RouterServer& operator=(const RouterServer&) = delete;

  // Starts the loop thread with `handler` (borrowed until Stop returns). poll_interval (>= 1 ms):
  // the longest wait between two OnTick calls when nothing arrives. Call once.
  // thread_name names the loop thread (common/thread_name.h), e.g. "zm-dispatch".
  void Start(Handler* handler, std::chrono::milliseconds poll_interval, const std::string& thread_name = "zm-router");
  // Ends the current wait early (another thread queued work for OnTick).
  void Wake() { wake_.Notify(); }
  bool stop_requested() const { return stop_.load(std::memory_order_acquire); }
  // Asks the loop to end, wakes it and joins it (OnLoopEnd has run when this returns). Idempotent.
  void Stop();

  Channel& channel() { return channel_; }
  const std::string& endpoint() const { return endpoint_; }

 private:
  RouterServer(Channel channel, EventFd wake);
  void Loop(Handler* handler, std::chrono::milliseconds poll_interval);

  Channel channel_;  // the loop thread's after Start
  const std::string endpoint_;
  EventFd wake_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace zipmoe::messaging
