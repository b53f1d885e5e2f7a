#include "common/hash.h"

#include <xxhash.h>

namespace zipmoe {
uint64_t Xxh64(const void* data, uint64_t size_bytes) { return XXH64(data, size_bytes, 0); }
}  // namespace zipmoe
