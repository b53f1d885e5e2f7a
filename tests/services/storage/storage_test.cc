// StorageService (the I/O thread): bit-exact chunk reads of a real compressed model through O_DIRECT,
// completion order = submission order, hash failures named and never served, short reads at EOF,
// chunks back to back in the file read in one preadv, the buffered fallback, validation and Stop semantics.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/expert_store.h"
#include "common/hash.h"
#include "kernels/recovery.h"
#include "services/storage/aligned_buffer.h"
#include "services/storage/storage_service.h"
#include "tests/test_util.h"

namespace zipmoe::storage {
namespace {

namespace fs = std::filesystem;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// A tiny qwen2_moe compressed with K = 4, shared by all test processes (read-only: tests that
// damage it work on a copy).
struct CompressedModel {
  static std::string Dir() {
    return testing::CachedCompress(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 11"), "--shards 4");
  }
};

// Copies the compressed model into `dst` (for tests that damage it).
std::string CopyModel(const TempDir& tmp) {
  const std::string dst = tmp.Sub("copy.z");
  fs::copy(CompressedModel::Dir(), dst, fs::copy_options::recursive);
  return dst;
}

// Tensors spread over the file: first, second, a middle one and the last.
std::vector<const ExpertTensorInfo*> PickTensors(const ExpertStore& store) {
  const auto& all = store.manifest().expert_tensors;
  std::vector<const ExpertTensorInfo*> picked;
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, all.size() / 2, all.size() - 1}) picked.push_back(&all.at(i));
  return picked;
}

// Per tensor: one aligned buffer per chunk.
struct TensorBuffers {
  const ExpertTensorInfo* t = nullptr;
  std::vector<AlignedBuffer> chunks;
};

std::vector<ReadOp> MakeOps(std::vector<TensorBuffers>& tensors, uint64_t first_op_id) {
  std::vector<ReadOp> ops;
  uint64_t id = first_op_id;
  for (TensorBuffers& tb : tensors) {
    tb.chunks.clear();
    for (size_t i = 0; i < tb.t->chunks.size(); ++i) {
      auto buf = AlignedBuffer::Allocate(tb.t->chunks[i].stored_bytes);
      EXPECT_TRUE(buf.ok()) << buf.status().ToString();
      tb.chunks.push_back(std::move(buf).value());
      ops.push_back(MakeChunkReadOp(*tb.t, static_cast<int>(i), id++, tb.chunks.back().data(),
                                    tb.chunks.back().capacity_bytes()));
    }
  }
  return ops;
}

// How many ops from the first on continue each other in the file (what the I/O thread reads in one
// preadv when they are queued together), within its limits.
size_t LeadingContiguousRun(const std::vector<ReadOp>& ops) {
  size_t n = ops.empty() ? 0 : 1;
  uint64_t bytes = ops.empty() ? 0 : RoundUpBytes(ops[0].stored_bytes);
  while (n < ops.size() && n < kMaxCoalescedChunks &&
         ops[n].file_offset == ops[n - 1].file_offset + RoundUpBytes(ops[n - 1].stored_bytes) &&
         bytes + RoundUpBytes(ops[n].stored_bytes) <= kMaxCoalescedBytes) {
    bytes += RoundUpBytes(ops[n].stored_bytes);
    ++n;
  }
  return n;
}

// Records callback order; lets a test wait for n completions without sleeping.
class CompletionLog {
 public:
  void Add(const ReadCompletion& c) {
    std::lock_guard<std::mutex> lock(mu_);
    order_.push_back(c.op_id);
    cv_.notify_all();
  }
  std::vector<uint64_t> WaitForCount(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return order_.size() >= n; });
    return order_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> order_;
};

// The file-status flags of this process's descriptor(s) for `path`, from /proc/self/fdinfo.
std::vector<long> OpenFlagsOf(const std::string& path) {
  std::vector<long> flags;
  const std::string want = fs::canonical(path).string();
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(entry.path(), ec);
    if (ec || target.string() != want) continue;
    std::ifstream info("/proc/self/fdinfo/" + entry.path().filename().string());
    std::string key;
    while (info >> key) {
      if (key == "flags:") {
        std::string octal;
        info >> octal;
        flags.push_back(std::stol(octal, nullptr, 8));
        break;
      }
    }
  }
  return flags;
}

