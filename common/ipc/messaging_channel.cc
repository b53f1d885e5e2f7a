// ZeroMQ transport for zipmoe messages (see common/ipc/messaging_channel.h).
#include "common/ipc/messaging_channel.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/link_guard.h"

namespace zipmoe::messaging {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A hostile peer may send any number of frames; keep this many and drain the rest.
constexpr size_t kMaxKeptFrames = 3;
// While a full peer blocks a ROUTER's SendTo, re-try at this period (no lock is held).
constexpr milliseconds kRouterRetryPeriod{1};
// sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
constexpr size_t kMaxIpcPathBytes = 107;

Status FromZmqError(const zmq::error_t& e, const std::string& what) {
  const std::string message = fmt::format("{}: {} (zmq errno {})", what, e.what(), e.num());
  switch (e.num()) {
    case EINVAL:
    case EPROTONOSUPPORT:
    case ENOCOMPATPROTO:
    case ENAMETOOLONG:
    case ENODEV:
      return Status::InvalidArgument(message);
    case EADDRINUSE:
    case EADDRNOTAVAIL:
    case ETERM:
    case EHOSTUNREACH:
    case ENOTSOCK:
      return Status::Unavailable(message);
    default:
      return Status::IoError(message);
  }
}

zmq::socket_type ToZmq(SocketKind kind) {
  switch (kind) {
    case SocketKind::kRouter: return zmq::socket_type::router;
    case SocketKind::kDealer: return zmq::socket_type::dealer;
    case SocketKind::kPair: return zmq::socket_type::pair;
  }
  return zmq::socket_type::pair;
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// The monitor events of a bound CURVE channel: the ways a handshake ends without a link.
constexpr int kRefusalEvents =
    ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH;
// The ZAP domain of CURVE servers (RFC 27; libzmq passes it to the handler, which accepts any).
constexpr const char* kZapDomain = "zipmoe";
constexpr size_t kCurveKeyBytes = 32;

// zmq_setsockopt of a 32-byte CURVE key given in Z85; throws zmq::error_t like cppzmq (caught by Open).
void SetCurveKey(zmq::socket_t& socket, int option, const std::string& z85) {
  uint8_t key[kCurveKeyBytes];
  if (z85.size() != 40 || zmq_z85_decode(key, z85.c_str()) == nullptr) {
    errno = EINVAL;
    throw zmq::error_t();
  }
  if (zmq_setsockopt(socket.handle(), option, key, sizeof(key)) != 0) throw zmq::error_t();
}

// What a CURVE endpoint needs before its socket exists: keys, and for a bind the context's guard.
Status CheckCurveOptions(const zmq::context_t& context, const ChannelOptions& options, const std::string& what) {
  const LinkSecurity& security = options.security;
  const std::string why = fmt::format("{} needs CURVE (link_security.mode {})", what,
                                      LinkSecurityModeName(security.mode));
  if (!security.keys.has_value()) return Status::InvalidArgument(why + " but no key pair was given (link_security.key_file)");
  if (options.bind && security.guard == nullptr) {
    return Status::InvalidArgument(why + " but has no LinkGuard (ZAP handler) to vet its clients");
  }
  if (options.bind && security.guard->context() != &context) {
    return Status::InvalidArgument(why + " but its LinkGuard runs on another zmq context");
  }
  return Status::Ok();
}

// Waits until `socket` has `events` or `deadline` passes; false at the deadline. EINTR re-polls.
// Throws zmq::error_t like cppzmq does (caught by the callers).
bool WaitFor(zmq::socket_t& socket, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    zmq_pollitem_t item{socket.handle(), 0, events, 0};
    const int rc = zmq_poll(&item, 1, static_cast<long>(left.count()));
    if (rc < 0) {
      if (zmq_errno() == EINTR) continue;
      throw zmq::error_t();
    }
    if (rc > 0 && (item.revents & events) != 0) return true;
    if (Clock::now() >= deadline) return false;
  }
}

}  // namespace

const char* SocketKindName(SocketKind kind) {
  switch (kind) {
    case SocketKind::kRouter: return "ROUTER";
    case SocketKind::kDealer: return "DEALER";
    case SocketKind::kPair: return "PAIR";
  }
  return "?";
}

