// Channel: one ZeroMQ socket (cppzmq) that sends and receives zipmoe messages (common/ipc/messaging.h),
// for endpoints given as URLs: inproc://NAME (threads of one process, embedded mode), ipc:///PATH
// (processes sharing a volume), tcp://HOST:PORT (containers; bind tcp://127.0.0.1:* for an ephemeral
// port, then read endpoint()). See docs/messaging.md for who binds what.
//
// Framing. A DEALER or PAIR channel sends and receives one frame per message: the FlatBuffer. A ROUTER
// channel sees [routing id][FlatBuffer] and hands the routing id to the caller (Received::peer), who
// replies with SendTo(peer, ...); ZeroMQ adds and strips the id on the DEALER side. Anything else
// (wrong frame count, bytes that fail DecodeMessage) is consumed whole, counted in
// stats().bad_messages and returned as an error naming endpoint and peer; the caller logs it and
// goes on (style.md: a bad message is logged, counted and dropped; it never crashes a loop).
//
// Socket options set by Open: linger (ChannelOptions::linger_ms, default 0: closing never blocks),
// ZMQ_MAXMSGSIZE = kMaxMessageBytes (a bigger frame disconnects its sender), and on a ROUTER
// ZMQ_ROUTER_MANDATORY (SendTo an unknown or gone peer is kUnavailable, not a silent drop) and
// ZMQ_ROUTER_HANDOVER (a restarted worker reusing its routing id takes the id over at once).
//
// Link security (common/ipc/link_security.h, issue 43 item 3). When ChannelOptions::security says an
// endpoint needs CURVE (tcp:// off loopback under link_security.mode auto, every tcp:// under on), Open
// makes the socket a CURVE server (bind: ZMQ_CURVE_SERVER, the deployment's secret key, ZAP domain
// "zipmoe" so security.guard's ZAP handler vets every client key) or a CURVE client (connect: the
// deployment's public key as the server key, and its key pair as the client's). A bound CURVE channel
// also monitors its socket (zmq_socket_monitor, HANDSHAKE_FAILED_* events on an inproc PAIR whose
// receive high-water mark is 0, so libzmq never waits for the reader) and counts each refused peer in
// security.guard (LinkGuard::CountRefusal); Recv and WaitReadable read those events. ipc://, inproc://
// and plaintext tcp:// channels are as before.
//
// Thread-safety: a Channel, like its zmq socket, is created in and used by one thread; move it to
// another thread only before use. The zmq::context_t is thread-safe and must outlive every Channel
// opened on it; inproc:// endpoints only connect sockets of the same context.
//
// Timeouts are std::chrono::milliseconds >= 0: 0 means "only what is possible now"; there is no
// infinite wait (style.md: no infinite poll timeouts). Errors never throw: zmq::error_t is caught
// here and returned as a Status.
#pragma once

#include <chrono>
#include <functional>
#include <cstdint>
#include <string>

#include <zmq.hpp>

#include "common/ipc/event_fd.h"
#include "common/ipc/link_security.h"
#include "common/ipc/messaging.h"
#include "common/status.h"

namespace zipmoe::messaging {

enum class SocketKind : uint8_t {
  kRouter = 0,  // the queue side (scheduler, storage): many peers, replies by routing id
  kDealer = 1,  // a worker or client: one logical peer, asynchronous send/recv
  kPair = 2,    // exactly two sockets, e.g. an inproc:// pipe between two threads
};

// "ROUTER", "DEALER", "PAIR".
const char* SocketKindName(SocketKind kind);

struct ChannelOptions {
  SocketKind kind = SocketKind::kDealer;
  std::string endpoint;     // inproc://NAME | ipc:///PATH (<= 107 bytes) | tcp://HOST:PORT (PORT "*" when binding)
  bool bind = false;        // true: bind (the stable side, e.g. the scheduler's ROUTER); false: connect
  std::string identity;     // routing id the ROUTER peer sees (1..255 bytes, first byte not 0);
                            // empty: ZeroMQ assigns a random binary one
  std::string sender;       // Message::sender stamped by Send/SendTo, e.g. "decompressor-2"
  int linger_ms = 0;        // how long closing waits to flush unsent messages
  // CURVE or plaintext (above); the default is plaintext. A CURVE endpoint needs security.keys, and a
  // bound one security.guard started on the same context.
  LinkSecurity security{};
};

struct Received {
  std::string peer;  // ROUTER: the sender's routing id (binary; see PrintableId); empty otherwise
  Message message;   // verified and decoded
};

struct ChannelStats {
  uint64_t sent = 0;          // messages sent
  uint64_t received = 0;      // messages received and decoded
  uint64_t bad_messages = 0;  // received and dropped (wrong frames, DecodeMessage errors)
};

// Field by field: the counts of a link that used two transports (a Channel, then a ShmPipe).
inline ChannelStats operator+(ChannelStats a, const ChannelStats& b) {
  a.sent += b.sent;
  a.received += b.received;
  a.bad_messages += b.bad_messages;
  return a;
}

class Channel {
 public:
  // Creates the socket on `context` and binds or connects it to options.endpoint.
  // Errors: kInvalidArgument (unsupported URL scheme, bad identity, malformed address, ipc path too
  // long; a CURVE endpoint without security.keys, or bound without a security.guard of `context`),
  // kUnavailable (address in use or not local, context terminated), kIoError (other zmq errors; the
  // message names endpoint and zmq's text).
  static Result<Channel> Open(zmq::context_t& context, const ChannelOptions& options);

