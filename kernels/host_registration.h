// HostRegistration: a move-only owner of one cudaHostRegister()ed host range (style.md "Ownership"),
// used to make the shared-memory arena (common/ipc/slot_arena.h) readable by the recovery kernel in place
// (ZipMoE §4: SM-chunks are read "directly into host-pinned memory registered for direct GPU access";
// zero-copy on Jetson's unified memory, over PCIe on a discrete GPU).
//
// Register() pins the range with cudaHostRegisterMapped and looks up its device alias with
// cudaHostGetDevicePointer; the destructor calls cudaHostUnregister. Built without CUDA (no
// ZIPMOE_HAVE_CUDA), Register() returns kUnavailable, so callers fall back to the CPU path.
// Host headers only: no CUDA headers here.
//
// Thread-safety: thread-compatible; the registered bytes may be used from any thread and stream.
// The range must stay mapped for the life of the registration (destroy it before the ShmRegion).
#pragma once

#include <cstdint>
#include <utility>

#include "common/status.h"

namespace zipmoe::kernels {

class HostRegistration {
 public:
  // ptr: host range start (page-aligned is best; any mapped range works), bytes > 0.
  // Errors: kInvalidArgument (null ptr, 0 bytes), kUnavailable (built without CUDA, or no usable
  // device/driver), kInternal (other CUDA errors, with the CUDA error string).
  static Result<HostRegistration> Register(void* ptr, uint64_t bytes);

  HostRegistration(HostRegistration&& other) noexcept
      : host_(std::exchange(other.host_, nullptr)),
        device_(std::exchange(other.device_, nullptr)),
        size_bytes_(std::exchange(other.size_bytes_, 0)) {}
  HostRegistration& operator=(HostRegistration&& other) noexcept {
    if (this != &other) {
      Reset();
      host_ = std::exchange(other.host_, nullptr);
      device_ = std::exchange(other.device_, nullptr);
      size_bytes_ = std::exchange(other.size_bytes_, 0);
    }
    return *this;
  }
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;
  ~HostRegistration() { Reset(); }  // cudaHostUnregister

  void* host_ptr() const { return host_; }
  // Device-side alias of host_ptr() (equal to it under unified addressing); nullptr when empty.
  void* device_ptr() const { return device_; }
  uint64_t size_bytes() const { return size_bytes_; }
  // Device alias of host address `p` inside the range (nullptr if outside).
  void* DevicePointerOf(const void* p) const {
    const auto* h = static_cast<const uint8_t*>(host_);
    const auto* q = static_cast<const uint8_t*>(p);
    if (host_ == nullptr || q < h || q >= h + size_bytes_) return nullptr;
    return static_cast<uint8_t*>(device_) + (q - h);
  }

 private:
  HostRegistration(void* host, void* device, uint64_t bytes) : host_(host), device_(device), size_bytes_(bytes) {}
  void Reset();  // unregisters (CUDA build) and empties

  void* host_ = nullptr;
  void* device_ = nullptr;
  uint64_t size_bytes_ = 0;
};

}  // namespace zipmoe::kernels
