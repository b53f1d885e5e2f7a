// StorageWorker (`zipmoe service storage`'s body) against a fake scheduler: a ROUTER that answers
// WorkerReady with ReadRequests. A request's ops are read into the shared arena bit-exactly, chunks
// back to back in the file with one preadv; an op outside the arena, or one the I/O thread refuses
// (file offset not 4 KiB-aligned), fails alone, named, while the rest of its request is read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/checkpoint/expert_store.h"
#include "common/ipc/messaging_channel.h"
#include "common/ipc/shm_region.h"
#include "services/storage/aligned_buffer.h"
#include "services/storage/storage_worker.h"
#include "tests/services/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::storage {
namespace {

namespace msg = messaging;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{10000};

class StorageWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = ExpertStore::Open(test::CompressedModel::Dir());
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    auto arena = ShmRegion::Create(fmt::format("/zm-storage-worker-test-{}", ::getpid()), kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    arena_ = std::make_unique<ShmRegion>(std::move(arena).value());
    auto router = msg::Channel::Open(context_, {msg::SocketKind::kRouter,
                                                fmt::format("inproc://storage-worker-test-{}", ::getpid()), true,
                                                "", "scheduler"});
    ASSERT_TRUE(router.ok()) << router.status().ToString();
    router_ = std::make_unique<msg::Channel>(std::move(router).value());
    StorageWorkerOptions options;
    options.pull.endpoint = router_->endpoint();
    options.pull.identity = "storage-test";
    options.experts_path = store_->experts_path();
    auto worker = StorageWorker::Create(context_, *arena_, options);
    ASSERT_TRUE(worker.ok()) << worker.status().ToString();
    worker_ = std::move(worker).value();
    thread_ = std::thread([this] { run_status_ = worker_->Run(); });
    auto ready = router_->Recv(kTimeout);
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    ASSERT_TRUE(std::holds_alternative<msg::WorkerReady>(ready->message.body));
    EXPECT_EQ(std::get<msg::WorkerReady>(ready->message.body).role, msg::kRoleStorage);
    peer_ = ready->peer;
  }

  void TearDown() override {
    if (worker_) worker_->RequestStop();
    if (thread_.joinable()) thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  }

  // The read of chunk `c` of `t` into the arena at `dst_offset`.
  std::unique_ptr<msg::ChunkRead> Read(const ExpertTensorInfo& t, int c, uint64_t op_id, uint64_t dst_offset) const {
    uint8_t* dst = arena_->data() + dst_offset;
    const uint64_t capacity = RoundUpBytes(t.chunks.at(static_cast<size_t>(c)).stored_bytes);
    return std::make_unique<msg::ChunkRead>(
        ChunkReadToWire(MakeChunkReadOp(t, c, op_id, dst, capacity), arena_->data(), /*attempt=*/0));
  }

  // Sends `request` and collects one completion per op, by op id (alone or in ReadCompletions frames).
  std::map<uint64_t, ReadCompletion> Exchange(const msg::ReadRequest& request) {
    std::map<uint64_t, ReadCompletion> done;
    EXPECT_TRUE(router_->SendTo(peer_, request, kTimeout).ok());
    while (done.size() < request.ops.size()) {
      auto got = router_->Recv(kTimeout);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (!got.ok()) break;
      if (const auto* c = std::get_if<msg::ReadCompletion>(&got->message.body)) {
        done[c->op_id] = ReadCompletionFromWire(*c);
      } else if (const auto* batch = std::get_if<msg::ReadCompletions>(&got->message.body)) {
        for (const auto& item : batch->items) done[item->op_id] = ReadCompletionFromWire(*item);
      }
    }
    return done;
  }

  // Whether the arena at `dst_offset` holds chunk `c` of `t` exactly.
  bool ArenaHolds(const ExpertTensorInfo& t, int c, uint64_t dst_offset) const {
    std::vector<uint8_t> want(t.chunks.at(static_cast<size_t>(c)).stored_bytes);
    if (!store_->ReadChunk(t, c, want.data()).ok()) return false;
    return std::memcmp(arena_->data() + dst_offset, want.data(), want.size()) == 0;
  }

  static constexpr uint64_t kArenaBytes = uint64_t{16} << 20;
  zmq::context_t context_;
  std::unique_ptr<ExpertStore> store_;
  std::unique_ptr<ShmRegion> arena_;
  std::unique_ptr<msg::Channel> router_;
  std::unique_ptr<StorageWorker> worker_;
  std::thread thread_;
  Status run_status_;
  std::string peer_;
};

