// DecompressorPool's queue: priority order among READY ops, READY gating, Stop semantics, exactly-once
// completion under concurrency, and Cancel for failed reads.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "common/checkpoint/expert_store.h"
#include "common/hash.h"
#include "services/decompressor/decompress_op.h"
#include "services/decompressor/decompressor_pool.h"
#include "tests/services/decompressor/decompressor_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::decompressor {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using test::CompressedModel;
using test::Gate;
using test::CompletionLog;
using test::CopyOp;

TEST(DecompressorPoolTest, ReadyOpsRunInPriorityOrderAndWaitingOpsNever) {
  Gate gate;
  CompletionLog log;
  DecompressorConfig config;
  config.n_workers = 1;
  config.retain_completions = true;
  config.on_complete = [&](const DecompressCompletion& c) {
    log.Add(c);
    if (c.op_id == 1) gate.EnterAndWait();
  };
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  CopyOp first(1, 0);
  ASSERT_TRUE((*pool)->Add(first.op, /*ready=*/true).ok());
  gate.WaitEntered();  // the only worker is now blocked on op 1

  // READY ops with priorities out of order (ids 10.. in Add order), ties kept in Add order.
  const std::vector<std::pair<uint64_t, int32_t>> ready = {{10, 5}, {11, 1}, {12, 4}, {13, 2}, {14, 3},
                                                           {15, 1}, {16, -7}, {17, 4}};
  std::vector<std::unique_ptr<CopyOp>> ops;
  for (auto [id, prio] : ready) {
    ops.push_back(std::make_unique<CopyOp>(id, prio));
    ASSERT_TRUE((*pool)->Add(ops.back()->op, /*ready=*/true).ok());
  }
  // More urgent than all of them, but never marked READY.
  for (uint64_t id : {20, 21}) {
    ops.push_back(std::make_unique<CopyOp>(id, -100));
    ASSERT_TRUE((*pool)->Add(ops.back()->op, /*ready=*/false).ok());
  }
  // Marked READY later: joins at its priority.
  ops.push_back(std::make_unique<CopyOp>(22, 3));
  ASSERT_TRUE((*pool)->Add(ops.back()->op, /*ready=*/false).ok());
  ASSERT_TRUE((*pool)->MarkReady(22).ok());
  ASSERT_TRUE((*pool)->MarkReady(22).ok());  // idempotent
  gate.Release();

  const std::vector<uint64_t> want = {1, 16, 11, 15, 13, 14, 22, 12, 17, 10};
  for (uint64_t id : want) {
    auto c = (*pool)->WaitFor(id);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_EQ(c->worker_index, 0);
  }
  std::vector<uint64_t> order;
  for (const auto& c : log.all()) order.push_back(c.op_id);
  EXPECT_EQ(order, want);
  for (const auto& op : ops) {
    if (op->op.op_id < 20 || op->op.op_id == 22) {
      EXPECT_EQ(op->dst, op->src) << op->op.op_id;
    }
  }
  // 20 and 21 were never taken.
  EXPECT_EQ((*pool)->stats().ops_ok, want.size());
  (*pool)->Stop();
  for (uint64_t id : {20, 21}) {
    auto c = (*pool)->WaitFor(id);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(c->status.code(), StatusCode::kUnavailable) << c->status.ToString();
    EXPECT_EQ(c->worker_index, -1);
  }
  EXPECT_EQ(ops[8]->dst, std::vector<uint8_t>(64, 0));  // op 20 never ran
  EXPECT_EQ(ops[9]->dst, std::vector<uint8_t>(64, 0));  // op 21 never ran
}

