// The manifest of a compressed zipmoe model directory (ZipMoE §3.1 Fig. 5 ➋; docs/format.md).
//
// manifest.bin = 32-byte header + FlatBuffers body (schema: schemas/manifest.fbs, root `Manifest`):
//   [0, 8)   magic "ZMOEMANI"
//   [8, 12)  u32 LE header version (kManifestHeaderVersion)
//   [12, 16) u32 LE reserved (0)
//   [16, 24) u64 LE body size in bytes
//   [24, 32) u64 LE xxHash64 of the body
// Each expert tensor record also carries `record_xxh64`, a hash of its own fields, so a corrupt byte
// is traced back to the tensor whose record it hit.
//
// These are plain value types, independent of the FlatBuffers generated code; thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/codec.h"
#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe {

inline constexpr uint32_t kManifestHeaderVersion = 1;
inline constexpr uint32_t kManifestBodyVersion = 1;
inline constexpr uint64_t kChunkAlignmentBytes = 4096;  // O_DIRECT-friendly chunk placement
inline constexpr const char* kManifestFileName = "manifest.bin";
inline constexpr const char* kExpertsFileName = "experts.bin";
inline constexpr const char* kDenseFileName = "dense.safetensors";
// The prefetch predictor's residual vectors (`zipmoe profile`, services/executor/prefetch_residuals.h),
// optional in a model directory (HF or compressed).
inline constexpr const char* kPrefetchResidualsFileName = "prefetch_residuals.safetensors";

enum class ChunkKind : uint8_t { kE = 0, kSm = 1 };

// One E-chunk (a compressed exponent shard) or SM-chunk (the raw sign|mantissa plane).
struct ChunkInfo {
  ChunkKind kind = ChunkKind::kE;
  uint64_t elem_offset = 0;   // first element covered (E-chunk: first byte of the E plane, whose bytes are
                              // the values' exponent fields, then MXFP4's scales: EPlaneBytes)
  uint64_t elem_count = 0;    // elements covered (E-chunk: E-plane bytes, = raw_bytes; SM-chunk: the
                              // tensor's values, raw_bytes = SmPlaneBytes(dtype, elem_count), common/bitfield.h)
  uint64_t file_offset = 0;   // in experts.bin, multiple of kChunkAlignmentBytes
  uint64_t stored_bytes = 0;  // bytes in experts.bin
  uint64_t raw_bytes = 0;     // bytes after decoding
  uint64_t xxh64 = 0;         // of the stored bytes
};

// Routed-expert projection, in the order the converter lays them out.
enum class ExpertProj : uint8_t { kGate = 0, kUp = 1, kDown = 2 };
const char* ExpertProjName(ExpertProj proj);  // "gate_proj", "up_proj", "down_proj"

struct ExpertTensorInfo {
  std::string name;  // as in the checkpoint
  int32_t layer_id = 0;
  int32_t expert_id = 0;
  ExpertProj proj = ExpertProj::kGate;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;       // BF16, F16, F32, F8_E4M3 or MXFP4; the E/SM planes per dtype:
                                    // common/bitfield.h (MXFP4's raw layout: common/dtype.h)
  Codec codec = Codec::kZstd;
  int32_t level = 0;
  int32_t n_shards = 1;             // K
  std::vector<ChunkInfo> chunks;    // K E-chunks in E-plane order (EChunkRanges), then the SM-chunk
  uint64_t bf16_xxh64 = 0;          // of the original tensor bytes, any dtype (named when all were BF16)
  uint64_t record_xxh64 = 0;        // RecordHash(*this), set by the converter

  int64_t numel() const;  // -1 for a negative dimension or a count beyond int64
  uint64_t raw_bytes() const;       // DTypeBytes(dtype, numel): the original tensor's bytes
  uint64_t stored_bytes() const;    // sum of chunk stored_bytes (no alignment padding)
  uint64_t e_stored_bytes() const;  // E-chunks only
};

struct DenseTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kBF16;
  uint64_t xxh64 = 0;  // XXH64 of the tensor's bytes in dense.safetensors, verified at load; 0 = not
                       // recorded (a directory compressed before dense checksums existed)
};

