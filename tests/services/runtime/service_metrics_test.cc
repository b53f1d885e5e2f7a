// Service metrics: every family of docs/metrics.md, served by a MetricsServer and scraped over HTTP
// after known updates — exact names, labels, values and bucket bounds; CacheMetrics' delta and reset
// handling and its PoolIndex / CompressionState indexing; concurrent updates; promtool's verdict.
#include "services/runtime/service_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/metrics_server.h"
#include "tests/test_util.h"

namespace zipmoe::metrics {
namespace {

using cache_manager::CacheCounters;
using cache_manager::Pool;
using cache_manager::PoolIndex;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;

// A TCP port that was free a moment ago; MetricsServer searches onwards if it is taken meanwhile.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

std::unique_ptr<MetricsServer> StartServer() {
  MetricsServerConfig config;
  config.service = "test";
  config.port = FreePort();
  auto server = MetricsServer::Start(config);
  if (!server.ok()) {
    ADD_FAILURE() << server.status().ToString();
    return nullptr;
  }
  return std::move(server).value();
}

std::string Scrape(const MetricsServer& server) {
  httplib::Client client("127.0.0.1", server.port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto reply = client.Get("/metrics");
  if (!reply) {
    ADD_FAILURE() << "no HTTP reply from " << server.url() << ": " << httplib::to_string(reply.error());
    return "";
  }
  EXPECT_EQ(reply->status, 200);
  return reply->body;
}

// prometheus-cpp prints bucket bounds with 16 significant digits, so the double nearest to 0.00064
// reads le="0.0006400000000000001". Returns the shortest text that parses to the same double
// ("0.00064"), so that tests can name bounds as docs/metrics.md does; "+Inf" stays.
std::string ShortestLe(const std::string& le) {
  if (le == "+Inf") return le;
  return fmt::format("{}", std::strtod(le.c_str(), nullptr));
}

// `line` with its le="..." label (if any) rewritten by ShortestLe.
std::string NormalizeLe(const std::string& line) {
  const size_t start = line.find("le=\"");
  if (start == std::string::npos) return line;
  const size_t value = start + 4;
  const size_t end = line.find('"', value);
  return line.substr(0, value) + ShortestLe(line.substr(value, end - value)) + line.substr(end);
}

// Sample lines of the exposition: "name{labels}" -> value text (comments skipped; le normalized).
std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space != std::string::npos) out[NormalizeLe(line.substr(0, space))] = line.substr(space + 1);
  }
  return out;
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

// The `le` bounds (ShortestLe) of `name_bucket{<labels>le=...}` lines in order (labels: "" or
// `kind="E",`).
std::vector<std::string> BucketBounds(const std::string& text, const std::string& name, const std::string& labels) {
  std::vector<std::string> out;
  const std::string prefix = name + "_bucket{" + labels + "le=\"";
  for (size_t pos = text.find(prefix); pos != std::string::npos; pos = text.find(prefix, pos + 1)) {
    const size_t start = pos + prefix.size();
    out.push_back(ShortestLe(text.substr(start, text.find('"', start) - start)));
  }
  return out;
}

// Expects the sample `series` (exact "name{labels}") to have the value text `value`.
void ExpectSample(const std::map<std::string, std::string>& samples, const std::string& series,
                  const std::string& value, int line) {
  SCOPED_TRACE(::testing::Message() << "line " << line << ": " << series);
  const auto it = samples.find(series);
  if (it == samples.end()) {
    ADD_FAILURE() << "no sample " << series;
  } else {
    EXPECT_EQ(it->second, value);
  }
}
#define EXPECT_SAMPLE(samples, series, value) ExpectSample((samples), (series), (value), __LINE__)

TEST(ServiceMetricsTest, ExponentialBucketsMatchTheDocs) {
  // Bit-exact: each bound is the double nearest to its decimal.
  EXPECT_EQ(ExponentialBuckets(1e-5, 4, 9),
            (std::vector<double>{1e-5, 4e-5, 1.6e-4, 6.4e-4, 2.56e-3, 1.024e-2, 4.096e-2, 0.16384, 0.65536}));
  EXPECT_EQ(ExponentialBuckets(1e-4, 2, 14).back(), 0.8192);
  EXPECT_EQ(ExponentialBuckets(0.01, 2, 12).back(), 20.48);
  EXPECT_EQ(ExponentialBuckets(0.001, 2, 14).back(), 8.192);
  EXPECT_TRUE(ExponentialBuckets(1, 2, 0).empty());
}

TEST(ServiceMetricsTest, StorageReadsAndQueue) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  StorageMetrics m(server->registry());
  m.ObserveRead(/*e_chunk=*/true, 1000, 0.0078125);  // 2^-7 s: exact sums
  m.ObserveRead(/*e_chunk=*/true, 24, 0.25);
  m.ObserveRead(/*e_chunk=*/false, 500, 3e-5);
  m.SetQueueDepth(3);
  const std::string text = Scrape(*server);
  const auto s = Samples(text);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_storage_read_bytes_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_storage_read_seconds histogram")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_storage_queue_depth gauge")) << text;
  EXPECT_SAMPLE(s, "zipmoe_storage_read_bytes_total{kind=\"E\"}", "1024");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_bytes_total{kind=\"SM\"}", "500");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_count{kind=\"E\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_sum{kind=\"E\"}", "0.2578125");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"E\",le=\"0.00256\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"E\",le=\"0.01024\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"E\",le=\"0.16384\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"E\",le=\"0.65536\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"E\",le=\"+Inf\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"SM\",le=\"1e-05\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_bucket{kind=\"SM\",le=\"4e-05\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_count{kind=\"SM\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_storage_queue_depth", "3");
  const std::vector<std::string> want = {"1e-05",   "4e-05",   "0.00016", "0.00064", "0.00256",
                                         "0.01024", "0.04096", "0.16384", "0.65536", "+Inf"};
  EXPECT_EQ(BucketBounds(text, "zipmoe_storage_read_seconds", "kind=\"E\","), want);
  EXPECT_EQ(BucketBounds(text, "zipmoe_storage_read_seconds", "kind=\"SM\","), want);
}