TEST_F(StorageWorkerTest, ReadsARequestIntoTheArenaBackToBackChunksInOnePreadv) {
  // Two tensors the converter wrote one after the other: all their chunks continue each other.
  const auto& all = store_->manifest().expert_tensors;
  ASSERT_GE(all.size(), 2u);
  msg::ReadRequest request;
  uint64_t at = 0;
  std::vector<std::tuple<const ExpertTensorInfo*, int, uint64_t>> placed;
  for (const ExpertTensorInfo* t : {&all[0], &all[1]}) {
    for (int c = 0; c < static_cast<int>(t->chunks.size()); ++c) {
      request.ops.push_back(Read(*t, c, request.ops.size() + 1, at));
      placed.emplace_back(t, c, at);
      at += RoundUpBytes(t->chunks[static_cast<size_t>(c)].stored_bytes);
    }
  }
  ASSERT_LE(at, kArenaBytes);
  const auto done = Exchange(request);
  ASSERT_EQ(done.size(), request.ops.size());
  for (const auto& [id, c] : done) EXPECT_TRUE(c.status.ok()) << id << ": " << c.status.ToString();
  for (const auto& [t, c, offset] : placed) EXPECT_TRUE(ArenaHolds(*t, c, offset)) << t->name << " chunk " << c;
  if (!worker_->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  // The I/O thread counts an op right after its completion went out.
  EXPECT_TRUE(testing::Eventually([&] { return worker_->storage_stats().ops_ok == request.ops.size(); }))
      << worker_->storage_stats().ops_ok;
  const StorageStats stats = worker_->storage_stats();
  EXPECT_EQ(stats.reads, 1u) << "the request's chunks continue each other in the file: one preadv";
}

TEST_F(StorageWorkerTest, ABadOpFailsAloneAndTheRestOfItsRequestIsRead) {
  const auto& all = store_->manifest().expert_tensors;
  const ExpertTensorInfo& t = all.at(all.size() / 2);
  msg::ReadRequest request;
  request.ops.push_back(Read(t, 0, 1, 0));
  std::unique_ptr<msg::ChunkRead> outside = Read(t, 1, 2, kArenaBytes - 4096);  // its destination runs past the arena
  outside->dst_capacity_bytes = 8192;
  request.ops.push_back(std::move(outside));
  std::unique_ptr<msg::ChunkRead> misaligned = Read(t, 2, 3, 1 << 20);  // the I/O thread refuses this file offset
  misaligned->file_offset += 512;
  request.ops.push_back(std::move(misaligned));
  request.ops.push_back(Read(t, 3, 4, 2 << 20));
  const auto done = Exchange(request);
  ASSERT_EQ(done.size(), 4u);
  EXPECT_TRUE(done.at(1).status.ok()) << done.at(1).status.ToString();
  EXPECT_TRUE(done.at(4).status.ok()) << done.at(4).status.ToString();
  EXPECT_TRUE(ArenaHolds(t, 0, 0));
  EXPECT_TRUE(ArenaHolds(t, 3, 2 << 20));
  EXPECT_EQ(done.at(2).status.code(), StatusCode::kInvalidArgument) << done.at(2).status.ToString();
  EXPECT_NE(done.at(2).status.message().find(arena_->name()), std::string::npos) << done.at(2).status.ToString();
  EXPECT_NE(done.at(2).status.message().find(t.name), std::string::npos) << done.at(2).status.ToString();
  EXPECT_EQ(done.at(3).status.code(), StatusCode::kInvalidArgument) << done.at(3).status.ToString();
  EXPECT_NE(done.at(3).status.message().find("not a multiple of 4096"), std::string::npos)
      << done.at(3).status.ToString();
  EXPECT_EQ(worker_->queued(), 0u);
}

TEST(ChunkReadWireTest, ARoundTripKeepsEveryFieldAndTheDestinationBecomesAnArenaOffset) {
  std::vector<uint8_t> arena(3 * 4096);
  ReadOp op;
  op.op_id = 77;
  op.file_offset = 8192;
  op.stored_bytes = 1234;
  op.dst = arena.data() + 4096;
  op.dst_capacity_bytes = 4096;
  op.xxh64 = 0x0123456789abcdefULL;
  op.tensor_name = "model.layers.3.mlp.experts.5.up_proj.weight";
  op.layer_id = 3;
  op.expert_id = 5;
  op.kind = ChunkKind::kSm;
  op.chunk_index = 4;
  const msg::ChunkRead wire = ChunkReadToWire(op, arena.data(), /*attempt=*/2);
  EXPECT_EQ(wire.dst_offset, 4096u);
  EXPECT_EQ(wire.attempt, 2u);
  std::vector<uint8_t> other(3 * 4096);  // another process's mapping of the same arena
  const ReadOp back = ChunkReadFromWire(wire, other.data());
  EXPECT_EQ(back.dst, other.data() + 4096);
  EXPECT_EQ(back.op_id, op.op_id);
  EXPECT_EQ(back.file_offset, op.file_offset);
  EXPECT_EQ(back.stored_bytes, op.stored_bytes);
  EXPECT_EQ(back.dst_capacity_bytes, op.dst_capacity_bytes);
  EXPECT_EQ(back.xxh64, op.xxh64);
  EXPECT_EQ(back.tensor_name, op.tensor_name);
  EXPECT_EQ(back.layer_id, op.layer_id);
  EXPECT_EQ(back.expert_id, op.expert_id);
  EXPECT_EQ(back.kind, op.kind);
  EXPECT_EQ(back.chunk_index, op.chunk_index);
}

TEST(ChunkReadWireTest, ACompletionRoundTripKeepsItsStatusAndAttempt) {
  ReadCompletion c;
  c.op_id = 78;
  c.status = Status::Corruption("experts.bin@8192: xxh64 mismatch");
  c.kind = ChunkKind::kSm;
  c.stored_bytes = 1234;
  c.read_bytes = 4096;
  c.read_us = 17;
  c.verify_us = 3;
  const msg::ReadCompletion wire = ReadCompletionToWire(c, /*attempt=*/5);
  EXPECT_EQ(wire.attempt, 5u);
  const ReadCompletion back = ReadCompletionFromWire(wire);
  EXPECT_EQ(back.op_id, c.op_id);
  EXPECT_EQ(back.status.code(), StatusCode::kCorruption);
  EXPECT_EQ(back.status.message(), c.status.message());
  EXPECT_EQ(back.kind, c.kind);
  EXPECT_EQ(back.stored_bytes, c.stored_bytes);
  EXPECT_EQ(back.read_bytes, c.read_bytes);
  EXPECT_EQ(back.read_us, c.read_us);
  EXPECT_EQ(back.verify_us, c.verify_us);
  c.status = Status::Ok();
  EXPECT_TRUE(ReadCompletionFromWire(ReadCompletionToWire(c, 0)).status.ok());
}

}  // namespace
}  // namespace zipmoe::storage
