#include "common/resident_expert_provider.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "common/expert_names.h"
#include "common/parallel.h"

namespace zipmoe {
namespace {

class ResidentLease : public ExpertLease {
 public:
  explicit ResidentLease(const ExpertWeightsView& w) : w_(w) {}
  const ExpertWeightsView& weights() const override { return w_; }

 private:
  ExpertWeightsView w_;
};

// Checks gate/up [I, H] and down [H, I] and fills the view's dimensions.
Status CheckShapes(const std::string& where, const std::vector<int64_t>& gate, const std::vector<int64_t>& up,
                   const std::vector<int64_t>& down, ExpertWeightsView* w) {
  if (gate.size() != 2 || up != gate || down.size() != 2 || down[0] != gate[1] || down[1] != gate[0])
    return Status::InvalidArgument(fmt::format(
        "{}: expert shapes gate [{}], up [{}], down [{}] do not form gate/up [I, H], down [H, I]", where,
        fmt::join(gate, ", "), fmt::join(up, ", "), fmt::join(down, ", ")));
  w->intermediate = gate[0];
  w->hidden = gate[1];
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ResidentExpertProvider>> ResidentExpertProvider::FromCheckpoint(const Checkpoint& ckpt) {
  std::unique_ptr<ResidentExpertProvider> p(new ResidentExpertProvider());
  std::map<std::pair<int32_t, int32_t>, std::array<const TensorView*, 3>> found;
  std::vector<TensorView> views;
  views.reserve(ckpt.names().size());  // never reallocates: pointers into it stay valid
  for (const auto& name : ckpt.names()) {
    auto id = ParseExpertTensorName(name);
    if (!id) continue;
    ZM_ASSIGN_OR_RETURN(TensorView v, ckpt.Find(name));
    if (v.spec.dtype != DType::kBF16 && v.spec.dtype != DType::kF16 && v.spec.dtype != DType::kF32)
      return Status::InvalidArgument(fmt::format("{}: expert tensor '{}' is {}, expected BF16, F16 or F32", v.file,
                                                 name, DTypeName(v.spec.dtype)));
    views.push_back(v);
    auto& slot = found.try_emplace({id->layer_id, id->expert_id}, std::array<const TensorView*, 3>{}).first->second;
    slot[static_cast<int>(id->proj)] = &views.back();
  }
  for (const auto& [key, t] : found) {
    for (int k = 0; k < 3; ++k)
      if (t[k] == nullptr)
        return Status::NotFound(fmt::format("{}: layer {} expert {} has no {} tensor", ckpt.dir(), key.first,
                                            key.second, ExpertProjName(static_cast<ExpertProj>(k))));
    ExpertWeightsView w;
    w.layer_id = key.first;
    w.expert_id = key.second;
    ZM_RETURN_IF_ERROR(CheckShapes(t[0]->file + ": '" + t[0]->spec.name + "'", t[0]->spec.shape, t[1]->spec.shape,
                                   t[2]->spec.shape, &w));
    if (t[1]->spec.dtype != t[0]->spec.dtype || t[2]->spec.dtype != t[0]->spec.dtype)
      return Status::InvalidArgument(fmt::format("{}: layer {} expert {}: gate/up/down dtypes {}/{}/{} differ",
                                                 ckpt.dir(), key.first, key.second, DTypeName(t[0]->spec.dtype),
                                                 DTypeName(t[1]->spec.dtype), DTypeName(t[2]->spec.dtype)));
    w.dtype = t[0]->spec.dtype;
    w.gate = t[0]->data;
    w.up = t[1]->data;
    w.down = t[2]->data;
    p->experts_[key] = w;
  }
  return p;
}

Result<std::unique_ptr<ResidentExpertProvider>> ResidentExpertProvider::FromStore(const ExpertStore& store,
                                                                                  int n_threads) {
  std::unique_ptr<ResidentExpertProvider> p(new ResidentExpertProvider());
  const auto& tensors = store.manifest().expert_tensors;
  p->owned_.resize(tensors.size());
  std::vector<Status> results(tensors.size());
  ParallelFor(0, tensors.size(), n_threads, [&](size_t i) {
    p->owned_[i].resize(static_cast<size_t>((tensors[i].raw_bytes() + 3) / 4));  // uint32 words: F32-aligned
    results[i] = store.ReadTensor(tensors[i], reinterpret_cast<uint8_t*>(p->owned_[i].data()));
  });
  for (const Status& st : results) ZM_RETURN_IF_ERROR(st);

  std::map<std::pair<int32_t, int32_t>, std::array<size_t, 3>> found;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto& slot = found.try_emplace({tensors[i].layer_id, tensors[i].expert_id}, std::array<size_t, 3>{
                                       SIZE_MAX, SIZE_MAX, SIZE_MAX}).first->second;
    slot[static_cast<int>(tensors[i].proj)] = i;
  }
  for (const auto& [key, idx] : found) {
    for (int k = 0; k < 3; ++k)
      if (idx[k] == SIZE_MAX)
        return Status::NotFound(fmt::format("{}: layer {} expert {} has no {} tensor", store.dir(), key.first,
                                            key.second, ExpertProjName(static_cast<ExpertProj>(k))));
    ExpertWeightsView w;
    w.layer_id = key.first;
    w.expert_id = key.second;
    ZM_RETURN_IF_ERROR(CheckShapes(store.dir() + ": '" + tensors[idx[0]].name + "'", tensors[idx[0]].shape,
                                   tensors[idx[1]].shape, tensors[idx[2]].shape, &w));
    if (tensors[idx[1]].dtype != tensors[idx[0]].dtype || tensors[idx[2]].dtype != tensors[idx[0]].dtype)
      return Status::InvalidArgument(fmt::format("{}: layer {} expert {}: gate/up/down dtypes {}/{}/{} differ",
                                                 store.dir(), key.first, key.second,
                                                 DTypeName(tensors[idx[0]].dtype), DTypeName(tensors[idx[1]].dtype),
                                                 DTypeName(tensors[idx[2]].dtype)));
    w.dtype = tensors[idx[0]].dtype;
    w.gate = p->owned_[idx[0]].data();
    w.up = p->owned_[idx[1]].data();
    w.down = p->owned_[idx[2]].data();
    p->experts_[key] = w;
  }
  return p;
}

Status ResidentExpertProvider::BeginLayer(const LayerRouting& routing) {
  if (active_)
    return Status::InvalidArgument(fmt::format("BeginLayer({}) while layer {} is still active", routing.layer_id,
                                               current_.layer_id));
  if (routing.tokens_per_expert.size() != routing.expert_ids.size())
    return Status::InvalidArgument(fmt::format("layer {}: {} expert ids but {} token counts", routing.layer_id,
                                               routing.expert_ids.size(), routing.tokens_per_expert.size()));
  for (int32_t e : routing.expert_ids)
    if (!experts_.count({routing.layer_id, e}))
      return Status::InvalidArgument(fmt::format("layer {}: no expert {}", routing.layer_id, e));
  current_ = routing;
  next_ = 0;
  active_ = true;
  if (record_routing_) routing_log_.push_back(routing);
  return Status::Ok();
}

Result<std::unique_ptr<ExpertLease>> ResidentExpertProvider::NextReady() {
  if (!active_ || next_ >= current_.expert_ids.size())
    return Status::InvalidArgument("NextReady: no expert pending (BeginLayer not called or all delivered)");
  const int32_t e = current_.expert_ids[next_++];
  return std::unique_ptr<ExpertLease>(new ResidentLease(experts_.at({current_.layer_id, e})));
}

Status ResidentExpertProvider::EndLayer(int32_t layer_id) {
  if (!active_ || layer_id != current_.layer_id)
    return Status::InvalidArgument(fmt::format("EndLayer({}) without a matching BeginLayer", layer_id));
  if (next_ != current_.expert_ids.size())
    return Status::InvalidArgument(fmt::format("EndLayer({}): {} of {} experts not taken", layer_id,
                                               current_.expert_ids.size() - next_, current_.expert_ids.size()));
  active_ = false;
  return Status::Ok();
}

}  // namespace zipmoe