// Exponent histogram of the expert tensors of one dtype.
struct DTypeHistogram {
  DType dtype = DType::kBF16;
  std::array<uint64_t, 256> counts{};
};

struct Manifest {
  uint32_t version = kManifestBodyVersion;
  std::string arch;          // config.json model_type
  std::string config_json;   // config.json verbatim
  Codec codec = Codec::kZstd;
  int32_t level = 0;
  int32_t n_shards = 1;
  uint32_t alignment = kChunkAlignmentBytes;
  std::string experts_file = kExpertsFileName;
  uint64_t experts_file_bytes = 0;
  std::string dense_file = kDenseFileName;
  std::vector<ExpertTensorInfo> expert_tensors;  // sorted by (layer_id, expert_id, proj)
  std::vector<DenseTensorInfo> dense_tensors;
  int32_t n_layers = 0;   // decoder layers (config num_hidden_layers)
  int32_t n_experts = 0;  // routed experts per MoE layer
  std::array<uint64_t, 256> exponent_histogram{};  // over all expert exponent bytes
  // One per expert dtype present, in DType order. Parsed from a manifest without the field (every
  // expert BF16), it holds {BF16, exponent_histogram}; serialised only if some dtype is not BF16.
  std::vector<DTypeHistogram> exponent_histograms;
  // Of the MXFP4 expert tensors' block scales (E8M0 bytes, in the E-chunk of each that holds them; the
  // exponent histograms above count their 2-bit fields only). All zero when no expert is MXFP4.
  std::array<uint64_t, 256> mxfp4_scale_histogram{};
  std::vector<std::string> source_files;           // extra files copied verbatim

  // Σ raw_bytes() over expert_tensors: every expert resident in its own dtype, what a budget in % is of.
  uint64_t expert_raw_bytes() const;
};

// The dtype whose packing E-chunk `c` of `t` uses (common/codec.h CompressEChunk / DecompressEChunk): t.dtype,
// except kU8 (bytes, unpacked) for the E-chunk of an MXFP4 tensor that holds its block scales (E-plane bytes
// [numel, numel + numel/32), common/bitfield.h EChunkRanges).
DType EChunkDType(const ExpertTensorInfo& t, const ChunkInfo& c);

// Hash of every field of `t` except record_xxh64 itself (xxHash64 over a canonical encoding).
uint64_t RecordHash(const ExpertTensorInfo& t);

// Serialises header + body. Pure.
std::string SerializeManifest(const Manifest& manifest);

// Parses and validates bytes read from `path` (used in messages). Errors (kCorruption unless noted):
// short file, bad magic, unsupported header version (kInvalidArgument), body size mismatch, body
// checksum mismatch (names the first expert tensor whose record hash no longer matches, or says the
// damage is outside expert records), FlatBuffers verification failure, unknown enum values,
// chunk fields inconsistent (offset not aligned, E-chunks not covering [0, EPlaneBytes(dtype, numel)), SM-chunk
// size not SmPlaneBytes(dtype, numel), an MXFP4 tensor whose last E-chunk is not its scales), an expert dtype
// other than BF16/F16/F32/F8_E4M3/MXFP4, an MXFP4 tensor whose element count is not a multiple of 32 — each
// naming the tensor; kInvalidArgument for an MXFP4 tensor in the earlier layout (scales in the SM-chunk),
// saying to compress the checkpoint again.
Result<Manifest> ParseManifest(const std::string& path, const std::string& bytes);

class SafetensorsFile;

// Checks dense.safetensors against the manifest's dense records: every tensor present with its
// shape and dtype, and its bytes' XXH64 equal to the recorded one (records with xxh64 0, from
// directories compressed before dense checksums, are checked for shape/dtype only). Reads every
// byte once (XXH64, ~10 GB/s). Errors: kCorruption naming `dense.path()` and the first tensor that is
// missing, reshaped or whose bytes changed.
Status VerifyDenseTensors(const Manifest& manifest, const SafetensorsFile& dense);

// Reads DIR/manifest.bin and parses it. Errors: kNotFound naming the file, plus ParseManifest's.
Result<Manifest> ReadManifest(const std::string& dir);

}  // namespace zipmoe
