// DecompressorWorker (`zipmoe service decompressor`'s body) against a fake scheduler (a ROUTER): the
// decodes of a DecodeRequests frame all run, and each expert's completions come back together in
// one frame once its last op here ends (with whatever else is queued then); a failed op is not held
// and takes its expert's held completions along; a refused op counts for nothing.
#include "services/decompressor/decompressor_worker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/ipc/messaging_channel.h"
#include "common/ipc/shm_region.h"

namespace zipmoe::decompressor {
namespace {

namespace msg = messaging;
using std::chrono::milliseconds;

constexpr milliseconds kTimeout{10000};
constexpr uint64_t kArenaBytes = uint64_t{1} << 20;
constexpr uint64_t kElements = 2048;  // per recovery: E and SM planes of 2 KiB, a 4 KiB BF16 output

class DecompressorWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto arena = ShmRegion::Create(fmt::format("/zm-decompressor-worker-test-{}", ::getpid()), kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    arena_ = std::make_unique<ShmRegion>(std::move(arena).value());
    for (uint64_t i = 0; i < 2 * kElements; ++i) arena_->data()[i] = static_cast<uint8_t>(i * 7 + 3);
    auto router = msg::Channel::Open(context_, {msg::SocketKind::kRouter,
                                                fmt::format("inproc://decompressor-worker-test-{}", ::getpid()), true,
                                                "", "scheduler"});
    ASSERT_TRUE(router.ok()) << router.status().ToString();
    router_ = std::make_unique<msg::Channel>(std::move(router).value());
    DecompressorWorkerOptions options;
    options.pull.endpoint = router_->endpoint();
    options.pull.identity = "decompressor-test";
    options.n_threads = 1;
    auto worker = DecompressorWorker::Create(context_, *arena_, options);
    ASSERT_TRUE(worker.ok()) << worker.status().ToString();
    worker_ = std::move(worker).value();
    thread_ = std::thread([this] { run_status_ = worker_->Run(); });
    auto ready = router_->Recv(kTimeout);
    ASSERT_TRUE(ready.ok()) << ready.status().ToString();
    ASSERT_TRUE(std::holds_alternative<msg::WorkerReady>(ready->message.body));
    peer_ = ready->peer;
  }

  void TearDown() override {
    if (worker_) worker_->RequestStop();
    if (thread_.joinable()) thread_.join();
    EXPECT_TRUE(run_status_.ok()) << run_status_.ToString();
  }

  // A BF16 recovery of `kElements` values from the planes at the arena's start into output slot
  // `slot`, labelled (layer, expert); out_of_arena makes it fail the worker's bounds check.
  static std::unique_ptr<msg::DecodeRequest> Recover(uint64_t op_id, int32_t layer, int32_t expert, int slot,
                                                     bool out_of_arena = false) {
    auto r = std::make_unique<msg::DecodeRequest>();
    r->op_id = op_id;
    r->priority = static_cast<int32_t>(op_id);
    r->kind = msg::DecodeKind::RecoverBf16;
    r->codec = fb::Codec::None;
    r->src_offset = 0;
    r->sm_offset = kElements;
    r->dst_offset = out_of_arena ? kArenaBytes : 65536 + static_cast<uint64_t>(slot) * 2 * kElements;
    r->raw_bytes = kElements;
    r->tensor_name = "w";
    r->layer_id = layer;
    r->expert_id = expert;
    return r;
  }

  // Receives until `n` completions came; returns the op ids of each frame, in arrival order.
  std::vector<std::vector<uint64_t>> Collect(size_t n) {
    std::vector<std::vector<uint64_t>> frames;
    size_t got_ops = 0;
    while (got_ops < n) {
      auto got = router_->Recv(kTimeout);
      EXPECT_TRUE(got.ok()) << got.status().ToString();
      if (!got.ok()) break;
      std::vector<uint64_t> ids;
      if (const auto* one = std::get_if<msg::DecodeCompletion>(&got->message.body)) {
        ids.push_back(one->op_id);
        codes_[one->op_id] = one->status_code;
      } else if (const auto* batch = std::get_if<msg::DecodeCompletions>(&got->message.body)) {
        for (const auto& c : batch->items) {
          ids.push_back(c->op_id);
          codes_[c->op_id] = c->status_code;
        }
      } else {
        continue;  // heartbeats
      }
      got_ops += ids.size();
      frames.push_back(std::move(ids));
    }
    return frames;
  }

  // The frame (index) each op id arrived in.
  static std::map<uint64_t, size_t> FrameOf(const std::vector<std::vector<uint64_t>>& frames) {
    std::map<uint64_t, size_t> at;
    for (size_t f = 0; f < frames.size(); ++f) {
      for (uint64_t id : frames[f]) at[id] = f;
    }
    return at;
  }

