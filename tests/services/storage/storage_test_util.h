// Helpers of the storage service tests (storage_test.cc, storage_file_modes_test.cc,
// storage_coalescing_test.cc): a shared compressed model, per-chunk aligned buffers and the read ops
// into them, and a completion log.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/checkpoint/expert_store.h"
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

// Writes `size` pseudo-random bytes (std::mt19937 from `seed`) to `path` and returns them.
inline std::string WriteRandomFile(const std::string& path, size_t size, uint32_t seed) {
  std::string bytes(size, '\0');
  std::mt19937 rng(seed);
  for (char& ch : bytes) ch = static_cast<char>(rng());
  testing::WriteAll(path, bytes);
  return bytes;
}

// Reads of `n` 4 KiB chunks back to back from offset 0 of a file, each into a buffer of its own:
// op ids 1..n, labels "chunk0".."chunk<n-1>", xxh64 left 0 for the test to set.
struct FileChunks {
  std::vector<AlignedBuffer> bufs;
  std::vector<ReadOp> ops;
};
inline FileChunks BackToBack4KiBChunks(int n) {
  FileChunks f;
  for (int i = 0; i < n; ++i) {
    auto b = AlignedBuffer::Allocate(4096);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    f.bufs.push_back(std::move(b).value());
    ReadOp op;
    op.op_id = static_cast<uint64_t>(i + 1);
    op.file_offset = 4096 * static_cast<uint64_t>(i);
    op.stored_bytes = 4096;
    op.dst = f.bufs.back().data();
    op.dst_capacity_bytes = f.bufs.back().capacity_bytes();
    op.tensor_name = "chunk" + std::to_string(i);
    f.ops.push_back(op);
  }
  return f;
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