TEST(DecompressorPoolTest, StopCompletesPendingOpsWithUnavailable) {
  Gate gate;
  CompletionLog log;
  DecompressorPool* raw = nullptr;
  DecompressorConfig config;
  config.n_workers = 1;
  config.on_complete = [&](const DecompressCompletion& c) {
    log.Add(c);
    if (c.op_id == 1) gate.EnterAndWait();
  };
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  raw = pool->get();
  CopyOp first(1, 0), a(2, 3), b(3, 1), waiting(4, 0);
  ASSERT_TRUE(raw->Add(first.op, true).ok());
  gate.WaitEntered();
  ASSERT_TRUE(raw->Add(a.op, true).ok());
  ASSERT_TRUE(raw->Add(b.op, true).ok());
  ASSERT_TRUE(raw->Add(waiting.op, false).ok());
  raw->RequestStop();  // while the worker is still blocked: it must take nothing more
  EXPECT_EQ(raw->Add(CopyOp(5, 0).op, true).code(), StatusCode::kUnavailable);
  EXPECT_EQ(raw->MarkReady(4).code(), StatusCode::kUnavailable);
  gate.Release();
  raw->Stop();
  raw->Stop();  // idempotent
  const auto all = log.all();
  ASSERT_EQ(all.size(), 4u);  // exactly once each
  EXPECT_EQ(all[0].op_id, 1u);
  EXPECT_TRUE(all[0].status.ok());
  // READY ones by priority, then the waiting one.
  EXPECT_EQ(all[1].op_id, 3u);
  EXPECT_EQ(all[2].op_id, 2u);
  EXPECT_EQ(all[3].op_id, 4u);
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_EQ(all[i].status.code(), StatusCode::kUnavailable) << all[i].status.ToString();
    EXPECT_NE(all[i].status.message().find("copy" + std::to_string(all[i].op_id)), std::string::npos);
    EXPECT_EQ(all[i].worker_index, -1);
  }
  EXPECT_EQ(a.dst, std::vector<uint8_t>(64, 0));
  EXPECT_EQ(raw->stats().ops_unavailable, 3u);
}

TEST(DecompressorPoolTest, ManyOpsAcrossThreeWorkersCompleteExactlyOnce) {
  constexpr int kOps = 600;
  // Exponent-like planes (few distinct symbols), compressed with zstd and lz4.
  std::mt19937 rng(17);
  std::vector<std::vector<uint8_t>> raw_planes(kOps), stored(kOps), out(kOps);
  std::vector<Codec> codecs(kOps);
  for (int i = 0; i < kOps; ++i) {
    const size_t n = 1000 + rng() % 20000;
    raw_planes[i].resize(n);
    std::geometric_distribution<int> geo(0.4);
    for (auto& b : raw_planes[i]) b = static_cast<uint8_t>(120 - std::min(geo(rng), 20));
    codecs[i] = (i % 3 == 0) ? Codec::kLz4 : Codec::kZstd;
    stored[i].resize(CompressBoundBytes(codecs[i], n));
    auto sz = CompressChunk({codecs[i], 0}, raw_planes[i].data(), n, stored[i].data(), stored[i].size());
    ASSERT_TRUE(sz.ok()) << sz.status().ToString();
    stored[i].resize(*sz);
    out[i].assign(n, 0);
  }
  std::vector<std::atomic<int>> count(kOps);
  std::vector<std::atomic<int>> worker_of(kOps);
  std::atomic<int> failures{0};
  DecompressorConfig config;
  config.n_workers = 3;
  config.retain_completions = true;
  config.on_complete = [&](const DecompressCompletion& c) {
    count[c.op_id].fetch_add(1);
    worker_of[c.op_id].store(c.worker_index);
    if (!c.status.ok()) failures.fetch_add(1);
  };
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->n_workers(), 3);
  const auto make = [&](int i) {
    DecompressOp op;
    op.op_id = static_cast<uint64_t>(i);
    op.priority = static_cast<int32_t>((i * 7919) % 97);
    op.codec = codecs[i];
    op.src = stored[i].data();
    op.stored_bytes = stored[i].size();
    op.dst = out[i].data();
    op.raw_bytes = out[i].size();
    op.tensor_name = "t" + std::to_string(i);
    return op;
  };
  // Two producers add (even ids READY at once, odd ids waiting); a third marks the odd ones READY.
  std::thread p0([&] {
    for (int i = 0; i < kOps; i += 2) EXPECT_TRUE((*pool)->Add(make(i), true).ok());
  });
  std::thread p1([&] {
    for (int i = 1; i < kOps; i += 2) EXPECT_TRUE((*pool)->Add(make(i), false).ok());
  });
  p1.join();
  std::thread marker([&] {
    for (int i = kOps - 1; i > 0; i -= 2) EXPECT_TRUE((*pool)->MarkReady(static_cast<uint64_t>(i)).ok());
  });
  p0.join();
  marker.join();
  for (int i = 0; i < kOps; ++i) {
    auto c = (*pool)->WaitFor(static_cast<uint64_t>(i));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
  }
  (*pool)->Stop();
  std::map<int, int> per_worker;
  for (int i = 0; i < kOps; ++i) {
    EXPECT_EQ(count[i].load(), 1) << "op " << i;
    EXPECT_EQ(out[i], raw_planes[i]) << "op " << i;
    ++per_worker[worker_of[i].load()];
  }
  EXPECT_EQ(failures.load(), 0);
  for (const auto& [w, n] : per_worker) {
    EXPECT_GE(w, 0);
    EXPECT_LT(w, 3);
  }
  const DecompressorStats stats = (*pool)->stats();
  EXPECT_EQ(stats.ops_ok, static_cast<uint64_t>(kOps));
  EXPECT_EQ(stats.ops_unavailable, 0u);
}

