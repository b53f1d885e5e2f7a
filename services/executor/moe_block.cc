#include "services/executor/moe_block.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/trace_events.h"
#include "kernels/bf16_gemm.h"
#include "kernels/fp8_dequant.h"
#include "kernels/recovery.h"
#include "services/executor/cpu_ops.h"
#include "services/executor/moe_device.h"
#include "services/executor/routing.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

// The kernels' view of one routed expert matrix [rows, cols]: BF16 in place, its E/SM planes,
// float32 (an F32 expert in place; an F16 one widened into `keep`, exact), FP8 in place with its
// block scales (`f8_scale`, from LayerWeights::expert_scales), or MXFP4 in place (blocks and scales).
kernels::GemmWeights ExpertMatrix(const ModelConfig& config, const ExpertWeightsView& ew, const void* data,
                                  const ExpertPlanes& planes, int64_t rows, int64_t cols, const float* f8_scale,
                                  std::vector<at::Tensor>& keep) {
  kernels::GemmWeights w;
  w.rows = rows;
  w.cols = cols;
  if (ew.dtype == DType::kF8E4M3) {
    w.f8 = static_cast<const uint8_t*>(data);
    w.f8_scale = f8_scale;
    w.block_rows = config.fp8_block_rows;
    w.block_cols = config.fp8_block_cols;
  } else if (ew.dtype == DType::kMXFP4) {  // the raw layout: blocks [rows, cols / 2], then scales [rows, cols / 32]
    w.mxfp4 = static_cast<const uint8_t*>(data);
    w.mxfp4_scales = w.mxfp4 + rows * cols / 2;
  } else if (ew.dtype == DType::kBF16) {
    w.bf16 = static_cast<const uint16_t*>(data);
    if (data == nullptr) {
      w.e = planes.e;
      w.sm = planes.sm;
    }
  } else if (ew.dtype == DType::kF32) {
    w.f32 = static_cast<const float*>(data);
  } else {
    keep.push_back(WrapExpertTensor(data, ew.dtype, rows, cols).to(at::kFloat).contiguous());
    w.f32 = keep.back().data_ptr<float>();
  }
  return w;
}

}  // namespace

bool Predicts(const ExpertProvider& provider, const NextMoeLayer* next) {
  return next != nullptr && next->weights != nullptr && next->layer_id >= 0 &&
         provider.prefetch_mode() != PrefetchMode::kNone;
}

const float* SelectionBias(const LayerWeights& w) {
  return w.router_bias.defined() ? w.router_bias.data_ptr<float>() : nullptr;
}

at::Tensor RouterScores(const ModelConfig& config, const at::Tensor& logits) {
  return config.scoring_func == ScoringFunc::kSigmoid ? at::sigmoid(logits) : at::softmax(logits, -1);
}

Result<RoutedLayer> RouteExperts(const ModelConfig& config, int32_t layer_id, const float* scores,
                                 const float* selection_bias, int64_t n, ExpertProvider& provider,
                                 double substitution_alpha, const std::function<bool(int32_t)>& also_cached) {
  const RouterParams params = RouterParamsFor(config, selection_bias);
  const int64_t top_k = params.top_k, n_experts = params.n_experts;
  std::vector<int32_t> topk_ids(static_cast<size_t>(n * top_k));
  std::vector<float> topk_weights(static_cast<size_t>(n * top_k));
  SelectExperts(scores, n, params, topk_ids.data(), topk_weights.data());
  RoutedLayer out;
  LayerRouting& routing = out.routing;
  routing.layer_id = layer_id;
  if (substitution_alpha > 0.0) {
    std::vector<uint8_t> cached;
    provider.CachedExperts(layer_id, static_cast<int32_t>(n_experts), &cached);
    cached.resize(static_cast<size_t>(n_experts), 0);
    if (also_cached) {
      for (int32_t e = 0; e < static_cast<int32_t>(n_experts); ++e)
        if (also_cached(e)) cached[static_cast<size_t>(e)] = 1;
    }
    routing.substituted = static_cast<int32_t>(SubstituteExperts(scores, n, params, substitution_alpha, cached.data(),
                                                                 topk_ids.data(), topk_weights.data()));
  }
  out.assign = GroupByExpert(topk_ids.data(), topk_weights.data(), n, top_k);
  routing.expert_ids = out.assign.expert_ids;
  for (const auto& rows : out.assign.token_rows) routing.tokens_per_expert.push_back(static_cast<int32_t>(rows.size()));
  routing.mean_scores.assign(static_cast<size_t>(n_experts), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < n_experts; ++e) routing.mean_scores[static_cast<size_t>(e)] += scores[t * n_experts + e];
  for (float& v : routing.mean_scores) v /= static_cast<float>(std::max<int64_t>(n, 1));
  return out;
}

