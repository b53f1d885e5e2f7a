#include "common/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace zipmoe::metrics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
T* Unwrap(Result<T*> result) {
  EXPECT_TRUE(result.ok()) << result.status().ToString();
  return result.ok() ? result.value() : nullptr;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A sample line of text format 0.0.4: name, optional {label="escaped value",...}, one space, value.
bool IsWellFormedSample(const std::string& line) {
  static const std::regex kSample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*)"
      R"((\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})?)"
      R"( (\S+)$)");
  std::smatch match;
  if (!std::regex_match(line, match, kSample)) return false;
  const std::string value = match[5].str();
  if (value == "NaN" || value == "+Inf" || value == "-Inf") return true;
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  return end == value.c_str() + value.size();
}

TEST(MetricsTest, SmallRegistrySerializesToTheExactText) {
  Registry registry;
  IntCounterFamily* requests =
      Unwrap(registry.AddIntCounter("zipmoe_test_requests_total", "Requests by pool.", {"pool", "layer"}));
  GaugeFamily* depth = Unwrap(registry.AddGauge("zipmoe_test_queue_depth", "Queued ops.", {}));
  HistogramFamily* latency =
      Unwrap(registry.AddHistogram("zipmoe_test_latency_seconds", "Read latency.", {"kind"}, {0.25, 0.5, 1}));
  CounterFamily* busy = Unwrap(registry.AddCounter("zipmoe_test_busy_seconds_total", "Busy time.", {}));
  ASSERT_TRUE(requests && depth && latency && busy);

  Unwrap(requests->WithLabels({"F", "3"}))->Increment(2);
  Unwrap(requests->WithLabels({"C", "10"}))->Increment(5);
  Unwrap(requests->WithLabels({"C", "2"}))->Increment();
  Gauge* queue = Unwrap(depth->WithLabels({}));
  queue->Set(7);
  queue->Add(-2.5);
  Histogram* e_reads = Unwrap(latency->WithLabels({"E"}));
  for (double v : {0.125, 0.25, 0.5, 0.75, 4.0}) e_reads->Observe(v);  // below, at, at, between, above
  Counter* busy_seconds = Unwrap(busy->WithLabels({}));
  busy_seconds->Increment(0.1);
  busy_seconds->Increment(0.2);  // 0.30000000000000004: needs 17 digits to round-trip

  EXPECT_EQ(registry.Serialize(),
            "# HELP zipmoe_test_busy_seconds_total Busy time.\n"
            "# TYPE zipmoe_test_busy_seconds_total counter\n"
            "zipmoe_test_busy_seconds_total 0.30000000000000004\n"
            "# HELP zipmoe_test_latency_seconds Read latency.\n"
            "# TYPE zipmoe_test_latency_seconds histogram\n"
            "zipmoe_test_latency_seconds_bucket{kind=\"E\",le=\"0.25\"} 2\n"
            "zipmoe_test_latency_seconds_bucket{kind=\"E\",le=\"0.5\"} 3\n"
            "zipmoe_test_latency_seconds_bucket{kind=\"E\",le=\"1\"} 4\n"
            "zipmoe_test_latency_seconds_bucket{kind=\"E\",le=\"+Inf\"} 5\n"
            "zipmoe_test_latency_seconds_sum{kind=\"E\"} 5.625\n"
            "zipmoe_test_latency_seconds_count{kind=\"E\"} 5\n"
            "# HELP zipmoe_test_queue_depth Queued ops.\n"
            "# TYPE zipmoe_test_queue_depth gauge\n"
            "zipmoe_test_queue_depth 4.5\n"
            "# HELP zipmoe_test_requests_total Requests by pool.\n"
            "# TYPE zipmoe_test_requests_total counter\n"
            "zipmoe_test_requests_total{pool=\"C\",layer=\"10\"} 5\n"
            "zipmoe_test_requests_total{pool=\"C\",layer=\"2\"} 1\n"
            "zipmoe_test_requests_total{pool=\"F\",layer=\"3\"} 2\n");
}

