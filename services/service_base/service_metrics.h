// Service metrics: one small class per service that registers that service's Prometheus families
// (names, labels, units and buckets fixed by docs/metrics.md) on a prometheus::Registry — normally
// MetricsServer::registry() (common/metrics_server.h) — and offers typed update methods.
//
// Units: durations are seconds (divide the code's `_us` values by 1e6 before calling), sizes bytes.
// Negative or NaN durations/depths from peers are clamped to 0 (a histogram observation of a negative
// time would make its _sum go backwards).
//
// Ownership: each object keeps references to metrics owned by the registry; the registry must outlive
// it. Several objects may share one registry: families of the same name merge (prometheus-cpp
// InsertBehavior::Merge), e.g. two DecompressorMetrics with different replicas.
// Errors: constructors throw std::invalid_argument (prometheus-cpp) only if the registry already holds
// a family of the same name with another type or constant labels — a programming error.
// Thread-safety: every method may be called from any thread (prometheus-cpp metrics are atomic; the
// delta bookkeeping of CacheMetrics and BadMessageMetrics is guarded by a mutex). Torch-free.
#pragma once

#include <array>
#include <map>
#include <utility>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "common/ipc/link_guard.h"
#include "common/mutex.h"
#include "services/cache_manager/cache_manager.h"
#include "services/pipeline/runtime_stats.h"

namespace zipmoe::metrics {

// {start, start·factor, …, start·factor^(count-1)}, each the double nearest to its value rounded to
// 15 significant digits (so the bounds are the decimals of docs/metrics.md, e.g. 0.00064).
// Used for the bucket lists in docs/metrics.md; empty for count <= 0. Pure.
// Note: prometheus-cpp prints `le` with 16 significant digits, so some bounds read e.g.
// le="0.0006400000000000001"; Prometheus parses that back to the same double as 0.00064.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Storage service: zipmoe_storage_read_bytes_total{kind}, zipmoe_storage_read_seconds{kind},
// zipmoe_storage_queue_depth. Both kinds (E, SM) are exported from construction, at 0.
class StorageMetrics {
 public:
  explicit StorageMetrics(prometheus::Registry& registry);
  StorageMetrics(const StorageMetrics&) = delete;
  StorageMetrics& operator=(const StorageMetrics&) = delete;

  // One verified chunk read: kind="E" if e_chunk else "SM"; stored_bytes as read from the file;
  // seconds in pread (ReadCompletion.read_us / 1e6).
  void ObserveRead(bool e_chunk, uint64_t stored_bytes, double seconds);
  void SetQueueDepth(double reads);  // chunk reads queued and not yet started

 private:
  std::array<prometheus::Counter*, 2> read_bytes_{};     // [E, SM]
  std::array<prometheus::Histogram*, 2> read_seconds_{};  // [E, SM]
  prometheus::Gauge* queue_depth_ = nullptr;
};

// Decompressor replica: zipmoe_decompressor_decode_seconds{op}, zipmoe_decompressor_busy_seconds_total
// {replica}, zipmoe_decompressor_threads{replica} (set once here). `replica` is the routing identity
// ("0" in embedded mode); `threads` is L (n_workers) of the replica.
class DecompressorMetrics {
 public:
  DecompressorMetrics(prometheus::Registry& registry, std::string replica, int threads);
  DecompressorMetrics(const DecompressorMetrics&) = delete;
  DecompressorMetrics& operator=(const DecompressorMetrics&) = delete;

  // One DecodeRequest ran for `seconds` (DecodeCompletion.run_us / 1e6): op="recover" if recover else
  // "decode"; the same seconds are added to busy_seconds_total.
  void ObserveOp(bool recover, double seconds);
  const std::string& replica() const { return replica_; }

 private:
  const std::string replica_;
  std::array<prometheus::Histogram*, 2> op_seconds_{};  // [decode, recover]
  prometheus::Counter* busy_seconds_ = nullptr;
};

// Cache manager: zipmoe_cache_requests_total{pool,layer}, zipmoe_cache_resident_bytes{pool}.
class CacheMetrics {
 public:
  explicit CacheMetrics(prometheus::Registry& registry);
  CacheMetrics(const CacheMetrics&) = delete;
  CacheMetrics& operator=(const CacheMetrics&) = delete;

