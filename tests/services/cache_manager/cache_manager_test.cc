// Tests for services/cache_manager: slot layout from a manifest, rank-based pool dispatching with
// hand-computed thresholds (ZipMoE §3.4), eviction of the least frequent (ties LRU), tolerance δ,
// the planned pools under another policy, pool subsets Λ, moves between pools with byte checks,
// counters, config validation and CUDA host registration.
#include "services/cache_manager/cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "kernels/recovery.h"
#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test::UniqueShmName;
using test::MakeManifest;
using test::PlanBytes;
using test::ExpertBytes;
using test::kAllParts;
using test::Activate;
using test::MakeCache;

TEST(PoolLayoutTest, SlotBytesAndOffsetsByHand) {
  // numel 6000: BF16 12000 B -> 12288 per tensor; SM 6000 -> 8192; E-chunks <= 4096 -> 4096, except
  // expert 3's shard 0 (5000 B -> 8192), which sets the E and C slot sizes.
  const Manifest m = MakeManifest(1, 4, 6000, 2, [](int32_t, int32_t e, int, int k) -> uint64_t {
    return (e == 3 && k == 0) ? 5000 : 1000 + 100 * e + k;
  });
  auto layout = ModelLayout::FromManifest(m);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->slot_bytes(Pool::kF), 3u * 12288);
  EXPECT_EQ(layout->slot_bytes(Pool::kS), 3u * 8192);
  EXPECT_EQ(layout->slot_bytes(Pool::kE), 3u * (8192 + 4096));
  EXPECT_EQ(layout->slot_bytes(Pool::kC), 3u * (8192 + 4096) + 3u * 8192);
  const ExpertSlotLayout* e3 = layout->Find(0, 3);
  ASSERT_NE(e3, nullptr);
  const auto& up = e3->tensors[static_cast<int>(ExpertProj::kUp)];
  EXPECT_EQ(up.e_chunks[0].offset, 12288u);
  EXPECT_EQ(up.e_chunks[0].bytes, 5000u);
  EXPECT_EQ(up.e_chunks[0].read_bytes, 8192u);
  EXPECT_EQ(up.e_chunks[1].offset, 20480u);
  EXPECT_EQ(up.sm.offset, 8192u);
  EXPECT_EQ(up.bf16.offset, 12288u);
  EXPECT_EQ(e3->SmPartOffset(Pool::kC), 36864u);
  EXPECT_EQ(e3->SmPartOffset(Pool::kS), 0u);
  const ExpertSlotLayout* e0 = layout->Find(0, 0);
  EXPECT_EQ(e0->PoolBytes(Pool::kE), 3u * 8192);
  EXPECT_EQ(e0->SmPartOffset(Pool::kC), 3u * 8192);
  EXPECT_EQ(layout->Find(0, 4), nullptr);
  EXPECT_EQ(layout->Find(1, 0), nullptr);
  const CachePlan plan = CachePlan::Uniform(1, {1, 0, 2, 1});
  EXPECT_EQ(layout->PlanBytes(plan), 3u * 12288 + 2 * 3u * 8192 + 3u * 12288);
}

TEST(CacheManagerTest, DispatchByRankWithHandComputedThresholds) {
  // Layer 0: S_F=2, S_C=1, S_S=3, S_E=0, δ=0 -> τ = (2, 3, 6, 6): ranks 0-1 F, 2 C, 3-5 S, 6+ none.
  // Layer 1: S_S=1, S_E=1 -> τ = (0, 0, 1, 2).
  const Manifest m = MakeManifest(2, 10, 512, 2);
  CacheConfig config;
  config.plan.capacity = {{2, 1, 3, 0}, {0, 0, 1, 1}};
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  EXPECT_THAT(cache->Thresholds(0), ElementsAre(2, 3, 6, 6));
  EXPECT_THAT(cache->Thresholds(1), ElementsAre(0, 0, 1, 2));

  for (int e = 0; e < 10; ++e) Activate(*cache, 0, e, 10 - e);  // rank of expert e is e
  for (int e = 0; e < 10; ++e) EXPECT_EQ(cache->Rank(0, e), e);
  std::vector<int> order = {7, 3, 0, 9, 5, 2, 8, 1, 6, 4};  // admission order must not matter
  for (int e : order) {
    auto r = cache->Admit(0, e, kAllParts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->rank, e);
    EXPECT_EQ(r->outcome, e < 6 ? AdmitOutcome::kPlaced : AdmitOutcome::kDropped) << e;
    EXPECT_EQ(r->evictions, 0);
  }
  const std::string want = "FFCSSSMMMM";
  for (int e = 0; e < 10; ++e) EXPECT_EQ(CompressionStateLetter(cache->Peek(0, e)), want[e]) << "expert " << e;
  EXPECT_THAT(cache->Residents(0, Pool::kF), ElementsAre(0, 1));
  EXPECT_THAT(cache->Residents(0, Pool::kC), ElementsAre(2));
  EXPECT_THAT(cache->Residents(0, Pool::kS), ElementsAre(3, 4, 5));
  EXPECT_TRUE(cache->Residents(0, Pool::kE).empty());

  Activate(*cache, 1, 5, 3);
  Activate(*cache, 1, 7, 2);
  Activate(*cache, 1, 2, 1);
  for (int e : {2, 7, 5}) ASSERT_TRUE(cache->Admit(1, e, kAllParts).ok());
  EXPECT_EQ(cache->Peek(1, 5), CompressionState::kS);
  EXPECT_EQ(cache->Peek(1, 7), CompressionState::kE);
  EXPECT_EQ(cache->Peek(1, 2), CompressionState::kMiss);
  EXPECT_EQ(cache->Counters().drops, 5u);
}

