// Safetensors reading (zero-copy, validated); Hugging Face checkpoint directories (single file,
// sharded + index, or any *.safetensors). Writing is in safetensors_writer.cc. See safetensors.h.
#include "common/checkpoint/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <unordered_set>
#include <utility>

#include "common/checkpoint/safetensors_format.h"

namespace zipmoe {

namespace safetensors_format {

bool CheckedNumel(const std::vector<int64_t>& shape, int elem_bytes, uint64_t* numel,
                  std::string* reason) {
  uint64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      *reason = fmt::format("negative dimension {} at axis {}", shape[i], i);
      return false;
    }
    const uint64_t d = static_cast<uint64_t>(shape[i]);
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / d) {
      *reason = "element count overflows 64 bits";
      return false;
    }
    n *= d;
  }
  // Zero-element shapes never overflow; otherwise bytes = n * elem_bytes must fit too.
  if (n != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(elem_bytes)) {
    *reason = "byte size overflows 64 bits";
    return false;
  }
  *numel = n;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace safetensors_format

namespace {

using safetensors_format::CheckedNumel;
using safetensors_format::kHeaderLengthBytes;
using safetensors_format::kIndexFile;
using safetensors_format::kMetadataKey;
using safetensors_format::kSafetensorsSuffix;
using safetensors_format::kSingleFile;
using safetensors_format::ShapeString;

constexpr char kConfigFile[] = "config.json";

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Parses JSON text, turning nlohmann exceptions into kCorruption naming `path`. If `top_keys` is
// non-null it receives the top-level object's keys in document order, duplicates included
// (nlohmann keeps only the last of duplicate keys, so duplicates are otherwise invisible).
Result<nlohmann::json> ParseJson(const std::string& path, const char* begin, const char* end,
                                 std::vector<std::string>* top_keys) {
  try {
    nlohmann::json::parser_callback_t cb = nullptr;
    if (top_keys != nullptr) {
      cb = [top_keys](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string())
          top_keys->push_back(parsed.get<std::string>());
        return true;
      };
    }
    return nlohmann::json::parse(begin, end, cb);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
}

// Validates and converts one header entry (a tensor) into `spec` and its [begin, end) byte range
// relative to the data section of `data_bytes` bytes.
Status ParseTensorEntry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                        uint64_t data_bytes, TensorSpec* spec, uint64_t* begin, uint64_t* end) {
  auto corrupt = [&](const std::string& what) {
    return Status::Corruption(fmt::format("{}: tensor '{}': {}", path, name, what));
  };
  if (!entry.is_object()) return corrupt(fmt::format("entry is not an object: {}", entry.dump()));
  auto dtype_it = entry.find("dtype");
  auto shape_it = entry.find("shape");
  auto offsets_it = entry.find("data_offsets");
  if (dtype_it == entry.end()) return corrupt("missing 'dtype'");
  if (shape_it == entry.end()) return corrupt("missing 'shape'");
  if (offsets_it == entry.end()) return corrupt("missing 'data_offsets'");
  if (!dtype_it->is_string()) return corrupt(fmt::format("'dtype' is not a string: {}", dtype_it->dump()));

  const std::string dtype_name = dtype_it->get<std::string>();
  Result<DType> dtype = ParseDType(dtype_name);
  if (!dtype.ok() || !IsSafetensorsDType(*dtype)) {  // "MXFP4" names zipmoe's internal dtype only
    return Status::InvalidArgument(
        fmt::format("{}: tensor '{}': unknown dtype '{}'", path, name, dtype_name));
  }

  if (!shape_it->is_array()) return corrupt(fmt::format("'shape' is not an array: {}", shape_it->dump()));
  std::vector<int64_t> shape;
  shape.reserve(shape_it->size());
  for (const auto& dim : *shape_it) {
    if (!dim.is_number_integer())
      return corrupt(fmt::format("'shape' {} holds a non-integer", shape_it->dump()));
    if (dim.is_number_unsigned() &&
        dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return corrupt(fmt::format("'shape' {} holds a dimension beyond int64", shape_it->dump()));
    shape.push_back(dim.get<int64_t>());
  }
  const int elem_bytes = DTypeSize(*dtype);
  uint64_t numel = 0;
  std::string reason;
  if (!CheckedNumel(shape, elem_bytes, &numel, &reason))
    return corrupt(fmt::format("shape {}: {}", ShapeString(shape), reason));

  const nlohmann::json& offsets = *offsets_it;
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return corrupt(fmt::format("'data_offsets' must be [begin, end] of non-negative integers, got {}",
                               offsets.dump()));
  *begin = offsets[0].get<uint64_t>();
  *end = offsets[1].get<uint64_t>();
  if (*begin > *end)
    return corrupt(fmt::format("data_offsets [{}, {}] are reversed", *begin, *end));
  if (*end > data_bytes)
    return corrupt(fmt::format(
        "data_offsets [{}, {}] end beyond the data section of {} bytes (truncated file?)", *begin,
        *end, data_bytes));
  const uint64_t want = numel * static_cast<uint64_t>(elem_bytes);
  if (*end - *begin != want)
    return corrupt(fmt::format("data_offsets [{}, {}] span {} bytes, but {} {} needs {} bytes", *begin,
                               *end, *end - *begin, dtype_name, ShapeString(shape), want));
  spec->name = name;
  spec->dtype = *dtype;
  spec->shape = std::move(shape);
  return Status::Ok();
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFile

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(path));
  const uint64_t file_bytes = mapped.size();
  if (file_bytes < kHeaderLengthBytes)
    return Status::Corruption(fmt::format(
        "{}: file is {} bytes, shorter than the 8-byte header length", path, file_bytes));
  const uint8_t* base = mapped.data();
  const uint64_t header_bytes = LoadLe64(base);
  if (header_bytes > file_bytes - kHeaderLengthBytes)
    return Status::Corruption(fmt::format(
        "{}: header length {} exceeds the {} bytes after the length prefix (truncated file?)", path,
        header_bytes, file_bytes - kHeaderLengthBytes));
  const char* header_begin = reinterpret_cast<const char*>(base + kHeaderLengthBytes);
  const char* header_end = header_begin + header_bytes;
  // The spec pads with spaces, which JSON ignores; tolerate NUL padding from other writers too.
  while (header_end > header_begin && header_end[-1] == '\0') --header_end;

  std::vector<std::string> keys;  // top-level keys in header order, duplicates included
  ZM_ASSIGN_OR_RETURN(nlohmann::json header, ParseJson(path, header_begin, header_end, &keys));
  if (!header.is_object())
    return Status::Corruption(fmt::format("{}: header is not a JSON object but {}", path,
                                          header.type_name()));
  {
    std::unordered_set<std::string> seen;
    for (const auto& key : keys)
      if (!seen.insert(key).second)
        return Status::Corruption(fmt::format("{}: duplicate tensor name '{}' in header", path, key));
  }

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());  // private constructor: no make_unique
  const uint64_t data_start = kHeaderLengthBytes + header_bytes;
  const uint64_t data_bytes = file_bytes - data_start;
  const uint8_t* data = base + data_start;

  struct Entry {
    uint64_t begin, end;
    size_t header_pos;
    TensorView view;
  };
  std::vector<Entry> entries;
  entries.reserve(keys.size());
  for (size_t pos = 0; pos < keys.size(); ++pos) {
    const std::string& name = keys[pos];
    const nlohmann::json& value = header.at(name);
    if (name == kMetadataKey) {
      if (!value.is_object())
        return Status::Corruption(fmt::format("{}: '{}' is not an object", path, kMetadataKey));
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string())
          return Status::Corruption(fmt::format("{}: '{}' value for '{}' is not a string: {}", path,
                                                kMetadataKey, key, item.dump()));
        file->metadata_[key] = item.get<std::string>();
      }
      continue;
    }
    Entry e{0, 0, pos, {}};
    ZM_RETURN_IF_ERROR(ParseTensorEntry(path, name, value, data_bytes, &e.view.spec, &e.begin, &e.end));
    e.view.data = data + e.begin;
    e.view.file = path;
    entries.push_back(std::move(e));
  }

  // File order: ascending data offsets; ties (zero-size tensors) keep header order.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.header_pos < b.header_pos;
  });
  const Entry* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;
    if (prev != nullptr && e.begin < prev->end)
      return Status::Corruption(fmt::format(
          "{}: tensor '{}' data_offsets [{}, {}] overlap tensor '{}' data_offsets [{}, {}]", path,
          e.view.spec.name, e.begin, e.end, prev->view.spec.name, prev->begin, prev->end));
    prev = &e;
  }

  file->tensors_.reserve(entries.size());
  for (Entry& e : entries) {
    file->index_.emplace(e.view.spec.name, file->tensors_.size());
    file->tensors_.push_back(std::move(e.view));
  }
  file->file_ = std::move(mapped);  // moving a MappedFile keeps the mapping (views stay valid)
  return file;
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------------
// Checkpoint

