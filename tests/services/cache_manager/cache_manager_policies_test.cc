// Tests for services/cache_manager's other policies: DALI, SMoE and CoServe victims, DALI's plan,
// LRU/FIFO/LFU/full-load baselines on a hand-made sequence, Marking's invariants (only unmarked
// victims, phases, seeded determinism, pins) and the baselines' global capacity.
#include "services/cache_manager/cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kernels/recovery.h"
#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using ::testing::ElementsAre;
using test::MakeManifest;
using test::kAllParts;
using test::Activate;
using test::MakeCache;

TEST(CacheManagerTest, DaliReplacesTheLowestWorkloadAtMostUTimesPerWindow) {
  // One layer, an F pool of 2, a window of the last 4 lookups, u_size 1 (policies/dali.cc).
  const Manifest m = MakeManifest(1, 5, 512, 2);
  CacheConfig config;
  config.policy = CachePolicy::kDali;
  config.pools = "F";
  config.workload_window = 4;
  config.replacements_per_window = 1;
  ModelLayout layout = *ModelLayout::FromManifest(m);
  config.plan = DaliPlan(layout, 2 * AlignSlotBytes(layout.slot_bytes(Pool::kF)));
  ASSERT_EQ(config.plan.capacity[0][PoolIndex(Pool::kF)], 2);
  config.budget_bytes = 2 * AlignSlotBytes(layout.slot_bytes(Pool::kF));
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  EXPECT_TRUE(cache->per_layer_pools());
  // Lookups 1-4 (window 1): 0, 0, 0, 1; both fit.
  Activate(*cache, 0, 0, 3);
  EXPECT_EQ(cache->Admit(0, 0, kAllParts)->outcome, AdmitOutcome::kPlaced);
  Activate(*cache, 0, 1, 1);
  EXPECT_EQ(cache->Admit(0, 1, kAllParts)->outcome, AdmitOutcome::kPlaced);
  // Lookup 5 (window 2): 2. Window [0, 0, 1, 2]: scores 0→2, 1→1, 2→1; 2 is as busy as 1 and more
  // recent: it replaces 1 (the window's one replacement).
  Activate(*cache, 0, 2, 1);
  auto r = cache->Admit(0, 2, kAllParts);
  EXPECT_EQ(r->outcome, AdmitOutcome::kPlaced);
  EXPECT_EQ(r->evictions, 1);
  EXPECT_EQ(cache->Peek(0, 1), CompressionState::kMiss);
  EXPECT_EQ(cache->Peek(0, 0), CompressionState::kF);
  // Lookup 6: 3 (window [0, 1, 2, 3]: 0 and 2 score 1, 3 scores 1 and is the most recent), but the
  // window's replacement is spent: dropped.
  Activate(*cache, 0, 3, 1);
  EXPECT_EQ(cache->Admit(0, 3, kAllParts)->outcome, AdmitOutcome::kDropped);
  // Lookups 7, 8: 4, 4. Lookup 9 (window 3): 3. Window [3, 4, 4, 3]: 0 and 2 score 0, 0 is the least
  // recently used: 3 replaces it.
  Activate(*cache, 0, 4, 2);
  Activate(*cache, 0, 3, 1);
  r = cache->Admit(0, 3, kAllParts);
  EXPECT_EQ(r->outcome, AdmitOutcome::kPlaced);
  EXPECT_EQ(cache->Peek(0, 0), CompressionState::kMiss);
  EXPECT_EQ(cache->Peek(0, 2), CompressionState::kF);
  EXPECT_EQ(cache->Peek(0, 3), CompressionState::kF);
  // Window 4: the least busy resident leaves again.
  Activate(*cache, 0, 4, 3);  // lookups 10-12: window [3, 4, 4, 4]
  Activate(*cache, 0, 3, 1);  // lookup 13 (window 4): [4, 4, 4, 3]
  Activate(*cache, 0, 1, 1);  // lookup 14: [4, 4, 3, 1]: 1 scores 1, resident 2 scores 0: 1 replaces 2
  EXPECT_EQ(cache->Admit(0, 1, kAllParts)->outcome, AdmitOutcome::kPlaced);
  EXPECT_EQ(cache->Peek(0, 2), CompressionState::kMiss);
  EXPECT_EQ(ParseCachePolicy("dali").value(), CachePolicy::kDali);
}

