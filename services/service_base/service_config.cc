#include "services/service_base/service_config.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <variant>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/ipc/link_security.h"
#include "common/ipc/messaging_channel.h"
#include "common/thread_priority.h"
#include "kernels/recovery.h"
#include "services/scheduler/request_grouping.h"
#include "services/scheduler/device_assignment.h"

namespace zipmoe::runtime {
namespace {

using nlohmann::json;
using Field = std::variant<std::string*, int64_t*, bool*>;

std::vector<std::pair<std::string, Field>> Fields(ServiceConfig& c) {
  return {
      {"model_dir", &c.model_dir},
      {"memory_budget", &c.memory_budget},
      {"policy", &c.policy},
      {"prefetch", &c.prefetch},
      {"pipeline_priority", &c.pipeline_priority},
      {"pools", &c.pools},
      {"pool_ratios", &c.pool_ratios},
      {"plan_trace", &c.plan_trace},
      {"preload", &c.preload},
      {"profile", &c.profile},
      {"decompress_threads", &c.decompress_threads},
      {"staging_slots", &c.staging_slots},
      {"page_cache", &c.page_cache},
      {"fifo_dispatch", &c.fifo_dispatch},
      {"verify_recovery", &c.verify_recovery},
      {"separate_recovery", &c.separate_recovery},
      {"run_dir", &c.run_dir},
      {"shm_name", &c.shm_name},
      {"endpoints.scheduler", &c.endpoint_scheduler},
      {"endpoints.workers", &c.endpoint_workers},
      {"endpoints.cache_manager", &c.endpoint_cache_manager},
      {"link_security.mode", &c.link_security_mode},
      {"link_security.key_file", &c.link_security_key_file},
      {"heartbeat_ms", &c.heartbeat_ms},
      {"liveness", &c.liveness},
      {"storage_queue_depth", &c.storage_queue_depth},
      {"decompress_queue_depth", &c.decompress_queue_depth},
      {"shm_pipes", &c.shm_pipes},
      {"timeout_ms", &c.timeout_ms},
      {"threads", &c.threads},
      {"device", &c.device},
      {"device_assignment", &c.device_assignment},
      {"device_memory_budget", &c.device_memory_budget},
      {"weights_memory", &c.weights_memory},
      {"http.max_batch", &c.http_max_batch},
      {"http.prefix_cache_mib", &c.http_prefix_cache_mib},
      {"http.kv_budget_mib", &c.http_kv_budget_mib},
      {"http.kv_cache_dtype", &c.http_kv_cache_dtype},
      {"http.swa_full", &c.http_swa_full},
      {"http.prefill_chunk", &c.http_prefill_chunk},
      {"http.request_grouping", &c.http_request_grouping},
      {"http.group_window", &c.http_group_window},
      {"http.host", &c.http_host},
      {"http.port", &c.http_port},
      {"http.api_key", &c.http_api_key},
      {"http.front", &c.http_front},
      {"http.resume_timeout_ms", &c.http_resume_timeout_ms},
      {"metrics.host", &c.metrics_host},
      {"metrics.sd_dir", &c.metrics_sd_dir},
      {"metrics.port.storage", &c.metrics_port_storage},
      {"metrics.port.decompressor", &c.metrics_port_decompressor},
      {"metrics.port.cache_manager", &c.metrics_port_cache_manager},
      {"metrics.port.scheduler", &c.metrics_port_scheduler},
      {"metrics.port.executor", &c.metrics_port_executor},
      {"metrics.port.up", &c.metrics_port_up},
      {"metrics.port.front", &c.metrics_port_front},
      {"cpu_affinity.storage", &c.cpu_affinity_storage},
      {"cpu_affinity.decompressor", &c.cpu_affinity_decompressor},
      {"cpu_affinity.cache_manager", &c.cpu_affinity_cache_manager},
      {"cpu_affinity.scheduler", &c.cpu_affinity_scheduler},
      {"cpu_affinity.executor", &c.cpu_affinity_executor},
      {"trace_events", &c.trace_events},
  };
}

std::string EnvName(const std::string& key) {
  std::string out = "ZIPMOE_";
  for (char ch : key) out += ch == '.' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return out;
}

// Parses a text value (environment, --set) into the field.
Status SetFromText(const Field& field, const std::string& text, const std::string& where) {
  if (auto* s = std::get_if<std::string*>(&field)) {
    **s = text;
    return Status::Ok();
  }
  if (auto* i = std::get_if<int64_t*>(&field)) {
    try {
      size_t used = 0;
      const long long v = std::stoll(text, &used, 10);
      if (used != text.size()) throw std::invalid_argument("trailing");
      **i = v;
      return Status::Ok();
    } catch (const std::exception&) {
      return Status::InvalidArgument(fmt::format("{}: '{}' is not an integer", where, text));
    }
  }
  bool* b = std::get<bool*>(field);
  if (text == "1" || text == "true" || text == "yes" || text == "on") {
    *b = true;
  } else if (text == "0" || text == "false" || text == "no" || text == "off") {
    *b = false;
  } else {
    return Status::InvalidArgument(fmt::format("{}: '{}' is not a boolean (true/false)", where, text));
  }
  return Status::Ok();
}

Status SetFromJson(const Field& field, const json& value, const std::string& where) {
  if (auto* s = std::get_if<std::string*>(&field)) {
    if (!value.is_string()) return Status::InvalidArgument(fmt::format("{}: expected a string", where));
    **s = value.get<std::string>();
  } else if (auto* i = std::get_if<int64_t*>(&field)) {
    if (!value.is_number_integer()) return Status::InvalidArgument(fmt::format("{}: expected an integer", where));
    **i = value.get<int64_t>();
  } else {
    if (!value.is_boolean()) return Status::InvalidArgument(fmt::format("{}: expected true or false", where));
    *std::get<bool*>(field) = value.get<bool>();
  }
  return Status::Ok();
}

Status Flatten(const json& object, const std::string& prefix, std::map<std::string, json>* out) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      ZM_RETURN_IF_ERROR(Flatten(*it, key, out));
    } else {
      (*out)[key] = *it;
    }
  }
  return Status::Ok();
}