TEST(CacheManagerTest, ToleranceFallsThroughAndEvictsLeastFrequent) {
  // S_F=1, S_C=1, δ=1: τ_F=2, τ_C=3. Expert e has 6-e activations (rank e).
  const Manifest m = MakeManifest(1, 6, 512, 2);
  CacheConfig config;
  config.plan.capacity = {{1, 1, 0, 0}};
  config.tolerance = 1;
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  for (int e = 0; e < 6; ++e) Activate(*cache, 0, e, 6 - e);
  EXPECT_EQ(cache->Admit(0, 0, kAllParts)->state, CompressionState::kF);
  // Rank 1 < τ_F but F holds the better-ranked expert 0: not evicted; falls through to C.
  auto r1 = cache->Admit(0, 1, kAllParts);
  EXPECT_EQ(r1->state, CompressionState::kC);
  EXPECT_EQ(r1->evictions, 0);
  // Rank 2 < τ_C, but C holds expert 1 (ahead): dropped. Rank 3 is past every threshold.
  EXPECT_EQ(cache->Admit(0, 2, kAllParts)->outcome, AdmitOutcome::kDropped);
  EXPECT_EQ(cache->Admit(0, 3, kAllParts)->outcome, AdmitOutcome::kDropped);
  // Expert 2 becomes the most frequent: F overflows and its least frequent expert (0) is evicted.
  Activate(*cache, 0, 2, 10);
  auto r2 = cache->Admit(0, 2, kAllParts);
  EXPECT_EQ(r2->rank, 0);
  EXPECT_EQ(r2->state, CompressionState::kF);
  EXPECT_EQ(r2->evictions, 1);
  EXPECT_EQ(cache->Peek(0, 0), CompressionState::kMiss);
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kF)].evictions, 1u);
}

TEST(CacheManagerTest, EvictionTieGoesToLeastRecentlyUsed) {
  const Manifest m = MakeManifest(1, 4, 512, 1);
  CacheConfig config;
  config.plan.capacity = {{2, 0, 0, 0}};
  config.pools = "F";
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  Activate(*cache, 0, 0, 1);
  Activate(*cache, 0, 1, 1);  // same count, more recent
  ASSERT_EQ(cache->Admit(0, 0, kAllParts)->state, CompressionState::kF);
  ASSERT_EQ(cache->Admit(0, 1, kAllParts)->state, CompressionState::kF);
  Activate(*cache, 0, 2, 2);
  auto r = cache->Admit(0, 2, kAllParts);
  EXPECT_EQ(r->evictions, 1);
  EXPECT_THAT(cache->Residents(0, Pool::kF), ElementsAre(1, 2));
}

