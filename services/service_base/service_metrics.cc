// Service metrics: family definitions (names, help, buckets of docs/metrics.md) and delta bookkeeping.
#include "services/service_base/service_metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/compression_state.h"
#include "common/status.h"
#include "common/trace_events.h"

namespace zipmoe::metrics {
namespace {

constexpr int kStateCount = 5;  // CompressionState values kMiss..kF, the index of layer_requests

// Pool letter of PoolIndex order (F, C, S, E), local so that this target needs no cache_manager code.
constexpr std::array<const char*, cache_manager::kPoolCount> kPoolLetters = {"F", "C", "S", "E"};
constexpr std::array<std::string_view, 3> kQueues = {"read", "decode", "recover"};

// Buckets, in the metric's unit (docs/metrics.md).
std::vector<double> ChunkSecondsBuckets() { return ExponentialBuckets(1e-5, 4, 9); }       // 10 µs … 0.66 s
std::vector<double> MakespanSecondsBuckets() { return ExponentialBuckets(1e-4, 2, 14); }   // 0.1 ms … 0.82 s
std::vector<double> BoundRatioBuckets() { return {1, 1.1, 1.25, 1.5, 2, 3, 5, 10}; }
std::vector<double> TtftSecondsBuckets() { return ExponentialBuckets(0.01, 2, 17); }       // 10 ms … 655 s
std::vector<double> E2eSecondsBuckets() { return ExponentialBuckets(0.05, 2, 15); }        // 50 ms … 819 s
std::vector<double> TpotSecondsBuckets() { return ExponentialBuckets(0.001, 2, 14); }      // 1 ms … 8 s

// Peers report durations and depths; a negative or NaN one becomes 0 (std::max returns 0 for NaN).
double NonNegative(double v) { return std::max(0.0, v); }

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(std::max(count, 0)));
  double v = start;
  for (int i = 0; i < count; ++i, v *= factor) {
    // Repeated multiplication by a factor that is not a power of two drifts by an ulp per step; the
    // double nearest to the 15-digit decimal is the bound the docs name (exact for factors 2 and 4).
    const std::string text = fmt::format("{:.15g}", v);
    double rounded = v;
    std::from_chars(text.data(), text.data() + text.size(), rounded);
    out.push_back(rounded);
  }
  return out;
}

// ---- StorageMetrics ----

StorageMetrics::StorageMetrics(prometheus::Registry& registry) {
  auto& bytes = prometheus::BuildCounter()
                    .Name("zipmoe_storage_read_bytes_total")
                    .Help("Verified stored bytes read from chunk files, by chunk kind (E or SM).")
                    .Register(registry);
  auto& seconds = prometheus::BuildHistogram()
                      .Name("zipmoe_storage_read_seconds")
                      .Help("Time in pread per chunk read, by chunk kind (E or SM).")
                      .Register(registry);
  const std::array<const char*, 2> kinds = {"E", "SM"};
  for (size_t i = 0; i < kinds.size(); ++i) {
    read_bytes_[i] = &bytes.Add({{"kind", kinds[i]}});
    read_seconds_[i] = &seconds.Add({{"kind", kinds[i]}}, ChunkSecondsBuckets());
  }
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("zipmoe_storage_queue_depth")
                      .Help("Chunk reads queued and not yet started.")
                      .Register(registry)
                      .Add({});
}

void StorageMetrics::ObserveRead(bool e_chunk, uint64_t stored_bytes, double seconds) {
  const size_t kind = e_chunk ? 0 : 1;
  read_bytes_[kind]->Increment(static_cast<double>(stored_bytes));
  read_seconds_[kind]->Observe(NonNegative(seconds));
}

void StorageMetrics::SetQueueDepth(double reads) { queue_depth_->Set(NonNegative(reads)); }

// ---- DecompressorMetrics ----

