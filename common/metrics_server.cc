// MetricsServer: registry, /metrics endpoint with port search, and the file_sd target file.
#include "common/metrics_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <system_error>
#include <thread>

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "common/file_util.h"

namespace zipmoe::metrics {
namespace {

constexpr int kMaxPort = 65535;
constexpr std::size_t kHttpThreads = 2;  // HTTP workers; a scrape is one short request
// Prometheus text exposition format 0.0.4.
constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

bool ValidServiceName(const std::string& name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// "host:port", with IPv6 literals in brackets ("[::1]:9100"), as Prometheus expects.
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

}  // namespace

// The HTTP endpoint: a cpp-httplib server (std::thread workers, default stack size) listening on
// `thread`. prometheus-cpp's own Exposer is not used: Debian's civetweb gives its threads a fixed
// 100 KiB stack, smaller than the static TLS of a process that links libtorch, so it cannot start
// inside the `zipmoe` binary.
struct MetricsServer::Endpoint {
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> done{false};  // listen_after_bind returned
};

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerConfig& config) {
  ZM_RETURN_IF_ERROR(Validate(config));
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->config_ = config;
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->target_host_ = ResolveTargetHost(config);

  if (config.port > 0) {
    const int last = std::min(kMaxPort, config.port + config.port_search - 1);
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->http.new_task_queue = [] { return new httplib::ThreadPool(kHttpThreads); };
    // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, which would let two replicas
    // bind the same port and defeat the port search.
    endpoint->http.set_socket_options([](int sock) {
      const int yes = 1;
      (void)::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    std::weak_ptr<prometheus::Registry> weak = server->registry_;
    endpoint->http.Get("/metrics", [weak](const httplib::Request&, httplib::Response& res) {
      const std::shared_ptr<prometheus::Registry> registry = weak.lock();
      if (registry == nullptr) {
        res.status = 503;
        return;
      }
      std::ostringstream text;
      prometheus::TextSerializer().Serialize(text, registry->Collect());
      res.set_content(text.str(), kContentType);
    });
    int bound = 0;
    for (int port = config.port; port <= last && bound == 0; ++port) {
      if (endpoint->http.bind_to_port(config.host, port)) bound = port;
    }
    if (bound == 0) {
      return Status::Unavailable(
          fmt::format("metrics server '{}': no port of {}..{} on {} could be bound (all busy, or not an address "
                      "of this host?)",
                      config.service, config.port, last, config.host));
    }
    Endpoint* e = endpoint.get();
    try {
      endpoint->thread = std::thread([e] {
        e->http.listen_after_bind();
        e->done.store(true, std::memory_order_release);
      });
    } catch (const std::system_error& err) {
      return Status::Unavailable(fmt::format("metrics server '{}': cannot start its HTTP thread: {}",
                                             config.service, err.what()));
    }
    server->port_ = bound;
    server->endpoint_ = std::move(endpoint);
  }

  if (!config.sd_dir.empty() && server->endpoint_ != nullptr) {
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
                           server->endpoint_ ? "at " + server->url() : std::string("registry only (no endpoint)"),
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
  // Stops the endpoint and joins its threads before the registry goes.
  if (endpoint_ != nullptr) {
    // stop() only acts once the listener runs: wait for it (or for its early exit) first.
    while (!endpoint_->http.is_running() && !endpoint_->done.load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    endpoint_->http.stop();
    endpoint_->thread.join();
  }
}

prometheus::Registry& MetricsServer::registry() { return *registry_; }

std::string MetricsServer::url() const {
  if (port_ == 0) return "";
  return fmt::format("http://{}/metrics", HostPort(target_host_, port_));
}

}  // namespace zipmoe::metrics