std::string FilesystemName(const std::string& path) {
  struct statfs st {};
  if (::statfs(path.c_str(), &st) != 0) return "unknown";
  switch (static_cast<unsigned long>(st.f_type)) {
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x794C7630: return "overlay";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    default: return "other";
  }
}

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

TEST(StorageServiceTest, UsesODirectOnThisFilesystem) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string fs_name = FilesystemName(CompressedModel::Dir());
  std::cout << "I: test files live in " << CompressedModel::Dir() << " (" << fs_name << ")\n";
  StorageConfig config;
  config.path = (*store)->experts_path();
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  const std::vector<long> flags = OpenFlagsOf(config.path);
  ASSERT_FALSE(flags.empty());
  const bool fd_direct = std::any_of(flags.begin(), flags.end(), [](long f) { return (f & O_DIRECT) != 0; });
  if ((*service)->fell_back()) {
    // Only a filesystem that refuses O_DIRECT may get here; the flag and the W: line report it.
    EXPECT_FALSE((*service)->direct_io());
    EXPECT_NE(fs_name, "ext4");
    GTEST_SKIP() << fs_name << " refused O_DIRECT; buffered fallback reported";
  }
  EXPECT_TRUE((*service)->direct_io());
  EXPECT_TRUE(fd_direct) << "experts.bin is open without O_DIRECT";

  // A read through O_DIRECT still verifies.
  const ExpertTensorInfo& t = (*store)->manifest().expert_tensors.front();
  std::vector<TensorBuffers> tensors(1);
  tensors[0].t = &t;
  std::vector<ReadOp> ops = MakeOps(tensors, 7);
  CompletionLog log;
  std::vector<Status> statuses;
  config.on_complete = [&](const ReadCompletion& c) {
    statuses.push_back(c.status);  // I/O thread only; read after Stop()
    log.Add(c);
  };
  service = StorageService::Create(config);
  ASSERT_TRUE(service.ok());
  ASSERT_TRUE((*service)->Submit(ops).ok());
  log.WaitForCount(ops.size());
  (*service)->Stop();
  ASSERT_EQ(statuses.size(), ops.size());
  for (const Status& st : statuses) EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(StorageServiceTest, PageCacheOptionUsesBufferedPread) {
  auto store = ExpertStore::Open(CompressedModel::Dir());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  StorageConfig config;
  config.path = (*store)->experts_path();
  config.page_cache = true;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  EXPECT_FALSE((*service)->direct_io());
  EXPECT_FALSE((*service)->fell_back());
  for (long f : OpenFlagsOf(config.path)) EXPECT_EQ(f & O_DIRECT, 0);
  std::vector<TensorBuffers> tensors(1);
  tensors[0].t = &(*store)->manifest().expert_tensors.back();
  std::vector<ReadOp> ops = MakeOps(tensors, 1);
  ASSERT_TRUE((*service)->Submit(ops).ok());
  for (const ReadOp& op : ops) {
    auto c = (*service)->WaitFor(op.op_id);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
    EXPECT_EQ(c->read_bytes, op.stored_bytes);  // buffered reads do not read the padding
  }
}

TEST(StorageServiceTest, FallsBackToBufferedWhenODirectIsRefused) {
  // procfs refuses O_DIRECT at open with EINVAL, like filesystems without direct I/O support.
  const std::string path = "/proc/version";
  const std::string want = ReadAll(path);
  ASSERT_FALSE(want.empty());
  StorageConfig config;
  config.path = path;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  EXPECT_TRUE((*service)->fell_back());
  EXPECT_FALSE((*service)->direct_io());
  auto buf = AlignedBuffer::Allocate(want.size());
  ASSERT_TRUE(buf.ok());
  ReadOp op;
  op.op_id = 1;
  op.stored_bytes = want.size();
  op.dst = buf->data();
  op.dst_capacity_bytes = buf->capacity_bytes();
  op.xxh64 = Xxh64(want.data(), want.size());
  op.tensor_name = "proc";
  ASSERT_TRUE((*service)->Submit({op}).ok());
  auto c = (*service)->WaitFor(1);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->status.ok()) << c->status.ToString();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf->data()), want.size()), want);
}