DecompressorMetrics::DecompressorMetrics(prometheus::Registry& registry, std::string replica, int threads)
    : replica_(std::move(replica)) {
  auto& op_seconds = prometheus::BuildHistogram()
                         .Name("zipmoe_decompressor_decode_seconds")
                         .Help("Run time of one DecodeRequest, by op (decode: E-chunk decode, recover: BF16 "
                               "recovery).")
                         .Register(registry);
  op_seconds_[0] = &op_seconds.Add({{"op", "decode"}}, ChunkSecondsBuckets());
  op_seconds_[1] = &op_seconds.Add({{"op", "recover"}}, ChunkSecondsBuckets());
  busy_seconds_ = &prometheus::BuildCounter()
                       .Name("zipmoe_decompressor_busy_seconds_total")
                       .Help("Worker time spent running ops, summed over the replica's threads.")
                       .Register(registry)
                       .Add({{"replica", replica_}});
  prometheus::BuildGauge()
      .Name("zipmoe_decompressor_threads")
      .Help("Worker threads (L) of the decompressor replica.")
      .Register(registry)
      .Add({{"replica", replica_}})
      .Set(threads);
}

void DecompressorMetrics::ObserveOp(bool recover, double seconds) {
  const double s = NonNegative(seconds);
  op_seconds_[recover ? 1 : 0]->Observe(s);
  busy_seconds_->Increment(s);
}

// ---- CacheMetrics ----

CacheMetrics::CacheMetrics(prometheus::Registry& registry) {
  requests_family_ = &prometheus::BuildCounter()
                          .Name("zipmoe_cache_requests_total")
                          .Help("Expert-tensor lookups by the pool they were found in (M = miss) and layer.")
                          .Register(registry);
  auto& resident = prometheus::BuildGauge()
                       .Name("zipmoe_cache_resident_bytes")
                       .Help("Arena bytes that currently hold cached experts, by pool (F/C/S/E).")
                       .Register(registry);
  for (int p = 0; p < cache_manager::kPoolCount; ++p) resident_bytes_[p] = &resident.Add({{"pool", kPoolLetters[p]}});
}

void CacheMetrics::Update(const cache_manager::CacheCounters& counters) {
  for (int p = 0; p < cache_manager::kPoolCount; ++p) {
    resident_bytes_[p]->Set(static_cast<double>(counters.pools[p].resident_bytes));
  }

  MutexLock lock(&mu_);
  const size_t n_layers = counters.layer_requests.size();
  while (requests_.size() < n_layers) {
    const std::string layer = std::to_string(requests_.size());
    std::array<prometheus::Counter*, kStateCount> row{};
    for (int s = 0; s < kStateCount; ++s) {
      const char letter = CompressionStateLetter(static_cast<CompressionState>(s));
      row[s] = &requests_family_->Add({{"pool", std::string(1, letter)}, {"layer", layer}});
    }
    requests_.push_back(row);
  }
  last_requests_.resize(std::max(last_requests_.size(), n_layers), std::array<uint64_t, kStateCount>{});

  // A reset (ResetCounters) zeroes everything at once, so one value below its base marks the snapshot.
  bool reset = counters.lookups < last_lookups_;
  for (size_t l = 0; l < n_layers && !reset; ++l) {
    for (int s = 0; s < kStateCount; ++s) reset = reset || counters.layer_requests[l][s] < last_requests_[l][s];
  }
  for (size_t l = 0; l < n_layers; ++l) {
    for (int s = 0; s < kStateCount; ++s) {
      const uint64_t now = counters.layer_requests[l][s];
      const uint64_t delta = reset ? now : now - last_requests_[l][s];
      if (delta > 0) requests_[l][s]->Increment(static_cast<double>(delta));
      last_requests_[l][s] = now;
    }
  }
  last_lookups_ = counters.lookups;
}

// ---- SchedulerMetrics ----

