// The scheduler's WorkerDispatcher (worker_dispatcher.h) with real PullWorkers in this process, each
// test once over ZeroMQ and once over shared-memory pipes: every read and decode completes exactly
// once through the link in use; a worker that leaves with ops in hand (its Disconnect through the
// pipe) has them re-issued to another; a pipe the scheduler cannot attach is refused by name over
// ZeroMQ, which then carries that worker's work.
#include "services/links/worker_dispatcher.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/ipc/messaging_channel.h"
#include "common/mutex.h"
#include "common/ipc/pull_worker.h"
#include "common/ipc/shm_region.h"
#include "services/decompressor/decompressor_worker.h"
#include "services/storage/storage_worker.h"
#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

namespace msg = messaging;
using std::chrono::milliseconds;
using testing::TempDir;

constexpr uint64_t kArenaBytes = 1 << 20;

// What the dispatcher handed back, by op id.
struct Completions {
  Mutex mu;
  std::map<uint64_t, int> reads ZM_GUARDED_BY(mu);    // op id -> times completed OK
  std::map<uint64_t, int> decodes ZM_GUARDED_BY(mu);
  size_t Reads() {
    MutexLock lock(&mu);
    return reads.size();
  }
  size_t Decodes() {
    MutexLock lock(&mu);
    return decodes.size();
  }
};

// A PullWorker whose handler answers every request at once (answer = true) or holds it.
struct FakeWorker {
  std::unique_ptr<msg::PullWorker> worker;
  std::thread loop;
  Status run;
  ~FakeWorker() { Stop(); }
  void Stop() {
    if (!loop.joinable()) return;
    worker->RequestStop();
    loop.join();
  }
};

class WorkerDispatcherTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    Result<ShmRegion> arena =
        ShmRegion::Create(fmt::format("/zipmoe-test-dispatch-{}", static_cast<long>(::getpid())), kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    arena_.emplace(std::move(arena).value());
    config_.endpoint = "ipc://" + tmp_.path() + "/workers.sock";
    config_.heartbeat_interval = milliseconds(100);
    config_.liveness = 3;
    EngineSetup setup;
    setup.arena_base = arena_->data();
    setup.arena_bytes = arena_->size_bytes();
    setup.arena_name = arena_->name();
    setup.on_read = [this](const storage::ReadCompletion& c) {
      if (!c.status.ok()) return;
      MutexLock lock(&done_.mu);
      ++done_.reads[c.op_id];
    };
    setup.on_decode = [this](const decompressor::DecompressCompletion& c) {
      if (!c.status.ok()) return;
      MutexLock lock(&done_.mu);
      ++done_.decodes[c.op_id];
    };
    Result<std::shared_ptr<WorkerDispatcher>> d = WorkerDispatcher::Start(context_, config_, setup);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    dispatcher_ = std::move(d).value();
  }
  void TearDown() override {
    for (auto& w : workers_) w->Stop();
    if (dispatcher_) dispatcher_->Stop();
  }

  // Starts a worker of `role` ("storage" / "decompressor"); answer = false: it holds what it gets.
  msg::PullWorker* StartWorker(const std::string& role, const std::string& name, bool answer) {
    msg::PullWorkerConfig c;
    c.endpoint = config_.endpoint;
    c.identity = name;
    c.role = role;
    c.credits = 8;
    c.arena_name = arena_->name();
    c.arena_bytes = arena_->size_bytes();
    c.heartbeat_interval = milliseconds(100);
    c.liveness = 3;
    c.pipe = GetParam();
    auto w = std::make_unique<FakeWorker>();
    Result<std::unique_ptr<msg::PullWorker>> created = msg::PullWorker::Create(context_, c);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    w->worker = std::move(created).value();
    msg::PullWorker* worker = w->worker.get();
    FakeWorker* raw = w.get();
    w->loop = std::thread([raw, worker, answer] {
      raw->run = worker->Run([worker, answer](const msg::Body& request) {
        if (!answer) return;
        std::vector<msg::Body> out;
        if (const auto* reads = std::get_if<msg::ReadRequest>(&request)) {
          for (const auto& op : reads->ops) {
            storage::ReadCompletion c;
            c.op_id = op->op_id;
            out.emplace_back(storage::ReadCompletionToWire(c, op->attempt));
          }
        } else if (const auto* decodes = std::get_if<msg::DecodeRequests>(&request)) {
          for (const auto& op : decodes->items) {
            out.emplace_back(decompressor::DecodeCompletionToWire({op->op_id, Status::Ok(), 0, 1}, op->attempt));
          }
        } else if (const auto* decode = std::get_if<msg::DecodeRequest>(&request)) {
          out.emplace_back(decompressor::DecodeCompletionToWire({decode->op_id, Status::Ok(), 0, 1}, decode->attempt));
        }
        worker->PostAll(std::move(out));
      });
    });
    workers_.push_back(std::move(w));
    return worker;
  }

  std::vector<storage::ReadOp> Reads(uint64_t first, int n) {
    std::vector<storage::ReadOp> ops;
    for (int i = 0; i < n; ++i) {
      storage::ReadOp op;
      op.op_id = first + i;
      op.stored_bytes = 4096;
      op.dst = arena_->data() + 4096 * (i % 64);
      op.dst_capacity_bytes = 4096;
      op.tensor_name = "t";
      ops.push_back(op);
    }
    return ops;
  }

  decompressor::DecompressOp Decode(uint64_t id) {
    decompressor::DecompressOp op;
    op.op_id = id;
    op.src = arena_->data();
    op.stored_bytes = 64;
    op.dst = arena_->data() + 8192;
    op.raw_bytes = 64;
    op.tensor_name = "t";
    return op;
  }

  void WaitForWorkers(int32_t storage, int32_t decompressors) {
    ASSERT_TRUE(testing::Eventually([&] {
      const DispatcherStats st = dispatcher_->stats();
      return st.storage_workers == storage && st.decompressors == decompressors;
    })) << "workers never connected";
  }

  TempDir tmp_;
  std::optional<ShmRegion> arena_;
  zmq::context_t context_{1};
  DispatcherConfig config_;
  Completions done_;
  std::shared_ptr<WorkerDispatcher> dispatcher_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_P(WorkerDispatcherTest, EveryReadAndDecodeCompletesOnceThroughTheLinkInUse) {
  msg::PullWorker* storage = StartWorker(msg::kRoleStorage, "storage-1", true);
  msg::PullWorker* decomp = StartWorker(msg::kRoleDecompressor, "decompressor-1", true);
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1, 1));
  EXPECT_EQ(dispatcher_->stats().pipe_workers, GetParam() ? 2 : 0);
  constexpr int kOps = 200;  // more than the credits: the rest go out as completions return them
  for (int batch = 0; batch < kOps; batch += 20) ASSERT_TRUE(dispatcher_->SubmitReads(Reads(1 + batch, 20)).ok());
  for (int i = 0; i < kOps; ++i) ASSERT_TRUE(dispatcher_->AddDecode(Decode(10000 + i), /*ready=*/i % 2 == 0).ok());
  for (int i = 1; i < kOps; i += 2) ASSERT_TRUE(dispatcher_->MarkReady(10000 + i).ok());
  ASSERT_TRUE(testing::Eventually([&] { return done_.Reads() == kOps && done_.Decodes() == kOps; }))
      << done_.Reads() << " reads, " << done_.Decodes() << " decodes completed";
  {
    MutexLock lock(&done_.mu);
    for (const auto& [id, n] : done_.reads) EXPECT_EQ(n, 1) << "read " << id;
    for (const auto& [id, n] : done_.decodes) EXPECT_EQ(n, 1) << "decode " << id;
  }
  const DispatcherStats st = dispatcher_->stats();
  EXPECT_EQ(st.duplicates, 0u);
  EXPECT_EQ(st.reads_in_flight + st.reads_waiting + st.decodes_in_flight + st.decodes_waiting, 0u);
  EXPECT_EQ(storage->stats().completions, static_cast<uint64_t>(kOps));
  EXPECT_EQ(decomp->stats().completions, static_cast<uint64_t>(kOps));
  if (GetParam()) {
    EXPECT_GT(storage->stats().pipe_frames, 0u);
    EXPECT_GT(decomp->stats().pipe_frames, 0u);
  } else {
    EXPECT_EQ(storage->stats().pipe_frames, 0u);
  }
}

