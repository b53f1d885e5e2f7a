#include "services/executor/weights_memory.h"

#include <fmt/format.h>

namespace zipmoe::executor {

std::string WeightsMemoryLine(const WeightsMemoryStats& stats) {
  if (stats.anonymous_bytes == 0 && stats.mapped_bytes == 0) return std::string();
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::string line = fmt::format("I: weights: {:.2f} GiB in anonymous memory, {:.2f} GiB mapped from the files",
                                 static_cast<double>(stats.anonymous_bytes) / kGiB,
                                 static_cast<double>(stats.mapped_bytes) / kGiB);
  if (stats.files_left_mapped > 0)
    line += fmt::format(" ({} file(s) left mapped: a copy would not leave 1 GiB of MemAvailable)", stats.files_left_mapped);
  return line + "\n";
}

}  // namespace zipmoe::executor