TEST(DecompressorPoolTest, FailedReadCancelsDecodeWhichNeverRuns) {
  // A flipped byte in experts.bin: the read fails its hash check, and the scheduler cancels the
  // decode op with the read's status instead of marking it READY.
  TempDir tmp;
  const std::string dir = tmp.Sub("copy.z");
  fs::copy(CompressedModel::Dir(), dir, fs::copy_options::recursive);
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ExpertTensorInfo& t = (*store)->manifest().expert_tensors.at(1);
  {
    std::fstream f((*store)->experts_path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto pos = static_cast<std::streamoff>(t.chunks[0].file_offset + 3);
    f.seekg(pos);
    char ch = 0;
    f.read(&ch, 1);
    ch = static_cast<char>(ch ^ 1);
    f.seekp(pos);
    f.write(&ch, 1);
  }
  CompletionLog log;
  DecompressorConfig config;
  config.n_workers = 2;
  config.retain_completions = true;
  config.on_complete = [&](const DecompressCompletion& c) { log.Add(c); };
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  std::vector<uint8_t> e(static_cast<size_t>(t.numel()));
  std::vector<std::vector<uint8_t>> stored(static_cast<size_t>(t.n_shards));
  for (int i = 0; i < t.n_shards; ++i) {
    stored[i].resize(t.chunks[i].stored_bytes);
    ASSERT_TRUE((*pool)->Add(MakeDecodeEChunkOp(t, i, 50 + i, i, stored[i].data(), e.data())).ok());
  }
  for (int i = 0; i < t.n_shards; ++i) {
    Status read = (*store)->ReadChunk(t, i, stored[i].data());
    if (read.ok()) {
      ASSERT_TRUE((*pool)->MarkReady(50 + i).ok());
    } else {
      EXPECT_EQ(i, 0);
      EXPECT_EQ(read.code(), StatusCode::kCorruption);
      ASSERT_TRUE((*pool)->Cancel(50 + i, read).ok());
    }
  }
  auto bad = (*pool)->WaitFor(50);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status.code(), StatusCode::kCorruption);
  EXPECT_NE(bad->status.message().find(t.name), std::string::npos) << bad->status.ToString();
  EXPECT_NE(bad->status.message().find("E-chunk 0"), std::string::npos) << bad->status.ToString();
  EXPECT_EQ(bad->worker_index, -1);  // never ran
  for (int i = 1; i < t.n_shards; ++i) {
    auto c = (*pool)->WaitFor(50 + i);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_GE(c->worker_index, 0);
  }
  (*pool)->Stop();
  const DecompressorStats stats = (*pool)->stats();
  EXPECT_EQ(stats.ops_cancelled, 1u);
  EXPECT_EQ(stats.ops_ok + stats.ops_failed, static_cast<uint64_t>(t.n_shards - 1));  // no decode on op 50
  EXPECT_EQ(log.all().size(), static_cast<size_t>(t.n_shards));
  // Shard 0's slice of the E plane was never written.
  const ChunkInfo& c0 = t.chunks[0];
  EXPECT_EQ(std::vector<uint8_t>(e.begin() + c0.elem_offset, e.begin() + c0.elem_offset + c0.elem_count),
            std::vector<uint8_t>(c0.elem_count, 0));
  EXPECT_EQ((*pool)->Cancel(51, Status::Corruption("x")).code(), StatusCode::kNotFound);  // already completed
}

}  // namespace
}  // namespace zipmoe::decompressor
