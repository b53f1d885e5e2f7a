// Safetensors files and Hugging Face checkpoint directories: zero-copy reading and streaming writing.
//
// Format (https://huggingface.co/docs/safetensors): u64 little-endian header length N, N bytes of
// JSON {"__metadata__": {str: str}?, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}},
// then the data section; offsets are relative to the data section start (8 + N).
// A checkpoint directory holds config.json and either model.safetensors or shards
// model-0000i-of-0000n.safetensors listed in model.safetensors.index.json {"metadata": {...},
// "weight_map": {"<tensor>": "<shard file>"}}.
//
// Thread-safety: SafetensorsFile and Checkpoint are immutable after Open(); views may be read from
// any thread while the owner lives. Views point into read-only memory maps (zero-copy) and do not
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
  //   header not valid JSON, entry not an object, data_offsets out of range / reversed / overlapping,
  //   data_offsets size != numel * dtype size, negative shape); kInvalidArgument (unknown dtype).
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors in header order. Never empty unless the file holds no tensors.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr if absent.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

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
  // Reads DIR/config.json (must be a JSON object) and the weights. Errors: kNotFound (no config.json,
  // no weights, a shard named in the index is missing); kCorruption (bad index JSON, a tensor the
  // index names is absent from its shard, the same tensor in two shards); plus SafetensorsFile errors.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  // All tensor names, sorted.
  const std::vector<std::string>& names() const { return names_; }
  // Errors: kNotFound naming the tensor and the directory.
  Result<TensorView> Find(const std::string& name) const;
  // Shard files in the order they were opened.
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
// Errors: kInvalidArgument (duplicate or empty name), kIoError, or whatever `fill` returns.
Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& specs,
                        const TensorFiller& fill,
                        const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes the weights of a checkpoint directory: model.safetensors if the total is <= shard_size_bytes,
// otherwise model-00001-of-0000N.safetensors ... plus model.safetensors.index.json
// ({"metadata": {"total_size": bytes}, "weight_map": {...}}), greedily packing `specs` in order.
// Each file is written atomically. Errors as WriteSafetensors.
Status WriteCheckpointWeights(const std::string& dir, const std::vector<TensorSpec>& specs,
                              uint64_t shard_size_bytes, const TensorFiller& fill);

}  // namespace zipmoe
