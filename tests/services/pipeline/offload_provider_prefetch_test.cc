// OffloadExpertProvider's prefetch, driven directly: prefetched experts are adopted by their layer
// with exact bytes, a prefetch touches no cache slot, cached experts decode ahead, no prefetch mode
// means no prefetch, a failed prefetch fails only the layer that selects its expert, and protocol
// misuse is an error.
#include "services/pipeline/offload_provider.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <set>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "common/checkpoint/expert_store.h"
#include "common/checkpoint/manifest.h"
#include "tests/services/pipeline/offload_provider_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

namespace cm = cache_manager;
using testing::TempDir;
using test::TinyCompressed;
using test::ExpertBytes;
using test::Expected;
using test::MakeRoutings;
using test::Drive;
using test::CorruptCopy;

// A prediction for `next`: `wrong` experts it did not select first, then those it selected.
LayerRouting Predict(const LayerRouting& next, int n_experts, int wrong) {
  LayerRouting p;
  p.layer_id = next.layer_id;
  const std::set<int32_t> chosen(next.expert_ids.begin(), next.expert_ids.end());
  for (int32_t e = n_experts - 1; e >= 0 && wrong > 0; --e) {
    if (chosen.count(e) == 0) {
      p.expert_ids.push_back(e);
      --wrong;
    }
  }
  p.expert_ids.insert(p.expert_ids.end(), next.expert_ids.begin(), next.expert_ids.end());
  return p;
}

TEST(OffloadProvider, PrefetchedExpertsAreAdoptedByTheirLayerAndServeExactBytes) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  const auto routings = MakeRoutings(m, 4, 6, 5);
  for (const char* policy : {"zipmoe", "lru", "full-load"}) {
    for (double share : {0.1, 0.4}) {
      for (bool fused : {false, true}) {
        SCOPED_TRACE(::testing::Message() << policy << " budget " << share << " fused " << fused);
        OffloadConfig config;
        config.model_dir = dir;
        config.memory_budget_bytes = static_cast<uint64_t>(share * ExpertBytes(m));
        config.policy = *cm::ParseCachePolicy(policy);
        config.n_workers = 2;
        config.fused_recovery = fused;
        config.prefetch = PrefetchMode::kTopScore;
        auto provider = OffloadExpertProvider::Create(config);
        ASSERT_TRUE(provider.ok()) << provider.status().ToString();
        OffloadExpertProvider& p = **provider;
        EXPECT_EQ(p.prefetch_mode(), PrefetchMode::kTopScore);
        Drive(p, routings, expected, [&](size_t i) {
          if (i + 1 < routings.size()) p.Prefetch(Predict(routings[i + 1], m.n_experts, 1));
        });
        const RuntimeStats s = p.stats();
        EXPECT_GT(s.prefetch.issued, 0u);
        EXPECT_GT(s.prefetch.used, 0u) << "no prefetch was adopted";
        EXPECT_GT(s.prefetch.wasted, 0u) << "a wrong prediction per layer must cost something";
        EXPECT_GT(s.prefetch.used_bytes, 0u);
        EXPECT_GT(s.prefetch.wasted_bytes, 0u);
        EXPECT_EQ(s.prefetch.failed, 0u);
        EXPECT_LE(s.prefetch.used + s.prefetch.wasted, s.prefetch.issued);
        EXPECT_LE(s.prefetch.used, s.cache.lookups - s.cache.pools[cm::PoolIndex(cm::Pool::kF)].requests)
            << "an adopted prefetch is a lookup not served from F";
        EXPECT_EQ(p.cache().LivePins(), 0u);
        EXPECT_LE(s.arena_bytes, config.memory_budget_bytes);
      }
    }
  }
}