  Channel(Channel&& other) noexcept = default;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  ~Channel();  // stops the socket monitor, closes the socket (waits up to linger_ms to flush)

  // DEALER/PAIR: sends {kMessageVersion, options.sender, body}. Waits up to `timeout` while the
  // socket's high-water mark is reached. Errors: kInvalidArgument (ROUTER channel, negative timeout,
  // encoded message over kMaxMessageBytes), kDeadlineExceeded (still not sendable at the deadline),
  // kUnavailable (context terminated), kIoError.
  Status Send(Body body, std::chrono::milliseconds timeout);
  // ROUTER: sends to the peer with routing id `peer`. Errors: as Send, plus kUnavailable when no
  // connected peer has that id (never connected, or its connection is gone); kInvalidArgument on a
  // non-ROUTER channel.
  Status SendTo(const std::string& peer, Body body, std::chrono::milliseconds timeout);

  // Waits up to `timeout` for one message and returns it. Errors: kDeadlineExceeded (nothing
  // arrived), kCorruption / kInvalidArgument (a bad message arrived: it is dropped and counted;
  // the message names endpoint and peer, then DecodeMessage's reason), kInvalidArgument (negative
  // timeout), kUnavailable (context terminated), kIoError.
  Result<Received> Recv(std::chrono::milliseconds timeout);

  // The resolved endpoint: for a bound tcp://HOST:* the port ZeroMQ chose; otherwise as given.
  const std::string& endpoint() const { return endpoint_; }
  SocketKind kind() const { return kind_; }
  const ChannelStats& stats() const { return stats_; }
  // The socket, for a zmq_pollitem_t in a caller's poll loop over several channels; after it polls
  // readable, call Recv(0ms). Do not send or receive on it directly.
  zmq::socket_t& socket() { return socket_; }
  // Whether this channel runs CURVE (ChannelOptions::security).
  bool curve() const { return curve_; }
  // A bound CURVE channel's monitor socket, else nullptr: a poll loop over several channels adds it to
  // its items and calls DrainMonitor() when it polls readable (Recv and WaitReadable do it themselves).
  zmq::socket_t* monitor() { return monitor_.handle() != nullptr ? &monitor_ : nullptr; }
  // Reads the queued monitor events, counting each refused handshake in the guard. Never blocks.
  void DrainMonitor();

 private:
  Channel(zmq::socket_t socket, SocketKind kind, std::string endpoint, std::string sender);
  Status SendFrames(const std::string* peer, const std::string& payload, std::chrono::milliseconds timeout);
  // Turns the socket monitor off (before the socket or the reader closes, so libzmq never has an
  // event to send to a closed reader).
  void StopMonitor();

  zmq::socket_t socket_;
  SocketKind kind_ = SocketKind::kDealer;
  std::string endpoint_;
  std::string sender_;
  ChannelStats stats_;
  bool curve_ = false;
  zmq::socket_t monitor_;        // bound CURVE channels: the PAIR reading socket_'s monitor events
  LinkGuard* guard_ = nullptr;   // where those refusals are counted (borrowed)
  std::string guard_label_;      // the endpoint as configured: the refusals' `endpoint` label
};

// One wait of a poll loop that serves `channel` and is woken by `wake` (EventFd::Notify from other
// threads): waits up to `timeout` (>= 1 ms is used), drains `wake` and the channel's monitor (a bound
// CURVE channel's refused handshakes), and returns whether `channel` has a message to Recv. An interrupted wait (EINTR) returns false. Errors: kInternal (zmq_poll).
Result<bool> WaitReadable(Channel& channel, const EventFd& wake, std::chrono::milliseconds timeout);

// Receives every message queued on `channel` now, without waiting: on_message for each one that
// decodes (return false to stop draining), on_bad with the error of each frame dropped (already
// counted in channel.stats().bad_messages).
void ReceiveAll(Channel& channel, const std::function<bool(Received&)>& on_message,
                const std::function<void(const Status&)>& on_bad);

// OK if `url` has a supported scheme (inproc://, ipc://, tcp://) and a non-empty address.
// Errors: kInvalidArgument naming the URL and the accepted forms.
Status ValidateEndpoint(const std::string& url);

// A routing id for logs: itself when every byte is printable ASCII, else "0x" + lower-case hex
// (ZeroMQ's own ids are 5 binary bytes starting with 0).
std::string PrintableId(const std::string& routing_id);

}  // namespace zipmoe::messaging
