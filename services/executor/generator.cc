#include "services/executor/generator.h"

#include "common/observed_expert_provider.h"
#include "common/file_util.h"
#include "common/parallel.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <cstring>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "kernels/device_memory.h"
#include "kernels/recovery.h"
#include "services/executor/device_profile.h"
#include "services/executor/heap_memory.h"
#include "services/executor/model.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_device.h"
#include "services/executor/prefix_cache.h"
#include "services/executor/torch_util.h"
#include "services/executor/work_pool.h"

namespace zipmoe::executor {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Result<at::Device> ParseDevice(const std::string& name) {
  if (name.empty() || name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!at::hasCUDA())
      return Status::InvalidArgument(fmt::format("device '{}': this libtorch build has no CUDA support", name));
    at::Device device(at::kCPU);
    ZM_RETURN_IF_ERROR(TorchBoundary("device '" + name + "'", [&]() -> Status {
      device = at::Device(name);
      return Status::Ok();
    }));
    return device;
  }
  return Status::InvalidArgument(fmt::format("unknown device '{}' (expected cpu, cuda or cuda:N)", name));
}

// Appends rows [first, first + n) of logits [rows, vocab] to out.
void AppendRows(const at::Tensor& logits, int64_t first, int64_t n, std::vector<float>* out) {
  const int64_t vocab = logits.size(1);
  const float* p = logits.data_ptr<float>() + first * vocab;
  out->insert(out->end(), p, p + n * vocab);
}

}  // namespace

// The KV budget of GeneratorOptions::kv_budget_bytes, shared by the Generator's sessions.
struct KvBudget {
  int64_t bytes = 0;               // 0: unbounded
  int64_t page_positions = 0;      // caches grow in pages of this many positions (0: doubling)
  int64_t bytes_per_position = 0;  // Model::KvBytesPerPosition
  // Model::KvWindowedBytesPerPosition: (window, bytes per position) of the trimmed sliding-window layers,
  // part of bytes_per_position
  std::vector<std::pair<int64_t, int64_t>> windowed;
  int64_t fixed_bytes = 0;         // Model::KvFixedBytes
  int64_t used_bytes = 0;          // held by sequences now
  uint64_t preemptions = 0;
  // A sequence's bytes at `positions` cached positions, in whole pages, while its last `appended`
  // positions are appended in one step (a trimmed sliding-window layer holds at most
  // KvCache::WindowCapacity(window, appended) rows).
  int64_t SequenceBytes(int64_t positions, int64_t appended) const {
    const int64_t pages = page_positions > 0 ? (positions + page_positions - 1) / page_positions : 0;
    const int64_t rows = pages * page_positions;
    int64_t bytes = rows * bytes_per_position + fixed_bytes;
    for (const auto& [window, per_position] : windowed)
      bytes -= (rows - std::min(rows, KvCache::WindowCapacity(window, appended, page_positions))) * per_position;
    return bytes;
  }
  // The most a prefill of `fed` positions holds at any of its steps, fed in chunks of `chunk` (0: whole):
  // its last step, or the last full chunk before it (a trimmed sliding-window layer holds the chunk's rows).
  int64_t PrefillBytes(int64_t fed, int64_t chunk) const {
    const int64_t last = chunk > 0 ? (fed - 1) % chunk + 1 : fed;
    const int64_t at_end = SequenceBytes(fed, last);
    return fed > last ? std::max(at_end, SequenceBytes(fed - last, chunk)) : at_end;
  }
};

struct Generator::Impl {
  std::string dir;
  int n_threads = 1;
  std::unique_ptr<LoadedModel> loaded;
  ExpertProvider* provider = nullptr;                 // what the model calls (observed)
  std::unique_ptr<ObservedExpertProvider> observed;  // records each layer's routing, then on_routing
  std::vector<std::vector<int32_t>> last_routing;    // [num_hidden_layers]: the latest step's experts
  std::unique_ptr<Model> model;
  std::unique_ptr<PrefixCache> prefix_cache;  // GeneratorOptions::prefix_cache_bytes > 0
  KvBudget budget;
  int64_t kv_page_positions = 64;  // GeneratorOptions::kv_page_positions
  int64_t prefill_chunk = 0;       // GeneratorOptions::prefill_chunk
};

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

const ModelConfig& Generator::config() const { return impl_->loaded->config; }
const std::string& Generator::model_dir() const { return impl_->dir; }
int Generator::n_threads() const { return impl_->n_threads; }
WeightsMemoryStats Generator::weights_memory() const { return CurrentWeightsMemory(*impl_->loaded); }

bool Generator::WaitForWeightsMemory(double timeout_s) const {
  BackgroundWeightsCopy* copy = impl_->loaded->background_copy.get();
  return copy == nullptr ||
         copy->Wait(std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, timeout_s) * 1000.0)));
}

namespace {

// The device F slots of GeneratorOptions::device_memory_budget_* for `config` on `device`.
// managed >= 0: the provider's pool F decides (ExpertProvider::device_f_slots): that many managed
// slots and no LRU capacity of its own.
Result<std::unique_ptr<DeviceExpertCache>> MakeDeviceExpertCache(const ModelConfig& config, at::Device device,
                                                                 const GeneratorOptions& options, int64_t managed) {
  const int64_t slot_elems = 3 * config.moe_intermediate_size * config.hidden_size;
  const auto allocate = [device, slot_elems] {
    return at::empty({slot_elems}, at::TensorOptions().dtype(at::kBFloat16).device(device));
  };
  if (managed >= 0) {
    auto cache = std::make_unique<DeviceExpertCache>(0, allocate);
    cache->SetManagedSlots(managed);
    return cache;
  }
  const auto slot_bytes = static_cast<uint64_t>(slot_elems) * 2;
  int64_t routed = 0;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l)
    if (config.IsMoeLayer(l)) routed += config.num_experts;
  int64_t capacity = 0;
  if (options.device_memory_budget_percent > 0) {
    capacity = static_cast<int64_t>(static_cast<double>(routed) * options.device_memory_budget_percent / 100.0);
  } else if (options.device_memory_budget_bytes >= 0) {
    capacity = static_cast<int64_t>(static_cast<uint64_t>(options.device_memory_budget_bytes) / slot_bytes);
  } else {
    ZM_ASSIGN_OR_RETURN(kernels::DeviceProperties p, kernels::QueryDevice());
    if (!p.integrated) capacity = static_cast<int64_t>(kernels::UsableExpertBytes(p) / slot_bytes);
  }
  capacity = std::min(capacity, routed);
  return std::make_unique<DeviceExpertCache>(capacity, allocate);
}

}  // namespace

