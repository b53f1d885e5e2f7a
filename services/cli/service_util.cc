#include "services/cli/service_util.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace zipmoe::cli {

TerminationSignals::TerminationSignals() {
  sigemptyset(&set_);
  sigaddset(&set_, SIGINT);
  sigaddset(&set_, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

void TerminationSignals::AlsoChildren() {
  sigaddset(&set_, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
}

int TerminationSignals::Wait(std::chrono::milliseconds timeout) {
  if (taken_ != 0) return taken_;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec wait{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  const int sig = sigtimedwait(&set_, nullptr, &wait);
  if (sig == SIGINT || sig == SIGTERM) {
    taken_ = sig;
    return sig;
  }
  return sig > 0 ? sig : 0;
}

void ServiceLog(const std::string& service, const std::string& line) {
  const std::string text = line.rfind("E: ", 0) == 0 ? fmt::format("E: {}: {}\n", service, line.substr(3))
                                                     : fmt::format("I: {}: {}\n", service, line);
  std::fwrite(text.data(), 1, text.size(), stderr);
}

std::function<void(const std::string&)> ServiceLogger(const std::string& service) {
  return [service](const std::string& line) { ServiceLog(service, line); };
}

std::string HostName() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "host";
  return buf;
}

}  // namespace zipmoe::cli
