// Tests for services/cache_manager: slot layout from a manifest, rank-based pool dispatching with
// hand-computed thresholds (ZipMoE §3.4), eviction of the least frequent (ties LRU), tolerance δ,
// pins (never evicted: known case, seeded random operations, threads, death test), pool subsets Λ,
// moves between pools with byte checks, LRU/FIFO/LFU/full-load baselines on a hand-made sequence,
// Marking's invariants (only unmarked victims, phases, seeded determinism, pins),
// counters, config validation and CUDA host registration.
#include "services/cache_manager/cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/recovery.h"

namespace zipmoe::cache_manager {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string UniqueShmName(const char* tag) {
  static std::atomic<int> counter{0};
  return "/zipmoe-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag;
}

// E-chunk stored bytes of (layer, expert, proj, shard).
using EStoredFn = std::function<uint64_t(int32_t, int32_t, int, int)>;

// A manifest of n_layers × n_experts experts, each with gate/up/down of `numel` BF16 values, K
// E-chunks (stored sizes from `e_stored`) and one SM-chunk. File offsets are irrelevant here.
Manifest MakeManifest(int32_t n_layers, int32_t n_experts, int64_t numel, int32_t n_shards,
                      const EStoredFn& e_stored = nullptr) {
  Manifest m;
  m.n_layers = n_layers;
  m.n_experts = n_experts;
  m.n_shards = n_shards;
  for (int32_t l = 0; l < n_layers; ++l) {
    for (int32_t e = 0; e < n_experts; ++e) {
      for (int proj = 0; proj < kProjCount; ++proj) {
        ExpertTensorInfo t;
        t.name = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." +
                 ExpertProjName(static_cast<ExpertProj>(proj)) + ".weight";
        t.layer_id = l;
        t.expert_id = e;
        t.proj = static_cast<ExpertProj>(proj);
        t.shape = {numel};
        t.n_shards = n_shards;
        for (int k = 0; k < n_shards; ++k) {
          ChunkInfo c;
          c.kind = ChunkKind::kE;
          c.elem_offset = static_cast<uint64_t>(numel * k / n_shards);
          c.elem_count = static_cast<uint64_t>(numel * (k + 1) / n_shards) - c.elem_offset;
          c.raw_bytes = c.elem_count;
          c.stored_bytes = e_stored ? e_stored(l, e, proj, k) : c.elem_count / 3 + 1 + e;
          t.chunks.push_back(c);
        }
        ChunkInfo sm;
        sm.kind = ChunkKind::kSm;
        sm.elem_count = sm.raw_bytes = sm.stored_bytes = static_cast<uint64_t>(numel);
        t.chunks.push_back(sm);
        m.expert_tensors.push_back(t);
      }
    }
  }
  return m;
}

uint64_t PlanBytes(const Manifest& m, const CachePlan& plan) {
  auto layout = ModelLayout::FromManifest(m);
  EXPECT_TRUE(layout.ok());
  return layout->PlanBytes(plan);
}

// Deterministic bytes of every part of one expert, and ExpertSources pointing at them.
struct ExpertBytes {
  std::array<std::vector<std::vector<uint8_t>>, kProjCount> e;
  std::array<std::vector<uint8_t>, kProjCount> sm;
  std::array<std::vector<uint16_t>, kProjCount> bf16;

  ExpertBytes(const ExpertSlotLayout& layout) {
    const uint32_t seed = static_cast<uint32_t>(layout.layer_id * 1009 + layout.expert_id * 31 + 7);
    for (int p = 0; p < kProjCount; ++p) {
      const TensorSlotLayout& t = layout.tensors[p];
      for (size_t k = 0; k < t.e_chunks.size(); ++k) {
        e[p].emplace_back(t.e_chunks[k].bytes);
        for (size_t i = 0; i < e[p][k].size(); ++i) e[p][k][i] = static_cast<uint8_t>(seed + 3 * p + 5 * k + i);
      }
      sm[p].resize(t.numel);
      bf16[p].resize(t.numel);
      for (int64_t i = 0; i < t.numel; ++i) {
        sm[p][i] = static_cast<uint8_t>(seed * 7 + p + i * 13);
        bf16[p][i] = static_cast<uint16_t>(seed * 11 + p * 101 + i * 29);
      }
    }
  }
  ExpertSources Sources() const {
    ExpertSources s;
    for (int p = 0; p < kProjCount; ++p) {
      for (const auto& chunk : e[p]) s.e_chunks[p].push_back(chunk.data());
      s.sm[p] = sm[p].data();
      s.bf16[p] = bf16[p].data();
    }
    return s;
  }
  // True if every part `lookup` claims to cache holds this expert's bytes.
  bool Matches(const ExpertLookup& lookup) const {
    const CompressionState s = lookup.state;
    for (int p = 0; p < kProjCount; ++p) {
      const auto proj = static_cast<ExpertProj>(p);
      if (s == CompressionState::kC || s == CompressionState::kE) {
        for (size_t k = 0; k < e[p].size(); ++k) {
          const uint8_t* got = lookup.EChunk(proj, static_cast<int>(k));
          if (got == nullptr || std::memcmp(got, e[p][k].data(), e[p][k].size()) != 0) return false;
        }
      }
      if (s == CompressionState::kC || s == CompressionState::kS) {
        if (lookup.Sm(proj) == nullptr || std::memcmp(lookup.Sm(proj), sm[p].data(), sm[p].size()) != 0) return false;
      }
      if (s == CompressionState::kF) {
        if (lookup.Bf16(proj) == nullptr || std::memcmp(lookup.Bf16(proj), bf16[p].data(), 2 * bf16[p].size()) != 0) {
          return false;
        }
      }
    }
    return true;
  }
};

constexpr AvailableParts kAllParts{true, true, true};

// Looks (layer, expert) up `times` times, releasing each lease at once.
void Activate(CacheManager& cache, int32_t layer, int32_t expert, int times) {
  for (int i = 0; i < times; ++i) {
    auto lookup = cache.Lookup(layer, expert);
    ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  }
}

std::unique_ptr<CacheManager> MakeCache(const Manifest& m, CacheConfig config) {
  if (config.budget_bytes == 0 && config.policy == CachePolicy::kZipMoe) config.budget_bytes = PlanBytes(m, config.plan);
  auto cache = CacheManager::Create(m, config);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

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