// device = "auto": "cuda" when the executor can run on a GPU here, else "cpu". That needs all three of
// CUDA kernels in this binary, a CUDA device that answers (cudaGetDeviceCount > 0: in a container,
// the GPU must be passed, e.g. `runtime: nvidia` on Jetson) and a libtorch built with CUDA. The last
// is read without torch headers (only services/executor includes them): a CUDA libtorch's
// TorchConfig links libtorch_cuda.so with --no-as-needed, so it is loaded into this process exactly
// when the executor's torch has CUDA; RTLD_NOLOAD only looks, it never loads. That check comes
// first, so a CPU libtorch host never initialises the CUDA driver here.
std::string ResolveAutoDevice() {
  void* torch_cuda = ::dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD);
  if (torch_cuda == nullptr) return "cpu";
  ::dlclose(torch_cuda);  // drops the reference RTLD_NOLOAD took; the library stays loaded
  return kernels::BuiltWithCuda() && kernels::CudaDeviceCount() > 0 ? "cuda" : "cpu";
}

Status Validate(const ServiceConfig& c) {
  ZM_RETURN_IF_ERROR(scheduler::ParseDeviceAssignmentMode(c.device_assignment)
                         .status()
                         .WithContext("device_assignment = '" + c.device_assignment + "'"));
  for (const char* service : {"storage", "decompressor", "cache-manager", "scheduler", "executor"}) {
    const std::string& cpus = CpuAffinityOf(c, service);
    if (cpus.empty()) continue;
    ZM_RETURN_IF_ERROR(ParseCpuList(cpus, CpuAffinityKey(service)).status());
  }
  auto positive = [](int64_t v, const char* key) {
    return v > 0 ? Status::Ok() : Status::InvalidArgument(fmt::format("{} = {}: must be > 0", key, v));
  };
  // Endpoints are checked when the config loads (a decompressor with a bad URL used to wait for the
  // arena, then for its scheduler, and say nothing until SIGTERM).
  for (auto [url, key] : {std::pair{&c.endpoint_scheduler, "endpoints.scheduler"},
                          {&c.endpoint_workers, "endpoints.workers"},
                          {&c.endpoint_cache_manager, "endpoints.cache_manager"}}) {
    if (!url->empty()) ZM_RETURN_IF_ERROR(messaging::ValidateEndpoint(*url).WithContext(key));
  }
  ZM_RETURN_IF_ERROR(positive(c.decompress_threads, "decompress_threads"));
  ZM_RETURN_IF_ERROR(positive(c.heartbeat_ms, "heartbeat_ms"));
  ZM_RETURN_IF_ERROR(positive(c.liveness, "liveness"));
  ZM_RETURN_IF_ERROR(positive(c.storage_queue_depth, "storage_queue_depth"));
  ZM_RETURN_IF_ERROR(positive(c.decompress_queue_depth, "decompress_queue_depth"));
  ZM_RETURN_IF_ERROR(positive(c.timeout_ms, "timeout_ms"));
  ZM_RETURN_IF_ERROR(positive(c.http_resume_timeout_ms, "http.resume_timeout_ms"));
  for (auto [v, key] : {std::pair{c.http_port, "http.port"}, {c.metrics_port_storage, "metrics.port.storage"},
                        {c.metrics_port_decompressor, "metrics.port.decompressor"},
                        {c.metrics_port_cache_manager, "metrics.port.cache_manager"},
                        {c.metrics_port_scheduler, "metrics.port.scheduler"},
                        {c.metrics_port_executor, "metrics.port.executor"}, {c.metrics_port_up, "metrics.port.up"},
                        {c.metrics_port_front, "metrics.port.front"}}) {
    if (v < 0 || v > 65535) return Status::InvalidArgument(fmt::format("{} = {}: not a TCP port", key, v));
  }
  if (c.staging_slots < 0) return Status::InvalidArgument("staging_slots must be >= 0");
  ZM_RETURN_IF_ERROR(ParseThreadPriority(c.pipeline_priority, "pipeline_priority").status());
  ZM_RETURN_IF_ERROR(messaging::ParseLinkSecurityMode(c.link_security_mode, "link_security.mode").status());
  ZM_RETURN_IF_ERROR(positive(c.http_group_window, "http.group_window"));
  ZM_RETURN_IF_ERROR(scheduler::ParseRequestGrouping(c.http_request_grouping).status().WithContext("http.request_grouping"));
  if (c.http_kv_cache_dtype != "f32" && c.http_kv_cache_dtype != "bf16")
    return Status::InvalidArgument(fmt::format("http.kv_cache_dtype '{}': f32 (the default) or bf16", Clip(c.http_kv_cache_dtype)));
  if (c.http_prefill_chunk < 0)
    return Status::InvalidArgument(
        fmt::format("http.prefill_chunk = {}: prompt tokens fed a step, >= 0 (0 = a prompt whole)", c.http_prefill_chunk));
  return Status::Ok();
}

}  // namespace

