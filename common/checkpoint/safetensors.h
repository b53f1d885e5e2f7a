// Safetensors files and Hugging Face checkpoint directories: zero-copy reading and streaming writing.
//
// Format (https://huggingface.co/docs/safetensors): u64 little-endian header length N, N bytes of
// JSON {"__metadata__": {str: str}?, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}},
// then the data section; offsets are relative to the data section start (8 + N).
// A checkpoint directory holds config.json and either model.safetensors or shards
// model-0000i-of-0000n.safetensors listed in model.safetensors.index.json {"metadata": {...},
// "weight_map": {"<tensor>": "<shard file>"}}.
//
// Thread-safety: SafetensorsFile and Checkpoint are immutable after Open() (CopyToAnonymousMemory
// changes where the bytes live, not their addresses or values, and readers may run meanwhile: one
// thread copies, anonymous() is read only after it is done);
// views may be read from any thread while the owner lives. Views point into read-only memory maps (zero-copy) and do not
// own anything.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/file_util.h"
#include "common/status.h"

namespace zipmoe {

// Name, dtype and shape of one tensor (shape [d0, d1, ...], row-major).
struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;

  int64_t numel() const;
  uint64_t size_bytes() const { return static_cast<uint64_t>(numel()) * DTypeSize(dtype); }
};

// A tensor inside a mapped file. `data` points at size_bytes() bytes; `file` is the path it came from.
struct TensorView {
  TensorSpec spec;
  const uint8_t* data = nullptr;
  std::string file;

  uint64_t size_bytes() const { return spec.size_bytes(); }
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the header. Errors (each names `path` and, where known, the tensor):
  //   kNotFound (missing file); kCorruption (file shorter than 8 bytes, header length beyond the file,
  //   header not valid JSON, duplicate tensor name, entry not an object or missing dtype / shape /
  //   data_offsets, data_offsets out of range (truncated file) / reversed / overlapping,
  //   data_offsets size != numel * dtype size, negative shape, __metadata__ not a str->str map);
  //   kInvalidArgument (unknown dtype, or "MXFP4", which names zipmoe's internal dtype only). Gaps between
  //   tensors and bytes after the last one are allowed; zero-size tensors (a 0 dim, begin == end) are allowed anywhere.
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors in file order: ascending data_offsets, ties (zero-size tensors) in header order. Files
  // from the reference writer list the header in this same order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Maps every page of the file now (MappedFile::Populate). Errors: kIoError naming the path.
  Status Populate() const { return file_.Populate(); }
  // Copies the file into private anonymous memory at the same addresses, so every TensorView stays
  // valid (MappedFile::CopyToAnonymousMemory: when, why, errors).
  Status CopyToAnonymousMemory(const std::atomic<bool>* cancel = nullptr) { return file_.CopyToAnonymousMemory(cancel); }
  bool anonymous() const { return file_.anonymous(); }
  uint64_t size_bytes() const { return file_.size(); }

 private:
  SafetensorsFile() = default;
  MappedFile file_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory (single-file or sharded + index), as downloaded.
class Checkpoint {
 public:
  // Reads DIR/config.json (must be a JSON object) and the weights: the shards listed in
  // model.safetensors.index.json if present (tensors a shard holds beyond the index are included),
  // else model.safetensors, else every *.safetensors in DIR (e.g. consolidated.safetensors).
  // Symlinks (the Hugging Face cache layout) are followed. Errors: kNotFound (no config.json,
  // no weights, a shard named in the index is missing); kCorruption (bad index JSON, a shard name that
  // is a path rather than a file name of DIR, a tensor the index names is absent from its shard, the
  // same tensor in two shards); plus SafetensorsFile errors.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // All tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  // Errors: kNotFound naming the tensor and the directory.
  Result<TensorView> Find(const std::string& name) const;
  // Weight files in the order they were opened (sorted by file name).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  Checkpoint() = default;
  std::string dir_;
  nlohmann::json config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> by_name_;
  std::vector<std::string> names_;
};

// Produces the bytes of one tensor into `out` (exactly spec.size_bytes() bytes).
using TensorFiller = std::function<Status(const TensorSpec& spec, uint8_t* out)>;

// Writes one safetensors file atomically, streaming: header first, then each tensor's bytes from
// `fill` in `specs` order (tensors are 8-byte aligned in the data section by header padding only).
// Memory: one buffer the size of the largest tensor. `__metadata__` is omitted when `metadata` is empty.
// Errors: kInvalidArgument (duplicate, empty or "__metadata__" name, negative dim, size overflow, the
// internal kMXFP4 dtype), kIoError, or whatever `fill` returns (same code, message prefixed with path and tensor).
Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                        const TensorFiller& fill,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes the weights of a checkpoint directory: model.safetensors if the total is <= shard_size_bytes,
// otherwise model-00001-of-0000N.safetensors ... plus model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {...}}), greedily packing `specs` in order.
// Creates `dir` if needed. Each file is written atomically; afterwards stale weight files that would
// confuse Checkpoint::Open are removed (an old index and shards when writing model.safetensors; an old
// model.safetensors and unlisted model-*-of-*.safetensors when writing shards). Errors as WriteSafetensors.
Status WriteCheckpointWeights(const std::string& dir, const std::vector<TensorSpec>& specs,
                              uint64_t shard_size_bytes, const TensorFiller& fill);

}  // namespace zipmoe
