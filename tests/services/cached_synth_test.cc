// CachedSynth (tests/test_util.h): the shared model cache of the test suite must not grow without
// bound across rebuilds of the CLI (it once filled the disk of the machine CI runs on).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "tests/test_util.h"

namespace zipmoe::testing {
namespace {

namespace fs = std::filesystem;

// Sets ZIPMOE_TEST_CACHE_DIR for the scope and restores it.
class ScopedCacheDir {
 public:
  explicit ScopedCacheDir(const std::string& dir) {
    const char* old = std::getenv("ZIPMOE_TEST_CACHE_DIR");
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv("ZIPMOE_TEST_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScopedCacheDir() {
    if (had_) {
      ::setenv("ZIPMOE_TEST_CACHE_DIR", old_.c_str(), 1);
    } else {
      ::unsetenv("ZIPMOE_TEST_CACHE_DIR");
    }
  }

 private:
  bool had_ = false;
  std::string old_;
};

void MakeFolder(const fs::path& dir, std::chrono::minutes age, bool stamp) {
  fs::create_directories(dir / "12345");
  WriteAll((dir / "12345" / "model.safetensors").string(), "x");
  const auto when = fs::file_time_type::clock::now() - age;
  if (stamp) {
    WriteAll((dir / ".last_used").string(), "");
    fs::last_write_time(dir / ".last_used", when);
  }
  fs::last_write_time(dir, when);
}

TEST(CachedSynthTest, ANewBuildRemovesOtherBuildsFoldersUnusedForHalfAnHour) {
  TempDir tmp;
  const fs::path root = fs::path(tmp.path()) / "cache";
  MakeFolder(root / "build-1", std::chrono::minutes(31), true);   // another build, idle: removed
  MakeFolder(root / "build-2", std::chrono::minutes(5), true);    // another build in use: kept
  MakeFolder(root / "987654321", std::chrono::minutes(120), false);  // the old flat layout, idle: removed
  MakeFolder(root / "55555", std::chrono::minutes(1), false);     // the old flat layout, fresh: kept
  ScopedCacheDir env(root.string());

  const fs::path model = CachedSynth("--arch qwen2_moe --preset tiny --seed 3");
  EXPECT_TRUE(fs::exists(model / "config.json")) << model;
  EXPECT_EQ(model.parent_path().parent_path(), root);
  EXPECT_TRUE(fs::exists(model.parent_path() / ".last_used"));
  EXPECT_FALSE(fs::exists(root / "build-1"));
  EXPECT_TRUE(fs::exists(root / "build-2" / "12345" / "model.safetensors"));
  EXPECT_FALSE(fs::exists(root / "987654321"));
  EXPECT_TRUE(fs::exists(root / "55555"));

  // The second lookup is served from the cache: same folder, nothing regenerated.
  const auto written = fs::last_write_time(model / "config.json");
  EXPECT_EQ(CachedSynth("--arch qwen2_moe --preset tiny --seed 3"), model.string());
  EXPECT_EQ(fs::last_write_time(model / "config.json"), written);
}

}  // namespace
}  // namespace zipmoe::testing