TEST(StorageServiceTest, ShortFinalReadOfUnpaddedFile) {
  TempDir tmp;
  const std::string path = tmp.Sub("unpadded.bin");
  std::string bytes(4096 + 1000, '\0');
  std::mt19937 rng(3);
  for (char& ch : bytes) ch = static_cast<char>(rng());
  WriteAll(path, bytes);
  StorageConfig config;
  config.path = path;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  auto buf1 = AlignedBuffer::Allocate(4096);
  auto buf2 = AlignedBuffer::Allocate(4096);
  auto buf3 = AlignedBuffer::Allocate(4096);
  ASSERT_TRUE(buf1.ok() && buf2.ok() && buf3.ok());
  // The last 1000 bytes: the rounded 4 KiB read comes back short at EOF and still succeeds.
  ReadOp tail;
  tail.op_id = 1;
  tail.file_offset = 4096;
  tail.stored_bytes = 1000;
  tail.dst = buf1->data();
  tail.dst_capacity_bytes = buf1->capacity_bytes();
  tail.xxh64 = Xxh64(bytes.data() + 4096, 1000);
  tail.tensor_name = "tail";
  // A chunk that claims to extend past EOF: truncated file, kCorruption.
  ReadOp past = tail;
  past.op_id = 2;
  past.stored_bytes = 2000;
  past.dst = buf2->data();
  past.tensor_name = "past_eof";
  // Entirely beyond EOF.
  ReadOp beyond = tail;
  beyond.op_id = 3;
  beyond.file_offset = 8192;
  beyond.dst = buf3->data();
  beyond.tensor_name = "beyond_eof";
  ASSERT_TRUE((*service)->Submit({tail, past, beyond}).ok());
  auto c1 = (*service)->WaitFor(1);
  auto c2 = (*service)->WaitFor(2);
  auto c3 = (*service)->WaitFor(3);
  ASSERT_TRUE(c1.ok() && c2.ok() && c3.ok());
  ASSERT_TRUE(c1->status.ok()) << c1->status.ToString();
  EXPECT_EQ(c1->read_bytes, 1000u);
  EXPECT_EQ(std::memcmp(buf1->data(), bytes.data() + 4096, 1000), 0);
  EXPECT_EQ(c2->status.code(), StatusCode::kCorruption) << c2->status.ToString();
  EXPECT_NE(c2->status.message().find("past_eof"), std::string::npos) << c2->status.ToString();
  EXPECT_NE(c2->status.message().find("unexpected end of file"), std::string::npos);
  EXPECT_EQ(c3->status.code(), StatusCode::kCorruption) << c3->status.ToString();
  EXPECT_NE(c3->status.message().find(path), std::string::npos);
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
  std::string bytes(4096 + 1000, '\0');
  std::mt19937 rng(5);
  for (char& ch : bytes) ch = static_cast<char>(rng());
  WriteAll(path, bytes);
  StorageConfig config;
  config.path = path;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  if (!(*service)->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadOp> ops;
  for (int i = 0; i < 3; ++i) {
    auto b = AlignedBuffer::Allocate(4096);
    ASSERT_TRUE(b.ok());
    bufs.push_back(std::move(b).value());
    ReadOp op;
    op.op_id = static_cast<uint64_t>(i + 1);
    op.file_offset = 4096 * static_cast<uint64_t>(i);
    op.stored_bytes = 4096;
    op.dst = bufs.back().data();
    op.dst_capacity_bytes = bufs.back().capacity_bytes();
    op.xxh64 = i == 0 ? Xxh64(bytes.data(), 4096) : 0;
    op.tensor_name = "chunk" + std::to_string(i);
    ops.push_back(op);
  }
  ASSERT_TRUE((*service)->Submit(ops).ok());
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
