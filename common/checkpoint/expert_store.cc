#include "common/checkpoint/expert_store.h"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/bitfield.h"
#include "common/codec.h"
#include "common/hash.h"

namespace zipmoe {

Result<std::unique_ptr<ExpertStore>> ExpertStore::Open(const std::string& dir, ExpertDTypes dtypes) {
  std::unique_ptr<ExpertStore> store(new ExpertStore());
  store->dir_ = dir;
  ZM_ASSIGN_OR_RETURN(store->manifest_, ReadManifest(dir));
  const auto& experts = store->manifest_.expert_tensors;
  if (!experts.empty()) store->expert_dtype_ = experts.front().dtype;
  for (const ExpertTensorInfo& t : experts) {
    if (dtypes == ExpertDTypes::kServedOnly && t.dtype != store->expert_dtype_) {
      const ExpertTensorInfo& first = experts.front();
      return Status::InvalidArgument(fmt::format(
          "{}: expert tensor '{}' (layer {}, expert {}) is {} but '{}' is {}; the runtime serves experts of one "
          "dtype (pool slots are sized per model): recompress with --convert-dtype to make them all BF16",
          JoinPath(dir, kManifestFileName), t.name, t.layer_id, t.expert_id, DTypeName(t.dtype), first.name,
          DTypeName(first.dtype)));
    }
  }
  store->experts_path_ = JoinPath(dir, store->manifest_.experts_file);
  uint64_t size = 0;
  ZM_ASSIGN_OR_RETURN(store->fd_, OpenRegularFile(store->experts_path_, &size));
  if (size != store->manifest_.experts_file_bytes)
    return Status::Corruption(fmt::format("{}: {} bytes, manifest records {} (truncated or replaced)",
                                          store->experts_path_, size, store->manifest_.experts_file_bytes));
  const auto& tensors = store->manifest_.expert_tensors;
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto key = std::make_tuple(tensors[i].layer_id, tensors[i].expert_id, static_cast<int>(tensors[i].proj));
    if (!store->index_.emplace(key, i).second)
      return Status::Corruption(fmt::format("{}/{}: two records for layer {}, expert {}, {}", dir, kManifestFileName,
                                            tensors[i].layer_id, tensors[i].expert_id,
                                            ExpertProjName(tensors[i].proj)));
  }
  return store;
}

const ExpertTensorInfo* ExpertStore::Find(int32_t layer_id, int32_t expert_id, ExpertProj proj) const {
  auto it = index_.find(std::make_tuple(layer_id, expert_id, static_cast<int>(proj)));
  return it == index_.end() ? nullptr : &manifest_.expert_tensors[it->second];
}

