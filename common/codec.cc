// zstd / lz4 / none chunk codecs (ZipMoE §2.2, §3.1). See common/codec.h for the level mapping and
// docs/benchmarks.md ("Foundation: codecs and I/O") for the measurements behind the zstd profile.
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_c_literalCompressionMode (experimental, set via setParameter)
#include "common/codec.h"

#include <fmt/format.h>
#include <lz4.h>
#include <lz4hc.h>
#include <zstd.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zipmoe {
namespace {

// Exponent-plane profile (zipmoe zstd level 1). Exponent bytes of BF16 weights are an i.i.d.-like
// source over ~20 symbols (H ~2.55 bits): there are no real repeats, and every match zstd finds is
// a spurious 4-7 byte coincidence that costs more than its literals. So: the cheapest match finder
// (fast), a 64-entry hash table, 7-byte minimum matches, and the largest acceleration (targetLength
// is the fast strategy's step) so that almost no match is even tried, with Huffman literals forced
// on (acceleration > 0 otherwise turns them off). Blocks stay at 128 KiB (window 128 KiB), one
// Huffman table per block. Measured 2.60 bits/value vs Huffman's 2.59 and H = 2.55.
constexpr int kExponentWindowLog = 17;         // block size = min(128 KiB, window)
constexpr int kExponentHashLog = 6;            // ZSTD_HASHLOG_MIN: few, recent match candidates
constexpr int kExponentMinMatch = 7;           // the fast strategy's maximum
constexpr int kExponentTargetLength = 131072;  // ZSTD_TARGETLENGTH_MAX: fast-strategy step
constexpr int kZstdExponentLevel = 1;
constexpr int kLz4DefaultHcLevel = 9;  // LZ4HC_CLEVEL_DEFAULT

struct ZstdCCtxDeleter {
  void operator()(ZSTD_CCtx* ctx) const { ZSTD_freeCCtx(ctx); }
};
struct ZstdDCtxDeleter {
  void operator()(ZSTD_DCtx* ctx) const { ZSTD_freeDCtx(ctx); }
};

// Per-thread contexts, created on first use and freed at thread exit. Reusing them avoids a
// ~100 KiB-1 MiB allocation and table initialisation per chunk.
ZSTD_CCtx* ThreadZstdCCtx() {
  thread_local std::unique_ptr<ZSTD_CCtx, ZstdCCtxDeleter> ctx(ZSTD_createCCtx());
  return ctx.get();
}
ZSTD_DCtx* ThreadZstdDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, ZstdDCtxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}
// LZ4HC state; LZ4_sizeofStateHC() bytes, 8-byte aligned via uint64_t storage.
void* ThreadLz4HcState() {
  thread_local std::vector<uint64_t> state((LZ4_sizeofStateHC() + sizeof(uint64_t) - 1) / sizeof(uint64_t));
  return state.data();
}

std::string ZstdError(size_t code) { return ZSTD_getErrorName(code); }

