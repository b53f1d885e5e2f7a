// DecompressorPool (the L decompression workers): bit-exact decode + recovery of a real compressed
// model, priority order among READY ops, READY gating, Cancel for failed reads, Stop semantics and
// exactly-once completion under concurrency.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/codec.h"
#include "common/expert_store.h"
#include "common/hash.h"
#include "services/decompressor/decompress_op.h"
#include "services/decompressor/decompressor_pool.h"
#include "tests/test_util.h"

namespace zipmoe::decompressor {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A tiny qwen2_moe compressed with K = 4, shared by all test processes (read-only: tests that
// damage it work on a copy).
struct CompressedModel {
  static std::string Dir() {
    return testing::CachedCompress(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 11"), "--shards 4");
  }
};

// 4 KiB-aligned bytes, as the storage service delivers chunks.
struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t, FreeDeleter>;
AlignedBytes AllocAligned(uint64_t size_bytes) {
  const uint64_t capacity = (std::max<uint64_t>(size_bytes, 1) + 4095) & ~uint64_t{4095};
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(4096, capacity)));
}

// Blocks the worker that runs a chosen op inside its completion callback until Release(); lets the
// test wait until the worker is inside. No sleeps.
class Gate {
 public:
  void EnterAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool released_ = false;
};

// Thread-safe record of completions.
class CompletionLog {
 public:
  void Add(const DecompressCompletion& c) {
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(c);
  }
  std::vector<DecompressCompletion> all() {
    std::lock_guard<std::mutex> lock(mu_);
    return all_;
  }

 private:
  std::mutex mu_;
  std::vector<DecompressCompletion> all_;
};

// A small op that copies `n` raw bytes (codec none): cheap work whose identity the test controls.
struct CopyOp {
  std::vector<uint8_t> src, dst;
  DecompressOp op;
  CopyOp(uint64_t op_id, int32_t priority, size_t n = 64) : src(n, static_cast<uint8_t>(op_id)), dst(n, 0) {
    op.op_id = op_id;
    op.priority = priority;
    op.codec = Codec::kNone;
    op.src = src.data();
    op.stored_bytes = n;
    op.dst = dst.data();
    op.raw_bytes = n;
    op.tensor_name = "copy" + std::to_string(op_id);
  }
};

TEST(DecompressorPoolTest, DecodesAndRecoversRealTensorsBitExact) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto& all = (*store)->manifest().expert_tensors;
  std::vector<const ExpertTensorInfo*> tensors = {&all[0], &all[1], &all[2], &all[all.size() / 2], &all.back()};

  struct Planes {
    std::vector<AlignedBytes> chunks;  // stored bytes per chunk
    std::vector<uint8_t> e, sm;
    std::vector<uint16_t> out;
    int decodes_left = 0;
  };
  std::vector<Planes> planes(tensors.size());
  std::mutex mu;  // guards decodes_left
  DecompressorPool* raw = nullptr;
  std::vector<Status> recover_add_errors;
  DecompressorConfig config;
  config.n_workers = 2;
  config.retain_completions = true;
  // When the last E-chunk of a tensor is decoded, queue its recovery (re-entrant Add from a worker).
  config.on_complete = [&](const DecompressCompletion& c) {
    if (c.op_id >= 1000 || !c.status.ok()) return;
    const size_t ti = c.op_id / 100;
    std::lock_guard<std::mutex> lock(mu);
    if (--planes[ti].decodes_left == 0) {
      Planes& p = planes[ti];
      Status st = raw->Add(MakeRecoverBf16Op(*tensors[ti], 1000 + ti, 0, p.e.data(), p.sm.data(), p.out.data()),
                           /*ready=*/true);
      if (!st.ok()) recover_add_errors.push_back(st);
    }
  };
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  raw = pool->get();
  EXPECT_EQ((*pool)->n_workers(), 2);

