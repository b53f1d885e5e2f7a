// StorageService: chunks queued back to back in the file are read with one preadv, bit-exactly, and
// a coalesced read cut short by EOF fails only the chunks past it, and one that fails is retried
// chunk by chunk so that only the bad chunk fails, named.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/checkpoint/expert_store.h"
#include "common/hash.h"
#include "services/storage/aligned_buffer.h"
#include "services/storage/storage_service.h"
#include "tests/services/storage/storage_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::storage {
namespace {

using test::CompressedModel;
using test::TensorBuffers;
using test::MakeOps;
using test::LeadingContiguousRun;
using test::FileChunks;
using test::BackToBack4KiBChunks;
using test::WriteRandomFile;
using testing::TempDir;

TEST(StorageServiceTest, ChunksBackToBackInTheFileAreReadInOnePreadvBitExact) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto& all = (*store)->manifest().expert_tensors;
  ASSERT_GE(all.size(), 4u);
  // Three tensors the converter wrote one after another (E-chunks, SM-chunk, next tensor), then the
  // first tensor of the file again: a jump back, which must start a new read.
  std::vector<TensorBuffers> tensors;
  for (size_t i : {1, 2, 3, 0}) tensors.push_back({&all[i], {}});
  std::vector<ReadOp> ops = MakeOps(tensors, 1);
  const size_t run = LeadingContiguousRun(ops);
  ASSERT_EQ(run, ops.size() - all[0].chunks.size()) << "the converter writes tensors back to back";
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.retain_completions = true;
  std::unique_ptr<StorageService> service;
  {
    auto created = StorageService::Create(config);
    ASSERT_TRUE(created.ok()) << created.status().ToString();
    service = std::move(created).value();
  }
  if (!service->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  ASSERT_TRUE(service->Submit(ops).ok());
  for (const ReadOp& op : ops) {
    auto c = service->WaitFor(op.op_id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_EQ(c->read_bytes, RoundUpBytes(op.stored_bytes));
  }
  // Every chunk holds exactly its stored bytes (each read alone through ExpertStore for reference).
  for (const TensorBuffers& tb : tensors) {
    for (size_t i = 0; i < tb.chunks.size(); ++i) {
      std::vector<uint8_t> want(tb.t->chunks[i].stored_bytes);
      ASSERT_TRUE((*store)->ReadChunk(*tb.t, static_cast<int>(i), want.data()).ok());
      EXPECT_EQ(std::memcmp(tb.chunks[i].data(), want.data(), want.size()), 0) << tb.t->name << " chunk " << i;
    }
  }
  const StorageStats stats = service->stats();
  EXPECT_EQ(stats.ops_ok, ops.size());
  // Submit queues every op under one lock, so the I/O thread finds them all: one preadv for the run of
  // three tensors, one for the first tensor's chunks (back to back among themselves).
  EXPECT_EQ(stats.reads, 2u);
}

TEST(StorageServiceTest, CoalescedReadEndingAtEofFailsOnlyTheChunksPastIt) {
  TempDir tmp;
  // Three 4 KiB chunks back to back, but the file ends 1000 bytes into the second (a truncated copy).
  const std::string path = tmp.Sub("truncated.bin");
  const std::string bytes = WriteRandomFile(path, 4096 + 1000, 5);
  StorageConfig config;
  config.path = path;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  if (!(*service)->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  FileChunks chunks = BackToBack4KiBChunks(3);
  chunks.ops[0].xxh64 = Xxh64(bytes.data(), 4096);  // the others are never verified: EOF comes first
  const std::vector<AlignedBuffer>& bufs = chunks.bufs;
  ASSERT_TRUE((*service)->Submit(chunks.ops).ok());
  auto c1 = (*service)->WaitFor(1);
  auto c2 = (*service)->WaitFor(2);
  auto c3 = (*service)->WaitFor(3);
  ASSERT_TRUE(c1.ok() && c2.ok() && c3.ok());
  ASSERT_TRUE(c1->status.ok()) << c1->status.ToString();
  EXPECT_EQ(std::memcmp(bufs[0].data(), bytes.data(), 4096), 0);
  for (const auto* c : {&*c2, &*c3}) {
    EXPECT_EQ(c->status.code(), StatusCode::kCorruption) << c->status.ToString();
    EXPECT_NE(c->status.message().find("unexpected end of file"), std::string::npos) << c->status.ToString();
    EXPECT_NE(c->status.message().find(path), std::string::npos);
  }
  EXPECT_NE(c2->status.message().find("chunk1"), std::string::npos);
  EXPECT_NE(c3->status.message().find("chunk2"), std::string::npos);
  EXPECT_EQ((*service)->stats().reads, 1u);
}

TEST(StorageServiceTest, AFailedCoalescedReadIsRetriedChunkByChunkAndOnlyTheBadChunkFails) {
  TempDir tmp;
  const std::string path = tmp.Sub("three.bin");
  const std::string bytes = WriteRandomFile(path, 3 * 4096, 9);
  StorageConfig config;
  config.path = path;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  if (!(*service)->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  // The middle chunk's destination is aligned but not writable: the group's preadv fails (EFAULT).
  void* no_access = ::mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(no_access, MAP_FAILED);
  FileChunks chunks = BackToBack4KiBChunks(3);
  for (ReadOp& op : chunks.ops) op.xxh64 = Xxh64(bytes.data() + op.file_offset, 4096);
  chunks.ops[1].dst = static_cast<uint8_t*>(no_access);
  const std::vector<AlignedBuffer>& bufs = chunks.bufs;
  ASSERT_TRUE((*service)->Submit(chunks.ops).ok());
  std::vector<ReadCompletion> done;
  for (uint64_t id = 1; id <= 3; ++id) {
    auto c = (*service)->WaitFor(id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    done.push_back(*c);
  }
  ::munmap(no_access, 4096);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.ToString();
  EXPECT_TRUE(done[2].status.ok()) << done[2].status.ToString();
  EXPECT_EQ(std::memcmp(bufs[0].data(), bytes.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(bufs[2].data(), bytes.data() + 8192, 4096), 0);
  EXPECT_EQ(done[1].status.code(), StatusCode::kIoError) << done[1].status.ToString();
  EXPECT_NE(done[1].status.message().find("chunk1"), std::string::npos) << done[1].status.ToString();
  EXPECT_NE(done[1].status.message().find(path + "@4096"), std::string::npos) << done[1].status.ToString();
  EXPECT_EQ((*service)->stats().reads, 4u) << "one preadv, then one pread per chunk";
}

}  // namespace
}  // namespace zipmoe::storage
