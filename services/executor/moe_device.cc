#include "services/executor/moe_device.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/trace_events.h"
#include "kernels/device_memory.h"
#include "kernels/fp8_dequant.h"
#include "kernels/grouped_expert.h"
#include "kernels/recovery.h"
#include "services/executor/routing.h"
#include "services/executor/torch_util.h"

namespace zipmoe::executor {
namespace {

// The layer's grouped-MLP tables packed into one buffer (one host->device copy): each array at an
// 8-byte aligned offset.
struct PackedTables {
  std::vector<uint8_t> bytes;
  size_t weights = 0, expert_pair_offsets = 0, pair_token = 0, pair_weight = 0, token_pair_offsets = 0,
         token_pairs = 0;

  template <typename T>
  size_t Append(const std::vector<T>& v) {
    const size_t at = (bytes.size() + 7) / 8 * 8;
    bytes.resize(at + v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(bytes.data() + at, v.data(), v.size() * sizeof(T));
    return at;
  }
};

// Takes `count` experts from `provider` (the layer it has begun) into new slots of `cache`: each
// lease is checked against the layer's request `assign` (CheckLease; `delivered` marks the experts
// already served) and written by FillDeviceSlot; `filled(index in assign, slot)` is told where it went. Leases are handed back before any
// wait (the provider may need those staging slots to start the layer's next experts: it never has all
// of a layer in flight at once) and at the end, each time after the device has finished reading
// their host memory. A failed fill drops its slot; errors name the layer and expert.
Status FillFromProvider(const ModelConfig& config, const LayerWeights& w, const ExpertAssignment& assign,
                        std::vector<bool>& delivered, ExpertProvider& provider, DeviceExpertCache& cache,
                        int32_t layer_id, size_t count, const std::function<void(size_t, at::Tensor&)>& filled) {
  std::vector<std::unique_ptr<ExpertLease>> leases;
  bool reads_host = false;
  // An early return releases the leases through their destructors (and abandons the current one): the
  // device must first have finished reading their host memory (in-place recoveries, DMAs already
  // enqueued), or the provider could hand those staging slots to the next expert under a running kernel.
  struct WaitBeforeRelease {
    const bool* reads_host;
    ~WaitBeforeRelease() {
      if (*reads_host) (void)kernels::SynchronizeStream(nullptr);  // the error being returned says more
    }
  } wait_before_release{&reads_host};
  const auto release = [&]() -> Status {
    if (reads_host) ZM_RETURN_IF_ERROR(kernels::SynchronizeStream(nullptr));
    reads_host = false;
    provider.ReleaseAll(&leases);
    return Status::Ok();
  };
  for (size_t i = 0; i < count; ++i) {
    if (!leases.empty() && !provider.NextIsReady()) ZM_RETURN_IF_ERROR(release());
    trace::TraceSpan wait_span("expert", [&] { return fmt::format("wait for an expert (layer {})", layer_id); },
                               trace::Activity::kWaitExperts);
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, provider.NextReady());
    wait_span.End();
    const ExpertWeightsView& ew = lease->weights();
    // Any failure from here on leaves the expert's device slot unwritten: the lease is abandoned, so
    // the provider's cache does not record the expert there (ExpertLease::Abandon).
    at::Tensor* slot = nullptr;
    size_t index = 0;
    const Status st = [&]() -> Status {
      ZM_ASSIGN_OR_RETURN(index, CheckLease(config, assign, layer_id, config.hidden_size, ew, delivered,
                                            /*device_slots=*/true));
      delivered[index] = true;
      if (ew.device_slot >= 0) {  // a slot the provider's pool F manages (device_f_slots)
        slot = cache.ManagedSlot(ew.device_slot, ew.device_slot_holds);
        if (slot == nullptr)
          return Status::InvalidArgument(fmt::format("layer {} expert {}: device slot {} outside the {} the provider "
                                                     "manages", layer_id, ew.expert_id, ew.device_slot,
                                                     cache.managed_slots()));
      }
      if (ew.device_slot_holds) return Status::Ok();
      ZM_ASSIGN_OR_RETURN(const Fp8ExpertScales fp8, ExpertFp8Scales(config, w, layer_id, ew));
      if (slot == nullptr) slot = &cache.Insert(layer_id, ew.expert_id);
      const Status written = FillDeviceSlot(ew, *slot, &reads_host, ew.dtype == DType::kF8E4M3 ? &fp8 : nullptr);
      if (!written.ok()) {
        if (ew.device_slot < 0) cache.Erase(layer_id, ew.expert_id);
        return Status(written.code(), fmt::format("layer {} expert {}: {}", layer_id, ew.expert_id, written.message()));
      }
      return Status::Ok();
    }();
    if (!st.ok()) {
      if (reads_host) (void)kernels::SynchronizeStream(nullptr);  // this lease's own launches, too
      lease->Abandon();
      return st;
    }
    filled(index, *slot);
    leases.push_back(std::move(lease));
  }
  return release();
}

}  // namespace

Status FillDeviceSlot(const ExpertWeightsView& ew, at::Tensor& slot, bool* reads_host, const Fp8ExpertScales* fp8) {
  const int64_t n = ew.intermediate * ew.hidden;
  auto* base = static_cast<uint16_t*>(slot.data_ptr());
  const void* data[3] = {ew.gate, ew.up, ew.down};
  const ExpertPlanes planes[3] = {ew.gate_planes, ew.up_planes, ew.down_planes};
  const int64_t rows[3] = {ew.intermediate, ew.intermediate, ew.hidden};
  const bool fp8_expert = ew.dtype == DType::kF8E4M3, quantized = fp8_expert || ew.dtype == DType::kMXFP4;
  if (quantized && ew.planes())
    return Status::InvalidArgument(fmt::format("{} experts arrive as bytes, not as E/SM planes", DTypeName(ew.dtype)));
  if (fp8_expert && (fp8 == nullptr || fp8->block_rows <= 0 || fp8->block_cols <= 0 || fp8->scale_inv[0] == nullptr ||
                     fp8->scale_inv[1] == nullptr || fp8->scale_inv[2] == nullptr))
    return Status::InvalidArgument("an FP8 expert without its weight_scale_inv blocks");
  if (ew.planes() && !slot.is_cpu()) {  // the three matrices read in place from the registered arena: one launch
    kernels::RecoverySegment segments[3];
    bool in_place = true;
    for (int m = 0; m < 3; ++m) {
      segments[m].e = static_cast<const uint8_t*>(kernels::DeviceAliasOf(planes[m].e));
      segments[m].sm = static_cast<const uint8_t*>(kernels::DeviceAliasOf(planes[m].sm));
      segments[m].out = base + m * n;
      segments[m].n = n;
      in_place = in_place && segments[m].e != nullptr && segments[m].sm != nullptr;
    }
    if (in_place) {
      *reads_host = true;  // before the launch: a failure after part of it was enqueued still waits
      return kernels::LaunchRecoverBf16Batch(segments, 3, nullptr);
    }
  }
  for (int m = 0; m < 3; ++m) {
    uint16_t* out = base + m * n;
    const int64_t cols = n / rows[m];
    if (quantized) {  // FP8 / MXFP4 (gpt-oss): dequantized into the slot (kernels/fp8_dequant.h)
      const auto* q = static_cast<const uint8_t*>(data[m]);
      const int64_t br = fp8_expert ? fp8->block_rows : 0, bc = fp8_expert ? fp8->block_cols : 0;
      if (slot.is_cpu()) {  // the tests' CPU stand-in
        if (fp8_expert) {
          kernels::DequantizeF8E4M3ToBf16Reference(q, fp8->scale_inv[m], rows[m], cols, br, bc, out);
        } else {
          kernels::DequantizeMxfp4ToBf16Reference(q, rows[m], cols, out);
        }
        continue;
      }
      at::Tensor dq;  // the stored bytes, read in place when registered, else copied (synchronously)
      const void* alias = kernels::DeviceAliasOf(q);
      if (alias == nullptr) {
        const int64_t stored = fp8_expert ? n : n / 2 + n / 32;
        dq = at::from_blob(const_cast<uint8_t*>(q), {stored}, at::TensorOptions().dtype(at::kByte)).to(slot.device());
        alias = dq.data_ptr();
      } else {
        *reads_host = true;
      }
      const auto* dq_ptr = static_cast<const uint8_t*>(alias);
      if (!fp8_expert) {
        ZM_RETURN_IF_ERROR(kernels::LaunchDequantizeMxfp4ToBf16(dq_ptr, rows[m], cols, out, nullptr));
        continue;
      }
      const int64_t scales = ((rows[m] + br - 1) / br) * ((cols + bc - 1) / bc);
      const at::Tensor ds = at::from_blob(const_cast<float*>(fp8->scale_inv[m]), {scales},
                                          at::TensorOptions().dtype(at::kFloat))
                                .to(slot.device());
      ZM_RETURN_IF_ERROR(
          kernels::LaunchDequantizeF8E4M3ToBf16(dq_ptr, ds.data_ptr<float>(), rows[m], cols, br, bc, out, nullptr));
      continue;
    }
    if (ew.planes() && slot.is_cpu()) {  // the tests' CPU stand-in for the device
      kernels::RecoverBf16Cpu(planes[m].e, planes[m].sm, out, n);
    } else if (ew.planes()) {
      const void* e = kernels::DeviceAliasOf(planes[m].e);
      const void* sm = kernels::DeviceAliasOf(planes[m].sm);
      if (e != nullptr && sm != nullptr) {  // read in place from the registered arena
        *reads_host = true;
        ZM_RETURN_IF_ERROR(kernels::LaunchRecoverBf16(static_cast<const uint8_t*>(e), static_cast<const uint8_t*>(sm),
                                                      out, n, nullptr));
      } else {  // pageable planes: copied to the device (synchronously), recovered there
        const at::TensorOptions bytes = at::TensorOptions().dtype(at::kByte);
        const at::Tensor de = at::from_blob(const_cast<uint8_t*>(planes[m].e), {n}, bytes).to(slot.device());
        const at::Tensor dsm = at::from_blob(const_cast<uint8_t*>(planes[m].sm), {n}, bytes).to(slot.device());
        ZM_RETURN_IF_ERROR(kernels::LaunchRecoverBf16(de.data_ptr<uint8_t>(), dsm.data_ptr<uint8_t>(), out, n, nullptr));
      }
    } else if (ew.dtype == DType::kBF16) {
      if (!slot.is_cpu() && kernels::DeviceAliasOf(data[m]) != nullptr) {  // pinned / registered: one DMA, async
        *reads_host = true;
        ZM_RETURN_IF_ERROR(kernels::CopyAsync(out, data[m], static_cast<uint64_t>(n) * 2, nullptr));
      } else {
        slot.narrow(0, m * n, n).copy_(WrapExpertTensor(data[m], ew.dtype, 1, n).reshape({n}));
      }
    } else {  // F16 / F32 experts: converted to BF16 on the way (as the torch path converts them)
      slot.narrow(0, m * n, n).copy_(WrapExpertTensor(data[m], ew.dtype, rows[m], cols).reshape({n}));
    }
  }
  return Status::Ok();
}

Result<int64_t> PreloadDeviceExperts(const ModelConfig& config, const std::vector<LayerWeights>& layer_weights,
                                     ExpertProvider& provider, DeviceExpertCache& cache) {
  std::vector<int32_t> layers;
  for (int64_t l = 0; l < config.num_hidden_layers; ++l)
    if (config.IsMoeLayer(l)) layers.push_back(static_cast<int32_t>(l));
  if (!layers.empty() && static_cast<size_t>(layers.back()) >= layer_weights.size())
    return Status::InvalidArgument(fmt::format("PreloadDeviceExperts: no weights for layer {}", layers.back()));
  const int64_t total = static_cast<int64_t>(layers.size()) * config.num_experts;
  if (total == 0 || cache.capacity() < total) return int64_t{0};
  int64_t written = 0;
  for (int32_t layer : layers) {
    LayerRouting routing;
    routing.layer_id = layer;
    for (int32_t e = 0; e < config.num_experts; ++e) {
      if (cache.Contains(layer, e)) continue;
      routing.expert_ids.push_back(e);
      routing.tokens_per_expert.push_back(0);
    }
    if (routing.expert_ids.empty()) continue;
    cache.BeginLayer();
    ZM_RETURN_IF_ERROR(provider.BeginLayer(routing));
    ExpertAssignment request;  // what CheckLease checks a lease against: the ids asked for
    request.expert_ids = routing.expert_ids;
    std::vector<bool> delivered(request.expert_ids.size(), false);
    ZM_RETURN_IF_ERROR(FillFromProvider(config, layer_weights[static_cast<size_t>(layer)], request, delivered, provider,
                                        cache, layer, request.expert_ids.size(),
                                        [&](size_t, at::Tensor&) { ++written; }));
    ZM_RETURN_IF_ERROR(provider.EndLayer(layer));
    cache.EndLayer();
  }
  return written;
}

Result<at::Tensor> MoeForwardDevice(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                                    const at::Tensor& x, ExpertProvider& provider, const NextMoeLayer* next,
                                    double substitution_alpha, DeviceExpertCache& cache) {
  const int64_t n = x.size(0), hidden = x.size(1), inter = config.moe_intermediate_size;
  const at::Device device = x.device();
  const int64_t n_experts = w.router.size(0);

  // 1. Routers (float32, as DeepSeek's MoEGate and the CPU path), one device->host copy.
  const at::Tensor x32 = x.to(at::kFloat);
  at::Tensor logits = Linear(x32, w.router);
  if (w.router_logit_bias.defined()) logits = logits + w.router_logit_bias.to(device);  // gpt_oss
  at::Tensor probs = RouterScores(config, logits);
  const bool predict = Predicts(provider, next);
  int64_t next_experts = 0;
  if (predict) {
    at::Tensor in = x32;
    if (next->residual.defined()) in = in + next->residual.to(device, at::kFloat);
    at::Tensor next_logits = Linear(in, next->weights->router);
    if (next->weights->router_logit_bias.defined()) next_logits = next_logits + next->weights->router_logit_bias.to(device);
    const at::Tensor next_probs = RouterScores(config, next_logits);
    next_experts = next_probs.size(1);
    probs = at::cat({probs, next_probs}, 1);
  }
  // The layer's one wait for the device: on a GPU this span also holds the time the device took for
  // everything enqueued since the last wait (the attention part), so a trace tells a host-bound step
  // (short waits) from a device-bound one (bench/trace_plot.py --by-name).
  trace::TraceSpan router_span("device", [&] { return fmt::format("router scores to the host (layer {})", layer_id); });
  const at::Tensor host = probs.to(at::kCPU).contiguous();
  router_span.End();
  std::vector<float> scores(static_cast<size_t>(n * n_experts)), next_scores(static_cast<size_t>(n * next_experts));
  const float* hp = host.data_ptr<float>();
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(hp + t * (n_experts + next_experts), n_experts, scores.data() + t * n_experts);
    std::copy_n(hp + t * (n_experts + next_experts) + n_experts, next_experts, next_scores.data() + t * next_experts);
  }