// Sets the compression parameters of `level` (see codec.h) on a freshly reset context.
Status ConfigureZstd(ZSTD_CCtx* ctx, int level) {
  size_t rc = ZSTD_CCtx_reset(ctx, ZSTD_reset_session_and_parameters);
  if (ZSTD_isError(rc)) return Status::Internal("zstd: CCtx reset: " + ZstdError(rc));
  if (level != kZstdExponentLevel) {
    rc = ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, level);
    if (ZSTD_isError(rc)) return Status::Internal("zstd: level " + std::to_string(level) + ": " + ZstdError(rc));
    // Levels < 0 deliberately keep zstd's choice (raw literals); others always Huffman-code them.
    if (level > 0) (void)ZSTD_CCtx_setParameter(ctx, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
    return Status::Ok();
  }
  const std::pair<ZSTD_cParameter, int> params[] = {
      {ZSTD_c_strategy, ZSTD_fast},
      {ZSTD_c_windowLog, kExponentWindowLog},
      {ZSTD_c_hashLog, kExponentHashLog},
      {ZSTD_c_chainLog, kExponentHashLog},
      {ZSTD_c_searchLog, 1},
      {ZSTD_c_minMatch, kExponentMinMatch},
      {ZSTD_c_checksumFlag, 0},
      {ZSTD_c_contentSizeFlag, 1},
  };
  for (const auto& [param, value] : params) {
    rc = ZSTD_CCtx_setParameter(ctx, param, value);
    if (ZSTD_isError(rc))
      return Status::Internal("zstd: parameter " + std::to_string(param) + "=" + std::to_string(value) + ": " +
                              ZstdError(rc));
  }
  // Forcing Huffman literals is an experimental parameter. A libzstd that refuses it keeps
  // acceleration 0 instead, which leaves literal compression on (about +0.01 bits/value).
  rc = ZSTD_CCtx_setParameter(ctx, ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  const int target_length = ZSTD_isError(rc) ? 0 : kExponentTargetLength;
  rc = ZSTD_CCtx_setParameter(ctx, ZSTD_c_targetLength, target_length);
  if (ZSTD_isError(rc)) return Status::Internal("zstd: targetLength: " + ZstdError(rc));
  return Status::Ok();
}

Result<uint64_t> CompressZstd(int level, const uint8_t* src, uint64_t raw_bytes, uint8_t* dst, uint64_t dst_capacity) {
  ZSTD_CCtx* ctx = ThreadZstdCCtx();
  if (ctx == nullptr) return Status::Internal("zstd: out of memory creating a compression context");
  ZM_RETURN_IF_ERROR(ConfigureZstd(ctx, level));
  const size_t rc = ZSTD_compress2(ctx, dst, dst_capacity, src, raw_bytes);
  if (ZSTD_isError(rc))
    return Status::Internal("zstd: compressing " + std::to_string(raw_bytes) + " bytes at level " +
                            std::to_string(level) + ": " + ZstdError(rc));
  return static_cast<uint64_t>(rc);
}

Result<uint64_t> CompressLz4(int level, const uint8_t* src, uint64_t raw_bytes, uint8_t* dst) {
  // CompressChunk checked raw_bytes <= LZ4_MAX_INPUT_SIZE and the capacity >= LZ4_compressBound.
  const int src_size = static_cast<int>(raw_bytes);
  const int capacity = LZ4_compressBound(src_size);
  const char* in = reinterpret_cast<const char*>(src);
  char* out = reinterpret_cast<char*>(dst);
  const int written = level <= 0 ? LZ4_compress_default(in, out, src_size, capacity)
                                 : LZ4_compress_HC_extStateHC(ThreadLz4HcState(), in, out, src_size, capacity, level);
  if (written <= 0)
    return Status::Internal("lz4: compressing " + std::to_string(raw_bytes) + " bytes at level " +
                            std::to_string(level) + " failed");
  return static_cast<uint64_t>(written);
}

Status DecompressZstd(const uint8_t* src, uint64_t stored_bytes, uint8_t* dst, uint64_t raw_bytes) {
  const unsigned long long declared = ZSTD_getFrameContentSize(src, stored_bytes);
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return Status::Corruption("zstd chunk: malformed stream (bad frame header, " + std::to_string(stored_bytes) +
                              " stored bytes)");
  if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != raw_bytes)
    return Status::Corruption("zstd chunk: expected " + std::to_string(raw_bytes) + " bytes, got " +
                              std::to_string(declared) + " (frame header)");
  ZSTD_DCtx* ctx = ThreadZstdDCtx();
  if (ctx == nullptr) return Status::Internal("zstd: out of memory creating a decompression context");
  const size_t rc = ZSTD_decompressDCtx(ctx, dst, raw_bytes, src, stored_bytes);
  if (ZSTD_isError(rc))
    return Status::Corruption("zstd chunk: malformed stream (" + ZstdError(rc) + "; expected " +
                              std::to_string(raw_bytes) + " bytes from " + std::to_string(stored_bytes) + " stored)");
  if (rc != raw_bytes)
    return Status::Corruption("zstd chunk: expected " + std::to_string(raw_bytes) + " bytes, got " +
                              std::to_string(rc));
  return Status::Ok();
}

