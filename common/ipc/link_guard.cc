// The ZAP handler and refusal counts of CURVE links (see common/ipc/link_guard.h).
#include "common/ipc/link_guard.h"

#include <cerrno>
#include <chrono>
#include <future>
#include <utility>

#include <fmt/format.h>

#include "common/thread_name.h"

namespace zipmoe::messaging {
namespace {

// libzmq asks this endpoint of the socket's own context (ZeroMQ RFC 27).
constexpr const char* kZapEndpoint = "inproc://zeromq.zap.01";
constexpr const char* kZapVersion = "1.0";
// The ZAP thread's longest wait before it looks at its stop flag again (Stop also wakes it).
constexpr std::chrono::milliseconds kZapPollInterval{200};
// ZAP request frames after the REP envelope: version, request id, domain, address, identity, mechanism,
// then the mechanism's credentials (CURVE: one frame, the client's 32-byte public key).
constexpr size_t kZapHeaderFrames = 6;
constexpr size_t kCurveKeyBytes = 32;

bool IsPowerOfTen(uint64_t n) {
  while (n >= 10 && n % 10 == 0) n /= 10;
  return n == 1;
}

}  // namespace

const char* RefusalReasonName(RefusalReason reason) {
  switch (reason) {
    case RefusalReason::kKey: return "key";
    case RefusalReason::kProtocol: return "protocol";
    case RefusalReason::kIncomplete: return "incomplete";
  }
  return "?";
}

LinkGuard::LinkGuard(zmq::context_t& context, std::set<std::string> allowed, Log log, EventFd wake)
    : context_(&context), allowed_(std::move(allowed)), log_(std::move(log)), wake_(std::move(wake)) {}

Result<std::unique_ptr<LinkGuard>> LinkGuard::Start(zmq::context_t& context,
                                                    const std::vector<std::string>& allowed_public_keys, Log log) {
  if (allowed_public_keys.empty()) return Status::InvalidArgument("LinkGuard: no allowed public key");
  std::set<std::string> allowed;
  for (const std::string& key : allowed_public_keys) {
    uint8_t bytes[kCurveKeyBytes];
    if (key.size() != 40 || zmq_z85_decode(bytes, key.c_str()) == nullptr) {
      return Status::InvalidArgument(fmt::format("LinkGuard: '{}' is not a Z85 CURVE public key (40 characters)", key));
    }
    allowed.emplace(reinterpret_cast<const char*>(bytes), kCurveKeyBytes);
  }
  ZM_ASSIGN_OR_RETURN(EventFd wake, EventFd::Create());
  std::unique_ptr<LinkGuard> guard(new LinkGuard(context, std::move(allowed), std::move(log), std::move(wake)));
  std::promise<Status> bound;
  std::future<Status> bind_result = bound.get_future();
  LinkGuard* self = guard.get();
  guard->thread_ = std::thread([self, &bound] { self->Run([&bound](Status st) { bound.set_value(std::move(st)); }); });
  Status st = bind_result.get();
  if (!st.ok()) return st;  // the thread has returned; ~LinkGuard joins it
  return guard;
}

LinkGuard::~LinkGuard() {
  stop_.store(true);
  wake_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::string LinkGuard::NextMonitorEndpoint() {
  return fmt::format("inproc://zipmoe-link-monitor-{}-{}", static_cast<const void*>(this), next_monitor_.fetch_add(1));
}

void LinkGuard::Track(const std::string& endpoint) {
  MutexLock lock(&mu_);
  for (int r = 0; r < kRefusalReasonCount; ++r) counts_.try_emplace({endpoint, static_cast<RefusalReason>(r)}, 0);
}

void LinkGuard::CountRefusal(const std::string& endpoint, RefusalReason reason) {
  uint64_t n = 0;
  std::string address;
  {
    MutexLock lock(&mu_);
    n = ++counts_[{endpoint, reason}];
    if (reason == RefusalReason::kKey) address = last_refused_address_;
  }
  if (!log_ || !IsPowerOfTen(n)) return;
  const char* why = reason == RefusalReason::kKey        ? "its CURVE key is not this deployment's"
                    : reason == RefusalReason::kProtocol ? "no CURVE handshake with this deployment's server key"
                                                         : "it left before the handshake ended";
  log_(fmt::format("W: link {}: refused a peer{} ({}); {} refusal(s) for this reason so far", endpoint,
                   address.empty() ? "" : " at " + address, why, n));
}

std::vector<LinkRefusals> LinkGuard::refusals() const {
  MutexLock lock(&mu_);
  std::vector<LinkRefusals> out;
  out.reserve(counts_.size());
  for (const auto& [key, count] : counts_) out.push_back({key.first, key.second, count});
  return out;
}

std::vector<std::string> LinkGuard::Answer(const std::vector<std::string>& request) {
  zap_requests_.fetch_add(1);
  const std::string request_id = request.size() > 1 ? request[1] : std::string();
  const auto reply = [&](const char* code, const char* text, const char* user) {
    return std::vector<std::string>{kZapVersion, request_id, code, text, user, ""};
  };
  if (request.size() < kZapHeaderFrames || request[0] != kZapVersion) {
    zap_refused_.fetch_add(1);
    return reply("500", "malformed ZAP request", "");
  }
  const std::string& mechanism = request[5];
  if (mechanism == "NULL") return reply("200", "OK", "");
  if (mechanism == "CURVE" && request.size() == kZapHeaderFrames + 1 && request[6].size() == kCurveKeyBytes &&
      allowed_.count(request[6]) > 0) {
    return reply("200", "OK", "zipmoe");
  }
  zap_refused_.fetch_add(1);
  {
    MutexLock lock(&mu_);
    last_refused_address_ = request[3];
  }
  return reply("400", mechanism == "CURVE" ? "CURVE key not allowed" : "mechanism not allowed", "");
}

void LinkGuard::Run(std::function<void(Status)> bound) {
  SetCurrentThreadName("zm-zap");
  zmq::socket_t rep;
  try {
    rep = zmq::socket_t(*context_, zmq::socket_type::rep);
    rep.set(zmq::sockopt::linger, 0);
    rep.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    const std::string what = fmt::format("ZAP handler at {}: {} (zmq errno {})", kZapEndpoint, e.what(), e.num());
    bound(e.num() == EADDRINUSE ? Status::Unavailable(what + ": another ZAP handler runs on this context")
                                : Status::IoError(what));
    return;
  }
  bound(Status::Ok());
  while (!stop_.load()) {
    try {
      zmq::pollitem_t items[2] = {{rep.handle(), 0, ZMQ_POLLIN, 0}, {nullptr, wake_.fd(), ZMQ_POLLIN, 0}};
      zmq::poll(items, 2, kZapPollInterval);
      if ((items[1].revents & ZMQ_POLLIN) != 0) wake_.Drain();
      if ((items[0].revents & ZMQ_POLLIN) == 0) continue;
      std::vector<std::string> request;
      zmq::message_t frame;
      while (rep.recv(frame, zmq::recv_flags::dontwait)) {
        request.push_back(frame.to_string());
        if (!frame.more()) break;
      }
      if (request.empty()) continue;
      const std::vector<std::string> answer = Answer(request);
      for (size_t i = 0; i < answer.size(); ++i) {
        rep.send(zmq::buffer(answer[i]), i + 1 < answer.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      if (e.num() == ETERM) break;
      // The socket stays bound (libzmq lets every client with the server key in when no ZAP handler
      // is bound: the Stonehouse pattern), so an unanswered handshake fails instead; retry after a pause.
      if (log_) log_(fmt::format("E: ZAP handler: {} (zmq errno {})", e.what(), e.num()));
      std::this_thread::sleep_for(kZapPollInterval);
    }
  }
  // Closing alone frees the inproc name only once the reaper thread gets to the socket; unbinding
  // frees it now, so a new guard can start on this context at once. On a terminated context there is
  // nothing to free: the result is not needed.
  (void)zmq_unbind(rep.handle(), kZapEndpoint);
}

}  // namespace zipmoe::messaging