  // 2. Route; device hits are served here, the rest asked of the provider.
  trace::TraceSpan route_span("expert", [&] { return fmt::format("route and ask the provider (layer {})", layer_id); });
  ZM_ASSIGN_OR_RETURN(
      RoutedLayer routed,
      RouteExperts(config, layer_id, scores.data(), SelectionBias(w), n, provider, substitution_alpha,
                   [&](int32_t e) { return cache.Contains(layer_id, e); }));
  const ExpertAssignment& assign = routed.assign;
  const size_t n_selected = assign.expert_ids.size();
  cache.BeginLayer();
  LayerRouting ask = routed.routing;
  ask.expert_ids.clear();
  ask.tokens_per_expert.clear();
  std::vector<at::Tensor*> slots(n_selected, nullptr);
  std::vector<bool> delivered(n_selected, false);
  for (size_t j = 0; j < n_selected; ++j) {
    const int32_t e = assign.expert_ids[j];
    const auto tokens = static_cast<int32_t>(assign.token_rows[j].size());
    if (at::Tensor* s = cache.Find(layer_id, e)) {
      slots[j] = s;
      delivered[j] = true;
      ask.device_resident.push_back(e);
      ask.device_resident_tokens.push_back(tokens);
    } else {
      ask.expert_ids.push_back(e);
      ask.tokens_per_expert.push_back(tokens);
    }
  }
  ZM_RETURN_IF_ERROR(provider.BeginLayer(ask));
  if (predict) {
    LayerRouting predicted =
        RankPredictedExperts(config, next->layer_id, next_scores.data(), n, SelectionBias(*next->weights));
    LayerRouting wanted;
    wanted.layer_id = predicted.layer_id;
    for (size_t i = 0; i < predicted.expert_ids.size(); ++i) {
      if (cache.Contains(next->layer_id, predicted.expert_ids[i])) continue;
      wanted.expert_ids.push_back(predicted.expert_ids[i]);
      if (i < predicted.tokens_per_expert.size()) wanted.tokens_per_expert.push_back(predicted.tokens_per_expert[i]);
    }
    if (!wanted.expert_ids.empty()) provider.Prefetch(wanted);
  }

