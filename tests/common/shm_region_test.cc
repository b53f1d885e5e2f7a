// Tests for common/shm_region: create/attach/unlink, a second process's view (fork), 0600 mode,
// stale-name reclaim after a crashed owner, the prefix sweep, live-owner refusal, move semantics, bad names.
#include "common/ipc/shm_region.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

namespace zipmoe {
namespace {

using ::testing::HasSubstr;

// A name unique to this process and call, so parallel test runs never collide.
std::string UniqueName(const char* tag) {
  static std::atomic<int> counter{0};
  return "/zipmoe-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag;
}

std::string DevShmPath(const std::string& name) { return "/dev/shm" + name; }

bool NameExists(const std::string& name) {
  struct stat st {};
  return ::stat(DevShmPath(name).c_str(), &st) == 0;
}

// Runs `body` in a forked child and returns its exit code (the child never returns to gtest).
template <typename Fn>
int RunInChild(Fn body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(ShmRegionTest, CreateAttachShareBytesAndOwnerUnlinks) {
  const std::string name = UniqueName("basic");
  {
    auto owner = ShmRegion::Create(name, 3 * 4096 + 5);
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    EXPECT_TRUE(owner->owns_name());
    EXPECT_EQ(owner->size_bytes(), 3u * 4096 + 5);
    ASSERT_NE(owner->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(owner->data()) % 4096, 0u);
    EXPECT_TRUE(NameExists(name));
    {
      auto view = ShmRegion::Attach(name);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      EXPECT_FALSE(view->owns_name());
      EXPECT_EQ(view->size_bytes(), owner->size_bytes());
      std::memcpy(owner->data() + 4096, "zipmoe", 6);
      EXPECT_EQ(std::memcmp(view->data() + 4096, "zipmoe", 6), 0);
      view->data()[7] = 0x5a;
      EXPECT_EQ(owner->data()[7], 0x5a);
    }
    EXPECT_TRUE(NameExists(name)) << "an attached view must never unlink";
  }
  EXPECT_FALSE(NameExists(name)) << "the owner unlinks in its destructor";
  auto gone = ShmRegion::Attach(name);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(), HasSubstr(name));
}

TEST(ShmRegionTest, ForkedProcessWritesParentReads) {
  const std::string name = UniqueName("fork");
  auto owner = ShmRegion::Create(name, 64 * 1024);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  const int rc = RunInChild([&name] {
    auto view = ShmRegion::Attach(name);  // a second, independent mapping in another process
    if (!view.ok() || view->size_bytes() != 64 * 1024) return 2;
    for (uint64_t i = 0; i < view->size_bytes(); ++i) view->data()[i] = static_cast<uint8_t>(i * 7 + 1);
    return 0;
  });
  ASSERT_EQ(rc, 0);
  for (uint64_t i = 0; i < owner->size_bytes(); ++i) {
    ASSERT_EQ(owner->data()[i], static_cast<uint8_t>(i * 7 + 1)) << "byte " << i;
  }
  EXPECT_TRUE(NameExists(name)) << "the child's attached view must not unlink";
}

TEST(ShmRegionTest, ModeIs0600RegardlessOfUmask) {
  const std::string name = UniqueName("mode");
  const mode_t old_umask = ::umask(0);  // would give 0666 if the mode were left to shm_open + umask
  auto owner = ShmRegion::Create(name, 4096);
  ::umask(old_umask);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  struct stat st {};
  ASSERT_EQ(::stat(DevShmPath(name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, ::getuid());
}

TEST(ShmRegionTest, StaleRegionOfCrashedOwnerIsReclaimed) {
  const std::string name = UniqueName("stale");
  // The child creates the region and "crashes": _exit skips the destructor, so the name stays.
  const int rc = RunInChild([&name] {
    auto owner = ShmRegion::Create(name, 8192);
    if (!owner.ok()) return 2;
    std::memset(owner->data(), 0xab, owner->size_bytes());
    ::_exit(0);  // "crash": no destructor, no unlink
    return 0;
  });
  ASSERT_EQ(rc, 0);
  ASSERT_TRUE(NameExists(name)) << "the crashed owner left its name behind";

  auto fresh = ShmRegion::Create(name, 3 * 4096);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->size_bytes(), 3u * 4096);
  for (uint64_t i = 0; i < fresh->size_bytes(); ++i) {
    ASSERT_EQ(fresh->data()[i], 0) << "reclaimed region must be a new object, byte " << i;
  }
}

TEST(ShmRegionTest, StaleRegionWithoutOwnerLockIsReclaimed) {
  // A leftover from before the owner took its lock (or from any crashed writer): plain shm_open.
  const std::string name = UniqueName("nolock");
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  ::close(fd);
  auto fresh = ShmRegion::Create(name, 8192);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_EQ(fresh->size_bytes(), 8192u);
}

TEST(ShmRegionTest, LiveOwnerIsNeverReclaimed) {
  const std::string name = UniqueName("live");
  auto owner = ShmRegion::Create(name, 4096);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  owner->data()[0] = 42;

  auto second = ShmRegion::Create(name, 4096);  // same process, another open: still refused
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(name));

  const int rc = RunInChild([&name] {
    auto other = ShmRegion::Create(name, 4096);
    return (!other.ok() && other.status().code() == StatusCode::kUnavailable) ? 0 : 3;
  });
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(owner->data()[0], 42);
  EXPECT_TRUE(NameExists(name));
}

TEST(ShmRegionTest, SweepRemovesOnlyStaleSizedRegionsUnderThePrefix) {
  // Per-process names are never created again, so only a sweep frees what killed owners left.
  const std::string prefix = UniqueName("sweep") + "-";
  const std::string dead_a = prefix + "a", dead_b = prefix + "b", live = prefix + "live";
  const std::string unsized = prefix + "unsized", other = UniqueName("sweep-other");
  for (const std::string* name : {&dead_a, &dead_b, &other}) {
    const std::string n = *name;
    ASSERT_EQ(RunInChild([&n] {
                auto owner = ShmRegion::Create(n, 3 * 4096);
                if (!owner.ok()) return 2;
                ::_exit(0);  // killed: the name stays, nobody holds its lock
                return 0;
              }),
              0);
    ASSERT_TRUE(NameExists(n));
  }
  auto owner = ShmRegion::Create(live, 4096);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  // An unsized object may be a Create() between shm_open and flock: kept.
  const int fd = ::shm_open(unsized.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);

  auto swept = ShmRegion::ReclaimStale(prefix);
  ASSERT_TRUE(swept.ok()) << swept.status().ToString();
  EXPECT_EQ(swept->regions, 2);
  EXPECT_EQ(swept->bytes, 2u * 3 * 4096);
  EXPECT_FALSE(NameExists(dead_a));
  EXPECT_FALSE(NameExists(dead_b));
  EXPECT_TRUE(NameExists(live)) << "a live owner's region must survive the sweep";
  EXPECT_TRUE(NameExists(unsized));
  EXPECT_TRUE(NameExists(other)) << "outside the prefix";

  auto again = ShmRegion::ReclaimStale(prefix);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->regions, 0);

