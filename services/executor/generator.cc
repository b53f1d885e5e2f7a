#include "services/executor/generator.h"

#include "common/observed_expert_provider.h"
#include "common/parallel.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "services/executor/model.h"
#include "services/executor/model_weights.h"
#include "services/executor/torch_util.h"

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

struct Generator::Impl {
  std::string dir;
  int n_threads = 1;
  std::unique_ptr<LoadedModel> loaded;
  std::unique_ptr<ObservedExpertProvider> observed;  // wraps the provider when on_routing is set
  std::unique_ptr<Model> model;
};

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

const ModelConfig& Generator::config() const { return impl_->loaded->config; }
const std::string& Generator::model_dir() const { return impl_->dir; }
int Generator::n_threads() const { return impl_->n_threads; }

Result<std::unique_ptr<Generator>> Generator::Create(const GeneratorOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = options.model_dir;
  impl->n_threads = ResolveThreadCount(options.n_threads);
  ZM_ASSIGN_OR_RETURN(at::Device device, ParseDevice(options.device));
  ZM_RETURN_IF_ERROR(TorchBoundary("set_num_threads", [&]() -> Status {
    at::set_num_threads(impl->n_threads);  // torch reports 1 otherwise in this build
    return Status::Ok();
  }));
  LoadOptions load;
  load.device = device;
  load.dtype = device.is_cpu() ? at::kFloat : at::kBFloat16;
  load.resident_experts = options.expert_provider == nullptr;
  load.n_threads = impl->n_threads;
  ZM_ASSIGN_OR_RETURN(impl->loaded, LoadModel(options.model_dir, load));
  ExpertProvider* provider = options.expert_provider != nullptr
                                 ? options.expert_provider
                                 : static_cast<ExpertProvider*>(impl->loaded->resident_experts.get());
  if (options.on_routing) {
    impl->observed = std::make_unique<ObservedExpertProvider>(provider, options.on_routing);
    provider = impl->observed.get();
  }
  impl->model = std::make_unique<Model>(*impl->loaded, provider, load.device, load.dtype);
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

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
  std::vector<GenerationResult> results(n);
  std::vector<KvCache> caches;
  std::vector<Sampler> samplers;
  caches.reserve(n);
  samplers.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    results[i].prompt_ids = prompts[i];
    caches.push_back(impl_->model->NewCache());
    samplers.emplace_back(params.sampling, i);
  }
  GenerationStats st;
  const int64_t vocab = c.vocab_size;
  // Samples one token for sequence i from logits row `row`; returns whether it continues.
  auto take = [&](size_t i, const at::Tensor& logits, int64_t row) {
    GenerationResult& r = results[i];
    const int32_t token = samplers[i].Sample(logits.data_ptr<float>() + row * vocab, vocab);
    r.generated_ids.push_back(token);
    if (on_token) on_token(i, token);
    if (params.stop_on_eos && c.IsEos(token)) {
      r.stopped_on_eos = true;
      return false;
    }
    const int64_t fed = static_cast<int64_t>(r.prompt_ids.size() + r.generated_ids.size()) - 1;
    return static_cast<int64_t>(r.generated_ids.size()) < params.max_new_tokens && fed < c.max_position_embeddings;
  };

  // Prefill: every prompt in one batch.
  std::vector<size_t> active;
  {
    std::vector<const std::vector<int32_t>*> tokens;
    std::vector<KvCache*> cache_ptrs;
    for (size_t i = 0; i < n; ++i) {
      tokens.push_back(&prompts[i]);
      cache_ptrs.push_back(&caches[i]);
      st.prefill_tokens += static_cast<int64_t>(prompts[i].size());
    }
    const bool all = params.record_logits;
    ZM_ASSIGN_OR_RETURN(at::Tensor logits, impl_->model->Forward(tokens, cache_ptrs, all));
    int64_t row = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t len = static_cast<int64_t>(prompts[i].size());
      if (all) {
        AppendRows(logits, row, len, &results[i].logits);
        results[i].logits_rows += len;
      }
      const int64_t last = all ? row + len - 1 : static_cast<int64_t>(i);
      row += len;
      if (params.max_new_tokens > 0 && take(i, logits, last)) active.push_back(i);
    }
  }
  const Clock::time_point first_token = Clock::now();
  st.ttft_seconds = Seconds(start, first_token);

  // Decode: the unfinished sequences, one token each per step.
  std::vector<std::vector<int32_t>> step_tokens(n);
  while (!active.empty()) {
    std::vector<const std::vector<int32_t>*> tokens;
    std::vector<KvCache*> cache_ptrs;
    for (size_t i : active) {
      step_tokens[i].assign(1, results[i].generated_ids.back());
      tokens.push_back(&step_tokens[i]);
      cache_ptrs.push_back(&caches[i]);
    }
    ZM_ASSIGN_OR_RETURN(at::Tensor logits, impl_->model->Forward(tokens, cache_ptrs, /*all_logits=*/false));
    ++st.decode_steps;
    st.decode_tokens += static_cast<int64_t>(active.size());
    std::vector<size_t> still;
    for (size_t j = 0; j < active.size(); ++j) {
      const size_t i = active[j];
      if (params.record_logits) {
        AppendRows(logits, static_cast<int64_t>(j), 1, &results[i].logits);
        results[i].logits_rows += 1;
      }
      if (take(i, logits, static_cast<int64_t>(j))) still.push_back(i);
    }
    active.swap(still);
  }
  const Clock::time_point end = Clock::now();
  st.total_seconds = Seconds(start, end);
  st.tpot_seconds = st.decode_steps > 0 ? Seconds(first_token, end) / static_cast<double>(st.decode_steps) : 0.0;
  if (stats != nullptr) *stats = st;
  return results;
}

Result<std::vector<float>> Generator::ForwardChunks(const std::vector<std::vector<int32_t>>& chunks) {
  KvCache cache = impl_->model->NewCache();
  std::vector<float> out;
  for (const std::vector<int32_t>& chunk : chunks) {
    ZM_ASSIGN_OR_RETURN(at::Tensor logits, impl_->model->Forward({&chunk}, {&cache}, /*all_logits=*/true));
    AppendRows(logits, 0, logits.size(0), &out);
  }
  return out;
}

}  // namespace zipmoe::executor