  route_span.End();

  // 3. The provider's experts into device slots, as they arrive (their leases are back before the
  //    grouped launch: each slot holds its own copy).
  ZM_RETURN_IF_ERROR(FillFromProvider(config, w, assign, delivered, provider, cache, layer_id, ask.expert_ids.size(),
                                      [&](size_t j, at::Tensor& slot) { slots[j] = &slot; }));

  // 4. The grouped expert MLP over every selected expert (gpt_oss: its biased, clamped experts one at a
  //    time from their slots, in ascending expert order; the grouped kernel has neither).
  at::Tensor y;
  if (n_selected > 0 && w.expert_gate_bias.defined()) {
    const int64_t matrix = inter * hidden;
    y = at::zeros({n, hidden}, at::TensorOptions().dtype(at::kFloat).device(device));
    for (size_t j = 0; j < n_selected; ++j) {  // assign.expert_ids ascend
      MlpWeights e;
      e.gate = slots[j]->narrow(0, 0, matrix).view({inter, hidden}).to(x.scalar_type());
      e.up = slots[j]->narrow(0, matrix, matrix).view({inter, hidden}).to(x.scalar_type());
      e.down = slots[j]->narrow(0, 2 * matrix, matrix).view({hidden, inter}).to(x.scalar_type());
      const at::Tensor rows = at::tensor(assign.token_rows[j], at::TensorOptions().dtype(at::kLong)).to(device);
      const at::Tensor weight = at::tensor(assign.weights[j], at::TensorOptions().dtype(at::kFloat)).to(device).unsqueeze(1);
      const at::Tensor out = BiasedExpertForward(e, ExpertBiasesOf(config, w, assign.expert_ids[j]), x.index_select(0, rows));
      y.index_add_(0, rows, out.to(at::kFloat) * weight);
    }
    y = y.to(x.scalar_type());
  } else if (n_selected > 0) {
    std::vector<uint64_t> weights;
    std::vector<int32_t> expert_pair_offsets{0}, pair_token, token_pair_offsets{0}, token_pairs;
    std::vector<float> pair_weight;
    const int64_t matrix = inter * hidden;
    for (size_t j = 0; j < n_selected; ++j) {
      const auto* base = static_cast<const uint16_t*>(slots[j]->data_ptr());
      for (int m = 0; m < 3; ++m) weights.push_back(reinterpret_cast<uint64_t>(base + m * matrix));
      for (size_t r = 0; r < assign.token_rows[j].size(); ++r) {
        pair_token.push_back(static_cast<int32_t>(assign.token_rows[j][r]));
        pair_weight.push_back(assign.weights[j][r]);
      }
      expert_pair_offsets.push_back(static_cast<int32_t>(pair_token.size()));
    }
    std::vector<std::vector<int32_t>> by_token(static_cast<size_t>(n));
    for (size_t p = 0; p < pair_token.size(); ++p) by_token[static_cast<size_t>(pair_token[p])].push_back(static_cast<int32_t>(p));
    for (const auto& list : by_token) {
      token_pairs.insert(token_pairs.end(), list.begin(), list.end());
      token_pair_offsets.push_back(static_cast<int32_t>(token_pairs.size()));
    }
    if (!kernels::GroupedExpertWeightsAligned(weights.data(), static_cast<int32_t>(n_selected), hidden, inter))
      return Status::Internal(fmt::format("layer {}: an expert slot is not 16-byte aligned (grouped expert MLP)", layer_id));
    PackedTables packed;
    packed.weights = packed.Append(weights);
    packed.expert_pair_offsets = packed.Append(expert_pair_offsets);
    packed.pair_token = packed.Append(pair_token);
    packed.pair_weight = packed.Append(pair_weight);
    packed.token_pair_offsets = packed.Append(token_pair_offsets);
    packed.token_pairs = packed.Append(token_pairs);
    // One copy of the tables: from pinned memory, asynchronously (a pageable source would make the
    // copy wait for the device's queue first), through torch so its host allocator keeps the
    // buffer until the copy is done.
    const auto table_bytes = static_cast<int64_t>(packed.bytes.size());
    at::Tensor tables;
    if (x.is_cpu()) {
      tables = at::from_blob(packed.bytes.data(), {table_bytes}, at::TensorOptions().dtype(at::kByte)).clone();
    } else {
      at::Tensor pinned = at::empty({table_bytes}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
      std::memcpy(pinned.data_ptr(), packed.bytes.data(), packed.bytes.size());
      tables = pinned.to(device, /*non_blocking=*/true);
    }
    const auto* tb = tables.data_ptr<uint8_t>();
    at::Tensor xb = x.to(at::kBFloat16).contiguous();
    if (reinterpret_cast<uintptr_t>(xb.data_ptr()) % 16 != 0) xb = xb.clone();
    const auto n_pairs = static_cast<int64_t>(pair_token.size());
    const at::TensorOptions f32 = at::TensorOptions().dtype(at::kFloat).device(device);
    at::Tensor act = at::empty({n_pairs, inter}, f32), out = at::empty({n_pairs, hidden}, f32);
    y = at::empty({n, hidden}, f32);
    kernels::GroupedExpertArgs a;
    a.x = static_cast<const uint16_t*>(xb.data_ptr());
    a.n_tokens = n;
    a.hidden = hidden;
    a.inter = inter;
    a.weights = reinterpret_cast<const uint64_t*>(tb + packed.weights);
    a.n_experts = static_cast<int32_t>(n_selected);
    a.expert_pair_offsets = reinterpret_cast<const int32_t*>(tb + packed.expert_pair_offsets);
    a.n_pairs = static_cast<int32_t>(n_pairs);
    a.pair_token = reinterpret_cast<const int32_t*>(tb + packed.pair_token);
    a.pair_weight = reinterpret_cast<const float*>(tb + packed.pair_weight);
    a.token_pair_offsets = reinterpret_cast<const int32_t*>(tb + packed.token_pair_offsets);
    a.token_pairs = reinterpret_cast<const int32_t*>(tb + packed.token_pairs);
    a.act = act.data_ptr<float>();
    a.out = out.data_ptr<float>();
    a.y = y.data_ptr<float>();
    const trace::TraceSpan compute_span(
        "expert", [&] { return fmt::format("compute {} experts on the device (layer {})", n_selected, layer_id); });
    if (x.is_cpu()) {  // the tests' CPU stand-in for the device: the kernels' reference
      ZM_RETURN_IF_ERROR(kernels::GroupedExpertMlpReference(a));
    } else {
      ZM_RETURN_IF_ERROR(kernels::LaunchGroupedExpertMlp(a, nullptr));
    }
    y = y.to(x.scalar_type());
  } else {
    y = at::zeros({n, hidden}, x.options());
  }
  ZM_RETURN_IF_ERROR(provider.EndLayer(layer_id));
  cache.EndLayer();

  // 5. Shared experts.
  if (w.has_shared_expert) y = y + SharedExpertForward(config, w, x);
  return y;
}

}  // namespace zipmoe::executor
