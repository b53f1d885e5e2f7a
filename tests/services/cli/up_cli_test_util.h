// Helpers of the `zipmoe up` tests (up_cli_test.cc, up_cli_failure_test.cc): the tiny compressed
// model, the embedded-mode reference completion, a completion request body, and `zipmoe up` run in the
// background for the length of a test.
#pragma once

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/services/cli/http_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::up_cli::test {

using nlohmann::json;
using testing::Alive;
using testing::CachedCompress;
using testing::CachedSynth;
using testing::FreePort;
using testing::Http;
using testing::HttpReply;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;

inline constexpr const char* kBudget = "30%";
inline const std::string kPromptIds = "5,17,300,42";

inline std::string Model() { return CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 4"); }

// `zipmoe generate --json` in embedded mode: the reference text and token count.
inline json Reference(const std::string& model, int new_tokens) {
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos "
                                "--memory-budget {} --json",
                                model, kPromptIds, new_tokens, kBudget));
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  return json::parse(gen.output.substr(gen.output.find('{')));
}

inline std::string CompletionBody(int new_tokens) {
  json ids = json::array();
  for (int id : {5, 17, 300, 42}) ids.push_back(id);
  return json{{"prompt", ids}, {"max_tokens", new_tokens}, {"temperature", 0}, {"ignore_eos", true}}.dump();
}

inline int ReadPid(const std::string& path) { return std::atoi(ReadAll(path).c_str()); }
// For polling loops while a service restarts: its pid file is removed and rewritten meanwhile, so a
// missing or half-written file reads 0 here instead of failing the test (ReadPid does).
inline int TryReadPid(const std::string& path) {
  std::ifstream in(path);
  int pid = 0;
  if (!(in >> pid)) return 0;
  return pid;
}
inline bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// `zipmoe up` in the background; SIGKILLs the whole group if a test fails half-way.
class Up {
 public:
  Up(const TempDir& tmp, const std::string& model, int decompressors, const std::string& extra = "")
      : tmp_(tmp), run_dir_(tmp.Sub(fmt::format("nested/run{}", decompressors))), port_(FreePort()) {
    log_ = tmp.Sub(fmt::format("up{}.log", decompressors));
    const std::string pid_file = tmp.Sub("up.pid");
    // Metrics endpoints off: tests run in parallel with other servers on this machine. Heartbeats
    // every 250 ms (liveness 3 x 250 ms): ctest -j2 runs two `up`s with five processes each on two
    // cores, and 300 ms stalls there declared healthy workers dead (fenced, restarted) mid-test.
    auto start = RunCli(fmt::format(
        "up --model {} --decompressors {} --port {} --run-dir {} --memory-budget {} --set threads=1 "
        "--set heartbeat_ms=250 --set metrics.port.storage=0 --set metrics.port.decompressor=0 "
        "--set metrics.port.scheduler=0 --set metrics.port.executor=0 --set metrics.port.cache_manager=0 "
        "--set metrics.port.front=0 {} "
        "> {} 2>&1 & echo $! > {}",
        model, decompressors, port_, run_dir_, kBudget, extra, log_, pid_file));
    EXPECT_EQ(start.exit_code, 0) << start.output;
    pid_ = ReadPid(pid_file);
  }
  ~Up() {
    if (pid_ > 0 && Alive(pid_)) {
      ::kill(pid_, SIGTERM);
      for (int i = 0; i < 200 && Alive(pid_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (Alive(pid_)) ::kill(pid_, SIGKILL);
    }
  }
  bool WaitHealthy() {
    for (int i = 0; i < 600 && Alive(pid_); ++i) {
      if (Http(tmp_, port_, "GET", "/health").status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // SIGTERM; true when `up` exited within 20 s.
  bool Stop() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 400 && Alive(pid_); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return !Alive(pid_);
  }
  int port() const { return port_; }
  int pid() const { return pid_; }
  const std::string& run_dir() const { return run_dir_; }
  std::string log() const { return ReadAll(log_); }

 private:
  const TempDir& tmp_;
  std::string run_dir_;
  int port_;
  std::string log_;
  int pid_ = -1;
};

}  // namespace zipmoe::up_cli::test
