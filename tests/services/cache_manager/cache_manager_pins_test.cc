// Tests for services/cache_manager's pins: a pinned slot is never evicted (known case, seeded random
// operations, threads), a pin records no activation, and a lease outliving the manager aborts.
#include "services/cache_manager/cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "kernels/recovery.h"
#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::UniqueShmName;
using test::MakeManifest;
using test::PlanBytes;
using test::ExpertBytes;
using test::kAllParts;
using test::Activate;
using test::MakeCache;

TEST(CacheManagerTest, PinnedSlotIsNeverEvictedAndAdmissionSkips) {
  const Manifest m = MakeManifest(1, 3, 512, 2);
  CacheConfig config;
  config.plan.capacity = {{1, 0, 0, 0}};
  config.pools = "F";
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  Activate(*cache, 0, 0, 1);
  ASSERT_EQ(cache->Admit(0, 0, kAllParts)->state, CompressionState::kF);
  {
    auto pinned = cache->Lookup(0, 0);
    ASSERT_TRUE(pinned.ok());
    EXPECT_EQ(pinned->state, CompressionState::kF);
    EXPECT_TRUE(pinned->lease.valid());
    EXPECT_EQ(cache->LivePins(), 1u);
    Activate(*cache, 0, 1, 5);  // expert 1 now outranks expert 0
    auto r = cache->Admit(0, 1, kAllParts);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->outcome, AdmitOutcome::kDropped);
    EXPECT_EQ(r->pinned_skips, 1);
    EXPECT_EQ(cache->Peek(0, 0), CompressionState::kF);
    EXPECT_EQ(cache->Counters().pinned_skips, 1u);
  }
  EXPECT_EQ(cache->LivePins(), 0u);
  auto r = cache->Admit(0, 1, kAllParts);  // the pin is gone: now the least frequent is evicted
  EXPECT_EQ(r->state, CompressionState::kF);
  EXPECT_EQ(r->evictions, 1);
  EXPECT_EQ(cache->Peek(0, 0), CompressionState::kMiss);
}

TEST(CacheManagerTest, PinHoldsTheSlotButRecordsNoActivation) {
  // A prefetch's pin (CacheManager::Pin): the slot survives a higher-ranked newcomer, while the
  // expert's count, last use and the request counters stay as they were.
  const Manifest m = MakeManifest(1, 3, 512, 2);
  CacheConfig config;
  config.plan.capacity = {{1, 0, 0, 0}};
  config.pools = "F";
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  Activate(*cache, 0, 0, 2);
  ASSERT_EQ(cache->Admit(0, 0, kAllParts)->state, CompressionState::kF);
  const CacheCounters before = cache->Counters();
  {
    auto pinned = cache->Pin(0, 0);
    ASSERT_TRUE(pinned.ok());
    EXPECT_EQ(pinned->state, CompressionState::kF);
    EXPECT_TRUE(pinned->lease.valid());
    auto miss = cache->Pin(0, 2);
    ASSERT_TRUE(miss.ok());
    EXPECT_EQ(miss->state, CompressionState::kMiss);
    EXPECT_FALSE(miss->lease.valid());
    EXPECT_EQ(cache->Frequency(0, 0), 2u);
    EXPECT_EQ(cache->Frequency(0, 2), 0u);
    EXPECT_EQ(cache->Counters().lookups, before.lookups);
    EXPECT_EQ(cache->Counters().misses, before.misses);
    Activate(*cache, 0, 1, 5);  // outranks expert 0, but expert 0 is pinned
    EXPECT_EQ(cache->Admit(0, 1, kAllParts)->outcome, AdmitOutcome::kDropped);
    EXPECT_EQ(cache->Peek(0, 0), CompressionState::kF);
  }
  EXPECT_EQ(cache->LivePins(), 0u);
  EXPECT_FALSE(cache->Pin(0, 9).ok());
}

