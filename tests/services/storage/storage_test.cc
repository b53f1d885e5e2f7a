// StorageService (the I/O thread): bit-exact chunk reads of a real compressed model through O_DIRECT,
// completion order = submission order, hash failures named and never served, validation and Stop
// semantics. File modes: storage_file_modes_test.cc; coalesced reads: storage_coalescing_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint/expert_store.h"
#include "common/hash.h"
#include "kernels/recovery.h"
#include "services/storage/aligned_buffer.h"
#include "services/storage/storage_service.h"
#include "tests/services/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::storage {
namespace {

using test::CompressedModel;
using test::CopyModel;
using test::PickTensors;
using test::TensorBuffers;
using test::MakeOps;
using test::LeadingContiguousRun;
using test::CompletionLog;
using testing::TempDir;

TEST(StorageServiceTest, ReadsEveryChunkAndDecodesBitExact) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_EQ((*store)->manifest().n_shards, 4);
  std::vector<TensorBuffers> tensors;
  for (const ExpertTensorInfo* t : PickTensors(**store)) tensors.push_back({t, {}});
  std::vector<ReadOp> ops = MakeOps(tensors, 100);
  ASSERT_EQ(ops.size(), tensors.size() * 5);  // K = 4 E-chunks + 1 SM-chunk each

  CompletionLog log;
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.on_complete = [&](const ReadCompletion& c) { log.Add(c); };
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  ASSERT_TRUE((*service)->Submit(ops).ok());
  uint64_t e_bytes = 0, sm_bytes = 0;
  for (const ReadOp& op : ops) {
    auto c = (*service)->WaitFor(op.op_id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_EQ(c->stored_bytes, op.stored_bytes);
    EXPECT_GE(c->read_bytes, op.stored_bytes);
    (op.kind == ChunkKind::kE ? e_bytes : sm_bytes) += op.stored_bytes;
  }
  const StorageStats stats = (*service)->stats();
  EXPECT_EQ(stats.ops_ok, ops.size());
  EXPECT_EQ(stats.ops_failed, 0u);
  EXPECT_EQ(stats.io_bytes_e, e_bytes);
  EXPECT_EQ(stats.io_bytes_sm, sm_bytes);

  // Decode the E-chunks, merge with the SM plane, compare with ExpertStore's own read path.
  for (const TensorBuffers& tb : tensors) {
    const ExpertTensorInfo& t = *tb.t;
    const int64_t n = t.numel();
    std::vector<uint8_t> e_plane(static_cast<size_t>(n));
    const uint8_t* sm_plane = nullptr;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      if (t.chunks[i].kind == ChunkKind::kSm) {
        sm_plane = tb.chunks[i].data();
        continue;
      }
      ASSERT_TRUE(ExpertStore::DecodeEChunk(t, static_cast<int>(i), tb.chunks[i].data(), e_plane.data()).ok());
    }
    ASSERT_NE(sm_plane, nullptr);
    std::vector<uint16_t> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    kernels::RecoverBf16Reference(e_plane.data(), sm_plane, got.data(), n);
    ASSERT_TRUE((*store)->ReadTensorBf16(t, want.data()).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), static_cast<size_t>(n) * 2), 0) << t.name;
    EXPECT_EQ(Xxh64(got.data(), static_cast<uint64_t>(n) * 2), t.bf16_xxh64) << t.name;
  }
}

