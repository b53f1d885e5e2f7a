// Tests for common/ipc/link_guard and the CURVE channels of common/ipc/messaging_channel (issue 43,
// item 3): a CURVE ROUTER/DEALER pair over tcp://127.0.0.1 (mode on) exchanges messages; a DEALER
// with a key pair of its own, one that expects another server key, and a plaintext one each send a
// valid message that never arrives, and the ROUTER's guard counts each refusal by reason (through
// Recv and through WaitReadable); the deployment's client still gets through afterwards. ipc://,
// inproc:// and loopback tcp under auto stay plaintext beside a guard. A CURVE channel without keys,
// or bound without a guard of its context, is refused; one guard per context.
#include "common/ipc/link_guard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/ipc/event_fd.h"
#include "common/ipc/link_security.h"
#include "common/ipc/messaging_channel.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{5000};  // only reached when a test fails
// How long a stranger's message is given to arrive: it never may.
constexpr milliseconds kStrangerWait{500};

CurveKeyPair NewKeys() {
  auto keys = GenerateCurveKeyPair();
  EXPECT_TRUE(keys.ok()) << keys.status().ToString();
  return keys.ok() ? *keys : CurveKeyPair{};
}

std::unique_ptr<LinkGuard> StartGuard(zmq::context_t& context, const CurveKeyPair& keys) {
  auto guard = LinkGuard::Start(context, {keys.public_key});
  EXPECT_TRUE(guard.ok()) << guard.status().ToString();
  return guard.ok() ? std::move(guard).value() : nullptr;
}

ChannelOptions Opts(SocketKind kind, const std::string& endpoint, bool bind, const LinkSecurity& security,
                    const std::string& identity = "") {
  ChannelOptions options;
  options.kind = kind;
  options.endpoint = endpoint;
  options.bind = bind;
  options.identity = identity;
  options.sender = bind ? "server" : "client";
  options.security = security;
  return options;
}

Channel OpenOrDie(zmq::context_t& context, const ChannelOptions& options) {
  auto channel = Channel::Open(context, options);
  EXPECT_TRUE(channel.ok()) << channel.status().ToString();
  if (!channel.ok()) std::abort();
  return std::move(channel).value();
}

uint64_t Refused(const LinkGuard& guard, const std::string& endpoint, RefusalReason reason) {
  for (const LinkRefusals& r : guard.refusals()) {
    if (r.endpoint == endpoint && r.reason == reason) return r.count;
  }
  return 0;
}

// A stranger's DEALER: optionally CURVE with its own keys and a server key of its choice.
zmq::socket_t StrangerDealer(zmq::context_t& context, const std::string& endpoint, const CurveKeyPair* own,
                             const std::string& server_key) {
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  if (own != nullptr) {
    dealer.set(zmq::sockopt::curve_serverkey, server_key);
    dealer.set(zmq::sockopt::curve_publickey, own->public_key);
    dealer.set(zmq::sockopt::curve_secretkey, own->secret_key);
  }
  dealer.connect(endpoint);
  // A valid zipmoe message: it would be answered if it arrived.
  const std::string frame = EncodeMessage("stranger", MakeHeartbeat(100, 0));
  dealer.send(zmq::buffer(frame), zmq::send_flags::dontwait);
  return dealer;
}

// Receives on `router` for kStrangerWait: nothing may arrive. Then waits (up to kTimeout, Recv draining
// the monitor each time) until `guard` counted a refusal of `reason`.
void ExpectRefused(Channel& router, const LinkGuard& guard, RefusalReason reason) {
  auto got = router.Recv(kStrangerWait);
  EXPECT_FALSE(got.ok()) << "a stranger's message arrived";
  if (!got.ok()) {
    EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  }
  const auto deadline = Clock::now() + kTimeout;
  uint64_t n = 0;
  while (Clock::now() < deadline) {
    n = 0;
    for (const LinkRefusals& r : guard.refusals()) {
      if (r.reason == reason) n += r.count;
    }
    if (n > 0) break;
    (void)router.Recv(milliseconds(20));  // drains the monitor
  }
  EXPECT_GT(n, 0u) << RefusalReasonName(reason);
}

void ExpectExchange(Channel& router, Channel& dealer) {
  ASSERT_TRUE(dealer.Send(MakeHeartbeat(100, 7), kTimeout).ok());
  auto up = router.Recv(kTimeout);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ(up->message.sender, "client");
  ASSERT_TRUE(router.SendTo(up->peer, MakeHeartbeat(100, 8), kTimeout).ok());
  auto down = dealer.Recv(kTimeout);
  ASSERT_TRUE(down.ok()) << down.status().ToString();
  EXPECT_EQ(down->message.sender, "server");
}

