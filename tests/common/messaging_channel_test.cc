// Tests for common/messaging_channel (ZeroMQ transport): every message type round-trips bit-exactly
// over inproc://, ipc:// and tcp://127.0.0.1; a channel drops and counts bad messages and keeps
// serving; recv timeouts give kDeadlineExceeded; a ROUTER routes replies to the right DEALER by
// routing id; sends beyond the high-water mark time out.
#include "common/ipc/messaging_channel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "schemas/messages_generated.h"
#include "tests/common/messaging_samples.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using ::testing::HasSubstr;
using std::chrono::milliseconds;
using samples::AllBodies;
using samples::RawEnvelope;

constexpr milliseconds kTimeout{5000};  // generous: only reached when a test fails

// ---- Channels ----------------------------------------------------------------------------------

// A name unique to this process and call, so parallel test runs never collide.
std::string UniqueName(const char* tag) {
  static int counter = 0;
  return fmt::format("zipmoe-test-{}-{}-{}", ::getpid(), counter++, tag);
}

ChannelOptions Opts(SocketKind kind, std::string endpoint, bool bind, std::string identity = "",
                    std::string sender = "") {
  ChannelOptions options;
  options.kind = kind;
  options.endpoint = std::move(endpoint);
  options.bind = bind;
  options.identity = std::move(identity);
  options.sender = std::move(sender);
  return options;
}

Channel OpenOrDie(zmq::context_t& context, ChannelOptions options) {
  auto channel = Channel::Open(context, options);
  EXPECT_TRUE(channel.ok()) << channel.status().ToString();
  if (!channel.ok()) std::abort();
  return std::move(channel).value();
}

// A ROUTER bound at `endpoint` and a DEALER "worker-1" connected to it: every message type goes
// DEALER -> ROUTER and back ROUTER -> DEALER, compared field by field.
void RoundTripOver(const std::string& endpoint) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, endpoint, true, "", "scheduler"));
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-1", "decompressor-1"));
  for (const Body& body : AllBodies()) {
    ASSERT_TRUE(dealer.Send(body, kTimeout).ok()) << BodyName(body);
    auto up = router.Recv(kTimeout);
    ASSERT_TRUE(up.ok()) << endpoint << " " << BodyName(body) << ": " << up.status().ToString();
    EXPECT_EQ(up->peer, "worker-1");
    EXPECT_EQ(up->message.sender, "decompressor-1");
    EXPECT_EQ(up->message.version, kMessageVersion);
    EXPECT_TRUE(up->message.body == body) << endpoint << " " << BodyName(body);

    ASSERT_TRUE(router.SendTo(up->peer, body, kTimeout).ok()) << BodyName(body);
    auto down = dealer.Recv(kTimeout);
    ASSERT_TRUE(down.ok()) << endpoint << " " << BodyName(body) << ": " << down.status().ToString();
    EXPECT_EQ(down->peer, "");
    EXPECT_EQ(down->message.sender, "scheduler");
    EXPECT_TRUE(down->message.body == body) << endpoint << " " << BodyName(body);
  }
  EXPECT_EQ(router.stats().received, AllBodies().size());
  EXPECT_EQ(router.stats().sent, AllBodies().size());
  EXPECT_EQ(dealer.stats().bad_messages, 0u);
}

TEST(ChannelTest, RoundTripOverInproc) { RoundTripOver("inproc://" + UniqueName("rt")); }

TEST(ChannelTest, RoundTripOverIpc) {
  testing::TempDir dir;
  RoundTripOver("ipc://" + dir.Sub("scheduler.ipc"));
}

TEST(ChannelTest, RoundTripOverTcpEphemeralLoopbackPort) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "tcp://127.0.0.1:*", true, "", "storage"));
  EXPECT_THAT(router.endpoint(), ::testing::StartsWith("tcp://127.0.0.1:"));
  EXPECT_NE(router.endpoint(), "tcp://127.0.0.1:*");
  RoundTripOver("tcp://127.0.0.1:*");
}

TEST(ChannelTest, PairPipeBetweenThreadsOfOneContext) {
  zmq::context_t context;
  const std::string endpoint = "inproc://" + UniqueName("pair");
  Channel a = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, true, "", "a"));
  Channel b = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, false, "", "b"));
  ASSERT_TRUE(a.Send(MakeHeartbeat(100, 0), kTimeout).ok());
  auto got = b.Recv(kTimeout);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->message.body == Body(MakeHeartbeat(100, 0)));
  EXPECT_EQ(got->message.sender, "a");
}

