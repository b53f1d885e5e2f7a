// The one configuration of a multi-process deployment (`zipmoe service NAME`, `zipmoe up`,
// compose.yaml): a JSON file whose keys are listed in kServiceConfigKeys (docs/services.md), then
// environment variables, then --set key=value, each overriding the previous.
//
// - File: a JSON object; nested objects give dotted keys ({"http": {"port": 8080}} is http.port).
//   An unknown key, a wrong type or unparsable JSON is an error naming the file and the key.
// - Environment: ZIPMOE_<KEY> with the key upper-cased and '.' turned into '_' (http.port ->
//   ZIPMOE_HTTP_PORT, metrics.port.cache_manager -> ZIPMOE_METRICS_PORT_CACHE_MANAGER). Values are
//   parsed as the key's type; an error names the variable.
// - --set key=value: the same parsing; an error names the key.
// Endpoints left empty default to ipc://<run_dir>/<name>.sock, link_security.key_file to <run_dir>/link.key.
//
// Why services/service_base and not common/: the config names every zipmoe service and its keys, so
// it is the deployment's glue, not a service-agnostic utility; services/service_base is where it lives,
// and this file is a small library of its own (zipmoe_service_base, no torch, no CLI) that every
// service's process entry (services/processes/<name>_service.h) and the CLI link.
// Threads: plain data and pure functions, callable from any thread.
// Errors: Status values (kInvalidArgument / kNotFound), each naming the file, variable or key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/pipeline/runtime_options.h"