// Issue 17 item 5: another policy over the planner's pools admits by rank as zipmoe does, but its own
// rule picks the victim: LRU evicts the least recently used F resident where zipmoe evicts the least
// frequent. full-load has no pools to plan.
TEST(CacheManagerTest, PlannedPoolsAdmitByRankAndEvictByThePolicy) {
  const Manifest m = MakeManifest(1, 6, 512, 2);
  std::map<std::string, std::vector<int32_t>> f_residents;
  for (CachePolicy policy : {CachePolicy::kZipMoe, CachePolicy::kLru}) {
    CacheConfig config;
    config.policy = policy;
    config.plan.capacity = {{2, 1, 0, 0}};  // τ_F = 2, τ_C = 3
    config.pools = "FC";
    config.pools_from_plan = policy != CachePolicy::kZipMoe;
    config.budget_bytes = PlanBytes(m, config.plan);
    auto cache = MakeCache(m, config);
    ASSERT_NE(cache, nullptr);
    EXPECT_TRUE(cache->per_layer_pools());
    Activate(*cache, 0, 0, 20);
    Activate(*cache, 0, 1, 10);
    Activate(*cache, 0, 2, 5);
    EXPECT_EQ(cache->Admit(0, 0, kAllParts)->state, CompressionState::kF);
    EXPECT_EQ(cache->Admit(0, 1, kAllParts)->state, CompressionState::kF);
    EXPECT_EQ(cache->Admit(0, 2, kAllParts)->state, CompressionState::kC) << "rank 2: past τ_F, within τ_C";
    EXPECT_EQ(cache->Admit(0, 3, kAllParts)->outcome, AdmitOutcome::kDropped) << "rank 3: past every threshold";
    Activate(*cache, 0, 1, 1);   // expert 1: less frequent than 0, but used more recently
    Activate(*cache, 0, 4, 30);  // expert 4: rank 0, wants F
    auto r = cache->Admit(0, 4, kAllParts);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->state, CompressionState::kF);
    f_residents[CachePolicyName(policy)] = cache->Residents(0, Pool::kF);
  }
  EXPECT_THAT(f_residents["zipmoe"], ElementsAre(0, 4)) << "zipmoe: the least frequent (1) leaves";
  EXPECT_THAT(f_residents["lru"], ElementsAre(1, 4)) << "lru: the least recently used (0) leaves";

  CacheConfig full;
  full.policy = CachePolicy::kFullLoad;
  full.plan.capacity = {{2, 1, 0, 0}};
  full.pools = "FC";
  full.pools_from_plan = true;
  full.budget_bytes = PlanBytes(m, full.plan);
  auto refused = CacheManager::Create(m, full);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("full-load"), std::string::npos) << refused.status().ToString();
}

TEST(CacheManagerTest, PoolSubsets) {
  const Manifest m = MakeManifest(1, 6, 512, 2);
  {  // Λ = S only: ranks 0-2 -> S.
    CacheConfig config;
    config.pools = "S";
    config.plan.capacity = {{0, 0, 3, 0}};
    auto cache = MakeCache(m, config);
    ASSERT_NE(cache, nullptr);
    EXPECT_THAT(cache->Thresholds(0), ElementsAre(0, 0, 3, 0));
    for (int e = 0; e < 6; ++e) Activate(*cache, 0, e, 6 - e);
    for (int e = 0; e < 6; ++e) ASSERT_TRUE(cache->Admit(0, e, kAllParts).ok());
    EXPECT_THAT(cache->Residents(0, Pool::kS), ElementsAre(0, 1, 2));
    EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kF)].capacity_bytes, 0u);
  }
  {  // Λ = E: an expert whose E-chunks were not kept cannot be admitted.
    CacheConfig config;
    config.pools = "e";
    config.plan.capacity = {{0, 0, 0, 2}};
    auto cache = MakeCache(m, config);
    ASSERT_NE(cache, nullptr);
    Activate(*cache, 0, 4, 1);
    EXPECT_EQ(cache->Admit(0, 4, AvailableParts{false, true, true})->outcome, AdmitOutcome::kDropped);
    EXPECT_EQ(cache->Admit(0, 4, AvailableParts{true, false, false})->state, CompressionState::kE);
  }
  {  // Λ = FS: τ_F = 1, τ_S = 3; C/E must have no capacity.
    CacheConfig config;
    config.pools = "SF";
    config.plan.capacity = {{1, 0, 2, 0}};
    auto cache = MakeCache(m, config);
    ASSERT_NE(cache, nullptr);
    EXPECT_THAT(cache->Thresholds(0), ElementsAre(1, 0, 3, 0));
    config.plan.capacity = {{1, 1, 2, 0}};
    auto bad = CacheManager::Create(m, config);
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr("pool C"));
  }
}

