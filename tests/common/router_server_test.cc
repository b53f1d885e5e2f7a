// RouterServer (common/ipc/router_server.h): the loop skeleton of the three ROUTER servers. Ticks while
// idle, hands every message and every bad frame to the handler in order, answers through its
// channel, wakes on Wake(), and Stop() runs OnLoopEnd once and is idempotent.
#include "common/ipc/router_server.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/mutex.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using std::chrono::milliseconds;
using zipmoe::testing::Eventually;

std::string Endpoint(const char* tag) {
  static int counter = 0;
  return fmt::format("inproc://zipmoe-router-server-test-{}-{}-{}", ::getpid(), counter++, tag);
}

// Records what the loop hands over; echoes every Heartbeat back with its `in_flight` + 1.
class Recorder : public RouterServer::Handler {
 public:
  explicit Recorder(RouterServer* server) : server_(server) {}
  void OnTick(RouterServer::Clock::time_point) override { ticks.fetch_add(1); }
  void OnMessage(Received& got) override {
    if (const auto* hb = std::get_if<Heartbeat>(&got.message.body)) {
      (void)server_->channel().SendTo(got.peer, MakeHeartbeat(hb->interval_ms, hb->in_flight + 1), milliseconds(100));
    }
    MutexLock lock(&mu);
    order.push_back("message from " + got.message.sender);
  }
  void OnBadMessage(const Status& bad) override {
    MutexLock lock(&mu);
    order.push_back(std::string("bad ") + StatusCodeName(bad.code()));
  }
  void OnMessagesDone() override { batches.fetch_add(1); }
  void OnLoopEnd() override { ends.fetch_add(1); }
  std::vector<std::string> Order() {
    MutexLock lock(&mu);
    return order;
  }

  std::atomic<int> ticks{0}, batches{0}, ends{0};

 private:
  RouterServer* server_;
  Mutex mu;
  std::vector<std::string> order ZM_GUARDED_BY(mu);
};

TEST(RouterServer, ServesMessagesInOrderAndRepliesThroughItsChannel) {
  zmq::context_t context;
  ChannelOptions options;
  options.endpoint = Endpoint("serve");
  options.sender = "server";
  Result<std::unique_ptr<RouterServer>> server = RouterServer::Bind(context, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Recorder recorder(server->get());
  (*server)->Start(&recorder, milliseconds(20));

  ChannelOptions client_options;
  client_options.kind = SocketKind::kDealer;
  client_options.endpoint = (*server)->endpoint();
  client_options.sender = "client";
  Result<Channel> client = Channel::Open(context, client_options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  raw.connect((*server)->endpoint());

  ASSERT_TRUE(client->Send(MakeHeartbeat(250, 1), milliseconds(100)).ok());
  Result<Received> echo = client->Recv(milliseconds(2000));
  ASSERT_TRUE(echo.ok()) << echo.status().ToString();
  ASSERT_TRUE(std::holds_alternative<Heartbeat>(echo->message.body));
  EXPECT_EQ(std::get<Heartbeat>(echo->message.body).in_flight, 2u);
  EXPECT_EQ(echo->message.sender, "server");

  raw.send(zmq::str_buffer("not a flatbuffer"));
  ASSERT_TRUE(Eventually([&] { return recorder.Order().size() == 2; }));
  ASSERT_TRUE(client->Send(MakeHeartbeat(250, 5), milliseconds(100)).ok());
  ASSERT_TRUE(Eventually([&] { return recorder.Order().size() == 3; }));
  EXPECT_EQ(recorder.Order(),
            (std::vector<std::string>{"message from client", "bad Corruption", "message from client"}));
  EXPECT_GE(recorder.batches.load(), 2);
  EXPECT_EQ((*server)->channel().stats().bad_messages, 1u);

  (*server)->Stop();
  EXPECT_EQ(recorder.ends.load(), 1);
  (*server)->Stop();  // idempotent: OnLoopEnd ran once
  EXPECT_EQ(recorder.ends.load(), 1);
  EXPECT_TRUE((*server)->stop_requested());
}

TEST(RouterServer, TicksWhileIdleAndAtOnceWhenWoken) {
  zmq::context_t context;
  ChannelOptions options;
  options.endpoint = Endpoint("tick");
  Result<std::unique_ptr<RouterServer>> server = RouterServer::Bind(context, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  Recorder recorder(server->get());
  (*server)->Start(&recorder, milliseconds(10));
  EXPECT_TRUE(Eventually([&] { return recorder.ticks.load() >= 5; })) << "idle ticks: " << recorder.ticks.load();
  (*server)->Stop();

  // A long poll interval: only Wake() can bring the next tick early.
  ChannelOptions wake_options;
  wake_options.endpoint = Endpoint("wake");
  Result<std::unique_ptr<RouterServer>> slow = RouterServer::Bind(context, wake_options);
  ASSERT_TRUE(slow.ok()) << slow.status().ToString();
  Recorder woken(slow->get());
  (*slow)->Start(&woken, milliseconds(60000));
  ASSERT_TRUE(Eventually([&] { return woken.ticks.load() == 1; }));
  (*slow)->Wake();
  EXPECT_TRUE(Eventually([&] { return woken.ticks.load() >= 2; })) << "Wake() did not end the wait";
  const auto t0 = std::chrono::steady_clock::now();
  (*slow)->Stop();  // ends the 60 s wait at once
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_EQ(woken.ends.load(), 1);
}

TEST(RouterServer, BindNamesABadEndpoint) {
  zmq::context_t context;
  ChannelOptions options;
  options.endpoint = "carrier-pigeon://nest";
  Result<std::unique_ptr<RouterServer>> server = RouterServer::Bind(context, options);
  ASSERT_FALSE(server.ok());
  EXPECT_NE(server.status().message().find("carrier-pigeon://nest"), std::string::npos) << server.status().ToString();
}

}  // namespace
}  // namespace zipmoe::messaging
