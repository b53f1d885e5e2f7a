// The operations a decompression worker runs (ZipMoE §3.1 Fig. 5 ➏➐, §3.3): decoding one E-chunk
// into its slice of a tensor's exponent plane, and (optionally) the CPU recovery of a whole BF16
// tensor from its E plane and SM plane. The GPU recovery kernel is the executor's job; the CPU op is
// here for the no-GPU path, so "recover" can be queued behind the decodes it depends on.
//
// RunDecompressOp is pure apart from writing the op's destination; callable from any thread
// (codec contexts are per thread, common/codec.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/codec.h"
#include "common/manifest.h"
#include "common/status.h"

namespace zipmoe::decompressor {

enum class DecompressOpKind : uint8_t {
  kDecodeEChunk = 0,  // src [stored_bytes] compressed with `codec` -> dst [raw_bytes] uint8 (E-plane slice)
  kRecoverBf16 = 1,   // src = E plane [raw_bytes] uint8, sm = SM plane [raw_bytes] uint8
                      //   -> dst [2 * raw_bytes] bytes = [raw_bytes] uint16 BF16 bit patterns
};

// One unit of worker work. Pointers are not owned and must stay valid until the op completes.
struct DecompressOp {
  uint64_t op_id = 0;   // unique among the ops not yet completed
  // Lower value = more urgent: an idle worker takes the READY op with the smallest priority; ties run
  // in Add() order. A scheduler passes the op's position in its Alg. 1 block order (ZipMoE §3.3).
  int32_t priority = 0;
  DecompressOpKind kind = DecompressOpKind::kDecodeEChunk;
  Codec codec = Codec::kZstd;      // kDecodeEChunk
  const uint8_t* src = nullptr;    // see DecompressOpKind
  uint64_t stored_bytes = 0;       // kDecodeEChunk: compressed bytes at src
  const uint8_t* sm = nullptr;     // kRecoverBf16: SM plane
  uint8_t* dst = nullptr;          // see DecompressOpKind
  uint64_t raw_bytes = 0;          // decoded bytes (kDecodeEChunk) / elements (kRecoverBf16)
  std::optional<uint64_t> expected_xxh64;  // kRecoverBf16: xxHash64 of the BF16 output, checked if set
  // Labels for messages.
  std::string tensor_name;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  int32_t chunk_index = -1;        // kDecodeEChunk: index into ExpertTensorInfo::chunks
};

// The decode op of E-chunk `chunk_index` of `t`:
//   stored: [chunks[i].stored_bytes] verified chunk bytes (e.g. the storage service's destination)
//   e_plane: [t.numel()] uint8; the op writes e_plane[elem_offset, elem_offset + elem_count).
DecompressOp MakeDecodeEChunkOp(const ExpertTensorInfo& t, int chunk_index, uint64_t op_id, int32_t priority,
                                const uint8_t* stored, uint8_t* e_plane);

// The CPU recovery op of `t`: e_plane, sm_plane: [t.numel()] uint8 -> out: [t.numel()] uint16 BF16,
// checked against t.bf16_xxh64.
DecompressOp MakeRecoverBf16Op(const ExpertTensorInfo& t, uint64_t op_id, int32_t priority, const uint8_t* e_plane,
                               const uint8_t* sm_plane, uint16_t* out);

// "E-chunk 2 of 'name' (layer 0, expert 3)" / "recovery of 'name' (layer 0, expert 3)".
std::string DescribeOp(const DecompressOp& op);

// Checks pointers and sizes. Errors: kInvalidArgument naming the op.
Status ValidateOp(const DecompressOp& op);

// Runs `op` on the calling thread. Errors: kCorruption naming tensor and chunk when the codec
// rejects the stream or it decodes to a different size, or when recovered BF16 bytes do not hash to
// expected_xxh64; kInvalidArgument as ValidateOp.
Status RunDecompressOp(const DecompressOp& op);

}  // namespace zipmoe::decompressor
