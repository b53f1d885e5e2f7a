// Link security: which ZeroMQ links are authenticated and encrypted with CURVE, and the key pair they
// use (issue 43, item 3; docs/messaging.md "Link security").
//
// CURVE (ZeroMQ RFC 26, CurveZMQ; zmq_curve(7)) gives a tcp:// link a Curve25519 handshake, then
// encrypts and authenticates every frame. A deployment has ONE key pair (zipmoe keygen, or `zipmoe up`
// writes RUN_DIR/link.key): every service holds it, so each one is both a CURVE server (its public key
// is the server key its clients expect) and an allowed client (the bound side's ZAP handler,
// common/ipc/link_guard.h, accepts exactly this public key). A peer without the secret key cannot
// finish the handshake: it is refused, and the bound side counts it.
//
// Which endpoints (LinkSecurityMode, config link_security.mode):
//   auto  CURVE on every tcp:// endpoint whose host is not loopback (127.0.0.0/8, ::1, localhost);
//         ipc://, inproc:// and loopback tcp stay plaintext, as before (only this machine reaches them)
//   on    CURVE on every tcp:// endpoint, loopback too (what the tests use: a CI machine may have no
//         second address)
//   off   plaintext everywhere (the services log a warning for each tcp endpoint off loopback)
//
// Key file (mode 0600, written atomically; czmq's zcert text layout, so zcert tools read it):
//   #   zipmoe link key ...
//   curve
//       public-key = "<40 Z85 characters>"
//       secret-key = "<40 Z85 characters>"
//
// Threads: plain data and pure functions, callable from any thread (the file functions touch only
// their own path). Errors: Status values naming the file or the endpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace zipmoe::messaging {

class LinkGuard;  // common/ipc/link_guard.h

// One CURVE key pair, each key 40 Z85 characters (32 bytes; ZeroMQ RFC 32).
struct CurveKeyPair {
  std::string public_key;
  std::string secret_key;
};

// A fresh key pair (zmq_curve_keypair: libsodium's randombytes). Errors: kUnavailable (this libzmq
// was built without CURVE: zmq_has("curve") is false).
Result<CurveKeyPair> GenerateCurveKeyPair();

// Writes `keys` to `path` with mode 0600: a temp file created 0600 in the same folder, fsync, then
// rename, so readers see the old file or the new one, never part of one (and never a readable copy).
// Replaces an existing file. Errors: kIoError naming the path.
Status SaveCurveKeyFile(const std::string& path, const CurveKeyPair& keys);

// Reads and checks a key file. Errors: kNotFound (no such file), kInvalidArgument (the file is
// readable or writable by group or others: chmod 600), kCorruption (no public-key or secret-key line,
// a key that is not 40 Z85 characters, or a public key that is not the secret key's), kIoError. Each
// message names the file.
Result<CurveKeyPair> LoadCurveKeyFile(const std::string& path);

// The key of `path` when it exists (LoadCurveKeyFile), else a new pair written there. Several
// processes may race (compose's containers start together): the new file is linked into place
// (link(2) fails on an existing name), so exactly one pair wins and every caller returns it.
// *created (may be null) tells whether this call wrote the file. Errors: LoadCurveKeyFile's,
// GenerateCurveKeyPair's, kIoError naming the path.
Result<CurveKeyPair> LoadOrCreateCurveKeyFile(const std::string& path, bool* created);

enum class LinkSecurityMode : uint8_t {
  kAuto = 0,  // CURVE on tcp:// off loopback
  kOn = 1,    // CURVE on every tcp://
  kOff = 2,   // plaintext everywhere
};

// "auto", "on", "off".
const char* LinkSecurityModeName(LinkSecurityMode mode);
// Errors: kInvalidArgument naming `key`, the text and the accepted values.
Result<LinkSecurityMode> ParseLinkSecurityMode(const std::string& text, const std::string& key);

// Whether `endpoint` is tcp:// to or on a loopback host: 127.x.x.x, ::1 ([::1]) or localhost. A
// connect with a source address (tcp://SRC;HOST:PORT) is judged by HOST. False for ipc://, inproc://,
// a wildcard (tcp://*:P, tcp://0.0.0.0:P) or an interface name.
bool IsLoopbackTcp(const std::string& endpoint);

// Whether `endpoint` carries CURVE under `mode`: never for ipc:// and inproc://; for tcp:// always
// under kOn, off loopback under kAuto, never under kOff.
//   tcp://10.0.0.5:5555 (auto) -> true      tcp://127.0.0.1:1 (auto) -> false
//   tcp://[::1]:1 (auto)       -> false     ipc:///tmp/a.sock (on)   -> false
bool EndpointNeedsCurve(const std::string& endpoint, LinkSecurityMode mode);

// What messaging::Channel::Open needs to secure a link (ChannelOptions::security). The default is
// plaintext everywhere (embedded mode, tests). Copyable; `guard` is borrowed.
struct LinkSecurity {
  LinkSecurityMode mode = LinkSecurityMode::kOff;
  std::optional<CurveKeyPair> keys;  // the deployment's pair; required on a CURVE endpoint
  // The ZAP handler and refusal counters of the channel's zmq context (link_guard.h); required to
  // bind a CURVE endpoint, unused when connecting. Must outlive the channels opened with it.
  LinkGuard* guard = nullptr;

  bool NeedsCurve(const std::string& endpoint) const { return EndpointNeedsCurve(endpoint, mode); }
};

}  // namespace zipmoe::messaging