  // Publishes a CacheManager::Counters() snapshot. layer_requests[l][CompressionState value]
  // (0 = M, 1 = E, 2 = S, 3 = C, 4 = F) feeds requests_total{pool=<letter>, layer=<l>}: each counter
  // grows by the delta since the previous Update. If any request count (or `lookups`) is below the
  // previous snapshot, the counters were reset (CacheManager::ResetCounters): every value of this
  // snapshot is then taken as the increment (the requests counted since the reset), and it becomes
  // the new base; counters never decrease. pools[PoolIndex(p)].resident_bytes sets
  // resident_bytes{pool=F/C/S/E}. Series for a layer appear at its first Update.
  // Call from one thread (a periodic publisher): calls are race-free, but an older snapshot arriving
  // after a newer one is indistinguishable from a reset and would be counted again.
  void Update(const cache_manager::CacheCounters& counters);

 private:
  prometheus::Family<prometheus::Counter>* requests_family_ = nullptr;
  std::array<prometheus::Gauge*, cache_manager::kPoolCount> resident_bytes_{};  // by PoolIndex
  Mutex mu_;  // guards the fields below
  std::vector<std::array<prometheus::Counter*, 5>> requests_ ZM_GUARDED_BY(mu_);  // [layer][state]
  std::vector<std::array<uint64_t, 5>> last_requests_ ZM_GUARDED_BY(mu_);  // [layer][state]
  uint64_t last_lookups_ ZM_GUARDED_BY(mu_) = 0;
};

// Scheduler: zipmoe_scheduler_decompressors, zipmoe_scheduler_queue_depth{queue},
// zipmoe_scheduler_layer_makespan_seconds, zipmoe_scheduler_layer_makespan_bound_ratio.
class SchedulerMetrics {
 public:
  explicit SchedulerMetrics(prometheus::Registry& registry);
  SchedulerMetrics(const SchedulerMetrics&) = delete;
  SchedulerMetrics& operator=(const SchedulerMetrics&) = delete;

  void SetDecompressors(int replicas);  // replicas heart-beating now
  // queue: "read", "decode" or "recover" (ZM_CHECK: any other name is a bug); ops not yet completed.
  void SetQueueDepth(std::string_view queue, double ops);
  // One layer run: makespan in seconds (LayerTotals::makespan_us / 1e6); bound_ratio = makespan /
  // Lemma B.3 lower bound, observed only when > 0 (pass 0 when the bound is 0 or unknown).
  void ObserveLayer(double makespan_seconds, double bound_ratio);

 private:
  prometheus::Gauge* decompressors_ = nullptr;
  std::array<prometheus::Gauge*, 3> queue_depth_{};  // [read, decode, recover]
  prometheus::Histogram* makespan_seconds_ = nullptr;
  prometheus::Histogram* bound_ratio_ = nullptr;
};

// Executor (HTTP front end): zipmoe_executor_ttft_seconds, zipmoe_executor_tpot_seconds,
// zipmoe_executor_generated_tokens_total, zipmoe_executor_queue_depth, zipmoe_http_requests_total
// {route,code}.
class ExecutorMetrics {
 public:
  // The routes of zipmoe_http_requests_total; anything else is counted as "other".
  static constexpr std::array<std::string_view, 9> kRoutes = {
      "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize",
      "OPTIONS", "/v1/models/{id}"};

  explicit ExecutorMetrics(prometheus::Registry& registry);
  ExecutorMetrics(const ExecutorMetrics&) = delete;
  ExecutorMetrics& operator=(const ExecutorMetrics&) = delete;

  void ObserveTtft(double seconds);  // sequence arrival → its first generated token (both TTFT families)
  void ObserveTpot(double seconds);  // one token after the first (tpot and inter-token latency)
  void AddTokens(uint64_t tokens);   // generated tokens (both generated/generation token counters)
  void AddPromptTokens(uint64_t tokens);  // prompt tokens of admitted requests
  void AddCachedPromptTokens(uint64_t tokens);  // of them, those the prefix cache held
  // The KV budget: bytes the running sequences' caches hold and may hold (0 = unbounded), and the
  // preemptions so far (a running total; the counter advances by the difference).
  void SetKvCache(int64_t used_bytes, int64_t budget_bytes, uint64_t preemptions);
  void SetQueueDepth(double sequences);   // sequences waiting for a batch slot (queue depth, requests_waiting)
  void SetRunning(double sequences);      // sequences in the batch
  // Sequences admitted to the batch, by order: "fifo" (the oldest waiting) or "grouped" (request
  // grouping, services/scheduler/request_grouping.h, admitted one queued after a sequence still waiting).
  void CountAdmitted(std::string_view order);
  void ObserveE2e(double seconds);        // request arrival → its last choice ended
  // A finished sequence by finish_reason: "stop", "length", "abort" (client gone or shutdown), "error".
  void CountFinished(std::string_view finish_reason);
  // zipmoe_build_info{version,commit,cuda,libtorch} 1.
  void SetBuildInfo(const std::string& version, const std::string& commit, const std::string& cuda,
                    const std::string& libtorch);
  // One answered HTTP request: route from kRoutes (else "other"), code as its decimal text.
  void CountHttp(std::string_view route, int code);