TEST(LinkGuardTest, CurvePairExchangesAndStrangersAreRefusedAndCounted) {
  zmq::context_t context;
  const CurveKeyPair keys = NewKeys();
  std::unique_ptr<LinkGuard> guard = StartGuard(context, keys);
  ASSERT_NE(guard, nullptr);
  LinkSecurity security{LinkSecurityMode::kOn, keys, guard.get()};
  const std::string configured = "tcp://127.0.0.1:*";
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, configured, true, security));
  EXPECT_TRUE(router.curve());
  ASSERT_NE(router.monitor(), nullptr);
  // Every reason's series exists at 0 before anything happened, under the configured endpoint.
  EXPECT_EQ(guard->refusals().size(), static_cast<size_t>(kRefusalReasonCount));
  for (const LinkRefusals& r : guard->refusals()) {
    EXPECT_EQ(r.endpoint, configured);
    EXPECT_EQ(r.count, 0u);
  }
  // The deployment's client (another context: another process, as far as ZeroMQ is concerned).
  zmq::context_t client_context;
  Channel dealer = OpenOrDie(client_context, Opts(SocketKind::kDealer, router.endpoint(), false,
                                                  LinkSecurity{LinkSecurityMode::kOn, keys, nullptr}, "w1"));
  EXPECT_TRUE(dealer.curve());
  EXPECT_EQ(dealer.monitor(), nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectExchange(router, dealer));
  EXPECT_GE(guard->zap_requests(), 1u);
  EXPECT_EQ(guard->zap_refused(), 0u);

  zmq::context_t stranger_context;
  {
    SCOPED_TRACE("CURVE with a key pair of its own (it knows the public server key)");
    const CurveKeyPair own = NewKeys();
    zmq::socket_t s = StrangerDealer(stranger_context, router.endpoint(), &own, keys.public_key);
    ExpectRefused(router, *guard, RefusalReason::kKey);
    EXPECT_GT(Refused(*guard, configured, RefusalReason::kKey), 0u);
    EXPECT_GE(guard->zap_refused(), 1u);
  }
  {
    SCOPED_TRACE("CURVE expecting another server key");
    const CurveKeyPair own = NewKeys();
    zmq::socket_t s = StrangerDealer(stranger_context, router.endpoint(), &own, NewKeys().public_key);
    ExpectRefused(router, *guard, RefusalReason::kProtocol);
  }
  {
    // The server sees the mechanism mismatch (protocol), or, when the plaintext peer saw it first and
    // its close reset the connection before the server read its greeting, a handshake cut short
    // (incomplete): refused and counted either way.
    SCOPED_TRACE("plaintext");
    const auto refused = [&] {
      return Refused(*guard, configured, RefusalReason::kProtocol) +
             Refused(*guard, configured, RefusalReason::kIncomplete);
    };
    const uint64_t before = refused();
    zmq::socket_t s = StrangerDealer(stranger_context, router.endpoint(), nullptr, "");
    auto got = router.Recv(kStrangerWait);
    EXPECT_FALSE(got.ok()) << "a plaintext message arrived";
    const auto deadline = Clock::now() + kTimeout;
    while (refused() <= before && Clock::now() < deadline) (void)router.Recv(milliseconds(20));
    EXPECT_GT(refused(), before);
  }
  EXPECT_EQ(router.stats().bad_messages, 0u);
  // The deployment's client is unaffected, and so is a new one.
  ASSERT_NO_FATAL_FAILURE(ExpectExchange(router, dealer));
  Channel second = OpenOrDie(client_context, Opts(SocketKind::kDealer, router.endpoint(), false,
                                                  LinkSecurity{LinkSecurityMode::kOn, keys, nullptr}, "w2"));
  ASSERT_NO_FATAL_FAILURE(ExpectExchange(router, second));
}

// A poll loop (RouterServer's) sees refusals through WaitReadable, without a Recv.
TEST(LinkGuardTest, WaitReadableCountsRefusals) {
  zmq::context_t context;
  const CurveKeyPair keys = NewKeys();
  std::unique_ptr<LinkGuard> guard = StartGuard(context, keys);
  ASSERT_NE(guard, nullptr);
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "tcp://127.0.0.1:*", true,
                                           LinkSecurity{LinkSecurityMode::kOn, keys, guard.get()}));
  auto wake = EventFd::Create();
  ASSERT_TRUE(wake.ok());
  zmq::context_t stranger_context;
  const CurveKeyPair own = NewKeys();
  zmq::socket_t s = StrangerDealer(stranger_context, router.endpoint(), &own, keys.public_key);
  const auto deadline = Clock::now() + kTimeout;
  while (Refused(*guard, "tcp://127.0.0.1:*", RefusalReason::kKey) == 0 && Clock::now() < deadline) {
    auto readable = WaitReadable(router, *wake, milliseconds(50));
    ASSERT_TRUE(readable.ok()) << readable.status().ToString();
    EXPECT_FALSE(*readable) << "a stranger's message arrived";
  }
  EXPECT_GT(Refused(*guard, "tcp://127.0.0.1:*", RefusalReason::kKey), 0u);
}