Status ValidateEndpoint(const std::string& url) {
  for (const char* scheme : {"inproc://", "ipc://", "tcp://"}) {
    if (!StartsWith(url, scheme)) continue;
    const std::string address = url.substr(std::strlen(scheme));
    if (address.empty()) break;
    if (StartsWith(url, "ipc://") && address.size() > kMaxIpcPathBytes) {
      return Status::InvalidArgument(fmt::format("endpoint '{}': ipc path of {} bytes exceeds {} (sun_path)", url,
                                                 address.size(), kMaxIpcPathBytes));
    }
    return Status::Ok();
  }
  return Status::InvalidArgument(
      fmt::format("endpoint '{}': expected inproc://NAME, ipc:///PATH or tcp://HOST:PORT", url));
}

std::string PrintableId(const std::string& routing_id) {
  bool printable = !routing_id.empty();
  for (const char c : routing_id) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return routing_id;
  std::string hex = "0x";
  for (const char c : routing_id) hex += fmt::format("{:02x}", static_cast<unsigned char>(c));
  return hex;
}

Channel::Channel(zmq::socket_t socket, SocketKind kind, std::string endpoint, std::string sender)
    : socket_(std::move(socket)), kind_(kind), endpoint_(std::move(endpoint)), sender_(std::move(sender)) {}

Channel::~Channel() { StopMonitor(); }

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this == &other) return *this;
  StopMonitor();
  socket_ = std::move(other.socket_);
  kind_ = other.kind_;
  endpoint_ = std::move(other.endpoint_);
  sender_ = std::move(other.sender_);
  stats_ = other.stats_;
  curve_ = other.curve_;
  monitor_ = std::move(other.monitor_);
  guard_ = other.guard_;
  guard_label_ = std::move(other.guard_label_);
  return *this;
}

void Channel::StopMonitor() {
  if (monitor_.handle() == nullptr) return;
  // Stops libzmq's side first (it closes its PAIR: no later event is sent), then the reader. The
  // return code is not needed: on a closing context there is nothing left to send events either.
  if (socket_.handle() != nullptr) (void)zmq_socket_monitor(socket_.handle(), nullptr, 0);
  monitor_.close();
}

void Channel::DrainMonitor() {
  if (monitor_.handle() == nullptr || guard_ == nullptr) return;
  for (;;) {
    // Event format 1 (zmq_socket_monitor): [u16 event, u32 value][endpoint]. A failed non-blocking
    // receive means drained (EAGAIN) or a closing context (ETERM): nothing more to count either way.
    zmq::message_t first;
    if (zmq_msg_recv(first.handle(), monitor_.handle(), ZMQ_DONTWAIT) < 0) return;
    uint16_t event = 0;
    const bool well_formed = first.size() == sizeof(uint16_t) + sizeof(uint32_t);
    if (well_formed) std::memcpy(&event, first.data(), sizeof(event));
    for (bool more = first.more(); more;) {  // the rest of the event is already here (atomic delivery)
      zmq::message_t rest;
      if (zmq_msg_recv(rest.handle(), monitor_.handle(), 0) < 0) return;
      more = rest.more();
    }
    if (!well_formed) continue;
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      guard_->CountRefusal(guard_label_, RefusalReason::kKey);
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) {
      guard_->CountRefusal(guard_label_, RefusalReason::kProtocol);
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
      guard_->CountRefusal(guard_label_, RefusalReason::kIncomplete);
    }
  }
}

