// xxHash64 (seed 0) of a byte range: the checksum of every chunk and of every expert tensor's
// original BF16 bytes in manifest.bin. Pure; thread-safe.
#pragma once

#include <cstdint>

namespace zipmoe {
uint64_t Xxh64(const void* data, uint64_t size_bytes);
}  // namespace zipmoe
