// MetricsServer: /metrics over HTTP, port search past busy ports, kUnavailable when the whole range is
// busy, the file_sd target file (content, atomic write, removal), argument checks, and promtool's
// verdict on the scraped exposition.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe::metrics {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// A listening TCP socket on 127.0.0.1 that keeps its port busy while alive.
class PortHolder {
 public:
  explicit PortHolder(int port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (fd_.get() < 0 || ::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_.get(), 1) != 0) {
      fd_ = UniqueFd();
      return;
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  bool ok() const { return fd_.valid(); }
  int port() const { return port_; }

 private:
  UniqueFd fd_;
  int port_ = 0;
};

// Holds `n` consecutive busy ports starting at an ephemeral one; optionally checks that the port
// right after them can be bound (then released) by us. Retries other ephemeral ports.
std::vector<std::unique_ptr<PortHolder>> HoldConsecutivePorts(int n, bool next_free) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::vector<std::unique_ptr<PortHolder>> held;
    held.push_back(std::make_unique<PortHolder>(0));
    if (!held[0]->ok() || held[0]->port() + n >= 65535) continue;
    const int base = held[0]->port();
    for (int i = 1; i < n && held.back()->ok(); ++i) held.push_back(std::make_unique<PortHolder>(base + i));
    if (!held.back()->ok()) continue;
    if (next_free && !PortHolder(base + n).ok()) continue;
    return held;
  }
  ADD_FAILURE() << "could not hold " << n << " consecutive ports";
  return {};
}

int FreePort() { return PortHolder(0).port(); }

// GET http://127.0.0.1:<port>/metrics with 5 s timeouts.
httplib::Result GetMetrics(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  return client.Get("/metrics");
}

// The /metrics body; "" and a test failure when it does not answer 200.
std::string Scrape(int port) {
  auto reply = GetMetrics(port);
  if (!reply) {
    ADD_FAILURE() << "no HTTP reply from port " << port << ": " << httplib::to_string(reply.error());
    return "";
  }
  EXPECT_EQ(reply->status, 200);
  return reply->body;
}

// The HTTP status of GET /metrics (0 = no reply). An empty registry answers 200 with an empty body.
int ScrapeStatus(int port) {
  auto reply = GetMetrics(port);
  return reply ? reply->status : 0;
}

// Whether `text` has a line exactly equal to `line`.
bool HasLine(const std::string& text, const std::string& line) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, end - pos, line) == 0) return true;
    pos = end + 1;
  }
  return false;
}

bool HavePromtool() { return std::system("command -v promtool >/dev/null 2>&1") == 0; }

MetricsServerConfig LocalConfig(int port, int port_search = 1) {
  MetricsServerConfig config;
  config.service = "test";
  config.port = port;
  config.port_search = port_search;
  return config;
}

TEST(MetricsServerTest, PortZeroIsRegistryOnly) {
  auto server = MetricsServer::Start(LocalConfig(0));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->port(), 0);
  EXPECT_EQ((*server)->url(), "");
  EXPECT_EQ((*server)->sd_path(), "");
  prometheus::BuildGauge().Name("zipmoe_test_value").Help("h").Register((*server)->registry()).Add({}).Set(2);
  EXPECT_EQ((*server)->registry().Collect().size(), 1u);
}

TEST(MetricsServerTest, ServesRegistryOnMetrics) {
  auto server = MetricsServer::Start(LocalConfig(FreePort(), 64));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const int port = (*server)->port();
  EXPECT_GT(port, 0);
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");
  auto& family = prometheus::BuildCounter()
                     .Name("zipmoe_test_events_total")
                     .Help("Events for the test.")
                     .Register((*server)->registry());
  family.Add({{"kind", "a"}}).Increment(3);
  family.Add({{"kind", "b"}});
  const std::string text = Scrape(port);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_test_events_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "zipmoe_test_events_total{kind=\"a\"} 3")) << text;
  EXPECT_TRUE(HasLine(text, "zipmoe_test_events_total{kind=\"b\"} 0")) << text;

  // Updates show in the next scrape.
  family.Add({{"kind", "a"}}).Increment(2);
  EXPECT_TRUE(HasLine(Scrape(port), "zipmoe_test_events_total{kind=\"a\"} 5"));
}

TEST(MetricsServerTest, BusyPortMovesToTheNextOne) {
  auto held = HoldConsecutivePorts(1, /*next_free=*/true);
  ASSERT_EQ(held.size(), 1u);
  const int busy = held[0]->port();
  auto server = MetricsServer::Start(LocalConfig(busy, 2));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  EXPECT_EQ((*server)->port(), busy + 1);
  EXPECT_EQ(ScrapeStatus(busy + 1), 200);
}

TEST(MetricsServerTest, ScaledReplicasGetConsecutivePorts) {
  auto held = HoldConsecutivePorts(1, /*next_free=*/true);  // checks base + 1 is free
  ASSERT_EQ(held.size(), 1u);
  const int base = held[0]->port() + 1;
  held.clear();
  auto a = MetricsServer::Start(LocalConfig(base, 8));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->port(), base);
  auto b = MetricsServer::Start(LocalConfig(base, 8));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_GT((*b)->port(), base);
  EXPECT_LT((*b)->port(), base + 8);
}

TEST(MetricsServerTest, DestructorReleasesThePort) {
  int port = 0;
  {
    auto server = MetricsServer::Start(LocalConfig(FreePort(), 64));
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    port = (*server)->port();
    EXPECT_FALSE(PortHolder(port).ok()) << "port " << port << " should be busy while the server runs";
  }
  EXPECT_TRUE(PortHolder(port).ok()) << "port " << port << " still busy after the destructor";
}

