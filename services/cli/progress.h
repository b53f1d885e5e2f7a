// A one-line progress bar on stderr, drawn only when stderr is a terminal. Not thread-safe: call
// from one thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace zipmoe::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), enabled_(::isatty(STDERR_FILENO) == 1) {}
  ~ProgressBar() { Finish(); }

  // `extra` is printed after the counts, e.g. "312 MB/s".
  void Update(int64_t done, int64_t total, const std::string& extra = "") {
    if (!enabled_ || total <= 0) return;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), ' ');
    std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %s", label_.c_str(), bar.c_str(),
                 static_cast<int>(100 * done / total), static_cast<long long>(done), static_cast<long long>(total),
                 extra.c_str());
    std::fflush(stderr);
    drawn_ = true;
  }
  void Finish() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }
  double elapsed_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace zipmoe::cli
