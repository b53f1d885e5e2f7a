// ModelLayout::FromManifest (services/cache_manager/pool_layout.h) with gate-less experts
// (switch_transformers' wi/wo = up/down): the absent gate takes no slot bytes, up starts every part,
// and a manifest mixing gated and gate-less experts, or an expert without up/down, is refused naming it.
#include "services/cache_manager/pool_layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using ::testing::HasSubstr;

// MakeManifest without the tensors of projection `proj` for the experts `drop` selects.
template <typename Pred>
Manifest Without(Manifest m, ExpertProj proj, Pred drop) {
  m.expert_tensors.erase(std::remove_if(m.expert_tensors.begin(), m.expert_tensors.end(),
                                        [&](const ExpertTensorInfo& t) { return t.proj == proj && drop(t); }),
                         m.expert_tensors.end());
  return m;
}

TEST(PoolLayoutTest, GateLessExpertsTakeTwoTensorsPerSlot) {
  // numel 6000 as in SlotBytesAndOffsetsByHand: BF16 -> 12288, SM -> 8192, E-chunks -> 4096 each.
  const Manifest m = Without(test::MakeManifest(2, 3, 6000, 2), ExpertProj::kGate, [](auto&) { return true; });
  auto layout = ModelLayout::FromManifest(m);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_FALSE(layout->gated());
  EXPECT_EQ(layout->slot_bytes(Pool::kF), 2u * 12288);
  EXPECT_EQ(layout->slot_bytes(Pool::kS), 2u * 8192);
  EXPECT_EQ(layout->slot_bytes(Pool::kE), 2u * (4096 + 4096));
  EXPECT_EQ(layout->slot_bytes(Pool::kC), 2u * 8192 + 2u * 8192);
  const ExpertSlotLayout* e = layout->Find(1, 2);
  ASSERT_NE(e, nullptr);
  EXPECT_FALSE(e->tensors[static_cast<int>(ExpertProj::kGate)].present);
  const auto& up = e->tensors[static_cast<int>(ExpertProj::kUp)];
  const auto& down = e->tensors[static_cast<int>(ExpertProj::kDown)];
  EXPECT_EQ(up.bf16.offset, 0u);  // the parts start with up: no bytes kept for the gate
  EXPECT_EQ(up.sm.offset, 0u);
  EXPECT_EQ(up.e_chunks[0].offset, 0u);
  EXPECT_EQ(down.bf16.offset, 12288u);
  EXPECT_EQ(down.e_chunks[0].offset, 8192u);
  EXPECT_EQ(e->SmPartOffset(Pool::kC), 2u * 8192);
  EXPECT_EQ(layout->PlanBytes(CachePlan::Uniform(2, {1, 0, 1, 0})), 2 * (2u * 12288 + 2u * 8192));

  auto gated = ModelLayout::FromManifest(test::MakeManifest(1, 1, 64, 1));
  ASSERT_TRUE(gated.ok());
  EXPECT_TRUE(gated->gated());
}

TEST(PoolLayoutTest, MixedOrIncompleteExpertsAreRefusedNamingTheExpert) {
  // Expert 1 of layer 0 alone lacks its gate.
  auto mixed = ModelLayout::FromManifest(Without(test::MakeManifest(1, 3, 64, 1), ExpertProj::kGate,
                                                 [](const ExpertTensorInfo& t) { return t.expert_id == 1; }));
  ASSERT_EQ(mixed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.status().message(), HasSubstr("layer 0 expert 1 has no gate_proj"));
  // Gate-less everywhere but expert 2 has one.
  auto reverse = ModelLayout::FromManifest(Without(test::MakeManifest(1, 3, 64, 1), ExpertProj::kGate,
                                                   [](const ExpertTensorInfo& t) { return t.expert_id != 2; }));
  ASSERT_EQ(reverse.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(reverse.status().message(), HasSubstr("layer 0 expert 2 has a gate_proj"));
  // Up or down missing is never served.
  for (ExpertProj p : {ExpertProj::kUp, ExpertProj::kDown}) {
    auto missing = ModelLayout::FromManifest(Without(test::MakeManifest(2, 2, 64, 1), p,
                                                     [](const ExpertTensorInfo& t) { return t.layer_id == 1; }));
    ASSERT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(missing.status().message(), HasSubstr(fmt::format("layer 1 expert 0 has no {}", ExpertProjName(p))));
  }
}

}  // namespace
}  // namespace zipmoe::cache_manager