TEST(OffloadProvider, APrefetchTouchesNoCacheSlot) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = static_cast<uint64_t>(0.3 * ExpertBytes(m));
  config.policy = cm::CachePolicy::kLru;
  config.prefetch = PrefetchMode::kTopScore;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  OffloadExpertProvider& p = **provider;
  Drive(p, MakeRoutings(m, 4, 3, 9), expected);  // fills the cache
  // Layer 0 is active and holds its experts; every expert of layer 1 is predicted.
  LayerRouting active{0, {0, 1, 2, 3}, {1, 1, 1, 1}};
  ASSERT_TRUE(p.BeginLayer(active).ok());
  const cm::CacheCounters before = p.cache().Counters();
  std::vector<uint64_t> freq_before;
  for (int e = 0; e < m.n_experts; ++e) freq_before.push_back(p.cache().Frequency(1, e));
  LayerRouting all{1, {}, {}};
  for (int e = 0; e < m.n_experts; ++e) all.expert_ids.push_back(e);
  p.Prefetch(all);
  // A prediction is not an activation: no frequency, no request counted.
  for (int e = 0; e < m.n_experts; ++e) EXPECT_EQ(p.cache().Frequency(1, e), freq_before[e]) << "expert " << e;
  EXPECT_EQ(p.cache().Counters().lookups, before.lookups);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p.NextReady().ok());
  ASSERT_TRUE(p.EndLayer(0).ok());
  const cm::CacheCounters after = p.cache().Counters();
  const int f = cm::PoolIndex(cm::Pool::kF);
  EXPECT_EQ(after.pools[f].evictions - before.pools[f].evictions,
            after.pools[f].admissions - before.pools[f].admissions)
      << "only layer 0's own admissions may evict";
  EXPECT_LE(p.stats().prefetch.issued, p.cache().staging_slots());
  // The next layer selects two of the predicted experts; the rest are dropped once read.
  Drive(p, {LayerRouting{1, {0, 5}, {1, 1}}}, expected);
  EXPECT_EQ(p.cache().LivePins(), 0u);
  const RuntimeStats s = p.stats();
  EXPECT_EQ(s.prefetch.predicted, static_cast<uint64_t>(m.n_experts));
  EXPECT_EQ(s.prefetch.used + s.prefetch.wasted, s.prefetch.issued);
}

TEST(OffloadProvider, PrefetchesOfCachedExpertsDecodeAheadAndAreAdopted) {
  // Every pool C: cached experts need their decodes only; a prefetch of one pins its C slot, decodes
  // it ahead (no read) and hands the planes over when its layer selects it.
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = ExpertBytes(m);
  config.pool_ratios = "C=1";
  config.pools = "C";
  config.n_workers = 2;
  config.fused_recovery = true;
  config.prefetch = PrefetchMode::kTopScore;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  OffloadExpertProvider& p = **provider;
  Drive(p, {LayerRouting{1, {0, 1, 2}, {1, 1, 1}}}, expected);  // layer 1's experts 0-2 land in C
  ASSERT_EQ(p.cache().Peek(1, 2), CompressionState::kC);
  const RuntimeStats before = p.stats();
  Drive(p, {LayerRouting{0, {4}, {1}}, LayerRouting{1, {2, 5}, {1, 1}}}, expected, [&](size_t i) {
    if (i == 0) p.Prefetch(LayerRouting{1, {2, 5}, {}});
  });
  const RuntimeStats s = p.stats();
  EXPECT_EQ(s.prefetch.used - before.prefetch.used, 2u);
  EXPECT_EQ(s.cache.pools[cm::PoolIndex(cm::Pool::kC)].requests -
                before.cache.pools[cm::PoolIndex(cm::Pool::kC)].requests,
            1u)
      << "expert 2 is still a C hit when its prefetch is adopted";
  EXPECT_EQ(p.cache().LivePins(), 0u);
}

TEST(OffloadProvider, WithoutAPrefetchModePrefetchDoesNothing) {
  const std::string dir = TinyCompressed("qwen2_moe");
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = 8ull << 20;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ((*provider)->prefetch_mode(), PrefetchMode::kNone);
  (*provider)->Prefetch(LayerRouting{1, {0, 1, 2}, {}});
  EXPECT_EQ((*provider)->stats().prefetch.issued, 0u);
  EXPECT_EQ((*provider)->stats().io_ops, 0u);
}