Status ExpertStore::ReadChunk(const ExpertTensorInfo& t, int chunk_index, uint8_t* out) const {
  const ChunkInfo& c = t.chunks.at(static_cast<size_t>(chunk_index));
  uint64_t done = 0;
  while (done < c.stored_bytes) {
    ssize_t n = ::pread(fd_.get(), out + done, c.stored_bytes - done, static_cast<off_t>(c.file_offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(fmt::format("{}@{}: read: {}", experts_path_, c.file_offset + done, std::strerror(errno)));
    }
    if (n == 0)
      return Status::Corruption(fmt::format("{}@{}: unexpected end of file reading chunk {} of '{}'", experts_path_,
                                            c.file_offset + done, chunk_index, t.name));
    done += static_cast<uint64_t>(n);
  }
  const uint64_t got = Xxh64(out, c.stored_bytes);
  if (got != c.xxh64) {
    return Status::Corruption(fmt::format("{}@{}: {} {} of '{}' (layer {}, expert {}): xxh64 {:016x}, manifest {:016x}",
                                          experts_path_, c.file_offset, c.kind == ChunkKind::kE ? "E-chunk" : "SM-chunk",
                                          chunk_index, t.name, t.layer_id, t.expert_id, got, c.xxh64));
  }
  return Status::Ok();
}

Status ExpertStore::DecodeEChunk(const ExpertTensorInfo& t, int chunk_index, const uint8_t* stored, uint8_t* e_plane) {
  const ChunkInfo& c = t.chunks.at(static_cast<size_t>(chunk_index));
  Status st =
      DecompressEChunk(EChunkDType(t, c), t.codec, stored, c.stored_bytes, e_plane + c.elem_offset, c.raw_bytes);
  if (!st.ok())
    return st.WithContext(fmt::format("E-chunk {} of '{}' (layer {}, expert {})", chunk_index, t.name, t.layer_id,
                                      t.expert_id));
  return Status::Ok();
}

Status ExpertStore::ReadTensorBf16(const ExpertTensorInfo& t, uint16_t* out) const {
  if (t.dtype != DType::kBF16)
    return Status::InvalidArgument(fmt::format("{}: '{}' (layer {}, expert {}) is {}, not BF16", experts_path_, t.name,
                                               t.layer_id, t.expert_id, DTypeName(t.dtype)));
  return ReadTensor(t, reinterpret_cast<uint8_t*>(out));
}

Status ExpertStore::ReadTensor(const ExpertTensorInfo& t, uint8_t* out) const {
  const int64_t n = t.numel();
  std::vector<uint8_t> e_plane(EPlaneBytes(t.dtype, n));
  std::vector<uint8_t> sm_plane(SmPlaneBytes(t.dtype, n));
  std::vector<uint8_t> stored;
  for (size_t i = 0; i < t.chunks.size(); ++i) {
    const ChunkInfo& c = t.chunks[i];
    if (c.kind == ChunkKind::kSm) {
      ZM_RETURN_IF_ERROR(ReadChunk(t, static_cast<int>(i), sm_plane.data()));
      continue;
    }
    stored.resize(c.stored_bytes);
    ZM_RETURN_IF_ERROR(ReadChunk(t, static_cast<int>(i), stored.data()));
    ZM_RETURN_IF_ERROR(DecodeEChunk(t, static_cast<int>(i), stored.data(), e_plane.data()));
  }
  // out may have any alignment: merge in place when it suits the element type, else through scratch.
  const auto merge = [&](auto merge_fn, auto element) -> void {
    using T = decltype(element);
    if (reinterpret_cast<uintptr_t>(out) % alignof(T) == 0) {
      merge_fn(e_plane.data(), sm_plane.data(), n, reinterpret_cast<T*>(out));
      return;
    }
    std::vector<T> v(static_cast<size_t>(n));
    merge_fn(e_plane.data(), sm_plane.data(), n, v.data());
    std::memcpy(out, v.data(), v.size() * sizeof(T));
  };
  switch (t.dtype) {
    case DType::kBF16: merge(&MergeBf16, uint16_t{}); break;
    case DType::kF16: merge(&MergeF16, uint16_t{}); break;
    case DType::kF32: merge(&MergeF32, uint32_t{}); break;
    case DType::kF8E4M3: merge(&MergeF8E4M3, uint8_t{}); break;
    case DType::kMXFP4: MergeMxfp4(e_plane.data(), sm_plane.data(), n, out); break;  // n % 32 == 0: ReadManifest
    default:
      return Status::Corruption(fmt::format("{}: '{}' (layer {}, expert {}) has dtype {} (no E/SM split)",
                                            experts_path_, t.name, t.layer_id, t.expert_id, DTypeName(t.dtype)));
  }
  const uint64_t got = Xxh64(out, t.raw_bytes());
  if (got != t.bf16_xxh64)
    return Status::Corruption(fmt::format("{}: recovered '{}' (layer {}, expert {}) hashes to {:016x}, manifest {:016x}",
                                          experts_path_, t.name, t.layer_id, t.expert_id, got, t.bf16_xxh64));
  return Status::Ok();
}

}  // namespace zipmoe