 private:
  prometheus::Histogram* ttft_seconds_ = nullptr;
  prometheus::Histogram* tpot_seconds_ = nullptr;
  prometheus::Counter* generated_tokens_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Family<prometheus::Counter>* http_requests_ = nullptr;
  // The serving metrics every LLM server exports (vLLM's names under the zipmoe_ prefix).
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* cached_prompt_tokens_ = nullptr;
  prometheus::Gauge* kv_used_bytes_ = nullptr;
  prometheus::Gauge* kv_budget_bytes_ = nullptr;
  prometheus::Counter* preemptions_ = nullptr;
  uint64_t preemptions_seen_ = 0;  // batch loop only
  prometheus::Counter* generation_tokens_ = nullptr;
  prometheus::Gauge* requests_running_ = nullptr;
  prometheus::Family<prometheus::Counter>* admitted_ = nullptr;
  prometheus::Gauge* requests_waiting_ = nullptr;
  prometheus::Histogram* time_to_first_token_ = nullptr;
  prometheus::Histogram* inter_token_latency_ = nullptr;
  prometheus::Histogram* e2e_latency_ = nullptr;
  prometheus::Family<prometheus::Counter>* request_success_ = nullptr;
  prometheus::Family<prometheus::Gauge>* build_info_ = nullptr;
};

// The embedded runtime (`zipmoe serve --memory-budget`, one process): its I/O and decompression
// totals (RuntimeStats) as counters, beside CacheMetrics fed from RuntimeStats::cache:
// zipmoe_runtime_io_ops_total, zipmoe_runtime_io_bytes_total{kind=e_chunk|sm_chunk},
// zipmoe_runtime_io_seconds_total, zipmoe_runtime_worker_ops_total{op=decode|recover},
// zipmoe_runtime_worker_seconds_total{op}, zipmoe_runtime_budget_bytes, zipmoe_runtime_arena_bytes,
// and prefetching (RuntimeStats::prefetch): zipmoe_runtime_prefetch_experts_total{outcome=issued|used|
// wasted|failed} and zipmoe_runtime_prefetch_bytes_total{outcome=used|wasted} (accuracy in Grafana:
// used / (used + wasted)), labelled with the predictor (mode="none|top-score|residual"); SMoE
// expert substitution (RuntimeStats::substitution): zipmoe_runtime_routed_experts_total (routed
// (token, slot) pairs) and zipmoe_runtime_substituted_experts_total (those given a cached
// substitute); zipmoe_runtime_info{policy,prefetch} = 1 names the cache policy and predictor.
// Update takes cumulative totals and adds the difference since the previous call.
class EmbeddedRuntimeMetrics {
 public:
  explicit EmbeddedRuntimeMetrics(prometheus::Registry& registry);
  EmbeddedRuntimeMetrics(const EmbeddedRuntimeMetrics&) = delete;
  EmbeddedRuntimeMetrics& operator=(const EmbeddedRuntimeMetrics&) = delete;
  // The totals of `stats` (OffloadExpertProvider::stats or local_stats), labelled with `policy`
  // (CachePolicyName; "" = no info gauge).
  void Update(const runtime::RuntimeStats& stats, const std::string& policy);