Result<size_t> CheckLease(const ModelConfig& config, const ExpertAssignment& assign, int32_t layer_id, int64_t hidden,
                          const ExpertWeightsView& ew, const std::vector<bool>& delivered, bool device_slots) {
  auto it = std::lower_bound(assign.expert_ids.begin(), assign.expert_ids.end(), ew.expert_id);
  if (ew.layer_id != layer_id || it == assign.expert_ids.end() || *it != ew.expert_id)
    return Status::InvalidArgument(fmt::format("layer {}: provider delivered layer {} expert {}, not requested",
                                               layer_id, ew.layer_id, ew.expert_id));
  const size_t slot = static_cast<size_t>(it - assign.expert_ids.begin());
  if (delivered[slot])
    return Status::InvalidArgument(fmt::format("layer {}: provider delivered expert {} twice", layer_id, ew.expert_id));
  if (ew.hidden != hidden || ew.intermediate != config.moe_intermediate_size)
    return Status::InvalidArgument(fmt::format(
        "layer {} expert {}: weights are [I={}, H={}], config expects [I={}, H={}]", layer_id, ew.expert_id,
        ew.intermediate, ew.hidden, config.moe_intermediate_size, hidden));
  if (ew.device_slot_holds && ew.device_slot < 0)
    return Status::InvalidArgument(fmt::format("layer {} expert {}: the provider says a device slot holds it but "
                                               "names none (device_slot {})", layer_id, ew.expert_id, ew.device_slot));
  if (ew.device_slot_holds && !device_slots)
    return Status::InvalidArgument(fmt::format(
        "layer {} expert {}: the provider's pool F holds it in GPU device slot {} only, which this executor path "
        "does not read (pool F on the device needs the GPU executor)", layer_id, ew.expert_id, ew.device_slot));
  if (ew.planes() && ew.dtype != DType::kBF16)
    return Status::InvalidArgument(fmt::format("layer {} expert {}: E/SM planes of a {} expert", layer_id,
                                               ew.expert_id, DTypeName(ew.dtype)));
  if (!ew.gated)
    return Status::InvalidArgument(fmt::format("layer {} expert {}: a gate-less (up/down) expert in a {} model, "
                                               "whose experts have gate/up/down", layer_id, ew.expert_id,
                                               config.model_type));
  return slot;
}

