// Tests for common/file_util: MappedFile, AtomicFile (temp + rename), whole-file and path helpers.
#include "common/file_util.h"

#include <gmock/gmock.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::HasSubstr;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(FileUtilTest, MappedFileMissingIsNotFound) {
  TempDir tmp;
  auto m = MappedFile::Open(tmp.Sub("absent.bin"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("absent.bin"));
}

// Resident bytes of the mapping that starts at `addr`, from /proc/self/smaps ("Rss:" in kB), or -1.
long MappingRssKb(const void* addr) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_mapping = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {
      in_mapping = lo == reinterpret_cast<uintptr_t>(addr);
    } else if (in_mapping && line.rfind("Rss:", 0) == 0) {
      return std::stol(line.substr(4));
    }
  }
  return -1;
}

// A FIFO in a file's place is refused at once (open() used to block until a writer came: a hang).
TEST(FileUtilTest, MappedFileRefusesAFifoWithoutBlocking) {
  TempDir tmp;
  const std::string fifo = tmp.Sub("config.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto m = MappedFile::Open(fifo);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("not a regular file"), std::string::npos) << m.status().ToString();
  EXPECT_FALSE(ReadFileToString(fifo).ok());
}

TEST(FileUtilTest, PopulateMapsEveryPageWithoutChangingTheBytes) {
  TempDir tmp;
  std::string data(3 * 1024 * 1024 + 123, '\0');  // 3 MiB and a partial page
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
  WriteAll(tmp.Sub("w.bin"), data);
  auto m = MappedFile::Open(tmp.Sub("w.bin"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const long before = MappingRssKb(m->data());
  ASSERT_GE(before, 0) << "mapping not found in /proc/self/smaps";
  EXPECT_LT(before, 3 * 1024) << "a fresh private mapping should not be resident yet";
  ASSERT_TRUE(m->Populate().ok());
  EXPECT_GE(MappingRssKb(m->data()), 3 * 1024 + 4) << "every page (the last partial one too) is mapped";
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), data);

  MappedFile empty;
  EXPECT_TRUE(empty.Populate().ok());
}

// The anonymous copy keeps the addresses and the bytes, and from then on is the process's own: the
// file changing underneath no longer shows (it does through the private file mapping before).
TEST(FileUtilTest, CopyToAnonymousMemoryKeepsAddressesAndBytesAndDetachesFromTheFile) {
  TempDir tmp;
  for (const size_t size : {size_t{5000}, size_t{(4u << 20) + 123}}) {  // under one huge page; 2 of them and a partial page
    std::string data(size, '\0');
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 % 251);
    const std::string path = tmp.Sub("w" + std::to_string(size) + ".bin");
    WriteAll(path, data);
    auto m = MappedFile::Open(path);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    if (size >= (2u << 20)) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % (2u << 20), 0u) << "2 MiB-aligned";
    }
    const uint8_t* before = m->data();
    const auto overwrite_first_byte = [&](char c) {
      std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(0);
      f.put(c);
    };
    overwrite_first_byte('A');  // seen through the file mapping
    EXPECT_EQ(static_cast<char>(m->data()[0]), 'A') << size;
    overwrite_first_byte(data[0]);
    EXPECT_FALSE(m->anonymous());
    ASSERT_TRUE(m->CopyToAnonymousMemory().ok());
    EXPECT_TRUE(m->anonymous());
    EXPECT_EQ(m->data(), before) << "the same addresses";
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), data) << size;
    overwrite_first_byte('B');  // not seen by the copy
    EXPECT_EQ(static_cast<char>(m->data()[0]), data[0]) << size;
    ASSERT_TRUE(m->CopyToAnonymousMemory().ok()) << "a second call is a no-op";
    EXPECT_EQ(m->data(), before);
    MappedFile moved = std::move(m).value();
    EXPECT_TRUE(moved.anonymous());
    EXPECT_EQ(moved.data(), before);
  }
  MappedFile empty;
  EXPECT_TRUE(empty.CopyToAnonymousMemory().ok());
  EXPECT_FALSE(empty.anonymous());
}