TEST(ServiceMetricsTest, DecompressorOpsBusyAndThreads) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  DecompressorMetrics r0(server->registry(), "0", 4);
  DecompressorMetrics r1(server->registry(), "1", 2);  // a second replica on the same registry
  r0.ObserveOp(/*recover=*/false, 0.0078125);
  r0.ObserveOp(/*recover=*/true, 0.25);
  r0.ObserveOp(/*recover=*/false, 0.5);
  r1.ObserveOp(/*recover=*/true, 0.125);
  r1.ObserveOp(/*recover=*/true, -1.0);  // a bogus negative time counts as 0
  const std::string text = Scrape(*server);
  const auto s = Samples(text);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_decompressor_decode_seconds histogram")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_decompressor_busy_seconds_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_decompressor_threads gauge")) << text;
  EXPECT_SAMPLE(s, "zipmoe_decompressor_threads{replica=\"0\"}", "4");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_threads{replica=\"1\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_busy_seconds_total{replica=\"0\"}", "0.7578125");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_busy_seconds_total{replica=\"1\"}", "0.125");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_count{op=\"decode\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_sum{op=\"decode\"}", "0.5078125");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"decode\",le=\"0.00256\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"decode\",le=\"0.01024\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"decode\",le=\"0.65536\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_count{op=\"recover\"}", "3");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_sum{op=\"recover\"}", "0.375");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"recover\",le=\"1e-05\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"recover\",le=\"0.16384\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_decompressor_decode_seconds_bucket{op=\"recover\",le=\"+Inf\"}", "3");
  EXPECT_EQ(BucketBounds(text, "zipmoe_decompressor_decode_seconds", "op=\"decode\",").size(), 10u);
}