namespace {

// RouteExperts, then BeginLayer with every selected expert.
Result<ExpertAssignment> RouteAndBegin(const ModelConfig& config, int32_t layer_id, const float* scores,
                                       const float* selection_bias, int64_t n, ExpertProvider& provider,
                                       double substitution_alpha) {
  ZM_ASSIGN_OR_RETURN(RoutedLayer routed,
                      RouteExperts(config, layer_id, scores, selection_bias, n, provider, substitution_alpha, {}));
  ZM_RETURN_IF_ERROR(provider.BeginLayer(routed.routing));
  return std::move(routed.assign);
}

// Up to this many tokens (decode steps, small batches) the router runs on the calling thread alone.
constexpr int64_t kRouterOnOneThreadMaxTokens = 8;

// MoeForward on the CPU in float32 without a torch operator per step (services/executor/cpu_ops.h):
//   region 0: router logits, then BeginLayer (the provider starts loading while region 1 runs);
//   region 1: the shared expert's gate/up (+ silu·up), qwen2_moe's shared gate, the next router;
//   (a decode step or small batch runs region 0 on the calling thread inside region 1, while the
//   helpers start on its products: on 2 cores the second one had idled through the router and routing,
//   ~14 us a layer of qwen2_moe mini, issue 35);
//   per group of experts the provider has ready: region 2 gate/up (+ silu·up) of every expert of the
//   group, region 3 their downs (the first group also runs the shared expert's down);
//   then the weighted outputs are summed in ascending expert id order and the shared output added.
// The same bits as computing each expert alone, whichever experts share a region.
Result<at::Tensor> MoeForwardCpu(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                                 const at::Tensor& x_in, ExpertProvider& provider, const NextMoeLayer* next,
                                 double substitution_alpha) {
  const at::Tensor x = x_in.contiguous();
  const int64_t n = x.size(0), hidden = x.size(1);
  const float* xp = x.data_ptr<float>();
  const int64_t n_experts = w.router.size(0);

  // 1. Router logits, then the layer is announced at once: the provider starts loading its missing
  //    experts (reads, decodes; a remote scheduler's cache lookup) while this thread computes the
  //    shared expert's gate/up below, instead of after it.
  //    A decode step's router is a few hundred KiB of weights: this thread alone computes it faster
  //    than waking the others for a region (the same bits either way: rows are computed alike).
  std::vector<float> scores(static_cast<size_t>(n * n_experts));
  kernels::GemmArgs router = cpu::Product(GemmWeightsOf(w.router), xp, n, hidden, scores.data(), n_experts);
  if (w.router_logit_bias.defined()) router.bias = w.router_logit_bias.data_ptr<float>();  // gpt_oss
  const bool router_on_caller = n <= kRouterOnOneThreadMaxTokens;
  std::optional<Result<ExpertAssignment>> routed;
  const auto route = [&] {
    if (router_on_caller) {
      kernels::Bf16Gemm(router);
    } else {
      cpu::Gemms({router});
    }
    ScoreRows(scores.data(), n, n_experts, config.scoring_func);
    routed.emplace(RouteAndBegin(config, layer_id, scores.data(), SelectionBias(w), n, provider, substitution_alpha));
  };
  if (!router_on_caller) {
    route();
    if (!routed->ok()) return routed->status();
  }

  // 2. Shared expert gate/up, qwen2_moe's shared expert gate (and the next layer's router on x + r
  //    for prefetching): one region; then the prediction for the next layer.
  std::vector<kernels::GemmArgs> first;
  const bool predict = Predicts(provider, next);
  std::vector<float> next_scores, shifted;
  if (predict) {
    const at::Tensor& router = next->weights->router;
    next_scores.resize(static_cast<size_t>(n * router.size(0)));
    const float* in = xp;
    if (next->residual.defined()) {
      const at::Tensor r = next->residual.to(at::kFloat).contiguous();
      const float* rp = r.data_ptr<float>();
      shifted.assign(xp, xp + n * hidden);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t h = 0; h < hidden; ++h) shifted[static_cast<size_t>(t * hidden + h)] += rp[h];
      in = shifted.data();
    }
    first.push_back(cpu::Product(GemmWeightsOf(router), in, n, hidden, next_scores.data(), router.size(0)));
    if (next->weights->router_logit_bias.defined()) first.back().bias = next->weights->router_logit_bias.data_ptr<float>();
  }
  std::vector<cpu::MlpJob> shared;
  // Products and SiluMul write every element of their outputs, so their buffers start uninitialised
  // (new float[]): a 2000-token prefill zero-filled ~60 MB a layer it then overwrote (issue 35).
  std::unique_ptr<float[]> shared_act, shared_up, shared_out;
  std::vector<float> shared_gate;
  if (w.has_shared_expert) {
    const int64_t inter = w.shared_expert.gate.size(0);
    shared_act.reset(new float[static_cast<size_t>(n * inter)]);
    shared_up.reset(new float[static_cast<size_t>(n * inter)]);
    shared_out.reset(new float[static_cast<size_t>(n * hidden)]);
    cpu::MlpJob j;
    j.gate = GemmWeightsOf(w.shared_expert.gate);
    j.up = GemmWeightsOf(w.shared_expert.up);
    j.down = GemmWeightsOf(w.shared_expert.down);
    j.x = xp;
    j.n = n;
    j.ldx = hidden;
    j.act = shared_act.get();
    j.up_out = shared_up.get();
    j.y = shared_out.get();
    j.ldy = hidden;
    shared.push_back(j);
    if (w.shared_expert_gate.defined()) {
      shared_gate.resize(static_cast<size_t>(n));
      first.push_back(cpu::Product(GemmWeightsOf(w.shared_expert_gate), xp, n, hidden, shared_gate.data(), 1));
    }
  }
  // The matmul regions of the block in their own category ("compute"), nested in the expert spans without
  // being counted twice in a category's busy time (bench/trace_plot.py).
  // (A batch's router ran above, before the span: only a decode step's runs inside the region.)
  trace::TraceSpan first_span("compute", [&] {
    const char* what = !router_on_caller        ? "shared expert gate/up"
                       : shared.empty()         ? "router"
                                                : "router and shared expert gate/up";
    return fmt::format("{} (layer {})", what, layer_id);
  });
  if (router_on_caller) {
    // The router and routing on this thread inside the region (alone when it has no products);
    // nothing may throw out of a region's body (work_pool.h), so an exception becomes this layer's error.
    cpu::MlpGateUp(shared, first, [&] {
      try {
        route();
      } catch (const std::exception& e) {
        routed.emplace(Status::Internal(fmt::format("layer {}: router and routing: {}", layer_id, e.what())));
      }
    });
  } else if (!shared.empty() || !first.empty()) {
    cpu::MlpGateUp(shared, first);
  }
  first_span.End();
  if (!routed->ok()) return routed->status();
  const ExpertAssignment assign = std::move(*routed).value();
  if (predict) {
    ScoreRows(next_scores.data(), n, next->weights->router.size(0), config.scoring_func);
    provider.Prefetch(
        RankPredictedExperts(config, next->layer_id, next_scores.data(), n, SelectionBias(*next->weights)));
  }