SchedulerMetrics::SchedulerMetrics(prometheus::Registry& registry) {
  decompressors_ = &prometheus::BuildGauge()
                        .Name("zipmoe_scheduler_decompressors")
                        .Help("Decompressor replicas that are heart-beating now.")
                        .Register(registry)
                        .Add({});
  auto& queues = prometheus::BuildGauge()
                     .Name("zipmoe_scheduler_queue_depth")
                     .Help("Ops issued or waiting and not yet completed, by queue (read, decode, recover).")
                     .Register(registry);
  for (size_t q = 0; q < kQueues.size(); ++q) queue_depth_[q] = &queues.Add({{"queue", std::string(kQueues[q])}});
  makespan_seconds_ = &prometheus::BuildHistogram()
                           .Name("zipmoe_scheduler_layer_makespan_seconds")
                           .Help("Measured makespan of one MoE layer run, BeginLayer to EndLayer.")
                           .Register(registry)
                           .Add({}, MakespanSecondsBuckets());
  bound_ratio_ = &prometheus::BuildHistogram()
                      .Name("zipmoe_scheduler_layer_makespan_bound_ratio")
                      .Help("Measured layer makespan divided by its Lemma B.3 lower bound.")
                      .Register(registry)
                      .Add({}, BoundRatioBuckets());
}

void SchedulerMetrics::SetDecompressors(int replicas) { decompressors_->Set(std::max(0, replicas)); }

void SchedulerMetrics::SetQueueDepth(std::string_view queue, double ops) {
  const auto it = std::find(kQueues.begin(), kQueues.end(), queue);
  ZM_CHECK(it != kQueues.end()) << "unknown scheduler queue '" << queue << "' (read, decode, recover)";
  queue_depth_[static_cast<size_t>(it - kQueues.begin())]->Set(NonNegative(ops));
}

void SchedulerMetrics::ObserveLayer(double makespan_seconds, double bound_ratio) {
  makespan_seconds_->Observe(NonNegative(makespan_seconds));
  if (bound_ratio > 0 && std::isfinite(bound_ratio)) bound_ratio_->Observe(bound_ratio);
}

// ---- ExecutorMetrics ----