// One snapshot: layer_requests[l] in CompressionState order {M, E, S, C, F}; resident bytes by pool.
CacheCounters Snapshot(std::vector<std::array<uint64_t, 5>> layers, uint64_t f_bytes, uint64_t c_bytes,
                       uint64_t s_bytes, uint64_t e_bytes) {
  CacheCounters c;
  for (const auto& l : layers) {
    for (uint64_t v : l) c.lookups += v;
    c.misses += l[0];
  }
  c.layer_requests = std::move(layers);
  c.pools[PoolIndex(Pool::kF)].resident_bytes = f_bytes;
  c.pools[PoolIndex(Pool::kC)].resident_bytes = c_bytes;
  c.pools[PoolIndex(Pool::kS)].resident_bytes = s_bytes;
  c.pools[PoolIndex(Pool::kE)].resident_bytes = e_bytes;
  return c;
}

std::string Req(int layer, const char* pool) {
  return "zipmoe_cache_requests_total{layer=\"" + std::to_string(layer) + "\",pool=\"" + pool + "\"}";
}

TEST(ServiceMetricsTest, CacheDeltasResetsAndIndexing) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  CacheMetrics m(server->registry());

  // Distinct values per state and pool, so a PoolIndex / CompressionState mix-up shows.
  m.Update(Snapshot({{3, 1, 0, 2, 5}, {0, 0, 4, 0, 1}}, 4096, 2048, 1024, 512));
  std::string text = Scrape(*server);
  auto s = Samples(text);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_cache_requests_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_cache_resident_bytes gauge")) << text;
  EXPECT_SAMPLE(s, Req(0, "M"), "3");
  EXPECT_SAMPLE(s, Req(0, "E"), "1");
  EXPECT_SAMPLE(s, Req(0, "S"), "0");
  EXPECT_SAMPLE(s, Req(0, "C"), "2");
  EXPECT_SAMPLE(s, Req(0, "F"), "5");
  EXPECT_SAMPLE(s, Req(1, "S"), "4");
  EXPECT_SAMPLE(s, Req(1, "F"), "1");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"F\"}", "4096");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"C\"}", "2048");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"S\"}", "1024");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"E\"}", "512");
  EXPECT_EQ(s.count("zipmoe_cache_resident_bytes{pool=\"M\"}"), 0u);

  // Cumulative snapshot: counters grow by the delta; gauges follow the snapshot (down too).
  m.Update(Snapshot({{5, 1, 1, 2, 7}, {0, 0, 4, 0, 1}}, 8192, 0, 1024, 512));
  s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, Req(0, "M"), "5");
  EXPECT_SAMPLE(s, Req(0, "E"), "1");
  EXPECT_SAMPLE(s, Req(0, "S"), "1");
  EXPECT_SAMPLE(s, Req(0, "F"), "7");
  EXPECT_SAMPLE(s, Req(1, "S"), "4");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"F\"}", "8192");
  EXPECT_SAMPLE(s, "zipmoe_cache_resident_bytes{pool=\"C\"}", "0");

  // ResetCounters, then 1 miss in layer 0 and 3 F hits in layer 1: the whole snapshot is new
  // requests, even layer 1's F count which is above its old base (3 > 1).
  m.Update(Snapshot({{1, 0, 0, 0, 0}, {0, 0, 0, 0, 3}}, 8192, 0, 1024, 512));
  s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, Req(0, "M"), "6");
  EXPECT_SAMPLE(s, Req(0, "F"), "7");
  EXPECT_SAMPLE(s, Req(1, "S"), "4");
  EXPECT_SAMPLE(s, Req(1, "F"), "4");

  // After the reset the new snapshot is the base again; a third layer appears.
  m.Update(Snapshot({{2, 0, 0, 0, 1}, {0, 0, 0, 0, 3}, {0, 0, 0, 6, 0}}, 8192, 0, 1024, 512));
  s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, Req(0, "M"), "7");
  EXPECT_SAMPLE(s, Req(0, "F"), "8");
  EXPECT_SAMPLE(s, Req(1, "F"), "4");
  EXPECT_SAMPLE(s, Req(2, "C"), "6");
  EXPECT_SAMPLE(s, Req(2, "M"), "0");

  // The same snapshot again adds nothing.
  m.Update(Snapshot({{2, 0, 0, 0, 1}, {0, 0, 0, 0, 3}, {0, 0, 0, 6, 0}}, 8192, 0, 1024, 512));
  s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, Req(0, "M"), "7");
  EXPECT_SAMPLE(s, Req(2, "C"), "6");
}