  std::vector<uint64_t> decode_ids;
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    const ExpertTensorInfo& t = *tensors[ti];
    Planes& p = planes[ti];
    p.e.assign(static_cast<size_t>(t.numel()), 0);
    p.out.assign(static_cast<size_t>(t.numel()), 0);
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      p.chunks.push_back(AllocAligned(t.chunks[i].stored_bytes));
      ASSERT_TRUE((*store)->ReadChunk(t, static_cast<int>(i), p.chunks.back().get()).ok());
      if (t.chunks[i].kind == ChunkKind::kSm) {
        p.sm.assign(p.chunks.back().get(), p.chunks.back().get() + t.chunks[i].stored_bytes);
        continue;
      }
      ++p.decodes_left;
    }
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      if (t.chunks[i].kind != ChunkKind::kE) continue;
      const uint64_t id = ti * 100 + i;
      // Priority = block order: tensor first, then chunk.
      ASSERT_TRUE((*pool)->Add(MakeDecodeEChunkOp(t, static_cast<int>(i), id, static_cast<int32_t>(id),
                                                  p.chunks[i].get(), p.e.data()))
                      .ok());
      decode_ids.push_back(id);
    }
  }
  // Reads "complete" in reverse order; each marks its decode op READY.
  for (auto it = decode_ids.rbegin(); it != decode_ids.rend(); ++it) ASSERT_TRUE((*pool)->MarkReady(*it).ok());
  for (uint64_t id : decode_ids) {
    auto c = (*pool)->WaitFor(id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
  }
  for (size_t ti = 0; ti < tensors.size(); ++ti) {
    auto c = (*pool)->WaitFor(1000 + ti);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    std::vector<uint16_t> want(static_cast<size_t>(tensors[ti]->numel()));
    ASSERT_TRUE((*store)->ReadTensorBf16(*tensors[ti], want.data()).ok());
    EXPECT_EQ(std::memcmp(planes[ti].out.data(), want.data(), want.size() * 2), 0) << tensors[ti]->name;
  }
  EXPECT_TRUE(recover_add_errors.empty());
  (*pool)->Stop();
  const DecompressorStats stats = (*pool)->stats();
  EXPECT_EQ(stats.ops_ok, decode_ids.size() + tensors.size());
  EXPECT_EQ(stats.ops_failed, 0u);
}

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

TEST(DecompressorPoolTest, CorruptStreamIsCorruptionNamingTensorAndChunk) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ExpertTensorInfo& t = (*store)->manifest().expert_tensors.at(3);
  const ChunkInfo& c2 = t.chunks.at(2);
  std::vector<uint8_t> stored(c2.stored_bytes);
  ASSERT_TRUE((*store)->ReadChunk(t, 2, stored.data()).ok());
  // Damage the frame (past the read's hash check: a bug or bad memory, not the file).
  for (size_t i = 0; i < stored.size(); i += 7) stored[i] ^= 0xff;
  std::vector<uint8_t> e(static_cast<size_t>(t.numel()));
  DecompressorConfig config;
  config.n_workers = 1;
  config.retain_completions = true;
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  ASSERT_TRUE((*pool)->Add(MakeDecodeEChunkOp(t, 2, 9, 0, stored.data(), e.data()), true).ok());
  auto c = (*pool)->WaitFor(9);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->status.code(), StatusCode::kCorruption) << c->status.ToString();
  EXPECT_NE(c->status.message().find("E-chunk 2 of '" + t.name + "'"), std::string::npos) << c->status.ToString();
  EXPECT_EQ((*pool)->stats().ops_failed, 1u);

  // Recovery checks the BF16 hash.
  std::vector<uint8_t> sm(static_cast<size_t>(t.numel()), 0);
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  ASSERT_TRUE((*pool)->Add(MakeRecoverBf16Op(t, 10, 0, e.data(), sm.data(), out.data()), true).ok());
  auto r = (*pool)->WaitFor(10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code(), StatusCode::kCorruption) << r->status.ToString();
  EXPECT_NE(r->status.message().find("recovery of '" + t.name + "'"), std::string::npos);
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

TEST(DecompressorPoolTest, ArgumentErrors) {
  EXPECT_GE(DefaultWorkerCount(), 1);
  DecompressorConfig config;
  config.n_workers = -1;
  EXPECT_EQ(DecompressorPool::Create(config).status().code(), StatusCode::kInvalidArgument);
  config.n_workers = 0;
  auto pool = DecompressorPool::Create(config);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->n_workers(), DefaultWorkerCount());
  EXPECT_EQ((*pool)->WaitFor(1).status().code(), StatusCode::kInvalidArgument);  // retain_completions off

  CopyOp a(1, 0);
  ASSERT_TRUE((*pool)->Add(a.op, false).ok());
  EXPECT_EQ((*pool)->Add(a.op, false).code(), StatusCode::kInvalidArgument);  // duplicate id
  EXPECT_EQ((*pool)->MarkReady(2).code(), StatusCode::kNotFound);
  EXPECT_EQ((*pool)->Cancel(1, Status::Ok()).code(), StatusCode::kInvalidArgument);
  DecompressOp null_src = a.op;
  null_src.op_id = 3;
  null_src.src = nullptr;
  EXPECT_EQ((*pool)->Add(null_src).code(), StatusCode::kInvalidArgument);
  (*pool)->Stop();
  EXPECT_EQ((*pool)->Add(CopyOp(4, 0).op).code(), StatusCode::kUnavailable);
  EXPECT_EQ((*pool)->stats().ops_unavailable, 1u);  // op 1 was pending at Stop
}

}  // namespace
}  // namespace zipmoe::decompressor