// A storage worker takes reads and leaves without answering (RequestStop: Disconnect, through its
// pipe when it has one): the dispatcher re-issues them to the worker that joins next.
TEST_P(WorkerDispatcherTest, ALeavingWorkersReadsAreReissuedToTheNextOne) {
  StartWorker(msg::kRoleStorage, "storage-holder", /*answer=*/false);
  ASSERT_NO_FATAL_FAILURE(WaitForWorkers(1, 0));
  ASSERT_TRUE(dispatcher_->SubmitReads(Reads(1, 5)).ok());
  ASSERT_TRUE(testing::Eventually([&] { return dispatcher_->stats().reads_in_flight == 5; }));
  workers_.front()->Stop();
  ASSERT_TRUE(testing::Eventually([&] { return dispatcher_->stats().reissued == 5; }))
      << "reissued " << dispatcher_->stats().reissued;
  EXPECT_EQ(done_.Reads(), 0u);
  StartWorker(msg::kRoleStorage, "storage-answers", /*answer=*/true);
  ASSERT_TRUE(testing::Eventually([&] { return done_.Reads() == 5; })) << done_.Reads();
  MutexLock lock(&done_.mu);
  for (const auto& [id, n] : done_.reads) EXPECT_EQ(n, 1) << "read " << id;
}

INSTANTIATE_TEST_SUITE_P(Link, WorkerDispatcherTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Pipe" : "ZeroMQ"; });

// A WorkerReady naming a pipe the scheduler cannot attach: an Ack refusing it by name, over ZeroMQ,
// and the worker's reads still come over ZeroMQ.
TEST(WorkerDispatcherPipeTest, APipeTheSchedulerCannotAttachIsRefusedAndZeroMQCarriesTheWork) {
  TempDir tmp;
  Result<ShmRegion> arena =
      ShmRegion::Create(fmt::format("/zipmoe-test-dispatch-refuse-{}", static_cast<long>(::getpid())), kArenaBytes);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  zmq::context_t context(1);
  DispatcherConfig config;
  config.endpoint = "ipc://" + tmp.path() + "/workers.sock";
  EngineSetup setup;
  setup.arena_base = arena->data();
  setup.arena_bytes = arena->size_bytes();
  setup.arena_name = arena->name();
  Result<std::shared_ptr<WorkerDispatcher>> dispatcher = WorkerDispatcher::Start(context, config, setup);
  ASSERT_TRUE(dispatcher.ok()) << dispatcher.status().ToString();

  msg::ChannelOptions options;
  options.kind = msg::SocketKind::kDealer;
  options.endpoint = config.endpoint;
  options.identity = "storage-raw";
  Result<msg::Channel> raw = msg::Channel::Open(context, options);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  msg::WorkerReady ready;
  ready.role = msg::kRoleStorage;
  ready.credits = 4;
  ready.n_threads = 1;
  ready.arena_name = arena->name();
  ready.arena_bytes = arena->size_bytes();
  ready.pipe_name = fmt::format("/zipmoe-test-no-such-pipe-{}", static_cast<long>(::getpid()));
  ASSERT_TRUE(raw->Send(ready, milliseconds(5000)).ok());
  std::optional<Status> refused;
  bool read_request = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool submitted = false;
  while ((!refused || !read_request) && std::chrono::steady_clock::now() < deadline) {
    if (refused && !submitted) {
      storage::ReadOp op;
      op.op_id = 7;
      op.dst = arena->data();
      op.dst_capacity_bytes = 4096;
      op.stored_bytes = 100;
      ASSERT_TRUE((*dispatcher)->SubmitReads({op}).ok());
      submitted = true;
    }
    Result<msg::Received> got = raw->Recv(milliseconds(100));
    if (!got.ok()) continue;
    if (const auto* ack = std::get_if<msg::Ack>(&got->message.body)) refused = msg::StatusOf(*ack);
    if (const auto* r = std::get_if<msg::ReadRequest>(&got->message.body)) {
      ASSERT_EQ(r->ops.size(), 1u);
      EXPECT_EQ(r->ops[0]->op_id, 7u);
      read_request = true;
    }
  }
  ASSERT_TRUE(refused.has_value()) << "no Ack";
  EXPECT_EQ(refused->code(), StatusCode::kNotFound) << refused->ToString();
  EXPECT_NE(refused->ToString().find(ready.pipe_name), std::string::npos) << refused->ToString();
  EXPECT_TRUE(read_request) << "the read never came over ZeroMQ";
  EXPECT_EQ((*dispatcher)->stats().pipe_workers, 0);
  (*dispatcher)->Stop();
}

}  // namespace
}  // namespace zipmoe::runtime
