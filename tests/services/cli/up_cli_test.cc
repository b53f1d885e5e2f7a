// `zipmoe up`: every service as its own process on this machine (cache-manager, scheduler, storage,
// decompressors, executor). Greedy completions over HTTP must give exactly the tokens of `zipmoe
// generate` (embedded mode) at the same budget with 1, 2 and 4 decompressor replicas and with the
// seeds' eviction policies; CPU affinity and trace events per service; garbage and truncated
// FlatBuffers on the scheduler's and the cache-manager's sockets are dropped and counted; config
// errors name the key. Killed and stopped services have a file of their own.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/dtype.h"
#include "common/ipc/messaging.h"
#include "tests/services/cli/fp_experts_test_util.h"
#include "tests/services/cli/http_test_util.h"
#include "tests/services/cli/up_cli_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::Alive;
using testing::Http;
using testing::HttpReply;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;
using up_cli::test::Model;
using up_cli::test::Reference;
using up_cli::test::CompletionBody;
using up_cli::test::ReadPid;
using up_cli::test::Exists;
using up_cli::test::Up;

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
    for (const char* pid : {"cache-manager.pid", "scheduler.pid", "storage.pid", "executor.pid", "front.pid"}) {
      EXPECT_TRUE(Alive(ReadPid(up.run_dir() + "/" + pid))) << pid;
    }
    for (int i = 0; i < n; ++i) EXPECT_TRUE(Alive(ReadPid(fmt::format("{}/decompressor-{}.pid", up.run_dir(), i))));
    HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    const json got = json::parse(reply.body);
    EXPECT_EQ(got["choices"][0]["text"].get<std::string>(), ref_text);
    EXPECT_EQ(got["usage"]["completion_tokens"].get<int>(), kNewTokens);
    const std::string log = up.log();
    EXPECT_NE(log.find(fmt::format("{} processes", 5 + n)), std::string::npos) << log;
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

// Compresses the Hugging Face directory `hf` into tmp/c, serves it with `up` (2 decompressors) and
// expects the completion of `new_tokens` tokens to be the text of `generate` on `hf` itself.
void ExpectUpGivesTheTokensOfTheHfDirectory(const TempDir& tmp, const std::string& hf, int new_tokens) {
  auto c = RunCli(fmt::format("compress {} {} --shards 4", hf, tmp.Sub("c")));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids {} --max-new-tokens {} --threads 1 --ignore-eos "
                                "--json",
                                hf, up_cli::test::kPromptIds, new_tokens));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const std::string ref_text = json::parse(gen.output.substr(gen.output.find('{')))["text"].get<std::string>();
  ASSERT_FALSE(ref_text.empty());
  Up up(tmp, tmp.Sub("c"), 2);
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(new_tokens));
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  const json got = json::parse(reply.body);
  EXPECT_EQ(got["choices"][0]["text"].get<std::string>(), ref_text);
  EXPECT_EQ(got["usage"]["completion_tokens"].get<int>(), new_tokens);
  ASSERT_TRUE(up.Stop()) << up.log();
}

// F32 and F16 experts (issue 19) through every process: the storage reads their chunks, the
// decompressors decode and recover them in their dtype (DecodeRequest.dtype), the cache-manager keeps
// them in per-dtype slots, the executor reads F32/F16 weights from the arena (ExpertReady.dtype):
// the tokens of `generate` on the uncompressed Hugging Face checkpoint.
TEST(UpCli, F32AndF16ExpertsGiveTheTokensOfTheHfDirectory) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    TempDir tmp;
    const std::string bf16 = testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 5");
    ASSERT_NO_FATAL_FAILURE(testing::WriteExpertDtypeVariant(bf16, tmp.Sub("hf"), dtype));
    ASSERT_NO_FATAL_FAILURE(ExpectUpGivesTheTokensOfTheHfDirectory(tmp, tmp.Sub("hf"), 12));
  }
}

// The DeepSeek-V3-style families and FP8 checkpoints (issue 40), gpt-oss's MXFP4 experts (issue 41) and the hybrid
// Qwen3-Next / Qwen3.5 models (issue 42)
// through every process: the noaux_tc / ERNIE routers' selection biases, F8_E4M3 experts (nibble-packed
// E-chunks decoded by the decompressor processes, scales from dense.safetensors) and MXFP4 experts (2-bit
// exponent fields and the block scales' own E-chunk decoded by the decompressor processes, blocks and scales
// recovered in the arena) give the tokens of the HF directory.
TEST(UpCli, NewFamiliesAndFp8ExpertsGiveTheTokensOfTheHfDirectory) {
  for (const char* synth : {"--arch deepseek_v3 --dtype fp8", "--arch glm4_moe", "--arch ernie4_5_moe", "--arch gpt_oss",
                            "--arch qwen3_next", "--arch qwen3_5_moe"}) {
    SCOPED_TRACE(synth);
    TempDir tmp;
    const std::string hf = testing::CachedSynth(std::string(synth) + " --preset tiny --seed 5");
    ASSERT_NO_FATAL_FAILURE(ExpectUpGivesTheTokensOfTheHfDirectory(tmp, hf, 8));
  }
}

