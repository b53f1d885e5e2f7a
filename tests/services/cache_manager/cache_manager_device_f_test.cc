// Pool F on the GPU executor's device (CacheConfig::f_on_device, issue 36 item 1): the manager keeps
// deciding what is in F (capacities, ranks, victims, counters) while the arena carves no bytes for F;
// an expert enters F only through ReserveDeviceF at its lookup and the Admit that commits it.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "services/cache_manager/cache_manager.h"
#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::Activate;
using test::ExpertBytes;
using test::kAllParts;
using test::MakeCache;
using test::MakeManifest;
using test::UniqueShmName;

// One layer of 6 experts; zipmoe plan F=2, C=2.
CacheConfig ZipMoeConfig(const Manifest& m, bool on_device) {
  CacheConfig c;
  c.policy = CachePolicy::kZipMoe;
  c.plan.capacity.assign(m.n_layers, std::array<int32_t, kPoolCount>{});
  c.plan.capacity[0][PoolIndex(Pool::kF)] = 2;
  c.plan.capacity[0][PoolIndex(Pool::kC)] = 2;
  c.pools = "FC";
  c.shm_name = UniqueShmName(on_device ? "devf" : "hostf");
  c.f_on_device = on_device;
  return c;
}

TEST(CacheManagerDeviceF, TheArenaCarvesNoFBytesAndFHitsNameTheirDeviceSlot) {
  const Manifest m = MakeManifest(1, 6, 4096, 2);
  CacheConfig host_config = ZipMoeConfig(m, false);
  CacheConfig device_config = ZipMoeConfig(m, true);
  device_config.budget_bytes = host_config.budget_bytes = test::PlanBytes(m, host_config.plan);
  auto host = MakeCache(m, host_config);
  auto device = MakeCache(m, device_config);
  ASSERT_TRUE(host && device);
  const uint64_t f_stride = AlignSlotBytes(device->layout().slot_bytes(Pool::kF));
  EXPECT_EQ(host->arena_bytes() - device->arena_bytes(), 2 * f_stride);
  EXPECT_EQ(device->pool_slots(Pool::kF), 2u);
  EXPECT_EQ(device->Counters().pools[PoolIndex(Pool::kF)].capacity_bytes, 2 * f_stride);  // device bytes

  // Expert 3 ranks first: F takes it at its lookup, before it runs.
  Activate(*device, 0, 3, 2);
  auto lookup = device->Lookup(0, 3);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->state, CompressionState::kMiss);
  Result<int32_t> slot = device->ReserveDeviceF(0, 3);
  ASSERT_TRUE(slot.ok()) << slot.status().ToString();
  ASSERT_GE(*slot, 0);
  EXPECT_EQ(device->Peek(0, 3), CompressionState::kMiss);  // not resident until the commit
  EXPECT_EQ(*device->ReserveDeviceF(0, 3), -1);             // one reservation at a time
  // The commit does not need (or copy) host F bytes: parts for C are given as the runtime gives them.
  const ExpertBytes bytes(*device->layout().Find(0, 3));
  Result<AdmitResult> admitted = device->Admit(0, 3, kAllParts, bytes.Sources());
  ASSERT_TRUE(admitted.ok()) << admitted.status().ToString();
  EXPECT_EQ(admitted->outcome, AdmitOutcome::kPlaced);
  EXPECT_EQ(admitted->state, CompressionState::kF);
  lookup->lease.Release();
  auto hit = device->Lookup(0, 3);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->state, CompressionState::kF);
  EXPECT_EQ(hit->device_slot, *slot);
  EXPECT_EQ(hit->f_part, nullptr);
  EXPECT_EQ(hit->Full(ExpertProj::kUp), nullptr);
  EXPECT_EQ(*device->ReserveDeviceF(0, 3), -1);  // already in F
  hit->lease.Release();
  const CacheCounters c = device->Counters();
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].requests, 1u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].admissions, 1u);
  EXPECT_EQ(device->LivePins(), 0u);

  // Host F keeps its bytes and has no device slot.
  auto host_miss = host->Lookup(0, 3);
  ASSERT_TRUE(host_miss.ok());
  EXPECT_EQ(host->ReserveDeviceF(0, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheManagerDeviceF, HostAdmissionsNeverFillFAndAMoveFromCFreesTheCSlot) {
  const Manifest m = MakeManifest(1, 6, 4096, 2);
  CacheConfig config = ZipMoeConfig(m, true);
  config.budget_bytes = test::PlanBytes(m, config.plan);
  auto cache = MakeCache(m, config);
  ASSERT_TRUE(cache);
  // Expert 1 runs without a reservation: Admit with BF16 bytes at hand still goes to C, not F.
  {
    auto lookup = cache->Lookup(0, 1);
    ASSERT_TRUE(lookup.ok());
    const ExpertBytes bytes(*cache->layout().Find(0, 1));
    Result<AdmitResult> r = cache->Admit(0, 1, kAllParts, bytes.Sources());
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->state, CompressionState::kC);
    EXPECT_TRUE(bytes.Matches(*cache->Lookup(0, 1)));
  }
  // Its next lookup reserves F; the commit moves it out of C (kMoved), whose slot is then free.
  auto lookup = cache->Lookup(0, 1);
  ASSERT_TRUE(lookup.ok());
  EXPECT_EQ(lookup->state, CompressionState::kC);
  Result<int32_t> slot = cache->ReserveDeviceF(0, 1);
  ASSERT_TRUE(slot.ok() && *slot >= 0);
  Result<AdmitResult> r = cache->Admit(0, 1, AvailableParts{}, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->outcome, AdmitOutcome::kMoved);
  lookup->lease.Release();
  EXPECT_EQ(cache->Peek(0, 1), CompressionState::kF);
  EXPECT_TRUE(cache->Residents(0, Pool::kC).empty());
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kC)].resident_bytes, 0u);
  EXPECT_EQ(cache->LivePins(), 0u);
}

