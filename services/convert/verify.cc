#include "services/convert/verify.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "common/checkpoint/expert_names.h"
#include "common/checkpoint/fused_experts.h"
#include "common/checkpoint/expert_store.h"
#include "common/file_util.h"
#include "common/parallel.h"
#include "common/checkpoint/safetensors.h"

namespace zipmoe::convert {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ", ")) + "]";
}

// Chunks must lie inside the file, not overlap, and all bytes between them must be zero.
Status CheckLayout(const ExpertStore& store) {
  struct Span {
    uint64_t begin, end;
    const ExpertTensorInfo* tensor;
    size_t chunk;
  };
  std::vector<Span> spans;
  for (const auto& t : store.manifest().expert_tensors)
    for (size_t c = 0; c < t.chunks.size(); ++c)
      spans.push_back({t.chunks[c].file_offset, t.chunks[c].file_offset + t.chunks[c].stored_bytes, &t, c});
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  ZM_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(store.experts_path()));
  uint64_t pos = 0;
  const Span* prev = nullptr;
  auto check_zero = [&](uint64_t begin, uint64_t end) -> Status {
    for (uint64_t i = begin; i < end; ++i) {
      if (file.data()[i] != 0) {
        if (prev == nullptr)
          return Status::Corruption(fmt::format("{}@{}: nonzero byte before the first chunk", store.experts_path(), i));
        return Status::Corruption(fmt::format("{}@{}: nonzero padding after chunk {} of '{}' (layer {}, expert {})",
                                              store.experts_path(), i, prev->chunk, prev->tensor->name,
                                              prev->tensor->layer_id, prev->tensor->expert_id));
      }
    }
    return Status::Ok();
  };
  for (const Span& s : spans) {
    if (s.begin < pos)
      return Status::Corruption(fmt::format("{}@{}: chunk {} of '{}' overlaps the previous chunk", store.experts_path(),
                                            s.begin, s.chunk, s.tensor->name));
    ZM_RETURN_IF_ERROR(check_zero(pos, s.begin));
    pos = s.end;
    prev = &s;
  }
  return check_zero(pos, file.size());
}

// An unfused gpt-oss expert (fused_experts.h): its raw MXFP4 layout made from the fused tensors.
Status VerifyFusedExpert(const ExpertStore& store, const Checkpoint& ckpt, const ExpertTensorInfo& t,
                         const FusedExpertRef& ref) {
  if (t.dtype != ref.dtype || t.shape != ref.shape)
    return Status::Corruption(fmt::format("tensor '{}' (layer {}, expert {}): {} {} in the manifest, {} {} in {}",
                                          t.name, t.layer_id, t.expert_id, DTypeName(t.dtype), ShapeString(t.shape),
                                          DTypeName(ref.dtype), ShapeString(ref.shape), ckpt.dir()));
  std::vector<uint8_t> want(t.raw_bytes()), got(t.raw_bytes());
  ZM_RETURN_IF_ERROR(ReadFusedExpert(ckpt, ref, want.data()));
  ZM_RETURN_IF_ERROR(store.ReadTensor(t, got.data()));
  if (want != got) {
    size_t i = 0;
    while (i < got.size() && got[i] == want[i]) ++i;
    const size_t blocks = t.dtype == DType::kMXFP4 ? want.size() - want.size() / 17 : want.size();  // n/2 of 17n/32
    return Status::Corruption(fmt::format("tensor '{}' (layer {}, expert {}): {} {} byte {} recovers as 0x{:02x}, "
                                          "the checkpoint's fused experts of {} have 0x{:02x}", t.name, t.layer_id,
                                          t.expert_id, DTypeName(t.dtype), i < blocks ? "value" : "scale",
                                          i < blocks ? i : i - blocks, got[i], ckpt.dir(), want[i]));
  }
  return Status::Ok();
}

