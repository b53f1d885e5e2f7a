// A small, dependency-free Prometheus metrics registry (docs/metrics.md; issue 5 item 5).
//
// Spec followed: the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), served with kContentType:
//   # HELP <name> <help, with '\' and newline escaped as \\ and \n>
//   # TYPE <name> counter|gauge|histogram
//   <name>{<label>="<value, with '\', '"' and newline escaped>",...} <value>
// Names follow the Prometheus data model: metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]*. Names beginning with "__" are reserved and rejected for both.
//
// Structure. A Registry owns families; a family has a name, help text and a fixed list of label
// names, and owns one child per distinct list of label values:
//   Counter      monotonic double (seconds, bytes, ...)          family type "counter"
//   IntCounter   monotonic uint64 (events, tokens), exact        family type "counter"
//   Gauge        double that can be Set/Add'ed                    family type "gauge"
//   Histogram    fixed upper bounds; cumulative <name>_bucket{le="..."} including le="+Inf",
//                <name>_sum and <name>_count                      family type "histogram"
//   auto fam = registry.AddIntCounter("zipmoe_cache_requests_total", "...", {"pool", "layer"});
//   IntCounter* c = fam.value()->WithLabels({"F", "3"}).value();   // created on first use
//   c->Increment();
// A family without labels has its single child from the start (exported as 0 until updated);
// a labelled family is omitted from Serialize() until its first WithLabels.
//
// Ownership. Registry owns families and families own children; the Family* and child pointers
// handed out never own anything and stay valid (same address) for the Registry's lifetime.
// Callers on hot paths keep the child pointer instead of calling WithLabels per update.
//
// Thread-safety. Everything is safe to call concurrently from any thread. Child updates are
// lock-free relaxed atomics (a CAS loop for doubles). WithLabels takes the family's mutex; Add*
// and Serialize take the registry's mutex (then each family's, in that order). Serialize reads
// each atomic once: a histogram's buckets, +Inf bucket and _count always agree (the count is
// derived from the buckets), but _sum may lag or lead them by observations in flight.
//
// Errors are values (common/status.h): kInvalidArgument naming the metric for a bad name, bad
// label list, wrong label count, bad bucket bounds or a duplicate name. No exceptions.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace zipmoe::metrics {

// HTTP Content-Type of Serialize()'s output (text format 0.0.4).
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

enum class MetricType : uint8_t { kCounter, kGauge, kHistogram };
// "counter", "gauge" or "histogram", as written on the # TYPE line.
const char* MetricTypeName(MetricType type);