ExecutorMetrics::ExecutorMetrics(prometheus::Registry& registry) {
  ttft_seconds_ = &prometheus::BuildHistogram()
                       .Name("zipmoe_executor_ttft_seconds")
                       .Help("Time from request arrival to the first generated token.")
                       .Register(registry)
                       .Add({}, TtftSecondsBuckets());
  tpot_seconds_ = &prometheus::BuildHistogram()
                       .Name("zipmoe_executor_tpot_seconds")
                       .Help("Time per output token after the first, one observation per decode step.")
                       .Register(registry)
                       .Add({}, TpotSecondsBuckets());
  generated_tokens_ = &prometheus::BuildCounter()
                           .Name("zipmoe_executor_generated_tokens_total")
                           .Help("Tokens generated (usage.completion_tokens of every request).")
                           .Register(registry)
                           .Add({});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("zipmoe_executor_queue_depth")
                      .Help("HTTP generation requests waiting for a batch slot.")
                      .Register(registry)
                      .Add({});
  http_requests_ = &prometheus::BuildCounter()
                        .Name("zipmoe_http_requests_total")
                        .Help("HTTP requests answered, by route and status code.")
                        .Register(registry);
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("zipmoe_prompt_tokens_total")
                        .Help("Prompt tokens of admitted requests (each choice's prompt), cached ones included.")
                        .Register(registry)
                        .Add({});
  auto& kv_bytes = prometheus::BuildGauge()
                       .Name("zipmoe_kv_cache_bytes")
                       .Help("Bytes of KV cache the running sequences hold (state=\"used\") and may hold (state=\"budget\"; "
                             "0 = unbounded).")
                       .Register(registry);
  kv_used_bytes_ = &kv_bytes.Add({{"state", "used"}});
  kv_budget_bytes_ = &kv_bytes.Add({{"state", "budget"}});
  preemptions_ = &prometheus::BuildCounter()
                      .Name("zipmoe_preemptions_total")
                      .Help("Running sequences preempted for KV-cache room (their caches dropped, resumed exactly later).")
                      .Register(registry)
                      .Add({});
  cached_prompt_tokens_ = &prometheus::BuildCounter()
                               .Name("zipmoe_prompt_tokens_cached_total")
                               .Help("Prompt tokens the prefix cache held: continued from a kept KV cache, not prefilled.")
                               .Register(registry)
                               .Add({});
  generation_tokens_ = &prometheus::BuildCounter()
                            .Name("zipmoe_generation_tokens_total")
                            .Help("Tokens generated.")
                            .Register(registry)
                            .Add({});
  requests_running_ = &prometheus::BuildGauge()
                           .Name("zipmoe_requests_running")
                           .Help("Sequences (choices) in the running batch.")
                           .Register(registry)
                           .Add({});
  admitted_ = &prometheus::BuildCounter()
                   .Name("zipmoe_requests_admitted_total")
                   .Help("Sequences admitted to the running batch, by order: fifo (the oldest waiting) or grouped "
                         "(request grouping admitted it ahead of an older waiting sequence).")
                   .Register(registry);
  for (const char* order : {"fifo", "grouped"}) admitted_->Add({{"order", order}});
  requests_waiting_ = &prometheus::BuildGauge()
                           .Name("zipmoe_requests_waiting")
                           .Help("Sequences (choices) waiting for a batch slot.")
                           .Register(registry)
                           .Add({});
  time_to_first_token_ = &prometheus::BuildHistogram()
                              .Name("zipmoe_time_to_first_token_seconds")
                              .Help("Time from request arrival to a sequence's first token (TTFT).")
                              .Register(registry)
                              .Add({}, TtftSecondsBuckets());
  inter_token_latency_ = &prometheus::BuildHistogram()
                              .Name("zipmoe_inter_token_latency_seconds")
                              .Help("Time between consecutive tokens of a sequence (TPOT as the client sees it).")
                              .Register(registry)
                              .Add({}, TpotSecondsBuckets());
  e2e_latency_ = &prometheus::BuildHistogram()
                      .Name("zipmoe_e2e_request_latency_seconds")
                      .Help("Time from request arrival to its last choice's end.")
                      .Register(registry)
                      .Add({}, E2eSecondsBuckets());
  request_success_ = &prometheus::BuildCounter()
                          .Name("zipmoe_request_success_total")
                          .Help("Finished sequences (choices) by finish_reason: stop, length, abort, error.")
                          .Register(registry);
  build_info_ = &prometheus::BuildGauge()
                     .Name("zipmoe_build_info")
                     .Help("1, labelled with the version, git commit, CUDA toolkit and libtorch of this binary.")
                     .Register(registry);
}

void ExecutorMetrics::ObserveTtft(double seconds) {
  ttft_seconds_->Observe(NonNegative(seconds));
  time_to_first_token_->Observe(NonNegative(seconds));
}
void ExecutorMetrics::ObserveTpot(double seconds) {
  tpot_seconds_->Observe(NonNegative(seconds));
  inter_token_latency_->Observe(NonNegative(seconds));
}
void ExecutorMetrics::AddTokens(uint64_t tokens) {
  generated_tokens_->Increment(static_cast<double>(tokens));
  generation_tokens_->Increment(static_cast<double>(tokens));
}
void ExecutorMetrics::AddPromptTokens(uint64_t tokens) { prompt_tokens_->Increment(static_cast<double>(tokens)); }
void ExecutorMetrics::SetKvCache(int64_t used_bytes, int64_t budget_bytes, uint64_t preemptions) {
  kv_used_bytes_->Set(static_cast<double>(used_bytes));
  kv_budget_bytes_->Set(static_cast<double>(budget_bytes));
  if (preemptions > preemptions_seen_) preemptions_->Increment(static_cast<double>(preemptions - preemptions_seen_));
  preemptions_seen_ = preemptions;
}