  // Another user's dead region is theirs to sweep (root can hand one to "nobody" to check that).
  if (::geteuid() == 0) {
    const std::string foreign = prefix + "foreign";
    ASSERT_EQ(RunInChild([&foreign] {
                auto owner = ShmRegion::Create(foreign, 4096);
                if (!owner.ok()) return 2;
                ::_exit(0);
                return 0;
              }),
              0);
    ASSERT_EQ(::chown(DevShmPath(foreign).c_str(), 65534, 65534), 0);
    auto skipped = ShmRegion::ReclaimStale(prefix);
    ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
    EXPECT_EQ(skipped->regions, 0);
    EXPECT_TRUE(NameExists(foreign));
    ::shm_unlink(foreign.c_str());
  }
  EXPECT_FALSE(ShmRegion::ReclaimStale("no-slash").ok());
  EXPECT_FALSE(ShmRegion::ReclaimStale("/").ok());
  ::shm_unlink(unsized.c_str());
  ::shm_unlink(other.c_str());
}

TEST(ShmRegionTest, SweepAtStartUpLogsWhatItRemovedAndNeverFails) {
  const std::string prefix = UniqueName("sweeplog") + "-";
  const std::string dead = prefix + "a";
  ASSERT_EQ(RunInChild([&dead] {
              auto owner = ShmRegion::Create(dead, 4096);
              if (!owner.ok()) return 2;
              ::_exit(0);
              return 0;
            }),
            0);
  ::testing::internal::CaptureStderr();
  ShmRegion::ReclaimStaleAndLog(prefix, "tester");
  ShmRegion::ReclaimStaleAndLog(prefix, "tester");  // nothing left: silent
  ShmRegion::ReclaimStaleAndLog("no-slash", "tester");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(NameExists(dead));
  EXPECT_THAT(log, HasSubstr("I: tester: removed 1 stale arena(s)"));
  EXPECT_THAT(log, HasSubstr("W: tester: could not sweep stale arenas"));
  EXPECT_EQ(log.find("removed", log.find("removed") + 1), std::string::npos) << log;
}

TEST(ShmRegionTest, ForkedCopyOfOwnerNeverUnlinks) {
  const std::string name = UniqueName("forkcopy");
  auto owner = ShmRegion::Create(name, 4096);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  const int rc = RunInChild([&owner] {
    { ShmRegion copy = std::move(*owner); }  // destructor runs in the child (other pid)
    return 0;
  });
  ASSERT_EQ(rc, 0);
  EXPECT_TRUE(NameExists(name));
  auto refused = ShmRegion::Create(name, 4096);  // and the parent still holds the owner lock
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
}

TEST(ShmRegionTest, MoveTransfersOwnership) {
  const std::string name = UniqueName("move");
  auto created = ShmRegion::Create(name, 4096);
  ASSERT_TRUE(created.ok());
  ShmRegion a = std::move(*created);
  EXPECT_EQ(created->data(), nullptr);
  EXPECT_FALSE(created->owns_name());
  {
    ShmRegion b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_TRUE(b.owns_name());
    EXPECT_EQ(b.name(), name);
    auto other = ShmRegion::Create(UniqueName("move2"), 4096);
    ASSERT_TRUE(other.ok());
    const std::string other_name = other->name();
    *other = std::move(b);  // move-assign unlinks the target's previous region
    EXPECT_FALSE(NameExists(other_name));
    EXPECT_TRUE(NameExists(name));
  }
  EXPECT_FALSE(NameExists(name));
}

TEST(ShmRegionTest, InvalidArguments) {
  const std::vector<std::string> bad_names = {"", "/", "noslash", "/a/b", "/" + std::string(300, 'x')};
  for (const std::string& bad : bad_names) {
    auto r = ShmRegion::Create(bad, 4096);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(ShmRegion::Attach(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
  auto zero = ShmRegion::Create(UniqueName("zero"), 0);
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace zipmoe
