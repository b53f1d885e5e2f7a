// ObservedExpertProvider: the routing observer sees every layer (device-resident experts merged in),
// and every call, ReleaseAll's batch included, reaches the wrapped provider unchanged.
#include "common/observed_expert_provider.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace zipmoe {
namespace {

class Lease : public ExpertLease {
 public:
  explicit Lease(int32_t expert) { view_.expert_id = expert; }
  const ExpertWeightsView& weights() const override { return view_; }

 private:
  ExpertWeightsView view_;
};

// Counts what reaches it; ReleaseAll records each batch's size.
class CountingProvider : public ExpertProvider {
 public:
  Status BeginLayer(const LayerRouting& routing) override {
    begun.push_back(routing);
    next = 0;
    return Status::Ok();
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    return std::unique_ptr<ExpertLease>(new Lease(begun.back().expert_ids.at(next++)));
  }
  Status EndLayer(int32_t) override {
    ++ended;
    return Status::Ok();
  }
  void ReleaseAll(std::vector<std::unique_ptr<ExpertLease>>* leases) override {
    batches.push_back(leases->size());
    leases->clear();
  }
  int64_t device_f_slots() const override { return 7; }

  std::vector<LayerRouting> begun;
  std::vector<size_t> batches;
  size_t next = 0;
  int ended = 0;
};

TEST(ObservedExpertProvider, ObservesEveryLayerAndForwardsEveryCallIncludingBatchedReleases) {
  CountingProvider inner;
  std::vector<LayerRouting> seen;
  ObservedExpertProvider observed(&inner, [&](const LayerRouting& r) { seen.push_back(r); });
  LayerRouting routing(2, {1, 4}, {1, 2});
  routing.device_resident = {3};
  routing.device_resident_tokens = {5};
  ASSERT_TRUE(observed.BeginLayer(routing).ok());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].expert_ids, (std::vector<int32_t>{1, 3, 4}));  // the device's expert merged in
  EXPECT_EQ(seen[0].tokens_per_expert, (std::vector<int32_t>{1, 5, 2}));
  ASSERT_EQ(inner.begun.size(), 1u);
  EXPECT_EQ(inner.begun[0].expert_ids, (std::vector<int32_t>{1, 4}));  // the provider's own, unchanged
  std::vector<std::unique_ptr<ExpertLease>> held;
  for (int i = 0; i < 2; ++i) held.push_back(std::move(observed.NextReady()).value());
  observed.ReleaseAll(&held);
  EXPECT_TRUE(held.empty());
  EXPECT_EQ(inner.batches, (std::vector<size_t>{2})) << "one batch of two, not two releases";
  ASSERT_TRUE(observed.EndLayer(2).ok());
  EXPECT_EQ(inner.ended, 1);
  EXPECT_EQ(observed.device_f_slots(), 7);
}

}  // namespace
}  // namespace zipmoe