// The runtime's totals (serve's embedded runtime, `up`'s scheduler) from RuntimeStats: counters
// add what grew since the previous update; the info gauge names the policy and predictor.
TEST(ServiceMetricsTest, RuntimeTotalsFromRuntimeStats) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EmbeddedRuntimeMetrics m(server->registry());
  runtime::RuntimeStats st;
  st.io_ops = 10;
  st.io_bytes_e = 4096;
  st.io_bytes_sm = 8192;
  st.decode_ops = 7;
  st.prefetch_mode = "top-score";
  st.prefetch.issued = 5;
  st.prefetch.used = 3;
  st.prefetch.wasted = 2;
  st.prefetch.wasted_bytes = 1000;
  st.substitution.routed = 40;
  st.substitution.substituted = 4;
  m.Update(st, "smoe");
  st.io_ops = 15;
  st.substitution.routed = 48;
  st.substitution.substituted = 5;
  m.Update(st, "smoe");
  const auto s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, "zipmoe_runtime_io_ops_total", "15");
  EXPECT_SAMPLE(s, "zipmoe_runtime_io_bytes_total{kind=\"sm_chunk\"}", "8192");
  EXPECT_SAMPLE(s, "zipmoe_runtime_worker_ops_total{op=\"decode\"}", "7");
  EXPECT_SAMPLE(s, "zipmoe_runtime_prefetch_experts_total{mode=\"top-score\",outcome=\"used\"}", "3");
  EXPECT_SAMPLE(s, "zipmoe_runtime_prefetch_bytes_total{mode=\"top-score\",outcome=\"wasted\"}", "1000");
  EXPECT_SAMPLE(s, "zipmoe_runtime_routed_experts_total", "48");
  EXPECT_SAMPLE(s, "zipmoe_runtime_substituted_experts_total", "5");
  EXPECT_SAMPLE(s, "zipmoe_runtime_info{policy=\"smoe\",prefetch=\"top-score\"}", "1");
}

TEST(ServiceMetricsTest, MessagesPerPeerAndDirectionFollowTheChannelCounts) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  MessageMetrics m(server->registry());
  m.Set("scheduler", 10, 7);
  m.Set("scheduler", 25, 19);
  m.Set("cache-manager", 3, 3);
  m.Set("cache-manager", 2, 1);  // a new channel: its counts are taken whole
  const auto s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, "zipmoe_messages_total{direction=\"sent\",peer=\"scheduler\"}", "25");
  EXPECT_SAMPLE(s, "zipmoe_messages_total{direction=\"received\",peer=\"scheduler\"}", "19");
  EXPECT_SAMPLE(s, "zipmoe_messages_total{direction=\"sent\",peer=\"cache-manager\"}", "5");
  EXPECT_SAMPLE(s, "zipmoe_messages_total{direction=\"received\",peer=\"cache-manager\"}", "4");
}

