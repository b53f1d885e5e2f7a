// `zipmoe up` under failures: a decompressor killed with SIGKILL mid-generation is restarted and the
// request still completes with the same tokens; SIGKILL of any one service or of `up` itself; a
// scheduler or a decompressor stopped (SIGSTOP) past its liveness is replaced (fenced first) and the
// requests get the reference text again.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/ipc/messaging.h"
#include "tests/services/cli/http_test_util.h"
#include "tests/services/cli/up_cli_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::Alive;
using testing::FreePort;
using testing::Http;
using testing::HttpReply;
using testing::TempDir;
using up_cli::test::Model;
using up_cli::test::Reference;
using up_cli::test::CompletionBody;
using up_cli::test::ReadPid;
using up_cli::test::TryReadPid;
using up_cli::test::Exists;
using up_cli::test::Up;

TEST(UpCli, SigkillDecompressorMidGenerationStillCompletesAndIsReplaced) {
  const std::string model = Model();
  constexpr int kNewTokens = 160;
  const json ref = Reference(model, kNewTokens);
  TempDir tmp;
  Up up(tmp, model, 2);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string pid_path = up.run_dir() + "/decompressor-0.pid";
  const int victim = ReadPid(pid_path);
  ASSERT_GT(victim, 0);
  const int cache_manager = ReadPid(up.run_dir() + "/cache-manager.pid");
  ASSERT_TRUE(Alive(cache_manager));
  HttpReply reply;
  std::thread request([&] { reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generation is under way
  EXPECT_EQ(::kill(victim, SIGKILL), 0);  // not ASSERT: the request thread must still be joined
  request.join();
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref["text"].get<std::string>());
  // The supervisor restarted replica 0 and the scheduler took the new process as a worker.
  int replacement = 0;
  std::string log;
  for (int i = 0; i < 100; ++i) {
    replacement = TryReadPid(pid_path);
    log = up.log();
    if (replacement > 0 && replacement != victim &&
        log.find(fmt::format("-{} (pid {}) ready", replacement, replacement)) != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(replacement, victim);
  EXPECT_TRUE(Alive(replacement));
  EXPECT_NE(log.find(fmt::format("decompressor-0 (pid {}) killed by signal 9", victim)), std::string::npos) << log;
  EXPECT_TRUE(Alive(cache_manager)) << "the cache-manager is not restarted by a worker's death";
  EXPECT_NE(up.log().find(fmt::format("{} processes", 5 + 2)), std::string::npos);
  EXPECT_NE(log.find(fmt::format("-{} (pid {}) ready", replacement, replacement)), std::string::npos) << log;
  // And it serves: another request completes.
  HttpReply again = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_TRUE(up.Stop());
}

// SIGKILL of any one service under `up` (issue 15, supervision): the request in flight either
// completes with the reference text or fails within 30 s with an error (an HTTP error status or,
// when the executor itself died, a closed connection), `up` restarts the service (counted in
// zipmoe_up_restarts_total) and the next request gets the reference text again.
class UpKillTest : public ::testing::TestWithParam<const char*> {};

TEST_P(UpKillTest, InFlightRequestEndsInTimeAndTheNextOneHasTheSameText) {
  const std::string service = GetParam();
  const std::string model = Model();
  constexpr int kNewTokens = 120;
  const json ref = Reference(model, kNewTokens);
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  const int metrics_port = FreePort();
  Up up(tmp, model, 1, fmt::format("--set metrics.port.up={}", metrics_port));
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  // Before any restart every service's counter is there, at 0.
  const HttpReply before = Http(tmp, metrics_port, "GET", "/metrics");
  for (const char* s : {"storage", "decompressor", "scheduler", "cache-manager", "executor"}) {
    EXPECT_NE(before.body.find(fmt::format("zipmoe_up_restarts_total{{service=\"{}\"}} 0", s)), std::string::npos)
        << s << "\n" << before.body;
  }
  const std::string pid_path = up.run_dir() + "/" + service + ".pid";
  const int victim = ReadPid(pid_path);
  ASSERT_GT(victim, 0);
  HttpReply reply;
  std::chrono::steady_clock::time_point ended;
  std::thread request([&] {
    reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
    ended = std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generation is under way
  EXPECT_EQ(::kill(victim, SIGKILL), 0);  // not ASSERT: the request thread must still be joined
  const auto killed = std::chrono::steady_clock::now();
  request.join();
  if (reply.status == 200) {
    EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref["text"].get<std::string>());
  } else {
    EXPECT_LT(ended - killed, std::chrono::seconds(30)) << "the request in flight hung";
    if (reply.status != 0) {
      EXPECT_TRUE(json::parse(reply.body, nullptr, false).contains("error")) << reply.body;
    }
  }
  std::printf("I: test: kill %s: the request in flight ended with HTTP %d %.1f s after the kill\n", service.c_str(),
              reply.status, std::chrono::duration<double>(ended - killed).count());
  // Restarted, and serving the same text again.
  HttpReply again;
  for (int i = 0; i < 300 && again.status != 200; ++i) {
    again = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
    if (again.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(again.status, 200) << again.body << up.log();
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  const int replacement = ReadPid(pid_path);
  EXPECT_NE(replacement, victim);
  EXPECT_TRUE(Alive(replacement)) << up.log();
  const HttpReply metrics = Http(tmp, metrics_port, "GET", "/metrics");
  const std::string counted = fmt::format("zipmoe_up_restarts_total{{service=\"{}\"}} 1",
                                          service == std::string("decompressor-0") ? "decompressor" : service);
  EXPECT_NE(metrics.body.find(counted), std::string::npos) << metrics.body;
  const std::string arena = fmt::format("/dev/shm/zipmoe-up-{}", up.pid());
  ASSERT_TRUE(up.Stop()) << up.log();
  EXPECT_FALSE(Exists(arena)) << "arena left behind";
}

INSTANTIATE_TEST_SUITE_P(EveryService, UpKillTest,
                         ::testing::Values("storage", "decompressor-0", "scheduler", "cache-manager", "executor"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (ch == '-') ch = '_';
                           return name;
                         });

// A scheduler killed while idle: `up` restarts it at once, and the next request is served within a few
// seconds (the executor sees that the old scheduler's pipe has no reader left; it used to wait out its
// 20 s timeout first).
TEST(UpCli, AfterAnIdleSchedulerIsKilledTheNextRequestDoesNotWaitOutThePipeTimeout) {
  const std::string model = Model();
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  Up up(tmp, model, 1);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  HttpReply warm = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));  // the pipe is in use
  ASSERT_EQ(warm.status, 200) << warm.body << up.log();
  const std::string pid_path = up.run_dir() + "/scheduler.pid";
  const int victim = ReadPid(pid_path);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  for (int i = 0; i < 100; ++i) {  // the pid file is gone until the new scheduler writes it
    const int pid = TryReadPid(pid_path);
    if (pid > 0 && pid != victim && Alive(pid)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the new one says hello to the cache-manager
  const auto t0 = std::chrono::steady_clock::now();
  HttpReply reply;
  for (int i = 0; i < 60 && reply.status != 200; ++i) {
    reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
    if (reply.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  EXPECT_LT(seconds, 10.0) << up.log();
  std::printf("I: test: the first request after the scheduler's restart took %.1f s\n", seconds);
  EXPECT_TRUE(up.Stop());
}

// SIGKILL of `up` itself: every service stops with it (no orphan keeps the port or the arena), and
// a new `up` on the same run dir serves again.
TEST(UpCli, SigkillOfUpTakesEveryServiceWithItAndANewUpServes) {
  const std::string model = Model();
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  std::vector<int> services;
  int first_up = 0;
  {
    Up up(tmp, model, 1);
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    for (const char* pid : {"cache-manager.pid", "scheduler.pid", "storage.pid", "decompressor-0.pid", "executor.pid"})
      services.push_back(ReadPid(up.run_dir() + "/" + pid));
    first_up = up.pid();
    ASSERT_EQ(::kill(up.pid(), SIGKILL), 0);
    for (int i = 0; i < 200; ++i) {
      bool any = false;
      for (int pid : services) any = any || Alive(pid);
      if (!any) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (int pid : services) EXPECT_FALSE(Alive(pid)) << "service pid " << pid << " outlived its up";
  }
  EXPECT_FALSE(Exists(fmt::format("/dev/shm/zipmoe-up-{}", first_up))) << "the cache-manager removes the arena on SIGTERM";
  Up again(tmp, model, 1);
  ASSERT_TRUE(again.WaitHealthy()) << again.log();
  HttpReply reply = Http(tmp, again.port(), "POST", "/v1/completions", CompletionBody(8));
  ASSERT_EQ(reply.status, 200) << reply.body << again.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  EXPECT_TRUE(again.Stop());
}

// A second `up` on a run dir in use, or on a port in use, is refused before it starts anything: it
// used to overwrite the first's config, pid files and sockets (and delete them when it stopped), or to
// crash-loop its front for seconds. The first keeps serving, its files untouched.
TEST(UpCli, ASecondUpOnTheSameRunDirOrPortIsRefusedAndTheFirstKeepsServing) {
  const std::string model = Model();
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  Up up(tmp, model, 1);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string config = testing::ReadAll(up.run_dir() + "/zipmoe.json");
  const std::string executor_pid = testing::ReadAll(up.run_dir() + "/executor.pid");
  testing::CommandResult same_dir = testing::RunCli(fmt::format("up --model {} --port {} --run-dir {} 2>&1", model, FreePort(), up.run_dir()));
  EXPECT_EQ(same_dir.exit_code, 1) << same_dir.output;
  EXPECT_NE(same_dir.output.find(fmt::format("another `zipmoe up` (pid {}) runs in {}", up.pid(), up.run_dir())),
            std::string::npos)
      << same_dir.output;
  testing::CommandResult same_port =
      testing::RunCli(fmt::format("up --model {} --port {} --run-dir {} 2>&1", model, up.port(), tmp.Sub("other-run")));
  EXPECT_EQ(same_port.exit_code, 1) << same_port.output;
  EXPECT_NE(same_port.output.find(fmt::format("127.0.0.1:{} is in use", up.port())), std::string::npos)
      << same_port.output;
  EXPECT_EQ(testing::ReadAll(up.run_dir() + "/zipmoe.json"), config);
  EXPECT_EQ(testing::ReadAll(up.run_dir() + "/executor.pid"), executor_pid);
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  EXPECT_TRUE(up.Stop());
}

// A scheduler stopped past its liveness (SIGSTOP) loses its cache-manager session (leases and
// staging slots reclaimed); once it runs again it exits on the first refused lookup and `up` starts a
// fresh one, so requests get the reference text again instead of failing forever.
TEST(UpCli, SchedulerStoppedPastItsLivenessIsReplacedAndServesAgain) {
  const std::string model = Model();
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  Up up(tmp, model, 1);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string pid_path = up.run_dir() + "/scheduler.pid";
  const int scheduler = ReadPid(pid_path);
  ASSERT_GT(scheduler, 0);
  ASSERT_EQ(::kill(scheduler, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // > liveness x heartbeat_ms (3 x 250 ms)
  ASSERT_EQ(::kill(scheduler, SIGCONT), 0);
  HttpReply reply;
  for (int i = 0; i < 60 && reply.status != 200; ++i) {
    reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
    if (reply.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  const std::string log = up.log();
  EXPECT_NE(log.find("dropped this scheduler's session"), std::string::npos) << log;
  EXPECT_NE(ReadPid(pid_path), scheduler) << log;
  EXPECT_TRUE(up.Stop());
}

// A decompressor stopped (SIGSTOP) past its heartbeat deadline while it holds decode work (issue 15):
// before the scheduler re-issues that work it fences the worker (SIGKILL, waits until it is gone),
// so a late write of the stalled process can never land in a slot handed to someone else; `up`
// restarts it, the request in flight completes with the reference text, and so does the next one.
TEST(UpCli, DecompressorStoppedPastItsHeartbeatIsFencedBeforeItsWorkIsReissued) {
  const std::string model = Model();
  constexpr int kNewTokens = 120;
  const json ref = Reference(model, kNewTokens);
  const json ref8 = Reference(model, 8);
  TempDir tmp;
  Up up(tmp, model, 1);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string pid_path = up.run_dir() + "/decompressor-0.pid";
  const int victim = ReadPid(pid_path);
  ASSERT_GT(victim, 0);
  HttpReply reply;
  std::thread request([&] { reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generation is under way
  EXPECT_EQ(::kill(victim, SIGSTOP), 0);  // the only decompressor: the next decodes queue on it
  request.join();
  (void)::kill(victim, SIGCONT);  // if it was not fenced, let it run (the assertions below then fail)
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref["text"].get<std::string>());
  const std::string log = up.log();
  EXPECT_NE(log.find(fmt::format("(pid {}) stopped heart-beating, SIGKILLed and gone (fenced)", victim)),
            std::string::npos) << log;
  EXPECT_FALSE(Alive(victim));
  int replacement = 0;
  for (int i = 0; i < 100 && (replacement <= 0 || replacement == victim); ++i) {
    replacement = TryReadPid(pid_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(replacement, victim) << up.log();
  HttpReply again = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
  ASSERT_EQ(again.status, 200) << again.body << up.log();
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  EXPECT_TRUE(up.Stop());
}

}  // namespace
}  // namespace zipmoe
