#include "common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::metrics {
namespace {

// Adds `delta` to an atomic double with a CAS loop (std::atomic<double>::fetch_add is C++20).
void AtomicAdd(std::atomic<double>* target, double delta) {
  double current = target->load(std::memory_order_relaxed);
  while (!target->compare_exchange_weak(current, current + delta, std::memory_order_relaxed)) {
  }
}

bool IsNameStart(char c, bool allow_colon) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
}

bool IsNameChar(char c, bool allow_colon) { return IsNameStart(c, allow_colon) || (c >= '0' && c <= '9'); }

// Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names: [a-zA-Z_][a-zA-Z0-9_]*; neither "__...".
bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty() || !IsNameStart(name[0], allow_colon)) return false;
  for (char c : name) {
    if (!IsNameChar(c, allow_colon)) return false;
  }
  return name.compare(0, 2, "__") != 0;
}

std::string JoinQuoted(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += "\"" + EscapeLabelValue(items[i]) + "\"";
  }
  return out + "]";
}

// One sample line: <family><suffix>{<labels>[,le="<le>"]} <value>\n.
void AppendSample(const FamilyBase& family, const char* suffix,
                  const std::vector<std::string>& label_values, const std::string* le,
                  const std::string& value, std::string* out) {
  out->append(family.name()).append(suffix);
  const std::vector<std::string>& names = family.label_names();
  if (!names.empty() || le != nullptr) {
    out->push_back('{');
    for (size_t i = 0; i < names.size(); ++i) {
      if (i > 0) out->push_back(',');
      out->append(names[i]).append("=\"").append(EscapeLabelValue(label_values[i])).push_back('"');
    }
    if (le != nullptr) {
      if (!names.empty()) out->push_back(',');
      out->append("le=\"").append(*le).push_back('"');
    }
    out->push_back('}');
  }
  out->push_back(' ');
  out->append(value).push_back('\n');
}

}  // namespace

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

void Counter::Increment(double delta) {
  if (!(delta >= 0.0)) return;  // negative or NaN
  AtomicAdd(&value_, delta);
}

void Gauge::Add(double delta) { AtomicAdd(&value_, delta); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), bucket_counts_(upper_bounds_.size() + 1) {}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // First bound >= value (le is inclusive); past the end means the +Inf bucket.
  size_t bucket = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  bucket_counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(&sum_, value);
}

Histogram::Snapshot Histogram::TakeSnapshot() const {
  Snapshot snapshot;
  snapshot.cumulative_counts.resize(bucket_counts_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < bucket_counts_.size(); ++i) {
    running += bucket_counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative_counts[i] = running;
  }
  snapshot.count = running;
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

Result<std::vector<double>> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0.0) || !std::isfinite(start) || !(factor > 1.0) || !std::isfinite(factor) || count < 1) {
    return Status::InvalidArgument(fmt::format(
        "ExponentialBuckets: need start > 0, factor > 1, count >= 1; got start {}, factor {}, count {}",
        start, factor, count));
  }
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) {
    if (!std::isfinite(bound)) {
      return Status::InvalidArgument(fmt::format(
          "ExponentialBuckets: bound {} of start {}, factor {} overflows", i, start, factor));
    }
    bounds.push_back(bound);
  }
  return bounds;
}

std::string FormatDouble(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == 0.0) return std::signbit(value) ? "-0" : "0";
  if (value == std::trunc(value) && std::fabs(value) < 0x1p63) {
    return std::to_string(static_cast<int64_t>(value));  // exact: the value is an integer < 2^63
  }
  char buffer[32];  // the shortest round-trip form of a double needs at most 24 characters
  std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

FamilyBase::FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
                       MetricType type)
    : name_(std::move(name)), help_(std::move(help)), label_names_(std::move(label_names)), type_(type) {}

Status FamilyBase::CheckLabelCount(const std::vector<std::string>& label_values) const {
  if (label_values.size() == label_names_.size()) return Status::Ok();
  return Status::InvalidArgument(fmt::format("metric {}: expected {} label values for labels {}, got {}: {}",
                                             name_, label_names_.size(), JoinQuoted(label_names_),
                                             label_values.size(), JoinQuoted(label_values)));
}

void FamilyBase::AppendHeader(std::string* out) const {
  out->append("# HELP ").append(name_).append(" ").append(EscapeHelp(help_)).push_back('\n');
  out->append("# TYPE ").append(name_).append(" ").append(MetricTypeName(type_)).push_back('\n');
}

namespace internal {

void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Counter& child, std::string* out) {
  AppendSample(family, "", label_values, nullptr, FormatDouble(child.value()), out);
}

void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const IntCounter& child, std::string* out) {
  AppendSample(family, "", label_values, nullptr, std::to_string(child.value()), out);
}

void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Gauge& child, std::string* out) {
  AppendSample(family, "", label_values, nullptr, FormatDouble(child.value()), out);
}

