// PullWorker's framing of completions: BatchCompletions turns runs of queued completions into one
// frame each (order kept, other messages alone, long runs split), and completions posted together
// with PostAll reach the scheduler in one frame.
#include "common/ipc/pull_worker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/messaging_channel.h"
#include "tests/test_util.h"

namespace zipmoe::messaging {
namespace {

using std::chrono::milliseconds;

ReadCompletion Read(uint64_t op_id) {
  ReadCompletion c;
  c.op_id = op_id;
  return c;
}

DecodeCompletion Decode(uint64_t op_id) {
  DecodeCompletion c;
  c.op_id = op_id;
  return c;
}

// The op ids a frame carries, whatever its kind (heartbeats: none).
std::vector<uint64_t> OpIds(const Body& frame) {
  std::vector<uint64_t> ids;
  if (const auto* r = std::get_if<ReadCompletion>(&frame)) ids.push_back(r->op_id);
  if (const auto* d = std::get_if<DecodeCompletion>(&frame)) ids.push_back(d->op_id);
  if (const auto* rs = std::get_if<ReadCompletions>(&frame)) {
    for (const auto& r : rs->items) ids.push_back(r->op_id);
  }
  if (const auto* ds = std::get_if<DecodeCompletions>(&frame)) {
    for (const auto& d : ds->items) ids.push_back(d->op_id);
  }
  return ids;
}

TEST(PullWorkerFraming, RunsOfOneKindShareAFrameInOrder) {
  std::deque<Body> queued;
  queued.emplace_back(Read(1));
  queued.emplace_back(Read(2));
  queued.emplace_back(Decode(3));
  queued.emplace_back(MakeHeartbeat(500, 0));
  queued.emplace_back(Decode(4));
  queued.emplace_back(Decode(5));
  queued.emplace_back(Decode(6));
  queued.emplace_back(Read(7));
  const std::vector<Body> frames = BatchCompletions(std::move(queued));
  ASSERT_EQ(frames.size(), 5u);
  EXPECT_TRUE(std::holds_alternative<ReadCompletions>(frames[0]));
  EXPECT_EQ(OpIds(frames[0]), (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(std::holds_alternative<DecodeCompletion>(frames[1]));  // a run of one stays as it is
  EXPECT_EQ(OpIds(frames[1]), (std::vector<uint64_t>{3}));
  EXPECT_TRUE(std::holds_alternative<Heartbeat>(frames[2]));
  EXPECT_TRUE(std::holds_alternative<DecodeCompletions>(frames[3]));
  EXPECT_EQ(OpIds(frames[3]), (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_TRUE(std::holds_alternative<ReadCompletion>(frames[4]));
  EXPECT_EQ(OpIds(frames[4]), (std::vector<uint64_t>{7}));
  // Items keep every field: a batch item equals the completion it came from.
  ReadCompletion failed = Read(9);
  SetStatus(&failed, Status::Corruption("xxh64 mismatch"));
  failed.read_us = 17;
  std::deque<Body> two;
  two.emplace_back(failed);
  two.emplace_back(Read(10));
  const std::vector<Body> batch = BatchCompletions(std::move(two));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(*std::get<ReadCompletions>(batch[0]).items[0], failed);
  EXPECT_TRUE(BatchCompletions({}).empty());
}

TEST(PullWorkerFraming, ALongRunIsSplitAtTheFrameLimit) {
  std::deque<Body> queued;
  const size_t n = kMaxCompletionsPerFrame + 44;
  for (size_t i = 0; i < n; ++i) queued.emplace_back(Decode(i));
  const std::vector<Body> frames = BatchCompletions(std::move(queued));
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(std::get<DecodeCompletions>(frames[0]).items.size(), kMaxCompletionsPerFrame);
  EXPECT_EQ(std::get<DecodeCompletions>(frames[1]).items.size(), 44u);
  EXPECT_EQ(std::get<DecodeCompletions>(frames[1]).items.front()->op_id, kMaxCompletionsPerFrame);
}

TEST(PullWorkerFraming, CompletionsPostedTogetherArriveInOneFrame) {
  zmq::context_t context;
  auto router = Channel::Open(context, {SocketKind::kRouter, fmt::format("inproc://pull-framing-{}", ::getpid()),
                                        true, "", "scheduler"});
  ASSERT_TRUE(router.ok()) << router.status().ToString();
  PullWorkerConfig config;
  config.endpoint = router->endpoint();
  config.identity = "decompressor-test";
  config.role = kRoleDecompressor;
  auto worker = PullWorker::Create(context, config);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  Status run;
  std::thread loop([&] { run = (*worker)->Run([](const Body&) {}); });
  auto ready = router->Recv(milliseconds(10000));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  ASSERT_TRUE(std::holds_alternative<WorkerReady>(ready->message.body));

  std::vector<Body> together;
  for (uint64_t id : {21, 22, 23}) together.emplace_back(Decode(id));
  (*worker)->PostAll(std::move(together));
  std::vector<uint64_t> ids;
  int frames = 0;
  while (ids.size() < 3) {
    auto got = router->Recv(milliseconds(10000));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (std::holds_alternative<Heartbeat>(got->message.body)) continue;
    ++frames;
    for (uint64_t id : OpIds(got->message.body)) ids.push_back(id);
  }
  EXPECT_EQ(frames, 1);
  EXPECT_EQ(ids, (std::vector<uint64_t>{21, 22, 23}));
  EXPECT_TRUE(testing::Eventually([&] { return (*worker)->stats().completions == 3; }));
  EXPECT_EQ((*worker)->stats().frames, 1u);
  (*worker)->RequestStop();
  loop.join();
  EXPECT_TRUE(run.ok()) << run.ToString();
}

// A worker whose scheduler went silent reconnects after a back-off; a stop request during it returns
// at once (SIGTERM used to wait out up to 32 s of it, past `up`'s stop grace, which then SIGKILLed the
// worker and left its pipe behind).
TEST(PullWorkerReconnect, AStopRequestEndsTheBackOffAtOnce) {
  zmq::context_t context;
  PullWorkerConfig config;
  config.endpoint = fmt::format("inproc://pull-silent-{}", ::getpid());  // nobody ever answers
  config.identity = "decompressor-test";
  config.role = kRoleDecompressor;
  config.heartbeat_interval = milliseconds(50);
  config.liveness = 2;
  auto worker = PullWorker::Create(context, config);
  ASSERT_TRUE(worker.ok()) << worker.status().ToString();
  Status run;
  std::thread loop([&] { run = (*worker)->Run([](const Body&) {}); });
  // Silent for 2 x 50 ms: it closes the connection and backs off (1 s at first, doubling); by 1.5 s it
  // has reconnected once and sleeps in its second back-off.
  EXPECT_TRUE(testing::Eventually([&] { return (*worker)->stats().connects >= 2; }));
  std::this_thread::sleep_for(milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  (*worker)->RequestStop();
  loop.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(500));
  EXPECT_TRUE(run.ok()) << run.ToString();
  EXPECT_LE(kReconnectBackoffMax, milliseconds(4000));
}

}  // namespace
}  // namespace zipmoe::messaging