TEST(ServiceMetricsTest, SchedulerGaugesAndLayerHistograms) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  SchedulerMetrics m(server->registry());
  m.SetDecompressors(3);
  m.SetQueueDepth("read", 2);
  m.SetQueueDepth("decode", 5);
  m.SetQueueDepth("recover", 1);
  m.SetQueueDepth("recover", 0);
  m.ObserveLayer(0.0009765625, 1.2);  // 2^-10 s
  m.ObserveLayer(0.5, 0);             // bound unknown: ratio not observed
  m.ObserveLayer(0.25, 4.0);
  const std::string text = Scrape(*server);
  const auto s = Samples(text);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_scheduler_decompressors gauge")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_scheduler_queue_depth gauge")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_scheduler_layer_makespan_seconds histogram")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_scheduler_layer_makespan_bound_ratio histogram")) << text;
  EXPECT_SAMPLE(s, "zipmoe_scheduler_decompressors", "3");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_queue_depth{queue=\"read\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_queue_depth{queue=\"decode\"}", "5");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_queue_depth{queue=\"recover\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_count", "3");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_sum", "0.7509765625");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_bucket{le=\"0.0008\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_bucket{le=\"0.0016\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_bucket{le=\"0.4096\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_seconds_bucket{le=\"0.8192\"}", "3");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_bound_ratio_count", "2");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_bound_ratio_bucket{le=\"1.1\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_bound_ratio_bucket{le=\"1.25\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_bound_ratio_bucket{le=\"3\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_scheduler_layer_makespan_bound_ratio_bucket{le=\"5\"}", "2");
  EXPECT_EQ(BucketBounds(text, "zipmoe_scheduler_layer_makespan_seconds", ""),
            (std::vector<std::string>{"0.0001", "0.0002", "0.0004", "0.0008", "0.0016", "0.0032", "0.0064",
                                      "0.0128", "0.0256", "0.0512", "0.1024", "0.2048", "0.4096", "0.8192",
                                      "+Inf"}));
  EXPECT_EQ(BucketBounds(text, "zipmoe_scheduler_layer_makespan_bound_ratio", ""),
            (std::vector<std::string>{"1", "1.1", "1.25", "1.5", "2", "3", "5", "10", "+Inf"}));
}

TEST(ServiceMetricsDeathTest, SchedulerUnknownQueueIsABug) {
  prometheus::Registry registry;
  SchedulerMetrics m(registry);
  EXPECT_DEATH(m.SetQueueDepth("decompress", 1), "unknown scheduler queue 'decompress'");
}

