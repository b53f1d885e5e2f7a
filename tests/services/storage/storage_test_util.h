// Helpers of the storage service tests (storage_test.cc, storage_file_modes_test.cc,
// storage_coalescing_test.cc): a shared compressed model, per-chunk aligned buffers and the read ops
// into them, and a completion log.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/expert_store.h"
#include "services/storage/aligned_buffer.h"
#include "services/storage/storage_service.h"
#include "tests/test_util.h"

namespace zipmoe::storage::test {

// A tiny qwen2_moe compressed with K = 4, shared by all test processes (read-only: tests that
// damage it work on a copy).
struct CompressedModel {
  static std::string Dir() {
    return testing::CachedCompress(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 11"), "--shards 4");
  }
};

// Copies the compressed model into `dst` (for tests that damage it).
inline std::string CopyModel(const testing::TempDir& tmp) {
  const std::string dst = tmp.Sub("copy.z");
  std::filesystem::copy(CompressedModel::Dir(), dst, std::filesystem::copy_options::recursive);
  return dst;
}

// Tensors spread over the file: first, second, a middle one and the last.
inline std::vector<const ExpertTensorInfo*> PickTensors(const ExpertStore& store) {
  const auto& all = store.manifest().expert_tensors;
  std::vector<const ExpertTensorInfo*> picked;
  for (size_t i : {size_t{0}, size_t{1}, size_t{2}, all.size() / 2, all.size() - 1}) picked.push_back(&all.at(i));
  return picked;
}

// Per tensor: one aligned buffer per chunk.
struct TensorBuffers {
  const ExpertTensorInfo* t = nullptr;
  std::vector<AlignedBuffer> chunks;
};

inline std::vector<ReadOp> MakeOps(std::vector<TensorBuffers>& tensors, uint64_t first_op_id) {
  std::vector<ReadOp> ops;
  uint64_t id = first_op_id;
  for (TensorBuffers& tb : tensors) {
    tb.chunks.clear();
    for (size_t i = 0; i < tb.t->chunks.size(); ++i) {
      auto buf = AlignedBuffer::Allocate(tb.t->chunks[i].stored_bytes);
      EXPECT_TRUE(buf.ok()) << buf.status().ToString();
      tb.chunks.push_back(std::move(buf).value());
      ops.push_back(MakeChunkReadOp(*tb.t, static_cast<int>(i), id++, tb.chunks.back().data(),
                                    tb.chunks.back().capacity_bytes()));
    }
  }
  return ops;
}

// How many ops from the first on continue each other in the file (what the I/O thread reads in one
// preadv when they are queued together), within its limits.
inline size_t LeadingContiguousRun(const std::vector<ReadOp>& ops) {
  size_t n = ops.empty() ? 0 : 1;
  uint64_t bytes = ops.empty() ? 0 : RoundUpBytes(ops[0].stored_bytes);
  while (n < ops.size() && n < kMaxCoalescedChunks &&
         ops[n].file_offset == ops[n - 1].file_offset + RoundUpBytes(ops[n - 1].stored_bytes) &&
         bytes + RoundUpBytes(ops[n].stored_bytes) <= kMaxCoalescedBytes) {
    bytes += RoundUpBytes(ops[n].stored_bytes);
    ++n;
  }
  return n;
}

// Records callback order; lets a test wait for n completions without sleeping.
class CompletionLog {
 public:
  void Add(const ReadCompletion& c) {
    std::lock_guard<std::mutex> lock(mu_);
    order_.push_back(c.op_id);
    cv_.notify_all();
  }
  std::vector<uint64_t> WaitForCount(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return order_.size() >= n; });
    return order_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> order_;
};

}  // namespace zipmoe::storage::test