TEST(StorageServiceTest, CompletionOrderEqualsSubmissionOrder) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<TensorBuffers> tensors;
  for (const ExpertTensorInfo* t : PickTensors(**store)) tensors.push_back({t, {}});
  std::vector<ReadOp> ops = MakeOps(tensors, 1);
  // A scheduler's order is not file order: shuffle, then submit in three batches, the last one from
  // inside the callback of the first op (re-entrant Submit).
  std::mt19937 rng(5);
  std::shuffle(ops.begin(), ops.end(), rng);
  const size_t a = ops.size() / 3, b = 2 * ops.size() / 3;
  std::vector<ReadOp> batch1(ops.begin(), ops.begin() + a), batch2(ops.begin() + a, ops.begin() + b),
      batch3(ops.begin() + b, ops.end());

  CompletionLog log;
  StorageService* raw = nullptr;
  std::mutex submit_mu;
  Status reentrant_submit;
  bool submitted_from_callback = false;
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.on_complete = [&](const ReadCompletion& c) {
    log.Add(c);
    if (c.op_id == batch1.front().op_id) {
      std::lock_guard<std::mutex> lock(submit_mu);
      reentrant_submit = raw->Submit(batch3);
      submitted_from_callback = true;
    }
  };
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  raw = service->get();
  ASSERT_TRUE((*service)->Submit(batch1).ok());
  ASSERT_TRUE((*service)->Submit(batch2).ok());
  const std::vector<uint64_t> order = log.WaitForCount(ops.size());
  {
    std::lock_guard<std::mutex> lock(submit_mu);
    ASSERT_TRUE(submitted_from_callback);
    ASSERT_TRUE(reentrant_submit.ok()) << reentrant_submit.ToString();
  }
  // batch3 was submitted while batch2 may or may not have been queued yet: both orders are a valid
  // submission order, and completions must follow whichever happened.
  std::vector<uint64_t> want12, want21;
  for (const auto* batches : {&batch1, &batch2, &batch3}) for (const ReadOp& op : *batches) want12.push_back(op.op_id);
  for (const auto* batches : {&batch1, &batch3, &batch2}) for (const ReadOp& op : *batches) want21.push_back(op.op_id);
  EXPECT_TRUE(order == want12 || order == want21);
  (*service)->Stop();
  EXPECT_EQ((*service)->stats().ops_ok, ops.size());
}

TEST(StorageServiceTest, FlippedByteCompletesWithCorruptionNamingTheChunk) {
  TempDir tmp;
  const std::string dir = CopyModel(tmp);
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto& all = (*store)->manifest().expert_tensors;
  const ExpertTensorInfo& victim = all.at(all.size() / 2);
  const ChunkInfo& hit = victim.chunks.at(1);  // E-chunk 1
  {
    // Flip one byte in the middle of the chunk.
    std::fstream f((*store)->experts_path(), std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good());
    const auto pos = static_cast<std::streamoff>(hit.file_offset + hit.stored_bytes / 2);
    f.seekg(pos);
    char ch = 0;
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 0x5a);
    f.seekp(pos);
    f.write(&ch, 1);
  }
  std::vector<TensorBuffers> tensors(1);
  tensors[0].t = &victim;
  std::vector<ReadOp> ops = MakeOps(tensors, 40);
  // A scheduler decodes an E-chunk only after an OK completion: count what it would decode.
  std::vector<uint64_t> decodable;
  std::vector<ReadCompletion> failed;
  CompletionLog log;
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.on_complete = [&](const ReadCompletion& c) {  // I/O thread; read after Stop()
    if (c.status.ok()) {
      if (c.kind == ChunkKind::kE) decodable.push_back(c.op_id);
    } else {
      failed.push_back(c);
    }
    log.Add(c);
  };
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  ASSERT_TRUE((*service)->Submit(ops).ok());
  log.WaitForCount(ops.size());
  (*service)->Stop();
  ASSERT_EQ(failed.size(), 1u);
  const ReadCompletion& bad = failed.front();
  EXPECT_EQ(bad.op_id, 41u);  // ops[1] = E-chunk 1
  EXPECT_EQ(bad.status.code(), StatusCode::kCorruption);
  const std::string& msg = bad.status.message();
  EXPECT_NE(msg.find((*store)->experts_path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("@" + std::to_string(hit.file_offset)), std::string::npos) << msg;
  EXPECT_NE(msg.find("E-chunk 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find(victim.name), std::string::npos) << msg;
  EXPECT_NE(msg.find("layer " + std::to_string(victim.layer_id)), std::string::npos) << msg;
  EXPECT_NE(msg.find("expert " + std::to_string(victim.expert_id)), std::string::npos) << msg;
  EXPECT_EQ(decodable, (std::vector<uint64_t>{40, 42, 43}));
  const StorageStats stats = (*service)->stats();
  EXPECT_EQ(stats.ops_failed, 1u);
  EXPECT_EQ(stats.ops_ok, ops.size() - 1);
}

TEST(StorageServiceTest, InvalidOpsAreRejectedAndNothingIsQueued) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok());
  const ExpertTensorInfo& t = (*store)->manifest().expert_tensors.front();
  auto buf = AlignedBuffer::Allocate(t.chunks[0].stored_bytes + 8192);
  ASSERT_TRUE(buf.ok());
  const ReadOp good = MakeChunkReadOp(t, 0, 1, buf->data(), buf->capacity_bytes());

  ReadOp unaligned_offset = good;
  unaligned_offset.file_offset += 512;
  ReadOp unaligned_dst = good;
  unaligned_dst.dst += 8;
  ReadOp small = good;
  small.dst_capacity_bytes = RoundUpBytes(good.stored_bytes) - 4096;
  ReadOp null_dst = good;
  null_dst.dst = nullptr;
  for (const ReadOp& bad : {unaligned_offset, unaligned_dst, small, null_dst}) {
    Status st = (*service)->Submit({good, bad});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(t.name), std::string::npos) << st.ToString();
  }
  // Nothing was queued by the rejected batches: op 1 is unknown.
  EXPECT_EQ((*service)->WaitFor(1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*service)->Submit({good, good}).code(), StatusCode::kInvalidArgument);  // duplicate id

  ASSERT_TRUE((*service)->Submit({good}).ok());
  auto c = (*service)->WaitFor(1);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->status.ok()) << c->status.ToString();
  EXPECT_EQ((*service)->WaitFor(1).status().code(), StatusCode::kNotFound);  // already taken

  config.retain_completions = false;
  auto no_retain = StorageService::Create(config);
  ASSERT_TRUE(no_retain.ok());
  EXPECT_EQ((*no_retain)->WaitFor(1).status().code(), StatusCode::kInvalidArgument);
}

