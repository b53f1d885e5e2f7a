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

#include "common/status.h"

namespace zipmoe {

enum class Codec : uint8_t { kNone = 0, kZstd = 1, kLz4 = 2 };

const char* CodecName(Codec codec);  // "none", "zstd", "lz4"
// Errors: kInvalidArgument naming the unknown codec.
Result<Codec> ParseCodec(const std::string& name);
// Default level per codec (zstd: tuned default; lz4: HC level 9; none: 0).
int DefaultCodecLevel(Codec codec);

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

}  // namespace zipmoe