Result<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());  // private constructor: no make_unique
  ckpt->dir_ = dir;

  const std::string config_path = JoinPath(dir, kConfigFile);
  {
    Result<std::string> text = ReadFileToString(config_path);
    if (!text.ok()) {
      if (text.status().code() == StatusCode::kNotFound)
        return Status::NotFound(fmt::format("{}: no such file (not a model directory?)", config_path));
      return text.status();
    }
    ZM_ASSIGN_OR_RETURN(ckpt->config_,
                        ParseJson(config_path, text->data(), text->data() + text->size(), nullptr));
    if (!ckpt->config_.is_object())
      return Status::Corruption(fmt::format("{}: not a JSON object but {}", config_path,
                                            ckpt->config_.type_name()));
  }

  // Tensor -> shard file name, from the index (empty without one).
  std::map<std::string, std::string> weight_map;
  std::vector<std::string> shard_names;  // distinct, sorted
  const std::string index_path = JoinPath(dir, kIndexFile);
  const bool from_index = FileExists(index_path);
  if (from_index) {
    ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index_path));
    ZM_ASSIGN_OR_RETURN(nlohmann::json index,
                        ParseJson(index_path, text.data(), text.data() + text.size(), nullptr));
    auto wm = index.is_object() ? index.find("weight_map") : index.end();
    if (!index.is_object() || wm == index.end() || !wm->is_object())
      return Status::Corruption(fmt::format("{}: expected an object with a 'weight_map' object", index_path));
    std::set<std::string> distinct;
    for (const auto& [name, shard] : wm->items()) {
      // A file of this directory: no path (a downloaded index must not open files elsewhere).
      if (!shard.is_string() || shard.get<std::string>().empty() ||
          shard.get<std::string>().find('/') != std::string::npos || shard.get<std::string>() == "." ||
          shard.get<std::string>() == "..")
        return Status::Corruption(fmt::format("{}: weight_map['{}'] is not a file name in the directory: {}",
                                              index_path, name, shard.dump()));
      weight_map[name] = shard.get<std::string>();
      distinct.insert(shard.get<std::string>());
    }
    shard_names.assign(distinct.begin(), distinct.end());
  } else if (FileExists(JoinPath(dir, kSingleFile))) {
    shard_names.push_back(kSingleFile);
  } else {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (EndsWith(name, kSafetensorsSuffix) && entry.is_regular_file(ec)) shard_names.push_back(name);
    }
    if (ec) return Status::IoError(fmt::format("{}: list: {}", dir, ec.message()));
    std::sort(shard_names.begin(), shard_names.end());
  }
  if (shard_names.empty())
    return Status::NotFound(fmt::format("no safetensors weights in {}", dir));

  for (const std::string& shard_name : shard_names) {
    const std::string shard_path = JoinPath(dir, shard_name);
    Result<std::unique_ptr<SafetensorsFile>> shard = SafetensorsFile::Open(shard_path);
    if (!shard.ok()) {
      if (shard.status().code() == StatusCode::kNotFound && from_index)
        return Status::NotFound(
            fmt::format("{}: shard '{}' named in the index is missing", index_path, shard_path));
      return shard.status();
    }
    ckpt->files_.push_back(std::move(shard).value());
  }

  for (const auto& file : ckpt->files_) {
    for (const TensorView& view : file->tensors()) {
      auto [it, inserted] = ckpt->by_name_.emplace(view.spec.name, &view);
      if (!inserted)
        return Status::Corruption(fmt::format("{}: tensor '{}' appears in both {} and {}", dir,
                                              view.spec.name, it->second->file, view.file));
    }
  }
  for (const auto& [name, shard_name] : weight_map) {
    auto it = ckpt->by_name_.find(name);
    const std::string shard_path = JoinPath(dir, shard_name);
    if (it == ckpt->by_name_.end())
      return Status::Corruption(fmt::format("{}: tensor '{}' is listed for {} but absent from it",
                                            index_path, name, shard_path));
    if (it->second->file != shard_path)
      return Status::Corruption(fmt::format("{}: tensor '{}' is listed for {} but found in {}",
                                            index_path, name, shard_path, it->second->file));
  }

  ckpt->names_.reserve(ckpt->by_name_.size());
  for (const auto& [name, view] : ckpt->by_name_) ckpt->names_.push_back(name);
  std::sort(ckpt->names_.begin(), ckpt->names_.end());
  return ckpt;
}

Result<TensorView> Checkpoint::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end())
    return Status::NotFound(fmt::format("tensor '{}' not found in checkpoint {}", name, dir_));
  return *it->second;
}

}  // namespace zipmoe
