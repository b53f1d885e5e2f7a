// The ToWire / FromWire pairs of the executor <-> scheduler protocol (services/links/provider_wire.h)
// and the scheduler <-> cache-manager protocol (services/links/cache_wire.h): every field survives
// a round trip, arena pointers become offsets valid in another mapping, and malformed input is an
// error naming what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <vector>

#include "common/ipc/messaging.h"
#include "common/ipc/shm_region.h"
#include "services/links/cache_wire.h"
#include "services/links/provider_wire.h"

namespace zipmoe::runtime {
namespace {

namespace cm = cache_manager;
namespace msg = messaging;
using ::testing::HasSubstr;

TEST(ProviderWire, LayerRoutingRoundTripsAndAPredictionCarriesNoScores) {
  LayerRouting routing{5, {1, 4, 9}, {2, 1, 3}};
  routing.mean_scores = {0.5f, 0.25f, 0.25f};
  routing.substituted = 2;
  const LayerRouting back = LayerRoutingFromWire(LayerRequestToWire(routing, /*prefetch=*/false));
  EXPECT_EQ(back.layer_id, 5);
  EXPECT_EQ(back.expert_ids, routing.expert_ids);
  EXPECT_EQ(back.tokens_per_expert, routing.tokens_per_expert);
  EXPECT_EQ(back.mean_scores, routing.mean_scores);
  EXPECT_EQ(back.substituted, 2);
  EXPECT_EQ(back.device_epoch, 0u);
  routing.device_epoch = 0x5eed0123456789abull;  // an executor with pool F slots (`zipmoe up`)
  EXPECT_EQ(LayerRoutingFromWire(LayerRequestToWire(routing, /*prefetch=*/false)).device_epoch, routing.device_epoch);
  const msg::LayerRequest prediction = LayerRequestToWire(routing, /*prefetch=*/true);
  EXPECT_TRUE(prediction.prefetch);
  EXPECT_TRUE(prediction.mean_scores.empty());
  EXPECT_EQ(prediction.substituted, 0);
  EXPECT_EQ(prediction.expert_ids, routing.expert_ids);
}

class ExpertWire : public ::testing::Test {
 protected:
  void SetUp() override {
    auto arena = ShmRegion::Create(fmt::format("/zm-wire-test-{}", ::getpid()), kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    arena_.emplace(std::move(arena).value());
  }
  static constexpr uint64_t kArenaBytes = 1 << 20;
  std::optional<ShmRegion> arena_;
};

TEST_F(ExpertWire, BF16TensorsAndPlanesBecomeOffsetsValidInAnotherMapping) {
  uint8_t* base = arena_->data();
  ExpertWeightsView v;
  v.layer_id = 3;
  v.expert_id = 7;
  v.gate = base + 4096;
  v.up = base + 8192;
  v.down = base + 12288;
  v.intermediate = 16;
  v.hidden = 32;
  const msg::ExpertReady ready = ExpertReadyToWire(v, base);
  EXPECT_EQ(ready.gate_offset, 4096u);
  EXPECT_EQ(ready.down_offset, 12288u);
  auto other = ShmRegion::Attach(arena_->name());  // another mapping of the same arena
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  auto back = ExpertWeightsFromWire(ready, *other, "ipc://scheduler");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->layer_id, 3);
  EXPECT_EQ(back->expert_id, 7);
  EXPECT_EQ(back->gate, other->data() + 4096);
  EXPECT_EQ(back->up, other->data() + 8192);
  EXPECT_EQ(back->down, other->data() + 12288);
  EXPECT_EQ(back->intermediate, 16);
  EXPECT_EQ(back->hidden, 32);
  EXPECT_FALSE(back->planes());