Result<Channel> Channel::Open(zmq::context_t& context, const ChannelOptions& options) {
  ZM_RETURN_IF_ERROR(ValidateEndpoint(options.endpoint));
  const std::string what = fmt::format("{} {} {}", SocketKindName(options.kind),
                                       options.bind ? "bind" : "connect", options.endpoint);
  if (!options.identity.empty() && (options.identity.size() > 255 || options.identity[0] == '\0')) {
    return Status::InvalidArgument(fmt::format("{}: routing id '{}' must be 1..255 bytes, not starting with 0",
                                               what, PrintableId(options.identity)));
  }
  if (options.linger_ms < 0) {
    return Status::InvalidArgument(fmt::format("{}: linger_ms {} < 0", what, options.linger_ms));
  }
  const bool curve = options.security.NeedsCurve(options.endpoint);
  if (curve) ZM_RETURN_IF_ERROR(CheckCurveOptions(context, options, what));
  try {
    zmq::socket_t socket(context, ToZmq(options.kind));
    socket.set(zmq::sockopt::linger, options.linger_ms);
    socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxMessageBytes));
    if (!options.identity.empty()) socket.set(zmq::sockopt::routing_id, options.identity);
    if (options.kind == SocketKind::kRouter) {
      socket.set(zmq::sockopt::router_mandatory, true);
      socket.set(zmq::sockopt::router_handover, true);
    }
    // From here the Channel owns the socket, so a failed bind still stops the monitor first.
    Channel channel(std::move(socket), options.kind, options.endpoint, options.sender);
    channel.curve_ = curve;
    if (curve) {
      const CurveKeyPair& keys = *options.security.keys;
      zmq::socket_t& s = channel.socket_;
      if (options.bind) {
        // CURVE server (RFC 26): its long-term key is the deployment's; ZAP (RFC 27) vets each client.
        s.set(zmq::sockopt::curve_server, true);
        SetCurveKey(s, ZMQ_CURVE_SECRETKEY, keys.secret_key);
        s.set(zmq::sockopt::zap_domain, kZapDomain);
        LinkGuard* guard = options.security.guard;
        const std::string monitor_endpoint = guard->NextMonitorEndpoint();
        if (zmq_socket_monitor(s.handle(), monitor_endpoint.c_str(), kRefusalEvents) != 0) throw zmq::error_t();
        zmq::socket_t monitor(context, zmq::socket_type::pair);
        monitor.set(zmq::sockopt::linger, 0);
        monitor.set(zmq::sockopt::rcvhwm, 0);  // unbounded: libzmq's I/O thread never blocks on an event
        monitor.connect(monitor_endpoint);
        channel.monitor_ = std::move(monitor);
        channel.guard_ = guard;
        channel.guard_label_ = options.endpoint;
        guard->Track(options.endpoint);
      } else {
        // CURVE client: every server of the deployment holds its key pair, so its public key is the
        // server key, and the same pair is this client's (the servers' ZAP handlers allow it).
        SetCurveKey(s, ZMQ_CURVE_SERVERKEY, keys.public_key);
        SetCurveKey(s, ZMQ_CURVE_PUBLICKEY, keys.public_key);
        SetCurveKey(s, ZMQ_CURVE_SECRETKEY, keys.secret_key);
      }
    }
    if (options.bind) {
      channel.socket_.bind(options.endpoint);
      channel.endpoint_ = channel.socket_.get(zmq::sockopt::last_endpoint);
    } else {
      channel.socket_.connect(options.endpoint);
    }
    return channel;
  } catch (const zmq::error_t& e) {
    return FromZmqError(e, what);
  }
}

Status Channel::Send(Body body, milliseconds timeout) {
  if (kind_ == SocketKind::kRouter) {
    return Status::InvalidArgument(fmt::format("{}: Send on a ROUTER channel; use SendTo(peer)", endpoint_));
  }
  return SendFrames(nullptr, EncodeMessage(sender_, std::move(body)), timeout);
}

Status Channel::SendTo(const std::string& peer, Body body, milliseconds timeout) {
  if (kind_ != SocketKind::kRouter) {
    return Status::InvalidArgument(
        fmt::format("{}: SendTo on a {} channel; use Send", endpoint_, SocketKindName(kind_)));
  }
  return SendFrames(&peer, EncodeMessage(sender_, std::move(body)), timeout);
}