TEST(MetricsServerTest, AllPortsBusyIsUnavailable) {
  auto held = HoldConsecutivePorts(3, /*next_free=*/false);
  ASSERT_EQ(held.size(), 3u);
  const int base = held[0]->port();
  auto server = MetricsServer::Start(LocalConfig(base, 3));
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kUnavailable);
  const std::string range = std::to_string(base) + ".." + std::to_string(base + 2);
  EXPECT_NE(server.status().message().find(range), std::string::npos) << server.status().ToString();
  EXPECT_NE(server.status().message().find("127.0.0.1"), std::string::npos) << server.status().ToString();
}

TEST(MetricsServerTest, SdFileNamesTheBoundPortAndIsRemoved) {
  TempDir tmp;
  auto held = HoldConsecutivePorts(1, /*next_free=*/true);
  ASSERT_EQ(held.size(), 1u);
  MetricsServerConfig config = LocalConfig(held[0]->port(), 2);
  config.service = "decompressor";
  config.sd_dir = tmp.Sub("sd/targets");  // created on demand
  const std::string pid = std::to_string(::getpid());
  const std::string path = tmp.Sub("sd/targets/decompressor-" + pid + ".json");
  {
    auto server = MetricsServer::Start(config);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    EXPECT_EQ((*server)->port(), held[0]->port() + 1);
    EXPECT_EQ((*server)->sd_path(), path);
    ASSERT_TRUE(FileExists(path));
    const auto sd = nlohmann::json::parse(ReadAll(path));  // throws (fails the test) if not JSON
    const auto want = nlohmann::json::parse(
        "[{\"targets\":[\"127.0.0.1:" + std::to_string((*server)->port()) +
        "\"],\"labels\":{\"service\":\"decompressor\",\"pid\":\"" + pid + "\"}}]");
    EXPECT_EQ(sd, want) << sd.dump();
    // Written via temp + rename: nothing else is left in the directory.
    int entries = 0;
    for (const auto& e : std::filesystem::directory_iterator(config.sd_dir)) entries += e.exists();
    EXPECT_EQ(entries, 1);
  }
  EXPECT_FALSE(FileExists(path));
}

TEST(MetricsServerTest, WildcardHostAdvertisesLoopback) {
  TempDir tmp;
  MetricsServerConfig config = LocalConfig(FreePort(), 64);
  config.host = "0.0.0.0";
  config.sd_dir = tmp.path();
  auto server = MetricsServer::Start(config);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string target = "127.0.0.1:" + std::to_string((*server)->port());
  EXPECT_EQ((*server)->url(), "http://" + target + "/metrics");
  const auto sd = nlohmann::json::parse(ReadAll((*server)->sd_path()));
  EXPECT_EQ(sd[0]["targets"][0], target);
  EXPECT_EQ(ScrapeStatus((*server)->port()), 200);

  config.sd_target_host = "decompressor-3";  // e.g. the container's DNS name
  config.port = (*server)->port();
  auto second = MetricsServer::Start(config);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_NE((*second)->port(), (*server)->port());
  EXPECT_EQ((*second)->url(), "http://decompressor-3:" + std::to_string((*second)->port()) + "/metrics");
}

TEST(MetricsServerTest, SdFileErrorIsIoError) {
  TempDir tmp;
  WriteAll(tmp.Sub("file"), "not a directory");
  MetricsServerConfig config = LocalConfig(FreePort(), 64);
  config.sd_dir = tmp.Sub("file/sd");
  auto server = MetricsServer::Start(config);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), StatusCode::kIoError);
  EXPECT_NE(server.status().message().find(tmp.Sub("file")), std::string::npos) << server.status().ToString();
}

TEST(MetricsServerTest, RejectsBadConfig) {
  auto expect_invalid = [](MetricsServerConfig config, const std::string& what) {
    auto server = MetricsServer::Start(config);
    ASSERT_FALSE(server.ok()) << what;
    EXPECT_EQ(server.status().code(), StatusCode::kInvalidArgument) << what << ": " << server.status().ToString();
  };
  expect_invalid(LocalConfig(-1), "negative port");
  expect_invalid(LocalConfig(65536), "port > 65535");
  expect_invalid(LocalConfig(9100, 0), "port_search 0");
  MetricsServerConfig bad_name = LocalConfig(0);
  bad_name.service = "../x";
  expect_invalid(bad_name, "service with '/'");
  MetricsServerConfig no_name = LocalConfig(0);
  no_name.service = "";
  no_name.sd_dir = "/tmp";
  expect_invalid(no_name, "sd_dir without service");
}

TEST(MetricsServerTest, PromtoolAcceptsTheExposition) {
  if (!HavePromtool()) GTEST_SKIP() << "promtool not on PATH (Debian package 'prometheus', scripts/install_deps.sh)";
  TempDir tmp;
  auto server = MetricsServer::Start(LocalConfig(FreePort(), 64));
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  prometheus::BuildCounter()
      .Name("zipmoe_test_events_total")
      .Help("Events for the test.")
      .Register((*server)->registry())
      .Add({{"kind", "a"}})
      .Increment(3);
  const std::string text = Scrape((*server)->port());
  ASSERT_FALSE(text.empty());
  WriteAll(tmp.Sub("scrape.txt"), text);
  const std::string cmd = "promtool check metrics < " + tmp.Sub("scrape.txt") + " > " + tmp.Sub("out.txt") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << ReadAll(tmp.Sub("out.txt")) << "\n" << text;
}

}  // namespace
}  // namespace zipmoe::metrics
