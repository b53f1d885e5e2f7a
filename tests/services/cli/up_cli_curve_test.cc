// `zipmoe up` with CURVE links (issue 43, item 3): every endpoint on tcp://127.0.0.1 with
// link_security.mode=on (loopback: a CI machine may have no second address). `up` writes a key pair for
// the deployment (RUN_DIR/link.key, 0600, named by zipmoe.json) and the completion has the tokens of
// embedded `zipmoe generate`. Then a stranger sends a valid message to each service endpoint, once
// with a CURVE key pair of its own (it knows the deployment's public key) and once in plaintext:
// nothing answers, nothing reaches the services (no worker registered, no cache session replaced), the
// refusals are counted in the scheduler's and the cache-manager's /metrics, and the next completion is
// unchanged. A service whose endpoint needs CURVE without a key file fails at start naming both.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "common/ipc/link_security.h"
#include "common/ipc/messaging.h"
#include "tests/services/cli/http_test_util.h"
#include "tests/services/cli/up_cli_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::FreePort;
using testing::Http;
using testing::HttpReply;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;
using up_cli::test::CompletionBody;
using up_cli::test::Exists;
using up_cli::test::Model;
using up_cli::test::Reference;
using up_cli::test::Up;

// How long a stranger waits for an answer that must not come.
constexpr std::chrono::milliseconds kStrangerWait{1500};

// The value of `name{labels}` in a Prometheus text exposition, or -1 when the series is absent.
double Sample(const std::string& exposition, const std::string& series) {
  const std::string head = series + " ";
  for (size_t at = exposition.find(head); at != std::string::npos; at = exposition.find(head, at + 1)) {
    if (at == 0 || exposition[at - 1] == '\n') return std::atof(exposition.c_str() + at + head.size());
  }
  return -1;
}

// The local addresses of the sockets listening on TCP `port` (/proc/net/tcp and tcp6): "127.0.0.1" for
// IPv4 loopback, the kernel's hex for anything else.
std::set<std::string> ListenAddresses(int port) {
  std::set<std::string> out;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(ReadAll(table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      const size_t colon = local.find(':');
      if (state != "0A" || colon == std::string::npos) continue;  // 0A: LISTEN
      if (std::stoi(local.substr(colon + 1), nullptr, 16) != port) continue;
      const std::string address = local.substr(0, colon);
      out.insert(address == "0100007F" ? std::string("127.0.0.1") : address);
    }
  }
  return out;
}

std::string RefusedSeries(const std::string& endpoint, const char* reason) {
  return fmt::format("zipmoe_link_auth_refused_total{{endpoint=\"{}\",reason=\"{}\"}}", endpoint, reason);
}

// A stranger's DEALER on `endpoint`: CURVE with a key pair of its own (`own`) and the deployment's
// public key as the server key, or plaintext (own == nullptr). It sends `body` (a valid message) and
// returns whether anything answered within kStrangerWait.
bool StrangerGetsAnAnswer(zmq::context_t& context, const std::string& endpoint, const std::string& identity,
                          const messaging::CurveKeyPair* own, const std::string& server_key,
                          messaging::Body body) {
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::routing_id, identity);
  if (own != nullptr) {
    dealer.set(zmq::sockopt::curve_serverkey, server_key);
    dealer.set(zmq::sockopt::curve_publickey, own->public_key);
    dealer.set(zmq::sockopt::curve_secretkey, own->secret_key);
  }
  dealer.connect(endpoint);
  const std::string frame = messaging::EncodeMessage(identity, std::move(body));
  dealer.send(zmq::buffer(frame), zmq::send_flags::dontwait);
  zmq::pollitem_t item{dealer.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, kStrangerWait) > 0;
}

