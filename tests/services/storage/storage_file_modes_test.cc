// StorageService and the file: O_DIRECT on this filesystem, the page-cache option, the buffered
// fallback when O_DIRECT is refused, and short reads at the end of a file not padded to 4 KiB.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
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
using test::CompletionLog;
using test::WriteRandomFile;
namespace fs = std::filesystem;
using testing::ReadAll;
using testing::TempDir;

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
  const std::string bytes = WriteRandomFile(path, 4096 + 1000, 3);
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

}  // namespace
}  // namespace zipmoe::storage
