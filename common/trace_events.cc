#include "common/trace_events.h"

#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/mutex.h"

namespace zipmoe::trace {
namespace {

struct Event {
  char phase;  // 'X' complete, 'i' instant
  const char* category;
  std::string name;
  std::string args;  // JSON object text or ""
  double ts_us;
  double dur_us;
  int64_t tid;
};

struct Recorder {
  std::atomic<bool> enabled{false};
  Mutex mu;
  std::string process_name ZM_GUARDED_BY(mu);
  std::vector<Event> events ZM_GUARDED_BY(mu);
  std::set<int64_t> threads ZM_GUARDED_BY(mu);  // tids that recorded
  uint64_t dropped ZM_GUARDED_BY(mu) = 0;
  bool ever_enabled ZM_GUARDED_BY(mu) = false;
};

Recorder& Global() {
  static Recorder* r = new Recorder();  // never destroyed: spans may end during static destruction
  return *r;
}

int64_t ThreadId() { return static_cast<int64_t>(::syscall(SYS_gettid)); }

void Record(Event e) {
  Recorder& r = Global();
  MutexLock lock(&r.mu);
  if (r.events.size() >= kMaxTraceEvents) {
    ++r.dropped;
    return;
  }
  r.threads.insert(e.tid);
  r.events.push_back(std::move(e));
}

nlohmann::json ArgsJson(const std::string& args) {
  if (args.empty()) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(args, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json{{"text", args}};
}

}  // namespace

void Enable(const std::string& process_name) {
  Recorder& r = Global();
  MutexLock lock(&r.mu);
  r.process_name = process_name;
  r.events.clear();
  r.threads.clear();
  r.dropped = 0;
  r.ever_enabled = true;
  r.enabled.store(true, std::memory_order_release);
}

void Disable() { Global().enabled.store(false, std::memory_order_release); }

bool Enabled() { return Global().enabled.load(std::memory_order_relaxed); }

double NowUs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

void Complete(const char* category, const std::string& name, double start_us, double dur_us, const std::string& args) {
  if (!Enabled()) return;
  Record(Event{'X', category, name, args, start_us, dur_us < 0 ? 0 : dur_us, ThreadId()});
}

void Instant(const char* category, const std::string& name, const std::string& args) {
  if (!Enabled()) return;
  Record(Event{'i', category, name, args, NowUs(), 0, ThreadId()});
}

void TraceSpan::End() {
  if (start_us_ < 0) return;
  const double dur_us = NowUs() - start_us_;
  if (activity_) AddActivityTime(*activity_, dur_us);
  if (tracing_) Complete(category_, text_->name, start_us_, dur_us, text_->args);
  start_us_ = -1;
}

size_t EventCount() {
  Recorder& r = Global();
  MutexLock lock(&r.mu);
  return r.events.size();
}

uint64_t DroppedEvents() {
  Recorder& r = Global();
  MutexLock lock(&r.mu);
  return r.dropped;
}

Status WriteTraceFile(const std::string& path) {
  Recorder& r = Global();
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json other;
  {
    MutexLock lock(&r.mu);
    if (!r.ever_enabled) return Status::InvalidArgument(fmt::format("{}: tracing was never enabled", path));
    const int64_t pid = static_cast<int64_t>(::getpid());
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                      {"args", {{"name", r.process_name}}}});
    for (const int64_t tid : r.threads) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid},
                        {"args", {{"name", tid == pid ? r.process_name + " main" : fmt::format("thread {}", tid)}}}});
    }
    for (const Event& e : r.events) {
      nlohmann::json j{{"ph", std::string(1, e.phase)}, {"cat", e.category}, {"name", e.name}, {"pid", pid},
                       {"tid", e.tid}, {"ts", e.ts_us}};
      if (e.phase == 'X') j["dur"] = e.dur_us;
      if (e.phase == 'i') j["s"] = "t";
      if (!e.args.empty()) j["args"] = ArgsJson(e.args);
      events.push_back(std::move(j));
    }
    other = {{"process", r.process_name}, {"events", r.events.size()}, {"dropped", r.dropped}};
  }
  const nlohmann::json doc{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  return WriteFileAtomic(path, doc.dump());
}

Status MergeTraceFiles(const std::vector<std::string>& inputs, const std::string& output) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json missing = nlohmann::json::array();
  nlohmann::json processes = nlohmann::json::array();
  for (const std::string& in : inputs) {
    if (!FileExists(in)) {
      missing.push_back(in);
      continue;
    }
    ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(in));
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
      return Status::InvalidArgument(fmt::format("{}: not a trace file (no traceEvents array)", in));
    }
    for (nlohmann::json& e : doc["traceEvents"]) events.push_back(std::move(e));
    if (doc.contains("otherData")) processes.push_back(doc["otherData"]);
  }
  if (missing.size() == inputs.size()) {
    return Status::NotFound(fmt::format("{}: none of the {} trace files to merge exists", output, inputs.size()));
  }
  const nlohmann::json doc{{"traceEvents", std::move(events)},
                           {"displayTimeUnit", "ms"},
                           {"otherData", {{"processes", processes}, {"missing", missing}}}};
  return WriteFileAtomic(output, doc.dump());
}

namespace {
std::atomic<uint64_t> g_activity_ns[kActivityCount];
}  // namespace

const char* ActivityName(Activity a) {
  switch (a) {
    case Activity::kForward: return "forward";
    case Activity::kWaitExperts: return "wait_experts";
    case Activity::kHandleMessage: return "handle_message";
    case Activity::kScheduleLayer: return "schedule_layer";
    case Activity::kRead: return "read";
    case Activity::kDecode: return "decode";
  }
  return "unknown";
}

void AddActivityTime(Activity a, double us) {
  if (us <= 0) return;
  g_activity_ns[static_cast<int>(a)].fetch_add(static_cast<uint64_t>(us * 1e3), std::memory_order_relaxed);
}

double ActivitySeconds(Activity a) {
  return static_cast<double>(g_activity_ns[static_cast<int>(a)].load(std::memory_order_relaxed)) * 1e-9;
}

}  // namespace zipmoe::trace
