// The interface between the model executor and whatever supplies routed-expert weights.
//
// The executor's MoE block (services/executor) computes the router, then for each MoE layer:
//   1. BeginLayer(routing): announces the selected experts (and tokens per expert) so a provider
//      can schedule I/O, decompression and recovery for all of them at once (ZipMoE §3.3);
//   2. NextReady() exactly routing.expert_ids.size() times: each call blocks until one of the
//      announced experts is ready and returns a lease on its BF16 weights, in whatever order they
//      become ready (a provider may deliver cache hits first);
//   3. EndLayer(layer_id) once every lease of the layer has been taken.
// The executor combines expert outputs in a fixed order (ascending expert id), so the arrival
// order never changes the numerics.
//
// Prefetching (optional, a hint): when prefetch_mode() is not kNone, the executor predicts, right
// after BeginLayer of layer l, which experts the next MoE layer will select and passes them to
// Prefetch() before it computes layer l, so a provider can start their reads and decodes while the
// executor computes (DALI §4.2 residual-based prefetching, SMoE's top-score prefetching). The
// prediction never changes what is computed: BeginLayer of the next layer still announces the
// experts its router selected, and a provider must serve exactly those, prefetched or not.
//
// This header has no torch or CUDA dependency: the runtime (cache + scheduler) implements it in
// its own library, and the executor wraps the pointers as tensors.
// Thread-safety: one executor thread drives a provider; leases may be released from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe {

// The two bit-field planes of one BF16 tensor (common/bitfield.h): e[i] the exponent byte,
// sm[i] = sign << 7 | mantissa, one byte per element each, same element order as the tensor.
struct ExpertPlanes {
  const uint8_t* e = nullptr;
  const uint8_t* sm = nullptr;
};

// Weights of one routed expert (row-major, as in the checkpoint):
//   gate: [intermediate, hidden], up: [intermediate, hidden], down: [hidden, intermediate],
// computing down(silu(gate(x)) * up(x)); or, for a gate-less expert (gated = false; gate and
// gate_planes null: switch_transformers' wi = up, wo = down), down(relu(up(x))). All of element type `dtype`: BF16 bit patterns (compressed directories, the runtime), or
// F16/F32 when an HF checkpoint stores its experts that way (e.g. OLMoE's F32 release).
// A provider serving a CPU executor may instead hand out a BF16 expert unrecovered, as its E/SM
// planes (gate/up/down null, *_planes set): the executor's kernels fuse the recovery into the
// matmul (kernels/bf16_gemm.h), so no recovered copy is written and read again.
struct ExpertWeightsView {
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  DType dtype = DType::kBF16;
  const void* gate = nullptr;
  const void* up = nullptr;
  const void* down = nullptr;
  ExpertPlanes gate_planes, up_planes, down_planes;  // BF16 only, when gate/up/down are null
  int64_t intermediate = 0;
  int64_t hidden = 0;
  bool gated = true;  // false: no gate projection (2 tensors, ReLU)
  // A provider whose cache keeps pool F in the GPU executor's device memory
  // (ExpertProvider::device_f_slots() >= 0): the expert's device slot index in [0, device_f_slots()),
  // or -1. device_slot_holds: the slot already holds this expert's BF16 weights (an F hit; no host
  // bytes: gate/up/down and the planes are null). Otherwise the executor writes the weights it is
  // served here into that slot and computes from it; the slot then holds the expert until the cache
  // hands it to another one.
  int32_t device_slot = -1;
  bool device_slot_holds = false;

  bool planes() const { return up == nullptr && !device_slot_holds; }
};

// Keeps an expert's weights resident (pinned) while alive; the destructor releases the pin.
class ExpertLease {
 public:
  virtual ~ExpertLease() = default;
  virtual const ExpertWeightsView& weights() const = 0;
  // The executor could not use the weights as delivered (writing them into the device slot the view
  // names failed): the release that follows must not admit the expert anywhere, so no cache records a
  // placement whose bytes were never written. Default: nothing (a provider that admits nothing).
  virtual void Abandon() {}
};

// How the executor predicts the next MoE layer's experts (ExpertProvider::prefetch_mode()):
//   kTopScore: SMoE's top-score prefetching: the next layer's router applied to this layer's router
//              input x, softmax, the top-k experts per token (importance-driven-expert-scheduling §4);
//   kResidual: DALI's residual-based prefetching (dali.txt §4.2): the next router applied to
//              x + r_l, where r_l is the mean difference between the next layer's router input and
//              this one's, calibrated offline (`zipmoe profile --prefetch-residuals`); without a
//              calibration file it behaves as kTopScore.
enum class PrefetchMode : uint8_t { kNone = 0, kTopScore = 1, kResidual = 2 };
// "none", "top-score", "residual".
const char* PrefetchModeName(PrefetchMode mode);
// Errors: kInvalidArgument naming the text and the accepted names.
Result<PrefetchMode> ParsePrefetchMode(const std::string& text);

