// An ExpertProvider that keeps every routed expert resident in memory (the "all experts resident"
// upper bound the offloading runtime is measured against, and the reference for bit-exactness).
//
// From a Hugging Face checkpoint the weights are zero-copy views into the checkpoint's memory maps;
// from a compressed directory every expert is decompressed once at start-up (checked against its
// hashes). Thread-safety: as ExpertProvider (one driving thread).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/expert_provider.h"
#include "common/checkpoint/expert_store.h"
#include "common/checkpoint/safetensors.h"

namespace zipmoe {

class ResidentExpertProvider : public ExpertProvider {
 public:
  // Uses the routed-expert tensors of `checkpoint` (which must outlive the provider).
  // Experts may be BF16, F16, F32 or F8_E4M3 (served as stored; ExpertWeightsView::dtype says which).
  // gpt-oss's fused experts (common/checkpoint/fused_experts.h: MXFP4, or dense runtime tensors) are
  // unfused into owned per-expert copies (errors: ListFusedExperts / ReadFusedExpert's).
  // Experts are gate/up/down, or gate-less up/down (switch_transformers wi/wo: ExpertWeightsView::gated
  // false), all alike. Errors: kInvalidArgument naming a tensor of another dtype, an expert whose
  // gate/up/down dtypes differ, or whose shapes do not form gate/up [I, H], down [H, I], or experts
  // that mix the gated and gate-less layouts; kNotFound naming a missing up/down tensor of an expert.
  static Result<std::unique_ptr<ResidentExpertProvider>> FromCheckpoint(const Checkpoint& checkpoint);
  // Decodes every expert of `store` into memory, in its own dtype (BF16, F16 or F32, as stored), using
  // `n_threads` threads (0 = all cores). Errors: those of ExpertStore::ReadTensor (kCorruption naming
  // tensor and chunk), kNotFound, kInvalidArgument for an expert whose gate/up/down dtypes differ or
  // for mixed gated / gate-less experts (as FromCheckpoint).
  static Result<std::unique_ptr<ResidentExpertProvider>> FromStore(const ExpertStore& store, int n_threads = 0);

  Status BeginLayer(const LayerRouting& routing) override;
  Result<std::unique_ptr<ExpertLease>> NextReady() override;
  // Every expert is in memory: true while the begun layer has experts left to deliver.
  bool NextIsReady() const override { return active_ && next_ < current_.expert_ids.size(); }
  Status EndLayer(int32_t layer_id) override;

  // Number of experts held; layers that have experts.
  size_t expert_count() const { return experts_.size(); }
  // Routing log: every BeginLayer call in order (for tests and popularity measurements).
  const std::vector<LayerRouting>& routing_log() const { return routing_log_; }
  void set_record_routing(bool on) { record_routing_ = on; }

 private:
  ResidentExpertProvider() = default;
  std::map<std::pair<int32_t, int32_t>, ExpertWeightsView> experts_;
  std::vector<std::vector<uint32_t>> owned_;  // decoded / unfused tensors, raw bytes in uint32 words
  bool active_ = false;
  LayerRouting current_;
  size_t next_ = 0;
  bool record_routing_ = false;
  std::vector<LayerRouting> routing_log_;
};

}  // namespace zipmoe
