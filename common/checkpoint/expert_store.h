// Read access to a compressed zipmoe model directory: manifest.bin + experts.bin (ZipMoE §3.1).
//
// ExpertStore owns the manifest and a descriptor of experts.bin. All read methods use pread and are
// safe to call concurrently from any number of threads. Every chunk read is checked against its
// xxHash64; a mismatch is a kCorruption whose message names experts.bin, the offset, the tensor,
// its layer/expert and the chunk, and the bytes are never handed out as valid.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe {

// Which expert dtypes ExpertStore::Open accepts.
enum class ExpertDTypes : uint8_t {
  kServedOnly = 0,  // BF16, F16 or F32, one dtype for every expert tensor: what the runtime, executor
                    // and storage serve (the default; pool slot sizes are per model, ModelLayout)
  kAny = 1,         // BF16, F16 and F32, mixed too (compress/verify/inspect keep each bit-exact)
};

class ExpertStore {
 public:
  // Opens DIR/manifest.bin (see ReadManifest for errors) and DIR/experts.bin. Errors: kNotFound
  // (missing experts.bin), kCorruption (experts.bin size differs from the manifest's record),
  // kInvalidArgument with kServedOnly when the expert
  // tensors mix dtypes (naming the first tensor that differs from the first one, and both dtypes).
  static Result<std::unique_ptr<ExpertStore>> Open(const std::string& dir,
                                                   ExpertDTypes dtypes = ExpertDTypes::kServedOnly);

  const std::string& dir() const { return dir_; }
  const std::string& experts_path() const { return experts_path_; }
  const Manifest& manifest() const { return manifest_; }
  // The dtype of the first expert tensor (with kServedOnly: of every one); BF16 when there are none.
  DType expert_dtype() const { return expert_dtype_; }

  // The tensor for (layer, expert, proj), or nullptr.
  const ExpertTensorInfo* Find(int32_t layer_id, int32_t expert_id, ExpertProj proj) const;

  // Reads chunk `chunk_index` of `t` (its stored bytes) into out[0, stored_bytes) and checks the hash.
  // Errors: kIoError (read failed / short), kCorruption (hash mismatch).
  Status ReadChunk(const ExpertTensorInfo& t, int chunk_index, uint8_t* out) const;

  // Decodes a verified E-chunk's stored bytes into its slice of the exponent plane:
  //   stored: [stored_bytes] -> e_plane + elem_offset: [elem_count] uint8.
  // Errors: kCorruption naming the tensor and chunk if the codec rejects the stream.
  static Status DecodeEChunk(const ExpertTensorInfo& t, int chunk_index, const uint8_t* stored, uint8_t* e_plane);

  // Reads and decodes a whole tensor: out: [numel] uint16 BF16 bit patterns. Checks every chunk hash
  // and the hash of the recovered BF16 bytes (kCorruption naming the tensor if they differ).
  // kInvalidArgument if t.dtype is not BF16 (use ReadTensor).
  Status ReadTensorBf16(const ExpertTensorInfo& t, uint16_t* out) const;

  // ReadTensorBf16 for any split dtype: out: [t.raw_bytes()] bytes, the original tensor in t.dtype
  // (BF16/F16 as uint16, F32 as uint32, little-endian; F8_E4M3 bytes; MXFP4 as its blocks then its
  // scales, common/dtype.h; any alignment), recovered by MergeBf16/MergeF16/MergeF32/MergeF8E4M3/
  // MergeMxfp4. Same checks and errors as ReadTensorBf16 (chunk sizes per dtype were checked against the
  // record by ReadManifest).
  Status ReadTensor(const ExpertTensorInfo& t, uint8_t* out) const;

 private:
  ExpertStore() = default;
  std::string dir_;
  std::string experts_path_;
  Manifest manifest_;
  DType expert_dtype_ = DType::kBF16;
  UniqueFd fd_;
  std::map<std::tuple<int32_t, int32_t, int>, size_t> index_;
};

}  // namespace zipmoe