Result<bool> ParseKvCacheDtype(const std::string& value, const std::string& where) {
  if (value == "f32" || value.empty()) return false;
  if (value == "bf16") return true;
  return Status::InvalidArgument(fmt::format("{} '{}': f32 (the default) or bf16", where, Clip(value)));
}

Result<std::unique_ptr<Generator>> Generator::Create(const GeneratorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = options.model_dir;
  impl->n_threads = ResolveComputeThreadCount(options.n_threads);
  if (!(options.substitution_alpha >= 0.0 && options.substitution_alpha < 1.0))
    return Status::InvalidArgument(fmt::format(
        "substitution alpha {} is outside [0, 1): 0 computes the exact model, (0, 1) lets SMoE replace low-score experts",
        options.substitution_alpha));
  if (options.prefix_cache_bytes < 0)
    return Status::InvalidArgument(fmt::format("prefix cache bytes {} is negative (0 turns it off)",
                                               options.prefix_cache_bytes));
  if (options.prefix_cache_bytes > 0) impl->prefix_cache = std::make_unique<PrefixCache>(options.prefix_cache_bytes);
  if (options.prefill_chunk < 0)
    return Status::InvalidArgument(
        fmt::format("prefill chunk {} is negative (0 feeds a prompt whole)", options.prefill_chunk));
  impl->prefill_chunk = options.prefill_chunk;
  if (options.kv_budget_bytes < 0 || options.kv_page_positions < 1)
    return Status::InvalidArgument(fmt::format("KV budget {} bytes / page {} positions: the budget must be >= 0 (0 = "
                                               "unbounded) and the page >= 1", options.kv_budget_bytes,
                                               options.kv_page_positions));
  impl->budget.bytes = options.kv_budget_bytes;
  impl->kv_page_positions = options.kv_page_positions;
  impl->budget.page_positions = options.kv_budget_bytes > 0 ? options.kv_page_positions : 0;
  ZM_ASSIGN_OR_RETURN(at::Device device, ParseDevice(options.device));
  ZM_RETURN_IF_ERROR(TorchBoundary("set_num_threads", [&]() -> Status {
    // On the CPU the matmuls, attention and norms run in our kernels on WorkPool's n_threads; what torch
    // still does there (copies, cat, embedding rows: ~1.3 % of a 512-token prefill) runs on the caller.
    // With torch's OpenMP team at n_threads too, its threads spin after each region on the cores the
    // pool's helpers need next: on a 2-core Zen 2 glm4_moe's 16-token prefill ran at 74-82 tokens/s
    // against 133-135 with one torch thread (129-131 with OMP_WAIT_POLICY=PASSIVE), 512 tokens 183
    // against 197, deepseek_v2's 69 against 74; qwen2_moe, qwen3_moe and gpt_oss the same either way
    // (docs/benchmarks.md "(m) on other machines"). On a GPU torch's CPU threads are left at n_threads.
    at::set_num_threads(device.is_cpu() ? 1 : impl->n_threads);
    WorkPool::SetSharedThreads(static_cast<int>(impl->n_threads));  // the CPU kernels' regions (work_pool.h)
    RetainFreedHeapMemory();  // a layer's freed buffers serve the next one without page faults (heap_memory.h)
    return Status::Ok();
  }));
  LoadOptions load;
  load.device = device;
  load.dtype = device.is_cpu() ? at::kFloat : at::kBFloat16;
  load.resident_experts = options.expert_provider == nullptr;
  load.n_threads = impl->n_threads;
  load.weights_memory = options.weights_memory;
  ZM_ASSIGN_OR_RETURN(impl->loaded, LoadModel(options.model_dir, load));
  if (impl->loaded->config.is_encoder_decoder() &&
      (options.substitution_alpha != 0.0 || options.device_assignment != scheduler::DeviceAssignmentMode::kNone))
    return Status::InvalidArgument(fmt::format(
        "{}: expert substitution and device assignment are not supported for model_type {}", options.model_dir,
        impl->loaded->config.model_type));
  ExpertProvider* provider = options.expert_provider != nullptr
                                 ? options.expert_provider
                                 : static_cast<ExpertProvider*>(impl->loaded->resident_experts.get());
  impl->last_routing.resize(static_cast<size_t>(impl->loaded->config.num_hidden_layers));
  Impl* raw = impl.get();
  impl->observed = std::make_unique<ObservedExpertProvider>(
      provider, [raw, on_routing = options.on_routing](const LayerRouting& routing) {
        if (routing.layer_id >= 0 && static_cast<size_t>(routing.layer_id) < raw->last_routing.size())
          raw->last_routing[static_cast<size_t>(routing.layer_id)] = routing.expert_ids;
        if (on_routing) on_routing(routing);
      });
  provider = impl->observed.get();
  impl->provider = provider;
  impl->model = std::make_unique<Model>(*impl->loaded, provider, load.device, load.dtype);
  impl->model->set_kv_cache_bf16(options.kv_cache_bf16);
  impl->model->set_kv_window_full(options.kv_window_full);
  impl->budget.bytes_per_position = impl->model->KvBytesPerPosition();
  impl->budget.windowed = impl->model->KvWindowedBytesPerPosition();
  impl->budget.fixed_bytes = impl->model->KvFixedBytes();
  impl->model->set_substitution_alpha(options.substitution_alpha);
  if (options.device_assignment == scheduler::DeviceAssignmentMode::kGreedy && !device.is_cpu()) {
    scheduler::DeviceCostModel cost;
    if (options.device_cost != nullptr) {
      cost = *options.device_cost;
    } else {
      ZM_ASSIGN_OR_RETURN(cost, ProfileExpertDevices(impl->loaded->config, device, load.dtype));
    }
    impl->model->set_device_placement(cost);
  }
  const bool device_slots = device.is_cuda() && options.device_assignment == scheduler::DeviceAssignmentMode::kNone &&
                            !impl->loaded->config.is_encoder_decoder() && kernels::BuiltWithCuda() &&
                            kernels::CudaDeviceCount() > 0;
  const int64_t managed = provider->device_f_slots();
  if (managed >= 0 && !device_slots)
    return Status::InvalidArgument(fmt::format(
        "{}: the expert runtime keeps pool F in device slots, but this executor does not read them (device {}, "
        "device assignment {}, model_type {}): it needs the GPU executor (a CUDA device, no device assignment, "
        "a decoder-only model)", options.model_dir, options.device,
        options.device_assignment == scheduler::DeviceAssignmentMode::kNone ? "none" : "greedy",
        impl->loaded->config.model_type));
  if (device_slots) {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceExpertCache> cache,
                        MakeDeviceExpertCache(impl->loaded->config, device, options, managed));
    // Every expert resident in host memory and room for all of them on the device: put them there
    // now (the provider itself, not the observed one: a preload is no routing).
    if (impl->loaded->resident_experts != nullptr && options.expert_provider == nullptr) {
      Status preloaded = TorchBoundary("preloading the device F slots", [&]() -> Status {
        return PreloadDeviceExperts(impl->loaded->config, impl->loaded->weights.layers, *impl->loaded->resident_experts,
                                    *cache).status();
      });
      ZM_RETURN_IF_ERROR(preloaded);
    }
    impl->model->set_device_expert_cache(std::move(cache));
  }
  if (provider->prefetch_mode() == PrefetchMode::kResidual) {
    const ModelConfig& c = impl->loaded->config;
    const std::string path = options.prefetch_residuals.empty()
                                 ? JoinPath(options.model_dir, kPrefetchResidualsFileName)
                                 : options.prefetch_residuals;
    ZM_ASSIGN_OR_RETURN(PrefetchResiduals residuals, ReadPrefetchResiduals(path, c.hidden_size, c.num_hidden_layers));
    std::vector<at::Tensor> by_layer(static_cast<size_t>(c.num_hidden_layers));
    ZM_RETURN_IF_ERROR(TorchBoundary("prefetch residuals", [&]() -> Status {
      for (const auto& [layer, v] : residuals.by_layer) {
        by_layer[static_cast<size_t>(layer)] =
            at::tensor(v, at::TensorOptions().dtype(at::kFloat)).to(load.device);
      }
      return Status::Ok();
    }));
    impl->model->set_prefetch_residuals(std::move(by_layer));
  }
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