std::string ExecutorAddressFile(const ServiceConfig& config) { return JoinPath(config.run_dir, "executor.http"); }

const std::string& CpuAffinityOf(const ServiceConfig& config, const std::string& service) {
  static const std::string kNone;
  if (service == "storage") return config.cpu_affinity_storage;
  if (service == "decompressor") return config.cpu_affinity_decompressor;
  if (service == "cache-manager") return config.cpu_affinity_cache_manager;
  if (service == "scheduler") return config.cpu_affinity_scheduler;
  if (service == "executor") return config.cpu_affinity_executor;
  return kNone;
}

std::string CpuAffinityKey(const std::string& service) {
  std::string key = "cpu_affinity." + service;
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
}

Result<std::vector<int>> ParseCpuList(const std::string& text, const std::string& key) {
  constexpr long kMaxCpu = 1023;
  const auto bad = [&](const std::string& item, const char* why) {
    return Status::InvalidArgument(fmt::format("{} = '{}': '{}' {} (expected a CPU list such as 0-3,6)", key, text,
                                               item, why));
  };
  const auto number = [](const std::string& t, long* out) {
    if (t.empty() || t.size() > 6 || !std::all_of(t.begin(), t.end(), [](char ch) { return std::isdigit(ch); }))
      return false;
    *out = std::stol(t);
    return true;
  };
  std::set<int> cpus;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const size_t dash = item.find('-');
    long first = 0, last = 0;
    if (dash == std::string::npos) {
      if (!number(item, &first)) return bad(item, "is not a CPU number");
      last = first;
    } else if (!number(item.substr(0, dash), &first) || !number(item.substr(dash + 1), &last)) {
      return bad(item, "is not a range of CPU numbers");
    }
    if (last < first) return bad(item, "runs backwards");
    if (last > kMaxCpu) return bad(item, "names a CPU above 1023");
    for (long c = first; c <= last; ++c) cpus.insert(static_cast<int>(c));
    pos = comma + 1;
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

const std::vector<std::string>& ServiceConfigKeys() {
  static const std::vector<std::string> keys = [] {
    ServiceConfig c;
    std::vector<std::string> out;
    for (const auto& [key, field] : Fields(c)) out.push_back(key);
    return out;
  }();
  return keys;
}

Result<ServiceConfig> LoadServiceConfig(const std::string& file, const std::vector<std::string>& sets,
                                        char** environ) {
  ServiceConfig c;
  std::map<std::string, Field> fields;
  for (auto& [key, field] : Fields(c)) fields.emplace(key, field);
  if (!file.empty()) {
    if (!FileExists(file)) return Status::NotFound(fmt::format("config file {} does not exist", file));
    ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(file));
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return Status::InvalidArgument(fmt::format("config file {}: not a JSON object", file));
    }
    std::map<std::string, json> flat;
    ZM_RETURN_IF_ERROR(Flatten(parsed, "", &flat));
    for (const auto& [key, value] : flat) {
      auto it = fields.find(key);
      if (it == fields.end()) {
        return Status::InvalidArgument(fmt::format("config file {}: unknown key '{}' (keys: docs/services.md)", file, key));
      }
      ZM_RETURN_IF_ERROR(SetFromJson(it->second, value, fmt::format("config file {}: key '{}'", file, key)));
    }
  }
  if (environ != nullptr) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr && std::strncmp(*e, "ZIPMOE_", 7) == 0) env[std::string(static_cast<const char*>(*e), eq)] = eq + 1;
    }
    for (const auto& [key, field] : fields) {
      auto it = env.find(EnvName(key));
      if (it != env.end()) {
        ZM_RETURN_IF_ERROR(SetFromText(field, it->second, fmt::format("environment variable {}", it->first)));
      }
    }
  }
  for (const std::string& set : sets) {
    const size_t eq = set.find('=');
    if (eq == std::string::npos) return Status::InvalidArgument(fmt::format("--set '{}': expected key=value", set));
    const std::string key = set.substr(0, eq);
    auto it = fields.find(key);
    if (it == fields.end()) return Status::InvalidArgument(fmt::format("--set: unknown key '{}'", key));
    ZM_RETURN_IF_ERROR(SetFromText(it->second, set.substr(eq + 1), fmt::format("--set {}", key)));
  }
  if (c.device == "auto") c.device = ResolveAutoDevice();
  if (c.endpoint_scheduler.empty()) c.endpoint_scheduler = "ipc://" + JoinPath(c.run_dir, "scheduler.sock");
  if (c.endpoint_workers.empty()) c.endpoint_workers = "ipc://" + JoinPath(c.run_dir, "workers.sock");
  if (c.endpoint_cache_manager.empty()) c.endpoint_cache_manager = "ipc://" + JoinPath(c.run_dir, "cache-manager.sock");
  if (c.link_security_key_file.empty()) c.link_security_key_file = JoinPath(c.run_dir, "link.key");
  ZM_RETURN_IF_ERROR(Validate(c));
  return c;
}

