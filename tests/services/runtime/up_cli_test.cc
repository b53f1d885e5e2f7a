// `zipmoe up`: every service as its own process on this machine (cache-manager, scheduler, storage,
// decompressors, executor). Greedy completions over HTTP must give exactly the tokens of `zipmoe
// generate` (embedded mode) at the same budget with 1, 2 and 4 decompressor replicas; a decompressor
// killed with SIGKILL mid-generation is restarted and the request still completes with the same
// tokens; garbage and truncated FlatBuffers on the scheduler's and the cache-manager's sockets are
// dropped and counted; SIGTERM stops everything, removes pid files and the arena.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/messaging.h"
#include "tests/services/runtime/http_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

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

constexpr const char* kBudget = "30%";
const std::string kPromptIds = "5,17,300,42";

std::string Model() { return CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 4"); }

// `zipmoe generate --json` in embedded mode: the reference text and token count.
json Reference(const std::string& model, int new_tokens) {
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos "
                                "--memory-budget {} --json",
                                model, kPromptIds, new_tokens, kBudget));
  EXPECT_EQ(gen.exit_code, 0) << gen.output;
  return json::parse(gen.output.substr(gen.output.find('{')));
}

std::string CompletionBody(int new_tokens) {
  json ids = json::array();
  for (int id : {5, 17, 300, 42}) ids.push_back(id);
  return json{{"prompt", ids}, {"max_tokens", new_tokens}, {"temperature", 0}, {"ignore_eos", true}}.dump();
}

int ReadPid(const std::string& path) { return std::atoi(ReadAll(path).c_str()); }
bool Exists(const std::string& path) {
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
        "--set metrics.port.scheduler=0 --set metrics.port.executor=0 --set metrics.port.cache_manager=0 {} "
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

TEST(UpCli, SameTokensAsEmbeddedGenerateWith1_2_4Decompressors) {
  const std::string model = Model();
  constexpr int kNewTokens = 12;
  const json ref = Reference(model, kNewTokens);
  const std::string ref_text = ref["text"].get<std::string>();
  ASSERT_FALSE(ref_text.empty());
  TempDir tmp;
  for (int n : {1, 2, 4}) {
    SCOPED_TRACE(fmt::format("{} decompressors", n));
    Up up(tmp, model, n);
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    for (const char* pid : {"cache-manager.pid", "scheduler.pid", "storage.pid", "executor.pid"}) {
      EXPECT_TRUE(Alive(ReadPid(up.run_dir() + "/" + pid))) << pid;
    }
    for (int i = 0; i < n; ++i) EXPECT_TRUE(Alive(ReadPid(fmt::format("{}/decompressor-{}.pid", up.run_dir(), i))));
    HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    const json got = json::parse(reply.body);
    EXPECT_EQ(got["choices"][0]["text"].get<std::string>(), ref_text);
    EXPECT_EQ(got["usage"]["completion_tokens"].get<int>(), kNewTokens);
    const std::string log = up.log();
    EXPECT_NE(log.find(fmt::format("{} processes", 4 + n)), std::string::npos) << log;
    // The cache-manager owns the arena: its plan and arena are in its own log lines.
    EXPECT_NE(log.find("I: cache-manager: ready:"), std::string::npos) << log;
    const std::string arena = fmt::format("/dev/shm/zipmoe-up-{}", up.pid());
    EXPECT_TRUE(Exists(arena)) << arena;
    struct stat st {};
    ASSERT_EQ(::stat((up.run_dir() + "/zipmoe.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "the config holds the API key";
    ASSERT_TRUE(up.Stop()) << up.log();
    for (const char* sock : {"scheduler.sock", "workers.sock", "cache-manager.sock"})
      EXPECT_FALSE(Exists(up.run_dir() + "/" + sock)) << sock << " left behind";
    EXPECT_FALSE(Exists(up.run_dir() + "/cache-manager.pid"));
    EXPECT_FALSE(Exists(arena)) << "the cache-manager removes the arena on a clean exit";
    EXPECT_FALSE(Exists(up.run_dir() + "/scheduler.pid"));
    EXPECT_FALSE(Exists(up.run_dir() + "/decompressor-0.pid"));
    EXPECT_NE(up.log().find("I: up: stopped"), std::string::npos);
  }
}

// cpu_affinity.<service>: each service runs on the CPUs its key lists (the kernel's view of it), and
// says so; the others keep every CPU.
TEST(UpCli, CpuAffinityPinsEachServiceToItsCpus) {
  const std::string model = Model();
  TempDir tmp;
  Up up(tmp, model, 1, "--set cpu_affinity.storage=0 --set cpu_affinity.decompressor=0 --set cpu_affinity.executor=0-1");
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const auto allowed = [&](const char* pid_file) {
    const std::string status = ReadAll(fmt::format("/proc/{}/status", ReadPid(up.run_dir() + "/" + pid_file)));
    const size_t at = status.find("Cpus_allowed_list:");
    if (at == std::string::npos) return std::string("?");
    const size_t begin = status.find_first_not_of(" \t", at + 18);
    return status.substr(begin, status.find('\n', begin) - begin);
  };
  EXPECT_EQ(allowed("storage.pid"), "0");
  EXPECT_EQ(allowed("decompressor-0.pid"), "0");
  EXPECT_EQ(allowed("executor.pid"), "0-1");
  const std::string every = fmt::format("0-{}", ::sysconf(_SC_NPROCESSORS_ONLN) - 1);
  if (::sysconf(_SC_NPROCESSORS_ONLN) > 1) {
    EXPECT_EQ(allowed("scheduler.pid"), every);
  }
  const std::string log = up.log();
  EXPECT_NE(log.find("I: storage: pinned to CPUs 0 (cpu_affinity.storage)"), std::string::npos) << log;
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(4));
  EXPECT_EQ(reply.status, 200) << reply.body << log;
  EXPECT_TRUE(up.Stop());
}

// up --trace-events: every service records its timeline and writes it when it stops; up merges the
// parts into one Chrome trace with each process named and the message, layer, read and decode spans.
TEST(UpCli, TraceEventsMergeEveryServicesTimeline) {
  const std::string model = Model();
  TempDir tmp;
  const std::string trace = tmp.Sub("timeline.json");
  {
    Up up(tmp, model, 1, "--trace-events " + trace);
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(4));
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    ASSERT_TRUE(up.Stop()) << up.log();
    EXPECT_NE(up.log().find("trace of 5 processes merged into " + trace), std::string::npos) << up.log();
  }
  ASSERT_TRUE(Exists(trace));
  const json doc = json::parse(ReadAll(trace));
  std::set<std::string> processes, categories;
  std::set<int> pids_with_spans;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
    if (e["ph"] == "X") {
      categories.insert(e["cat"].get<std::string>());
      pids_with_spans.insert(e["pid"].get<int>());
    }
  }
  EXPECT_EQ(processes, (std::set<std::string>{"cache-manager", "scheduler", "storage", "decompressor", "executor"}));
  for (const char* cat : {"step", "layer", "expert", "message", "io"}) EXPECT_EQ(categories.count(cat), 1u) << cat;
  EXPECT_GE(pids_with_spans.size(), 4u);
  EXPECT_TRUE(doc["otherData"]["missing"].empty());
  // The parts are gone: only the merged file is left.
  size_t parts = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tmp.path())) {
    if (entry.path().filename().string().rfind("timeline.json.", 0) == 0) ++parts;
  }
  EXPECT_EQ(parts, 0u);
}