  ExpertWeightsView p = v;
  p.gate = p.up = p.down = nullptr;
  p.gate_planes = {base + 100, base + 200};
  p.up_planes = {base + 300, base + 400};
  p.down_planes = {base + 500, base + 600};
  auto planes = ExpertWeightsFromWire(ExpertReadyToWire(p, base), *other, "ipc://scheduler");
  ASSERT_TRUE(planes.ok()) << planes.status().ToString();
  ASSERT_TRUE(planes->planes());
  EXPECT_EQ(planes->up_planes.e, other->data() + 300);
  EXPECT_EQ(planes->down_planes.sm, other->data() + 600);
}

// A gate-less expert (switch_transformers' wi/wo): gated = false travels, no gate offset is needed
// or checked, and its planes come in twos (up, down).
TEST_F(ExpertWire, AGateLessExpertTravelsWithoutAGate) {
  uint8_t* base = arena_->data();
  ExpertWeightsView v;
  v.layer_id = 1;
  v.expert_id = 5;
  v.gated = false;
  v.up = base + 8192;
  v.down = base + 12288;
  v.intermediate = 16;
  v.hidden = 32;
  msg::ExpertReady ready = ExpertReadyToWire(v, base);
  EXPECT_FALSE(ready.gated);
  ready.gate_offset = kArenaBytes * 4;  // ignored: a gate-less expert has none
  auto back = ExpertWeightsFromWire(ready, *arena_, "ipc://scheduler");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->gated);
  EXPECT_EQ(back->gate, nullptr);
  EXPECT_EQ(back->up, base + 8192);
  EXPECT_EQ(back->down, base + 12288);

  ExpertWeightsView p = v;
  p.up = p.down = nullptr;
  p.up_planes = {base + 300, base + 400};
  p.down_planes = {base + 500, base + 600};
  const msg::ExpertReady planes_ready = ExpertReadyToWire(p, base);
  EXPECT_EQ(planes_ready.e_plane_offsets, (std::vector<uint64_t>{300, 500}));
  EXPECT_EQ(planes_ready.sm_offsets, (std::vector<uint64_t>{400, 600}));
  auto planes = ExpertWeightsFromWire(planes_ready, *arena_, "ipc://scheduler");
  ASSERT_TRUE(planes.ok()) << planes.status().ToString();
  ASSERT_TRUE(planes->planes());
  EXPECT_FALSE(planes->gated);
  EXPECT_EQ(planes->gate_planes.e, nullptr);
  EXPECT_EQ(planes->up_planes.e, base + 300);
  EXPECT_EQ(planes->down_planes.sm, base + 600);
  msg::ExpertReady three = planes_ready;  // three planes for a gate-less expert: refused
  three.e_plane_offsets.push_back(0);
  three.sm_offsets.push_back(0);
  EXPECT_EQ(ExpertWeightsFromWire(three, *arena_, "x").status().code(), StatusCode::kCorruption);
}

// Pool F on the executor's device: an F hit crosses with its device slot and no offsets (its bytes are
// on the device: nothing in the arena is named or bounds-checked); a reserved expert crosses with its
// offsets and the slot to write; "held" in a negative slot is corruption.
TEST_F(ExpertWire, ADeviceSlotCrossesAndAnFHitCarriesNoOffsets) {
  uint8_t* base = arena_->data();
  ExpertWeightsView hit;
  hit.layer_id = 4;
  hit.expert_id = 9;
  hit.intermediate = 16;
  hit.hidden = 32;
  hit.device_slot = 12;
  hit.device_slot_holds = true;
  const msg::ExpertReady ready = ExpertReadyToWire(hit, base);
  EXPECT_EQ(ready.device_slot, 12);
  EXPECT_TRUE(ready.device_slot_holds);
  EXPECT_EQ(ready.up_offset, 0u);
  EXPECT_TRUE(ready.e_plane_offsets.empty());
  auto back = ExpertWeightsFromWire(ready, *arena_, "ipc://scheduler");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device_slot, 12);
  EXPECT_TRUE(back->device_slot_holds);
  EXPECT_EQ(back->up, nullptr);
  EXPECT_EQ(back->up_planes.e, nullptr);
  EXPECT_FALSE(back->planes());
  EXPECT_EQ(back->intermediate, 16);

