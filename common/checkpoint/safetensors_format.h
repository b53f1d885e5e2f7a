// The safetensors layout constants and Hugging Face checkpoint file names shared by the reader
// (safetensors.cc) and the writer (safetensors_writer.cc), with the shape check both apply.
// Internal to common/: callers use common/checkpoint/safetensors.h. Pure; callable from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zipmoe::safetensors_format {

inline constexpr uint64_t kHeaderLengthBytes = 8;  // u64 little-endian header length prefix
inline constexpr char kMetadataKey[] = "__metadata__";
inline constexpr char kIndexFile[] = "model.safetensors.index.json";
inline constexpr char kSingleFile[] = "model.safetensors";
inline constexpr char kSafetensorsSuffix[] = ".safetensors";

// Product of `shape` in elements; false on a negative dim or if numel * elem_bytes overflows
// uint64 (`*reason` says which).
bool CheckedNumel(const std::vector<int64_t>& shape, int elem_bytes, uint64_t* numel, std::string* reason);

// The shape as "[d0, d1, ...]", for messages.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace zipmoe::safetensors_format