TEST(MetricsTest, UnlabelledFamiliesExportZeroAndLabelledOnesWaitForAChild) {
  Registry registry;
  EXPECT_EQ(registry.Serialize(), "");
  ASSERT_TRUE(registry.AddHistogram("h_seconds", "H.", {}, {}).ok());
  ASSERT_TRUE(registry.AddGauge("g", "G.", {"pool"}).ok());
  ASSERT_TRUE(registry.AddIntCounter("c_total", "C.", {}).ok());
  EXPECT_EQ(registry.Serialize(),
            "# HELP c_total C.\n# TYPE c_total counter\nc_total 0\n"
            "# HELP h_seconds H.\n# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"+Inf\"} 0\nh_seconds_sum 0\nh_seconds_count 0\n");
}

TEST(MetricsTest, ChildrenAreStableAndCreatedOnFirstUse) {
  Registry registry;
  IntCounterFamily* family = Unwrap(registry.AddIntCounter("x_total", "X.", {"pool", "layer"}));
  IntCounter* first = Unwrap(family->WithLabels({"F", "3"}));
  for (int layer = 0; layer < 1000; ++layer) Unwrap(family->WithLabels({"C", std::to_string(layer)}));
  EXPECT_EQ(Unwrap(family->WithLabels({"F", "3"})), first);
  first->Increment(7);
  EXPECT_EQ(Unwrap(family->WithLabels({"F", "3"}))->value(), 7u);
  EXPECT_EQ(Unwrap(family->WithLabels({"C", "3"}))->value(), 0u);
}

TEST(MetricsTest, WrongLabelCountIsInvalidArgumentNamingTheMetric) {
  Registry registry;
  IntCounterFamily* family = Unwrap(registry.AddIntCounter("zipmoe_cache_requests_total", "R.", {"pool", "layer"}));
  for (const std::vector<std::string>& values :
       {std::vector<std::string>{"F"}, std::vector<std::string>{}, std::vector<std::string>{"F", "3", "x"}}) {
    Result<IntCounter*> child = family->WithLabels(values);
    ASSERT_FALSE(child.ok()) << values.size();
    EXPECT_EQ(child.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(child.status().message().find("zipmoe_cache_requests_total"), std::string::npos)
        << child.status().message();
  }
  GaugeFamily* unlabelled = Unwrap(registry.AddGauge("g", "G.", {}));
  EXPECT_EQ(unlabelled->WithLabels({"x"}).status().code(), StatusCode::kInvalidArgument);
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeLabelValue("plain é\t"), "plain é\t");
  EXPECT_EQ(EscapeHelp("one\ntwo \\ \"q\""), "one\\ntwo \\\\ \"q\"");

  Registry registry;
  GaugeFamily* family = Unwrap(registry.AddGauge("g", "Path C:\\x\nsecond line \"quoted\".", {"path"}));
  Unwrap(family->WithLabels({"C:\\dir\\\"f\"\n"}))->Set(1);
  EXPECT_EQ(registry.Serialize(),
            "# HELP g Path C:\\\\x\\nsecond line \"quoted\".\n"
            "# TYPE g gauge\n"
            "g{path=\"C:\\\\dir\\\\\\\"f\\\"\\n\"} 1\n");
}