TEST(ChannelTest, RecvTimeoutIsDeadlineExceeded) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("idle"), true));
  const auto start = std::chrono::steady_clock::now();
  auto got = router.Recv(milliseconds(50));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().ToString();
  EXPECT_THAT(got.status().message(), HasSubstr("no message within 50 ms"));
  EXPECT_GE(waited, milliseconds(50));
  EXPECT_LT(waited, milliseconds(2000));
  EXPECT_EQ(router.Recv(milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(router.Recv(milliseconds(-1)).status().code(), StatusCode::kInvalidArgument);
}

TEST(ChannelTest, RouterRoutesRepliesByIdentity) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("q"), true, "", "scheduler"));
  Channel a = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-a", "a"));
  Channel b = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "worker-b", "b"));
  Channel anonymous = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "", "c"));
  auto ready_of = [](int32_t threads, int32_t pid) {
    WorkerReady ready;
    ready.n_threads = ready.credits = threads;
    ready.arena_name = "/arena";
    ready.arena_bytes = 4096;
    ready.pid = pid;
    ready.heartbeat_interval_ms = 500;
    return ready;
  };
  ASSERT_TRUE(a.Send(ready_of(2, 1), kTimeout).ok());
  ASSERT_TRUE(b.Send(ready_of(4, 2), kTimeout).ok());
  ASSERT_TRUE(anonymous.Send(ready_of(1, 3), kTimeout).ok());

  // Answer each READY with a request carrying the worker's own pid as op_id.
  std::vector<std::string> peers;
  for (int i = 0; i < 3; ++i) {
    auto ready = router.Recv(kTimeout);
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    peers.push_back(ready->peer);
    DecodeRequest request;
    request.op_id = static_cast<uint64_t>(std::get<WorkerReady>(ready->message.body).pid);
    ASSERT_TRUE(router.SendTo(ready->peer, request, kTimeout).ok());
  }
  EXPECT_THAT(peers, ::testing::UnorderedElementsAre("worker-a", "worker-b", ::testing::_));
  for (const std::string& peer : peers) {
    if (peer != "worker-a" && peer != "worker-b") {
      EXPECT_EQ(peer.size(), 5u);  // ZeroMQ's generated id: 0 then 4 bytes
      EXPECT_THAT(PrintableId(peer), ::testing::StartsWith("0x00"));
    }
  }
  const std::pair<Channel*, uint64_t> expected[] = {{&a, 1}, {&b, 2}, {&anonymous, 3}};
  for (const auto& [channel, op_id] : expected) {
    auto got = channel->Recv(kTimeout);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(std::get<DecodeRequest>(got->message.body).op_id, op_id);
    EXPECT_EQ(channel->Recv(milliseconds(0)).status().code(), StatusCode::kDeadlineExceeded);
  }

  // An unknown peer is an error, not a silent drop (ZMQ_ROUTER_MANDATORY).
  const Status gone = router.SendTo("worker-z", MakeHeartbeat(500, 0), milliseconds(100));
  EXPECT_EQ(gone.code(), StatusCode::kUnavailable) << gone.ToString();
  EXPECT_THAT(gone.message(), HasSubstr("worker-z"));
}

TEST(ChannelTest, BadMessagesAreDroppedCountedAndTheChannelKeepsServing) {
  zmq::context_t context;
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("bad"), true));
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "rogue");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(router.endpoint());

  const std::string valid = EncodeMessage("rogue", MakeHeartbeat(1, 2));
  const std::string wrong_version = RawEnvelope(kMessageVersion + 1, fb::Body::Heartbeat, true);
  std::mt19937_64 rng(7);
  std::string garbage(64, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());

  raw.send(zmq::buffer(garbage));                                       // random bytes
  raw.send(zmq::buffer(valid.data(), valid.size() / 2));                 // truncated
  raw.send(zmq::buffer(wrong_version));                                  // wrong version
  raw.send(zmq::buffer(valid), zmq::send_flags::sndmore);                // two frames
  raw.send(zmq::buffer(valid));
  raw.send(zmq::message_t(), zmq::send_flags::none);                     // empty frame
  raw.send(zmq::buffer(valid));                                          // fine

  const StatusCode want[] = {StatusCode::kCorruption, StatusCode::kCorruption, StatusCode::kInvalidArgument,
                             StatusCode::kInvalidArgument, StatusCode::kCorruption};
  for (size_t i = 0; i < std::size(want); ++i) {
    auto got = router.Recv(kTimeout);
    ASSERT_FALSE(got.ok()) << "message " << i;
    EXPECT_EQ(got.status().code(), want[i]) << got.status().ToString();
    EXPECT_THAT(got.status().message(), HasSubstr(router.endpoint() + " peer rogue"));
  }
  auto good = router.Recv(kTimeout);
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_TRUE(good->message.body == Body(MakeHeartbeat(1, 2)));
  EXPECT_EQ(router.stats().bad_messages, std::size(want));
  EXPECT_EQ(router.stats().received, 1u);
}