const scheduler::DeviceCostModel& Generator::device_cost() const {
  static const scheduler::DeviceCostModel kNoAccelerator;  // has_accelerator false
  const DevicePlacement* placement = impl_->model->device_placement();
  return placement != nullptr ? placement->cost : kNoAccelerator;
}

Status Generator::set_kv_budget_bytes(int64_t bytes) {
  if (bytes < 0) return Status::InvalidArgument(fmt::format("KV budget {} bytes is negative (0 = unbounded)", bytes));
  impl_->budget.bytes = bytes;
  if (bytes > 0 && impl_->budget.page_positions == 0) impl_->budget.page_positions = impl_->kv_page_positions;
  return Status::Ok();
}

KvBudgetCounters Generator::kv_budget_stats() const {
  KvBudgetCounters out;
  const KvBudget& b = impl_->budget;
  out.enabled = b.bytes > 0 && !impl_->loaded->config.is_encoder_decoder();
  out.budget_bytes = b.bytes;
  out.used_bytes = b.used_bytes;
  out.bytes_per_position = b.bytes_per_position;
  out.fixed_bytes = b.fixed_bytes;
  out.preemptions = b.preemptions;
  return out;
}

PrefixCacheCounters Generator::prefix_cache_stats() const {
  return impl_->prefix_cache ? impl_->prefix_cache->stats() : PrefixCacheCounters{};
}

DeviceExpertStats Generator::device_expert_stats() const {
  DeviceExpertStats out;
  const DeviceExpertCache* cache = impl_->model->device_expert_cache();
  if (cache == nullptr) return out;
  const ModelConfig& c = impl_->loaded->config;
  out.active = true;
  out.capacity = cache->capacity();
  out.resident = cache->size();
  out.hits = cache->stats().hits;
  out.misses = cache->stats().misses;
  out.evictions = cache->stats().evictions;
  out.staged = cache->stats().staged;
  out.slot_bytes = static_cast<uint64_t>(3 * c.moe_intermediate_size * c.hidden_size * 2);
  if (impl_->provider->device_f_slots() >= 0) {
    out.managed_slots = cache->managed_slots();
    out.managed_allocated = cache->managed_allocated();
    out.managed_hits = cache->stats().managed_hits;
    out.managed_fills = cache->stats().managed_fills;
  }
  return out;
}

scheduler::DeviceAssignmentStats Generator::device_assignment_stats() const {
  const DevicePlacement* placement = impl_->model->device_placement();
  return placement != nullptr ? placement->stats : scheduler::DeviceAssignmentStats{};
}

Result<std::vector<std::vector<int32_t>>> Generator::PredictExperts(const std::vector<int32_t>& prompt) const {
  return impl_->model->PredictExperts(prompt);
}

std::vector<std::vector<int32_t>> Generator::ExpertsAtHand() const {
  const ModelConfig& c = impl_->loaded->config;
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(c.num_hidden_layers));
  std::vector<uint8_t> cached;
  for (int32_t l = 0; l < static_cast<int32_t>(out.size()); ++l) {
    if (!c.IsMoeLayer(l)) continue;
    impl_->provider->CachedExperts(l, static_cast<int32_t>(c.num_experts), &cached);
    for (int32_t e : impl_->last_routing[static_cast<size_t>(l)])
      if (e >= 0 && static_cast<size_t>(e) < cached.size()) cached[static_cast<size_t>(e)] = 1;
    for (size_t e = 0; e < cached.size(); ++e)
      if (cached[e] != 0) out[static_cast<size_t>(l)].push_back(static_cast<int32_t>(e));
  }
  return out;
}

std::string TorchVersion() {
  return fmt::format("{}.{}.{}", TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH);
}

// ---------------------------------------------------------------------------------------------
// BatchSession

