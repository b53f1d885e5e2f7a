// StorageService without an I/O thread (StorageConfig::io_thread = false, the storage process's mode):
// nothing is read until the owner calls RunQueued, which reads every queued op on the calling thread,
// bit-exactly, in submission order, coalescing chunks back to back in the file; a stop requested in a
// callback fails what is left with kUnavailable; Stop and WaitFor run what is still queued.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/checkpoint/expert_store.h"
#include "services/storage/storage_service.h"
#include "tests/services/storage/storage_test_util.h"

namespace zipmoe::storage {
namespace {

using test::CompressedModel;
using test::LeadingContiguousRun;
using test::MakeOps;
using test::PickTensors;
using test::TensorBuffers;

struct Inline {
  std::unique_ptr<ExpertStore> store;
  std::vector<TensorBuffers> tensors;
  std::vector<ReadOp> ops;
};

Inline MakeInline() {
  Inline in;
  auto store = ExpertStore::Open(CompressedModel::Dir());
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return in;
  in.store = std::move(store).value();
  for (const ExpertTensorInfo* t : PickTensors(*in.store)) in.tensors.push_back({t, {}});
  in.ops = MakeOps(in.tensors, 1);
  return in;
}

TEST(StorageInlineTest, RunQueuedReadsOnTheCallingThreadInSubmissionOrderBitExact) {
  Inline in = MakeInline();
  ASSERT_NE(in.store, nullptr);
  std::vector<ReadCompletion> completions;
  std::vector<std::thread::id> threads;
  int read_done = 0;
  StorageConfig config;
  config.path = in.store->experts_path();
  config.io_thread = false;
  config.on_complete = [&](const ReadCompletion& c) {
    completions.push_back(c);
    threads.push_back(std::this_thread::get_id());
  };
  config.on_read_done = [&] { ++read_done; };
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  // A scheduler's order is not file order.
  std::vector<ReadOp> ops = in.ops;
  std::mt19937 rng(11);
  std::shuffle(ops.begin(), ops.end(), rng);
  ASSERT_TRUE((*service)->Submit(ops).ok());
  EXPECT_TRUE(completions.empty()) << "read before RunQueued: there is no I/O thread";
  (*service)->RunQueued();
  ASSERT_EQ(completions.size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(completions[i].op_id, ops[i].op_id) << i;
    EXPECT_TRUE(completions[i].status.ok()) << completions[i].status.ToString();
    EXPECT_EQ(threads[i], std::this_thread::get_id()) << "op " << i << " completed on another thread";
  }
  EXPECT_EQ(static_cast<uint64_t>(read_done), (*service)->stats().reads);
  for (const TensorBuffers& tb : in.tensors) {
    for (size_t i = 0; i < tb.chunks.size(); ++i) {
      std::vector<uint8_t> want(tb.t->chunks[i].stored_bytes);
      ASSERT_TRUE(in.store->ReadChunk(*tb.t, static_cast<int>(i), want.data()).ok());
      EXPECT_EQ(std::memcmp(tb.chunks[i].data(), want.data(), want.size()), 0) << tb.t->name << " chunk " << i;
    }
  }
  (*service)->RunQueued();  // an empty queue: returns at once
  EXPECT_EQ(completions.size(), ops.size());
  EXPECT_EQ((*service)->stats().ops_ok, ops.size());
}

TEST(StorageInlineTest, ChunksBackToBackAreReadInOnePreadv) {
  Inline in = MakeInline();
  ASSERT_NE(in.store, nullptr);
  StorageConfig config;
  config.path = in.store->experts_path();
  config.io_thread = false;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  if (!(*service)->direct_io()) GTEST_SKIP() << "O_DIRECT is refused here: buffered reads are not coalesced";
  const size_t run = LeadingContiguousRun(in.ops);
  ASSERT_GE(run, 2u);
  std::vector<ReadOp> first(in.ops.begin(), in.ops.begin() + static_cast<std::ptrdiff_t>(run));
  ASSERT_TRUE((*service)->Submit(first).ok());
  (*service)->RunQueued();
  EXPECT_EQ((*service)->stats().ops_ok, run);
  EXPECT_EQ((*service)->stats().reads, 1u);
}

TEST(StorageInlineTest, AStopRequestedInACallbackFailsTheRestWithUnavailable) {
  Inline in = MakeInline();
  ASSERT_NE(in.store, nullptr);
  std::vector<ReadCompletion> completions;
  StorageService* raw = nullptr;
  StorageConfig config;
  config.path = in.store->experts_path();
  config.io_thread = false;
  config.on_complete = [&](const ReadCompletion& c) {
    completions.push_back(c);
    if (c.op_id == in.ops.front().op_id) raw->RequestStop();
  };
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok());
  raw = service->get();
  ASSERT_TRUE((*service)->Submit(in.ops).ok());
  (*service)->RunQueued();
  ASSERT_EQ(completions.size(), in.ops.size());  // every op completed exactly once, on this thread
  const size_t in_progress = LeadingContiguousRun(in.ops);  // read together with the first op
  ASSERT_LT(in_progress, in.ops.size()) << "PickTensors must leave a gap in the file";
  for (size_t i = 0; i < completions.size(); ++i) {
    EXPECT_EQ(completions[i].op_id, in.ops[i].op_id);
    if (i < in_progress) {
      EXPECT_TRUE(completions[i].status.ok()) << i << ": " << completions[i].status.ToString();
    } else {
      EXPECT_EQ(completions[i].status.code(), StatusCode::kUnavailable) << completions[i].status.ToString();
    }
  }
  EXPECT_EQ((*service)->Submit({in.ops[0]}).code(), StatusCode::kUnavailable);
}

TEST(StorageInlineTest, StopCompletesWhatIsStillQueuedAndWaitForRunsTheQueue) {
  Inline in = MakeInline();
  ASSERT_NE(in.store, nullptr);
  {
    std::vector<ReadCompletion> completions;
    StorageConfig config;
    config.path = in.store->experts_path();
    config.io_thread = false;
    config.on_complete = [&](const ReadCompletion& c) { completions.push_back(c); };
    auto service = StorageService::Create(config);
    ASSERT_TRUE(service.ok());
    ASSERT_TRUE((*service)->Submit(in.ops).ok());
    (*service)->Stop();  // nobody ran the queue: every op completes kUnavailable, none is lost
    ASSERT_EQ(completions.size(), in.ops.size());
    for (const ReadCompletion& c : completions) EXPECT_EQ(c.status.code(), StatusCode::kUnavailable);
    EXPECT_EQ((*service)->stats().ops_unavailable, in.ops.size());
  }
  StorageConfig config;
  config.path = in.store->experts_path();
  config.io_thread = false;
  config.retain_completions = true;
  auto service = StorageService::Create(config);
  ASSERT_TRUE(service.ok());
  ASSERT_TRUE((*service)->Submit(in.ops).ok());
  for (const ReadOp& op : in.ops) {
    Result<ReadCompletion> c = (*service)->WaitFor(op.op_id);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(c->status.ok()) << c->status.ToString();
  }
}

}  // namespace
}  // namespace zipmoe::storage
