// Chrome trace-event recording (common/trace_events.h): nothing while disabled, spans and instants
// with their categories, names, args and durations, the process/thread metadata, merging the files
// of several processes, and the errors that name the file.
#include "common/trace_events.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe::trace {
namespace {

nlohmann::json ReadJson(const std::string& path) { return nlohmann::json::parse(testing::ReadAll(path)); }

// The events of `doc` with phase `ph`.
std::vector<nlohmann::json> Phase(const nlohmann::json& doc, const std::string& ph) {
  std::vector<nlohmann::json> out;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

TEST(TraceEvents, RecordsSpansAndInstantsOnlyWhileEnabled) {
  testing::TempDir tmp;
  Enable("unit-test");
  ASSERT_TRUE(Enabled());
  EXPECT_EQ(EventCount(), 0u);
  const double t0 = NowUs();
  {
    TraceSpan span("layer", SpanText("moe 3", R"({"layer": 3})"));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Instant("message", "send LayerRequest");
  std::thread([] { Complete("io", "read chunk", NowUs(), 12.5, "not json"); }).join();
  EXPECT_EQ(EventCount(), 3u);
  Disable();
  EXPECT_FALSE(Enabled());
  bool formatted = false;
  {
    TraceSpan ignored("layer", [&formatted] {
      formatted = true;
      return std::string("while disabled");
    });
    Instant("message", "while disabled");
  }
  EXPECT_EQ(EventCount(), 3u);
  EXPECT_FALSE(formatted) << "a disabled span formats no name";
  ASSERT_TRUE(WriteTraceFile(tmp.Sub("t.json")).ok());

  const nlohmann::json doc = ReadJson(tmp.Sub("t.json"));
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["process"], "unit-test");
  const std::vector<nlohmann::json> spans = Phase(doc, "X");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0]["name"], "moe 3");
  EXPECT_EQ(spans[0]["cat"], "layer");
  EXPECT_EQ(spans[0]["args"]["layer"], 3);
  EXPECT_GE(spans[0]["dur"].get<double>(), 4000.0);  // slept 5 ms, in µs
  EXPECT_GE(spans[0]["ts"].get<double>(), t0);
  EXPECT_EQ(spans[0]["pid"], static_cast<int>(::getpid()));
  EXPECT_EQ(spans[1]["name"], "read chunk");
  EXPECT_DOUBLE_EQ(spans[1]["dur"].get<double>(), 12.5);
  EXPECT_EQ(spans[1]["args"]["text"], "not json");  // args that are not a JSON object are kept as text
  EXPECT_NE(spans[1]["tid"], spans[0]["tid"]);       // the other thread
  const std::vector<nlohmann::json> instants = Phase(doc, "i");
  ASSERT_EQ(instants.size(), 1u);
  EXPECT_EQ(instants[0]["name"], "send LayerRequest");
  // Metadata: the process name and one name per thread that recorded.
  const std::vector<nlohmann::json> meta = Phase(doc, "M");
  std::set<std::string> kinds;
  for (const nlohmann::json& m : meta) kinds.insert(m["name"].get<std::string>());
  EXPECT_EQ(kinds, (std::set<std::string>{"process_name", "thread_name"}));
  EXPECT_EQ(meta.size(), 3u);  // process + two threads

  Enable("again");  // a new Enable starts from nothing
  EXPECT_EQ(EventCount(), 0u);
}

TEST(TraceEvents, MergesTheFilesOfSeveralProcessesAndSkipsMissingOnes) {
  testing::TempDir tmp;
  Enable("first");
  Instant("message", "a");
  ASSERT_TRUE(WriteTraceFile(tmp.Sub("a.json")).ok());
  Enable("second");
  Instant("message", "b");
  Instant("message", "c");
  ASSERT_TRUE(WriteTraceFile(tmp.Sub("b.json")).ok());
  ASSERT_TRUE(MergeTraceFiles({tmp.Sub("a.json"), tmp.Sub("gone.json"), tmp.Sub("b.json")}, tmp.Sub("all.json")).ok());
  const nlohmann::json doc = ReadJson(tmp.Sub("all.json"));
  EXPECT_EQ(Phase(doc, "i").size(), 3u);
  ASSERT_EQ(doc["otherData"]["processes"].size(), 2u);
  EXPECT_EQ(doc["otherData"]["processes"][1]["process"], "second");
  ASSERT_EQ(doc["otherData"]["missing"].size(), 1u);
  EXPECT_EQ(doc["otherData"]["missing"][0], tmp.Sub("gone.json"));
}

// Activity time is kept whether or not a trace is being recorded.
TEST(TraceEvents, ActivityTimeAccumulatesPerActivityWithoutTracing) {
  Disable();
  const double read0 = ActivitySeconds(Activity::kRead), decode0 = ActivitySeconds(Activity::kDecode);
  const size_t events0 = EventCount();
  AddActivityTime(Activity::kRead, 1.5e6);  // 1.5 s
  AddActivityTime(Activity::kRead, -5);     // ignored
  {
    TraceSpan timer("decode", [] { return std::string("not recorded: tracing is off"); }, Activity::kDecode);
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  EXPECT_NEAR(ActivitySeconds(Activity::kRead) - read0, 1.5, 1e-6);
  EXPECT_GE(ActivitySeconds(Activity::kDecode) - decode0, 0.0025);
  EXPECT_LT(ActivitySeconds(Activity::kDecode) - decode0, 1.0);
  EXPECT_EQ(EventCount(), events0);  // timed for the activity, not traced
  EXPECT_STREQ(ActivityName(Activity::kWaitExperts), "wait_experts");
  EXPECT_STREQ(ActivityName(Activity::kScheduleLayer), "schedule_layer");
}

TEST(TraceEvents, ErrorsNameTheFile) {
  testing::TempDir tmp;
  ASSERT_TRUE(WriteFileAtomic(tmp.Sub("bad.json"), R"({"events": []})").ok());
  Status bad = MergeTraceFiles({tmp.Sub("bad.json")}, tmp.Sub("out.json"));
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find(tmp.Sub("bad.json")), std::string::npos) << bad.ToString();
  Status none = MergeTraceFiles({tmp.Sub("x.json"), tmp.Sub("y.json")}, tmp.Sub("out.json"));
  EXPECT_EQ(none.code(), StatusCode::kNotFound);
  EXPECT_FALSE(FileExists(tmp.Sub("out.json")));
  Enable("writer");
  Status unwritable = WriteTraceFile(tmp.Sub("no/such/dir/t.json"));
  EXPECT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.message().find("no/such/dir"), std::string::npos) << unwritable.ToString();
}

}  // namespace
}  // namespace zipmoe::trace
