#include "services/storage/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace zipmoe::storage {

Result<AlignedBuffer> AlignedBuffer::Allocate(uint64_t size_bytes, uint64_t alignment) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0)
    return Status::InvalidArgument("AlignedBuffer: alignment " + std::to_string(alignment) +
                                   " is not a power of two >= " + std::to_string(sizeof(void*)));
  const uint64_t capacity = RoundUpBytes(size_bytes == 0 ? 1 : size_bytes, alignment);
  void* p = nullptr;
  if (::posix_memalign(&p, alignment, capacity) != 0 || p == nullptr)
    return Status::Internal("AlignedBuffer: cannot allocate " + std::to_string(capacity) + " bytes");
  std::memset(p, 0, capacity);
  return AlignedBuffer(static_cast<uint8_t*>(p), capacity);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_bytes_(std::exchange(other.capacity_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    capacity_bytes_ = std::exchange(other.capacity_bytes_, 0);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace zipmoe::storage