  // 3. Experts, in groups of those ready together.
  const size_t n_selected = assign.expert_ids.size();
  const int64_t inter = config.moe_intermediate_size;
  std::vector<std::unique_ptr<float[]>> outputs(n_selected);  // written whole by the down products
  std::vector<bool> delivered(n_selected, false);
  size_t taken = 0;
  bool shared_down_pending = !shared.empty();
  while (taken < n_selected) {
    std::vector<std::unique_ptr<ExpertLease>> group;
    trace::TraceSpan wait_span("expert", [&] { return fmt::format("wait for experts (layer {})", layer_id); },
                               trace::Activity::kWaitExperts);
    do {
      ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, provider.NextReady());
      group.push_back(std::move(lease));
      ++taken;
    } while (taken < n_selected && provider.NextIsReady());
    wait_span.End();
    const trace::TraceSpan compute_span(
        "expert", [&] { return fmt::format("compute {} experts (layer {})", group.size(), layer_id); });
    std::vector<cpu::MlpJob> jobs;
    std::vector<std::unique_ptr<float[]>> scratch;  // gathered rows, act | up: written before read
    std::vector<at::Tensor> keep;
    jobs.reserve(group.size());
    scratch.reserve(2 * group.size());
    for (const std::unique_ptr<ExpertLease>& lease : group) {
      const ExpertWeightsView& ew = lease->weights();
      ZM_ASSIGN_OR_RETURN(size_t slot, CheckLease(config, assign, layer_id, hidden, ew, delivered));
      delivered[slot] = true;
      const std::vector<int64_t>& rows = assign.token_rows[slot];
      const int64_t m = static_cast<int64_t>(rows.size());
      cpu::MlpJob j;
      ZM_ASSIGN_OR_RETURN(const Fp8ExpertScales fp8, ExpertFp8Scales(config, w, layer_id, ew));
      const std::array<const float*, 3>& scales = fp8.scale_inv;
      j.gate = ExpertMatrix(config, ew, ew.gate, ew.gate_planes, inter, hidden, scales[0], keep);
      j.up = ExpertMatrix(config, ew, ew.up, ew.up_planes, inter, hidden, scales[1], keep);
      j.down = ExpertMatrix(config, ew, ew.down, ew.down_planes, hidden, inter, scales[2], keep);
      const ExpertBiases biases = ExpertBiasesOf(config, w, ew.expert_id);  // gpt_oss: biased, clamped SwiGLU
      j.gate_bias = biases.gate;
      j.up_bias = biases.up;
      j.down_bias = biases.down;
      j.swiglu_limit = static_cast<float>(config.swiglu_limit);
      j.swiglu_alpha = static_cast<float>(config.swiglu_alpha);
      j.n = m;
      j.ldx = hidden;
      bool identity = m == n;
      for (int64_t i = 0; identity && i < m; ++i) identity = rows[static_cast<size_t>(i)] == i;
      if (identity) {
        j.x = xp;
      } else {  // gather the expert's tokens (index_select)
        scratch.emplace_back(new float[static_cast<size_t>(m * hidden)]);
        for (int64_t i = 0; i < m; ++i)
          std::copy_n(xp + rows[static_cast<size_t>(i)] * hidden, hidden, scratch.back().get() + i * hidden);
        j.x = scratch.back().get();
      }
      scratch.emplace_back(new float[static_cast<size_t>(2 * m * inter)]);
      j.act = scratch.back().get();
      j.up_out = j.act + m * inter;
      outputs[slot].reset(new float[static_cast<size_t>(m * hidden)]);
      j.y = outputs[slot].get();
      j.ldy = hidden;
      jobs.push_back(j);
    }
    {
      const trace::TraceSpan gate_up_span(
          "compute", [&] { return fmt::format("gate/up of {} experts (layer {})", jobs.size(), layer_id); });
      cpu::MlpGateUp(jobs);
    }
    std::vector<kernels::GemmArgs> extra;
    if (shared_down_pending) {
      const cpu::MlpJob& s = shared[0];
      extra.push_back(cpu::Product(s.down, s.act, n, s.gate.rows, s.y, hidden));
      shared_down_pending = false;
    }
    {
      const trace::TraceSpan down_span(
          "compute", [&] { return fmt::format("down of {} experts (layer {})", jobs.size(), layer_id); });
      cpu::MlpDown(jobs, extra);
    }
  }  // leases released group by group
  if (shared_down_pending) cpu::MlpDown(shared);
  ZM_RETURN_IF_ERROR(provider.EndLayer(layer_id));

  // 4. Ordered accumulation: y = Σ_slots expert(x) * weight (ascending expert id), then + shared.
  at::Tensor y = at::empty({n, hidden}, x.options());  // zeroed here: at::zeros costs a torch fill per layer
  float* yp = y.data_ptr<float>();
  std::fill_n(yp, n * hidden, 0.0f);
  for (size_t slot = 0; slot < n_selected; ++slot) {
    const std::vector<int64_t>& rows = assign.token_rows[slot];
    const std::vector<float>& weights = assign.weights[slot];
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* o = outputs[slot].get() + static_cast<int64_t>(i) * hidden;
      float* yr = yp + rows[i] * hidden;
      const float wgt = weights[i];
      for (int64_t h = 0; h < hidden; ++h) {
        const float weighted = o[h] * wgt;
        yr[h] += weighted;
      }
    }
  }
  if (!shared.empty()) {
    for (int64_t t = 0; t < n; ++t) {
      const float* s = shared_out.get() + t * hidden;
      float* yr = yp + t * hidden;
      if (shared_gate.empty()) {
        for (int64_t h = 0; h < hidden; ++h) yr[h] += s[h];
      } else {
        const float g = 1.0f / (1.0f + std::exp(-shared_gate[static_cast<size_t>(t)]));
        for (int64_t h = 0; h < hidden; ++h) {
          const float gated = g * s[h];
          yr[h] += gated;
        }
      }
    }
  }
  return y;
}

}  // namespace