// Without the memory for a copy the call fails naming the file and leaves the mapping as it was
// (run in a child: its address space is capped a little above what it uses).
TEST(FileUtilTest, CopyToAnonymousMemoryWithoutMemoryKeepsTheFileMapping) {
  TempDir tmp;
  std::string data((4u << 20) + 7, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 % 253);
  WriteAll(tmp.Sub("big.bin"), data);
  const auto child = [&]() -> int {
    auto m = MappedFile::Open(tmp.Sub("big.bin"));
    if (!m.ok()) return 10;
    std::ifstream status("/proc/self/status");
    std::string line;
    long vm_kb = -1;
    while (std::getline(status, line))
      if (line.rfind("VmSize:", 0) == 0) vm_kb = std::stol(line.substr(7));
    if (vm_kb <= 0) return 11;
    struct rlimit limit {};
    // 3 MiB more than now: room for small allocations, not for the copy's 4 MiB + 2 MiB reservation
    limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(vm_kb + 3072) * 1024;
    if (::setrlimit(RLIMIT_AS, &limit) != 0) return 12;
    const Status st = m->CopyToAnonymousMemory();
    if (st.ok() || st.code() != StatusCode::kIoError) return 13;
    if (st.message().find("big.bin") == std::string::npos) return 14;
    if (m->anonymous()) return 15;
    if (m->size() != data.size() || std::memcmp(m->data(), data.data(), data.size()) != 0) return 16;
    return 0;
  };
  EXPECT_EXIT(std::_Exit(child()), ::testing::ExitedWithCode(0), "");
}

// WeightsMemory::kBackground copies while the model reads: readers on other threads compare every
// byte they read with the file's all through the copy and the move over the mapping (several rounds,
// a file of 2 MiB pages and a partial one); none ever sees another byte, and the copy ends anonymous.
TEST(FileUtilTest, CopyToAnonymousMemoryWhileOtherThreadsReadKeepsEveryByte) {
  TempDir tmp;
  const size_t size = (72u << 20) + 4099;
  std::string data(size, '\0');
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  WriteAll(tmp.Sub("w.bin"), data);
  for (int round = 0; round < 3; ++round) {
    auto m = MappedFile::Open(tmp.Sub("w.bin"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(m->Populate().ok());
    const uint8_t* base = m->data();
    std::atomic<bool> stop{false};
    std::atomic<int64_t> mismatches{0}, reads{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r) {
      readers.emplace_back([&, r] {
        size_t off = static_cast<size_t>(r) * 7919;
        while (!stop.load(std::memory_order_relaxed)) {
          const size_t n = std::min<size_t>(64 << 10, size - off);
          if (std::memcmp(base + off, data.data() + off, n) != 0) mismatches.fetch_add(1);
          reads.fetch_add(1);
          off = (off + (1u << 20) + 4093) % size;
        }
      });
    }
    while (reads.load() < 8) std::this_thread::yield();
    const Status st = m->CopyToAnonymousMemory();
    const int64_t at_move = reads.load();
    while (reads.load() < at_move + 64) std::this_thread::yield();  // and some reads of the copy
    stop = true;
    for (std::thread& t : readers) t.join();
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(m->anonymous());
    EXPECT_EQ(m->data(), base);
    EXPECT_EQ(mismatches.load(), 0) << "round " << round << " of " << reads.load() << " reads";
    EXPECT_EQ(std::memcmp(m->data(), data.data(), size), 0);
  }
}

// A cancelled copy (the flag read between 32 MiB pieces) returns kUnavailable naming the file and
// leaves the file mapping as it was: not anonymous, the same bytes, still seeing the file.
TEST(FileUtilTest, CancelledCopyToAnonymousMemoryKeepsTheFileMapping) {
  TempDir tmp;
  std::string data((40u << 20) + 5, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13 % 251);
  const std::string path = tmp.Sub("c.bin");
  WriteAll(path, data);
  auto m = MappedFile::Open(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::atomic<bool> cancel{true};
  const Status st = m->CopyToAnonymousMemory(&cancel);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_THAT(st.message(), HasSubstr("c.bin"));
  EXPECT_FALSE(m->anonymous());
  EXPECT_EQ(std::memcmp(m->data(), data.data(), data.size()), 0);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('Z');
  }
  EXPECT_EQ(static_cast<char>(m->data()[0]), 'Z') << "still the file mapping";
  cancel = false;
  ASSERT_TRUE(m->CopyToAnonymousMemory(&cancel).ok());
  EXPECT_TRUE(m->anonymous());
  EXPECT_EQ(static_cast<char>(m->data()[0]), 'Z');
}

// MemoryHeadroomBytes on fake /proc and /sys/fs/cgroup trees: MemAvailable alone without a limit; the
// room under a cgroup v2 memory.max (its page cache counted as room) and under a parent's lower
// limit; cgroup v1's memory controller with total_cache; "max" and v1's "unlimited" are no limit.
TEST(FileUtilTest, MemoryHeadroomIsMemAvailableLoweredToTheCgroupLimits) {
  TempDir tmp;
  const std::string proc = tmp.Sub("proc"), cg = tmp.Sub("cg");
  std::filesystem::create_directories(proc + "/self");
  WriteAll(proc + "/meminfo", "MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n");
  const int64_t avail = int64_t{20000000} * 1024;
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), avail) << "no /proc/self/cgroup";
  // cgroup v2: /a/b limited to 10 GiB holding 6 GiB of which 1 GiB page cache -> 5 GiB of room.
  WriteAll(proc + "/self/cgroup", "0::/a/b\n");
  std::filesystem::create_directories(cg + "/a/b");
  WriteAll(cg + "/a/b/memory.max", "max\n");
  WriteAll(cg + "/a/b/memory.current", "6442450944\n");
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), avail) << "memory.max 'max' is no limit";
  WriteAll(cg + "/a/b/memory.max", "10737418240\n");
  WriteAll(cg + "/a/b/memory.stat", "anon 5368709120\nfile 1073741824\n");
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), int64_t{5} << 30);
  // A parent with less room binds: /a limited to 8 GiB holding 7 GiB, no page cache -> 1 GiB.
  WriteAll(cg + "/a/memory.max", "8589934592\n");
  WriteAll(cg + "/a/memory.current", "7516192768\n");
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), int64_t{1} << 30);
  // More room than MemAvailable: MemAvailable.
  WriteAll(cg + "/a/memory.max", "max\n");
  WriteAll(cg + "/a/b/memory.max", "107374182400\n");
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), avail);
  // cgroup v1: the memory controller's line among others; limit 4 GiB, usage 3 GiB, 2 GiB cache -> 3 GiB.
  WriteAll(proc + "/self/cgroup", "12:cpu,cpuacct:/x\n4:memory:/bench/cap\n1:name=systemd:/y\n");
  std::filesystem::create_directories(cg + "/memory/bench/cap");
  WriteAll(cg + "/memory/bench/cap/memory.limit_in_bytes", "4294967296\n");
  WriteAll(cg + "/memory/bench/cap/memory.usage_in_bytes", "3221225472\n");
  WriteAll(cg + "/memory/bench/cap/memory.stat", "cache 1073741824\nrss 1073741824\ntotal_cache 2147483648\n");
  WriteAll(cg + "/memory/bench/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), int64_t{3} << 30);
  // No MemAvailable: 0.
  WriteAll(proc + "/meminfo", "MemTotal: 1 kB\n");
  EXPECT_EQ(MemoryHeadroomBytes(proc, cg), 0);
}