// cpu_affinity.<service>: each service runs on the CPUs its key lists (the kernel's view of it), and
// says so; the others keep every CPU. pipeline_priority (default auto): the pipeline services run at
// the level they report, the executor's compute (main) thread stays a normal thread.
TEST(UpCli, CpuAffinityPinsEachServiceToItsCpusAndPipelinePriorityRaisesTheServices) {
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
  // /health answers once the executor has loaded; storage and the decompressors are not on that path and
  // may still be starting under load (they pin themselves first thing): wait up to 20 s for storage's line
  // and the decompressor's CPUs.
  for (int i = 0; i < 200 && (up.log().find("I: storage: pinned to CPUs") == std::string::npos ||
                              allowed("decompressor-0.pid") != "0");
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(allowed("storage.pid"), "0");
  EXPECT_EQ(allowed("decompressor-0.pid"), "0");
  EXPECT_EQ(allowed("executor.pid"), "0-1");
  const std::string every = fmt::format("0-{}", ::sysconf(_SC_NPROCESSORS_ONLN) - 1);
  if (::sysconf(_SC_NPROCESSORS_ONLN) > 1) {
    EXPECT_EQ(allowed("scheduler.pid"), every);
  }
  const std::string log = up.log();
  EXPECT_NE(log.find("I: storage: pinned to CPUs 0 (cpu_affinity.storage)"), std::string::npos) << log;
  // The kernel's policy of a process's main thread (/proc/PID/sched: 0 normal, 1 SCHED_FIFO) and slice (ns).
  const auto sched = [&](const char* pid_file, const char* field) {
    const std::string text = ReadAll(fmt::format("/proc/{}/sched", ReadPid(up.run_dir() + "/" + pid_file)));
    const size_t at = text.find(field);
    if (at == std::string::npos) return std::string("?");
    const size_t begin = text.find_first_not_of(" \t:", at + std::strlen(field));
    return text.substr(begin, text.find('\n', begin) - begin);
  };
  EXPECT_EQ(sched("executor.pid", "policy"), "0");
  for (const char* service : {"storage", "scheduler", "cache-manager", "decompressor"}) {
    const std::string pid_file = std::string(service == std::string("decompressor") ? "decompressor-0" : service) + ".pid";
    if (log.find(fmt::format("I: {}: pipeline priority realtime", service)) != std::string::npos) {
      EXPECT_EQ(sched(pid_file.c_str(), "policy"), "1") << service;
    } else if (log.find(fmt::format("I: {}: pipeline priority slice", service)) != std::string::npos) {
      EXPECT_EQ(sched(pid_file.c_str(), "se.slice"), "100000") << service;
    } else {
      EXPECT_EQ(log.find(fmt::format("I: {}: pipeline priority", service)), std::string::npos) << log;
      EXPECT_EQ(sched(pid_file.c_str(), "policy"), "0") << service;
    }
  }
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
    EXPECT_NE(up.log().find("trace of 6 processes merged into " + trace), std::string::npos) << up.log();
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
  EXPECT_EQ(processes, (std::set<std::string>{"cache-manager", "scheduler", "storage", "decompressor", "executor", "front"}));
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

// `zipmoe up --preload`: the cache-manager fills its pools before it serves (its log says how many
// experts it placed), and the answer is embedded mode's.
TEST(UpCli, PreloadFillsTheCacheBeforeServingAndKeepsTheTokens) {
  const std::string model = Model();
  constexpr int kNewTokens = 8;
  const std::string ref_text = Reference(model, kNewTokens)["text"].get<std::string>();
  TempDir tmp;
  Up up(tmp, model, 1, "--preload");
  ASSERT_TRUE(up.WaitHealthy()) << up.log();
  const std::string log = up.log();
  const size_t at = log.find("preload: ");
  ASSERT_NE(at, std::string::npos) << log;
  unsigned long experts = 0;
  ASSERT_EQ(std::sscanf(log.c_str() + at, "preload: %lu experts placed by expert id", &experts), 1)
      << log.substr(at, 120);
  EXPECT_GT(experts, 0u) << log.substr(at, 120);
  EXPECT_LT(at, log.find("cache-manager: ready")) << "preloaded before it serves:\n" << log;
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref_text);
  ASSERT_TRUE(up.Stop()) << up.log();
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
  // An endpoint URL is checked when the config loads (a decompressor waited with it forever), and `up`
  // refuses a directory without manifest.bin before it starts anything (it restarted everything 6 times).
  r = RunCli("service decompressor --set endpoints.workers=bogus://x");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("endpoints.workers: endpoint 'bogus://x'"), std::string::npos) << r.output;
  r = RunCli(fmt::format("up --model {} --run-dir {}", tmp.Sub("no-such-model"), tmp.Sub("run")));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("is not a compressed model directory (no manifest.bin)"), std::string::npos) << r.output;
  r = RunCli("service executor --set http.kv_cache_dtype=f16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("http.kv_cache_dtype 'f16': f32 (the default) or bf16"), std::string::npos) << r.output;
  r = RunCli("service executor --set http.group_window=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("http.group_window"), std::string::npos) << r.output;
  r = RunCli("service storage --set heartbeat_ms=soon");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("heartbeat_ms"), std::string::npos) << r.output;
  r = RunCli("service executor --set device_assignment=optimal");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("device_assignment = 'optimal'"), std::string::npos) << r.output;
  r = RunCli("service storage --set pipeline_priority=fast");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("pipeline_priority = 'fast'"), std::string::npos) << r.output;
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