at::Tensor MlpForward(const MlpWeights& w, const at::Tensor& x) {
  const std::vector<at::Tensor> gate_up = Linears(x, {{w.gate, at::Tensor()}, {w.up, at::Tensor()}});
  return Linear(at::silu(gate_up[0]) * gate_up[1], w.down);
}

at::Tensor SharedExpertForward(const ModelConfig& config, const LayerWeights& w, const at::Tensor& x) {
  if (!w.has_shared_expert) return at::Tensor();
  at::Tensor shared = MlpForward(w.shared_expert, x);
  if (w.shared_expert_gate.defined()) shared = at::sigmoid(Linear(x, w.shared_expert_gate)) * shared;
  return shared;
}

Result<Fp8ExpertScales> ExpertFp8Scales(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                                        const ExpertWeightsView& ew) {
  Fp8ExpertScales fp8;
  if (ew.dtype != DType::kF8E4M3) return fp8;
  const size_t e = static_cast<size_t>(ew.expert_id);
  if (!config.fp8() || e >= w.expert_scales.size() || w.expert_scales[e][0] == nullptr ||
      w.expert_scales[e][1] == nullptr || w.expert_scales[e][2] == nullptr)
    return Status::InvalidArgument(fmt::format(
        "layer {} expert {}: FP8 weights without block scales (the model's config has no FP8 "
        "quantization_config, or its checkpoint lacks the experts' weight_scale_inv)", layer_id, ew.expert_id));
  fp8.scale_inv = w.expert_scales[e];
  fp8.block_rows = config.fp8_block_rows;
  fp8.block_cols = config.fp8_block_cols;
  return fp8;
}

ExpertBiases ExpertBiasesOf(const ModelConfig& config, const LayerWeights& w, int32_t expert_id) {
  ExpertBiases b;
  if (!w.expert_gate_bias.defined()) return b;
  const int64_t inter = config.moe_intermediate_size, hidden = config.hidden_size;
  b.gate = w.expert_gate_bias.data_ptr<float>() + expert_id * inter;
  b.up = w.expert_up_bias.data_ptr<float>() + expert_id * inter;
  b.down = w.expert_down_bias.data_ptr<float>() + expert_id * hidden;
  b.swiglu_limit = static_cast<float>(config.swiglu_limit);
  b.swiglu_alpha = static_cast<float>(config.swiglu_alpha);
  return b;
}

