// Lossless codecs for E-chunks (ZipMoE §2.2 / §3.1): zstd or lz4 (HC for level > 0), or none.
//
// Each E-chunk is compressed independently (one frame per chunk) so L workers can decode the K
// shards of one tensor in parallel. SM-chunks are stored raw (Codec::kNone).
// zstd parameters are tuned for exponent planes (literal/Huffman-dominated data, no long matches);
// see docs/benchmarks.md for the measured ratio against the Shannon bound.
// Thread-safety: all functions may be called concurrently; each thread keeps its own codec contexts.
#pragma once

#include <cstdint>
#include <string>

#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace zipmoe {

enum class Codec : uint8_t { kNone = 0, kZstd = 1, kLz4 = 2 };

const char* CodecName(Codec codec);  // "none", "zstd", "lz4"
// Errors: kInvalidArgument naming the unknown codec.
Result<Codec> ParseCodec(const std::string& name);
// Default level per codec (zstd: 1, the exponent-plane profile; lz4: HC level 9; none: 0).
int DefaultCodecLevel(Codec codec);

// Compression level. Only the compressor uses it; any stream decodes without knowing it.
//   zstd  1 (default): exponent-plane profile, NOT zstd's own level 1. Huffman-coded literals with
//          the match finder all but switched off (strategy fast, windowLog 17 = 128 KiB blocks,
//          hashLog 6, minMatch 7, targetLength 131072, literalCompressionMode enable): on N(0, 0.02²)
//          BF16 exponents 2.60 bits/value at 45 KiB-720 KiB chunks (Shannon 2.55, Huffman 2.59),
//          ~0.5 GB/s compression, ~2 GB/s decode per core. Best for any i.i.d.-like byte plane.
//   zstd  2..22: zstd's own level N (literals always Huffman-coded). Use when the plane has real
//          repeats; on Gaussian exponents 2..18 are worse (2.9-3.3 bits) and 19..22 equal level 1
//          at 1/300 of its speed (docs/benchmarks.md). Negative: zstd's fast levels (raw literals).
//   lz4   <= 0: LZ4_compress_default; 1..12: LZ4_compress_HC at that level (no entropy coding).
//   none  ignored.
struct CodecOptions {
  Codec codec = Codec::kZstd;
  int level = 0;  // 0 = DefaultCodecLevel(codec)
};

// Upper bound of the compressed size of `raw_bytes` input bytes.
uint64_t CompressBoundBytes(Codec codec, uint64_t raw_bytes);

// Compresses src[0, raw_bytes) into dst (capacity dst_capacity >= CompressBoundBytes).
// Returns the stored size. Errors: kInvalidArgument (capacity), kInternal (codec failure).
Result<uint64_t> CompressChunk(const CodecOptions& options, const uint8_t* src, uint64_t raw_bytes,
                               uint8_t* dst, uint64_t dst_capacity);

// Decompresses exactly raw_bytes bytes into dst. Errors: kCorruption if the stream is malformed or
// does not decode to exactly raw_bytes bytes (message gives expected vs got).
Status DecompressChunk(Codec codec, const uint8_t* src, uint64_t stored_bytes, uint8_t* dst,
                       uint64_t raw_bytes);

// E-chunks of one dtype's exponent plane (one byte per value when decoded, common/bitfield.h). F8_E4M3
// exponents have 4 bits: they are packed two per byte (value 2j in the low nibble of byte j, a zero
// high nibble after an odd last value) before the codec and unpacked after it, so the entropy coder
// sees 8-bit symbols: on block-scaled N(0, 0.02^2) FP8 weights zstd (exponent-plane profile) stores
// 2.59 bits/value packed against 2.89 unpacked (Shannon 2.55). MXFP4 exponents have 2 bits: they are
// packed four per byte (value 4j + k at bits [2k, 2k+2) of byte j; the unused fields of a partial last
// byte are 0), so the coder sees 8-bit symbols as for F8. Other dtypes pass through unchanged.
// EChunkStreamBytes: bytes the codec sees for `count` values (F8_E4M3: ceil(count / 2), MXFP4:
// ceil(count / 4), else count). An E-chunk's count need not be a multiple of 4 (or of 32 for MXFP4).
uint64_t EChunkStreamBytes(DType dtype, uint64_t count);
// Compresses the `count` exponent bytes at `e` into *out (resized to the stored size). `dtype` is the chunk's
// (common/checkpoint/manifest.h EChunkDType): an MXFP4 tensor's E-chunk of block scales is coded as U8 (bytes,
// unpacked), its other E-chunks as MXFP4 (2-bit fields).
// Errors: CompressChunk's; kInvalidArgument for an MXFP4 field byte above 3 (naming its index), which
// SplitMxfp4 never writes into the fields (F8_E4M3 bytes are masked to their low nibble instead).
Status CompressEChunk(DType dtype, const CodecOptions& options, const uint8_t* e, uint64_t count,
                      std::vector<uint8_t>* out);
// Decodes an E-chunk into `count` exponent bytes at dst (MXFP4: each 0..3). Errors: DecompressChunk's
// (the stream must decode to exactly EChunkStreamBytes(dtype, count) bytes), kCorruption for a packed
// F8 or MXFP4 chunk whose unused fields in the last byte are not zero.
Status DecompressEChunk(DType dtype, Codec codec, const uint8_t* src, uint64_t stored_bytes, uint8_t* dst,
                        uint64_t count);

}  // namespace zipmoe
