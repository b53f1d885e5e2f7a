// The service metrics' exposition as a whole: concurrent updates stay exact, and promtool accepts every
// family of docs/metrics.md.
#include "services/service_base/service_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/metrics_server.h"
#include "tests/services/service_base/service_metrics_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::metrics {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;
using test::StartServer;
using test::Scrape;
using test::Samples;
using test::Snapshot;

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