void ExecutorMetrics::AddCachedPromptTokens(uint64_t tokens) {
  cached_prompt_tokens_->Increment(static_cast<double>(tokens));
}
void ExecutorMetrics::SetQueueDepth(double sequences) {
  queue_depth_->Set(NonNegative(sequences));
  requests_waiting_->Set(NonNegative(sequences));
}
void ExecutorMetrics::SetRunning(double sequences) { requests_running_->Set(NonNegative(sequences)); }
void ExecutorMetrics::CountAdmitted(std::string_view order) { admitted_->Add({{"order", std::string(order)}}).Increment(); }
void ExecutorMetrics::ObserveE2e(double seconds) { e2e_latency_->Observe(NonNegative(seconds)); }
void ExecutorMetrics::CountFinished(std::string_view finish_reason) {
  request_success_->Add({{"finished_reason", std::string(finish_reason)}}).Increment();
}
void ExecutorMetrics::SetBuildInfo(const std::string& version, const std::string& commit, const std::string& cuda,
                                   const std::string& libtorch) {
  build_info_->Add({{"version", version}, {"commit", commit}, {"cuda", cuda}, {"libtorch", libtorch}}).Set(1);
}

void ExecutorMetrics::CountHttp(std::string_view route, int code) {
  const bool known = std::find(kRoutes.begin(), kRoutes.end(), route) != kRoutes.end();
  // Family::Add returns the existing series for known labels (under the family's own mutex).
  http_requests_->Add({{"route", known ? std::string(route) : std::string("other")}, {"code", std::to_string(code)}})
      .Increment();
}

// ---- EmbeddedRuntimeMetrics ----

EmbeddedRuntimeMetrics::EmbeddedRuntimeMetrics(prometheus::Registry& registry) {
  io_ops_ = &prometheus::BuildCounter().Name("zipmoe_runtime_io_ops_total").Help("Chunk reads from the SSD (embedded runtime).").Register(registry).Add({});
  auto& bytes = prometheus::BuildCounter()
                    .Name("zipmoe_runtime_io_bytes_total")
                    .Help("Verified stored bytes read, by chunk kind (embedded runtime).")
                    .Register(registry);
  io_bytes_e_ = &bytes.Add({{"kind", "e_chunk"}});
  io_bytes_sm_ = &bytes.Add({{"kind", "sm_chunk"}});
  io_seconds_ = &prometheus::BuildCounter().Name("zipmoe_runtime_io_seconds_total").Help("Time spent in chunk reads (embedded runtime).").Register(registry).Add({});
  auto& ops = prometheus::BuildCounter()
                  .Name("zipmoe_runtime_worker_ops_total")
                  .Help("Decompression worker operations: E-chunk decodes and BF16 recoveries (embedded runtime).")
                  .Register(registry);
  decode_ops_ = &ops.Add({{"op", "decode"}});
  recover_ops_ = &ops.Add({{"op", "recover"}});
  auto& secs = prometheus::BuildCounter()
                   .Name("zipmoe_runtime_worker_seconds_total")
                   .Help("Decompression worker busy time by operation (embedded runtime).")
                   .Register(registry);
  decode_seconds_ = &secs.Add({{"op", "decode"}});
  recover_seconds_ = &secs.Add({{"op", "recover"}});
  budget_bytes_ = &prometheus::BuildGauge().Name("zipmoe_runtime_budget_bytes").Help("The runtime's memory budget.").Register(registry).Add({});
  arena_bytes_ = &prometheus::BuildGauge().Name("zipmoe_runtime_arena_bytes").Help("Bytes mapped for pools and staging.").Register(registry).Add({});
  prefetch_experts_ = &prometheus::BuildCounter()
                           .Name("zipmoe_runtime_prefetch_experts_total")
                           .Help("Prefetched experts of the next MoE layer by outcome: issued, used by their layer, "
                                 "wasted (dropped unused), failed (embedded runtime).")
                           .Register(registry);
  prefetch_bytes_ = &prometheus::BuildCounter()
                         .Name("zipmoe_runtime_prefetch_bytes_total")
                         .Help("Bytes read for prefetched experts by outcome: used or wasted (embedded runtime).")
                         .Register(registry);
  routed_experts_ = &prometheus::BuildCounter()
                         .Name("zipmoe_runtime_routed_experts_total")
                         .Help("Routed (token, expert) pairs the executor computed (embedded runtime).")
                         .Register(registry)
                         .Add({});
  substituted_experts_ = &prometheus::BuildCounter()
                              .Name("zipmoe_runtime_substituted_experts_total")
                              .Help("Routed (token, expert) pairs whose low-score expert SMoE substitution replaced by "
                                    "a cached one (--substitution-alpha > 0; the output is then not exact).")
                              .Register(registry)
                              .Add({});
  info_ = &prometheus::BuildGauge()
               .Name("zipmoe_runtime_info")
               .Help("1, labelled with the runtime's cache policy and prefetch predictor.")
               .Register(registry);
}