TEST(FileUtilTest, MemoryHeadroomIsPositiveHereAndAtMostMemAvailable) {
  const int64_t headroom = MemoryHeadroomBytes();
  EXPECT_GT(headroom, 0);
  EXPECT_LE(headroom, MemAvailableBytes() + (int64_t{64} << 20));  // MemAvailable moves between the reads
}

TEST(FileUtilTest, MemAvailableIsPositiveOnLinux) {
  const int64_t available = MemAvailableBytes();
  EXPECT_GT(available, 0) << "/proc/meminfo's MemAvailable";
  EXPECT_LT(available, int64_t{1} << 50);
}

TEST(FileUtilTest, MappedFileMapsContents) {
  TempDir tmp;
  const std::string data("\x00\x01zipmoe\xff", 9);
  WriteAll(tmp.Sub("f.bin"), data);
  auto m = MappedFile::Open(tmp.Sub("f.bin"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->size(), data.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), data);
  EXPECT_EQ(m->path(), tmp.Sub("f.bin"));

  // Moving keeps the same mapping; the moved-from object is empty.
  const uint8_t* p = m->data();
  MappedFile moved = std::move(m).value();
  EXPECT_EQ(moved.data(), p);
  EXPECT_EQ(moved.size(), data.size());
}

TEST(FileUtilTest, MappedFileEmptyFile) {
  TempDir tmp;
  WriteAll(tmp.Sub("empty"), "");
  auto m = MappedFile::Open(tmp.Sub("empty"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->data(), nullptr);
}

TEST(FileUtilTest, MappedFileRejectsDirectory) {
  TempDir tmp;
  auto m = MappedFile::Open(tmp.path());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr(tmp.path()));
}

