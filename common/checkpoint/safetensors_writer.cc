// Safetensors writing (streaming, atomic: a failure leaves no file) and Hugging Face checkpoint
// directories (one file or shards + index, stale shards removed). See safetensors.h.
#include "common/checkpoint/safetensors.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/checkpoint/safetensors_format.h"

namespace zipmoe {
namespace {

using safetensors_format::CheckedNumel;
using safetensors_format::kHeaderLengthBytes;
using safetensors_format::kIndexFile;
using safetensors_format::kMetadataKey;
using safetensors_format::kSafetensorsSuffix;
using safetensors_format::kSingleFile;
using safetensors_format::ShapeString;

constexpr uint64_t kDataAlignmentBytes = 8;    // data section starts 8-byte aligned (header padding)

void StoreLe64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Checks names and shapes of tensors to be written. Errors: kInvalidArgument naming `path`.
Status ValidateSpecs(const std::string& path, const std::vector<TensorSpec>& specs) {
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    if (spec.name.empty())
      return Status::InvalidArgument(fmt::format("{}: tensor #{} has an empty name", path, i));
    if (spec.name == kMetadataKey)
      return Status::InvalidArgument(
          fmt::format("{}: tensor name '{}' is reserved", path, kMetadataKey));
    if (!seen.insert(spec.name).second)
      return Status::InvalidArgument(fmt::format("{}: duplicate tensor name '{}'", path, spec.name));
    if (!IsSafetensorsDType(spec.dtype))
      return Status::InvalidArgument(fmt::format("{}: tensor '{}': dtype {} is not a safetensors dtype", path,
                                                 spec.name, DTypeName(spec.dtype)));
    uint64_t numel = 0;
    std::string reason;
    if (!CheckedNumel(spec.shape, DTypeSize(spec.dtype), &numel, &reason))
      return Status::InvalidArgument(fmt::format("{}: tensor '{}': shape {}: {}", path, spec.name,
                                                 ShapeString(spec.shape), reason));
  }
  return Status::Ok();
}

// Removes `path` if it exists. Errors: kIoError.
Status RemoveIfExists(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) return Status::IoError(fmt::format("{}: remove: {}", path, ec.message()));
  return Status::Ok();
}

// True for "model-NNNNN-of-NNNNN.safetensors" (the Hugging Face shard naming).
bool IsShardFileName(const std::string& name) {
  static constexpr char kPattern[] = "model-#####-of-#####.safetensors";
  if (name.size() != sizeof(kPattern) - 1) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (kPattern[i] == '#') {
      if (name[i] < '0' || name[i] > '9') return false;
    } else if (name[i] != kPattern[i]) {
      return false;
    }
  }
  return true;
}

// Removes shard files in `dir` that are not in `keep`. Errors: kIoError.
Status RemoveStaleShards(const std::string& dir, const std::set<std::string>& keep) {
  std::error_code ec;
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsShardFileName(name) && keep.count(name) == 0) stale.push_back(JoinPath(dir, name));
  }
  if (ec) return Status::IoError(fmt::format("{}: list: {}", dir, ec.message()));
  for (const auto& path : stale) ZM_RETURN_IF_ERROR(RemoveIfExists(path));
  return Status::Ok();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Writing

Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                        const TensorFiller& fill, const std::map<std::string, std::string>& metadata) {
  ZM_RETURN_IF_ERROR(ValidateSpecs(path, specs));
  if (!fill && !specs.empty()) return Status::InvalidArgument(fmt::format("{}: no TensorFiller", path));

  // Header in spec order (ordered_json keeps insertion order), __metadata__ first, offsets contiguous.
  std::string header;
  try {
    nlohmann::ordered_json json = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
      nlohmann::ordered_json meta = nlohmann::ordered_json::object();
      for (const auto& [key, value] : metadata) meta[key] = value;
      json[kMetadataKey] = std::move(meta);
    }
    uint64_t offset = 0;
    for (const TensorSpec& spec : specs) {
      const uint64_t end = offset + spec.size_bytes();
      json[spec.name] = {{"dtype", DTypeName(spec.dtype)},
                         {"shape", spec.shape},
                         {"data_offsets", {offset, end}}};
      offset = end;
    }
    header = json.dump();
  } catch (const nlohmann::json::exception& e) {
    // e.g. a name or metadata string that is not valid UTF-8
    return Status::InvalidArgument(fmt::format("{}: cannot encode header: {}", path, e.what()));
  }
  // Pad with spaces so the data section (at 8 + N) is 8-byte aligned, as the reference writer does.
  header.append((kDataAlignmentBytes - header.size() % kDataAlignmentBytes) % kDataAlignmentBytes, ' ');

  ZM_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path));
  uint8_t length_prefix[kHeaderLengthBytes];
  StoreLe64(header.size(), length_prefix);
  ZM_RETURN_IF_ERROR(out.Write(length_prefix, sizeof length_prefix));
  ZM_RETURN_IF_ERROR(out.Write(header.data(), header.size()));

  std::vector<uint8_t> buffer;  // holds one tensor at a time; capacity = largest tensor so far
  for (const TensorSpec& spec : specs) {
    const uint64_t size_bytes = spec.size_bytes();
    buffer.assign(size_bytes, 0);
    Status st = fill(spec, buffer.data());
    if (!st.ok()) return st.WithContext(fmt::format("{}: filling tensor '{}'", path, spec.name));
    ZM_RETURN_IF_ERROR(out.Write(buffer.data(), size_bytes));
  }
  return out.Commit();
}

Status WriteCheckpointWeights(const std::string& dir, const std::vector<TensorSpec>& specs,
                              uint64_t shard_size_bytes, const TensorFiller& fill) {
  ZM_RETURN_IF_ERROR(ValidateSpecs(dir, specs));
  ZM_RETURN_IF_ERROR(CreateDirectories(dir));
  uint64_t total_bytes = 0;
  for (const TensorSpec& spec : specs) total_bytes += spec.size_bytes();

  const std::string index_path = JoinPath(dir, kIndexFile);
  if (total_bytes <= shard_size_bytes) {
    ZM_RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, kSingleFile), specs, fill));
    // model.safetensors wins over stray shards only when no index points at them.
    ZM_RETURN_IF_ERROR(RemoveIfExists(index_path));
    return RemoveStaleShards(dir, {});
  }

  // Greedy packing in spec order; a tensor is never split, an oversize one gets its own shard.
  std::vector<std::vector<TensorSpec>> shards;
  uint64_t current_bytes = 0;
  for (const TensorSpec& spec : specs) {
    if (shards.empty() || (!shards.back().empty() && current_bytes + spec.size_bytes() > shard_size_bytes)) {
      shards.emplace_back();
      current_bytes = 0;
    }
    shards.back().push_back(spec);
    current_bytes += spec.size_bytes();
  }

  nlohmann::json weight_map = nlohmann::json::object();
  std::set<std::string> written;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name =
        fmt::format("model-{:05d}-of-{:05d}{}", i + 1, shards.size(), kSafetensorsSuffix);
    ZM_RETURN_IF_ERROR(WriteSafetensors(JoinPath(dir, name), shards[i], fill));
    for (const TensorSpec& spec : shards[i]) weight_map[spec.name] = name;
    written.insert(name);
  }
  nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  ZM_RETURN_IF_ERROR(WriteFileAtomic(index_path, index.dump(2) + "\n"));
  ZM_RETURN_IF_ERROR(RemoveIfExists(JoinPath(dir, kSingleFile)));
  return RemoveStaleShards(dir, written);
}

}  // namespace zipmoe