// ipc://, inproc:// and (under auto) loopback tcp stay plaintext beside a guard, even with keys given:
// a plain ZeroMQ DEALER talks to them.
TEST(LinkGuardTest, IpcInprocAndLoopbackUnderAutoStayPlaintext) {
  zmq::context_t context;
  const CurveKeyPair keys = NewKeys();
  std::unique_ptr<LinkGuard> guard = StartGuard(context, keys);
  ASSERT_NE(guard, nullptr);
  testing::TempDir tmp;
  const struct {
    std::string endpoint;
    LinkSecurityMode mode;
  } cases[] = {{"ipc://" + tmp.Sub("a.sock"), LinkSecurityMode::kOn},
               {fmt::format("inproc://link-guard-test-{}", ::getpid()), LinkSecurityMode::kOn},
               {"tcp://127.0.0.1:*", LinkSecurityMode::kAuto}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.endpoint);
    const LinkSecurity security{c.mode, keys, guard.get()};
    Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, c.endpoint, true, security));
    EXPECT_FALSE(router.curve());
    EXPECT_EQ(router.monitor(), nullptr);
    Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, security));
    EXPECT_FALSE(dealer.curve());
    ASSERT_NO_FATAL_FAILURE(ExpectExchange(router, dealer));
    // A peer with no keys at all gets through: plaintext, as before.
    zmq::socket_t plain(context, zmq::socket_type::dealer);
    plain.set(zmq::sockopt::linger, 0);
    plain.connect(router.endpoint());
    const std::string frame = EncodeMessage("plain", MakeHeartbeat(100, 0));
    plain.send(zmq::buffer(frame), zmq::send_flags::none);
    auto got = router.Recv(kTimeout);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->message.sender, "plain");
  }
  EXPECT_TRUE(guard->refusals().empty()) << "no CURVE endpoint was bound";
}

TEST(LinkGuardTest, CurveChannelsNeedKeysAndAGuardOfTheirContext) {
  zmq::context_t context;
  zmq::context_t other;
  const CurveKeyPair keys = NewKeys();
  std::unique_ptr<LinkGuard> other_guard = StartGuard(other, keys);
  ASSERT_NE(other_guard, nullptr);
  const std::string endpoint = "tcp://127.0.0.1:*";
  auto no_keys = Channel::Open(context, Opts(SocketKind::kDealer, "tcp://10.0.0.5:5555", false,
                                             LinkSecurity{LinkSecurityMode::kAuto, std::nullopt, nullptr}));
  ASSERT_FALSE(no_keys.ok());
  EXPECT_EQ(no_keys.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_keys.status().message(), HasSubstr("tcp://10.0.0.5:5555"));
  EXPECT_THAT(no_keys.status().message(), HasSubstr("link_security.key_file"));
  auto no_guard = Channel::Open(context, Opts(SocketKind::kRouter, endpoint, true,
                                              LinkSecurity{LinkSecurityMode::kOn, keys, nullptr}));
  ASSERT_FALSE(no_guard.ok());
  EXPECT_EQ(no_guard.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(no_guard.status().message(), HasSubstr("LinkGuard"));
  auto wrong_context = Channel::Open(context, Opts(SocketKind::kRouter, endpoint, true,
                                                   LinkSecurity{LinkSecurityMode::kOn, keys, other_guard.get()}));
  ASSERT_FALSE(wrong_context.ok());
  EXPECT_THAT(wrong_context.status().message(), HasSubstr("another zmq context"));
  // A client needs no guard.
  auto client = Channel::Open(context, Opts(SocketKind::kDealer, "tcp://127.0.0.1:1", false,
                                            LinkSecurity{LinkSecurityMode::kOn, keys, nullptr}));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
}

TEST(LinkGuardTest, OneGuardPerContextAndKeysMustBeZ85) {
  zmq::context_t context;
  const CurveKeyPair keys = NewKeys();
  std::unique_ptr<LinkGuard> guard = StartGuard(context, keys);
  ASSERT_NE(guard, nullptr);
  auto second = LinkGuard::Start(context, {keys.public_key});
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("zeromq.zap.01"));
  zmq::context_t other;
  auto bad = LinkGuard::Start(other, {"not a key"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto none = LinkGuard::Start(other, {});
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  // Once the first guard is gone the context takes a new one.
  guard.reset();
  auto again = LinkGuard::Start(context, {keys.public_key});
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

}  // namespace
}  // namespace zipmoe::messaging
