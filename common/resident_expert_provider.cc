#include "common/resident_expert_provider.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>

#include "common/bitfield.h"
#include "common/checkpoint/expert_names.h"
#include "common/checkpoint/fused_experts.h"
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

// Checks up [I, H], down [H, I] (and gate = up when `gate` is non-null) and fills the view's dimensions.
Status CheckShapes(const std::string& where, const std::vector<int64_t>* gate, const std::vector<int64_t>& up,
                   const std::vector<int64_t>& down, ExpertWeightsView* w) {
  if (up.size() != 2 || (gate != nullptr && *gate != up) || down.size() != 2 || down[0] != up[1] ||
      down[1] != up[0])
    return Status::InvalidArgument(fmt::format(
        "{}: expert shapes gate [{}], up [{}], down [{}] do not form gate/up [I, H], down [H, I]", where,
        gate != nullptr ? fmt::format("{}", fmt::join(*gate, ", ")) : "none", fmt::join(up, ", "),
        fmt::join(down, ", ")));
  w->intermediate = up[0];
  w->hidden = up[1];
  return Status::Ok();
}

// Checks that an expert's projections share one dtype (gate null for a gate-less expert) and returns
// it. Errors: kInvalidArgument naming dir, layer, expert and the three dtypes ("-" for no gate).
Result<DType> CommonDtype(const std::string& dir, std::pair<int32_t, int32_t> key, const DType* gate, DType up,
                          DType down) {
  if (down != up || (gate != nullptr && *gate != up))
    return Status::InvalidArgument(fmt::format("{}: layer {} expert {}: gate/up/down dtypes {}/{}/{} differ", dir,
                                               key.first, key.second, gate != nullptr ? DTypeName(*gate) : "-",
                                               DTypeName(up), DTypeName(down)));
  return up;
}

// Checks that (layer, expert) has up and down, and a gate iff the first expert seen had one
// (*gated: -1 before the first expert, then 0/1). Errors: kNotFound naming the missing projection;
// kInvalidArgument when experts mix gated (gate/up/down) and gate-less (up/down) layouts.
Status CheckProjections(const std::string& dir, std::pair<int32_t, int32_t> key, bool has_gate, bool has_up,
                        bool has_down, int* gated) {
  for (const auto& [present, proj] : {std::make_pair(has_up, ExpertProj::kUp), std::make_pair(has_down, ExpertProj::kDown)})
    if (!present)
      return Status::NotFound(fmt::format("{}: layer {} expert {} has no {} tensor", dir, key.first, key.second,
                                          ExpertProjName(proj)));
  if (*gated < 0) {
    *gated = has_gate ? 1 : 0;
  } else if (*gated != (has_gate ? 1 : 0)) {
    return Status::InvalidArgument(fmt::format(
        "{}: layer {} expert {} {} a gate projection but earlier experts {}: a model's experts are either all "
        "gate/up/down or all up/down (gate-less)",
        dir, key.first, key.second, has_gate ? "has" : "lacks", has_gate ? "lack one" : "have one"));
  }
  return Status::Ok();
}

