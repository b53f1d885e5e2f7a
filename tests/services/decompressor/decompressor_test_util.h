// Helpers of the DecompressorPool tests (decompressor_test.cc, decompressor_queue_test.cc): a shared
// tiny compressed model, 4 KiB-aligned chunk buffers, a gate that holds a worker inside a completion
// callback, a completion log and a cheap copy op.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/codec.h"
#include "services/decompressor/decompress_op.h"
#include "services/decompressor/decompressor_pool.h"
#include "tests/test_util.h"

namespace zipmoe::decompressor::test {

// A tiny qwen2_moe compressed with K = 4, shared by all test processes (read-only: tests that
// damage it work on a copy).
struct CompressedModel {
  static std::string Dir() {
    return testing::CachedCompress(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 11"), "--shards 4");
  }
};

// 4 KiB-aligned bytes, as the storage service delivers chunks.
struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t, FreeDeleter>;
inline AlignedBytes AllocAligned(uint64_t size_bytes) {
  const uint64_t capacity = (std::max<uint64_t>(size_bytes, 1) + 4095) & ~uint64_t{4095};
  return AlignedBytes(static_cast<uint8_t*>(std::aligned_alloc(4096, capacity)));
}

// Blocks the worker that runs a chosen op inside its completion callback until Release(); lets the
// test wait until the worker is inside. No sleeps.
class Gate {
 public:
  void EnterAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  void WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;
  bool released_ = false;
};

// Thread-safe record of completions.
class CompletionLog {
 public:
  void Add(const DecompressCompletion& c) {
    std::lock_guard<std::mutex> lock(mu_);
    all_.push_back(c);
  }
  std::vector<DecompressCompletion> all() {
    std::lock_guard<std::mutex> lock(mu_);
    return all_;
  }

 private:
  std::mutex mu_;
  std::vector<DecompressCompletion> all_;
};

// A small op that copies `n` raw bytes (codec none): cheap work whose identity the test controls.
struct CopyOp {
  std::vector<uint8_t> src, dst;
  DecompressOp op;
  CopyOp(uint64_t op_id, int32_t priority, size_t n = 64) : src(n, static_cast<uint8_t>(op_id)), dst(n, 0) {
    op.op_id = op_id;
    op.priority = priority;
    op.codec = Codec::kNone;
    op.src = src.data();
    op.stored_bytes = n;
    op.dst = dst.data();
    op.raw_bytes = n;
    op.tensor_name = "copy" + std::to_string(op_id);
  }
};

}  // namespace zipmoe::decompressor::test