Status VerifyExpert(const ExpertStore& store, const Checkpoint& ckpt, const ExpertTensorInfo& t) {
  auto view = ckpt.Find(t.name);
  if (!view.ok())
    return Status::NotFound(fmt::format("tensor '{}' (layer {}, expert {}) is in {} but not in the checkpoint {}",
                                        t.name, t.layer_id, t.expert_id, store.dir(), ckpt.dir()));
  if (view->spec.shape != t.shape)
    return Status::Corruption(fmt::format("tensor '{}': shape {} in the manifest, {} in {}", t.name,
                                          ShapeString(t.shape), ShapeString(view->spec.shape), view->file));
  std::vector<uint8_t> out(t.raw_bytes());
  ZM_RETURN_IF_ERROR(store.ReadTensor(t, out.data()));
  if (view->spec.dtype != t.dtype) {
    const bool rounded =
        t.dtype == DType::kBF16 && (view->spec.dtype == DType::kF16 || view->spec.dtype == DType::kF32);
    if (rounded) return Status::Ok();  // --convert-dtype: the BF16 hash check above is the reference
    return Status::Corruption(fmt::format("tensor '{}' (layer {}, expert {}): {} in the manifest, {} in {}", t.name,
                                          t.layer_id, t.expert_id, DTypeName(t.dtype), DTypeName(view->spec.dtype),
                                          view->file));
  }
  if (view->size_bytes() != out.size() || std::memcmp(out.data(), view->data, out.size()) != 0) {
    const size_t width = static_cast<size_t>(std::max(1, DTypeSize(t.dtype)));
    size_t i = 0;
    while ((i + 1) * width <= out.size() && std::memcmp(&out[i * width], view->data + i * width, width) == 0) ++i;
    uint32_t got = 0;
    if ((i + 1) * width <= out.size()) std::memcpy(&got, &out[i * width], std::min(width, sizeof got));
    return Status::Corruption(fmt::format("tensor '{}' (layer {}, expert {}): {} element {} recovers as 0x{:0{}x}, "
                                          "checkpoint {} has a different value",
                                          t.name, t.layer_id, t.expert_id, DTypeName(t.dtype), i, got, 2 * width,
                                          view->file));
  }
  return Status::Ok();
}

