// HTTP helpers for the CLI server tests (serve_cli_test.cc, up_cli_test.cc): a free TCP port, one
// request through curl, the payloads of a streamed (server-sent events) reply, whether a process is
// still alive, and a background `zipmoe serve`.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "tests/test_util.h"

namespace zipmoe::testing {

// The `data: ` payloads of a server-sent-events body, in order, up to `[DONE]` (not included). An
// event without its terminating blank line fails the test and ends the list.
inline std::vector<std::string> SsePayloads(const std::string& body) {
  std::vector<std::string> payloads;
  for (size_t pos = 0; (pos = body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "an event without its blank line at byte " << pos << ": " << body.substr(pos);
      break;
    }
    std::string payload = body.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (payload == "[DONE]") break;
    payloads.push_back(std::move(payload));
  }
  return payloads;
}

// A TCP port that was free a moment ago (bind to port 0, read it back, close).
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Sends `head` (request line and headers, nothing after the blank line) on a new loopback connection
// and returns what the server answers before it closes or `timeout_ms` passes.
inline std::string RawHeadOnly(int port, const std::string& head, int timeout_ms = 3000) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

struct HttpReply {
  int status = 0;  // 0 = no connection
  std::string body;
};

// One request through curl; the body travels in a file (no shell quoting). Concurrent calls need
// distinct `tag`s (they name the request/response files).
inline HttpReply Http(const TempDir& tmp, int port, const std::string& method, const std::string& path,
                      const std::string& body = "", const std::string& api_key = "", const std::string& tag = "") {
  const std::string in = tmp.Sub("req" + tag + ".json");
  const std::string out = tmp.Sub("resp" + tag + ".out");
  std::remove(out.c_str());
  std::string cmd = fmt::format("curl -s -N -m 120 -o {} -w '%{{http_code}}' -X {} http://127.0.0.1:{}{}", out,
                                method, port, path);
  if (!body.empty()) {
    WriteAll(in, body);
    cmd += fmt::format(" -H 'Content-Type: application/json' --data-binary @{}", in);
  }
  if (!api_key.empty()) cmd += fmt::format(" -H 'Authorization: Bearer {}'", api_key);
  HttpReply reply;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return reply;
  char buf[64] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, pipe);
  ::pclose(pipe);
  reply.status = std::atoi(std::string(buf, n).c_str());
  if (reply.status != 0) reply.body = ReadAll(out);
  return reply;
}

inline bool Alive(int pid) {
  if (::kill(pid, 0) != 0) return false;
  // A reparented child may linger as a zombie if nothing reaps it: that counts as exited.
  FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return false;
  char line[512] = {0};
  const size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  const std::string stat(line, n);
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Starts `zipmoe serve <args>` in the background and waits for GET /health 200; kills it on scope exit.
class ServeProcess {  // one per test; not thread-safe
 public:
  ServeProcess(const TempDir& tmp, const std::string& args) : tmp_(tmp), port_(FreePort()) {
    log_ = tmp.Sub("serve2.log");
    const std::string pid_file = tmp.Sub("serve2.pid");
    auto start = RunCli(fmt::format("serve {} --port {} > {} 2>&1 & echo $! > {}", args, port_, log_, pid_file));
    pid_ = start.exit_code == 0 ? std::atoi(ReadAll(pid_file).c_str()) : 0;
    HttpReply health;
    for (int i = 0; i < 600 && pid_ > 0 && health.status != 200 && Alive(pid_); ++i) {
      health = Http(tmp_, port_, "GET", "/health");
      if (health.status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    healthy_ = health.status == 200;
  }
  ~ServeProcess() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }
  bool healthy() const { return healthy_; }
  int port() const { return port_; }
  std::string log() const { return ReadAll(log_); }

 private:
  const TempDir& tmp_;
  int port_ = 0;
  int pid_ = 0;
  std::string log_;
  bool healthy_ = false;
};

}  // namespace zipmoe::testing
