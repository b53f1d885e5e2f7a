// The operations a decompression worker runs (ZipMoE §3.1 Fig. 5 ➏➐, §3.3): decoding one E-chunk
// into its slice of a tensor's exponent plane, and (optionally) the CPU recovery of a whole BF16, F16
// or F32 tensor from its E plane and SM plane (plane layouts per dtype: common/bitfield.h). The GPU recovery kernel is the executor's job; the CPU op is
// here for the no-GPU path, so "recover" can be queued behind the decodes it depends on.
//
// RunDecompressOp is pure apart from writing the op's destination; callable from any thread
// (codec contexts are per thread, common/codec.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/codec.h"
#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe::decompressor {

enum class DecompressOpKind : uint8_t {
  kDecodeEChunk = 0,  // src [stored_bytes] compressed with `codec` -> dst [raw_bytes] uint8 (E-plane slice)
  kRecover = 1,       // src = E plane [EPlaneBytes(dtype, raw_bytes)] uint8,
                      //   sm = SM plane [SmPlaneBytes(dtype, raw_bytes)]
                      //   -> dst [DTypeBytes(dtype, raw_bytes)] bytes = [raw_bytes] values of `dtype`
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
  const uint8_t* sm = nullptr;     // kRecover: SM plane
  uint8_t* dst = nullptr;          // see DecompressOpKind
  uint64_t raw_bytes = 0;          // decoded bytes (kDecodeEChunk) / elements (kRecover)
  std::optional<uint64_t> expected_xxh64;  // kRecover: xxHash64 of the recovered bytes, checked if set
  DType dtype = DType::kBF16;      // kRecover: the tensor's dtype; kDecodeEChunk: the chunk's (EChunkDType: F8_E4M3 and
                                   // MXFP4 pack their fields, U8 for MXFP4's scales)
  // Labels for messages.
  std::string tensor_name;
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  int32_t chunk_index = -1;        // kDecodeEChunk: index into ExpertTensorInfo::chunks
};

// The decode op of E-chunk `chunk_index` of `t`:
//   stored: [chunks[i].stored_bytes] verified chunk bytes (e.g. the storage service's destination)
//   e_plane: [EPlaneBytes(t.dtype, t.numel())] uint8; the op writes e_plane[elem_offset, elem_offset + elem_count).
DecompressOp MakeDecodeEChunkOp(const ExpertTensorInfo& t, int chunk_index, uint64_t op_id, int32_t priority,
                                const uint8_t* stored, uint8_t* e_plane);

// The CPU recovery op of `t` in its dtype: e_plane [EPlaneBytes(t.dtype, t.numel())] uint8, sm_plane
// [SmPlaneBytes(t.dtype, t.numel())] -> out [t.raw_bytes()] bytes (uint16 BF16/F16, uint32 F32),
// checked against t.bf16_xxh64 (the hash of the original bytes in any dtype).
DecompressOp MakeRecoverOp(const ExpertTensorInfo& t, uint64_t op_id, int32_t priority, const uint8_t* e_plane,
                           const uint8_t* sm_plane, void* out);

// Bytes an op reads at src, reads at sm (0 for a decode) and writes at dst (see DecompressOpKind).
uint64_t OpSrcBytes(const DecompressOp& op);
uint64_t OpSmBytes(const DecompressOp& op);
uint64_t OpDstBytes(const DecompressOp& op);

// "E-chunk 2 of 'name' (layer 0, expert 3)" / "recovery of 'name' (layer 0, expert 3)".
std::string DescribeOp(const DecompressOp& op);

// Checks pointers, sizes and (kRecover) that the dtype has an E/SM split. Errors: kInvalidArgument
// naming the op.
Status ValidateOp(const DecompressOp& op);

// Runs `op` on the calling thread. Errors: kCorruption naming tensor and chunk when the codec
// rejects the stream or it decodes to a different size, or when the recovered bytes do not hash to
// expected_xxh64; kInvalidArgument as ValidateOp.
Status RunDecompressOp(const DecompressOp& op);

}  // namespace zipmoe::decompressor