Status DecompressLz4(const uint8_t* src, uint64_t stored_bytes, uint8_t* dst, uint64_t raw_bytes) {
  if (raw_bytes > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE) || stored_bytes > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE))
    return Status::Corruption("lz4 chunk: sizes beyond LZ4_MAX_INPUT_SIZE (stored " + std::to_string(stored_bytes) +
                              ", raw " + std::to_string(raw_bytes) + ")");
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(src), reinterpret_cast<char*>(dst),
                                      static_cast<int>(stored_bytes), static_cast<int>(raw_bytes));
  if (got < 0)
    return Status::Corruption("lz4 chunk: malformed stream (expected " + std::to_string(raw_bytes) + " bytes from " +
                              std::to_string(stored_bytes) + " stored)");
  if (static_cast<uint64_t>(got) != raw_bytes)
    return Status::Corruption("lz4 chunk: expected " + std::to_string(raw_bytes) + " bytes, got " +
                              std::to_string(got));
  return Status::Ok();
}

}  // namespace

const char* CodecName(Codec codec) {
  switch (codec) {
    case Codec::kNone: return "none";
    case Codec::kZstd: return "zstd";
    case Codec::kLz4: return "lz4";
  }
  return "unknown";
}

Result<Codec> ParseCodec(const std::string& name) {
  if (name == "none") return Codec::kNone;
  if (name == "zstd") return Codec::kZstd;
  if (name == "lz4") return Codec::kLz4;
  return Status::InvalidArgument("unknown codec '" + name + "' (expected none, zstd or lz4)");
}

int DefaultCodecLevel(Codec codec) {
  switch (codec) {
    case Codec::kZstd: return kZstdExponentLevel;
    case Codec::kLz4: return kLz4DefaultHcLevel;
    case Codec::kNone: return 0;
  }
  return 0;
}

uint64_t CompressBoundBytes(Codec codec, uint64_t raw_bytes) {
  switch (codec) {
    case Codec::kNone: return raw_bytes;
    case Codec::kZstd: return ZSTD_compressBound(raw_bytes);
    case Codec::kLz4:
      if (raw_bytes > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE)) return 0;
      return static_cast<uint64_t>(LZ4_compressBound(static_cast<int>(raw_bytes)));
  }
  return 0;
}

Result<uint64_t> CompressChunk(const CodecOptions& options, const uint8_t* src, uint64_t raw_bytes, uint8_t* dst,
                               uint64_t dst_capacity) {
  const char* name = CodecName(options.codec);
  if (options.codec == Codec::kLz4 && raw_bytes > static_cast<uint64_t>(LZ4_MAX_INPUT_SIZE))
    return Status::InvalidArgument("lz4: chunk of " + std::to_string(raw_bytes) + " bytes exceeds LZ4_MAX_INPUT_SIZE");
  const uint64_t bound = CompressBoundBytes(options.codec, raw_bytes);
  if (dst_capacity < bound)
    return Status::InvalidArgument(std::string(name) + ": dst capacity " + std::to_string(dst_capacity) +
                                   " < CompressBoundBytes " + std::to_string(bound));
  if ((src == nullptr && raw_bytes > 0) || (dst == nullptr && bound > 0))
    return Status::InvalidArgument(std::string(name) + ": null buffer");
  uint8_t empty = 0;  // codecs touch no byte of an empty input, but expect a valid pointer
  if (src == nullptr) src = &empty;
  const int level = options.level == 0 ? DefaultCodecLevel(options.codec) : options.level;
  switch (options.codec) {
    case Codec::kNone:
      if (raw_bytes > 0) std::memcpy(dst, src, raw_bytes);
      return raw_bytes;
    case Codec::kZstd: return CompressZstd(level, src, raw_bytes, dst, dst_capacity);
    case Codec::kLz4: return CompressLz4(level, src, raw_bytes, dst);
  }
  return Status::InvalidArgument("unknown codec " + std::to_string(static_cast<int>(options.codec)));
}

Status DecompressChunk(Codec codec, const uint8_t* src, uint64_t stored_bytes, uint8_t* dst, uint64_t raw_bytes) {
  if ((src == nullptr && stored_bytes > 0) || (dst == nullptr && raw_bytes > 0))
    return Status::InvalidArgument(std::string(CodecName(codec)) + ": null buffer");
  // Codecs may touch neither buffer when a size is 0, but must get valid pointers.
  uint8_t empty = 0;
  if (src == nullptr) src = &empty;
  if (dst == nullptr) dst = &empty;
  switch (codec) {
    case Codec::kNone:
      if (stored_bytes != raw_bytes)
        return Status::Corruption("raw chunk: expected " + std::to_string(raw_bytes) + " bytes, got " +
                                  std::to_string(stored_bytes));
      if (raw_bytes > 0) std::memmove(dst, src, raw_bytes);
      return Status::Ok();
    case Codec::kZstd: return DecompressZstd(src, stored_bytes, dst, raw_bytes);
    case Codec::kLz4: return DecompressLz4(src, stored_bytes, dst, raw_bytes);
  }
  return Status::InvalidArgument("unknown codec " + std::to_string(static_cast<int>(codec)));
}