TEST(StorageServiceTest, MissingFileIsNotFound) {
  TempDir tmp;
  StorageConfig config;
  config.path = tmp.Sub("experts.bin");
  auto service = StorageService::Create(config);
  ASSERT_FALSE(service.ok());
  EXPECT_EQ(service.status().code(), StatusCode::kNotFound);
  EXPECT_NE(service.status().message().find(config.path), std::string::npos);
}

TEST(StorageServiceTest, StopCompletesQueuedOpsWithUnavailable) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  std::vector<TensorBuffers> tensors;
  for (const ExpertTensorInfo* t : PickTensors(**store)) tensors.push_back({t, {}});
  std::vector<ReadOp> ops = MakeOps(tensors, 1);
  std::vector<ReadCompletion> completions;  // I/O thread only; read after Stop()
  CompletionLog log;
  StorageService* raw = nullptr;
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.on_complete = [&](const ReadCompletion& c) {
    completions.push_back(c);
    // Stop once the first op is done: the rest of the batch is still queued.
    if (c.op_id == 1) raw->RequestStop();
    log.Add(c);
  };
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok());
  raw = service->get();
  ASSERT_TRUE((*service)->Submit(ops).ok());
  log.WaitForCount(ops.size());  // the I/O thread drains the queue by itself after RequestStop
  (*service)->Stop();
  (*service)->Stop();  // idempotent
  ASSERT_EQ(completions.size(), ops.size());  // every op completed exactly once
  // The I/O thread read op 1 together with the ops that continue it in the file (one preadv): those
  // were in progress when the stop came and arrive intact; every op still queued is kUnavailable.
  const size_t in_progress = LeadingContiguousRun(ops);
  ASSERT_GE(in_progress, 1u);
  ASSERT_LT(in_progress, ops.size()) << "PickTensors must leave a gap in the file";
  for (size_t i = 0; i < completions.size(); ++i) {
    EXPECT_EQ(completions[i].op_id, ops[i].op_id);
    if (i < in_progress) {
      EXPECT_TRUE(completions[i].status.ok()) << i << ": " << completions[i].status.ToString();
      continue;
    }
    EXPECT_EQ(completions[i].status.code(), StatusCode::kUnavailable) << completions[i].status.ToString();
    EXPECT_NE(completions[i].status.message().find(ops[i].tensor_name), std::string::npos);
  }
  EXPECT_EQ((*service)->stats().ops_unavailable, ops.size() - in_progress);
  EXPECT_EQ((*service)->Submit({ops[0]}).code(), StatusCode::kUnavailable);
}

TEST(AlignedBufferTest, RoundsCapacityAndAligns) {
  auto b = AlignedBuffer::Allocate(5000);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->capacity_bytes(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
  AlignedBuffer moved = std::move(b).value();
  EXPECT_EQ(moved.capacity_bytes(), 8192u);
  EXPECT_EQ(AlignedBuffer::Allocate(10, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RoundUpBytes(0), 0u);
  EXPECT_EQ(RoundUpBytes(1), 4096u);
  EXPECT_EQ(RoundUpBytes(4096), 4096u);
}

}  // namespace
}  // namespace zipmoe::storage