TEST(MetricsTest, FloatsRoundTripAndSpecialValuesUsePrometheusSpelling) {
  EXPECT_EQ(FormatDouble(0.0), "0");
  EXPECT_EQ(FormatDouble(-0.0), "-0");
  EXPECT_EQ(FormatDouble(1.0), "1");
  EXPECT_EQ(FormatDouble(-3.0), "-3");
  EXPECT_EQ(FormatDouble(1e6), "1000000");                  // integers without exponent
  EXPECT_EQ(FormatDouble(1e18), "1000000000000000000");
  EXPECT_EQ(FormatDouble(9007199254740993.0), "9007199254740992");  // the double nearest 2^53 + 1
  EXPECT_EQ(FormatDouble(0.1), "0.1");
  EXPECT_EQ(FormatDouble(2.5e-7), "2.5e-07");
  EXPECT_EQ(FormatDouble(1e300), "1e+300");
  EXPECT_EQ(FormatDouble(DBL_MAX), "1.7976931348623157e+308");
  EXPECT_EQ(FormatDouble(kInf), "+Inf");
  EXPECT_EQ(FormatDouble(-kInf), "-Inf");
  EXPECT_EQ(FormatDouble(kNaN), "NaN");

  std::mt19937_64 rng(42);
  for (int i = 0; i < 100000; ++i) {
    uint64_t bits = rng();
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    if (!std::isfinite(value)) continue;
    const std::string text = FormatDouble(value);
    ASSERT_NE(text[0], '+') << text;
    char* end = nullptr;
    double back = std::strtod(text.c_str(), &end);
    ASSERT_EQ(end, text.c_str() + text.size()) << text;
    uint64_t back_bits;
    std::memcpy(&back_bits, &back, sizeof(back));
    ASSERT_EQ(back_bits, bits) << text;
  }
}

TEST(MetricsTest, IntCountersPrintExactIntegersAndCountersNeverDecrease) {
  Registry registry;
  IntCounter* big = Unwrap(Unwrap(registry.AddIntCounter("big_total", "B.", {}))->WithLabels({}));
  big->Increment(std::numeric_limits<uint64_t>::max());
  Counter* seconds = Unwrap(Unwrap(registry.AddCounter("s_seconds_total", "S.", {}))->WithLabels({}));
  seconds->Increment(2);
  seconds->Increment(-1);
  seconds->Increment(kNaN);
  EXPECT_EQ(seconds->value(), 2.0);
  EXPECT_EQ(registry.Serialize(),
            "# HELP big_total B.\n# TYPE big_total counter\nbig_total 18446744073709551615\n"
            "# HELP s_seconds_total S.\n# TYPE s_seconds_total counter\ns_seconds_total 2\n");
}

TEST(MetricsTest, HistogramDropsNaNAndCountsInfinities) {
  Registry registry;
  Histogram* h = Unwrap(Unwrap(registry.AddHistogram("h", "H.", {}, {-1, 0, 1}))->WithLabels({}));
  h->Observe(kNaN);
  h->Observe(-kInf);
  h->Observe(0);
  h->Observe(kInf);
  Histogram::Snapshot snapshot = h->TakeSnapshot();
  EXPECT_EQ(snapshot.cumulative_counts, (std::vector<uint64_t>{1, 2, 2, 3}));
  EXPECT_EQ(snapshot.count, 3u);
  EXPECT_TRUE(std::isnan(snapshot.sum));  // -Inf + +Inf, as Prometheus clients do
  EXPECT_NE(registry.Serialize().find("h_bucket{le=\"-1\"} 1\nh_bucket{le=\"0\"} 2\n"), std::string::npos);
}

