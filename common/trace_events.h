// Timeline tracing in the Chrome Trace Event Format (the JSON that Perfetto, ui.perfetto.dev, and
// chrome://tracing open; spec: "Trace Event Format", Google, docs.google.com/document/d/
// 1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU). Each process records its own spans ("ph": "X",
// complete events) and instants ("ph": "i") in memory while enabled and writes them as one JSON file;
// MergeTraceFiles joins the files of several processes (zipmoe up) into one timeline. Timestamps are
// CLOCK_MONOTONIC microseconds, one clock for every process of a machine, so the processes line up.
//
// Off by default: a disabled TraceSpan costs one relaxed atomic load. While enabled, recording takes
// a mutex per event; at most kMaxTraceEvents are kept (later ones are counted as dropped and the
// count is written into the file's metadata).
//
// Thread-safe: every function may be called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/status.h"

namespace zipmoe::trace {

inline constexpr size_t kMaxTraceEvents = 2'000'000;

// Starts recording for this process (named `process_name` in the viewer, e.g. "executor"). Clears
// what an earlier Enable recorded.
void Enable(const std::string& process_name);
// Stops recording; what was recorded stays until the next Enable (WriteTraceFile still writes it).
void Disable();
bool Enabled();
// CLOCK_MONOTONIC in microseconds.
double NowUs();

// One complete event: `name` from start_us for dur_us on the calling thread; `category` groups
// events in the viewer ("layer", "expert", "message", "io", "decode", ...); `args` is a JSON object
// text ("" for none), e.g. R"({"layer": 3})". No-op when disabled.
void Complete(const char* category, const std::string& name, double start_us, double dur_us,
              const std::string& args = "");
// A zero-length event at now.
void Instant(const char* category, const std::string& name, const std::string& args = "");

// Always-on time accounting (independent of Enable): how long this process has spent in each
// activity since it started, for /metrics (zipmoe_activity_seconds_total{activity}, issue 20's
// "time spent waiting vs working per token"). The activities are the trace's, timed at the same
// points: kForward (executor forward steps), kWaitExperts (executor waiting for a routed expert),
// kHandleMessage (a server handling one message), kScheduleLayer (the scheduler planning a layer),
// kRead (storage chunk reads), kDecode (E-chunk decodes). One clock read at each end; lock-free.
enum class Activity : uint8_t { kForward = 0, kWaitExperts, kHandleMessage, kScheduleLayer, kRead, kDecode };
inline constexpr int kActivityCount = 6;
const char* ActivityName(Activity a);  // "forward", "wait_experts", "handle_message", "schedule_layer", "read", "decode"
void AddActivityTime(Activity a, double us);
// Seconds spent in `a` by this process so far (all threads summed).
double ActivitySeconds(Activity a);

// A span's name and args (a JSON object text, "" for none).
struct SpanText {
  SpanText(std::string name_, std::string args_ = "") : name(std::move(name_)), args(std::move(args_)) {}  // NOLINT
  std::string name;
  std::string args;
};

// Times [construction, End() or destruction). While tracing is enabled it is recorded as one complete
// event; with an `activity` its time is also added to that activity's total (AddActivityTime),
// traced or not. `text` is a SpanText (or a std::string name), or a callable returning one, which is
// called only while tracing is enabled, so a disabled span formats nothing:
//   TraceSpan wait("expert", [&] { return fmt::format("wait (layer {})", l); }, Activity::kWaitExperts);
class TraceSpan {
 public:
  template <typename Text>
  TraceSpan(const char* category, Text&& text, std::optional<Activity> activity = std::nullopt)
      : category_(category), activity_(activity), tracing_(Enabled()) {
    if (tracing_) {
      if constexpr (std::is_invocable_v<Text&>) {
        text_ = SpanText(text());
      } else {
        text_ = SpanText(std::forward<Text>(text));
      }
    }
    if (tracing_ || activity_) start_us_ = NowUs();
  }
  ~TraceSpan() { End(); }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

  // Ends the span now (the destructor then does nothing). Idempotent.
  void End();

 private:
  const char* category_;
  std::optional<Activity> activity_;
  bool tracing_;
  std::optional<SpanText> text_;
  double start_us_ = -1;  // < 0: nothing to record (or already ended)
};

// Events recorded since Enable, and how many were dropped past kMaxTraceEvents.
size_t EventCount();
uint64_t DroppedEvents();

// Writes {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}} with this process's
// events and its process/thread name metadata, atomically (temp + rename). Errors: kIoError naming
// the path; kInvalidArgument when tracing was never enabled.
Status WriteTraceFile(const std::string& path);

// Joins the traceEvents of `inputs` (files written by WriteTraceFile, other processes' included)
// into `output`, atomically. Missing inputs are skipped and listed in otherData.missing (a process
// that was killed writes none). Errors: kInvalidArgument naming an input that is not a trace file;
// kIoError naming the path; kNotFound when no input exists.
Status MergeTraceFiles(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace zipmoe::trace
