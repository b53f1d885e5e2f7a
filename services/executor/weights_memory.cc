#include "services/executor/weights_memory.h"

#include <fmt/format.h>

namespace zipmoe::executor {

namespace {

// "7.00 GiB" from 1 GiB on, "3.4 MiB" below.
std::string Size(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (kMiB * 1024.0));
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB);
}

}  // namespace

std::string WeightsMemoryLine(const WeightsMemoryStats& stats) {
  if (stats.anonymous_bytes == 0 && stats.mapped_bytes == 0) return std::string();
  std::string line = fmt::format("I: weights: {} in anonymous memory, {} mapped from the files",
                                 Size(stats.anonymous_bytes), Size(stats.mapped_bytes));
  if (stats.files_left_mapped > 0)
    line += fmt::format(" ({} file(s) left mapped: a copy would not leave 1 GiB of MemAvailable)", stats.files_left_mapped);
  return line + "\n";
}

}  // namespace zipmoe::executor