at::Tensor ExpertForward(const ExpertWeightsView& ew, const at::Tensor& x, const Fp8ExpertScales& fp8,
                         const ExpertBiases& biases) {
  const int64_t inter = ew.intermediate, hidden = ew.hidden;
  if (x.is_cpu() && x.scalar_type() == at::kFloat && ew.dtype == DType::kBF16 && biases.gate == nullptr) {
    const auto matrix = [&](const void* bf16, const ExpertPlanes& planes, int64_t rows, int64_t cols) {
      kernels::GemmWeights w;
      w.bf16 = static_cast<const uint16_t*>(bf16);
      if (bf16 == nullptr) {
        w.e = planes.e;
        w.sm = planes.sm;
      }
      w.rows = rows;
      w.cols = cols;
      return w;
    };
    const kernels::GemmWeights up = matrix(ew.up, ew.up_planes, inter, hidden);
    const kernels::GemmWeights down = matrix(ew.down, ew.down_planes, hidden, inter);
    if (!ew.gated) return LinearCpu(at::relu(LinearCpu(x, up)), down);
    const kernels::GemmWeights gate = matrix(ew.gate, ew.gate_planes, inter, hidden);
    const std::vector<at::Tensor> gate_up = LinearCpuGroup(x, {gate, up});
    return LinearCpu(at::silu(gate_up[0]) * gate_up[1], down);
  }
  // An expert served as its E/SM planes (a provider recovering nothing for a GPU executor) is
  // recovered here on the CPU (BF16, bit-exact) before it is converted for x's device.
  const auto tensor = [&](const void* data, const ExpertPlanes& planes, int64_t rows, int64_t cols,
                          const float* scale_inv) {
    if (ew.dtype == DType::kF8E4M3 || ew.dtype == DType::kMXFP4) {
      const bool f8 = ew.dtype == DType::kF8E4M3;
      ZM_CHECK(!f8 || scale_inv != nullptr) << "FP8 expert " << ew.expert_id << " without its scales";
      const auto* q = static_cast<const uint8_t*>(data);
      if (!x.is_cuda()) {  // dequantized here to float32 (the CPU kernels' values), then x's dtype
        at::Tensor w32 = at::empty({rows, cols}, at::TensorOptions().dtype(at::kFloat));
        if (f8) {
          kernels::DequantizeF8E4M3ToFloatReference(q, scale_inv, rows, cols, fp8.block_rows, fp8.block_cols,
                                                    w32.data_ptr<float>());
        } else {
          kernels::DequantizeMxfp4ToFloatReference(q, rows, cols, w32.data_ptr<float>());
        }
        return w32.to(x.device(), x.scalar_type());
      }
      // On a GPU the matrix crosses as stored (1 / 0.53 bytes a weight, not the 4 of float32) and is
      // dequantized there into BF16 (kernels/fp8_dequant.h: the same values).
      const int64_t stored = f8 ? rows * cols : rows * cols / 2 + rows * cols / 32;
      const at::Tensor dq = at::from_blob(const_cast<uint8_t*>(q), {stored}, at::TensorOptions().dtype(at::kByte))
                                .to(x.device());
      at::Tensor w = at::empty({rows, cols}, at::TensorOptions().dtype(at::kBFloat16).device(x.device()));
      auto* out = static_cast<uint16_t*>(w.data_ptr());
      Status st;
      if (f8) {
        const int64_t n_scales =
            ((rows + fp8.block_rows - 1) / fp8.block_rows) * ((cols + fp8.block_cols - 1) / fp8.block_cols);
        const at::Tensor s = at::from_blob(const_cast<float*>(scale_inv), {n_scales}, at::TensorOptions().dtype(at::kFloat))
                                 .to(x.device());
        st = kernels::LaunchDequantizeF8E4M3ToBf16(dq.data_ptr<uint8_t>(), s.data_ptr<float>(), rows, cols,
                                                   fp8.block_rows, fp8.block_cols, out, nullptr);
      } else {
        st = kernels::LaunchDequantizeMxfp4ToBf16(dq.data_ptr<uint8_t>(), rows, cols, out, nullptr);
      }
      if (!st.ok()) throw std::runtime_error("expert " + std::to_string(ew.expert_id) + ": " + st.ToString());
      return w.to(x.scalar_type());
    }
    if (data != nullptr) return WrapExpertTensor(data, ew.dtype, rows, cols).to(x.device(), x.scalar_type());
    at::Tensor bf16 = at::empty({rows, cols}, at::TensorOptions().dtype(at::kBFloat16));
    kernels::RecoverBf16Cpu(planes.e, planes.sm, static_cast<uint16_t*>(bf16.data_ptr()), rows * cols);
    return bf16.to(x.device(), x.scalar_type());
  };
  MlpWeights expert;  // CPU: F32 used in place, F16 widened (exact); GPU: converted for the device
  expert.up = tensor(ew.up, ew.up_planes, inter, hidden, fp8.scale_inv[1]);
  expert.down = tensor(ew.down, ew.down_planes, hidden, inter, fp8.scale_inv[2]);
  if (!ew.gated) return Linear(at::relu(Linear(x, expert.up)), expert.down);
  expert.gate = tensor(ew.gate, ew.gate_planes, inter, hidden, fp8.scale_inv[0]);
  if (biases.gate == nullptr) return MlpForward(expert, x);
  return BiasedExpertForward(expert, biases, x);
}

