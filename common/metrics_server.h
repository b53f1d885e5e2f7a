// MetricsServer: one process's Prometheus registry and its `/metrics` pull endpoint (prometheus-cpp
// 1.0.1 Registry + TextSerializer, text format 0.0.4, served by cpp-httplib). The metric families themselves are registered by
// services/service_base/service_metrics.h; names, labels and buckets are fixed in docs/metrics.md.
//
// Start() binds the first free port of [port, port + port_search - 1], so scaled replicas on one host
// (docker compose --scale, several decompressors) each get their own endpoint without configuration.
// With a non-empty sd_dir it also writes a Prometheus file_sd target file
//   <sd_dir>/<service>-<pid>.json:  [{"targets":["<sd host>:<port>"],"labels":{"service":"<service>","pid":"<pid>"}}]
// atomically (temp file + rename), so a Prometheus with `file_sd_configs: [{files: [<sd_dir>/*.json]}]`
// discovers every replica; the destructor removes it.
//
// Ownership: the MetricsServer owns the registry, the HTTP endpoint (a listener + 2 worker threads,
// joined by the destructor) and the sd file. Metrics registered on registry() must not be used after the
// MetricsServer is destroyed.
// Thread-safety: registry() may be used from any thread (prometheus::Registry is thread-safe);
// port() and url() are constant after Start(). Start() and the destructor are not concurrent with
// anything else on the same object.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace zipmoe::metrics {

struct MetricsServerConfig {
  std::string service;             // "storage", "decompressor", "cache-manager", "scheduler", "executor":
                                   // the sd file name and its `service` label, log lines.
                                   // [A-Za-z0-9._-]+; required when sd_dir is set
  std::string host = "127.0.0.1";  // bind address (IPv4 or IPv6 literal, "0.0.0.0" = every interface)
  int port = 0;                    // first port tried; 0 = no HTTP endpoint (registry only, no sd file)
  int port_search = 64;            // ports tried: port .. port + port_search - 1 (capped at 65535), >= 1
  std::string sd_dir;              // "" = no sd file; else the directory of <service>-<pid>.json
                                   // (created if missing)
  std::string sd_target_host;      // host written into the sd target and url(); "" = `host`, except
                                   // "0.0.0.0" -> "127.0.0.1" and "::" -> "::1"
};

class MetricsServer {
 public:
  // Creates the registry, binds the endpoint (when config.port > 0) serving GET /metrics, writes the
  // sd file (when config.sd_dir is set) and logs one "I:" line to stderr.
  // Errors: kInvalidArgument (port outside 0..65535, port_search < 1, bad service name, sd_dir set
  // without a service); kUnavailable naming host and the port range when no port in it could be
  // bound; kIoError naming the path when sd_dir cannot be created or the sd file written.
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsServerConfig& config);
  ~MetricsServer();  // removes the sd file first, then stops the endpoint (joins its threads)
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The registry served on /metrics; lives as long as this object.
  prometheus::Registry& registry();
  int port() const { return port_; }              // bound port; 0 when there is no endpoint
  std::string url() const;                        // "http://<sd host>:<port>/metrics"; "" when port() == 0
  const std::string& sd_path() const { return sd_path_; }  // "" when no sd file was written
  const MetricsServerConfig& config() const { return config_; }

 private:
  struct Endpoint;  // the HTTP server and its thread (metrics_server.cc)
  MetricsServer() = default;

  // Constant after Start().
  MetricsServerConfig config_;
  // shared_ptr: the /metrics handler holds a weak_ptr to it.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Endpoint> endpoint_;  // null when config_.port == 0
  int port_ = 0;
  std::string target_host_;  // resolved sd_target_host
  std::string sd_path_;
};

}  // namespace zipmoe::metrics