 private:
  Mutex mu_;
  runtime::RuntimeStats last_ ZM_GUARDED_BY(mu_);  // the previous update's totals
  prometheus::Counter* io_ops_ = nullptr;
  prometheus::Counter* io_bytes_e_ = nullptr;
  prometheus::Counter* io_bytes_sm_ = nullptr;
  prometheus::Counter* io_seconds_ = nullptr;
  prometheus::Counter* decode_ops_ = nullptr;
  prometheus::Counter* recover_ops_ = nullptr;
  prometheus::Counter* decode_seconds_ = nullptr;
  prometheus::Counter* recover_seconds_ = nullptr;
  prometheus::Gauge* budget_bytes_ = nullptr;
  prometheus::Gauge* arena_bytes_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefetch_experts_ = nullptr;
  prometheus::Family<prometheus::Counter>* prefetch_bytes_ = nullptr;
  prometheus::Counter* routed_experts_ = nullptr;
  prometheus::Counter* substituted_experts_ = nullptr;
  prometheus::Family<prometheus::Gauge>* info_ = nullptr;
};

// Every service: zipmoe_bad_messages_total (Channel::stats().bad_messages, docs/messaging.md).
class BadMessageMetrics {
 public:
  explicit BadMessageMetrics(prometheus::Registry& registry);
  BadMessageMetrics(const BadMessageMetrics&) = delete;
  BadMessageMetrics& operator=(const BadMessageMetrics&) = delete;

  // Publishes a cumulative count: the counter grows by cumulative_total - previous; a smaller value
  // than before (a new Channel) is taken whole as the increment and becomes the new base. Like
  // CacheMetrics::Update, call it from one thread so that snapshots arrive in order.
  void Set(uint64_t cumulative_total);

 private:
  prometheus::Counter* bad_messages_ = nullptr;
  Mutex mu_;  // guards last_total_
  uint64_t last_total_ ZM_GUARDED_BY(mu_) = 0;
};

// A service that binds endpoints (scheduler, cache-manager): zipmoe_link_auth_refused_total{endpoint,
// reason}, the peers a CURVE endpoint refused (common/ipc/link_guard.h: reason key | protocol |
// incomplete). Every endpoint given at construction has its three series from the start, at 0 (a
// plaintext endpoint, ipc:// or loopback, stays there: nothing is vetted on it).
class LinkMetrics {
 public:
  LinkMetrics(prometheus::Registry& registry, const std::vector<std::string>& endpoints);
  LinkMetrics(const LinkMetrics&) = delete;
  LinkMetrics& operator=(const LinkMetrics&) = delete;

  // Publishes a LinkGuard's cumulative counts (LinkGuard::refusals()) as BadMessageMetrics::Set does:
  // each series grows by its delta since the previous call. Call it from one thread.
  void Set(const std::vector<messaging::LinkRefusals>& refusals);

 private:
  prometheus::Family<prometheus::Counter>* family_ = nullptr;
  Mutex mu_;  // guards last_
  std::map<std::pair<std::string, messaging::RefusalReason>, uint64_t> last_ ZM_GUARDED_BY(mu_);
};

// A client's message traffic with one peer (Channel::stats(), counted where the client connects):
// zipmoe_messages_total{peer, direction=sent|received}. The executor reports its link to the
// scheduler, the scheduler its link to the cache-manager; with zipmoe_executor_generated_tokens_total
// they give the messages per token of `zipmoe up` (issue 20).
class MessageMetrics {
 public:
  explicit MessageMetrics(prometheus::Registry& registry);
  MessageMetrics(const MessageMetrics&) = delete;
  MessageMetrics& operator=(const MessageMetrics&) = delete;

  // Cumulative counts of the channel to `peer`; as BadMessageMetrics::Set, a smaller count than
  // before (a new channel) is taken whole. One thread per peer.
  void Set(const std::string& peer, uint64_t sent, uint64_t received);

 private:
  prometheus::Family<prometheus::Counter>* messages_ = nullptr;
  Mutex mu_;  // guards last_
  std::map<std::string, std::pair<uint64_t, uint64_t>> last_ ZM_GUARDED_BY(mu_);  // peer -> (sent, received)
};

// zipmoe_activity_seconds_total{activity}: how long this process spent in each activity of
// common/trace_events.h's Activity (forward, wait_experts, handle_message, schedule_layer, read,
// decode; activities may nest: a scheduler handling a LayerRequest also schedules the layer). With
// zipmoe_generation_tokens_total they give each process's waiting vs working time per token (issue 20).
class ActivityMetrics {
 public:
  explicit ActivityMetrics(prometheus::Registry& registry);
  ActivityMetrics(const ActivityMetrics&) = delete;
  ActivityMetrics& operator=(const ActivityMetrics&) = delete;

  // Brings the counters up to this process's totals (trace::ActivitySeconds). Any thread.
  void Update();

 private:
  std::array<prometheus::Counter*, 6> seconds_{};  // [trace::Activity]
  Mutex mu_;  // guards last_
  std::array<double, 6> last_ ZM_GUARDED_BY(mu_){};
};

}  // namespace zipmoe::metrics
