// Service metrics of the scheduler and executor families (docs/metrics.md), scraped over HTTP after
// known updates: queue gauges, layer histograms, latency, tokens, queue and HTTP families, and the
// death of an unknown scheduler queue.
#include "services/service_base/service_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/metrics_server.h"
#include "tests/services/service_base/service_metrics_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::metrics {
namespace {

using test::StartServer;
using test::Scrape;
using test::Samples;
using test::HasLine;
using test::BucketBounds;

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

}  // namespace
}  // namespace zipmoe::metrics