std::string ServiceConfigToJson(const ServiceConfig& config) {
  ServiceConfig copy = config;
  json out = json::object();
  for (const auto& [key, field] : Fields(copy)) {
    json* node = &out;
    size_t start = 0;
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', start)) {
      node = &(*node)[key.substr(start, dot - start)];
      start = dot + 1;
    }
    json& leaf = (*node)[key.substr(start)];
    std::visit([&leaf](auto* p) { leaf = *p; }, field);
  }
  return out.dump(2) + "\n";
}

RuntimeFlags RuntimeFlagsOf(const ServiceConfig& c) {
  RuntimeFlags f;
  f.memory_budget = c.memory_budget;
  f.policy = c.policy;
  f.prefetch = c.prefetch;
  f.pools = c.pools;
  f.pool_ratios = c.pool_ratios;
  f.plan_trace = c.plan_trace;
  f.preload = c.preload;
  f.profile = c.profile;
  f.decompress_threads = static_cast<int>(c.decompress_threads);
  f.staging_slots = static_cast<uint32_t>(c.staging_slots);
  f.page_cache = c.page_cache;
  f.fifo_dispatch = c.fifo_dispatch;
  f.no_verify_recovery = !c.verify_recovery;
  f.separate_recovery = c.separate_recovery;
  f.pipeline_priority = c.pipeline_priority;
  return f;
}

}  // namespace zipmoe::runtime