TEST(CacheManagerTest, MovesBetweenPoolsCopyTheRightBytes) {
  const Manifest m = MakeManifest(1, 6, 700, 2);
  CacheConfig config;
  config.shm_name = UniqueShmName("moves");
  config.plan.capacity = {{1, 1, 1, 1}};  // τ = (1, 2, 3, 4)
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  ASSERT_NE(cache->arena_base(), nullptr);
  const int x = 5;
  const ExpertBytes bytes(*cache->layout().Find(0, x));
  const ExpertSources sources = bytes.Sources();
  for (int e = 0; e < 5; ++e) Activate(*cache, 0, e, 10 * (5 - e));  // 50, 40, 30, 20, 10
  Activate(*cache, 0, x, 25);                                        // rank 3 -> E
  auto r = cache->Admit(0, x, AvailableParts{true, true, false}, sources);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->state, CompressionState::kE);

  Activate(*cache, 0, x, 10);  // 35: rank 2 -> S, from the caller's SM bytes
  EXPECT_EQ(cache->Admit(0, x, AvailableParts{false, true, false}, sources)->outcome, AdmitOutcome::kMoved);
  EXPECT_EQ(cache->Peek(0, x), CompressionState::kS);

  // Hold a lease on the S copy while x moves on: the old slot stays valid until released.
  auto held = cache->Lookup(0, x);  // 36
  ASSERT_TRUE(held.ok());
  EXPECT_TRUE(bytes.Matches(*held));
  Activate(*cache, 0, x, 8);  // 44: rank 1 -> C = E-chunks from the caller + SM from the S slot
  auto moved = cache->Admit(0, x, AvailableParts{true, false, false}, sources);
  EXPECT_EQ(moved->outcome, AdmitOutcome::kMoved);
  EXPECT_EQ(moved->state, CompressionState::kC);
  EXPECT_TRUE(bytes.Matches(*held)) << "a pinned slot must keep its bytes";
  const uint64_t s_stride = AlignSlotBytes(cache->layout().slot_bytes(Pool::kS));
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kS)].resident_bytes, s_stride);  // retired, still held
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kS)].resident_experts, 0u);
  held->lease.Release();
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kS)].resident_bytes, 0u);
  {
    auto c = cache->Lookup(0, x);  // 45
    ASSERT_EQ(c->state, CompressionState::kC);
    EXPECT_TRUE(bytes.Matches(*c));
    EXPECT_EQ(c->slot_offset % kSlotAlignmentBytes, 0u);
  }
  Activate(*cache, 0, x, 10);  // 55: rank 0 -> F, but no BF16 offered: stays in C
  EXPECT_EQ(cache->Admit(0, x, AvailableParts{}, sources)->outcome, AdmitOutcome::kStayed);
  EXPECT_EQ(cache->Admit(0, x, AvailableParts{false, false, true}, sources)->state, CompressionState::kF);
  {
    auto f = cache->Lookup(0, x);
    ASSERT_EQ(f->state, CompressionState::kF);
    EXPECT_TRUE(bytes.Matches(*f));
  }
  for (int e = 0; e < 5; ++e) Activate(*cache, 0, e, 100);  // x falls to rank 5: past τ_E = 4
  auto removed = cache->Admit(0, x, kAllParts, sources);
  EXPECT_EQ(removed->outcome, AdmitOutcome::kRemoved);
  EXPECT_EQ(cache->Peek(0, x), CompressionState::kMiss);
  EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kF)].resident_bytes, 0u);
}

TEST(CacheManagerTest, AdmitRequiresSourcesInBackedArena) {
  const Manifest m = MakeManifest(1, 2, 512, 2);
  CacheConfig config;
  config.shm_name = UniqueShmName("sources");
  config.plan.capacity = {{1, 0, 0, 0}};
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  auto r = cache->Admit(0, 0, kAllParts);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("expert 0"));
  EXPECT_EQ(cache->Admit(0, 9, kAllParts).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->Lookup(3, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheManagerTest, CountersPerPoolAndLayer) {
  const Manifest m = MakeManifest(2, 4, 512, 2);
  CacheConfig config;
  config.plan.capacity = {{1, 0, 1, 0}, {0, 0, 1, 0}};
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  Activate(*cache, 0, 2, 3);  // 3 misses in layer 0
  ASSERT_EQ(cache->Admit(0, 2, kAllParts)->state, CompressionState::kF);
  Activate(*cache, 0, 1, 1);  // miss
  ASSERT_EQ(cache->Admit(0, 1, kAllParts)->state, CompressionState::kS);
  Activate(*cache, 0, 2, 2);  // 2 F hits
  Activate(*cache, 0, 1, 1);  // 1 S hit
  Activate(*cache, 1, 0, 1);  // layer 1 miss
  const CacheCounters c = cache->Counters();
  EXPECT_EQ(c.lookups, 8u);
  EXPECT_EQ(c.misses, 5u);
  EXPECT_EQ(c.HitsTotal(), 3u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].requests, 2u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kS)].requests, 1u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].admissions, 1u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kS)].resident_experts, 1u);
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].resident_bytes, AlignSlotBytes(cache->layout().slot_bytes(Pool::kF)));
  EXPECT_EQ(c.pools[PoolIndex(Pool::kS)].capacity_bytes, 2 * AlignSlotBytes(cache->layout().slot_bytes(Pool::kS)));
  ASSERT_EQ(c.layer_requests.size(), 2u);
  EXPECT_THAT(c.layer_requests[0], ElementsAre(4, 0, 1, 0, 2));  // M E S C F
  EXPECT_THAT(c.layer_requests[1], ElementsAre(1, 0, 0, 0, 0));
  EXPECT_EQ(cache->Frequency(0, 2), 5u);
  EXPECT_THAT(cache->SortedCounts(0), ElementsAre(5, 2, 0, 0));
  cache->ResetCounters();
  const CacheCounters z = cache->Counters();
  EXPECT_EQ(z.lookups, 0u);
  EXPECT_EQ(z.pools[PoolIndex(Pool::kF)].requests, 0u);
  EXPECT_EQ(z.pools[PoolIndex(Pool::kF)].resident_experts, 1u) << "residency is not a counter";
  EXPECT_EQ(cache->Frequency(0, 2), 5u);
}

