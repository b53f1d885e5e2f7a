// Service metrics of the storage, decompressor, cache and runtime families and of the message channels
// (docs/metrics.md), served by a MetricsServer and scraped over HTTP after known updates — exact names,
// labels, values and bucket bounds; CacheMetrics' delta and reset handling and its PoolIndex /
// CompressionState indexing. The scheduler and executor families and the exposition checks have files
// of their own.
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

using cache_manager::PoolIndex;
using test::StartServer;
using test::Scrape;
using test::Samples;
using test::HasLine;
using test::BucketBounds;
using test::Snapshot;

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

// zipmoe_link_auth_refused_total: every endpoint's three reasons from construction, at 0; then each
// series follows its LinkGuard's cumulative count, and a series the guard adds later appears.
TEST(ServiceMetricsTest, LinkRefusalsExistAtZeroAndFollowTheGuardsCounts) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  LinkMetrics m(server->registry(), {"tcp://10.0.0.5:5555", "ipc:///run/zipmoe/workers.sock"});
  const auto series = [](const char* endpoint, const char* reason) {
    return fmt::format("zipmoe_link_auth_refused_total{{endpoint=\"{}\",reason=\"{}\"}}", endpoint, reason);
  };
  std::string text = Scrape(*server);
  EXPECT_TRUE(HasLine(text, "# TYPE zipmoe_link_auth_refused_total counter")) << text;
  for (const char* endpoint : {"tcp://10.0.0.5:5555", "ipc:///run/zipmoe/workers.sock"}) {
    for (const char* reason : {"key", "protocol", "incomplete"}) {
      EXPECT_TRUE(HasLine(text, series(endpoint, reason) + " 0")) << text;
    }
  }
  using messaging::RefusalReason;
  m.Set({{"tcp://10.0.0.5:5555", RefusalReason::kKey, 2}, {"tcp://10.0.0.5:5555", RefusalReason::kProtocol, 1}});
  m.Set({{"tcp://10.0.0.5:5555", RefusalReason::kKey, 5}, {"tcp://10.0.0.5:5555", RefusalReason::kProtocol, 1},
         {"tcp://10.0.0.6:5555", RefusalReason::kIncomplete, 4}});
  text = Scrape(*server);
  EXPECT_TRUE(HasLine(text, series("tcp://10.0.0.5:5555", "key") + " 5")) << text;
  EXPECT_TRUE(HasLine(text, series("tcp://10.0.0.5:5555", "protocol") + " 1")) << text;
  EXPECT_TRUE(HasLine(text, series("tcp://10.0.0.5:5555", "incomplete") + " 0")) << text;
  EXPECT_TRUE(HasLine(text, series("tcp://10.0.0.6:5555", "incomplete") + " 4")) << text;
  EXPECT_TRUE(HasLine(text, series("ipc:///run/zipmoe/workers.sock", "key") + " 0")) << text;
}

}  // namespace
}  // namespace zipmoe::metrics