TEST(CacheManagerDeviceF, ReservationsEvictByRankSpareThePinnedAndCancelFreesTheSlot) {
  const Manifest m = MakeManifest(1, 6, 4096, 2);
  CacheConfig config = ZipMoeConfig(m, true);
  config.budget_bytes = test::PlanBytes(m, config.plan);
  auto cache = MakeCache(m, config);
  ASSERT_TRUE(cache);
  // Experts 0 and 1 fill F (ranks 0, 1).
  std::set<int32_t> slots;
  for (int32_t e : {0, 1}) {
    Activate(*cache, 0, e, 3 - e);
    auto lookup = cache->Lookup(0, e);
    Result<int32_t> slot = cache->ReserveDeviceF(0, e);
    ASSERT_TRUE(slot.ok() && *slot >= 0);
    slots.insert(*slot);
    ASSERT_TRUE(cache->Admit(0, e, AvailableParts{}, {}).ok());
  }
  EXPECT_EQ(slots, (std::set<int32_t>{0, 1}));
  // Expert 5 ranks past F's threshold: F is not among its candidates.
  auto cold = cache->Lookup(0, 5);
  EXPECT_EQ(*cache->ReserveDeviceF(0, 5), -1);
  cold->lease.Release();
  // Expert 4 overtakes both: F gives it the least frequent one's slot...
  Activate(*cache, 0, 4, 5);
  {
    auto pinned0 = cache->Lookup(0, 0);  // ...unless both are pinned by the same layer
    auto pinned1 = cache->Lookup(0, 1);
    auto lookup = cache->Lookup(0, 4);
    EXPECT_EQ(*cache->ReserveDeviceF(0, 4), -1);
    EXPECT_GE(cache->Counters().pinned_skips, 1u);
  }
  auto lookup = cache->Lookup(0, 4);
  Result<int32_t> slot = cache->ReserveDeviceF(0, 4);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(*slot, 1) << "expert 1's slot (counts: expert 0 five, expert 1 four)";
  EXPECT_EQ(cache->Peek(0, 1), CompressionState::kMiss);
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kF)].evictions, 1u);
  // The layer failed: the reservation is dropped and its slot free for the next one.
  cache->CancelDeviceF(0, 4);
  cache->CancelDeviceF(0, 4);  // no-op
  EXPECT_EQ(cache->Peek(0, 4), CompressionState::kMiss);
  EXPECT_EQ(*cache->ReserveDeviceF(0, 4), 1);
  cache->CancelDeviceF(0, 4);
  lookup->lease.Release();
  EXPECT_EQ(cache->LivePins(), 0u);
}

TEST(CacheManagerDeviceF, AGlobalLruPoolCountsItsSlotsFromTheBudgetAndEvictsLeastRecent) {
  const Manifest m = MakeManifest(2, 4, 4096, 2);
  CacheConfig config;
  config.policy = CachePolicy::kLru;
  config.f_on_device = true;
  config.shm_name = UniqueShmName("devlru");
  const auto layout = ModelLayout::FromManifest(m);
  ASSERT_TRUE(layout.ok());
  config.budget_bytes = 3 * AlignSlotBytes(layout->slot_bytes(Pool::kF));
  auto cache = MakeCache(m, config);
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->pool_slots(Pool::kF), 3u);
  EXPECT_EQ(cache->arena_bytes(), 0u);  // nothing but F: no host bytes at all
  const std::vector<std::pair<int32_t, int32_t>> order = {{0, 0}, {1, 2}, {0, 3}, {0, 0}, {1, 1}};
  std::vector<int32_t> got;
  for (const auto& [layer, expert] : order) {
    auto lookup = cache->Lookup(layer, expert);
    ASSERT_TRUE(lookup.ok());
    if (lookup->state == CompressionState::kF) {
      got.push_back(lookup->device_slot);
    } else {
      Result<int32_t> slot = cache->ReserveDeviceF(layer, expert);
      ASSERT_TRUE(slot.ok());
      got.push_back(*slot);
    }
    ASSERT_TRUE(cache->Admit(layer, expert, AvailableParts{}, {}).ok());
  }
  // (1,1) evicts the least recently used, (1,2), and takes its slot; (0,0) kept its own slot.
  EXPECT_EQ(got[3], got[0]);
  EXPECT_EQ(got[4], got[1]);
  EXPECT_EQ(cache->Peek(1, 2), CompressionState::kMiss);
  EXPECT_EQ(cache->Peek(0, 0), CompressionState::kF);
  EXPECT_EQ(cache->LivePins(), 0u);
}