  ExpertWeightsView fill = hit;  // reserved at its lookup: its planes, and the slot to write
  fill.device_slot_holds = false;
  fill.gate_planes = {base + 100, base + 200};
  fill.up_planes = {base + 300, base + 400};
  fill.down_planes = {base + 500, base + 600};
  auto filled = ExpertWeightsFromWire(ExpertReadyToWire(fill, base), *arena_, "ipc://scheduler");
  ASSERT_TRUE(filled.ok()) << filled.status().ToString();
  EXPECT_EQ(filled->device_slot, 12);
  EXPECT_FALSE(filled->device_slot_holds);
  ASSERT_TRUE(filled->planes());
  EXPECT_EQ(filled->down_planes.sm, base + 600);

  ExpertWeightsView none = fill;  // no device F: -1 crosses as -1
  none.device_slot = -1;
  EXPECT_EQ(ExpertWeightsFromWire(ExpertReadyToWire(none, base), *arena_, "x")->device_slot, -1);

  msg::ExpertReady bad = ready;
  bad.device_slot = -1;
  auto refused = ExpertWeightsFromWire(bad, *arena_, "ipc://scheduler");
  ASSERT_EQ(refused.status().code(), StatusCode::kCorruption) << refused.status().ToString();
  EXPECT_THAT(refused.status().message(), HasSubstr("expert 9 of layer 4"));
}

TEST_F(ExpertWire, AnExpertOutsideTheArenaIsCorruptionNamingIt) {
  msg::ExpertReady ready;
  ready.layer_id = 2;
  ready.expert_id = 11;
  ready.intermediate = 16;
  ready.hidden = 32;
  ready.down_offset = kArenaBytes - 100;  // 1 KiB of BF16 does not fit there
  auto got = ExpertWeightsFromWire(ready, *arena_, "ipc://scheduler");
  ASSERT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().ToString();
  EXPECT_THAT(got.status().message(), HasSubstr("ipc://scheduler"));
  EXPECT_THAT(got.status().message(), HasSubstr("expert 11 of layer 2"));
  EXPECT_THAT(got.status().message(), HasSubstr(arena_->name()));
  ready.down_offset = 0;
  ready.e_plane_offsets = {0, 0};  // planes come in threes
  ready.sm_offsets = {0, 0, 0};
  EXPECT_EQ(ExpertWeightsFromWire(ready, *arena_, "x").status().code(), StatusCode::kCorruption);
}

// F32 / F16 experts (issue 19): the dtype travels (ExpertReady.dtype) and the bounds check counts
// DTypeSize bytes per weight; planes of a non-BF16 expert, or a dtype without E/SM split, are refused.
TEST_F(ExpertWire, F32AndF16ExpertsCarryTheirDtypeAndItsByteSize) {
  uint8_t* base = arena_->data();
  const uint64_t numel = 16 * 32;
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const uint64_t bytes = numel * DTypeSize(dtype);
    ExpertWeightsView v;
    v.layer_id = 1;
    v.expert_id = 4;
    v.dtype = dtype;
    v.gate = base;
    v.up = base + 4096;
    v.down = base + kArenaBytes - bytes;  // the last weight ends at the arena's end
    v.intermediate = 16;
    v.hidden = 32;
    msg::ExpertReady ready = ExpertReadyToWire(v, base);
    EXPECT_EQ(ready.dtype, static_cast<uint8_t>(dtype));
    auto back = ExpertWeightsFromWire(ready, *arena_, "ipc://scheduler");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->dtype, dtype);
    EXPECT_EQ(back->down, base + kArenaBytes - bytes);
    ready.down_offset += 2;  // its last bytes now lie past the end
    EXPECT_EQ(ExpertWeightsFromWire(ready, *arena_, "x").status().code(), StatusCode::kCorruption);
  }
  msg::ExpertReady planes;
  planes.intermediate = 16;
  planes.hidden = 32;
  planes.e_plane_offsets = {0, 0, 0};
  planes.sm_offsets = {0, 0, 0};
  planes.dtype = static_cast<uint8_t>(DType::kF32);
  auto got = ExpertWeightsFromWire(planes, *arena_, "x");
  EXPECT_EQ(got.status().code(), StatusCode::kCorruption);
  EXPECT_THAT(got.status().message(), HasSubstr("BF16 only"));
  planes.e_plane_offsets.clear();
  planes.sm_offsets.clear();
  planes.dtype = static_cast<uint8_t>(DType::kI32);
  EXPECT_EQ(ExpertWeightsFromWire(planes, *arena_, "x").status().code(), StatusCode::kCorruption);
}