TEST(MetricsTest, InvalidMetricNamesAreRejected) {
  for (const char* name : {"", "1abc", "a-b", "a b", "a.b", "__reserved", "caf\xc3\xa9", "x{}"}) {
    Registry registry;
    Result<GaugeFamily*> family = registry.AddGauge(name, "help", {});
    ASSERT_FALSE(family.ok()) << name;
    EXPECT_EQ(family.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(registry.Serialize(), "");
  }
  for (const char* name : {"a", "_x", ":x", "a:b_c9", "_"}) {
    Registry registry;
    EXPECT_TRUE(registry.AddGauge(name, "help", {}).ok()) << name;
  }
}

TEST(MetricsTest, InvalidLabelNamesAreRejected) {
  for (const char* label : {"", "1a", "a:b", "a-b", "__name__", "__x"}) {
    Registry registry;
    Result<IntCounterFamily*> family = registry.AddIntCounter("zipmoe_x_total", "help", {"pool", label});
    ASSERT_FALSE(family.ok()) << label;
    EXPECT_EQ(family.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(family.status().message().find("zipmoe_x_total"), std::string::npos) << family.status().message();
  }
  Registry registry;
  EXPECT_FALSE(registry.AddGauge("dup", "help", {"pool", "pool"}).ok());
  EXPECT_TRUE(registry.AddGauge("dup", "help", {"pool", "layer"}).ok());  // the failure reserved nothing
  EXPECT_TRUE(registry.AddIntCounter("le_ok_total", "help", {"le"}).ok());  // "le" only clashes in histograms
  Result<HistogramFamily*> histogram = registry.AddHistogram("h_seconds", "help", {"le"}, {1});
  ASSERT_FALSE(histogram.ok());
  EXPECT_EQ(histogram.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(histogram.status().message().find("h_seconds"), std::string::npos);
}

TEST(MetricsTest, DuplicateAndCollidingNamesAreRejected) {
  Registry registry;
  ASSERT_TRUE(registry.AddIntCounter("x_total", "X.", {}).ok());
  EXPECT_EQ(registry.AddGauge("x_total", "again", {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(registry.AddIntCounter("x_total", "again", {}).ok());
  ASSERT_TRUE(registry.AddHistogram("lat_seconds", "L.", {}, {1}).ok());
  for (const char* name : {"lat_seconds", "lat_seconds_bucket", "lat_seconds_sum", "lat_seconds_count"}) {
    Result<GaugeFamily*> family = registry.AddGauge(name, "g", {});
    ASSERT_FALSE(family.ok()) << name;
    EXPECT_NE(family.status().message().find(name), std::string::npos) << family.status().message();
  }
  ASSERT_TRUE(registry.AddGauge("io_sum", "g", {}).ok());
  EXPECT_FALSE(registry.AddHistogram("io", "h", {}, {1}).ok());  // would write io_sum
  EXPECT_TRUE(registry.AddHistogram("io2", "h", {}, {1}).ok());
}

TEST(MetricsTest, BucketBoundsMustBeStrictlyIncreasingAndFinite) {
  const std::vector<std::vector<double>> bad = {{1, 1}, {2, 1}, {kNaN}, {1, kNaN, 3}, {1, kInf}, {-kInf, 0}};
  for (const std::vector<double>& bounds : bad) {
    Registry registry;
    Result<HistogramFamily*> family = registry.AddHistogram("zipmoe_h_seconds", "H.", {}, bounds);
    ASSERT_FALSE(family.ok()) << bounds.size();
    EXPECT_EQ(family.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(family.status().message().find("zipmoe_h_seconds"), std::string::npos);
    EXPECT_TRUE(registry.AddHistogram("zipmoe_h_seconds", "H.", {}, {-1, 0, 1e-9}).ok());  // nothing reserved
  }
  Result<std::vector<double>> buckets = ExponentialBuckets(0.001, 2, 4);
  ASSERT_TRUE(buckets.ok());
  EXPECT_EQ(buckets.value(), (std::vector<double>{0.001, 0.002, 0.004, 0.008}));
  EXPECT_FALSE(ExponentialBuckets(0, 2, 4).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 1, 4).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 2, 0).ok());
  EXPECT_FALSE(ExponentialBuckets(1, 1e300, 3).ok());  // overflows to +Inf
}

TEST(MetricsTest, ConcurrentUpdatesFromEightThreadsSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 300000;  // enough overlap to lose updates if an add were not atomic
  Registry registry;
  IntCounterFamily* ints = Unwrap(registry.AddIntCounter("i_total", "I.", {"pool"}));
  Counter* doubles = Unwrap(Unwrap(registry.AddCounter("d_total", "D.", {}))->WithLabels({}));
  Gauge* gauge = Unwrap(Unwrap(registry.AddGauge("g", "G.", {}))->WithLabels({}));
  HistogramFamily* histograms = Unwrap(registry.AddHistogram("h", "H.", {}, {0.5, 1.5}));
  std::atomic<int> waiting{kThreads};  // start gate: all threads update at the same time
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      IntCounter* shared = ints->WithLabels({"F"}).value();  // racing first use
      Histogram* h = histograms->WithLabels({}).value();
      for (int i = 0; i < kIterations; ++i) {
        shared->Increment();
        doubles->Increment(1.0);
        gauge->Add(t % 2 == 0 ? 1.0 : -0.5);
        h->Observe(i % 3);  // 0, 1, 2 → one observation per bucket
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(Unwrap(ints->WithLabels({"F"}))->value(), uint64_t{kThreads} * kIterations);
  EXPECT_EQ(doubles->value(), double{kThreads} * kIterations);
  EXPECT_EQ(gauge->value(), kThreads / 2 * kIterations * 0.5);
  Histogram::Snapshot snapshot = Unwrap(histograms->WithLabels({}))->TakeSnapshot();
  uint64_t zeros = 0, ones = 0;
  double sum = 0.0;
  for (int i = 0; i < kIterations; ++i) {
    zeros += i % 3 == 0;
    ones += i % 3 == 1;
    sum += i % 3;
  }
  EXPECT_EQ(snapshot.cumulative_counts, (std::vector<uint64_t>{kThreads * zeros, kThreads * (zeros + ones),
                                                               uint64_t{kThreads} * kIterations}));
  EXPECT_EQ(snapshot.count, uint64_t{kThreads} * kIterations);
  EXPECT_EQ(snapshot.sum, kThreads * sum);  // integers < 2^53: exact in any order
}

TEST(MetricsTest, SerializingWhileUpdatingGivesWellFormedConsistentText) {
  Registry registry;
  IntCounterFamily* requests = Unwrap(registry.AddIntCounter("zipmoe_req_total", "R.\nmore", {"pool", "layer"}));
  HistogramFamily* latency = Unwrap(registry.AddHistogram("zipmoe_lat_seconds", "L.", {"kind"}, {0.001, 0.01, 0.1}));
  GaugeFamily* depth = Unwrap(registry.AddGauge("zipmoe_depth", "D.", {"queue"}));
  std::atomic<bool> stop{false};
  std::vector<std::atomic<int>> progress(4);  // iterations done per writer
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; !stop.load(); ++i, progress[t].fetch_add(1)) {
        const std::string layer = std::to_string(rng() % 64);
        requests->WithLabels({std::string(1, "MESCF"[rng() % 5]), layer}).value()->Increment();
        latency->WithLabels({i % 2 ? "E" : "S\"\n\\"}).value()->Observe((rng() % 2000) * 1e-4);
        depth->WithLabels({"q" + std::to_string(t)}).value()->Set(i % 2 ? kNaN : i * 0.1);
        if (i % 4096 == 0) {  // new families while Serialize runs
          EXPECT_TRUE(registry.AddGauge("zipmoe_late_" + std::to_string(t) + "_" + std::to_string(i), "x", {}).ok());
        }
      }
    });
  }
  // Serialize until every writer has done many updates (and a few serializations overlapped them).
  auto slowest_writer = [&] {
    int slowest = progress[0].load();
    for (const std::atomic<int>& p : progress) slowest = std::min(slowest, p.load());
    return slowest;
  };
  int serializations = 0;
  for (; serializations < 50 || slowest_writer() < 20000; ++serializations) {
    const std::string text = registry.Serialize();
    uint64_t previous_bucket = 0;
    for (const std::string& line : Lines(text)) {
      if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
      ASSERT_TRUE(IsWellFormedSample(line)) << line;
      // Within one child the cumulative buckets never decrease and +Inf equals _count.
      const size_t space = line.rfind(' ');
      if (line.rfind("zipmoe_lat_seconds_bucket", 0) == 0) {
        const uint64_t count = std::stoull(line.substr(space + 1));
        if (line.find("le=\"0.001\"") == std::string::npos) {
          ASSERT_GE(count, previous_bucket) << line;
        }
        previous_bucket = count;
      } else if (line.rfind("zipmoe_lat_seconds_count", 0) == 0) {
        ASSERT_EQ(std::stoull(line.substr(space + 1)), previous_bucket) << line;
      }
    }
  }
  stop = true;
  for (std::thread& writer : writers) writer.join();
  EXPECT_GE(serializations, 50);
  EXPECT_NE(registry.Serialize().find("zipmoe_late_0_0 0\n"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::metrics
