#include "services/pipeline/mmap_provider.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include "common/dtype.h"
#include "common/file_util.h"
#include "common/checkpoint/manifest.h"

namespace zipmoe::runtime {
namespace {

struct Faults {
  uint64_t major = 0;
  uint64_t minor = 0;
};

Faults ProcessFaults() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return {};
  return {static_cast<uint64_t>(ru.ru_majflt), static_cast<uint64_t>(ru.ru_minflt)};
}

}  // namespace

Result<std::unique_ptr<MmapExpertProvider>> MmapExpertProvider::Create(const std::string& model_dir) {
  if (FileExists(JoinPath(model_dir, kManifestFileName))) {
    return Status::InvalidArgument(fmt::format(
        "--policy mmap reads the uncompressed checkpoint: {} is a compressed zipmoe directory (it has {}); pass the "
        "Hugging Face directory it was compressed from",
        model_dir, kManifestFileName));
  }
  std::unique_ptr<MmapExpertProvider> p(new MmapExpertProvider());
  ZM_ASSIGN_OR_RETURN(p->checkpoint_, Checkpoint::Open(model_dir));
  ZM_ASSIGN_OR_RETURN(p->views_, ResidentExpertProvider::FromCheckpoint(*p->checkpoint_));
  if (p->views_->expert_count() == 0) {
    return Status::InvalidArgument(fmt::format("--policy mmap: {} has no routed-expert tensors", model_dir));
  }
  const Faults f = ProcessFaults();
  p->major_faults_at_create_ = f.major;
  p->minor_faults_at_create_ = f.minor;
  return p;
}

Status MmapExpertProvider::BeginLayer(const LayerRouting& routing) { return views_->BeginLayer(routing); }

Result<std::unique_ptr<ExpertLease>> MmapExpertProvider::NextReady() {
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, views_->NextReady());
  const ExpertWeightsView& w = lease->weights();
  ++experts_served_;
  expert_bytes_ += 3 * DTypeBytes(w.dtype, static_cast<uint64_t>(w.intermediate) * static_cast<uint64_t>(w.hidden));
  return lease;
}

Status MmapExpertProvider::EndLayer(int32_t layer_id) { return views_->EndLayer(layer_id); }

MmapProviderStats MmapExpertProvider::stats() const {
  const Faults f = ProcessFaults();
  MmapProviderStats s;
  s.experts_served = experts_served_;
  s.expert_bytes = expert_bytes_;
  s.major_faults = f.major - major_faults_at_create_;
  s.minor_faults = f.minor - minor_faults_at_create_;
  return s;
}

}  // namespace zipmoe::runtime