TEST(OffloadProvider, AFailedPrefetchFailsNoLayerUntilItsExpertIsSelected) {
  const std::string dir = TinyCompressed("qwen2_moe");
  for (bool sm : {false, true}) {
    TempDir tmp;
    const std::string bad = tmp.Sub("bad");
    const std::string name = CorruptCopy(dir, bad, 1, 5, sm);
    OffloadConfig config;
    config.model_dir = bad;
    config.memory_budget_bytes = 8ull << 20;
    config.n_workers = 2;
    config.prefetch = PrefetchMode::kTopScore;
    auto provider = OffloadExpertProvider::Create(config);
    ASSERT_TRUE(provider.ok()) << provider.status().ToString();
    OffloadExpertProvider& p = **provider;
    ASSERT_TRUE(p.BeginLayer(LayerRouting{0, {0, 1}, {1, 1}}).ok());
    p.Prefetch(LayerRouting{1, {5, 2}, {}});
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(p.NextReady().ok());
    ASSERT_TRUE(p.EndLayer(0).ok());
    for (int i = 0; i < 200 && p.stats().prefetch.failed == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(p.stats().prefetch.failed, 1u) << "sm=" << sm;
    // Layer 1 selects expert 5: it is read again, and the corruption fails the layer, named.
    ASSERT_TRUE(p.BeginLayer(LayerRouting{1, {2, 5}, {1, 1}}).ok());
    Status failure;
    for (int i = 0; i < 2 && failure.ok(); ++i) {
      auto lease = p.NextReady();
      if (!lease.ok()) failure = lease.status();
    }
    EXPECT_EQ(failure.code(), StatusCode::kCorruption) << failure.ToString();
    EXPECT_NE(failure.message().find(name), std::string::npos) << failure.ToString();
    EXPECT_EQ(p.stats().prefetch.used, 1u) << "expert 2 was prefetched intact";
  }
}

TEST(OffloadProvider, ProtocolMisuseIsAnError) {
  const std::string dir = TinyCompressed("qwen2_moe");
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = 8ull << 20;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok());
  EXPECT_FALSE((*provider)->NextReady().ok());  // no layer
  EXPECT_FALSE((*provider)->BeginLayer(LayerRouting{0, {3, 1}, {1, 1}}).ok());  // not ascending
  EXPECT_FALSE((*provider)->BeginLayer(LayerRouting{0, {1}, {}}).ok());        // sizes differ
  EXPECT_FALSE((*provider)->BeginLayer(LayerRouting{0, {99}, {1}}).ok());      // unknown expert
  ASSERT_TRUE((*provider)->BeginLayer(LayerRouting{0, {1, 2}, {1, 1}}).ok());
  EXPECT_FALSE((*provider)->EndLayer(0).ok());  // experts not taken
  {
    Result<std::unique_ptr<ExpertLease>> held = (*provider)->NextReady();
    ASSERT_TRUE(held.ok());
    EXPECT_FALSE((*provider)->BeginLayer(LayerRouting{1, {1}, {1}}).ok());  // a lease of layer 0 still held
  }
  // Released, the rest untaken: a new BeginLayer means the executor gave layer 0 up (an error of its
  // own); its untaken expert is dropped without admission and the new layer runs.
  ASSERT_TRUE((*provider)->BeginLayer(LayerRouting{1, {1}, {1}}).ok());
  EXPECT_EQ((*provider)->stats().abandoned_layers, 1u);
  EXPECT_FALSE((*provider)->EndLayer(0).ok());  // not the active layer
  { ASSERT_TRUE((*provider)->NextReady().ok()); }
  EXPECT_FALSE((*provider)->NextReady().ok());  // all delivered
  EXPECT_TRUE((*provider)->EndLayer(1).ok());
  EXPECT_EQ((*provider)->cache().LivePins(), 0u);
}

}  // namespace
}  // namespace zipmoe::runtime