// A new executor's device (`zipmoe up`: a restarted executor process): ClearDeviceF takes every
// expert out of F (a pinned one's slot is freed when its pin goes), cancels a pending reservation, and
// leaves C alone; F then refills through reservations as before. Without f_on_device it does nothing.
TEST(CacheManagerDeviceF, ClearDeviceFEmptiesFAndCancelsReservationsButKeepsC) {
  const Manifest m = MakeManifest(1, 6, 4096, 2);
  CacheConfig config = ZipMoeConfig(m, true);
  config.budget_bytes = test::PlanBytes(m, config.plan);
  auto cache = MakeCache(m, config);
  ASSERT_TRUE(cache);
  // Experts 3 and 4 in F (3 stays pinned by a lease), expert 5 reserved, expert 1 in C.
  for (int32_t e : {3, 4, 1}) Activate(*cache, 0, e, e == 1 ? 1 : 3);
  for (int32_t e : {3, 4}) {
    auto lookup = cache->Lookup(0, e);
    ASSERT_TRUE(lookup.ok());
    ASSERT_GE(*cache->ReserveDeviceF(0, e), 0);
    const ExpertBytes bytes(*cache->layout().Find(0, e));
    ASSERT_EQ(cache->Admit(0, e, kAllParts, bytes.Sources())->state, CompressionState::kF);
  }
  {
    auto lookup = cache->Lookup(0, 1);
    ASSERT_TRUE(lookup.ok());
    const ExpertBytes bytes(*cache->layout().Find(0, 1));
    ASSERT_TRUE(cache->Admit(0, 1, kAllParts, bytes.Sources()).ok());
  }
  const CompressionState one_before = cache->Peek(0, 1);
  ASSERT_NE(one_before, CompressionState::kMiss);
  ASSERT_NE(one_before, CompressionState::kF);
  auto held = cache->Lookup(0, 3);  // pinned across the clear
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->state, CompressionState::kF);
  Activate(*cache, 0, 5, 8);  // now the most popular: F evicts 4 (3 is pinned) for it
  auto reserved_lookup = cache->Lookup(0, 5);
  ASSERT_TRUE(reserved_lookup.ok());
  Result<int32_t> reserved = cache->ReserveDeviceF(0, 5);
  ASSERT_TRUE(reserved.ok());
  ASSERT_GE(*reserved, 0) << "a pending reservation across the clear";
  EXPECT_NE(cache->Peek(0, 4), CompressionState::kF);
  const uint64_t removals_before = cache->Counters().pools[PoolIndex(Pool::kF)].removals;
  const int64_t resident_before = static_cast<int64_t>(cache->Counters().pools[PoolIndex(Pool::kF)].resident_experts);

  EXPECT_EQ(cache->ClearDeviceF(), resident_before);
  for (int32_t e : {3, 4, 5}) EXPECT_NE(cache->Peek(0, e), CompressionState::kF) << e;
  EXPECT_EQ(cache->Peek(0, 1), one_before) << "host pools are untouched";
  const CacheCounters c = cache->Counters();
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].resident_experts, 0u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].removals, removals_before + static_cast<uint64_t>(resident_before));
  // The admission after the cleared reservation does not put 5 in F; the pinned slot frees on release.
  const ExpertBytes five(*cache->layout().Find(0, 5));
  ASSERT_TRUE(cache->Admit(0, 5, kAllParts, five.Sources()).ok());
  EXPECT_NE(cache->Peek(0, 5), CompressionState::kF);
  held->lease.Release();
  reserved_lookup->lease.Release();
  EXPECT_EQ(cache->LivePins(), 0u);
  // F refills: a lookup after the clear reserves a slot again.
  auto again = cache->Lookup(0, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, CompressionState::kMiss);
  EXPECT_GE(*cache->ReserveDeviceF(0, 3), 0);
  cache->CancelDeviceF(0, 3);
  again->lease.Release();
  EXPECT_EQ(cache->LivePins(), 0u);

  CacheConfig host_config = ZipMoeConfig(m, false);
  host_config.budget_bytes = test::PlanBytes(m, host_config.plan);
  auto host = MakeCache(m, host_config);
  ASSERT_TRUE(host);
  EXPECT_EQ(host->ClearDeviceF(), 0);
}

}  // namespace
}  // namespace zipmoe::cache_manager