TEST(FileUtilTest, AtomicFileUncommittedLeavesNothing) {
  TempDir tmp;
  {
    auto f = AtomicFile::Create(tmp.Sub("out.bin"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Write("partial", 7).ok());
    EXPECT_EQ(ListDir(tmp.path()).size(), 1u);  // only the temp file exists meanwhile
    EXPECT_FALSE(FileExists(tmp.Sub("out.bin")));
  }
  EXPECT_TRUE(ListDir(tmp.path()).empty());
}

TEST(FileUtilTest, AtomicFileCommitLeavesNoTemp) {
  TempDir tmp;
  WriteAll(tmp.Sub("out.bin"), "old contents");
  {
    auto f = AtomicFile::Create(tmp.Sub("out.bin"));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Write("abc", 3).ok());
    EXPECT_EQ(f->position(), 3u);
    ASSERT_TRUE(f->PadTo(8).ok());
    EXPECT_EQ(f->position(), 8u);
    ASSERT_TRUE(f->WriteAt(1, "Z", 1).ok());  // does not move the append position
    EXPECT_EQ(f->position(), 8u);
    ASSERT_TRUE(f->Write("!", 1).ok());
    EXPECT_EQ(ReadAll(tmp.Sub("out.bin")), "old contents");  // not visible before Commit
    ASSERT_TRUE(f->Commit().ok());
    EXPECT_EQ(f->Commit().code(), StatusCode::kInternal);  // double commit is a reported error
  }
  EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"out.bin"}));
  EXPECT_EQ(ReadAll(tmp.Sub("out.bin")), std::string("aZc\0\0\0\0\0!", 9));
}

TEST(FileUtilTest, AtomicFileInMissingDirectoryIsIoError) {
  TempDir tmp;
  auto f = AtomicFile::Create(tmp.Sub("no/such/dir/out.bin"));
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIoError);
  EXPECT_THAT(f.status().message(), HasSubstr("out.bin"));
}

TEST(FileUtilTest, WriteFileAtomicAndReadBack) {
  TempDir tmp;
  const std::string data("bytes\0with\0nuls", 15);
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("a.txt"), data).ok());
  auto back = ReadFileToString(tmp.Sub("a.txt"));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, data);
  EXPECT_EQ(ListDir(tmp.path()), (std::vector<std::string>{"a.txt"}));

  auto missing = ReadFileToString(tmp.Sub("b.txt"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("b.txt"));
}

TEST(FileUtilTest, PathHelpers) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("", "b"), "b");

  TempDir tmp;
  const std::string nested = tmp.Sub("x/y/z");
  EXPECT_FALSE(IsDirectory(nested));
  ASSERT_TRUE(CreateDirectories(nested).ok());
  EXPECT_TRUE(IsDirectory(nested));
  ASSERT_TRUE(CreateDirectories(nested).ok());  // idempotent
  EXPECT_TRUE(FileExists(nested));
  WriteAll(tmp.Sub("x/file"), "1");
  EXPECT_TRUE(FileExists(tmp.Sub("x/file")));
  EXPECT_FALSE(IsDirectory(tmp.Sub("x/file")));
  EXPECT_FALSE(FileExists(tmp.Sub("x/nothing")));
}

TEST(FileUtilTest, UniqueFdReleaseAndMove) {
  UniqueFd a;
  EXPECT_FALSE(a.valid());
  UniqueFd b(-1);
  UniqueFd c(std::move(b));
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.release(), -1);
}

}  // namespace
}  // namespace zipmoe

namespace zipmoe {
namespace {

TEST(RemoveTreeTest, RemovesNestedFilesAndDirectoriesButNotWhatALinkPointsTo) {
  testing::TempDir tmp;
  const std::string outside = tmp.Sub("outside");
  ASSERT_TRUE(CreateDirectories(outside).ok());
  std::ofstream(outside + "/keep.txt") << "keep";
  const std::string tree = tmp.Sub("tree");
  ASSERT_TRUE(CreateDirectories(tree + "/a/b/c").ok());
  std::ofstream(tree + "/a/b/c/x.bin") << "x";
  std::ofstream(tree + "/top.txt") << "t";
  std::filesystem::create_directory_symlink(outside, tree + "/a/link");
  ASSERT_TRUE(RemoveTree(tree).ok());
  EXPECT_FALSE(std::filesystem::exists(tree));
  EXPECT_TRUE(std::filesystem::exists(outside + "/keep.txt")) << "the link's target must survive";
}

TEST(RemoveTreeTest, MissingPathIsOkAndASingleFileIsRemoved) {
  testing::TempDir tmp;
  EXPECT_TRUE(RemoveTree(tmp.Sub("never-made")).ok());
  const std::string file = tmp.Sub("f.txt");
  std::ofstream(file) << "f";
  EXPECT_TRUE(RemoveTree(file).ok());
  EXPECT_FALSE(std::filesystem::exists(file));
}

TEST(RemoveTreeTest, APathThatCannotBeReadIsAnErrorNamingIt) {
  testing::TempDir tmp;
  const std::string file = tmp.Sub("plain.txt");
  std::ofstream(file) << "p";
  const Status st = RemoveTree(file + "/below");  // ENOTDIR: a file is not a directory
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("plain.txt/below"), std::string::npos) << st.message();
  EXPECT_TRUE(std::filesystem::exists(file));
}

}  // namespace
}  // namespace zipmoe