// The seeds' eviction policies run in the multi-process mode too (named in the service config):
// the same text as embedded generate, and the cache-manager reports the policy it runs.
TEST(UpCli, SeedPoliciesGiveTheSameTokensAsEmbedded) {
  const std::string model = Model();
  constexpr int kNewTokens = 8;
  const std::string ref_text = Reference(model, kNewTokens)["text"].get<std::string>();
  TempDir tmp;
  // lru over the planner's F/C/S/E pools (issue 17 item 5) too.
  for (const char* policy : {"smoe", "coserve", "dali", "lru"}) {
    SCOPED_TRACE(policy);
    const bool planned = std::string(policy) == "lru";
    Up up(tmp, model, 1, fmt::format("--set policy={}{}", policy, planned ? " --set pools=FCSE" : ""));
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref_text);
    EXPECT_NE(up.log().find(fmt::format("policy {},", policy)), std::string::npos) << up.log();
    ASSERT_TRUE(up.Stop()) << up.log();
    // smoe brings its top-score prefetching (the executor predicts, the scheduler pins and reads
    // ahead through the cache-manager); dali without a calibration file top-score too; coserve none.
    const std::string log = up.log();
    const std::string mode = std::string(policy) == "coserve" || planned ? "none" : "top-score";
    const size_t at = log.find("stopping (prefetch " + mode + ": ");
    ASSERT_NE(at, std::string::npos) << log;
    unsigned long predicted = 0, issued = 0, used = 0;
    ASSERT_EQ(std::sscanf(log.c_str() + at + 20 + mode.size(), "%lu predicted, %lu issued, %lu used", &predicted,
                          &issued, &used),
              3)
        << log.substr(at, 120);
    if (mode == "none") {
      EXPECT_EQ(predicted, 0u);
    } else {
      EXPECT_GT(issued, 0u) << log.substr(at, 120);
      EXPECT_LE(used, issued);
    }
  }
}

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
    replacement = ReadPid(pid_path);
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
  EXPECT_NE(up.log().find(fmt::format("{} processes", 4 + 2)), std::string::npos);
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
    replacement = ReadPid(pid_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(replacement, victim) << up.log();
  HttpReply again = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(8));
  ASSERT_EQ(again.status, 200) << again.body << up.log();
  EXPECT_EQ(json::parse(again.body)["choices"][0]["text"].get<std::string>(), ref8["text"].get<std::string>());
  EXPECT_TRUE(up.Stop());
}