void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Histogram& child, std::string* out) {
  const Histogram::Snapshot snapshot = child.TakeSnapshot();
  const std::vector<double>& bounds = child.upper_bounds();
  for (size_t i = 0; i <= bounds.size(); ++i) {
    const std::string le = i < bounds.size() ? FormatDouble(bounds[i]) : "+Inf";
    AppendSample(family, "_bucket", label_values, &le, std::to_string(snapshot.cumulative_counts[i]), out);
  }
  AppendSample(family, "_sum", label_values, nullptr, FormatDouble(snapshot.sum), out);
  AppendSample(family, "_count", label_values, nullptr, std::to_string(snapshot.count), out);
}

}  // namespace internal

Status Registry::Reserve(const std::string& name, const std::vector<std::string>& label_names,
                         MetricType type) {
  if (!IsValidName(name, /*allow_colon=*/true)) {
    return Status::InvalidArgument(fmt::format(
        "metric \"{}\": invalid metric name (want [a-zA-Z_:][a-zA-Z0-9_:]*, not starting with \"__\")",
        EscapeLabelValue(name)));
  }
  std::set<std::string> seen;
  for (const std::string& label : label_names) {
    if (!IsValidName(label, /*allow_colon=*/false)) {
      return Status::InvalidArgument(fmt::format(
          "metric {}: invalid label name \"{}\" (want [a-zA-Z_][a-zA-Z0-9_]*, not starting with \"__\")",
          name, EscapeLabelValue(label)));
    }
    if (type == MetricType::kHistogram && label == "le") {
      return Status::InvalidArgument(fmt::format("metric {}: label \"le\" is reserved for histogram buckets", name));
    }
    if (!seen.insert(label).second) {
      return Status::InvalidArgument(fmt::format("metric {}: label \"{}\" appears twice", name, label));
    }
  }
  std::vector<std::string> written = {name};
  if (type == MetricType::kHistogram) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) written.push_back(name + suffix);
  }
  for (const std::string& sample_name : written) {
    if (taken_names_.count(sample_name) > 0) {
      return Status::InvalidArgument(fmt::format(
          "metric {}: name {} is already registered (as a family or a histogram's sample)", name, sample_name));
    }
  }
  taken_names_.insert(written.begin(), written.end());
  return Status::Ok();
}

namespace {

// Reserves the names, then creates and stores a Family<T> whose children come from make_child.
template <typename T>
Result<Family<T>*> AddFamily(std::map<std::string, std::unique_ptr<FamilyBase>>* families,
                             const FamilyBase::Key& key, const std::string& name, const std::string& help,
                             std::vector<std::string> label_names, MetricType type,
                             std::function<std::unique_ptr<T>()> make_child) {
  auto family = std::make_unique<Family<T>>(key, name, help, std::move(label_names), type, std::move(make_child));
  Family<T>* raw = family.get();
  (*families)[name] = std::move(family);
  return raw;
}

}  // namespace

Result<CounterFamily*> Registry::AddCounter(const std::string& name, const std::string& help,
                                            std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  ZM_RETURN_IF_ERROR(Reserve(name, label_names, MetricType::kCounter));
  return AddFamily<Counter>(&families_, FamilyBase::Key(), name, help, std::move(label_names),
                            MetricType::kCounter, [] { return std::make_unique<Counter>(); });
}

Result<IntCounterFamily*> Registry::AddIntCounter(const std::string& name, const std::string& help,
                                                  std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  ZM_RETURN_IF_ERROR(Reserve(name, label_names, MetricType::kCounter));
  return AddFamily<IntCounter>(&families_, FamilyBase::Key(), name, help, std::move(label_names),
                               MetricType::kCounter, [] { return std::make_unique<IntCounter>(); });
}

Result<GaugeFamily*> Registry::AddGauge(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  ZM_RETURN_IF_ERROR(Reserve(name, label_names, MetricType::kGauge));
  return AddFamily<Gauge>(&families_, FamilyBase::Key(), name, help, std::move(label_names),
                          MetricType::kGauge, [] { return std::make_unique<Gauge>(); });
}

Result<HistogramFamily*> Registry::AddHistogram(const std::string& name, const std::string& help,
                                                std::vector<std::string> label_names,
                                                std::vector<double> upper_bounds) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i])) {
      return Status::InvalidArgument(fmt::format(
          "metric {}: bucket bound {} is {} (bounds must be finite; the +Inf bucket is implicit)", name, i,
          FormatDouble(upper_bounds[i])));
    }
    if (i > 0 && !(upper_bounds[i] > upper_bounds[i - 1])) {
      return Status::InvalidArgument(fmt::format(
          "metric {}: bucket bounds must be strictly increasing; bound {} is {} after {}", name, i,
          FormatDouble(upper_bounds[i]), FormatDouble(upper_bounds[i - 1])));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  ZM_RETURN_IF_ERROR(Reserve(name, label_names, MetricType::kHistogram));
  return AddFamily<Histogram>(&families_, FamilyBase::Key(), name, help, std::move(label_names),
                              MetricType::kHistogram,
                              [upper_bounds] { return std::make_unique<Histogram>(upper_bounds); });
}

std::string Registry::Serialize() const {
  std::string out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, family] : families_) family->AppendText(&out);
  return out;
}

}  // namespace zipmoe::metrics
