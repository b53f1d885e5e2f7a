#include "services/decompressor/decompress_op.h"

#include <fmt/format.h>

#include "common/bitfield.h"
#include "common/hash.h"
#include "kernels/recovery.h"

namespace zipmoe::decompressor {

DecompressOp MakeDecodeEChunkOp(const ExpertTensorInfo& t, int chunk_index, uint64_t op_id, int32_t priority,
                                const uint8_t* stored, uint8_t* e_plane) {
  const ChunkInfo& c = t.chunks.at(static_cast<size_t>(chunk_index));
  DecompressOp op;
  op.op_id = op_id;
  op.priority = priority;
  op.kind = DecompressOpKind::kDecodeEChunk;
  op.codec = t.codec;
  op.dtype = EChunkDType(t, c);  // F8_E4M3 / MXFP4 E-chunks hold packed fields (common/codec.h DecompressEChunk)
  op.src = stored;
  op.stored_bytes = c.stored_bytes;
  op.dst = e_plane == nullptr ? nullptr : e_plane + c.elem_offset;
  op.raw_bytes = c.raw_bytes;
  op.tensor_name = t.name;
  op.layer_id = t.layer_id;
  op.expert_id = t.expert_id;
  op.chunk_index = chunk_index;
  return op;
}

DecompressOp MakeRecoverOp(const ExpertTensorInfo& t, uint64_t op_id, int32_t priority, const uint8_t* e_plane,
                           const uint8_t* sm_plane, void* out) {
  DecompressOp op;
  op.op_id = op_id;
  op.priority = priority;
  op.kind = DecompressOpKind::kRecover;
  op.codec = Codec::kNone;
  op.src = e_plane;
  op.sm = sm_plane;
  op.dst = static_cast<uint8_t*>(out);
  op.raw_bytes = static_cast<uint64_t>(t.numel());
  op.expected_xxh64 = t.bf16_xxh64;
  op.dtype = t.dtype;
  op.tensor_name = t.name;
  op.layer_id = t.layer_id;
  op.expert_id = t.expert_id;
  return op;
}

uint64_t OpSrcBytes(const DecompressOp& op) {
  return op.kind == DecompressOpKind::kRecover ? EPlaneBytes(op.dtype, static_cast<int64_t>(op.raw_bytes))
                                               : op.stored_bytes;
}

uint64_t OpSmBytes(const DecompressOp& op) {
  return op.kind == DecompressOpKind::kRecover ? SmPlaneBytes(op.dtype, static_cast<int64_t>(op.raw_bytes)) : 0;
}

uint64_t OpDstBytes(const DecompressOp& op) {
  return op.kind == DecompressOpKind::kRecover ? DTypeBytes(op.dtype, op.raw_bytes) : op.raw_bytes;
}

std::string DescribeOp(const DecompressOp& op) {
  if (op.kind == DecompressOpKind::kRecover)
    return fmt::format("recovery of '{}' (layer {}, expert {})", op.tensor_name, op.layer_id, op.expert_id);
  return fmt::format("E-chunk {} of '{}' (layer {}, expert {})", op.chunk_index, op.tensor_name, op.layer_id,
                     op.expert_id);
}

Status ValidateOp(const DecompressOp& op) {
  const auto bad = [&](const char* what) {
    return Status::InvalidArgument(fmt::format("decompress op {} ({}): {}", op.op_id, DescribeOp(op), what));
  };
  switch (op.kind) {
    case DecompressOpKind::kDecodeEChunk:
      if (op.src == nullptr && op.stored_bytes > 0) return bad("null source");
      if (op.dst == nullptr && op.raw_bytes > 0) return bad("null destination");
      if (op.codec != Codec::kNone && op.codec != Codec::kZstd && op.codec != Codec::kLz4) return bad("unknown codec");
      return Status::Ok();
    case DecompressOpKind::kRecover:
      if (!HasExponentSplit(op.dtype)) return bad("dtype without an E/SM split");
      if (op.raw_bytes > 0 && (op.src == nullptr || op.sm == nullptr || op.dst == nullptr))
        return bad("null E plane, SM plane or output");
      return Status::Ok();
  }
  return bad("unknown op kind");
}

Status RunDecompressOp(const DecompressOp& op) {
  ZM_RETURN_IF_ERROR(ValidateOp(op));
  if (op.kind == DecompressOpKind::kDecodeEChunk) {
    Status st = DecompressEChunk(op.dtype, op.codec, op.src, op.stored_bytes, op.dst, op.raw_bytes);
    if (!st.ok()) return Status::Corruption(fmt::format("{}: {}", DescribeOp(op), st.message()));
    return Status::Ok();
  }
  ZM_RETURN_IF_ERROR(kernels::RecoverCpu(op.dtype, op.src, op.sm, op.dst, static_cast<int64_t>(op.raw_bytes)));
  if (op.expected_xxh64.has_value()) {
    const uint64_t got = Xxh64(op.dst, OpDstBytes(op));
    if (got != *op.expected_xxh64)
      return Status::Corruption(fmt::format("{}: {} xxh64 {:016x}, manifest {:016x}", DescribeOp(op),
                                            DTypeName(op.dtype), got, *op.expected_xxh64));
  }
  return Status::Ok();
}

}  // namespace zipmoe::decompressor
