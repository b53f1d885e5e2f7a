// Progress of a long CLI command (compress, verify) on stderr. On a terminal: a one-line bar redrawn
// in place. Otherwise (docker logs, a redirected stderr): plain lines, one whenever another 10 % is
// done or kPlainInterval has passed since the last one, and one at 100 %, e.g.
//   compress: 40% 12/30 tensors, 301.2 MB, 312 MB/s, 3.1 s elapsed
// Not thread-safe: call from one thread.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace zipmoe::cli {

class ProgressBar {
 public:
  // Longest gap between two plain lines while work is being reported.
  static constexpr std::chrono::seconds kPlainInterval{5};

  explicit ProgressBar(std::string label) : ProgressBar(std::move(label), stderr, ::isatty(STDERR_FILENO) == 1) {}
  // `out` is not owned; `is_tty` picks the bar (true) or plain lines (false).
  ProgressBar(std::string label, std::FILE* out, bool is_tty) : label_(std::move(label)), out_(out), tty_(is_tty) {}
  ~ProgressBar() { Finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // `extra` is printed after the counts, e.g. "tensors, 301.2 MB, 312 MB/s".
  void Update(int64_t done, int64_t total, const std::string& extra = "") {
    if (total <= 0) return;
    const int percent = static_cast<int>(100 * done / total);
    if (!tty_) {
      const auto now = std::chrono::steady_clock::now();
      const bool step = percent / 10 > last_step_;
      const bool late = now - last_line_ >= kPlainInterval;
      const bool final = done >= total && !final_printed_;
      if (!step && !late && !final) return;
      std::fprintf(out_, "%s: %d%% %lld/%lld%s%s, %.1f s elapsed\n", label_.c_str(), percent,
                   static_cast<long long>(done), static_cast<long long>(total), extra.empty() ? "" : " ",
                   extra.c_str(), elapsed_seconds());
      std::fflush(out_);
      last_step_ = percent / 10;
      last_line_ = now;
      final_printed_ = final_printed_ || done >= total;
      return;
    }
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(kWidth * done / total);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), ' ');
    std::fprintf(out_, "\r%s [%s] %3d%% %lld/%lld %s", label_.c_str(), bar.c_str(), percent,
                 static_cast<long long>(done), static_cast<long long>(total), extra.c_str());
    std::fflush(out_);
    drawn_ = true;
  }
  // Ends the bar's line (terminal only); plain lines need no ending.
  void Finish() {
    if (drawn_) std::fprintf(out_, "\n");
    drawn_ = false;
  }
  double elapsed_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::string label_;
  std::FILE* out_;
  bool tty_;
  bool drawn_ = false;             // terminal: a bar is on the current line
  int last_step_ = -1;             // plain: tens of percent at the last line
  bool final_printed_ = false;     // plain: the 100 % line is out
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_line_ = start_;
};

}  // namespace zipmoe::cli
