// The CPU emulation of CUDA declared in tests/kernels/cuda_emulation/cuda_runtime.h: fibers for a block's
// threads, the runtime API over the host heap. Errors of a launch are printed to stderr with the kernel's
// name and returned by the next cudaGetLastError, as a GPU's launch errors are.
#include "cuda_runtime.h"

#include <sys/mman.h>
#include <ucontext.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define ZIPMOE_EMULATION_ASAN 1
#endif

namespace zipmoe_cuda_emulation {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // kernels keep small frames; AddressSanitizer's are larger
constexpr int kWarpSize = 32;
constexpr size_t kMaxDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute's opt-in

thread_local cudaError_t last_error = cudaSuccess;

void SetError(cudaError_t err) { last_error = err; }

// ---- memory: cudaMalloc allocations and registered host ranges, by start address ----
struct Range {
  size_t bytes;
  bool registered;  // cudaHostRegister'ed host memory (else a cudaMalloc allocation)
};
std::mutex memory_mu;
std::map<uintptr_t, Range>& Ranges() {
  static auto* ranges = new std::map<uintptr_t, Range>();
  return *ranges;
}

// The range holding [p, p + bytes), if any (bytes 0: p itself, or one past the end of a range).
const std::pair<const uintptr_t, Range>* Find(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto& ranges = Ranges();
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return nullptr;
  --it;
  const uintptr_t end = it->first + it->second.bytes;
  if (a < it->first || a > end || bytes > end - a) return nullptr;
  return &*it;
}

// ---- fibers ----
enum class State { kReady, kAtWarpSync, kAtBlockSync, kDone };

struct Fiber {
  ucontext_t context;
  char* stack = nullptr;
  State state = State::kReady;
  uint3 thread_idx;
  // __shfl_xor_sync operands and result
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int lane_mask = 0, width = kWarpSize;
};

struct Block {
  ThreadPosition position;  // thread_idx of the fiber that runs now
  std::vector<Fiber> fibers;
  ucontext_t scheduler;
  Fiber* current = nullptr;
  std::vector<unsigned char> dynamic_shared;
  void (*body)(void*) = nullptr;
  void* context = nullptr;
  std::string error;
#ifdef ZIPMOE_EMULATION_ASAN
  const void* scheduler_stack = nullptr;
  size_t scheduler_stack_bytes = 0;
#endif
};

thread_local Block* running = nullptr;

// Stacks reused across launches on a host thread (mmap'ed: untouched pages cost nothing).
struct StackPool {
  std::vector<char*> stacks;
  ~StackPool() {
    for (char* s : stacks) munmap(s, kStackBytes);
  }
  char* Get(size_t i) {
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::fprintf(stderr, "cuda emulation: cannot map a fiber stack\n");
        std::abort();
      }
      stacks.push_back(static_cast<char*>(p));
    }
    return stacks[i];
  }
};
thread_local StackPool stack_pool;

// Switches from the fiber `f` to the scheduler and back.
void YieldToScheduler(Block* b, Fiber* f) {
#ifdef ZIPMOE_EMULATION_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, b->scheduler_stack, b->scheduler_stack_bytes);
#endif
  swapcontext(&f->context, &b->scheduler);
#ifdef ZIPMOE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void FiberEntry() {
  Block* b = running;
  Fiber* f = b->current;
#ifdef ZIPMOE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b->scheduler_stack, &b->scheduler_stack_bytes);
#endif
  b->body(b->context);
  f->state = State::kDone;
#ifdef ZIPMOE_EMULATION_ASAN
  __sanitizer_start_switch_fiber(nullptr, b->scheduler_stack, b->scheduler_stack_bytes);  // this fiber ends
#endif
  setcontext(&b->scheduler);
}

void Resume(Block* b, Fiber* f) {
  b->current = f;
  b->position.thread_idx = f->thread_idx;
#ifdef ZIPMOE_EMULATION_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, kStackBytes);
#endif
  swapcontext(&b->scheduler, &f->context);
#ifdef ZIPMOE_EMULATION_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  b->current = nullptr;
}