Status VerifyDense(const Manifest& m, const std::string& dense_path, const Checkpoint& ckpt) {
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> dense, SafetensorsFile::Open(dense_path));
  if (dense->tensors().size() != m.dense_tensors.size())
    return Status::Corruption(fmt::format("{}: {} tensors, manifest lists {}", dense_path, dense->tensors().size(),
                                          m.dense_tensors.size()));
  for (const auto& d : m.dense_tensors) {
    const TensorView* got = dense->Find(d.name);
    if (got == nullptr) return Status::NotFound(fmt::format("{}: dense tensor '{}' missing", dense_path, d.name));
    auto want = ckpt.Find(d.name);
    if (!want.ok()) return want.status();
    if (got->spec.shape != want->spec.shape || got->spec.dtype != want->spec.dtype || got->spec.shape != d.shape ||
        got->spec.dtype != d.dtype)
      return Status::Corruption(fmt::format("{}: tensor '{}' is {} {}, checkpoint has {} {}", dense_path, d.name,
                                            DTypeName(got->spec.dtype), ShapeString(got->spec.shape),
                                            DTypeName(want->spec.dtype), ShapeString(want->spec.shape)));
    if (std::memcmp(got->data, want->data, got->size_bytes()) != 0)
      return Status::Corruption(fmt::format("{}: tensor '{}' differs from {}", dense_path, d.name, want->file));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// The files compress copied (config.json, tokenizer files, generation_config.json, ...) byte for byte
// as MODEL_DIR has them, and config.json as the manifest recorded it (the planner reads that copy, the
// executor the file): an edited config.json changes what is served while every tensor is bit-exact.
Status VerifySourceFiles(const VerifyOptions& opt, const Manifest& m) {
  for (const std::string& name : m.source_files) {
    const std::string copy = JoinPath(opt.compressed_dir, name), source = JoinPath(opt.model_dir, name);
    ZM_ASSIGN_OR_RETURN(std::string got, ReadFileToString(copy));
    ZM_ASSIGN_OR_RETURN(std::string want, ReadFileToString(source));
    if (got != want)
      return Status::Corruption(fmt::format("{}: differs from {} (compress copies it byte for byte)", copy, source));
  }
  const std::string config_path = JoinPath(opt.compressed_dir, "config.json");
  ZM_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  const nlohmann::json config = nlohmann::json::parse(config_text, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json recorded = nlohmann::json::parse(m.config_json, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || config != recorded)
    return Status::Corruption(fmt::format("{}: differs from the config.json compress recorded in {}", config_path,
                                          kManifestFileName));
  return Status::Ok();
}

}  // namespace

Result<VerifySummary> VerifyCompressed(const VerifyOptions& opt, const std::function<void(int64_t, int64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertStore> store, ExpertStore::Open(opt.compressed_dir, ExpertDTypes::kAny));
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(opt.model_dir));
  const Manifest& m = store->manifest();

  // Same tensor set on both sides, but for the multi-token-prediction layers compress leaves out.
  // gpt-oss: the fused expert tensors are stored per expert (fused_experts.h), under their own names.
  std::map<std::string, FusedExpertRef> fused;
  {
    ZM_ASSIGN_OR_RETURN(std::vector<FusedExpertRef> refs, ListFusedExperts(*ckpt));
    for (FusedExpertRef& r : refs) fused.emplace(r.name, std::move(r));
  }
  std::set<std::string> compressed_names;
  for (const auto& t : m.expert_tensors) compressed_names.insert(t.name);
  for (const auto& d : m.dense_tensors) compressed_names.insert(d.name);
  for (const auto& [name, ref] : fused)
    if (!compressed_names.count(name))
      return Status::NotFound(fmt::format("expert tensor '{}' (layer {}, expert {}, from the fused experts of {}) is "
                                          "missing from {}", name, ref.id.layer_id, ref.id.expert_id, opt.model_dir,
                                          opt.compressed_dir));
  size_t mtp = 0, fused_sources = 0;
  for (const auto& name : ckpt->names()) {
    if (IsNotDecodedTensor(name, ckpt->config()) && !compressed_names.count(name)) {
      ++mtp;
      continue;
    }
    if (!fused.empty() && IsFusedExpertTensor(name)) {
      ++fused_sources;
      continue;
    }
    if (!compressed_names.count(name))
      return Status::NotFound(fmt::format("tensor '{}' of {} is missing from {}", name, opt.model_dir, opt.compressed_dir));
  }
  if (compressed_names.size() + mtp + fused_sources != ckpt->names().size() + fused.size()) {
    for (const auto& name : compressed_names)
      if (!fused.count(name) && !ckpt->Find(name).ok())
        return Status::NotFound(fmt::format("tensor '{}' of {} is not in {}", name, opt.compressed_dir, opt.model_dir));
  }

  ZM_RETURN_IF_ERROR(CheckLayout(*store));

  const int64_t total = static_cast<int64_t>(m.expert_tensors.size());
  const int n_threads = ResolveThreadCount(opt.n_threads);
  std::vector<Status> results(m.expert_tensors.size());
  std::atomic<size_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < n_threads; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < m.expert_tensors.size() && !failed.load(); i = next++) {
        const auto f = fused.find(m.expert_tensors[i].name);
        results[i] = f == fused.end() ? VerifyExpert(*store, *ckpt, m.expert_tensors[i])
                                      : VerifyFusedExpert(*store, *ckpt, m.expert_tensors[i], f->second);
        if (!results[i].ok()) failed = true;
        ++done;
      }
    });
  }
  int64_t reported = -1;
  while (progress && !failed.load() && done.load() < total) {
    if (done.load() != reported) progress(reported = done.load(), total);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (auto& th : workers) th.join();
  for (const Status& st : results)
    if (!st.ok()) return st;
  if (progress) progress(total, total);

  ZM_RETURN_IF_ERROR(VerifyDense(m, JoinPath(opt.compressed_dir, m.dense_file), *ckpt));
  ZM_RETURN_IF_ERROR(VerifySourceFiles(opt, m));

  VerifySummary s;
  s.expert_tensors = total;
  s.dense_tensors = static_cast<int64_t>(m.dense_tensors.size());
  for (const auto& t : m.expert_tensors) {
    s.chunks += static_cast<int64_t>(t.chunks.size());
    s.expert_bytes_raw += t.raw_bytes();
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace zipmoe::convert
