// Test helpers: a temporary directory removed at scope exit, and running the zipmoe CLI.
#pragma once

#include <chrono>
#include <string>
#include <thread>

namespace zipmoe::testing {

class TempDir {
 public:
  TempDir();   // mkdtemp under $TMPDIR or /tmp
  ~TempDir();  // rm -rf
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs "<launcher> <build>/bin/zipmoe <args>" through the shell and captures its output; `launcher`
// (e.g. "taskset -c 0") is empty by default.
CommandResult RunCli(const std::string& args, const std::string& launcher = "");
// "<build>/bin/zipmoe" (for tests that fork/exec it themselves: to signal it, or to set its rlimits).
std::string CliPath();

// Output directory of `zipmoe synth <synth_args> --out DIR` (e.g. "--arch qwen2_moe --preset tiny
// --seed 7"), generated once and shared by every test process of this build: cached under
// $ZIPMOE_TEST_CACHE_DIR (default /tmp/zipmoe_test_cache)/build-<hash of the CLI's path, size and
// mtime>/<hash of the args>, so a rebuilt CLI never serves stale models. Created atomically (temp dir +
// rename). A new build removes other builds' folders unused for 30 minutes. Callers must treat the
// directory as read-only.
std::string CachedSynth(const std::string& synth_args);
// Likewise for `zipmoe compress <model_dir> OUT <compress_args>`.
std::string CachedCompress(const std::string& model_dir, const std::string& compress_args = "");

// Reads/writes whole files (test setup only; failures abort the test via ADD_FAILURE + empty result).
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);

// Polls `done` every 5 ms for up to `limit`: for state another thread changes (a server's
// counters, a worker's statistics). Returns done()'s last value.
template <typename F>
bool Eventually(F done, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

}  // namespace zipmoe::testing
