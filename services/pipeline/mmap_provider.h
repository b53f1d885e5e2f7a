// MmapExpertProvider: the "mmap" baseline of the benchmarks (docs/benchmarks.md). Routed experts are
// read straight out of a memory map of the *uncompressed* Hugging Face checkpoint (*.safetensors),
// demand-paged through the kernel's page cache, with no cache of our own: the way llama.cpp loads
// weights by default (mmap, no MAP_POPULATE, no mlock). What stays in memory is whatever the page
// cache keeps, so a memory cap on the process (a cgroup limit covers its page cache too) is the
// only "budget" this baseline has; it never reads the compressed directory.
//
// Outputs are bit-identical to the all-resident run: the bytes are the checkpoint's own.
// Thread-safety: as ExpertProvider (one driving thread; leases released from any thread). Owns the
// checkpoint's maps; leases must not outlive the provider.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/expert_provider.h"
#include "common/resident_expert_provider.h"
#include "common/checkpoint/safetensors.h"

namespace zipmoe::runtime {

struct MmapProviderStats {
  uint64_t experts_served = 0;   // leases handed out (NextReady calls)
  uint64_t expert_bytes = 0;     // bytes of the experts served (gate + up + down), counted per lease
  uint64_t major_faults = 0;     // process major page faults (getrusage) since Create
  uint64_t minor_faults = 0;     // process minor page faults since Create
};

class MmapExpertProvider : public ExpertProvider {
 public:
  // Maps the weights of the Hugging Face checkpoint in `model_dir`.
  // Errors: kInvalidArgument when `model_dir` is a compressed zipmoe directory (it has a manifest:
  // this baseline needs the directory it was compressed from); Checkpoint::Open's (kNotFound, ...);
  // ResidentExpertProvider::FromCheckpoint's (bad expert dtype/shape).
  static Result<std::unique_ptr<MmapExpertProvider>> Create(const std::string& model_dir);

  Status BeginLayer(const LayerRouting& routing) override;
  Result<std::unique_ptr<ExpertLease>> NextReady() override;
  // The views are always there (a page fault is not a wait this interface can see).
  bool NextIsReady() const override { return views_->NextIsReady(); }
  Status EndLayer(int32_t layer_id) override;

  MmapProviderStats stats() const;
  const std::string& model_dir() const { return checkpoint_->dir(); }

 private:
  MmapExpertProvider() = default;
  std::unique_ptr<Checkpoint> checkpoint_;             // owns the maps the views point into
  std::unique_ptr<ResidentExpertProvider> views_;      // zero-copy views into checkpoint_
  uint64_t experts_served_ = 0;
  uint64_t expert_bytes_ = 0;
  uint64_t major_faults_at_create_ = 0;
  uint64_t minor_faults_at_create_ = 0;
};

}  // namespace zipmoe::runtime