TEST(UpCli, GarbageOnSchedulerAndCacheManagerSocketsIsDroppedAndCounted) {
  const std::string model = Model();
  TempDir tmp;
  Up up(tmp, model, 1);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string good = messaging::EncodeMessage("test", messaging::MakeHeartbeat(100, 0));
  zmq::context_t context(1);
  for (const char* sock : {"workers.sock", "scheduler.sock", "cache-manager.sock"}) {
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(fmt::format("ipc://{}/{}", up.run_dir(), sock));
    dealer.send(zmq::buffer(std::string("\x00\xff garbage, not a flatbuffer", 27)), zmq::send_flags::none);
    dealer.send(zmq::buffer(good.substr(0, good.size() - 5)), zmq::send_flags::none);  // truncated
    std::string wrong = good;
    wrong[7] ^= 0x40;  // corrupt the file identifier / offsets
    dealer.send(zmq::buffer(wrong), zmq::send_flags::none);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::string log;
  size_t dropped = 0;
  for (int i = 0; i < 50; ++i) {
    log = up.log();
    dropped = 0;
    for (size_t at = log.find("dropped a bad message"); at != std::string::npos;
         at = log.find("dropped a bad message", at + 1)) {
      ++dropped;
    }
    if (dropped >= 9) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GE(dropped, 9u) << log;
  EXPECT_NE(log.find("E: cache-manager: dropped a bad message"), std::string::npos) << log;
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(4));
  EXPECT_EQ(reply.status, 200) << reply.body << log;
  // Bad HTTP input: JSON error and the server keeps serving.
  HttpReply bad = Http(tmp, up.port(), "POST", "/v1/completions", "{not json");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("\"error\""), std::string::npos);
  EXPECT_EQ(Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(2)).status, 200);
  EXPECT_TRUE(up.Stop());
}

TEST(UpCli, ServiceConfigErrorsNameTheKey) {
  TempDir tmp;
  testing::WriteAll(tmp.Sub("bad.json"), R"({"http": {"port": "eighty"}})");
  auto r = RunCli(fmt::format("service storage --config {}", tmp.Sub("bad.json")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("http.port"), std::string::npos) << r.output;
  testing::WriteAll(tmp.Sub("unknown.json"), R"({"modle_dir": "/x"})");
  r = RunCli(fmt::format("service storage --config {}", tmp.Sub("unknown.json")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("unknown key 'modle_dir'"), std::string::npos) << r.output;
  r = RunCli("service storage --set liveness=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("liveness"), std::string::npos) << r.output;
  r = RunCli("service executor --set http.request_grouping=fcfs");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("http.request_grouping"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fcfs"), std::string::npos) << r.output;
  r = RunCli("service executor --set http.group_window=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("http.group_window"), std::string::npos) << r.output;
  r = RunCli("service storage --set heartbeat_ms=soon");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("heartbeat_ms"), std::string::npos) << r.output;
  r = RunCli("service executor --set device_assignment=optimal");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("device_assignment = 'optimal'"), std::string::npos) << r.output;
  r = RunCli("service storage --set cpu_affinity.storage=3-1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cpu_affinity.storage = '3-1': '3-1' runs backwards"), std::string::npos) << r.output;
  r = RunCli("service decompressor --set cpu_affinity.decompressor=0,x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cpu_affinity.decompressor = '0,x': 'x' is not a CPU number"), std::string::npos)
      << r.output;
  r = RunCli("service storage --set cpu_affinity.storage=1000");  // valid, but no such CPU here
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cpu_affinity.storage = '1000': sched_setaffinity"), std::string::npos) << r.output;
  ::setenv("ZIPMOE_HEARTBEAT_MS", "soon", 1);  // the child inherits it; the variable is named
  r = RunCli("service storage");
  ::unsetenv("ZIPMOE_HEARTBEAT_MS");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("ZIPMOE_HEARTBEAT_MS"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zipmoe