TEST(ServiceMetricsTest, ExecutorLatencyTokensQueueAndHttp) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ExecutorMetrics m(server->registry());
  m.ObserveTtft(0.5);
  m.ObserveTpot(0.015625);  // 2^-6 s
  m.ObserveTpot(0.03125);
  m.AddTokens(7);
  m.AddTokens(5);
  m.SetQueueDepth(2);
  m.CountHttp("/v1/completions", 200);
  m.CountHttp("/v1/completions", 200);
  m.CountHttp("/v1/completions", 400);
  m.CountHttp("/v1/chat/completions", 200);
  m.CountHttp("/v1/models", 200);
  m.CountHttp("/health", 503);
  m.CountHttp("/metrics", 200);
  m.CountHttp("/v1/embeddings", 404);
  m.CountHttp("/etc/passwd", 404);
  m.AddPromptTokens(9);
  m.SetRunning(3);
  m.ObserveE2e(1.5);
  m.CountFinished("stop");
  m.CountFinished("stop");
  m.CountFinished("length");
  m.SetBuildInfo("0.1.0", "abc1234", "none", "1.13.0");
  const std::string text = Scrape(*server);
  const auto s = Samples(text);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_executor_ttft_seconds histogram")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_executor_tpot_seconds histogram")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_executor_generated_tokens_total counter")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_executor_queue_depth gauge")) << text;
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_http_requests_total counter")) << text;
  EXPECT_SAMPLE(s, "zipmoe_executor_ttft_seconds_count", "1");
  EXPECT_SAMPLE(s, "zipmoe_executor_ttft_seconds_sum", "0.5");
  EXPECT_SAMPLE(s, "zipmoe_executor_ttft_seconds_bucket{le=\"0.32\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_executor_ttft_seconds_bucket{le=\"0.64\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_executor_tpot_seconds_count", "2");
  EXPECT_SAMPLE(s, "zipmoe_executor_tpot_seconds_sum", "0.046875");
  EXPECT_SAMPLE(s, "zipmoe_executor_tpot_seconds_bucket{le=\"0.008\"}", "0");
  EXPECT_SAMPLE(s, "zipmoe_executor_tpot_seconds_bucket{le=\"0.016\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_executor_tpot_seconds_bucket{le=\"0.032\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_executor_generated_tokens_total", "12");
  EXPECT_SAMPLE(s, "zipmoe_executor_queue_depth", "2");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"/v1/completions\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"400\",route=\"/v1/completions\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"/v1/chat/completions\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"/v1/models\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"503\",route=\"/health\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"/metrics\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"404\",route=\"other\"}", "2");
  EXPECT_EQ(text.find("/v1/embeddings"), std::string::npos);
  // The standard serving families beside ours.
  EXPECT_SAMPLE(s, "zipmoe_time_to_first_token_seconds_count", "1");
  EXPECT_SAMPLE(s, "zipmoe_inter_token_latency_seconds_count", "2");
  EXPECT_SAMPLE(s, "zipmoe_generation_tokens_total", "12");
  EXPECT_SAMPLE(s, "zipmoe_requests_waiting", "2");
  EXPECT_SAMPLE(s, "zipmoe_requests_running", "3");
  EXPECT_SAMPLE(s, "zipmoe_prompt_tokens_total", "9");
  EXPECT_SAMPLE(s, "zipmoe_e2e_request_latency_seconds_sum", "1.5");
  EXPECT_SAMPLE(s, "zipmoe_request_success_total{finished_reason=\"stop\"}", "2");
  EXPECT_SAMPLE(s, "zipmoe_request_success_total{finished_reason=\"length\"}", "1");
  EXPECT_SAMPLE(s, "zipmoe_build_info{commit=\"abc1234\",cuda=\"none\",libtorch=\"1.13.0\",version=\"0.1.0\"}", "1");
  EXPECT_EQ(BucketBounds(text, "zipmoe_e2e_request_latency_seconds", "").back(), "+Inf");
  EXPECT_EQ(BucketBounds(text, "zipmoe_e2e_request_latency_seconds", "").rbegin()[1], "819.2");
  EXPECT_EQ(BucketBounds(text, "zipmoe_executor_ttft_seconds", ""),
            (std::vector<std::string>{"0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56",
                                      "5.12", "10.24", "20.48", "40.96", "81.92", "163.84", "327.68", "655.36",
                                      "+Inf"}));  // TTFT to >= 600 s: a long prompt in a cold cache
  EXPECT_EQ(BucketBounds(text, "zipmoe_time_to_first_token_seconds", ""),
            BucketBounds(text, "zipmoe_executor_ttft_seconds", ""));
  EXPECT_EQ(BucketBounds(text, "zipmoe_executor_tpot_seconds", ""),
            (std::vector<std::string>{"0.001", "0.002", "0.004", "0.008", "0.016", "0.032", "0.064", "0.128",
                                      "0.256", "0.512", "1.024", "2.048", "4.096", "8.192", "+Inf"}));
}

TEST(ServiceMetricsTest, BadMessagesFollowTheCumulativeCount) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  BadMessageMetrics m(server->registry());
  EXPECT_SAMPLE(Samples(Scrape(*server)), "zipmoe_bad_messages_total", "0");
  m.Set(3);
  m.Set(5);
  EXPECT_SAMPLE(Samples(Scrape(*server)), "zipmoe_bad_messages_total", "5");
  m.Set(2);  // a new channel started from 0: its 2 are new
  m.Set(2);
  const std::string text = Scrape(*server);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_bad_messages_total counter")) << text;
  EXPECT_SAMPLE(Samples(text), "zipmoe_bad_messages_total", "7");
}

