// MetricsServer: registry, /metrics endpoint with port search, and the file_sd target file.
#include "common/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include "common/file_util.h"

namespace zipmoe::metrics {
namespace {

constexpr int kMaxPort = 65535;
constexpr std::size_t kExposerThreads = 2;  // civetweb workers; a scrape is one short request
// civetweb's master thread polls the listening socket in 2 s quanta and reads its stop flag only
// between them, so stopping an idle Exposer takes up to 2 s. A connection wakes it: while the
// Exposer stops, the destructor connects to the port at this interval.
constexpr auto kStopWakeInterval = std::chrono::milliseconds(20);

bool ValidServiceName(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// "host:port", with IPv6 literals in brackets ("[::1]:9100"), as civetweb and Prometheus expect.
std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string ResolveTargetHost(const MetricsServerConfig& config) {
  if (!config.sd_target_host.empty()) return config.sd_target_host;
  if (config.host == "0.0.0.0" || config.host.empty()) return "127.0.0.1";
  if (config.host == "::") return "::1";
  return config.host;
}

Status Validate(const MetricsServerConfig& config) {
  if (config.port < 0 || config.port > kMaxPort) {
    return Status::InvalidArgument(fmt::format("metrics server '{}': port {} outside 0..{}", config.service,
                                               config.port, kMaxPort));
  }
  if (config.port_search < 1) {
    return Status::InvalidArgument(
        fmt::format("metrics server '{}': port_search {} < 1", config.service, config.port_search));
  }
  if (!config.service.empty() && !ValidServiceName(config.service)) {
    return Status::InvalidArgument(
        fmt::format("metrics server: service name '{}' is not [A-Za-z0-9._-]+", config.service));
  }
  if (!config.sd_dir.empty() && config.service.empty()) {
    return Status::InvalidArgument(
        fmt::format("metrics server: sd_dir '{}' needs a service name (it names the sd file)", config.sd_dir));
  }
  return Status::Ok();
}

// Opens and closes one TCP connection to host:port (IPv4/IPv6 literal; wildcards mean loopback).
// Best effort: any failure is ignored (the stop then just takes civetweb's full poll quantum).
void PokePort(const std::string& host, int port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  const std::string target = host == "0.0.0.0" || host.empty() ? "127.0.0.1" : host == "::" ? "::1" : host;
  if (::inet_pton(AF_INET, target.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, target.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof(sockaddr_in6);
  } else {
    return;
  }
  // Non-blocking with a bounded wait: a full accept queue must not stall the destructor.
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return;
  // The result does not matter: a refused or accepted connection both end the master's poll.
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0 && errno == EINPROGRESS) {
    pollfd pfd{fd.get(), POLLOUT, 0};
    (void)::poll(&pfd, 1, static_cast<int>(kStopWakeInterval.count()));
  }
}

// Destroys `exposer` (civetweb mg_stop: joins its threads), waking its master thread meanwhile.
void StopExposer(std::unique_ptr<prometheus::Exposer> exposer, const std::string& host, int port) {
  std::mutex mu;
  std::condition_variable cv;
  bool stopped = false;  // guarded by mu
  std::thread waker;
  try {
    waker = std::thread([&] {
      std::unique_lock<std::mutex> lock(mu);
      while (!stopped) {
        lock.unlock();
        PokePort(host, port);
        lock.lock();
        cv.wait_for(lock, kStopWakeInterval, [&] { return stopped; });
      }
    });
  } catch (const std::system_error&) {
    // No thread: the stop just takes civetweb's poll quantum.
  }
  exposer.reset();
  {
    std::lock_guard<std::mutex> lock(mu);
    stopped = true;
  }
  cv.notify_one();
  if (waker.joinable()) waker.join();
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerConfig& config) {
  ZM_RETURN_IF_ERROR(Validate(config));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->config_ = config;
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->target_host_ = ResolveTargetHost(config);

  if (config.port > 0) {
    const int last = std::min(kMaxPort, config.port + config.port_search - 1);
    std::string last_error;
    for (int port = config.port; port <= last && server->exposer_ == nullptr; ++port) {
      // Exposer's constructor throws (CivetException, a std::runtime_error) when civetweb cannot
      // bind; the exception stops here (style.md "Exceptions only at boundaries").
      try {
        auto exposer = std::make_unique<prometheus::Exposer>(HostPort(config.host, port), kExposerThreads);
        const std::vector<int> ports = exposer->GetListeningPorts();
        exposer->RegisterCollectable(server->registry_, "/metrics");
        server->port_ = ports.empty() ? port : ports.front();
        server->exposer_ = std::move(exposer);
      } catch (const std::exception& e) {
        last_error = e.what();
      }
    }
    if (server->exposer_ == nullptr) {
      return Status::Unavailable(fmt::format(
          "metrics server '{}': no port of {}..{} on {} could be bound (all busy?); last error: {}",
          config.service, config.port, last, config.host, last_error));
    }
  }

  if (!config.sd_dir.empty() && server->exposer_ != nullptr) {
    ZM_RETURN_IF_ERROR(CreateDirectories(config.sd_dir).WithContext("metrics server sd_dir"));
    const std::string pid = std::to_string(static_cast<long>(::getpid()));
    const std::string path = JoinPath(config.sd_dir, config.service + "-" + pid + ".json");
    nlohmann::json group = {
        {"targets", nlohmann::json::array({HostPort(server->target_host_, server->port_)})},
        {"labels", {{"service", config.service}, {"pid", pid}}},
    };
    const std::string text = nlohmann::json::array({group}).dump() + "\n";
    ZM_RETURN_IF_ERROR(WriteFileAtomic(path, text).WithContext("metrics server sd file"));
    server->sd_path_ = path;
  }

  std::fprintf(stderr, "%s",
               fmt::format("I: {}: metrics {}{}\n", config.service.empty() ? "metrics" : config.service,
                           server->exposer_ ? "at " + server->url() : std::string("registry only (no endpoint)"),
                           server->sd_path_.empty() ? "" : ", sd file " + server->sd_path_)
                   .c_str());
  return server;
}

MetricsServer::~MetricsServer() {
  // The sd file goes first, so Prometheus stops scraping before the endpoint disappears.
  if (!sd_path_.empty() && ::unlink(sd_path_.c_str()) != 0 && errno != ENOENT) {
    std::fprintf(stderr, "W: %s: cannot remove sd file %s: %s\n", config_.service.c_str(), sd_path_.c_str(),
                 std::strerror(errno));
  }
  // Stops civetweb and joins its threads before the registry goes.
  if (exposer_ != nullptr) StopExposer(std::move(exposer_), config_.host, port_);
}

prometheus::Registry& MetricsServer::registry() { return *registry_; }

std::string MetricsServer::url() const {
  if (port_ == 0) return "";
  return fmt::format("http://{}/metrics", HostPort(target_host_, port_));
}

}  // namespace zipmoe::metrics