void EmbeddedRuntimeMetrics::Update(const runtime::RuntimeStats& t, const std::string& policy) {
  MutexLock lock(&mu_);
  auto add_u = [](prometheus::Counter* c, uint64_t now, uint64_t before) {
    if (now > before) c->Increment(static_cast<double>(now - before));
  };
  auto add_d = [](prometheus::Counter* c, double now, double before) {
    if (now > before) c->Increment(now - before);
  };
  add_u(io_ops_, t.io_ops, last_.io_ops);
  add_u(io_bytes_e_, t.io_bytes_e, last_.io_bytes_e);
  add_u(io_bytes_sm_, t.io_bytes_sm, last_.io_bytes_sm);
  add_d(io_seconds_, t.io_seconds, last_.io_seconds);
  add_u(decode_ops_, t.decode_ops, last_.decode_ops);
  add_u(recover_ops_, t.recover_ops, last_.recover_ops);
  add_d(decode_seconds_, t.decode_seconds, last_.decode_seconds);
  add_d(recover_seconds_, t.recover_seconds, last_.recover_seconds);
  budget_bytes_->Set(static_cast<double>(t.budget_bytes));
  arena_bytes_->Set(static_cast<double>(t.arena_bytes));
  auto experts = [&](const char* outcome) -> prometheus::Counter& {
    return prefetch_experts_->Add({{"outcome", outcome}, {"mode", t.prefetch_mode}});
  };
  auto bytes = [&](const char* outcome) -> prometheus::Counter& {
    return prefetch_bytes_->Add({{"outcome", outcome}, {"mode", t.prefetch_mode}});
  };
  const runtime::PrefetchTotals& pf = t.prefetch;
  const runtime::PrefetchTotals& pf_before = last_.prefetch;
  add_u(&experts("issued"), pf.issued, pf_before.issued);
  add_u(&experts("used"), pf.used, pf_before.used);
  add_u(&experts("wasted"), pf.wasted, pf_before.wasted);
  add_u(&experts("failed"), pf.failed, pf_before.failed);
  add_u(&bytes("used"), pf.used_bytes, pf_before.used_bytes);
  add_u(&bytes("wasted"), pf.wasted_bytes, pf_before.wasted_bytes);
  add_u(routed_experts_, t.substitution.routed, last_.substitution.routed);
  add_u(substituted_experts_, t.substitution.substituted, last_.substitution.substituted);
  if (!policy.empty()) info_->Add({{"policy", policy}, {"prefetch", t.prefetch_mode}}).Set(1);
  last_ = t;
}

// ---- BadMessageMetrics ----

