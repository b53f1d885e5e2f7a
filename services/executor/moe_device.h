// The GPU executor's MoE block (issue 36 items 2-3): MoeForward for x on a CUDA device when the
// executor holds a DeviceExpertCache (device_expert_cache.h). Per MoE layer:
//   1. router in float32 on the device, softmax, and (with prefetching) the next layer's router:
//      one device->host copy of both, the only synchronisation of a layer whose experts are all in
//      device slots;
//   2. top-k (RouteExperts); experts already in a device slot are hits; BeginLayer asks the
//      provider for the others only (LayerRouting::device_resident names the hits); predicted
//      experts already on the device are not prefetched. With a provider whose cache keeps pool F
//      on the device (ExpertProvider::device_f_slots() >= 0; the cache's managed slots,
//      DeviceExpertCache::SetManagedSlots) the executor holds nothing of its own choosing: it asks
//      the provider for every selected expert, so the cache counts each activation and decides F;
//      a lease whose slot already holds its expert (ExpertWeightsView::device_slot_holds) is read
//      there, one that names a slot is written there (and stays: the cache's F residency), the
//      rest are staged for this layer;
//   3. each delivered expert is written into a new device slot: from its E/SM planes by the
//      recovery kernel reading them in place through the device alias of the provider's registered
//      arena (zero-copy on a Jetson, over PCIe on a discrete GPU; planes in pageable memory are
//      copied first), or from its BF16 bytes by one asynchronous copy (F16/F32 experts converted
//      to BF16); leases go back before any wait for the next expert and at the end, each time after
//      the device has read them (one stream sync, only when one was read from host memory
//      asynchronously);
//   4. every selected expert in one grouped computation (kernels/grouped_expert.h: three launches),
//      summed in ascending expert order; the shared expert (qwen2_moe gated, deepseek_v2 plain) by
//      torch.
// A CPU x with CPU slots stands in for the device in tests: the same host logic, with the kernels'
// CPU references (RecoverBf16Cpu, GroupedExpertMlpReference) in place of the launches.
// The result depends only on the experts' BF16 bits, never on which pool, slot or path served them:
// byte-identical logits at every host and device budget and policy.
//
// Internal to services/executor (includes ATen). Driven by the executor thread.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/model_config.h"
#include "common/status.h"
#include "services/executor/device_expert_cache.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_block.h"

namespace zipmoe::executor {

// x: [N, hidden] on a CUDA device, or the CPU stand-in (any float dtype; computed in BF16 x float32 accumulation) ->
// [N, hidden] in x's dtype. Errors: MoeForward's; kInvalidArgument for experts whose
// intermediate or hidden size differs from the config; kInternal with the CUDA error of a failed
// recovery, copy or launch (the slot being filled is dropped).
Result<at::Tensor> MoeForwardDevice(const ModelConfig& config, const LayerWeights& w, int32_t layer_id,
                                    const at::Tensor& x, ExpertProvider& provider, const NextMoeLayer* next,
                                    double substitution_alpha, DeviceExpertCache& cache);

// Fills the cache with every routed expert of every MoE layer of `config`, asking `provider` for
// each layer's experts in turn (BeginLayer with all of them, NextReady, EndLayer), when the cache's
// capacity holds them all; otherwise does nothing and returns 0. For an all-resident provider on a
// discrete GPU: "warm" then means every weight on the device before the first request, not after
// each expert's first use. Returns the number of experts written. Errors: the provider's,
// CheckLease's (an expert not asked for, other dimensions), FillDeviceSlot's.
// layer_weights: the model's layers (LayerWeights::expert_scales of FP8 checkpoints).
Result<int64_t> PreloadDeviceExperts(const ModelConfig& config, const std::vector<LayerWeights>& layer_weights,
                                     ExpertProvider& provider, DeviceExpertCache& cache);

// Writes one delivered expert into `slot` ([3 · inter · hidden] BF16 on the device: gate | up |
// down), as step 3 above describes. An FP8 expert (F8_E4M3 bytes + `fp8`'s scales) is dequantized
// into the slot by kernels/fp8_dequant.h (BF16 of the float32 weight the CPU kernels use), its bytes
// read in place when registered, else copied first. *reads_host is set when a device operation still
// reads the lease's host memory after the call returns (the caller must sync before releasing the
// lease). Errors: kInternal (CUDA), kInvalidArgument (a null tensor pointer, an FP8 expert without
// scales or as planes).
Status FillDeviceSlot(const ExpertWeightsView& ew, at::Tensor& slot, bool* reads_host,
                      const Fp8ExpertScales* fp8 = nullptr);

}  // namespace zipmoe::executor