std::string Dim(dim3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// Releases the warp `w` if every live lane waits at a shuffle; returns whether it did. Sets b->error on a
// shuffle CUDA leaves undefined.
bool ReleaseWarp(Block* b, size_t w) {
  const size_t first = w * kWarpSize, last = std::min(b->fibers.size(), first + kWarpSize);
  const size_t lanes = last - first;
  bool any = false;
  for (size_t i = first; i < last; ++i) {
    const State s = b->fibers[i].state;
    if (s == State::kAtWarpSync) any = true;
    else if (s != State::kDone) return false;  // a lane still runs or waits at __syncthreads
  }
  if (!any) return false;
  unsigned mask = 0;
  bool first_lane = true;
  for (size_t i = first; i < last; ++i) {
    const Fiber& f = b->fibers[i];
    if (f.state != State::kAtWarpSync) continue;
    if (first_lane) mask = f.mask;
    first_lane = false;
    if (f.mask != mask) {
      b->error = "__shfl_xor_sync: the lanes of warp " + std::to_string(w) + " give different masks";
      return false;
    }
  }
  for (size_t l = 0; l < static_cast<size_t>(kWarpSize); ++l) {
    if ((mask >> l & 1u) == 0) continue;
    if (l >= lanes) {
      b->error = "__shfl_xor_sync: mask names lane " + std::to_string(l) + " of warp " + std::to_string(w) +
                 ", which the block of " + std::to_string(b->fibers.size()) + " threads does not have";
      return false;
    }
    if (b->fibers[first + l].state != State::kAtWarpSync) {
      b->error = "__shfl_xor_sync: lane " + std::to_string(l) + " of warp " + std::to_string(w) +
                 " is in the mask but has exited";
      return false;
    }
  }
  for (size_t i = first; i < last; ++i) {
    Fiber& f = b->fibers[i];
    if (f.state != State::kAtWarpSync) continue;
    const int lane = static_cast<int>(i - first);
    const int width = f.width;
    const int src = lane ^ f.lane_mask;
    uint64_t v = f.value;
    if (src / width <= lane / width && src < static_cast<int>(lanes)) {
      if ((mask >> src & 1u) == 0) {
        b->error = "__shfl_xor_sync: lane " + std::to_string(lane) + " of warp " + std::to_string(w) +
                   " reads lane " + std::to_string(src) + ", which is not in the mask";
        return false;
      }
      v = b->fibers[first + static_cast<size_t>(src)].value;
    }
    f.result = v;
  }
  for (size_t i = first; i < last; ++i)
    if (b->fibers[i].state == State::kAtWarpSync) b->fibers[i].state = State::kReady;
  return true;
}

// Makes `f` start at FiberEntry on `stack` when first resumed. (Its own function: locals of a caller of
// getcontext may be clobbered by the later return into it.)
__attribute__((noinline)) void StartFiber(Fiber* f, char* stack) {
  f->state = State::kReady;
  f->stack = stack;
  getcontext(&f->context);
  f->context.uc_stack.ss_sp = stack;
  f->context.uc_stack.ss_size = kStackBytes;
  f->context.uc_link = nullptr;
  makecontext(&f->context, FiberEntry, 0);
}

// Runs one block to its end. Returns false (b->error set) on a shuffle or barrier CUDA leaves undefined.
bool RunBlock(Block* b) {
  const size_t n = b->fibers.size();
  for (size_t i = 0; i < n; ++i) StartFiber(&b->fibers[i], stack_pool.Get(i));
  size_t done = 0;
  while (done < n) {
    bool progress = false;
    for (Fiber& f : b->fibers) {
      if (f.state != State::kReady) continue;
      Resume(b, &f);
      progress = true;
      if (f.state == State::kDone) ++done;
    }
    if (done == n) break;
    for (size_t w = 0; w * kWarpSize < n; ++w) {
      if (ReleaseWarp(b, w)) progress = true;
      if (!b->error.empty()) return false;
    }
    // __syncthreads: every thread that has not exited waits there.
    bool all_at_barrier = true, any_at_barrier = false;
    for (const Fiber& f : b->fibers) {
      if (f.state == State::kAtBlockSync) any_at_barrier = true;
      else if (f.state != State::kDone) all_at_barrier = false;
    }
    if (any_at_barrier && all_at_barrier) {
      for (Fiber& f : b->fibers)
        if (f.state == State::kAtBlockSync) f.state = State::kReady;
      progress = true;
    }
    if (!progress) {
      size_t at_warp = 0, at_block = 0;
      for (const Fiber& f : b->fibers) {
        at_warp += f.state == State::kAtWarpSync;
        at_block += f.state == State::kAtBlockSync;
      }
      b->error = "deadlock: " + std::to_string(at_warp) + " threads wait at __shfl_xor_sync and " +
                 std::to_string(at_block) + " at __syncthreads, and none can go on (a shuffle or barrier under a " +
                 "condition that differs between the threads)";
      return false;
    }
  }
  return true;
}

}  // namespace