TEST(ChannelTest, MisuseAndBadEndpointsAreErrors) {
  zmq::context_t context;
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "http://x", true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "tcp://", true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kRouter, "ipc:///" + std::string(200, 'x'), true)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Channel::Open(context, Opts(SocketKind::kDealer, "inproc://x", false, std::string(1, '\0') + "id"))
                .status().code(),
            StatusCode::kInvalidArgument);

  const std::string endpoint = "inproc://" + UniqueName("twice");
  Channel first = OpenOrDie(context, Opts(SocketKind::kRouter, endpoint, true));
  auto second = Channel::Open(context, Opts(SocketKind::kRouter, endpoint, true));
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  EXPECT_THAT(second.status().message(), HasSubstr(endpoint));

  EXPECT_EQ(first.Send(Heartbeat(), kTimeout).code(), StatusCode::kInvalidArgument);
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, endpoint, false));
  EXPECT_EQ(dealer.SendTo("x", Heartbeat(), kTimeout).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dealer.Send(Heartbeat(), milliseconds(-1)).code(), StatusCode::kInvalidArgument);
}

TEST(ChannelTest, SendBeyondHighWaterMarkTimesOut) {
  zmq::context_t context;
  const std::string endpoint = "inproc://" + UniqueName("hwm");
  Channel pair_a = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, true));
  Channel pair_b = OpenOrDie(context, Opts(SocketKind::kPair, endpoint, false));
  // Nobody reads pair_b; the default high-water marks (1000 each way) fill up.
  Status status;
  int sent = 0;
  while (status.ok() && sent < 100000) {
    status = pair_a.Send(MakeHeartbeat(1, static_cast<uint32_t>(sent)), milliseconds(0));
    if (status.ok()) ++sent;
  }
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_GT(sent, 0);
  EXPECT_EQ(pair_a.Send(Heartbeat(), milliseconds(20)).code(), StatusCode::kDeadlineExceeded);
  // Draining the reader makes room again (ZeroMQ re-opens the pipe at its low-water mark), and
  // nothing sent before the deadline was lost.
  int drained = 0;
  while (pair_b.Recv(milliseconds(0)).ok()) ++drained;
  EXPECT_EQ(drained, sent);
  EXPECT_TRUE(pair_a.Send(Heartbeat(), kTimeout).ok());

  // A ROUTER whose peer stopped reading: SendTo times out instead of dropping (ROUTER_MANDATORY).
  Channel router = OpenOrDie(context, Opts(SocketKind::kRouter, "inproc://" + UniqueName("hwm-r"), true));
  Channel dealer = OpenOrDie(context, Opts(SocketKind::kDealer, router.endpoint(), false, "slow"));
  ASSERT_TRUE(dealer.Send(Heartbeat(), kTimeout).ok());
  ASSERT_TRUE(router.Recv(kTimeout).ok());
  sent = 0;
  status = Status::Ok();
  while (status.ok() && sent < 100000) {
    status = router.SendTo("slow", MakeHeartbeat(1, static_cast<uint32_t>(sent)), milliseconds(0));
    if (status.ok()) ++sent;
  }
  EXPECT_EQ(status.code(), StatusCode::kDeadlineExceeded) << status.ToString();
  EXPECT_GT(sent, 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(router.SendTo("slow", Heartbeat(), milliseconds(20)).code(), StatusCode::kDeadlineExceeded);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(20));
}

TEST(ChannelTest, PrintableId) {
  EXPECT_EQ(PrintableId("worker-a"), "worker-a");
  EXPECT_EQ(PrintableId(std::string("\0\x01\xff", 3)), "0x0001ff");
  EXPECT_EQ(PrintableId(""), "0x");
}

}  // namespace
}  // namespace zipmoe::messaging