namespace {

// Fills out->logprob (of `token`) and out->top (the `k` most likely) from one row of raw logits:
// log_softmax in double; NaN logits have probability 0 and are never listed.
void Logprobs(const float* logits, int64_t vocab, int32_t token, int32_t k, SampledToken* out) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_z = max_logit + std::log(sum);
  auto logprob = [&](int64_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity()
                                 : static_cast<float>(static_cast<double>(logits[i]) - log_z);
  };
  out->logprob = logprob(token);
  out->top.clear();
  if (k <= 0) return;
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) order.push_back(static_cast<int32_t>(i));
  const size_t keep = std::min(order.size(), static_cast<size_t>(k));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [logits](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  for (size_t i = 0; i < keep; ++i) out->top.push_back(TokenLogprob{order[i], logprob(order[i])});
}

}  // namespace

struct BatchSession::Impl {
  struct Sequence {
    SequenceId id = 0;
    GenerationParams params;
    Sampler sampler;
    KvCache cache;
    SequenceCallback on_token;
    GenerationResult result;
    bool prefilled = false;
    bool looked_up = false;        // the prefix cache was asked (once, when first considered for a step)
    int64_t held_bytes = 0;        // KV bytes counted against the budget (KvBudget)
    std::vector<int32_t> prefill;  // the tokens to feed (the prompt, its part after a prefix-cache hit, or
                                   // after a preemption the prompt and every generated token)
    int64_t prefill_fed = 0;       // of them, fed by earlier steps (chunked prefill)
    std::vector<int32_t> feed;  // the one token of a decode step, or a chunk of `prefill`
    // Admitted: decoding, or part of its prefill fed (holds cache positions).
    bool admitted() const { return prefilled || prefill_fed > 0; }
    std::unordered_map<int32_t, int32_t> counts;  // generated token -> occurrences (penalties)
    std::vector<int32_t> prompt_tokens;  // the prompt's distinct ids, with a repetition penalty (PromptTokenSet)
    Sequence(SequenceId i, const GenerationParams& p, uint64_t stream, KvCache c, SequenceCallback cb,
             std::vector<int32_t> prompt)
        : id(i), params(p), sampler(p.sampling, stream), cache(std::move(c)), on_token(std::move(cb)) {
      result.prompt_ids = std::move(prompt);
    }
  };
  Model* model = nullptr;
  const ModelConfig* config = nullptr;
  PrefixCache* prefix_cache = nullptr;  // the Generator's, or null
  KvBudget* budget = nullptr;           // the Generator's; budget->bytes == 0: unbounded
  std::vector<std::unique_ptr<Sequence>> sequences;  // in the order they were added
  SequenceId next_id = 1;
  int64_t steps = 0;
  int64_t prefill_chunk = 0;  // GeneratorOptions::prefill_chunk (0: whole)

  // The tokens s's next step feeds: one when it decodes, else its prefill's next chunk.
  int64_t NextFeed(const Sequence& s) const {
    if (s.prefilled) return 1;
    const auto left = static_cast<int64_t>(s.prefill.size()) - s.prefill_fed;
    return prefill_chunk > 0 && !config->is_encoder_decoder() ? std::min(left, prefill_chunk) : left;
  }

  bool bounded() const { return budget->bytes > 0 && !config->is_encoder_decoder(); }
  // A new sequence's empty cache, growing in the budget's pages (KvCache::Prefix copies keep them).
  KvCache NewCache() const {
    KvCache cache = model->NewCache();
    cache.set_page_positions(budget->page_positions);
    return cache;
  }
  // The positions s may reach, for its cache's growth (KvCache::set_expected_positions): the prompt and
  // every token it may generate, within the model's positions.
  void ExpectPositions(Sequence& s) const {
    const int64_t limit = config->max_position_embeddings;
    const int64_t most = static_cast<int64_t>(s.result.prompt_ids.size()) + std::min<int64_t>(s.params.max_new_tokens, limit);
    s.cache.set_expected_positions(std::min<int64_t>(most, limit));
  }
  // Drops a running sequence's cache to make room: it waits again and re-prefills its prompt and every
  // token it generated (the same bits, the kernels being batch-invariant), then samples on.
  void Preempt(Sequence& s) {
    Restart(s);
    ++budget->preemptions;
  }
  // The sequence's cache is gone (preempted, or a failed forward left it unusable): it waits again
  // and re-prefills its prompt and every generated token.
  void Restart(Sequence& s) {
    budget->used_bytes -= s.held_bytes;
    s.held_bytes = 0;
    s.cache = NewCache();
    ExpectPositions(s);
    s.prefill = s.result.prompt_ids;
    s.prefill.insert(s.prefill.end(), s.result.generated_ids.begin(), s.result.generated_ids.end());
    s.prefill_fed = 0;
    s.prefilled = false;
  }
  // The first time a waiting sequence is considered for a step: a prompt that starts with a finished
  // sequence's tokens continues from a copy of its cache (a lookup made then, not when it was queued, so
  // a waiting sequence holds no copy).
  void LookUpPrefix(Sequence& s) {
    s.looked_up = true;
    if (prefix_cache == nullptr || s.params.record_logits || config->is_encoder_decoder()) return;
    int64_t reused = 0;
    std::optional<KvCache> hit;
    if (!TorchBoundary("prefix cache lookup", [&]() -> Status {
          hit = prefix_cache->Lookup(s.result.prompt_ids, &reused);
          return Status::Ok();
        }).ok() || !hit)
      return;
    s.cache = std::move(*hit);
    ExpectPositions(s);
    s.prefill.assign(s.result.prompt_ids.begin() + reused, s.result.prompt_ids.end());
    // A resumed sequence (AddSequence's `generated`) feeds its earlier tokens after the prompt.
    s.prefill.insert(s.prefill.end(), s.result.generated_ids.begin(), s.result.generated_ids.end());
    s.result.cached_prompt_tokens = reused;
  }

