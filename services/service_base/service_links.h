// The link security of one service process (issue 43, item 3; docs/messaging.md "Link security"):
// which endpoints of the deployment's config it binds or connects to, whether they carry CURVE
// (link_security.mode), the key pair of link_security.key_file, and for a service that binds, the ZAP
// handler that vets its clients (common/ipc/link_guard.h). `zipmoe up` uses the same helpers to decide
// whether it writes a key pair for the deployment.
// Threads: callable from any thread (StartLinkGuard starts the guard's thread).
// Errors: Status values naming the config key, the key file and the endpoint that needs it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "common/ipc/link_guard.h"
#include "common/ipc/link_security.h"
#include "common/status.h"

namespace zipmoe::runtime {

struct ServiceConfig;

struct ServiceEndpoint {
  std::string key;  // endpoints.scheduler | endpoints.workers | endpoints.cache_manager
  std::string url;  // its value
  bool bind = false;  // this service binds it (else connects)
};

// The endpoints `service` uses: cache-manager binds endpoints.cache_manager; the scheduler binds
// endpoints.scheduler and endpoints.workers and connects to endpoints.cache_manager; storage and
// decompressors connect to endpoints.workers; the executor to endpoints.scheduler. "up" (or any other
// name): all three, none bound.
std::vector<ServiceEndpoint> EndpointsOf(const ServiceConfig& config, const std::string& service);

// Whether any endpoint of the deployment (all three) carries CURVE under link_security.mode.
// Errors: kInvalidArgument (a bad mode, naming link_security.mode).
Result<bool> DeploymentNeedsCurve(const ServiceConfig& config);

// The link security of `service`: link_security.mode, and the key pair of link_security.key_file
// when one of its endpoints needs CURVE (none: no keys are read). Logs a warning through `log` for
// each of its tcp:// endpoints off loopback that mode off leaves plaintext. Errors: kInvalidArgument
// (a bad mode); the key file's (LoadCurveKeyFile: missing, loose mode, malformed), with the key file,
// the endpoint that needs CURVE and how to make a key (zipmoe keygen) in the message.
Result<messaging::LinkSecurity> LinkSecurityOf(const ServiceConfig& config, const std::string& service,
                                               const std::function<void(const std::string&)>& log);

// For a service that binds: a LinkGuard on `context` allowing the deployment's public key, when
// security->keys is set (else nullptr, and nothing is started); security->guard then points at it.
// Refusals are logged through `log`. The guard must outlive the channels bound with *security and be
// destroyed before `context`. Errors: LinkGuard::Start's.
Result<std::unique_ptr<messaging::LinkGuard>> StartLinkGuard(zmq::context_t& context,
                                                             messaging::LinkSecurity* security,
                                                             const std::function<void(const std::string&)>& log);

}  // namespace zipmoe::runtime