// gpt-oss's fused experts: each expert's gate/up/down made once in its raw layout (owned; the fused
// tensors cannot be used in place: gate and up rows interleave, MXFP4's blocks and scales sit apart,
// and the dense runtime tensors are [in, out]).
Status FromFusedExperts(const Checkpoint& ckpt,
                                                                std::vector<std::vector<uint32_t>>* owned,
                                                                std::map<std::pair<int32_t, int32_t>,
                                                                         ExpertWeightsView>* experts) {
  ZM_ASSIGN_OR_RETURN(const std::vector<FusedExpertRef> refs, ListFusedExperts(ckpt));
  owned->resize(refs.size());
  std::vector<Status> results(refs.size());
  ParallelFor(0, refs.size(), 0, [&](size_t i) {
    const uint64_t bytes = DTypeBytes(refs[i].dtype, static_cast<uint64_t>(refs[i].shape[0] * refs[i].shape[1]));
    (*owned)[i].resize(static_cast<size_t>((bytes + 3) / 4));
    const auto* raw = reinterpret_cast<const uint8_t*>((*owned)[i].data());
    results[i] = ReadFusedExpert(ckpt, refs[i], reinterpret_cast<uint8_t*>((*owned)[i].data()));
    // The check compress makes (NaN scale 0xFF, values beyond fp32): served as is they gave NaN logits and
    // token 0 forever.
    if (results[i].ok() && refs[i].dtype == DType::kMXFP4) {
      if (Status st = CheckMxfp4Values(raw, refs[i].shape[0] * refs[i].shape[1]); !st.ok())
        results[i] = Status::InvalidArgument(fmt::format("{}: expert tensor '{}' (from the fused MXFP4 experts): {}",
                                                         ckpt.dir(), refs[i].name, st.message()));
    }
  });
  for (const Status& st : results) ZM_RETURN_IF_ERROR(st);
  for (size_t i = 0; i + 2 < refs.size(); i += 3) {  // sorted: gate, up, down of each expert
    ExpertWeightsView w;
    w.layer_id = refs[i].id.layer_id;
    w.expert_id = refs[i].id.expert_id;
    w.dtype = refs[i].dtype;
    ZM_RETURN_IF_ERROR(CheckShapes(ckpt.dir() + ": '" + refs[i + 1].name + "'", &refs[i].shape, refs[i + 1].shape,
                                   refs[i + 2].shape, &w));
    w.gate = (*owned)[i].data();
    w.up = (*owned)[i + 1].data();
    w.down = (*owned)[i + 2].data();
    (*experts)[{w.layer_id, w.expert_id}] = w;
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ResidentExpertProvider>> ResidentExpertProvider::FromCheckpoint(const Checkpoint& ckpt) {
  std::unique_ptr<ResidentExpertProvider> p(new ResidentExpertProvider());
  if (HasFusedExperts(ckpt.config())) {
    ZM_RETURN_IF_ERROR(FromFusedExperts(ckpt, &p->owned_, &p->experts_));
    return p;
  }
  std::map<std::pair<int32_t, int32_t>, std::array<const TensorView*, 3>> found;
  std::vector<TensorView> views;
  views.reserve(ckpt.names().size());  // never reallocates: pointers into it stay valid
  const int64_t n_encoder_layers = EncoderLayerCount(ckpt.config());
  for (const auto& name : ckpt.names()) {
    auto id = ParseExpertTensorName(name, n_encoder_layers);
    if (!id || IsNotDecodedTensor(name, ckpt.config())) continue;
    ZM_ASSIGN_OR_RETURN(TensorView v, ckpt.Find(name));
    if (!HasExponentSplit(v.spec.dtype))
      return Status::InvalidArgument(fmt::format("{}: expert tensor '{}' is {}, expected BF16, F16, F32 or F8_E4M3", v.file,
                                                 name, DTypeName(v.spec.dtype)));
    views.push_back(v);
    auto& slot = found.try_emplace({id->layer_id, id->expert_id}, std::array<const TensorView*, 3>{}).first->second;
    slot[static_cast<int>(id->proj)] = &views.back();
  }
  int gated = -1;
  for (const auto& [key, t] : found) {
    ZM_RETURN_IF_ERROR(CheckProjections(ckpt.dir(), key, t[0] != nullptr, t[1] != nullptr, t[2] != nullptr, &gated));
    ExpertWeightsView w;
    w.layer_id = key.first;
    w.expert_id = key.second;
    w.gated = t[0] != nullptr;
    ZM_RETURN_IF_ERROR(CheckShapes(t[1]->file + ": '" + t[1]->spec.name + "'", w.gated ? &t[0]->spec.shape : nullptr,
                                   t[1]->spec.shape, t[2]->spec.shape, &w));
    ZM_ASSIGN_OR_RETURN(w.dtype, CommonDtype(ckpt.dir(), key, w.gated ? &t[0]->spec.dtype : nullptr,
                                             t[1]->spec.dtype, t[2]->spec.dtype));
    w.gate = w.gated ? t[0]->data : nullptr;
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
  int gated = -1;
  for (const auto& [key, idx] : found) {
    ZM_RETURN_IF_ERROR(CheckProjections(store.dir(), key, idx[0] != SIZE_MAX, idx[1] != SIZE_MAX, idx[2] != SIZE_MAX,
                                        &gated));
    ExpertWeightsView w;
    w.layer_id = key.first;
    w.expert_id = key.second;
    w.gated = idx[0] != SIZE_MAX;
    ZM_RETURN_IF_ERROR(CheckShapes(store.dir() + ": '" + tensors[idx[1]].name + "'",
                                   w.gated ? &tensors[idx[0]].shape : nullptr, tensors[idx[1]].shape,
                                   tensors[idx[2]].shape, &w));
    ZM_ASSIGN_OR_RETURN(w.dtype, CommonDtype(store.dir(), key, w.gated ? &tensors[idx[0]].dtype : nullptr,
                                             tensors[idx[1]].dtype, tensors[idx[2]].dtype));
    w.gate = w.gated ? p->owned_[idx[0]].data() : nullptr;
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
