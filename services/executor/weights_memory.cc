#include "services/executor/weights_memory.h"

#include <utility>

#include <fmt/format.h>

#include "common/thread_name.h"
#include "common/thread_priority.h"

namespace zipmoe::executor {

namespace {

// "7.00 GiB" from 1 GiB on, "3.4 MiB" below.
std::string Size(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (kMiB * 1024.0));
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB);
}

}  // namespace

const char* WeightsMemoryName(WeightsMemory memory) {
  switch (memory) {
    case WeightsMemory::kMapped: return "mapped";
    case WeightsMemory::kAnonymous: return "anonymous";
    case WeightsMemory::kBackground: return "background";
  }
  return "unknown";
}

Result<WeightsMemory> ParseWeightsMemory(const std::string& text, const std::string& what) {
  for (WeightsMemory m : {WeightsMemory::kMapped, WeightsMemory::kAnonymous, WeightsMemory::kBackground})
    if (text == WeightsMemoryName(m)) return m;
  return Status::InvalidArgument(
      fmt::format("{}: '{}' is not a weights memory (expected background, mapped or anonymous)", what, Clip(text)));
}

std::string WeightsMemoryLine(const WeightsMemoryStats& stats) {
  if (stats.anonymous_bytes == 0 && stats.mapped_bytes == 0) return std::string();
  std::string line = fmt::format("I: weights: {} in anonymous memory, {} mapped from the files",
                                 Size(stats.anonymous_bytes), Size(stats.mapped_bytes));
  if (stats.pending_bytes > 0) line += fmt::format(" ({} queued for the copy in the background)", Size(stats.pending_bytes));
  if (stats.background_seconds > 0) line += fmt::format(" (copied in the background in {:.1f} s)", stats.background_seconds);
  if (stats.files_left_mapped > 0)
    line += fmt::format(" ({} file(s) left mapped: a copy would not leave 1 GiB of memory headroom)", stats.files_left_mapped);
  return line + "\n";
}

BackgroundWeightsCopy::BackgroundWeightsCopy(std::vector<File> files, WeightsMemoryStats initial,
                                             std::function<int64_t()> headroom)
    : files_(std::move(files)), headroom_(std::move(headroom)) {
  {
    MutexLock lock(&mu_);
    stats_ = initial;
    stats_.pending_bytes = 0;
    for (const File& f : files_) stats_.pending_bytes += f.bytes;
  }
  thread_ = std::thread([this] { Run(); });
}

BackgroundWeightsCopy::~BackgroundWeightsCopy() {
  cancel_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

WeightsMemoryStats BackgroundWeightsCopy::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

bool BackgroundWeightsCopy::Wait(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  return done_cv_.WaitFor(&lock, timeout, [&]() ZM_REQUIRES(mu_) { return done_; });
}

void BackgroundWeightsCopy::Run() {
  SetCurrentThreadName("zm-weights-copy");
  (void)LowerThreadToIdle();  // best effort: without SCHED_IDLE it still copies, at normal priority
  const auto t0 = std::chrono::steady_clock::now();
  for (const File& f : files_) {
    bool copied = false;
    if (!cancel_.load(std::memory_order_relaxed) && headroom_() >= f.bytes + kAnonymousWeightsReserveBytes)
      copied = f.copy(&cancel_).ok();
    MutexLock lock(&mu_);
    stats_.pending_bytes -= f.bytes;
    if (copied) {
      stats_.anonymous_bytes += f.bytes;
      stats_.mapped_bytes -= f.bytes;
    } else if (!cancel_.load(std::memory_order_relaxed)) {
      ++stats_.files_left_mapped;
    }
  }
  MutexLock lock(&mu_);
  stats_.background_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done_ = true;
  done_cv_.NotifyAll();
}

}  // namespace zipmoe::executor