cm::ExpertSlotLayout TwoChunkLayout() {
  cm::ExpertSlotLayout layout;
  for (cm::TensorSlotLayout& t : layout.tensors) {
    t.present = true;
    t.e_chunks.resize(2);
  }
  return layout;
}

TEST(CacheWire, AnAdmissionRoundTripsSplitByTheLayout) {
  CacheAdmitRequest request;
  request.layer_id = 4;
  request.expert_id = 9;
  request.lease = 77;
  request.parts.e = request.parts.sm = request.parts.bf16 = true;
  request.e_chunks = {std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3, 4}, std::vector<uint64_t>{5, 6}};
  request.sm = {10, 11, 12};
  request.bf16 = {20, 21, 22};
  request.bf16_from_planes = true;
  request.e_plane = {30, 31, 32};
  const msg::CacheAdmitItem item = CacheAdmitToWire(request);
  EXPECT_EQ(item.lease_id, 77u);
  EXPECT_TRUE(item.admit);
  EXPECT_EQ(item.e_offsets, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  const cm::ExpertSlotLayout layout = TwoChunkLayout();
  CacheAdmitRequest back;
  ASSERT_TRUE(CacheAdmitFromWire(item, &layout, &back).ok());
  EXPECT_EQ(back.layer_id, 4);
  EXPECT_EQ(back.expert_id, 9);
  EXPECT_TRUE(back.parts.e && back.parts.sm && back.parts.bf16);
  EXPECT_EQ(back.e_chunks, request.e_chunks);
  EXPECT_EQ(back.sm, request.sm);
  EXPECT_EQ(back.bf16, request.bf16);
  EXPECT_TRUE(back.bf16_from_planes);
  EXPECT_EQ(back.e_plane, request.e_plane);
}

TEST(CacheWire, OffsetsThatDoNotMatchTheLayoutAreRefusedNamingTheExpert) {
  CacheAdmitRequest request;
  request.layer_id = 4;
  request.expert_id = 9;
  request.parts.e = true;
  request.e_chunks = {std::vector<uint64_t>{1, 2}, std::vector<uint64_t>{3}, std::vector<uint64_t>{5, 6}};
  const cm::ExpertSlotLayout layout = TwoChunkLayout();
  CacheAdmitRequest back;
  const Status st = CacheAdmitFromWire(CacheAdmitToWire(request), &layout, &back);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("layer 4 expert 9"));
}

TEST(CacheWire, CountersRoundTrip) {
  cm::CacheCounters c;
  c.lookups = 100;
  c.misses = 7;
  c.drops = 3;
  c.pinned_skips = 1;
  for (size_t p = 0; p < c.pools.size(); ++p) {
    c.pools[p] = cm::PoolCounters{p + 1, p + 2, p + 3, p + 4, p + 5, p + 6, p + 7};
  }
  c.layer_requests = {{1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}};
  const msg::CacheStats stats = CacheStatsToWire(42, c);
  EXPECT_EQ(stats.request_id, 42u);
  EXPECT_EQ(stats.pool_counters.size(), 4u * 7u);
  const cm::CacheCounters back = CacheCountersFromWire(stats);
  EXPECT_EQ(back.lookups, 100u);
  EXPECT_EQ(back.misses, 7u);
  EXPECT_EQ(back.drops, 3u);
  EXPECT_EQ(back.pinned_skips, 1u);
  for (size_t p = 0; p < c.pools.size(); ++p) {
    EXPECT_EQ(back.pools[p].requests, c.pools[p].requests);
    EXPECT_EQ(back.pools[p].capacity_bytes, c.pools[p].capacity_bytes);
  }
  EXPECT_EQ(back.layer_requests, c.layer_requests);
}

}  // namespace
}  // namespace zipmoe::runtime