BadMessageMetrics::BadMessageMetrics(prometheus::Registry& registry) {
  bad_messages_ = &prometheus::BuildCounter()
                       .Name("zipmoe_bad_messages_total")
                       .Help("Frames rejected on receipt (failed verification), dropped.")
                       .Register(registry)
                       .Add({});
}

LinkMetrics::LinkMetrics(prometheus::Registry& registry, const std::vector<std::string>& endpoints) {
  family_ = &prometheus::BuildCounter()
                 .Name("zipmoe_link_auth_refused_total")
                 .Help("Peers a CURVE endpoint refused (link_security), by endpoint and reason: key (a CURVE key "
                       "not of this deployment), protocol (plaintext, a wrong server key), incomplete (gone "
                       "mid-handshake).")
                 .Register(registry);
  for (const std::string& endpoint : endpoints) {
    for (int r = 0; r < messaging::kRefusalReasonCount; ++r) {
      family_->Add({{"endpoint", endpoint},
                    {"reason", messaging::RefusalReasonName(static_cast<messaging::RefusalReason>(r))}});
    }
  }
}

void LinkMetrics::Set(const std::vector<messaging::LinkRefusals>& refusals) {
  MutexLock lock(&mu_);
  for (const messaging::LinkRefusals& r : refusals) {
    uint64_t& before = last_[{r.endpoint, r.reason}];
    const uint64_t delta = r.count >= before ? r.count - before : r.count;
    prometheus::Counter& counter =
        family_->Add({{"endpoint", r.endpoint}, {"reason", messaging::RefusalReasonName(r.reason)}});
    if (delta > 0) counter.Increment(static_cast<double>(delta));
    before = r.count;
  }
}

MessageMetrics::MessageMetrics(prometheus::Registry& registry) {
  messages_ = &prometheus::BuildCounter()
                   .Name("zipmoe_messages_total")
                   .Help("Messages this service exchanged with a peer service, by direction (counted by the client).")
                   .Register(registry);
}

void MessageMetrics::Set(const std::string& peer, uint64_t sent, uint64_t received) {
  MutexLock lock(&mu_);
  auto [it, added] = last_.try_emplace(peer, 0, 0);
  (void)added;
  auto add = [&](const char* direction, uint64_t now, uint64_t& before) {
    const uint64_t delta = now >= before ? now - before : now;
    if (delta > 0) messages_->Add({{"peer", peer}, {"direction", direction}}).Increment(static_cast<double>(delta));
    before = now;
  };
  add("sent", sent, it->second.first);
  add("received", received, it->second.second);
}

void BadMessageMetrics::Set(uint64_t cumulative_total) {
  MutexLock lock(&mu_);
  const uint64_t delta = cumulative_total >= last_total_ ? cumulative_total - last_total_ : cumulative_total;
  if (delta > 0) bad_messages_->Increment(static_cast<double>(delta));
  last_total_ = cumulative_total;
}

ActivityMetrics::ActivityMetrics(prometheus::Registry& registry) {
  static_assert(trace::kActivityCount == 6, "one counter per trace::Activity");
  auto& family = prometheus::BuildCounter()
                     .Name("zipmoe_activity_seconds_total")
                     .Help("Seconds this process spent in each activity (forward, wait_experts, handle_message, "
                           "schedule_layer, read, decode), all threads summed; activities may nest.")
                     .Register(registry);
  for (int a = 0; a < trace::kActivityCount; ++a) {
    seconds_[static_cast<size_t>(a)] = &family.Add({{"activity", trace::ActivityName(static_cast<trace::Activity>(a))}});
  }
}

void ActivityMetrics::Update() {
  MutexLock lock(&mu_);
  for (int a = 0; a < trace::kActivityCount; ++a) {
    const double now = trace::ActivitySeconds(static_cast<trace::Activity>(a));
    double& before = last_[static_cast<size_t>(a)];
    if (now > before) seconds_[static_cast<size_t>(a)]->Increment(now - before);
    before = now;
  }
}

}  // namespace zipmoe::metrics
