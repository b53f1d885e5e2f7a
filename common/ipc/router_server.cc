#include "common/ipc/router_server.h"

#include "common/thread_name.h"

#include <algorithm>
#include <utility>

namespace zipmoe::messaging {

RouterServer::RouterServer(Channel channel, EventFd wake)
    : channel_(std::move(channel)), endpoint_(channel_.endpoint()), wake_(std::move(wake)) {}

Result<std::unique_ptr<RouterServer>> RouterServer::Bind(zmq::context_t& context, ChannelOptions options) {
  options.kind = SocketKind::kRouter;
  options.bind = true;
  ZM_ASSIGN_OR_RETURN(Channel channel, Channel::Open(context, options));
  ZM_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create());
  return std::unique_ptr<RouterServer>(new RouterServer(std::move(channel), std::move(wake)));
}

RouterServer::~RouterServer() { Stop(); }

void RouterServer::Start(Handler* handler, std::chrono::milliseconds poll_interval, const std::string& thread_name) {
  const std::chrono::milliseconds interval = std::max(poll_interval, std::chrono::milliseconds(1));
  thread_ = std::thread([this, handler, interval, thread_name] {
    SetCurrentThreadName(thread_name);
    Loop(handler, interval);
  });
}

void RouterServer::Stop() {
  stop_.store(true, std::memory_order_release);
  wake_.Notify();
  if (thread_.joinable()) thread_.join();
}

void RouterServer::Loop(Handler* handler, std::chrono::milliseconds poll_interval) {
  while (!stop_requested()) {
    handler->OnTick(Clock::now());
    if (stop_requested()) break;
    Result<bool> readable = WaitReadable(channel_, wake_, poll_interval);
    if (!readable.ok()) {
      handler->OnLoopError(readable.status());
      break;
    }
    if (!*readable) continue;
    ReceiveAll(
        channel_,
        [handler](Received& got) {
          handler->OnMessage(got);
          return true;
        },
        [handler](const Status& bad) { handler->OnBadMessage(bad); });
    handler->OnMessagesDone();
  }
  handler->OnLoopEnd();
}

}  // namespace zipmoe::messaging