at::Tensor BiasedExpertForward(const MlpWeights& expert, const ExpertBiases& biases, const at::Tensor& x) {
  const int64_t inter = expert.gate.size(0), hidden = expert.down.size(0);
  const auto bias = [&](const float* b, int64_t len) {
    return at::from_blob(const_cast<float*>(b), {len}, at::TensorOptions().dtype(at::kFloat)).to(x.device());
  };
  const at::Tensor gate = (Linear(x, expert.gate).to(at::kFloat) + bias(biases.gate, inter)).clamp_max(biases.swiglu_limit);
  const at::Tensor up = (Linear(x, expert.up).to(at::kFloat) + bias(biases.up, inter))
                            .clamp(-biases.swiglu_limit, biases.swiglu_limit);
  const at::Tensor act = (up + 1.0) * (gate * at::sigmoid(gate * biases.swiglu_alpha));
  return (Linear(act.to(x.scalar_type()), expert.down).to(at::kFloat) + bias(biases.down, hidden)).to(x.scalar_type());
}

LayerRouting RankPredictedExperts(const ModelConfig& config, int32_t layer_id, const float* scores, int64_t n_tokens,
                                  const float* selection_bias) {
  const int64_t top_k = config.num_experts_per_tok, n_experts = config.num_experts;
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens * top_k));
  std::vector<float> weights(ids.size());
  SelectExperts(scores, n_tokens, RouterParamsFor(config, selection_bias), ids.data(), weights.data());
  std::vector<double> mass(static_cast<size_t>(n_experts), 0.0);
  std::vector<int32_t> tokens(static_cast<size_t>(n_experts), 0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t k = 0; k < top_k; ++k) {
      const int32_t e = ids[static_cast<size_t>(t * top_k + k)];
      mass[static_cast<size_t>(e)] += scores[t * n_experts + e];
      ++tokens[static_cast<size_t>(e)];
    }
  }
  std::vector<int32_t> order;
  for (int32_t e = 0; e < n_experts; ++e) {
    if (tokens[static_cast<size_t>(e)] > 0) order.push_back(e);
  }
  // Workload first (tokens routed, DALI §4.2's "high-workload experts"), then the probability mass.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const size_t ia = static_cast<size_t>(a), ib = static_cast<size_t>(b);
    if (tokens[ia] != tokens[ib]) return tokens[ia] > tokens[ib];
    return mass[ia] > mass[ib];
  });
  LayerRouting out;
  out.layer_id = layer_id;
  out.expert_ids = order;
  for (int32_t e : order) out.tokens_per_expert.push_back(tokens[static_cast<size_t>(e)]);
  return out;
}

namespace {

// DALI's Greedy Assignment of the layer's activated experts (one entry per assign.expert_ids slot)
// between the CPU and the accelerator; records the decision in placement->stats.
std::vector<scheduler::ExpertDevice> PlaceExperts(const ExpertAssignment& assign, DevicePlacement& placement) {
  std::vector<scheduler::AssignmentItem> items;
  items.reserve(assign.expert_ids.size());
  double all_gpu_us = 0;
  for (const std::vector<int64_t>& rows : assign.token_rows) {
    scheduler::AssignmentItem item;
    item.tokens = static_cast<int32_t>(rows.size());
    item.resident = false;  // the executor keeps no expert on the device between layers
    items.push_back(item);
    all_gpu_us += placement.cost.GpuUs(item.tokens, item.resident);
  }
  const scheduler::DeviceAssignment a = scheduler::GreedyAssign(items, placement.cost);
  scheduler::DeviceAssignmentStats& st = placement.stats;
  ++st.layers;
  st.cpu_experts += a.n_cpu;
  st.gpu_experts += a.n_gpu;
  st.estimated_us += a.makespan_us();
  st.estimated_all_gpu_us += all_gpu_us;
  return a.device;
}

}  // namespace

