// Status and Result<T>: error values for zipmoe library code (style.md "Errors").
//
// A Status is OK or carries a code and a message that names the file, offset, tensor, layer and
// expert involved. Result<T> holds either a T or a non-OK Status. Both are cheap to move, not
// thread-safe to mutate concurrently, and must not be ignored ([[nodiscard]]).
//
// Macros: ZM_RETURN_IF_ERROR(expr) returns a non-OK Status from the enclosing function;
// ZM_ASSIGN_OR_RETURN(lhs, expr) unwraps a Result or returns its Status;
// ZM_CHECK(cond) << ... aborts with file and line on a broken invariant (never for bad input).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace zipmoe {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kCorruption = 3,
  kIoError = 4,
  kUnavailable = 5,
  kDeadlineExceeded = 6,
  kInternal = 7,
};

// Human-readable code name, e.g. "Corruption".
const char* StatusCodeName(StatusCode code);

// What an error message quotes of an input: `s` when at most `max_bytes` long, else its first
// max_bytes - 3 bytes (not splitting a UTF-8 character) + "...", so no message grows with its input.
std::string Clip(std::string_view s, size_t max_bytes = 80);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
  static Status IoError(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "Corruption: <message>" or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<prefix>: <message>" (same code).
  Status WithContext(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}                                  // NOLINT
  Result(Status status) : status_(std::move(status)) {                          // NOLINT
    if (status_.ok()) status_ = Status::Internal("Result constructed from OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

namespace internal {
// Streams a message, then aborts with file:line when destroyed (ZM_CHECK).
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* cond) {
    stream_ << file << ":" << line << ": check failed: " << cond << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::fprintf(stderr, "%s\n", stream_.str().c_str());
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};
}  // namespace internal

}  // namespace zipmoe

#define ZM_CONCAT_INNER(a, b) a##b
#define ZM_CONCAT(a, b) ZM_CONCAT_INNER(a, b)

#define ZM_RETURN_IF_ERROR(expr)                  \
  do {                                            \
    ::zipmoe::Status zm_status_ = (expr);         \
    if (!zm_status_.ok()) return zm_status_;      \
  } while (0)

#define ZM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

#define ZM_ASSIGN_OR_RETURN(lhs, expr) \
  ZM_ASSIGN_OR_RETURN_IMPL(ZM_CONCAT(zm_result_, __LINE__), lhs, expr)

#define ZM_CHECK(cond) \
  if (cond) {          \
  } else               \
    ::zipmoe::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()