  // A finished sequence's cache goes to the prefix cache with the tokens its positions hold.
  void KeepForReuse(Sequence& s) {
    if (prefix_cache == nullptr || config->is_encoder_decoder()) return;
    const int64_t n = s.cache.length();
    if (n <= 0) return;
    std::vector<int32_t> tokens = s.result.prompt_ids;
    tokens.insert(tokens.end(), s.result.generated_ids.begin(), s.result.generated_ids.end());
    if (static_cast<int64_t>(tokens.size()) < n) return;
    tokens.resize(static_cast<size_t>(n));
    // A cache whose reserved room (doubling, or ExpectPositions for a request that stopped early) is over a
    // quarter of what it holds is kept as a copy of its positions, so that room is not counted (and held)
    // against the prefix cache's budget.
    if (s.cache.bytes() > s.cache.length_bytes() + s.cache.length_bytes() / 4 &&
        !TorchBoundary("prefix cache copy", [&]() -> Status {
           s.cache = s.cache.Prefix(n);
           return Status::Ok();
         }).ok())
      return;
    prefix_cache->Insert(std::move(tokens), std::move(s.cache));
  }
  // A model with a recurrent state (Gated DeltaNet) or trimmed sliding-window layers (KvCache::
  // set_trim_windows) keeps a copy of the cache right after the prompt too (prefix_cache.h): a chat's next
  // turn starts with this prompt even when the answer re-tokenizes differently (or, as gpt-oss's Harmony
  // format, drops the reasoning), which the finished cache may no longer be cut to.
  // Whether s's cache may drop positions of its sliding-window layers before it ends (it may reach a
  // window's length: KvCache::set_trim_windows trims no earlier).
  bool MayTrimWindows(const Sequence& s) const {
    const int64_t most = static_cast<int64_t>(s.result.prompt_ids.size()) + s.params.max_new_tokens;
    return std::any_of(budget->windowed.begin(), budget->windowed.end(),
                       [&](const std::pair<int64_t, int64_t>& w) { return most > w.first; });
  }
  void KeepPromptSnapshot(const Sequence& s) {
    if (prefix_cache == nullptr || config->is_encoder_decoder() || s.params.record_logits ||
        !(s.cache.has_recurrent_state() || MayTrimWindows(s)) ||
        s.cache.length() != static_cast<int64_t>(s.result.prompt_ids.size()))
      return;
    // A snapshot that cannot be made (out of memory) only costs a later prefill.
    (void)TorchBoundary("prefix cache snapshot", [&]() -> Status {
      prefix_cache->Insert(s.result.prompt_ids, s.cache.Prefix(s.cache.length()));
      return Status::Ok();
    });
  }
};

BatchSession::BatchSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
BatchSession::~BatchSession() = default;

std::unique_ptr<BatchSession> Generator::NewSession() {
  auto impl = std::make_unique<BatchSession::Impl>();
  impl->model = impl_->model.get();
  impl->config = &impl_->loaded->config;
  impl->prefix_cache = impl_->prefix_cache.get();
  impl->budget = &impl_->budget;
  impl->prefill_chunk = impl_->prefill_chunk;
  return std::unique_ptr<BatchSession>(new BatchSession(std::move(impl)));
}

size_t BatchSession::queued() const {
  return static_cast<size_t>(std::count_if(impl_->sequences.begin(), impl_->sequences.end(),
                                           [](const auto& s) { return !s->prefilled; }));
}
size_t BatchSession::running() const { return impl_->sequences.size() - queued(); }
int64_t BatchSession::steps() const { return impl_->steps; }

Result<BatchSession::SequenceId> BatchSession::AddSequence(std::vector<int32_t> prompt, const GenerationParams& params,
                                                           uint64_t sampler_stream, SequenceCallback on_token,
                                                           std::vector<int32_t> generated) {
  const ModelConfig& c = *impl_->config;
  if (params.max_new_tokens < 0)
    return Status::InvalidArgument(fmt::format("max_new_tokens must be >= 0, got {}", params.max_new_tokens));
  if (prompt.empty()) return Status::InvalidArgument("the prompt is empty");
  const SamplingParams& sp = params.sampling;
  if (!(sp.repetition_penalty > 0.0f) || !std::isfinite(sp.repetition_penalty))
    return Status::InvalidArgument(
        fmt::format("repetition_penalty must be a finite number > 0 (1 = off), got {}", sp.repetition_penalty));
  if (params.min_new_tokens < 0)
    return Status::InvalidArgument(fmt::format("min_new_tokens must be >= 0, got {}", params.min_new_tokens));
  if (!(sp.min_p >= 0.0f && sp.min_p <= 1.0f))
    return Status::InvalidArgument(fmt::format("min_p must be in [0, 1] (0 = off), got {}", sp.min_p));
  if (!generated.empty() && static_cast<int64_t>(generated.size()) >= params.max_new_tokens)
    return Status::InvalidArgument(fmt::format("{} tokens already generated, not fewer than max_new_tokens {}",
                                               generated.size(), params.max_new_tokens));
  if (!generated.empty() && c.is_encoder_decoder())
    return Status::InvalidArgument(fmt::format("resuming a sequence is not supported for {} ({})", c.model_type, c.source));
  // Positions the first step feeds: the prompt, then what was generated before (a resumed sequence).
  const int64_t fed = static_cast<int64_t>(prompt.size() + generated.size());
  if (fed > c.max_position_embeddings)
    return Status::InvalidArgument(fmt::format("the prompt has {} tokens{}, longer than max_position_embeddings {} ({})",
                                               prompt.size(),
                                               generated.empty() ? "" : fmt::format(" (+ {} generated)", generated.size()),
                                               c.max_position_embeddings, c.source));
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
      return Status::InvalidArgument(
          fmt::format("prompt token {} (position {}) is outside the vocabulary [0, {})", prompt[i], i, c.vocab_size));
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    if (generated[i] < 0 || generated[i] >= c.vocab_size)
      return Status::InvalidArgument(fmt::format("generated token {} (index {}) is outside the vocabulary [0, {})",
                                                 generated[i], i, c.vocab_size));
  }
  const int64_t prefill_bytes = impl_->budget->PrefillBytes(fed, c.is_encoder_decoder() ? 0 : impl_->prefill_chunk);
  if (impl_->bounded() && prefill_bytes > impl_->budget->bytes)
    return Status::InvalidArgument(fmt::format(
        "the prompt's {} tokens need {:.1f} MiB of KV cache, more than the whole KV budget of {:.1f} MiB", fed,
        static_cast<double>(prefill_bytes) / (1 << 20),
        static_cast<double>(impl_->budget->bytes) / (1 << 20)));
  const SequenceId id = impl_->next_id++;
  auto seq = std::make_unique<Impl::Sequence>(id, params, sampler_stream, impl_->NewCache(), std::move(on_token),
                                              std::move(prompt));
  // The repetition penalty counts a decoder's prompt (an encoder-decoder model's prompt is its encoder's
  // input: only the generated tokens count there, as transformers' decoder input_ids).
  if (params.sampling.repetition_penalty != 1.0f && !c.is_encoder_decoder())
    seq->prompt_tokens = PromptTokenSet(seq->result.prompt_ids);
  if (!generated.empty()) {
    // As if this session had sampled them: one draw each, counted for the penalties, accepted by the
    // constraint; the first step feeds them after the prompt, as after a preemption.
    seq->sampler.Skip(generated.size());
    for (int32_t t : generated) {
      ++seq->counts[t];
      if (params.constraint != nullptr) params.constraint->Accept(t);
    }
    seq->result.generated_ids = std::move(generated);
  }
  seq->prefill = seq->result.prompt_ids;
  seq->prefill.insert(seq->prefill.end(), seq->result.generated_ids.begin(), seq->result.generated_ids.end());
  impl_->ExpectPositions(*seq);
  impl_->sequences.push_back(std::move(seq));
  return id;
}