Status Channel::SendFrames(const std::string* peer, const std::string& payload, milliseconds timeout) {
  const std::string to = peer == nullptr ? endpoint_ : fmt::format("{} peer {}", endpoint_, PrintableId(*peer));
  if (timeout.count() < 0) {
    return Status::InvalidArgument(fmt::format("{}: send timeout {} ms < 0", to, timeout.count()));
  }
  if (payload.size() > kMaxMessageBytes) {
    return Status::InvalidArgument(
        fmt::format("{}: message of {} bytes exceeds kMaxMessageBytes ({})", to, payload.size(), kMaxMessageBytes));
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  try {
    for (;;) {
      // ZeroMQ accepts a multipart message atomically: once the first frame is queued, the rest are.
      zmq::send_result_t sent;
      if (peer != nullptr) {
        sent = socket_.send(zmq::buffer(*peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
        if (sent) sent = socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      } else {
        sent = socket_.send(zmq::buffer(payload), zmq::send_flags::dontwait);
      }
      if (sent) {
        ++stats_.sent;
        return Status::Ok();
      }
      bool sendable = false;
      if (kind_ == SocketKind::kRouter) {
        // ROUTER's POLLOUT means "some peer is writable", not this one: retry at a fixed period.
        const auto left = deadline - Clock::now();
        if (left > Clock::duration::zero()) {
          std::this_thread::sleep_for(std::min<Clock::duration>(left, kRouterRetryPeriod));
          sendable = true;
        }
      } else {
        sendable = WaitFor(socket_, ZMQ_POLLOUT, deadline);
      }
      if (!sendable) {
        return Status::DeadlineExceeded(fmt::format("{}: not sendable within {} ms", to, timeout.count()));
      }
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      return Status::Unavailable(fmt::format("{}: no connected peer with this routing id", to));
    }
    return FromZmqError(e, to);
  }
}

Result<Received> Channel::Recv(milliseconds timeout) {
  if (timeout.count() < 0) {
    return Status::InvalidArgument(fmt::format("{}: recv timeout {} ms < 0", endpoint_, timeout.count()));
  }
  DrainMonitor();
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<zmq::message_t> frames;
  size_t n_frames = 0;
  try {
    for (;;) {
      zmq::message_t first;
      if (socket_.recv(first, zmq::recv_flags::dontwait)) {
        // The rest of a multipart message is already here (atomic delivery).
        bool more = first.more();
        frames.push_back(std::move(first));
        n_frames = 1;
        while (more) {
          zmq::message_t part;
          if (!socket_.recv(part, zmq::recv_flags::none)) break;
          more = part.more();
          ++n_frames;
          if (frames.size() < kMaxKeptFrames) frames.push_back(std::move(part));
        }
        break;
      }
      if (!WaitFor(socket_, ZMQ_POLLIN, deadline)) {
        return Status::DeadlineExceeded(
            fmt::format("{}: no message within {} ms", endpoint_, timeout.count()));
      }
    }
  } catch (const zmq::error_t& e) {
    return FromZmqError(e, endpoint_);
  }

  Received out;
  const size_t want = kind_ == SocketKind::kRouter ? 2 : 1;
  std::string from = endpoint_;
  if (kind_ == SocketKind::kRouter) {
    out.peer = frames[0].to_string();
    from = fmt::format("{} peer {}", endpoint_, PrintableId(out.peer));
  }
  if (n_frames != want) {
    ++stats_.bad_messages;
    return Status::InvalidArgument(fmt::format(
        "{}: expected {} frame(s){}, got {}; dropped", from, want,
        kind_ == SocketKind::kRouter ? " (routing id, message)" : "", n_frames));
  }
  const zmq::message_t& payload = frames[want - 1];
  Result<Message> message = DecodeMessage(payload.data(), payload.size(), from);
  if (!message.ok()) {
    ++stats_.bad_messages;
    return message.status();
  }
  out.message = std::move(message).value();
  ++stats_.received;
  return out;
}

Result<bool> WaitReadable(Channel& channel, const EventFd& wake, std::chrono::milliseconds timeout) {
  zmq::socket_t* monitor = channel.monitor();
  zmq::pollitem_t items[3] = {{channel.socket().handle(), 0, ZMQ_POLLIN, 0},
                              {nullptr, wake.fd(), ZMQ_POLLIN, 0},
                              {monitor != nullptr ? monitor->handle() : nullptr, 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, monitor != nullptr ? 3 : 2, std::max(timeout, std::chrono::milliseconds(1)));
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    return Status::Internal(fmt::format("zmq_poll on {}: {}", channel.endpoint(), e.what()));
  }
  if (items[1].revents & ZMQ_POLLIN) wake.Drain();
  if (monitor != nullptr && (items[2].revents & ZMQ_POLLIN) != 0) channel.DrainMonitor();
  return (items[0].revents & ZMQ_POLLIN) != 0;
}

void ReceiveAll(Channel& channel, const std::function<bool(Received&)>& on_message,
                const std::function<void(const Status&)>& on_bad) {
  while (true) {
    Result<Received> got = channel.Recv(std::chrono::milliseconds(0));
    if (got.ok()) {
      if (!on_message(*got)) return;
    } else if (got.status().code() == StatusCode::kDeadlineExceeded) {
      return;
    } else {
      on_bad(got.status());
    }
  }
}

}  // namespace zipmoe::messaging