Result<at::Tensor> MoeForward(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                              const at::Tensor& x, ExpertProvider& provider, const NextMoeLayer* next,
                              double substitution_alpha, DevicePlacement* placement,
                              DeviceExpertCache* device_cache) {
  if (x.is_cpu() && x.scalar_type() == at::kFloat && RunsOnCpuKernels(x, w.router))
    return MoeForwardCpu(config, w, layer_id, x, provider, next, substitution_alpha);
  if (device_cache != nullptr && placement == nullptr && x.is_cuda())
    return MoeForwardDevice(config, w, layer_id, x, provider, next, substitution_alpha, *device_cache);
  const int64_t n = x.size(0), hidden = x.size(1);
  const at::Device device = x.device();
  const at::ScalarType dtype = x.scalar_type();

  // 1. Router in float32 (DeepSeek's MoEGate casts both operands; the CPU path is float32 anyway).
  at::Tensor logits = Linear(x.to(at::kFloat), w.router);
  if (w.router_logit_bias.defined()) logits = logits + w.router_logit_bias.to(logits.device());  // gpt_oss
  const at::Tensor scores = RouterScores(config, logits).to(at::kCPU).contiguous();

  // 2. Announce the layer, then the prediction for the next one.
  ZM_ASSIGN_OR_RETURN(const ExpertAssignment assign, RouteAndBegin(config, layer_id, scores.data_ptr<float>(),
                                                                    SelectionBias(w), n, provider, substitution_alpha));
  if (Predicts(provider, next)) {
    at::Tensor in = x.to(at::kFloat);
    if (next->residual.defined()) in = in + next->residual.to(in.device(), at::kFloat);
    at::Tensor next_logits = Linear(in, next->weights->router);
    if (next->weights->router_logit_bias.defined())
      next_logits = next_logits + next->weights->router_logit_bias.to(next_logits.device());
    const at::Tensor predicted = RouterScores(config, next_logits).to(at::kCPU).contiguous();
    provider.Prefetch(RankPredictedExperts(config, next->layer_id, predicted.data_ptr<float>(), n,
                                           SelectionBias(*next->weights)));
  }

  // 3. Compute each expert as it arrives (on the CPU or x's device, DALI's assignment with a
  //    placement); keep its weighted output for the ordered sum.
  const size_t n_selected = assign.expert_ids.size();
  std::vector<scheduler::ExpertDevice> where;
  if (placement != nullptr) where = PlaceExperts(assign, *placement);
  at::Tensor x_cpu;  // float32 copy of x on the CPU, made when the first CPU expert arrives
  std::vector<at::Tensor> outputs(n_selected);
  std::vector<at::Tensor> rows(n_selected);
  std::vector<bool> delivered(n_selected, false);
  for (size_t i = 0; i < n_selected; ++i) {
    trace::TraceSpan wait_span("expert", [&] { return fmt::format("wait for an expert (layer {})", layer_id); },
                               trace::Activity::kWaitExperts);
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, provider.NextReady());
    wait_span.End();
    const ExpertWeightsView& ew = lease->weights();
    ZM_ASSIGN_OR_RETURN(size_t slot, CheckLease(config, assign, layer_id, hidden, ew, delivered));
    delivered[slot] = true;
    const std::vector<int64_t>& token_rows = assign.token_rows[slot];
    ZM_ASSIGN_OR_RETURN(const Fp8ExpertScales fp8, ExpertFp8Scales(config, w, layer_id, ew));
    const ExpertBiases biases = ExpertBiasesOf(config, w, ew.expert_id);
    if (!where.empty() && where[slot] == scheduler::ExpertDevice::kCpu) {
      if (!x_cpu.defined()) x_cpu = x.to(at::kCPU, at::kFloat).contiguous();
      const at::Tensor cpu_rows = at::tensor(token_rows, at::TensorOptions().dtype(at::kLong));
      const at::Tensor weight = at::tensor(assign.weights[slot], at::TensorOptions().dtype(at::kFloat)).unsqueeze(1);
      rows[slot] = cpu_rows.to(device);
      outputs[slot] = (ExpertForward(ew, x_cpu.index_select(0, cpu_rows), fp8, biases) * weight).to(device, dtype);
      continue;
    }
    rows[slot] = at::tensor(token_rows, at::TensorOptions().dtype(at::kLong)).to(device);
    const at::Tensor xe = x.index_select(0, rows[slot]);
    const at::Tensor weight = at::tensor(assign.weights[slot], at::TensorOptions().dtype(at::kFloat))
                                  .to(device, dtype)
                                  .unsqueeze(1);
    outputs[slot] = ExpertForward(ew, xe, fp8, biases) * weight;  // expert(x) * routing_weights[top_x, idx, None]
  }
  ZM_RETURN_IF_ERROR(provider.EndLayer(layer_id));

  // 4. Ordered accumulation.
  at::Tensor y = at::zeros({n, hidden}, x.options());
  for (size_t i = 0; i < n_selected; ++i) y.index_add_(0, rows[i], outputs[i]);

  // 5. Shared experts.
  if (w.has_shared_expert) y = y + SharedExpertForward(config, w, x);
  return y;
}

}  // namespace zipmoe::executor
