// LinkGuard: the bound side of CURVE links in one zmq context (issue 43, item 3; docs/messaging.md
// "Link security"). Two jobs:
//   1. A ZAP handler (ZeroMQ RFC 27, ZAP 1.0): a thread ("zm-zap") with a REP socket bound at
//      inproc://zeromq.zap.01 of the context. libzmq asks it about every CURVE client that finished the
//      crypto of its handshake; it answers 200 for a public key of the allow-list (the deployment's)
//      and 400 for any other, which libzmq then disconnects. A NULL-mechanism request (a plaintext
//      socket that set a ZAP domain: none of zipmoe's do) is answered 200, since plaintext links are
//      the config's choice; any other mechanism 400.
//   2. The refusal counts per bound endpoint and reason, fed by each bound CURVE Channel from its
//      socket monitor (zmq_socket_monitor's HANDSHAKE_FAILED_* events; messaging_channel.h) and
//      exported by the services as zipmoe_link_auth_refused_total{endpoint, reason} (docs/metrics.md).
//      A refused peer is also logged, at its 1st, 10th, 100th ... refusal per endpoint and reason.
//
// Lifetime: Start it before binding any CURVE channel on `context` (Channel::Open needs it through
// ChannelOptions::security.guard) and destroy it after those channels and before the context (its
// REP socket must close for zmq_ctx_term to return). One per context: a second Start on the same
// context fails (the ZAP endpoint is taken).
// Thread-safety: every method may be called from any thread; the REP socket belongs to the ZAP thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/ipc/event_fd.h"
#include "common/mutex.h"
#include "common/status.h"

namespace zipmoe::messaging {

// Why a bound CURVE endpoint refused a peer (the `reason` label), from the monitor event:
enum class RefusalReason : uint8_t {
  kKey = 0,         // ZMQ_EVENT_HANDSHAKE_FAILED_AUTH: a CURVE peer whose public key is not allowed (ZAP 400)
  kProtocol = 1,    // ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL: a plaintext peer (mechanism mismatch), a wrong
                    // server key (the HELLO box does not open), a malformed handshake
  kIncomplete = 2,  // ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL: closed or timed out before the handshake ended
};
inline constexpr int kRefusalReasonCount = 3;

// "key", "protocol", "incomplete".
const char* RefusalReasonName(RefusalReason reason);

struct LinkRefusals {
  std::string endpoint;  // as configured (ChannelOptions::endpoint), e.g. tcp://10.0.0.5:5555
  RefusalReason reason = RefusalReason::kKey;
  uint64_t count = 0;    // cumulative since Start
};

class LinkGuard {
 public:
  using Log = std::function<void(const std::string&)>;

  // Binds the ZAP handler on `context` and starts its thread. allowed_public_keys: Z85 (40
  // characters) keys a client may hold, normally the deployment's one. log: one line per logged
  // refusal (may be empty). Errors: kInvalidArgument (a key that is not Z85 of 32 bytes, or none),
  // kUnavailable (a ZAP handler is already bound on this context), kIoError (other zmq errors).
  static Result<std::unique_ptr<LinkGuard>> Start(zmq::context_t& context,
                                                  const std::vector<std::string>& allowed_public_keys,
                                                  Log log = {});
  ~LinkGuard();  // stops and joins the ZAP thread
  LinkGuard(const LinkGuard&) = delete;
  LinkGuard& operator=(const LinkGuard&) = delete;

  const zmq::context_t* context() const { return context_; }

  // For Channel::Open of a bound CURVE channel: a fresh inproc:// name for its socket monitor.
  std::string NextMonitorEndpoint();
  // Makes `endpoint`'s series exist, at 0 for every reason (done by Channel::Open).
  void Track(const std::string& endpoint);
  // One refused handshake on `endpoint` (a Channel reading its monitor).
  void CountRefusal(const std::string& endpoint, RefusalReason reason);
  // Every tracked endpoint x reason with its count, ordered by endpoint then reason.
  std::vector<LinkRefusals> refusals() const;
  uint64_t zap_requests() const { return zap_requests_.load(); }  // ZAP requests answered
  uint64_t zap_refused() const { return zap_refused_.load(); }    // of them, answered 400

 private:
  LinkGuard(zmq::context_t& context, std::set<std::string> allowed, Log log, EventFd wake);
  // The ZAP thread: binds, reports the bind through `bound`, answers requests until stop_.
  void Run(std::function<void(Status)> bound);
  // The reply frames to one ZAP request (its frames as received).
  std::vector<std::string> Answer(const std::vector<std::string>& request);

  zmq::context_t* const context_;
  const std::set<std::string> allowed_;  // binary public keys, 32 bytes each
  const Log log_;
  EventFd wake_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> next_monitor_{0};
  std::atomic<uint64_t> zap_requests_{0};
  std::atomic<uint64_t> zap_refused_{0};
  mutable Mutex mu_;
  std::map<std::pair<std::string, RefusalReason>, uint64_t> counts_ ZM_GUARDED_BY(mu_);
  std::string last_refused_address_ ZM_GUARDED_BY(mu_);  // the peer of the latest ZAP 400
  std::thread thread_;
};

}  // namespace zipmoe::messaging