TEST(UpCliCurve, CurveLinksGiveTheEmbeddedTokensAndRefuseStrangersOnEveryEndpoint) {
  const std::string model = Model();
  constexpr int kNewTokens = 12;
  const json ref = Reference(model, kNewTokens);
  const std::string ref_text = ref["text"].get<std::string>();
  ASSERT_FALSE(ref_text.empty());
  TempDir tmp;
  const std::string scheduler = fmt::format("tcp://127.0.0.1:{}", FreePort());
  const std::string workers = fmt::format("tcp://127.0.0.1:{}", FreePort());
  const std::string cache_manager = fmt::format("tcp://127.0.0.1:{}", FreePort());
  const int scheduler_metrics = FreePort();
  const int cache_manager_metrics = FreePort();
  Up up(tmp, model, 1,
        fmt::format("--set link_security.mode=on --set endpoints.scheduler={} --set endpoints.workers={} "
                    "--set endpoints.cache_manager={} --set metrics.port.scheduler={} "
                    "--set metrics.port.cache_manager={}",
                    scheduler, workers, cache_manager, scheduler_metrics, cache_manager_metrics));
  ASSERT_TRUE(up.WaitHealthy()) << up.log();

  // The deployment's key: written by up, 0600, named by the services' config.
  const std::string key_file = up.run_dir() + "/link.key";
  struct stat st {};
  ASSERT_EQ(::stat(key_file.c_str(), &st), 0) << up.log();
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto keys = messaging::LoadCurveKeyFile(key_file);
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  const json config = json::parse(ReadAll(up.run_dir() + "/zipmoe.json"));
  EXPECT_EQ(config["link_security"]["key_file"], key_file);
  EXPECT_EQ(config["link_security"]["mode"], "on");
  std::string log = up.log();
  EXPECT_NE(log.find("with a new key pair in " + key_file + ", public key " + keys->public_key), std::string::npos)
      << log;
  for (const char* service : {"cache-manager", "scheduler", "storage", "decompressor", "executor"}) {
    EXPECT_NE(log.find(fmt::format("I: {}: CURVE on endpoints.", service)), std::string::npos) << service << "\n" << log;
  }

  // The API (/health) and the /metrics endpoints stay on loopback (http.host, metrics.host).
  for (const int port : {up.port(), scheduler_metrics, cache_manager_metrics}) {
    EXPECT_EQ(ListenAddresses(port), std::set<std::string>{"127.0.0.1"}) << "port " << port;
  }

  // With the key: the tokens of embedded generate.
  HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref_text);
  EXPECT_EQ(json::parse(reply.body)["usage"]["completion_tokens"].get<int>(), kNewTokens);

  // Every series exists before any refusal, at 0.
  const std::string before = Http(tmp, scheduler_metrics, "GET", "/metrics").body;
  for (const char* reason : {"key", "protocol", "incomplete"}) {
    EXPECT_EQ(Sample(before, RefusedSeries(scheduler, reason)), 0) << before;
    EXPECT_EQ(Sample(before, RefusedSeries(workers, reason)), 0) << before;
  }
  EXPECT_EQ(Sample(Http(tmp, cache_manager_metrics, "GET", "/metrics").body, RefusedSeries(cache_manager, "key")), 0);

  // Strangers: each message would be answered (a Heartbeat by the scheduler's executor server, a
  // WorkerReady by the dispatcher, a CacheHello by the cache-manager, which would also drop the
  // scheduler's session) if it got through.
  const std::string arena = fmt::format("/zipmoe-up-{}", up.pid());
  const auto worker_ready = [&] {
    messaging::WorkerReady ready;
    ready.n_threads = 1;
    ready.credits = 1;
    ready.arena_name = arena;
    ready.pid = static_cast<int32_t>(::getpid());
    ready.heartbeat_interval_ms = 250;
    ready.role = messaging::kRoleDecompressor;
    return messaging::Body(std::move(ready));
  };
  const auto cache_hello = [] {
    messaging::CacheHello hello;
    hello.request_id = 1;
    hello.pid = static_cast<int32_t>(::getpid());
    hello.heartbeat_interval_ms = 250;
    return messaging::Body(std::move(hello));
  };
  const struct {
    std::string endpoint;
    int metrics_port;
    std::function<messaging::Body()> body;
  } targets[] = {{scheduler, scheduler_metrics, [] { return messaging::Body(messaging::MakeHeartbeat(250, 0)); }},
                 {workers, scheduler_metrics, worker_ready},
                 {cache_manager, cache_manager_metrics, cache_hello}};
  zmq::context_t context(1);
  auto stranger_keys = messaging::GenerateCurveKeyPair();
  ASSERT_TRUE(stranger_keys.ok());
  int n = 0;
  for (const auto& t : targets) {
    SCOPED_TRACE(t.endpoint);
    EXPECT_FALSE(StrangerGetsAnAnswer(context, t.endpoint, fmt::format("stranger-{}", n++), &*stranger_keys,
                                      keys->public_key, t.body()))
        << "a stranger with its own CURVE key got an answer";
    EXPECT_FALSE(StrangerGetsAnAnswer(context, t.endpoint, fmt::format("stranger-{}", n++), nullptr, "", t.body()))
        << "a plaintext stranger got an answer";
    // Counted in that service's /metrics (published about once a second).
    double by_key = 0, by_handshake = 0;
    std::string exposition;
    for (int i = 0; i < 100; ++i) {
      exposition = Http(tmp, t.metrics_port, "GET", "/metrics").body;
      by_key = Sample(exposition, RefusedSeries(t.endpoint, "key"));
      by_handshake = Sample(exposition, RefusedSeries(t.endpoint, "protocol")) +
                     Sample(exposition, RefusedSeries(t.endpoint, "incomplete"));
      if (by_key > 0 && by_handshake > 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_GT(by_key, 0) << exposition;
    EXPECT_GT(by_handshake, 0) << exposition;
    std::printf("I: test: %s refused %.0f peer(s) by key, %.0f by handshake\n", t.endpoint.c_str(), by_key,
                by_handshake);
  }
  log = up.log();
  EXPECT_NE(log.find("W: scheduler: link " + workers + ": refused a peer"), std::string::npos) << log;
  EXPECT_NE(log.find("W: cache-manager: link " + cache_manager + ": refused a peer"), std::string::npos) << log;
  EXPECT_EQ(log.find("stranger"), std::string::npos) << "a stranger's message reached a service:\n" << log;
  EXPECT_EQ(log.find("reclaimed"), std::string::npos) << "the scheduler's cache session was replaced:\n" << log;

  // The served text is unchanged.
  reply = Http(tmp, up.port(), "POST", "/v1/completions", CompletionBody(kNewTokens));
  ASSERT_EQ(reply.status, 200) << reply.body << up.log();
  EXPECT_EQ(json::parse(reply.body)["choices"][0]["text"].get<std::string>(), ref_text);
  ASSERT_TRUE(up.Stop()) << up.log();
  EXPECT_FALSE(Exists(key_file)) << "the deployment's key outlived it";
}

// A service whose endpoint needs CURVE and whose key file is missing stops at start, naming the key
// file, the endpoint and how to make a key; `zipmoe keygen` makes one it accepts.
TEST(UpCliCurve, ServiceWithoutTheKeyFailsAtStartNamingKeyAndEndpoint) {
  TempDir tmp;
  const std::string key_file = tmp.Sub("link.key");
  const std::string args = fmt::format(
      "service storage --set endpoints.workers=tcp://10.0.0.5:5555 --set link_security.key_file={} "
      "--set metrics.port.storage=0 --set model_dir={}",
      key_file, tmp.path());
  auto r = RunCli(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("link_security.key_file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("endpoints.workers = tcp://10.0.0.5:5555 needs CURVE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("key file " + key_file + " does not exist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("zipmoe keygen --out " + key_file), std::string::npos) << r.output;

  auto made = RunCli("keygen --out " + key_file);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  struct stat st {};
  ASSERT_EQ(::stat(key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(RunCli("keygen --out " + key_file).exit_code, 0) << "an existing key is not replaced silently";
  auto kept = RunCli("keygen --if-missing --out " + key_file);
  EXPECT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_NE(kept.output.find("kept " + key_file), std::string::npos) << kept.output;
  // With the key the link check passes: the service goes on and fails later, on the empty model dir.
  r = RunCli(args);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("I: storage: CURVE on endpoints.workers = tcp://10.0.0.5:5555"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("link_security.key_file:"), std::string::npos) << r.output;
  // mode off leaves that endpoint plaintext, with a warning.
  r = RunCli(args + " --set link_security.mode=off");
  EXPECT_NE(r.output.find("W: storage: endpoints.workers = tcp://10.0.0.5:5555 is not loopback and "
                          "link_security.mode is off"),
            std::string::npos)
      << r.output;
  r = RunCli("service storage --set link_security.mode=sometimes");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("link_security.mode = 'sometimes'"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zipmoe