// One step of a layer as the runtime drives it: the step's scores, then Lookup + Admit (BF16) of
// each selected expert. Returns 'H'/'M' per expert.
std::string Step(CacheManager& cache, int32_t layer, const std::vector<float>& scores, const std::vector<int32_t>& selected) {
  cache.ObserveScores(layer, scores);
  std::string pattern;
  for (int32_t e : selected) {
    auto lk = cache.Lookup(layer, e);
    EXPECT_TRUE(lk.ok());
    pattern += lk->state == CompressionState::kF ? 'H' : 'M';
    lk->lease.Release();
    EXPECT_TRUE(cache.Admit(layer, e, AvailableParts{false, false, true}).ok());
  }
  return pattern;
}

TEST(CacheManagerTest, SmoeEvictsTheLowestMeanScoreOverTheWindow) {
  // One layer of 6 experts, a global F pool of 2, scores averaged over the last 2 steps (smoe.cc).
  const Manifest m = MakeManifest(1, 6, 512, 2);
  auto layout = ModelLayout::FromManifest(m);
  CacheConfig config;
  config.policy = CachePolicy::kSmoe;
  config.score_window = 2;
  config.budget_bytes = 2 * AlignSlotBytes(layout->slot_bytes(Pool::kF)) + 100;
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  EXPECT_FALSE(cache->per_layer_pools());
  EXPECT_EQ(Step(*cache, 0, {0.5f, 0.3f, 0.1f, 0.05f, 0.05f, 0.0f}, {0}), "M");
  EXPECT_EQ(Step(*cache, 0, {0.1f, 0.6f, 0.1f, 0.1f, 0.1f, 0.0f}, {1}), "M");  // window: 0 → 0.30, 1 → 0.45
  // Step 3: expert 2 runs. Window (steps 2, 3): 0 → (0.1 + 0.1) / 2 = 0.1, 1 → (0.6 + 0.2) / 2 = 0.4.
  EXPECT_EQ(Step(*cache, 0, {0.1f, 0.2f, 0.5f, 0.1f, 0.1f, 0.0f}, {2}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{1, 2}));
  // Step 4: expert 0 runs; steps 3-4: 1 → (0.2 + 0.05) / 2 = 0.125, 2 → (0.5 + 0.4) / 2 = 0.45.
  EXPECT_EQ(Step(*cache, 0, {0.45f, 0.05f, 0.4f, 0.05f, 0.05f, 0.0f}, {0}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{0, 2}));
  // Step 5: expert 3 runs; steps 4-5: 0 → (0.45 + 0.05) / 2 = 0.25, 2 → (0.4 + 0.6) / 2 = 0.5. Expert 0
  // ran more recently than 2 (LRU would evict 2), yet it leaves: 2 scored high without running.
  EXPECT_EQ(Step(*cache, 0, {0.05f, 0.05f, 0.6f, 0.25f, 0.05f, 0.0f}, {3}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(ParseCachePolicy("smoe").value(), CachePolicy::kSmoe);
}

TEST(CacheManagerTest, CoServeEvictsExpertsNobodyDependsOnFirstThenTheLeastProbable) {
  // Two layers of 6 experts, a global F pool of 3 (coserve.cc). Steps alternate layer 0, layer 1.
  const Manifest m = MakeManifest(2, 6, 512, 2);
  auto layout = ModelLayout::FromManifest(m);
  CacheConfig config;
  config.policy = CachePolicy::kCoServe;
  config.budget_bytes = 3 * AlignSlotBytes(layout->slot_bytes(Pool::kF)) + 100;
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  const std::vector<float> none(6, 0.0f);
  // Usage counts from a profiling trace: layer 0 expert 0 is the most used, expert 1 the least.
  ASSERT_TRUE(cache->SeedFrequencies(0, {9, 0, 5, 0, 0, 0}).ok());
  // Token 1: layer 0 selects {0, 1}, layer 1 selects {4}. The pool is full: 0, 1 (layer 0), 4 (layer 1).
  EXPECT_EQ(Step(*cache, 0, none, {0, 1}), "MM");
  EXPECT_EQ(Step(*cache, 1, none, {4}), "M");
  // Token 2, layer 0 selects {2}. Depended on: 4 (selected in layer 1's latest step); 0 and 1 were
  // selected in layer 0's previous step, not in this one. Stage 1 among 0 and 1, the least probable
  // leaves: 1 (count 0 + 1 of layer 0's 3 lookups) before 0 (9 + 1).
  EXPECT_EQ(Step(*cache, 0, none, {2}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(cache->Residents(1, Pool::kF), (std::vector<int32_t>{4}));
  // Token 2, layer 1 selects {5}. Depended on: 2 (layer 0's latest step). Stage 1: 0 (10 of 3
  // lookups) and 4 (1 of layer 1's 2 lookups): 4 leaves, although LRU would evict 0.
  EXPECT_EQ(Step(*cache, 1, none, {5}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(cache->Residents(1, Pool::kF), (std::vector<int32_t>{5}));
  // Token 3, layer 0 selects {3}. Depended on: 5 (layer 1's latest step), though its probability
  // (1 of 2 = 0.5) is the lowest of all. Stage 1: 2 (6 of 4 lookups = 1.5) leaves before 0 (2.5).
  EXPECT_EQ(Step(*cache, 0, none, {3}), "M");
  EXPECT_EQ(cache->Residents(0, Pool::kF), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(cache->Residents(1, Pool::kF), (std::vector<int32_t>{5}));
  EXPECT_EQ(ParseCachePolicy("coserve").value(), CachePolicy::kCoServe);
}

TEST(CacheManagerTest, DaliPlanSharesTheFSlotsEquallyByLayer) {
  const Manifest m = MakeManifest(3, 4, 512, 2);
  ModelLayout layout = *ModelLayout::FromManifest(m);
  const uint64_t stride = AlignSlotBytes(layout.slot_bytes(Pool::kF));
  CachePlan plan = DaliPlan(layout, 7 * stride + stride / 2);  // 7 slots over 3 layers: 3, 2, 2
  EXPECT_EQ(plan.capacity[0][PoolIndex(Pool::kF)], 3);
  EXPECT_EQ(plan.capacity[1][PoolIndex(Pool::kF)], 2);
  EXPECT_EQ(plan.capacity[2][PoolIndex(Pool::kF)], 2);
  plan = DaliPlan(layout, 100 * stride);  // at most a layer's experts
  EXPECT_EQ(plan.capacity[1][PoolIndex(Pool::kF)], 4);
  EXPECT_EQ(plan.capacity[1][PoolIndex(Pool::kC)], 0);
}

// Baselines on the access sequence 0 1 2 0 3 0 4 1 0 2 5 1 with room for 3 experts; every access is a
// Lookup (H/M) followed by Admit with the BF16 tensors. Worked by hand:
//   LRU : M M M H M H M M H M M M, ends with {1, 2, 5}
//   FIFO: M M M H M M M M H M M H, ends with {1, 2, 5}
//   LFU : M M M H M H M M H M M M, ends with {0, 1, 2} (counts 0:4 1:3 2:2; ties least recent)
struct BaselineCase {
  CachePolicy policy;
  std::string pattern;
  std::vector<int32_t> final_residents;
};

class BaselineTest : public ::testing::TestWithParam<BaselineCase> {};

TEST_P(BaselineTest, KnownAnswerOnHandMadeSequence) {
  const BaselineCase& want = GetParam();
  const Manifest m = MakeManifest(1, 6, 512, 2);
  auto layout = ModelLayout::FromManifest(m);
  CacheConfig config;
  config.policy = want.policy;
  config.budget_bytes = 3 * AlignSlotBytes(layout->slot_bytes(Pool::kF)) + 100;  // room for 3, not 4
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  std::string pattern;
  for (int e : {0, 1, 2, 0, 3, 0, 4, 1, 0, 2, 5, 1}) {
    auto lk = cache->Lookup(0, e);
    ASSERT_TRUE(lk.ok());
    pattern += lk->state == CompressionState::kF ? 'H' : (lk->state == CompressionState::kMiss ? 'M' : '?');
    lk->lease.Release();
    ASSERT_TRUE(cache->Admit(0, e, AvailableParts{false, false, true}).ok());
  }
  EXPECT_EQ(pattern, want.pattern) << CachePolicyName(want.policy);
  EXPECT_EQ(cache->Residents(0, Pool::kF), want.final_residents) << CachePolicyName(want.policy);
  const CacheCounters c = cache->Counters();
  const auto hits = static_cast<uint64_t>(std::count(want.pattern.begin(), want.pattern.end(), 'H'));
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].requests, hits);
  EXPECT_EQ(c.misses, 12 - hits);
  const uint64_t slots = want.policy == CachePolicy::kFullLoad ? 0 : 3;
  EXPECT_EQ(c.pools[PoolIndex(Pool::kF)].capacity_bytes, slots * AlignSlotBytes(layout->slot_bytes(Pool::kF)));
}

INSTANTIATE_TEST_SUITE_P(
    Policies, BaselineTest,
    ::testing::Values(BaselineCase{CachePolicy::kLru, "MMMHMHMMHMMM", {1, 2, 5}},
                      BaselineCase{CachePolicy::kFifo, "MMMHMMMMHMMH", {1, 2, 5}},
                      BaselineCase{CachePolicy::kLfu, "MMMHMHMMHMMM", {0, 1, 2}},
                      BaselineCase{CachePolicy::kFullLoad, "MMMMMMMMMMMM", {}}),
    [](const ::testing::TestParamInfo<BaselineCase>& info) {
      std::string name = CachePolicyName(info.param.policy);
      name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
      return name;
    });

// Marking (Fiat et al. 1991) on a cache of 3: the victim is random, so these tests check the
// algorithm's invariants rather than one seed's draws.
class MarkingTest : public ::testing::Test {
 protected:
  std::unique_ptr<CacheManager> Make(uint64_t seed, int slots = 3) {
    m_ = MakeManifest(1, 8, 512, 1);
    auto layout = ModelLayout::FromManifest(m_);
    CacheConfig config;
    config.policy = CachePolicy::kMarking;
    config.marking_seed = seed;
    config.budget_bytes = slots * AlignSlotBytes(layout->slot_bytes(Pool::kF)) + 100;
    return MakeCache(m_, config);
  }
  // Lookup + Admit with the BF16 tensors; 'H' or 'M'.
  static char Access(CacheManager& cache, int32_t e) {
    auto lk = cache.Lookup(0, e);
    EXPECT_TRUE(lk.ok());
    const char c = lk->state == CompressionState::kF ? 'H' : 'M';
    lk->lease.Release();
    EXPECT_TRUE(cache.Admit(0, e, AvailableParts{false, false, true}).ok());
    return c;
  }
  Manifest m_;
};

TEST_F(MarkingTest, EvictsOnlyUnmarkedAndStartsANewPhaseWhenAllAreMarked) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto cache = Make(seed);
    ASSERT_NE(cache, nullptr);
    std::string pattern;
    for (int e : {0, 1, 2, 0}) pattern += Access(*cache, e);
    EXPECT_EQ(pattern, "MMMH");
    // 0, 1, 2 are all marked: 3's miss starts a new phase and evicts one of them at random.
    EXPECT_EQ(Access(*cache, 3), 'M');
    std::vector<int32_t> residents = cache->Residents(0, Pool::kF);
    ASSERT_EQ(residents.size(), 3u);
    ASSERT_TRUE(std::count(residents.begin(), residents.end(), 3));
    std::vector<int32_t> old;
    for (int32_t e : residents) {
      if (e != 3) old.push_back(e);
    }
    ASSERT_EQ(old.size(), 2u);
    // Marked now: {3}. A hit marks old[0]; the next miss must evict the only unmarked one, old[1].
    EXPECT_EQ(Access(*cache, old[0]), 'H');
    EXPECT_EQ(Access(*cache, 4), 'M');
    std::vector<int32_t> want = {3, 4, old[0]};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(cache->Residents(0, Pool::kF), want) << "seed " << seed;
    EXPECT_EQ(cache->Counters().pools[PoolIndex(Pool::kF)].evictions, 2u);
  }
}

TEST_F(MarkingTest, SameSeedSameVictimsAndEveryCandidateIsDrawn) {
  std::vector<int> drawn(3, 0);
  std::vector<std::vector<int32_t>> finals;
  for (uint64_t seed = 0; seed < 32; ++seed) {
    std::vector<int32_t> first_victims;
    std::vector<int32_t> final_residents;
    for (int run = 0; run < 2; ++run) {
      auto cache = Make(seed);
      ASSERT_NE(cache, nullptr);
      for (int e : {0, 1, 2, 3}) Access(*cache, e);
      std::vector<int32_t> r = cache->Residents(0, Pool::kF);
      int32_t victim = -1;
      for (int32_t e : {0, 1, 2}) {
        if (!std::count(r.begin(), r.end(), e)) victim = e;
      }
      ASSERT_GE(victim, 0);
      std::mt19937 rng(static_cast<uint32_t>(seed));  // the access sequence, not the cache's draws
      for (int i = 0; i < 200; ++i) Access(*cache, static_cast<int32_t>(rng() % 8));
      if (run == 0) {
        ++drawn[victim];
        first_victims.push_back(victim);
        final_residents = cache->Residents(0, Pool::kF);
      } else {
        EXPECT_EQ(victim, first_victims[0]) << "seed " << seed;
        EXPECT_EQ(cache->Residents(0, Pool::kF), final_residents) << "seed " << seed;
      }
    }
  }
  for (int e = 0; e < 3; ++e) EXPECT_GT(drawn[e], 0) << "expert " << e << " was never the victim in 32 seeds";
}

TEST_F(MarkingTest, PinnedUnmarkedExpertIsNeverEvicted) {
  auto cache = Make(7, 2);
  ASSERT_NE(cache, nullptr);
  Access(*cache, 0);
  Access(*cache, 1);
  Access(*cache, 2);  // new phase: one of 0/1 evicted, 2 marked
  std::vector<int32_t> r = cache->Residents(0, Pool::kF);
  ASSERT_EQ(r.size(), 2u);
  const int32_t old = r[0] == 2 ? r[1] : r[0];
  // Pin the unmarked survivor through a Lookup... which also marks it; so every resident is marked
  // and the next miss starts a new phase in which only the unpinned expert 2 can go.
  auto lk = cache->Lookup(0, old);
  ASSERT_TRUE(lk.ok());
  ASSERT_EQ(lk->state, CompressionState::kF);
  EXPECT_EQ(Access(*cache, 5), 'M');
  EXPECT_THAT(cache->Residents(0, Pool::kF), ElementsAre(old, 5));
  // The new phase unmarked `old`, but it is pinned; 5 is marked: 6 finds no victim and is dropped.
  const uint64_t skips = cache->Counters().pinned_skips;
  EXPECT_EQ(Access(*cache, 6), 'M');
  EXPECT_THAT(cache->Residents(0, Pool::kF), ElementsAre(old, 5));
  EXPECT_EQ(cache->Counters().pinned_skips, skips + 1);
  lk->lease.Release();
  EXPECT_EQ(cache->LivePins(), 0u);
}

TEST(CacheManagerTest, BaselineCapacityIsGlobalAcrossLayers) {
  const Manifest m = MakeManifest(2, 4, 512, 1);
  auto layout = ModelLayout::FromManifest(m);
  CacheConfig config;
  config.policy = CachePolicy::kLru;
  config.budget_bytes = 2 * AlignSlotBytes(layout->slot_bytes(Pool::kF));
  auto cache = MakeCache(m, config);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Capacity(0, Pool::kF), 2);
  for (auto [l, e] : std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 3}}) {
    Activate(*cache, l, e, 1);
    ASSERT_TRUE(cache->Admit(l, e, AvailableParts{false, false, true}).ok());
  }
  EXPECT_THAT(cache->Residents(0, Pool::kF), ElementsAre(1));  // layer 0's LRU expert made room
  EXPECT_THAT(cache->Residents(1, Pool::kF), ElementsAre(3));
}

}  // namespace
}  // namespace zipmoe::cache_manager