const ThreadPosition& Position() {
  if (running == nullptr || running->current == nullptr) {
    std::fprintf(stderr, "cuda emulation: threadIdx/blockIdx read outside a kernel\n");
    std::abort();
  }
  return running->position;
}

void* DynamicSharedMemory() {
  if (running == nullptr) {
    std::fprintf(stderr, "cuda emulation: dynamic shared memory used outside a kernel\n");
    std::abort();
  }
  return running->dynamic_shared.empty() ? nullptr : running->dynamic_shared.data();
}

void SyncThreads() {
  Block* b = running;
  Fiber* f = b->current;
  f->state = State::kAtBlockSync;
  YieldToScheduler(b, f);
}

uint64_t ShuffleXor(unsigned mask, uint64_t bits, int lane_mask, int width) {
  Block* b = running;
  Fiber* f = b->current;
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0) {
    std::fprintf(stderr, "cuda emulation: __shfl_xor_sync width %d is not a power of two up to 32\n", width);
    std::abort();
  }
  f->mask = mask;
  f->value = bits;
  f->lane_mask = lane_mask;
  f->width = width;
  f->state = State::kAtWarpSync;
  YieldToScheduler(b, f);
  return f->result;
}

bool DeviceAccessible(const void* p) {
  if (p == nullptr) return true;
  std::lock_guard<std::mutex> lock(memory_mu);
  return Find(p, 0) != nullptr;
}

bool BeginLaunch(const char* kernel, dim3 grid, dim3 block, size_t shared_bytes, bool pointers_ok) {
  std::string why;
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64)
    why = "block " + Dim(block) + ": a block has 1 to 1024 threads (z at most 64)";
  else if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
    why = "grid " + Dim(grid) + ": x in [1, 2^31 - 1], y and z in [1, 65535]";
  else if (shared_bytes > kMaxDynamicShared)
    why = std::to_string(shared_bytes) + " bytes of dynamic shared memory (at most 48 KiB without an opt-in)";
  if (!why.empty()) {
    std::fprintf(stderr, "cuda emulation: launch of %s refused: %s\n", kernel, why.c_str());
    SetError(cudaErrorInvalidConfiguration);
    return false;
  }
  if (!pointers_ok) {
    std::fprintf(stderr,
                 "cuda emulation: launch of %s: a pointer argument is neither device memory (cudaMalloc) nor "
                 "registered host memory\n",
                 kernel);
    SetError(cudaErrorIllegalAddress);
    return false;
  }
  return true;
}

void RunGrid(const char* kernel, dim3 grid, dim3 block_dim, size_t shared_bytes, void (*body)(void*), void* context) {
  if (running != nullptr) {
    std::fprintf(stderr, "cuda emulation: %s launched from inside a kernel\n", kernel);
    std::abort();
  }
  Block b;
  b.body = body;
  b.context = context;
  b.position.block_dim = block_dim;
  b.position.grid_dim = grid;
  const size_t threads = static_cast<size_t>(block_dim.x) * block_dim.y * block_dim.z;
  b.fibers.resize(threads);
  for (size_t i = 0; i < threads; ++i) {
    b.fibers[i].thread_idx.x = static_cast<unsigned>(i % block_dim.x);
    b.fibers[i].thread_idx.y = static_cast<unsigned>(i / block_dim.x % block_dim.y);
    b.fibers[i].thread_idx.z = static_cast<unsigned>(i / (static_cast<size_t>(block_dim.x) * block_dim.y));
  }
  running = &b;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        b.position.block_idx = uint3{x, y, z};
        b.dynamic_shared.assign(shared_bytes, 0xff);
        if (!RunBlock(&b)) {
          std::fprintf(stderr, "cuda emulation: %s, block (%u, %u, %u): %s\n", kernel, x, y, z, b.error.c_str());
          running = nullptr;
          SetError(cudaErrorLaunchFailure);
          return;
        }
      }
    }
  }
  running = nullptr;
}

}  // namespace zipmoe_cuda_emulation