TEST(ServiceMetricsTest, ConcurrentUpdatesAreExact) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  StorageMetrics storage(server->registry());
  ExecutorMetrics executor(server->registry());
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIterations; ++i) {
        storage.ObserveRead(t % 2 == 0, 3, 0.001);
        executor.AddTokens(1);
        executor.CountHttp(t % 2 == 0 ? "/health" : "/nowhere", 200);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto s = Samples(Scrape(*server));
  EXPECT_SAMPLE(s, "zipmoe_storage_read_bytes_total{kind=\"E\"}", std::to_string(3 * 2 * kIterations));
  EXPECT_SAMPLE(s, "zipmoe_storage_read_bytes_total{kind=\"SM\"}", std::to_string(3 * 2 * kIterations));
  EXPECT_SAMPLE(s, "zipmoe_storage_read_seconds_count{kind=\"E\"}", std::to_string(2 * kIterations));
  EXPECT_SAMPLE(s, "zipmoe_executor_generated_tokens_total", std::to_string(kThreads * kIterations));
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"/health\"}", std::to_string(2 * kIterations));
  EXPECT_SAMPLE(s, "zipmoe_http_requests_total{code=\"200\",route=\"other\"}", std::to_string(2 * kIterations));
}

TEST(ServiceMetricsTest, PromtoolAcceptsEveryFamily) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not on PATH (Debian package 'prometheus', scripts/install_deps.sh)";
  }
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  StorageMetrics storage(server->registry());
  DecompressorMetrics decompressor(server->registry(), "0", 4);
  CacheMetrics cache(server->registry());
  SchedulerMetrics scheduler(server->registry());
  ExecutorMetrics executor(server->registry());
  BadMessageMetrics bad(server->registry());
  MessageMetrics messages(server->registry());
  EmbeddedRuntimeMetrics runtime_metrics(server->registry());
  storage.ObserveRead(true, 4096, 1e-4);
  storage.SetQueueDepth(1);
  decompressor.ObserveOp(false, 2e-3);
  cache.Update(Snapshot({{1, 2, 3, 4, 5}}, 1, 2, 3, 4));
  scheduler.SetDecompressors(2);
  scheduler.SetQueueDepth("decode", 4);
  scheduler.ObserveLayer(0.01, 1.3);
  executor.ObserveTtft(0.2);
  executor.ObserveTpot(0.05);
  executor.AddTokens(9);
  executor.CountHttp("/v1/completions", 200);
  bad.Set(1);
  messages.Set("scheduler", 12, 9);
  runtime::RuntimeStats st;
  st.prefetch_mode = "residual";
  st.substitution.routed = 8;
  runtime_metrics.Update(st, "dali");
  const std::string text = Scrape(*server);
  ASSERT_FALSE(text.empty());
  // Every family of docs/metrics.md is present.
  for (const char* family :
       {"zipmoe_cache_requests_total", "zipmoe_cache_resident_bytes", "zipmoe_storage_read_bytes_total",
        "zipmoe_storage_read_seconds", "zipmoe_storage_queue_depth", "zipmoe_decompressor_decode_seconds",
        "zipmoe_decompressor_busy_seconds_total", "zipmoe_decompressor_threads", "zipmoe_scheduler_decompressors",
        "zipmoe_scheduler_queue_depth", "zipmoe_scheduler_layer_makespan_seconds",
        "zipmoe_scheduler_layer_makespan_bound_ratio", "zipmoe_executor_ttft_seconds",
        "zipmoe_executor_tpot_seconds", "zipmoe_executor_generated_tokens_total", "zipmoe_executor_queue_depth",
        "zipmoe_http_requests_total", "zipmoe_bad_messages_total"}) {
    EXPECT_NE(text.find(std::string("# HELP ") + family + " "), std::string::npos) << family;
  }
  TempDir tmp;
  WriteAll(tmp.Sub("scrape.txt"), text);
  const std::string cmd = "promtool check metrics < " + tmp.Sub("scrape.txt") + " > " + tmp.Sub("out.txt") + " 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << ReadAll(tmp.Sub("out.txt")) << "\n" << text;
}

}  // namespace
}  // namespace zipmoe::metrics