// Seeded random Lookups (leases kept or dropped), Admits with random parts, and releases, on a
// backed arena. After every operation: every held lease still sees its expert's bytes; a leased
// expert not admitted since is still in the pool it was found in (never evicted); pins and
// occupancy are accounted; the arena never exceeds the budget.
TEST(CacheManagerTest, RandomOperationsNeverEvictPinnedSlots) {
  const int32_t n_layers = 2, n_experts = 8;
  const Manifest m = MakeManifest(n_layers, n_experts, 700, 2);
  CacheConfig config;
  config.shm_name = UniqueShmName("random");
  config.plan.capacity = {{1, 1, 2, 1}, {2, 0, 1, 2}};
  config.tolerance = 1;
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  std::map<std::pair<int, int>, ExpertBytes> bytes;
  for (int l = 0; l < n_layers; ++l)
    for (int e = 0; e < n_experts; ++e) bytes.emplace(std::make_pair(l, e), ExpertBytes(*cache->layout().Find(l, e)));

  struct Held {
    ExpertLookup lookup;
    bool admitted_since = false;
  };
  std::vector<Held> held;
  std::mt19937 rng(7);
  std::geometric_distribution<int> skew(0.35);
  uint64_t pinned_skips_seen = 0;
  for (int step = 0; step < 6000; ++step) {
    const int l = static_cast<int>(rng() % n_layers);
    const int e = std::min(skew(rng), n_experts - 1);
    const int op = static_cast<int>(rng() % 100);
    if (op < 45) {
      auto lk = cache->Lookup(l, e);
      ASSERT_TRUE(lk.ok());
      ASSERT_TRUE(bytes.at({l, e}).Matches(*lk)) << "step " << step;
      if (rng() % 2 == 0) held.push_back({std::move(*lk), false});
    } else if (op < 80) {
      const AvailableParts parts{rng() % 2 == 0, rng() % 2 == 0, rng() % 2 == 0};
      auto r = cache->Admit(l, e, parts, bytes.at({l, e}).Sources());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      pinned_skips_seen += static_cast<uint64_t>(r->pinned_skips);
      for (Held& h : held) {
        if (h.lookup.layer_id == l && h.lookup.expert_id == e) h.admitted_since = true;
      }
    } else if (!held.empty()) {
      held.erase(held.begin() + static_cast<long>(rng() % held.size()));
    }

    uint64_t pins = 0;
    for (const Held& h : held) {
      ASSERT_TRUE(bytes.at({h.lookup.layer_id, h.lookup.expert_id}).Matches(h.lookup)) << "step " << step;
      if (h.lookup.state == CompressionState::kMiss) continue;
      ++pins;
      if (!h.admitted_since) {
        ASSERT_EQ(cache->Peek(h.lookup.layer_id, h.lookup.expert_id), h.lookup.state)
            << "step " << step << ": pinned expert " << h.lookup.expert_id << " of layer " << h.lookup.layer_id
            << " left its pool";
      }
    }
    ASSERT_EQ(cache->LivePins(), pins);
    const CacheCounters c = cache->Counters();
    uint64_t resident = 0;
    for (Pool p : kPoolOrder) {
      resident += c.pools[PoolIndex(p)].resident_bytes;
      ASSERT_LE(c.pools[PoolIndex(p)].resident_bytes, c.pools[PoolIndex(p)].capacity_bytes);
      for (int ll = 0; ll < n_layers; ++ll) {
        ASSERT_LE(static_cast<int32_t>(cache->Residents(ll, p).size()), cache->Capacity(ll, p));
      }
    }
    ASSERT_LE(resident, cache->arena_bytes());
    ASSERT_LE(cache->arena_bytes(), config.budget_bytes == 0 ? PlanBytes(m, config.plan) : config.budget_bytes);
  }
  EXPECT_GT(pinned_skips_seen, 0u) << "the sequence should have met pinned pools";
  held.clear();
  EXPECT_EQ(cache->LivePins(), 0u);
  const CacheCounters c = cache->Counters();
  for (Pool p : kPoolOrder) {  // no retired slot outlives its last lease
    EXPECT_EQ(c.pools[PoolIndex(p)].resident_bytes,
              c.pools[PoolIndex(p)].resident_experts * AlignSlotBytes(cache->layout().slot_bytes(p)));
  }
}

TEST(CacheManagerTest, ConcurrentLookupsAndAdmitsKeepBytesAndPins) {
  const Manifest m = MakeManifest(1, 8, 600, 2);
  CacheConfig config;
  config.shm_name = UniqueShmName("threads");
  config.plan.capacity = {{1, 1, 2, 1}};
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  std::vector<ExpertBytes> bytes;
  for (int e = 0; e < 8; ++e) bytes.emplace_back(*cache->layout().Find(0, e));
  std::atomic<int> failures{0};
  auto worker = [&](uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<ExpertLookup> layer;  // leases held for one "layer", then dropped
    for (int i = 0; i < 1500; ++i) {
      const int e = static_cast<int>(rng() % 8);
      auto lk = cache->Lookup(0, e);
      if (!lk.ok() || !bytes[e].Matches(*lk)) ++failures;
      if (lk.ok()) layer.push_back(std::move(*lk));
      auto r = cache->Admit(0, e, kAllParts, bytes[e].Sources());
      if (!r.ok()) ++failures;
      for (const ExpertLookup& h : layer) {
        if (!bytes[h.expert_id].Matches(h)) ++failures;
      }
      if (layer.size() >= 3) layer.clear();
    }
  };
  std::thread a(worker, 1), b(worker, 2), c(worker, 3);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cache->LivePins(), 0u);
  for (int e = 0; e < 8; ++e) {
    auto lk = cache->Lookup(0, e);
    EXPECT_TRUE(bytes[e].Matches(*lk)) << e;
  }
}

TEST(CacheManagerDeathTest, LeaseOutlivingTheManagerAborts) {
  const Manifest m = MakeManifest(1, 2, 512, 1);
  CacheConfig config;
  config.plan.capacity = {{1, 0, 0, 0}};
  EXPECT_DEATH(
      {
        auto cache = MakeCache(m, config);
        Activate(*cache, 0, 0, 1);
        (void)cache->Admit(0, 0, kAllParts);
        auto lk = cache->Lookup(0, 0);
        SlotLease leaked = std::move(lk->lease);
        cache.reset();  // the lease is still alive
      },
      "outlive their CacheManager");
}

}  // namespace
}  // namespace zipmoe::cache_manager
