// Helpers of the service metrics tests (service_metrics_test.cc,
// service_metrics_scheduler_executor_test.cc, service_metrics_exposition_test.cc): a MetricsServer on a
// free port, a scrape over HTTP, the exposition's samples, lines and bucket bounds, and a cache
// counters snapshot.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include "common/metrics_server.h"
#include "services/service_base/service_metrics.h"

namespace zipmoe::metrics::test {

using cache_manager::CacheCounters;
using cache_manager::Pool;
using cache_manager::PoolIndex;

// A TCP port that was free a moment ago; MetricsServer searches onwards if it is taken meanwhile.
inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

inline std::unique_ptr<MetricsServer> StartServer() {
  MetricsServerConfig config;
  config.service = "test";
  config.port = FreePort();
  auto server = MetricsServer::Start(config);
  if (!server.ok()) {
    ADD_FAILURE() << server.status().ToString();
    return nullptr;
  }
  return std::move(server).value();
}

inline std::string Scrape(const MetricsServer& server) {
  httplib::Client client("127.0.0.1", server.port());
  client.set_connection_timeout(5);
  client.set_read_timeout(5);
  auto reply = client.Get("/metrics");
  if (!reply) {
    ADD_FAILURE() << "no HTTP reply from " << server.url() << ": " << httplib::to_string(reply.error());
    return "";
  }
  EXPECT_EQ(reply->status, 200);
  return reply->body;
}

// prometheus-cpp prints bucket bounds with 16 significant digits, so the double nearest to 0.00064
// reads le="0.0006400000000000001". Returns the shortest text that parses to the same double
// ("0.00064"), so that tests can name bounds as docs/metrics.md does; "+Inf" stays.
inline std::string ShortestLe(const std::string& le) {
  if (le == "+Inf") return le;
  return fmt::format("{}", std::strtod(le.c_str(), nullptr));
}

// `line` with its le="..." label (if any) rewritten by ShortestLe.
inline std::string NormalizeLe(const std::string& line) {
  const size_t start = line.find("le=\"");
  if (start == std::string::npos) return line;
  const size_t value = start + 4;
  const size_t end = line.find('"', value);
  return line.substr(0, value) + ShortestLe(line.substr(value, end - value)) + line.substr(end);
}

// Sample lines of the exposition: "name{labels}" -> value text (comments skipped; le normalized).
inline std::map<std::string, std::string> Samples(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space != std::string::npos) out[NormalizeLe(line.substr(0, space))] = line.substr(space + 1);
  }
  return out;
}

// Whether `text` has a line exactly equal to `line`.
inline bool HasLine(const std::string& text, const std::string& line) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text.compare(pos, end - pos, line) == 0) return true;
    pos = end + 1;
  }
  return false;
}

// The `le` bounds (ShortestLe) of `name_bucket{<labels>le=...}` lines in order (labels: "" or
// `kind="E",`).
inline std::vector<std::string> BucketBounds(const std::string& text, const std::string& name, const std::string& labels) {
  std::vector<std::string> out;
  const std::string prefix = name + "_bucket{" + labels + "le=\"";
  for (size_t pos = text.find(prefix); pos != std::string::npos; pos = text.find(prefix, pos + 1)) {
    const size_t start = pos + prefix.size();
    out.push_back(ShortestLe(text.substr(start, text.find('"', start) - start)));
  }
  return out;
}

// Expects the sample `series` (exact "name{labels}") to have the value text `value`.
inline void ExpectSample(const std::map<std::string, std::string>& samples, const std::string& series,
                         const std::string& value, int line) {
  SCOPED_TRACE(::testing::Message() << "line " << line << ": " << series);
  const auto it = samples.find(series);
  if (it == samples.end()) {
    ADD_FAILURE() << "no sample " << series;
  } else {
    EXPECT_EQ(it->second, value);
  }
}
#define EXPECT_SAMPLE(samples, series, value) ::zipmoe::metrics::test::ExpectSample((samples), (series), (value), __LINE__)

// One snapshot: layer_requests[l] in CompressionState order {M, E, S, C, F}; resident bytes by pool.
inline CacheCounters Snapshot(std::vector<std::array<uint64_t, 5>> layers, uint64_t f_bytes, uint64_t c_bytes,
                              uint64_t s_bytes, uint64_t e_bytes) {
  CacheCounters c;
  for (const auto& l : layers) {
    for (uint64_t v : l) c.lookups += v;
    c.misses += l[0];
  }
  c.layer_requests = std::move(layers);
  c.pools[PoolIndex(Pool::kF)].resident_bytes = f_bytes;
  c.pools[PoolIndex(Pool::kC)].resident_bytes = c_bytes;
  c.pools[PoolIndex(Pool::kS)].resident_bytes = s_bytes;
  c.pools[PoolIndex(Pool::kE)].resident_bytes = e_bytes;
  return c;
}

}  // namespace zipmoe::metrics::test
