// AlignedBuffer: an owned, 4 KiB-aligned host buffer whose capacity is rounded up to a multiple of
// its alignment, as O_DIRECT reads of experts.bin chunks require (docs/format.md "experts.bin").
//
// Ownership: move-only owner of one posix_memalign allocation (freed in the destructor). The bytes
// may be read and written from any thread; the object itself is thread-compatible.
#pragma once

#include <cstdint>

#include "common/checkpoint/manifest.h"
#include "common/status.h"

namespace zipmoe::storage {

// Smallest multiple of `alignment` (a power of two) that is >= size_bytes.
inline uint64_t RoundUpBytes(uint64_t size_bytes, uint64_t alignment = kChunkAlignmentBytes) {
  return (size_bytes + alignment - 1) & ~(alignment - 1);
}

class AlignedBuffer {
 public:
  // Allocates RoundUpBytes(size_bytes, alignment) bytes (at least one alignment unit), zero-filled.
  //   alignment: a power of two >= sizeof(void*); kChunkAlignmentBytes for O_DIRECT destinations.
  // Errors: kInvalidArgument (alignment not a power of two), kInternal (allocation failed).
  static Result<AlignedBuffer> Allocate(uint64_t size_bytes, uint64_t alignment = kChunkAlignmentBytes);

  AlignedBuffer() = default;
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  ~AlignedBuffer();  // frees the allocation

  uint8_t* data() const { return data_; }
  uint64_t capacity_bytes() const { return capacity_bytes_; }  // a multiple of the alignment

 private:
  AlignedBuffer(uint8_t* data, uint64_t capacity_bytes) : data_(data), capacity_bytes_(capacity_bytes) {}
  uint8_t* data_ = nullptr;
  uint64_t capacity_bytes_ = 0;
};

}  // namespace zipmoe::storage