std::vector<BatchSession::Finished> BatchSession::Step() {
  std::vector<Finished> finished;
  auto& sequences = impl_->sequences;
  if (sequences.empty()) return finished;
  const ModelConfig& c = *impl_->config;
  const int64_t vocab = c.vocab_size;
  KvBudget& budget = *impl_->budget;
  // Which sequences this step feeds: every one without a KV budget. With one, admitted sequences first
  // (decoding, or part of their prompt fed; oldest first), each growing by a position or its prefill's next
  // chunk; one that needs bytes that are not free preempts the most recently admitted other one (itself when
  // it is that one); then waiting sequences, oldest first, while their prefill's first step fits (no
  // overtaking).
  std::vector<Impl::Sequence*> batch;
  for (auto& sp : sequences) {
    if (!sp->looked_up && !sp->prefilled) impl_->LookUpPrefix(*sp);
  }
  if (!impl_->bounded()) {
    for (auto& sp : sequences) batch.push_back(sp.get());
  } else {
    std::vector<Impl::Sequence*> running;
    for (auto& sp : sequences)
      if (sp->admitted()) running.push_back(sp.get());
    for (size_t i = 0; i < running.size(); ++i) {
      Impl::Sequence& s = *running[i];
      if (!s.admitted()) continue;  // preempted for an older one in this loop
      const int64_t n = impl_->NextFeed(s);
      const int64_t need = budget.SequenceBytes(s.cache.length() + n, n) - s.held_bytes;
      while (budget.used_bytes + need > budget.bytes) {
        // The youngest admitted sequence that may be preempted (not recording logits: a re-prefill would
        // record its rows again).
        Impl::Sequence* victim = nullptr;
        for (size_t v = running.size(); v-- > i;) {
          if (running[v]->admitted() && !running[v]->params.record_logits) {
            victim = running[v];
            break;
          }
        }
        if (victim == nullptr && !s.params.record_logits) victim = &s;
        if (victim == nullptr) break;
        impl_->Preempt(*victim);
        if (victim == &s) break;
      }
      if (!s.admitted()) continue;
      if (budget.used_bytes + need > budget.bytes) continue;  // nothing to preempt: it waits (logits recorded)
      budget.used_bytes += need;
      s.held_bytes += need;
      batch.push_back(&s);
    }
    for (auto& sp : sequences) {
      Impl::Sequence& s = *sp;
      if (s.admitted()) continue;
      const int64_t n = impl_->NextFeed(s);
      const int64_t need = budget.SequenceBytes(s.cache.length() + n, n) - s.held_bytes;
      if (budget.used_bytes + need > budget.bytes) break;
      budget.used_bytes += need;
      s.held_bytes += need;
      batch.push_back(&s);
    }
    // Keep the batch in the sequences' order (the order of `tokens` must not depend on preemptions).
    std::sort(batch.begin(), batch.end(), [&](const Impl::Sequence* a, const Impl::Sequence* b) { return a->id < b->id; });
    if (batch.empty()) {  // cannot happen: a lone sequence always fits (AddSequence and `fits` below)
      for (auto& sp : sequences) {
        budget.used_bytes -= sp->held_bytes;
        finished.push_back(Finished{sp->id, Status::Unavailable("no waiting sequence fits in the KV budget"),
                                    std::move(sp->result), false});
      }
      sequences.clear();
      return finished;
    }
  }
  bool all_logits = false;  // every position's logits, when some sequence records them
  std::vector<const std::vector<int32_t>*> tokens;
  std::vector<KvCache*> caches;
  for (Impl::Sequence* s : batch) {
    all_logits = all_logits || s->params.record_logits;
    const int64_t n = impl_->NextFeed(*s);
    if (s->prefilled) {
      s->feed.assign(1, s->result.generated_ids.back());
    } else if (s->prefill_fed > 0 || n < static_cast<int64_t>(s->prefill.size())) {  // a chunk of the prefill
      s->feed.assign(s->prefill.begin() + s->prefill_fed, s->prefill.begin() + s->prefill_fed + n);
    }
    const bool whole = !s->prefilled && s->prefill_fed == 0 && n == static_cast<int64_t>(s->prefill.size());
    tokens.push_back(whole ? &s->prefill : &s->feed);
    caches.push_back(&s->cache);
  }
  Result<at::Tensor> forward = impl_->model->Forward(tokens, caches, all_logits);
  ++impl_->steps;
  if (!forward.ok()) {
    const StatusCode code = forward.status().code();
    const bool transient = code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded;
    std::vector<Impl::Sequence*> failed;
    for (Impl::Sequence* s : batch) {
      if (transient && s->result.transient_retries < kMaxTransientRetries && !s->params.record_logits &&
          !c.is_encoder_decoder()) {
        impl_->Restart(*s);  // runs again once the pipeline answers; the same bits (batch-invariant kernels)
        ++s->result.transient_retries;
        continue;
      }
      budget.used_bytes -= s->held_bytes;
      finished.push_back(Finished{s->id, forward.status(), std::move(s->result), false});
      failed.push_back(s);
    }
    std::vector<std::unique_ptr<Impl::Sequence>> waiting;
    for (auto& sp : sequences)
      if (std::find(failed.begin(), failed.end(), sp.get()) == failed.end()) waiting.push_back(std::move(sp));
    sequences.swap(waiting);
    return finished;
  }
  const at::Tensor& logits = *forward;
  std::vector<float> penalized;  // scratch: one row with the sequence's penalties applied
  std::vector<Impl::Sequence*> ended;
  int64_t row = 0;
  for (size_t j = 0; j < batch.size(); ++j) {
    Impl::Sequence& s = *batch[j];
    GenerationResult& r = s.result;
    const int64_t len = impl_->model->LogitsRows(static_cast<int64_t>(tokens[j]->size()), !s.prefilled);
    if (all_logits && s.params.record_logits) {
      AppendRows(logits, row, len, &r.logits);
      r.logits_rows += len;
    }
    const int64_t last = all_logits ? row + len - 1 : static_cast<int64_t>(j);
    row += len;
    if (!s.prefilled) {
      s.prefill_fed += static_cast<int64_t>(tokens[j]->size());
      if (s.prefill_fed < static_cast<int64_t>(s.prefill.size())) continue;  // more chunks to feed: nothing sampled
    }
    const bool was_prefill = !s.prefilled;
    s.prefilled = true;
    if (was_prefill) impl_->KeepPromptSnapshot(s);
    bool go_on = false;
    bool cancelled = false;
    Status step_status = Status::Ok();
    if (!(was_prefill && s.params.max_new_tokens == 0)) {
      const float* row_logits = logits.data_ptr<float>() + last * vocab;
      const SamplingParams& sp = s.params.sampling;
      int32_t token = 0;
      float chosen = 0.0f;  // the sampled token's logit
      const bool adjusts = AdjustsLogits(sp, !s.prompt_tokens.empty(), !s.counts.empty());
      const bool below_min = static_cast<int64_t>(r.generated_ids.size()) < s.params.min_new_tokens;
      TokenConstraint* constraint = s.params.constraint.get();
      if (adjusts || below_min || constraint != nullptr) {
        penalized.assign(row_logits, row_logits + vocab);
        if (adjusts) AdjustLogits(sp, s.prompt_tokens, s.counts, penalized.data(), vocab);
        if (below_min) {  // min_new_tokens: no stop token yet
          constexpr float kNever = -std::numeric_limits<float>::infinity();
          if (s.params.stop_on_eos)
            for (int64_t t : c.eos_token_ids)
              if (t >= 0 && t < vocab) penalized[static_cast<size_t>(t)] = kNever;
          for (int32_t t : s.params.stop_token_ids)
            if (t >= 0 && t < vocab) penalized[static_cast<size_t>(t)] = kNever;
        }
        if (constraint != nullptr) constraint->Mask(penalized.data(), vocab);
        token = s.sampler.Sample(penalized.data(), vocab);
        chosen = penalized[static_cast<size_t>(token)];
        if (constraint != nullptr && !std::isnan(chosen)) constraint->Accept(token);
      } else {
        token = s.sampler.Sample(row_logits, vocab);
        chosen = row_logits[token];
      }
      // The sampler skips NaN logits, so a NaN chosen means every candidate was NaN (weights or
      // activations overflowed): the sequence fails instead of answering token 0 forever.
      if (std::isnan(chosen)) {
        step_status = Status::Internal(fmt::format(
            "every logit of generated token {} is NaN (the model's weights or activations overflowed): nothing "
            "could be sampled",
            r.generated_ids.size() + 1));
      } else {
        ++s.counts[token];
        r.generated_ids.push_back(token);
        SampledToken sampled;
        sampled.id = token;
        if (s.params.logprobs >= 0) Logprobs(row_logits, vocab, token, s.params.logprobs, &sampled);
        const bool keep = s.on_token ? s.on_token(sampled) : true;
        if ((s.params.stop_on_eos && c.IsEos(token)) || s.params.IsStopToken(token)) {
          r.stopped_on_eos = true;
        } else if (!keep) {
          cancelled = true;
        } else {
          // Positions fed to the decoder: the prompt and the generated tokens but the last, or for an
          // encoder-decoder model the start token and the generated tokens but the last. With a KV budget
          // a sequence also ends where it alone would no longer fit.
          const int64_t fed = static_cast<int64_t>((c.is_encoder_decoder() ? 1 : r.prompt_ids.size()) +
                                                   r.generated_ids.size()) - 1;
          const bool fits = !impl_->bounded() || budget.SequenceBytes(fed + 1, 1) <= budget.bytes;
          go_on = static_cast<int64_t>(r.generated_ids.size()) < s.params.max_new_tokens &&
                  fed < c.max_position_embeddings && fits;
        }
      }
    }
    if (!go_on) {
      budget.used_bytes -= s.held_bytes;
      s.held_bytes = 0;
      impl_->KeepForReuse(s);
      finished.push_back(Finished{s.id, step_status, std::move(r), cancelled});
      ended.push_back(&s);
    }
  }
  if (!ended.empty()) {
    std::vector<std::unique_ptr<Impl::Sequence>> still;
    for (auto& sp : sequences)
      if (std::find(ended.begin(), ended.end(), sp.get()) == ended.end()) still.push_back(std::move(sp));
    sequences.swap(still);
  }
  return finished;
}