using zipmoe_cuda_emulation::Find;
using zipmoe_cuda_emulation::memory_mu;
using zipmoe_cuda_emulation::Range;
using zipmoe_cuda_emulation::Ranges;
using zipmoe_cuda_emulation::last_error;

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorCallRequiresNewerDriver: return "API call is not supported in the installed CUDA driver";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr || device != 0) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = 2; return cudaSuccess;
    case cudaDevAttrIntegrated: *value = 0; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  *total_bytes = size_t{4} << 30;
  *free_bytes = size_t{2} << 30;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;  // as CUDA: a null pointer, no error
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return cudaErrorMemoryAllocation;
  std::memset(p, 0xff, bytes);
  std::lock_guard<std::mutex> lock(memory_mu);
  Ranges()[reinterpret_cast<uintptr_t>(p)] = Range{bytes, false};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(memory_mu);
  auto& ranges = Ranges();
  const auto it = ranges.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == ranges.end() || it->second.registered) return cudaErrorInvalidValue;
  ranges.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  {
    std::lock_guard<std::mutex> lock(memory_mu);
    const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((dst_device && Find(dst, bytes) == nullptr) || (src_device && Find(src, bytes) == nullptr)) {
      std::fprintf(stderr, "cuda emulation: cudaMemcpy of %zu bytes (kind %d): a device side is not inside one "
                   "allocation\n", bytes, static_cast<int>(kind));
      zipmoe_cuda_emulation::SetError(cudaErrorInvalidValue);  // a failed call sets the last error, as CUDA's
      return cudaErrorInvalidValue;
    }
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags) {
  (void)flags;
  if (ptr == nullptr || bytes == 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(memory_mu);
  auto& ranges = Ranges();
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  const auto next = ranges.lower_bound(a);
  if (next != ranges.end() && next->first < a + bytes) return cudaErrorHostMemoryAlreadyRegistered;
  if (next != ranges.begin()) {
    const auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > a) return cudaErrorHostMemoryAlreadyRegistered;
  }
  ranges[a] = Range{bytes, true};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  std::lock_guard<std::mutex> lock(memory_mu);
  auto& ranges = Ranges();
  const auto it = ranges.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == ranges.end() || !it->second.registered) return cudaErrorHostMemoryNotRegistered;
  ranges.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  if (device == nullptr || flags != 0) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(memory_mu);
  const auto* r = Find(host, 1);
  if (r == nullptr || !r->second.registered) return cudaErrorInvalidValue;
  *device = host;  // one address space, as with unified addressing on a 64-bit host
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  if (attr == nullptr) return cudaErrorInvalidValue;
  *attr = cudaPointerAttributes{};
  std::lock_guard<std::mutex> lock(memory_mu);
  const auto* r = ptr == nullptr ? nullptr : Find(ptr, 1);
  if (r == nullptr) return cudaSuccess;  // pageable: cudaMemoryTypeUnregistered
  attr->type = r->second.registered ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  attr->devicePointer = const_cast<void*>(ptr);
  attr->hostPointer = r->second.registered ? const_cast<void*>(ptr) : nullptr;
  return cudaSuccess;
}

struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return cudaErrorInvalidValue;
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return cudaErrorInvalidResourceHandle;
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event == nullptr ? cudaErrorInvalidResourceHandle : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return cudaErrorInvalidResourceHandle;
  if (!start->recorded || !end->recorded) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