uint64_t EChunkStreamBytes(DType dtype, uint64_t count) {
  if (dtype == DType::kF8E4M3) return (count + 1) / 2;
  if (dtype == DType::kMXFP4) return (count + 3) / 4;
  return count;
}

namespace {

// Bits per packed exponent field: 4 for F8_E4M3 (two per byte), 2 for MXFP4 (four per byte), 0 = unpacked.
int PackedFieldBits(DType dtype) { return dtype == DType::kF8E4M3 ? 4 : dtype == DType::kMXFP4 ? 2 : 0; }

}  // namespace

Status CompressEChunk(DType dtype, const CodecOptions& options, const uint8_t* e, uint64_t count,
                      std::vector<uint8_t>* out) {
  const uint8_t* src = e;
  std::vector<uint8_t> packed;
  const int bits = PackedFieldBits(dtype);
  if (bits != 0) {
    const uint32_t per_byte = 8 / bits, mask = (1u << bits) - 1;
    if (dtype == DType::kMXFP4) {  // F8 masks (its planes come from SplitF8E4M3 only); MXFP4 refuses
      for (uint64_t i = 0; i < count; ++i) {
        if (e[i] > mask)
          return Status::InvalidArgument(fmt::format(
              "MXFP4 E-chunk: exponent field {} at value {} of {} is not a 2-bit value (0..3)", e[i], i, count));
      }
    }
    packed.assign(EChunkStreamBytes(dtype, count), 0);
    for (uint64_t i = 0; i < count; ++i)
      packed[i / per_byte] |= static_cast<uint8_t>((e[i] & mask) << (bits * (i % per_byte)));
    src = packed.data();
  }
  const uint64_t stream = EChunkStreamBytes(dtype, count);
  out->resize(CompressBoundBytes(options.codec, stream));
  ZM_ASSIGN_OR_RETURN(const uint64_t stored, CompressChunk(options, src, stream, out->data(), out->size()));
  out->resize(stored);
  return Status::Ok();
}

Status DecompressEChunk(DType dtype, Codec codec, const uint8_t* src, uint64_t stored_bytes, uint8_t* dst,
                        uint64_t count) {
  const int bits = PackedFieldBits(dtype);
  if (bits == 0) return DecompressChunk(codec, src, stored_bytes, dst, count);
  thread_local std::vector<uint8_t> packed;
  packed.resize(EChunkStreamBytes(dtype, count));
  ZM_RETURN_IF_ERROR(DecompressChunk(codec, src, stored_bytes, packed.data(), packed.size()));
  const uint64_t per_byte = static_cast<uint64_t>(8 / bits), full = count / per_byte;
  if (bits == 4) {
    for (uint64_t j = 0; j < full; ++j) {
      dst[2 * j] = packed[j] & 0x0fu;
      dst[2 * j + 1] = packed[j] >> 4;
    }
  } else {
    for (uint64_t j = 0; j < full; ++j) {
      const uint32_t b = packed[j];
      dst[4 * j] = b & 3u;
      dst[4 * j + 1] = (b >> 2) & 3u;
      dst[4 * j + 2] = (b >> 4) & 3u;
      dst[4 * j + 3] = b >> 6;
    }
  }
  const uint64_t rest = count - full * per_byte;  // values in the last, partial byte
  if (rest != 0) {
    const uint32_t b = packed[full], mask = (1u << bits) - 1;
    if ((b >> (bits * rest)) != 0)
      return Status::Corruption(fmt::format("packed {} E-chunk of {} values: the unused fields of the last byte "
                                            "(0x{:02x}) are not 0",
                                            DTypeName(dtype), count, b));
    for (uint64_t i = 0; i < rest; ++i) dst[full * per_byte + i] = static_cast<uint8_t>((b >> (bits * i)) & mask);
  }
  return Status::Ok();
}

}  // namespace zipmoe