// Which experts one MoE layer selected for the current batch of tokens.
struct LayerRouting {
  LayerRouting() = default;
  LayerRouting(int32_t layer, std::vector<int32_t> ids, std::vector<int32_t> tokens = {})
      : layer_id(layer), expert_ids(std::move(ids)), tokens_per_expert(std::move(tokens)) {}
  int32_t layer_id = 0;
  std::vector<int32_t> expert_ids;         // distinct, ascending
  std::vector<int32_t> tokens_per_expert;  // same length: tokens routed to each expert
  // BeginLayer only (empty in predictions): the router's scores of every expert of the layer
  // ([n_experts] float32 softmax probabilities, averaged over the batch's tokens): the input of
  // score-based eviction (SMoE Eq. 3). Empty when the executor does not supply them.
  std::vector<float> mean_scores;
  // BeginLayer only: (token, slot) pairs whose low-score expert the executor replaced by a cached
  // one (SMoE expert substitution, `--substitution-alpha`); expert_ids already lists the substitutes.
  int32_t substituted = 0;
  // BeginLayer only: selected experts the executor serves from its own device-memory copies (the
  // GPU executor's device F slots, services/executor/device_expert_cache.h), ascending, with their
  // token counts. They are not in expert_ids: the provider serves none of them. Observers (routing
  // traces, popularity) see both lists together (AllSelected).
  std::vector<int32_t> device_resident;
  std::vector<int32_t> device_resident_tokens;
  // BeginLayer only, across processes (`zipmoe up`): which device memory the executor's pool F slots
  // are (ExpertProvider::device_f_slots), a value of its own per executor process; 0 = none (an
  // executor in the runtime's process). A cache-manager that sees it change empties F, whose slots
  // the previous executor held (services/pipeline/cache_backend.h SetDeviceEpoch).
  uint64_t device_epoch = 0;

  // expert_ids ∪ device_resident (ascending) with their token counts, device_resident empty;
  // the routing itself when device_resident is empty.
  LayerRouting AllSelected() const;
};

class ExpertProvider {
 public:
  virtual ~ExpertProvider() = default;
  // A BeginLayer while an earlier layer is begun and not ended means the executor gave that layer up
  // (an error of its own): a provider drops what it did not deliver, without admitting it anywhere.
  // Errors: kInvalidArgument (unknown layer/expert, a lease of the earlier layer still held).
  virtual Status BeginLayer(const LayerRouting& routing) = 0;
  // Errors: kInvalidArgument (no layer begun / all its experts already delivered), kCorruption or
  // kIoError from storage (naming file, tensor, chunk), kUnavailable/kDeadlineExceeded from peers.
  virtual Result<std::unique_ptr<ExpertLease>> NextReady() = 0;
  // True when the next NextReady() would return at once (its expert is already resident or
  // recovered), so the executor may take it now and compute it in one parallel region with the
  // others it holds. False means "would wait, or unknown" (the default): the executor then computes
  // each expert as it arrives. Never blocks.
  virtual bool NextIsReady() const { return false; }
  virtual Status EndLayer(int32_t layer_id) = 0;
  // Releases every lease of *leases (leaving it empty) as one batch, e.g. the experts the executor
  // computed together: a provider whose cache lives in another process sends their admissions in one
  // message. Default: destroys them one by one, in order.
  virtual void ReleaseAll(std::vector<std::unique_ptr<ExpertLease>>* leases) { leases->clear(); }

  // SMoE expert substitution (importance-driven-expert-scheduling §IV-B): which experts of
  // `layer_id` the provider would serve now without I/O or decoding (cached[e] = 1, [n_experts]
  // entries; the vector is resized). Asked before BeginLayer of that layer, only when substitution
  // is on. The default answers "every expert" (a provider that holds all of them: nothing is ever
  // substituted).
  virtual void CachedExperts(int32_t layer_id, int32_t n_experts, std::vector<uint8_t>* cached) const {
    (void)layer_id;
    cached->assign(static_cast<size_t>(n_experts), 1);
  }
  // Device slots of pool F when this provider's cache decides what the GPU executor keeps in device
  // memory (issue 36 item 1: the cache manager tracks F slots, the executor owns their memory): the
  // executor then allocates that many slots ([3 · inter · hidden] BF16 each), asks the provider for
  // every selected expert, and reads or writes the slot each lease names (ExpertWeightsView::
  // device_slot). -1 (the default): the provider knows nothing of the device; a GPU executor keeps
  // its own device cache.
  virtual int64_t device_f_slots() const { return -1; }
  // How the executor should predict prefetches for this provider (kNone: do not call Prefetch).
  virtual PrefetchMode prefetch_mode() const { return PrefetchMode::kNone; }
  // A prediction of the experts layer `predicted.layer_id` will select, best first (expert_ids in
  // descending predicted score, distinct; tokens_per_expert may be empty). Called between
  // BeginLayer and EndLayer of an earlier layer, never for the active layer. A hint: the provider may
  // start loading any of them, or none; a wrong prediction costs bandwidth, never correctness.
  // Never fails (a prefetch that fails is dropped; the expert is loaded again when selected).
  virtual void Prefetch(const LayerRouting& predicted) { (void)predicted; }
  // Asks the provider to call `listener` whenever NextIsReady() may have turned true without a call
  // of the listener's owner: on the thread that made an expert of the open layer ready or failed the
  // layer (a read or decode completing, a lease released, a prefetch), with no lock of the provider
  // held. The listener may call NextIsReady / NextReady / release leases, and is called again (on
  // the same thread) from inside those calls when they make more ready: it must tolerate that. An
  // empty function removes it; when SetReadyListener returns, no call of the old listener is running
  // or will start. A remote executor's scheduler sends the experts from there (no thread woken just to
  // deliver). Returns false when the provider never calls a listener (the default): the caller must
  // then wait in NextReady.
  virtual bool SetReadyListener(std::function<void()> listener) {
    (void)listener;
    return false;
  }
};

}  // namespace zipmoe