  zmq::context_t context_;
  std::unique_ptr<ShmRegion> arena_;
  std::unique_ptr<msg::Channel> router_;
  std::unique_ptr<DecompressorWorker> worker_;
  std::thread thread_;
  Status run_status_;
  std::string peer_;
  std::map<uint64_t, fb::StatusCode> codes_;
};

TEST_F(DecompressorWorkerTest, AnExpertsCompletionsLeaveTogetherInOneFrame) {
  // Expert (3, 1): ops 1, 2, 4; expert (3, 2): ops 3, 5; op 6 has no expert label.
  msg::DecodeRequests frame;
  frame.items.push_back(Recover(1, 3, 1, 0));
  frame.items.push_back(Recover(2, 3, 1, 1));
  frame.items.push_back(Recover(3, 3, 2, 2));
  frame.items.push_back(Recover(4, 3, 1, 3));
  frame.items.push_back(Recover(5, 3, 2, 4));
  frame.items.push_back(Recover(6, -1, -1, 5));
  ASSERT_TRUE(router_->SendTo(peer_, std::move(frame), kTimeout).ok());
  const auto frames = Collect(6);
  const auto at = FrameOf(frames);
  ASSERT_EQ(at.size(), 6u);
  EXPECT_EQ(at.at(1), at.at(2));
  EXPECT_EQ(at.at(2), at.at(4));
  EXPECT_EQ(at.at(3), at.at(5));
  for (const auto& [id, code] : codes_) EXPECT_EQ(code, fb::StatusCode::Ok) << "op " << id;
  // Every output slot holds the recovered BF16: E byte as the high bits' exponent part, SM as the rest.
  const uint8_t* out = arena_->data() + 65536;
  for (int slot = 0; slot < 6; ++slot) {
    EXPECT_EQ(std::memcmp(out + slot * 2 * kElements, out, 2 * kElements), 0) << "slot " << slot;
  }
}

TEST_F(DecompressorWorkerTest, AFailedOpStillAnswersAndItsExpertsOthersArrive) {
  // Expert (0, 7): 12's output does not match its expected hash (kCorruption); 11 and 13 succeed.
  msg::DecodeRequests frame;
  frame.items.push_back(Recover(11, 0, 7, 0));
  frame.items.push_back(Recover(12, 0, 7, 1));
  frame.items.back()->expected_xxh64 = 1;
  frame.items.push_back(Recover(13, 0, 7, 2));
  ASSERT_TRUE(router_->SendTo(peer_, std::move(frame), kTimeout).ok());
  const auto at = FrameOf(Collect(3));
  ASSERT_EQ(at.size(), 3u);
  EXPECT_EQ(codes_.at(12), fb::StatusCode::Corruption);
  EXPECT_EQ(codes_.at(11), fb::StatusCode::Ok);
  EXPECT_EQ(codes_.at(13), fb::StatusCode::Ok);
  EXPECT_EQ(at.at(11), at.at(12));  // 11 was held until 12, which leaves at once
  EXPECT_LE(at.at(12), at.at(13));
}

// The grouping rule itself, step by step (no threads, so every hold is observable).
TEST(CompletionGroups, HoldsAnExpertsCompletionsUntilItsLastOpAndNeverAFailure) {
  CompletionGroups<int> groups;
  const std::pair<int32_t, int32_t> a{3, 1};
  const std::pair<int32_t, int32_t> b{3, 2};
  const std::pair<int32_t, int32_t> none{-1, -1};
  for (int i = 0; i < 3; ++i) groups.Register(a);
  groups.Register(b);
  groups.Register(none);
  EXPECT_TRUE(groups.Complete(a, 1, true).empty());
  EXPECT_EQ(groups.Complete(none, 9, true), (std::vector<int>{9}));  // unlabelled: never held
  EXPECT_TRUE(groups.Complete(a, 2, true).empty());
  EXPECT_EQ(groups.held(), 2u);
  EXPECT_EQ(groups.Complete(b, 5, true), (std::vector<int>{5}));  // b's only op: at once
  EXPECT_EQ(groups.Complete(a, 3, true), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(groups.held(), 0u);

  // A failure leaves at once with what its expert held, while the expert's last op is still open.
  for (int i = 0; i < 3; ++i) groups.Register(a);
  EXPECT_TRUE(groups.Complete(a, 11, true).empty());
  EXPECT_EQ(groups.Complete(a, 12, false), (std::vector<int>{11, 12}));
  EXPECT_EQ(groups.Complete(a, 13, true), (std::vector<int>{13}));
  EXPECT_EQ(groups.held(), 0u);
  // An op registered after its expert's earlier ones were sent starts a new group.
  groups.Register(a);
  EXPECT_EQ(groups.Complete(a, 21, true), (std::vector<int>{21}));
}

TEST_F(DecompressorWorkerTest, AnOpOutsideTheArenaIsAnsweredAloneAndHoldsNothingBack) {
  ASSERT_TRUE(router_->SendTo(peer_, *Recover(21, 0, 9, 0, /*out_of_arena=*/true), kTimeout).ok());
  const auto refused = Collect(1);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(codes_.at(21), fb::StatusCode::InvalidArgument);
  // The refusal counted nothing for expert (0, 9): its next op completes by itself.
  ASSERT_TRUE(router_->SendTo(peer_, *Recover(22, 0, 9, 1), kTimeout).ok());
  const auto next = Collect(1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(codes_.at(22), fb::StatusCode::Ok);
}

}  // namespace
}  // namespace zipmoe::decompressor
