// The executor as a process: the model (services/executor/generator.h) behind the OpenAI-compatible
// HTTP API (services/api/api_server.h), over an expert provider.
//   RunServe:           the serve loop itself, over any provider (`zipmoe serve` passes the embedded
//                       runtime or none, services/cli/cmd_serve.cc).
//   RunExecutorService: `zipmoe service executor` (one of `zipmoe up`'s processes): RunServe over a
//                       RemoteExpertProvider connected to the scheduler process (remote_provider.h),
//                       with its /metrics on metrics.port.executor.
// Torch-free: this file and executor_service.cc use the executor only through generator.h. They form library
// zipmoe_executor_service, apart from zipmoe_executor (which they link, with zipmoe_api and
// zipmoe_runtime).
// Threads: call from the process's main thread, after `signals` was constructed and before any other
// thread started (torch, the runtime and the HTTP workers inherit the signal mask); blocks until
// SIGINT/SIGTERM. Errors: returns the exit code (0, or 1 after "error: ..." on stderr).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/expert_provider.h"
#include "common/status.h"
#include "services/service_base/service_config.h"
#include "services/executor/weights_memory.h"
#include "services/service_base/service_util.h"

namespace prometheus {
class Registry;
}
namespace zipmoe::metrics {
class ExecutorMetrics;
}

namespace zipmoe::executor {

// What `zipmoe serve`'s flags (or the executor's service config keys) set for the serve loop.
struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = a free port (with address_file, for an HTTP front)
  // "" = none; else, once listening, "HOST:PORT\n" is written here atomically (RUN_DIR/executor.http,
  // read by the HTTP front: services/front/front_server.h).
  std::string address_file;
  std::string api_key;
  std::vector<std::string> served_model_names;
  int threads = 0;
  // Where the weights loading reads in full live (executor/weights_memory.h): mapped and copied into
  // anonymous memory in the background (the default), kept mapped (`--mmap`), or copied before
  // serving (`--no-mmap`). CPU device only.
  WeightsMemory weights_memory = WeightsMemory::kBackground;
  std::string device = "cpu";
  std::string device_assignment = "none";
  std::string device_memory_budget;  // GPU executor's device slots: "" = auto (ParseDeviceMemoryBudget)
  int max_batch = 8;  // sequences decoded together (continuous batching); 1 = one at a time
  int max_waiting = 256;  // sequences queued beyond the batch before requests get 429
  // Finished sequences' KV caches kept so a prompt that starts with their tokens (a chat's history) is
  // not prefilled again (services/executor/prefix_cache.h); 0 = off.
  int64_t prefix_cache_mib = 512;
  // Bound on the running sequences' KV caches (services/executor/generator.h kv_budget_bytes): prompts
  // wait while it is full, a running sequence that needs room preempts the most recently admitted one
  // (resumed exactly later), a prompt larger than all of it is a 400. -1 = auto: half the memory
  // available once the model is loaded, less the prefix cache, at least 256 MiB; 0 = unbounded.
  int64_t kv_budget_mib = -1;
  bool kv_cache_bf16 = false;  // keys and values cached as BF16 (GeneratorOptions::kv_cache_bf16)
  bool kv_window_full = false;  // sliding-window layers cache every position (GeneratorOptions::kv_window_full)
  int64_t prefill_chunk = 512;  // prompt tokens fed a step (GeneratorOptions::prefill_chunk); 0 = whole
  int http_threads = 0;  // 0 = 2 x max_batch + 32
  int http_read_timeout_ms = 10000;
  std::string cors_origin = "*";
  int shutdown_grace_ms = 2000;
  std::string request_grouping = "none";  // RequestGrouping name
  int group_window = 8;
  double substitution_alpha = 0;  // SMoE expert substitution α; 0 = exact
};

// The API key: `configured`, else the environment's ZIPMOE_API_KEY ("" = none). The HTTP front uses it
// too, so it checks the key the executor behind it checks.
std::string ApiKeyOrEnvironment(const std::string& configured);
// HTTP handler workers for up to `max_batch` sequences decoded together: every streaming or waiting
// request holds one (the HTTP front sizes its pool alike).
int DefaultHttpThreads(int64_t max_batch);

// Fills what the options left to the environment (ZIPMOE_API_KEY, ZIPMOE_SERVED_MODEL_NAME:
// comma-separated, else the model directory's name) and the defaults that depend on other options
// (http_threads).
void ResolveServeOptions(ServeOptions* options);

// Creates the expert provider once the HTTP listener is up (nullptr = every expert resident).
using ProviderFactory = std::function<Result<std::unique_ptr<ExpertProvider>>()>;

// Listens first (GET /health answers 503 while loading), then loads tokenizer, provider and model,
// then serves until SIGINT/SIGTERM: new requests get 503, the running ones have shutdown_grace_ms to
// finish, the rest end. `registry`/`metrics`: the registry GET /metrics serializes and the serving
// metrics on it; `refresh`: runs before each scrape; `tick`: about every 200 ms while serving (may be
// empty). Returns the exit code.
int RunServe(const ServeOptions& options, const ProviderFactory& make_provider, runtime::TerminationSignals& signals,
             prometheus::Registry* registry, metrics::ExecutorMetrics* metrics, std::function<void()> refresh,
             const std::function<void()>& tick = {});

// The build_info gauge: version, commit, CUDA toolkit, libtorch.
void SetBuildInfo(metrics::ExecutorMetrics* metrics);

int RunExecutorService(const runtime::ServiceConfig& config, runtime::TerminationSignals& signals);

}  // namespace zipmoe::executor