// A monotonic double counter. Increment ignores a negative or NaN delta (a counter never goes down).
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;
  void Increment(double delta = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// A monotonic uint64 counter (wraps modulo 2^64, like any uint64). Printed as an exact integer.
class IntCounter {
 public:
  IntCounter() = default;
  IntCounter(const IntCounter&) = delete;
  IntCounter& operator=(const IntCounter&) = delete;
  void Increment(uint64_t delta = 1) { value_.fetch_add(delta, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A double that goes up and down (queue depth, resident bytes). Any value, NaN and ±Inf included.
class Gauge {
 public:
  Gauge() = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double delta);  // negative to decrease
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations v into the first bucket with v <= upper_bounds[i], else into +Inf, and
// adds v to the sum. A NaN observation is dropped (it would poison _sum forever); ±Inf is counted
// (+Inf only in the +Inf bucket) and makes _sum infinite, as in the Prometheus client libraries.
class Histogram {
 public:
  // upper_bounds: strictly increasing and finite (validated by Registry::AddHistogram).
  explicit Histogram(std::vector<double> upper_bounds);
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;
  void Observe(double value);

  struct Snapshot {
    std::vector<uint64_t> cumulative_counts;  // [n_bounds + 1]: observations <= bound i; last is +Inf
    double sum = 0.0;
    uint64_t count = 0;                       // == cumulative_counts.back()
  };
  Snapshot TakeSnapshot() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  std::vector<std::atomic<uint64_t>> bucket_counts_;  // [n_bounds + 1], not cumulative
  std::atomic<double> sum_{0.0};
};

// `count` bounds start, start·factor, start·factor², ... (for latency histograms).
// Errors: kInvalidArgument unless start > 0, factor > 1 and count >= 1 (all finite).
Result<std::vector<double>> ExponentialBuckets(double start, double factor, int count);

// Text-format pieces, exposed for tests and for the HTTP layer.
// Sample value: "NaN", "+Inf", "-Inf"; integral values with |v| < 2^63 as decimal integers (no
// exponent, "-0" for negative zero); otherwise the shortest decimal that parses back to the same
// double (std::to_chars), e.g. "0.1", "2.5e-07", "1e+300".
std::string FormatDouble(double value);
std::string EscapeLabelValue(const std::string& value);  // '\' → \\, '"' → \", newline → \n
std::string EscapeHelp(const std::string& help);         // '\' → \\, newline → \n

class Registry;

// The part of a family that does not depend on the child type.
class FamilyBase {
 public:
  virtual ~FamilyBase() = default;
  FamilyBase(const FamilyBase&) = delete;
  FamilyBase& operator=(const FamilyBase&) = delete;
  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  MetricType type() const { return type_; }
  // Appends # HELP, # TYPE and every child's samples, children in lexicographic order of their
  // label values (so layer "10" sorts before "2"); nothing when there is no child.
  virtual void AppendText(std::string* out) const = 0;

  // Only the Registry can build families (passkey; a user-provided constructor, so that `Key{}`
  // is not aggregate initialisation).
  class Key {
    Key() {}  // NOLINT(modernize-use-equals-default)
    friend class Registry;
  };

 protected:
  FamilyBase(std::string name, std::string help, std::vector<std::string> label_names,
             MetricType type);
  // kInvalidArgument naming the metric, its label names and the values when the count differs.
  Status CheckLabelCount(const std::vector<std::string>& label_values) const;
  void AppendHeader(std::string* out) const;

 private:
  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const MetricType type_;
};

namespace internal {
// Appends one child's sample lines (defined in metrics.cc for each child type).
void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Counter& child, std::string* out);
void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const IntCounter& child, std::string* out);
void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Gauge& child, std::string* out);
void AppendChild(const FamilyBase& family, const std::vector<std::string>& label_values,
                 const Histogram& child, std::string* out);
}  // namespace internal

template <typename T>
class Family final : public FamilyBase {
 public:
  Family(Key, std::string name, std::string help, std::vector<std::string> label_names,
         MetricType type, std::function<std::unique_ptr<T>()> make_child)
      : FamilyBase(std::move(name), std::move(help), std::move(label_names), type),
        make_child_(std::move(make_child)) {
    if (FamilyBase::label_names().empty()) children_.emplace(std::vector<std::string>{}, make_child_());
  }

  // The child for `label_values` (one per label name, in order; any UTF-8 text), created on first
  // use. The pointer is non-owning and stable for the Registry's lifetime.
  // Errors: kInvalidArgument (wrong number of values), naming the metric.
  Result<T*> WithLabels(const std::vector<std::string>& label_values) {
    Status status = CheckLabelCount(label_values);
    if (!status.ok()) return status;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = children_.find(label_values);
    if (it == children_.end()) it = children_.emplace(label_values, make_child_()).first;
    return it->second.get();
  }

  void AppendText(std::string* out) const override {
    std::lock_guard<std::mutex> lock(mu_);
    if (children_.empty()) return;
    AppendHeader(out);
    for (const auto& [values, child] : children_) internal::AppendChild(*this, values, *child, out);
  }

 private:
  const std::function<std::unique_ptr<T>()> make_child_;
  mutable std::mutex mu_;  // guards children_ (the map, not the children's values)
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

using CounterFamily = Family<Counter>;
using IntCounterFamily = Family<IntCounter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Each Add* validates, then creates the family. The Family* is non-owning and stable for the
  // Registry's lifetime. Errors (kInvalidArgument, naming the metric):
  //   - name not matching [a-zA-Z_:][a-zA-Z0-9_:]* or starting with "__";
  //   - a label name not matching [a-zA-Z_][a-zA-Z0-9_]*, starting with "__", or repeated;
  //   - the name, or a sample name it writes (a histogram also writes <name>_bucket, <name>_sum and
  //     <name>_count), equal to a family name or sample name already registered.
  Result<CounterFamily*> AddCounter(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names);
  Result<IntCounterFamily*> AddIntCounter(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names);
  Result<GaugeFamily*> AddGauge(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names);
  // upper_bounds: bucket upper bounds (same unit as the observations), strictly increasing and
  // finite; may be empty (only the +Inf bucket). The +Inf bucket is implicit. Additional errors:
  // a label named "le"; bounds not strictly increasing, NaN or infinite.
  Result<HistogramFamily*> AddHistogram(const std::string& name, const std::string& help,
                                        std::vector<std::string> label_names,
                                        std::vector<double> upper_bounds);

  // The whole registry in text format 0.0.4: families sorted by name, each "# HELP", "# TYPE",
  // then its samples; every line ends with '\n'. "" when no family has a child.
  std::string Serialize() const;

 private:
  // Validates names and reserves the sample names of a new family (mu_ held).
  Status Reserve(const std::string& name, const std::vector<std::string>& label_names,
                 MetricType type);

  mutable std::mutex mu_;  // guards families_ and taken_names_
  std::map<std::string, std::unique_ptr<FamilyBase>> families_;  // by family name
  std::set<std::string> taken_names_;  // family names and every sample name they write
};

}  // namespace zipmoe::metrics