namespace zipmoe::runtime {

struct ServiceConfig {
  std::string model_dir;                 // compressed model directory (zipmoe compress)
  std::string memory_budget = "50%";     // bytes ("4GiB") or a share of the expert bytes, in their dtype ("50%")
  std::string policy = "zipmoe";         // zipmoe | lru | fifo | lfu | marking | dali | smoe | coserve | full-load
  std::string prefetch;                  // none | top-score | residual; "" = the policy's (DefaultPrefetch)
  std::string pools;
  std::string pool_ratios;               // "" = the planner
  std::string plan_trace;                // planner workload (routing trace); "" = uniform
  bool preload = false;                  // cache-manager: fill the pools to the plan before serving (--preload)
  std::string profile;                   // planner delays; "" = model_dir/profile.json or defaults
  int64_t decompress_threads = 1;        // L per decompressor replica
  int64_t staging_slots = 0;             // 0 = auto
  bool page_cache = false;               // buffered reads instead of O_DIRECT
  bool fifo_dispatch = false;            // FIFO order instead of Alg. 1
  bool verify_recovery = true;           // check each recovered tensor against its xxh64
  bool separate_recovery = false;        // recover BF16 before compute even for a CPU executor
  std::string run_dir = "/tmp/zipmoe";   // ipc sockets, pid files (zipmoe up)
  std::string shm_name = "/zipmoe-arena";  // the shared arena
  std::string endpoint_scheduler;        // endpoints.scheduler: executor -> scheduler (ROUTER)
  std::string endpoint_workers;          // endpoints.workers: storage/decompressors -> scheduler (ROUTER)
  std::string endpoint_cache_manager;    // endpoints.cache_manager: scheduler -> cache-manager (ROUTER)
  // Link security (common/ipc/link_security.h, docs/messaging.md "Link security"): CURVE on tcp://
  // endpoints: auto = those off loopback, on = all (loopback too), off = none (warned off loopback).
  std::string link_security_mode = "auto";
  std::string link_security_key_file;    // the deployment's key pair (mode 0600); "" = <run_dir>/link.key
  int64_t heartbeat_ms = 500;            // pull-protocol heartbeat interval
  int64_t liveness = 3;                  // silent intervals before a peer is dead
  int64_t storage_queue_depth = 64;      // chunk reads a storage worker takes at once
  int64_t decompress_queue_depth = 32;   // decode requests a decompressor replica takes at once (>= its threads)
  // The executor's and the workers' messages to and from the scheduler through shared-memory pipes
  // with a futex doorbell (common/ipc/shm_pipe.h), offered over ZeroMQ (PipeOpen, WorkerReady.pipe_name);
  // false, or a scheduler that refuses a pipe: ZeroMQ carries them.
  bool shm_pipes = true;
  int64_t timeout_ms = 20000;            // executor: longest wait for the scheduler (a request in flight when
                                         // the scheduler dies fails after this)
  int64_t threads = 0;                   // executor: torch threads (0 = all cores)
  // Scheduling priority of every thread of the storage, decompressor, cache-manager and scheduler
  // processes and of the executor's ZeroMQ I/O threads over the executor's compute threads
  // (common/thread_priority.h): auto | realtime | slice | none.
  std::string pipeline_priority = "auto";
  std::string device = "cpu";            // executor: "cpu" or "cuda[:N]" (a CUDA libtorch)
  std::string device_assignment = "none";  // executor: none | greedy (DALI's CPU/GPU split, --device-assignment)
  std::string device_memory_budget = "auto";  // executor: the GPU executor's device slots (--device-memory-budget)
  // executor: where the weights it reads in full live (services/executor/weights_memory.h): background
  // (mapped, then copied into anonymous memory by an idle-priority thread) | mapped (--mmap) |
  // anonymous (--no-mmap).
  std::string weights_memory = "background";
  int64_t http_max_batch = 8;            // executor: sequences decoded together (continuous batching)
  int64_t http_prefix_cache_mib = 512;   // executor: finished sequences' KV caches kept for prefix reuse; 0 = off
  int64_t http_kv_budget_mib = -1;       // executor: bound on running sequences' KV caches; -1 = auto, 0 = none
  std::string http_kv_cache_dtype = "f32";  // executor: f32, or bf16 (half the KV bytes; GeneratorOptions::kv_cache_bf16)
  bool http_swa_full = false;  // executor: sliding-window layers cache every position (GeneratorOptions::kv_window_full)
  int64_t http_prefill_chunk = 512;  // executor: prompt tokens fed a step (GeneratorOptions::prefill_chunk); 0 = whole
  std::string http_request_grouping = "none";  // executor: none | coserve (services/scheduler/request_grouping.h)
  int64_t http_group_window = 8;         // executor: waiting sequences request grouping looks at
  std::string http_host = "127.0.0.1";
  int64_t http_port = 8080;
  std::string http_api_key;
  // The HTTP front (`zipmoe service front`, services/front/front_server.h): with it (`up` starts it,
  // compose runs it) clients talk to the front on http.host:http.port, the executor listens on a free
  // loopback port it writes to RUN_DIR/executor.http, and an executor that dies mid-request is
  // invisible to clients. false: the executor serves http.host:http.port itself (issue 43 item 1).
  bool http_front = true;
  int64_t http_resume_timeout_ms = 60000;  // front: longest wait for a restarted executor, per try
  std::string metrics_host = "127.0.0.1";
  std::string metrics_sd_dir;            // Prometheus file_sd directory ("" = none)
  int64_t metrics_port_storage = 9471;   // 0 = no /metrics endpoint
  int64_t metrics_port_decompressor = 9472;
  int64_t metrics_port_cache_manager = 9473;
  int64_t metrics_port_scheduler = 9474;
  int64_t metrics_port_executor = 9475;
  int64_t metrics_port_up = 9470;  // `zipmoe up`'s supervisor: zipmoe_up_restarts_total{service}
  int64_t metrics_port_front = 9476;  // the HTTP front
  // CPUs each service runs on (sched_setaffinity before it starts a thread), as a Linux CPU list:
  // "0-3,6"; "" = whatever it inherits. On a Jetson, e.g. the executor on the big cores, storage and
  // the decompressors on the others (docs/deploy.md).
  std::string cpu_affinity_storage;
  std::string cpu_affinity_decompressor;
  std::string cpu_affinity_cache_manager;
  std::string cpu_affinity_scheduler;
  std::string cpu_affinity_executor;
  std::string trace_events;        // "" = off; else each service records a Chrome trace (common/trace_events.h)
                                   // and writes <trace_events>.<service>-<pid>.json when it stops; `up` merges
                                   // them into <trace_events>
};

// The CPU list a service's config pins it to ("" = none): cpu_affinity.<service>, with the service
// named as `zipmoe service` names it (cache-manager, scheduler, storage, decompressor, executor).
const std::string& CpuAffinityOf(const ServiceConfig& config, const std::string& service);
// That key's name: "cpu_affinity.cache_manager" for "cache-manager".
std::string CpuAffinityKey(const std::string& service);

// "0-3,6" -> {0, 1, 2, 3, 6} (ascending, no duplicates). Errors: kInvalidArgument naming `key`, the
// text and the bad item (not a number, a range that runs backwards, a CPU >= 1024, nothing listed).
Result<std::vector<int>> ParseCpuList(const std::string& text, const std::string& key);

// RUN_DIR/executor.http: where the executor writes "127.0.0.1:PORT" when an HTTP front stands before it
// (http.front), and where the front reads it.
std::string ExecutorAddressFile(const ServiceConfig& config);

// Every key, dotted, in documentation order.
const std::vector<std::string>& ServiceConfigKeys();

// Loads `file` ("" = defaults only), then ZIPMOE_* variables of `environ`, then `sets` ("key=value").
// Errors: kNotFound (file missing), kInvalidArgument naming the file / variable / key and the problem.
Result<ServiceConfig> LoadServiceConfig(const std::string& file, const std::vector<std::string>& sets,
                                        char** environ);

// The runtime options the config sets (memory budget, policy, pools, workers, I/O mode...): what the
// cache-manager and the scheduler build their OffloadConfig from (ToOffloadConfig).
RuntimeFlags RuntimeFlagsOf(const ServiceConfig& config);

// The configuration as a JSON object with every key (what `zipmoe up` writes for its services).
std::string ServiceConfigToJson(const ServiceConfig& config);

}  // namespace zipmoe::runtime
