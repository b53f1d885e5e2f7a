// DecompressorPool (the L decompression workers): bit-exact decode + recovery of a real compressed
// model, corrupt streams named by tensor and chunk, and argument errors. Scheduling among ops has a
// file of its own.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
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

using test::CompressedModel;
using test::AlignedBytes;
using test::AllocAligned;
using test::CopyOp;

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
      Status st = raw->Add(MakeRecoverOp(*tensors[ti], 1000 + ti, 0, p.e.data(), p.sm.data(), p.out.data()),
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
  ASSERT_TRUE((*pool)->Add(MakeRecoverOp(t, 10, 0, e.data(), sm.data(), out.data()), true).ok());
  auto r = (*pool)->WaitFor(10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->status.code(), StatusCode::kCorruption) << r->status.ToString();
  EXPECT_NE(r->status.message().find("recovery of '" + t.name + "'"), std::string::npos);
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
