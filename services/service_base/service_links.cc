// The link security of one service process (see services/service_base/service_links.h).
#include "services/service_base/service_links.h"

#include <optional>

#include <fmt/format.h>

#include "services/service_base/service_config.h"

namespace zipmoe::runtime {

std::vector<ServiceEndpoint> EndpointsOf(const ServiceConfig& c, const std::string& service) {
  const ServiceEndpoint cache_manager{"endpoints.cache_manager", c.endpoint_cache_manager, service == "cache-manager"};
  const ServiceEndpoint scheduler{"endpoints.scheduler", c.endpoint_scheduler, service == "scheduler"};
  const ServiceEndpoint workers{"endpoints.workers", c.endpoint_workers, service == "scheduler"};
  if (service == "cache-manager") return {cache_manager};
  if (service == "scheduler") return {scheduler, workers, cache_manager};
  if (service == "storage" || service == "decompressor") return {workers};
  if (service == "executor") return {scheduler};
  return {scheduler, workers, cache_manager};
}

Result<bool> DeploymentNeedsCurve(const ServiceConfig& c) {
  ZM_ASSIGN_OR_RETURN(messaging::LinkSecurityMode mode,
                      messaging::ParseLinkSecurityMode(c.link_security_mode, "link_security.mode"));
  for (const ServiceEndpoint& e : EndpointsOf(c, "up")) {
    if (messaging::EndpointNeedsCurve(e.url, mode)) return true;
  }
  return false;
}

Result<messaging::LinkSecurity> LinkSecurityOf(const ServiceConfig& c, const std::string& service,
                                               const std::function<void(const std::string&)>& log) {
  messaging::LinkSecurity security;
  ZM_ASSIGN_OR_RETURN(security.mode, messaging::ParseLinkSecurityMode(c.link_security_mode, "link_security.mode"));
  std::optional<ServiceEndpoint> needs;  // the first endpoint that needs CURVE
  for (const ServiceEndpoint& e : EndpointsOf(c, service)) {
    if (security.NeedsCurve(e.url)) {
      if (!needs.has_value()) needs = e;
    } else if (security.mode == messaging::LinkSecurityMode::kOff && e.url.rfind("tcp://", 0) == 0 &&
               !messaging::IsLoopbackTcp(e.url) && log) {
      log(fmt::format("W: {} = {} is not loopback and link_security.mode is off: its messages travel unauthenticated "
                      "and in plaintext (docs/messaging.md \"Link security\")", e.key, e.url));
    }
  }
  if (!needs.has_value()) return security;
  Result<messaging::CurveKeyPair> keys = messaging::LoadCurveKeyFile(c.link_security_key_file);
  if (!keys.ok()) {
    return keys.status().WithContext(fmt::format(
        "link_security.key_file: {} = {} needs CURVE (link_security.mode {}), and the deployment's key pair is "
        "missing or unusable (make one with `zipmoe keygen --out {}` and give every service of the deployment "
        "the same file)",
        needs->key, needs->url, c.link_security_mode, c.link_security_key_file));
  }
  security.keys = std::move(keys).value();
  if (log) {
    std::string secured;
    for (const ServiceEndpoint& e : EndpointsOf(c, service)) {
      if (security.NeedsCurve(e.url)) secured += fmt::format("{}{} = {}", secured.empty() ? "" : ", ", e.key, e.url);
    }
    log(fmt::format("CURVE on {} (link_security.mode {}, key {})", secured, c.link_security_mode,
                    c.link_security_key_file));
  }
  return security;
}

Result<std::unique_ptr<messaging::LinkGuard>> StartLinkGuard(zmq::context_t& context,
                                                             messaging::LinkSecurity* security,
                                                             const std::function<void(const std::string&)>& log) {
  if (!security->keys.has_value()) return std::unique_ptr<messaging::LinkGuard>();
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<messaging::LinkGuard> guard,
                      messaging::LinkGuard::Start(context, {security->keys->public_key}, log));
  security->guard = guard.get();
  return guard;
}

}  // namespace zipmoe::runtime