// ---------------------------------------------------------------------------------------------
// Generate: one session, every prompt joins before the first step.

Result<std::vector<GenerationResult>> Generator::Generate(const std::vector<std::vector<int32_t>>& prompts,
                                                          const GenerationParams& params,
                                                          const TokenCallback& on_token, GenerationStats* stats) {
  const ModelConfig& c = config();
  const Clock::time_point start = Clock::now();
  if (params.max_new_tokens < 0)
    return Status::InvalidArgument(fmt::format("max_new_tokens must be >= 0, got {}", params.max_new_tokens));
  if (prompts.empty()) return Status::InvalidArgument("Generate: no prompts");
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return Status::InvalidArgument(fmt::format("prompt {} is empty", i));
    if (static_cast<int64_t>(prompts[i].size()) > c.max_position_embeddings)
      return Status::InvalidArgument(fmt::format(
          "prompt {} has {} tokens, longer than max_position_embeddings {} ({})", i, prompts[i].size(),
          c.max_position_embeddings, c.source));
  }
  const size_t n = prompts.size();
  std::unique_ptr<BatchSession> session = NewSession();
  std::vector<BatchSession::SequenceId> ids(n);
  GenerationStats st;
  for (size_t i = 0; i < n; ++i) {
    BatchSession::SequenceCallback callback;
    if (on_token) callback = [&on_token, i](const SampledToken& token) {
      on_token(i, token.id);
      return true;
    };
    Result<BatchSession::SequenceId> id = session->AddSequence(prompts[i], params, i, std::move(callback));
    if (!id.ok()) return Status(id.status().code(), fmt::format("prompt {}: {}", i, id.status().message()));
    ids[i] = *id;
    st.prefill_tokens += static_cast<int64_t>(prompts[i].size());
  }
  std::vector<GenerationResult> results(n);
  // The first token of every sequence: the end of the step after which none waits for (the rest of) its
  // prefill (step 1 unless prompts are fed in chunks or wait for the KV budget).
  Clock::time_point first_token = start;
  int64_t prefill_steps = -1;
  while (!session->empty()) {
    for (BatchSession::Finished& f : session->Step()) {
      if (!f.status.ok()) return f.status;
      const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), f.id) - ids.begin());
      results[i] = std::move(f.result);
    }
    if (prefill_steps < 0 && session->queued() == 0) {
      first_token = Clock::now();
      prefill_steps = session->steps();
    }
  }
  const Clock::time_point end = Clock::now();
  st.ttft_seconds = Seconds(start, first_token);
  st.decode_steps = std::max<int64_t>(0, session->steps() - std::max<int64_t>(prefill_steps, 0));
  for (const GenerationResult& r : results)
    st.decode_tokens += std::max<int64_t>(0, static_cast<int64_t>(r.generated_ids.size()) - 1);
  st.total_seconds = Seconds(start, end);
  st.tpot_seconds = st.decode_steps > 0 ? Seconds(first_token, end) / static_cast<double>(st.decode_steps) : 0.0;
  if (stats != nullptr) *stats = st;
  return results;
}