TEST(CacheManagerTest, InvalidConfigs) {
  const Manifest m = MakeManifest(2, 4, 512, 2);
  auto create = [&](CacheConfig c) { return CacheManager::Create(m, c).status(); };
  CacheConfig base;
  base.plan.capacity = {{1, 1, 0, 0}, {0, 0, 0, 1}};
  base.budget_bytes = PlanBytes(m, base.plan);
  EXPECT_TRUE(create(base).ok());

  CacheConfig rows = base;
  rows.plan.capacity.pop_back();
  EXPECT_THAT(create(rows).message(), HasSubstr("1 layer rows"));
  CacheConfig too_many = base;
  too_many.plan.capacity[0] = {2, 2, 1, 0};
  too_many.budget_bytes = 1ull << 30;
  EXPECT_THAT(create(too_many).message(), HasSubstr("pools hold 5 experts, the layer has 4"));
  CacheConfig budget = base;
  budget.budget_bytes -= 1;
  EXPECT_EQ(create(budget).code(), StatusCode::kInvalidArgument);
  CacheConfig negative = base;
  negative.plan.capacity[1][3] = -1;
  EXPECT_EQ(create(negative).code(), StatusCode::kInvalidArgument);
  CacheConfig tol = base;
  tol.tolerance = -1;
  EXPECT_EQ(create(tol).code(), StatusCode::kInvalidArgument);
  CacheConfig pools = base;
  pools.pools = "FX";
  EXPECT_EQ(create(pools).code(), StatusCode::kInvalidArgument);
  pools.pools = "FF";
  EXPECT_EQ(create(pools).code(), StatusCode::kInvalidArgument);

  EXPECT_EQ(*ParseCachePolicy("full-load"), CachePolicy::kFullLoad);
  EXPECT_EQ(*ParseCachePolicy("lfu"), CachePolicy::kLfu);
  EXPECT_EQ(*ParseCachePolicy("marking"), CachePolicy::kMarking);
  EXPECT_STREQ(CachePolicyName(CachePolicy::kMarking), "marking");
  EXPECT_EQ(ParseCachePolicy("arc").status().code(), StatusCode::kInvalidArgument);
}

TEST(CacheManagerTest, HostRegistrationOfTheArena) {
  const Manifest m = MakeManifest(1, 2, 512, 2);
  CacheConfig config;
  config.shm_name = UniqueShmName("cuda");
  config.plan.capacity = {{1, 0, 0, 0}};
  config.register_with_cuda = true;
  config.budget_bytes = PlanBytes(m, config.plan);
  auto cache = CacheManager::Create(m, config);
  if (!kernels::BuiltWithCuda() || kernels::CudaDeviceCount() == 0) {
    ASSERT_FALSE(cache.ok());
    EXPECT_EQ(cache.status().code(), StatusCode::kUnavailable) << cache.status().ToString();
    uint8_t byte = 0;
    EXPECT_EQ(kernels::HostRegistration::Register(&byte, 1).status().code(), StatusCode::kUnavailable);
    EXPECT_EQ(kernels::HostRegistration::Register(nullptr, 1).status().code(), StatusCode::kInvalidArgument);
    GTEST_SKIP() << "no CUDA device: registration reports kUnavailable";
  }
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  const kernels::HostRegistration* reg = (*cache)->host_registration();
  ASSERT_NE(reg, nullptr);
  EXPECT_NE(reg->device_ptr(), nullptr);
  EXPECT_EQ(reg->size_bytes(), (*cache)->arena_bytes());
  EXPECT_NE(reg->DevicePointerOf((*cache)->arena_base() + 4096), nullptr);
}

}  // namespace
}  // namespace zipmoe::cache_manager