Result<PrefetchResiduals> Generator::CalibratePrefetchResiduals(const std::vector<std::vector<int32_t>>& prompts) {
  const ModelConfig& c = impl_->loaded->config;
  std::vector<int32_t> moe_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (impl_->loaded->weights.layers[static_cast<size_t>(l)].is_moe) moe_layers.push_back(static_cast<int32_t>(l));
  }
  if (prompts.empty()) return Status::InvalidArgument("prefetch residual calibration: no prompts");
  if (c.is_encoder_decoder())
    return Status::InvalidArgument(fmt::format("prefetch residual calibration: not supported for {} ({})",
                                               c.model_type, c.source));
  if (moe_layers.size() < 2) {
    return Status::InvalidArgument(fmt::format(
        "prefetch residual calibration: the model has {} MoE layer(s); prefetching needs a next MoE layer",
        moe_layers.size()));
  }
  // Σ over tokens of x(next) − x(l), in double, per MoE layer with a next one.
  std::map<int32_t, std::vector<double>> sums;
  for (size_t i = 0; i + 1 < moe_layers.size(); ++i) sums[moe_layers[i]].assign(static_cast<size_t>(c.hidden_size), 0.0);
  std::map<int32_t, at::Tensor> inputs;  // this forward's router inputs, float32 on the CPU
  impl_->model->set_router_input_observer([&](int32_t layer, const at::Tensor& x) {
    inputs[layer] = x.to(at::kCPU, at::kFloat).contiguous();
  });
  PrefetchResiduals out;
  out.hidden = c.hidden_size;
  Status status;
  for (const std::vector<int32_t>& prompt : prompts) {
    inputs.clear();
    KvCache cache = impl_->model->NewCache();
    Result<at::Tensor> logits = impl_->model->Forward({&prompt}, {&cache}, /*all_logits=*/false);
    if (!logits.ok()) {
      status = logits.status();
      break;
    }
    for (size_t i = 0; i + 1 < moe_layers.size(); ++i) {
      const at::Tensor& a = inputs.at(moe_layers[i]);
      const at::Tensor& b = inputs.at(moe_layers[i + 1]);
      std::vector<double>& sum = sums[moe_layers[i]];
      const float* pa = a.data_ptr<float>();
      const float* pb = b.data_ptr<float>();
      for (int64_t t = 0; t < a.size(0); ++t) {
        for (int64_t h = 0; h < c.hidden_size; ++h) {
          const int64_t k = t * c.hidden_size + h;
          sum[static_cast<size_t>(h)] += static_cast<double>(pb[k]) - static_cast<double>(pa[k]);
        }
      }
    }
    out.calibration_tokens += static_cast<int64_t>(prompt.size());
    ++out.calibration_prompts;
  }
  impl_->model->set_router_input_observer(nullptr);
  ZM_RETURN_IF_ERROR(status);
  for (const auto& [layer, sum] : sums) {
    std::vector<float>& v = out.by_layer[layer];
    for (double s : sum) v.push_back(static_cast<float>(s / static_cast<double>(out.calibration_tokens)));
  }
  return out;
}

Result<std::vector<float>> Generator::ForwardChunks(const std::vector<std::vector<int32_t>>& chunks) {
  KvCache cache = impl_->model->NewCache();
  int64_t positions = 0;  // every chunk's, so the cache reserves room ahead (KvCache::set_expected_positions)
  for (const std::vector<int32_t>& chunk : chunks) positions += static_cast<int64_t>(chunk.size());
  cache.set_expected_positions(positions);
  std::vector<float> out;
  for (const std::vector<int32_t>& chunk : chunks) {
    ZM_ASSIGN_OR_RETURN(at::Tensor logits, impl_->model->Forward({&chunk}, {&cache}, /*all_logits=*/true));
    AppendRows(logits, 0, logits.size(0), &out);
  }
  return out;
}

}  // namespace zipmoe::executor
