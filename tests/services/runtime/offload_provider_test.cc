// OffloadExpertProvider driven directly (no model math): every lease must carry exactly the BF16
// bytes of the checkpoint, under every policy and budget, with waves, and failures must be named.
#include "services/runtime/offload_provider.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "common/expert_store.h"
#include "common/manifest.h"
#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

namespace cm = cache_manager;
using testing::CachedCompress;
using testing::CachedSynth;
using testing::TempDir;

std::string TinyCompressed(const std::string& arch) {
  return CachedCompress(CachedSynth("--arch " + arch + " --preset tiny --seed 3"), "--shards 4");
}

uint64_t ExpertBytes(const Manifest& m) {
  uint64_t total = 0;
  for (const ExpertTensorInfo& t : m.expert_tensors) total += t.raw_bytes();
  return total;
}

// Expected BF16 of every expert tensor, by (layer, expert, proj).
std::map<std::tuple<int, int, int>, std::vector<uint16_t>> Expected(const ExpertStore& store) {
  std::map<std::tuple<int, int, int>, std::vector<uint16_t>> out;
  for (const ExpertTensorInfo& t : store.manifest().expert_tensors) {
    std::vector<uint16_t> v(static_cast<size_t>(t.numel()));
    EXPECT_TRUE(store.ReadTensorBf16(t, v.data()).ok()) << t.name;
    out[{t.layer_id, t.expert_id, static_cast<int>(t.proj)}] = std::move(v);
  }
  return out;
}

// Routing of `steps` steps over every MoE layer: random top_k experts each (plus one step selecting
// every expert, like a prefill), with a popularity skew so that caching matters.
std::vector<LayerRouting> MakeRoutings(const Manifest& m, int top_k, int steps, uint32_t seed) {
  std::set<int32_t> layers;
  for (const ExpertTensorInfo& t : m.expert_tensors) layers.insert(t.layer_id);
  std::mt19937 rng(seed);
  std::vector<LayerRouting> out;
  for (int s = 0; s < steps; ++s) {
    for (int32_t layer : layers) {
      LayerRouting r;
      r.layer_id = layer;
      std::set<int32_t> chosen;
      if (s == 0) {
        for (int e = 0; e < m.n_experts; ++e) chosen.insert(e);
      } else {
        while (static_cast<int>(chosen.size()) < top_k) {
          // Skewed: expert e drawn with weight ~ 1 / (e + 1).
          std::uniform_real_distribution<double> u(0, 1);
          const int e = static_cast<int>(std::pow(static_cast<double>(m.n_experts) + 1, u(rng))) - 1;
          chosen.insert(std::min(std::max(e, 0), m.n_experts - 1));
        }
      }
      for (int32_t e : chosen) {
        r.expert_ids.push_back(e);
        r.tokens_per_expert.push_back(1 + (e % 3));
      }
      out.push_back(r);
    }
  }
  return out;
}

// Leases served as BF16 tensors and as E/SM planes (fused recovery).
struct Served {
  int bf16 = 0;
  int planes = 0;
};

// Drives `provider` through `routings`, checking every lease against `expected` (planes merged).
// `after_begin(i)` runs right after BeginLayer of routings[i] (where an executor would prefetch).
Served Drive(OffloadExpertProvider& provider, const std::vector<LayerRouting>& routings,
             const std::map<std::tuple<int, int, int>, std::vector<uint16_t>>& expected,
             const std::function<void(size_t)>& after_begin = nullptr) {
  Served served;
  for (size_t step = 0; step < routings.size(); ++step) {
    const LayerRouting& r = routings[step];
    EXPECT_TRUE(provider.BeginLayer(r).ok());
    if (after_begin) after_begin(step);
    std::set<int32_t> seen;
    for (size_t i = 0; i < r.expert_ids.size(); ++i) {
      Result<std::unique_ptr<ExpertLease>> lease = provider.NextReady();
      EXPECT_TRUE(lease.ok()) << lease.status().ToString();
      if (!lease.ok()) return served;
      const ExpertWeightsView& w = (*lease)->weights();
      EXPECT_EQ(w.layer_id, r.layer_id);
      EXPECT_TRUE(seen.insert(w.expert_id).second) << "expert " << w.expert_id << " delivered twice";
      const void* ptrs[3] = {w.gate, w.up, w.down};
      const ExpertPlanes planes[3] = {w.gate_planes, w.up_planes, w.down_planes};
      ++(w.planes() ? served.planes : served.bf16);
      for (int proj = 0; proj < 3; ++proj) {
        const auto& want = expected.at({r.layer_id, w.expert_id, proj});
        std::vector<uint16_t> merged;
        if (w.planes()) {
          merged.resize(want.size());
          MergeBf16(planes[proj].e, planes[proj].sm, static_cast<int64_t>(want.size()), merged.data());
        }
        const void* got = w.planes() ? static_cast<const void*>(merged.data()) : ptrs[proj];
        EXPECT_EQ(std::memcmp(got, want.data(), want.size() * 2), 0)
            << "layer " << r.layer_id << " expert " << w.expert_id << " proj " << proj
            << (w.planes() ? " (planes)" : " (bf16)");
      }
    }
    EXPECT_EQ(seen.size(), r.expert_ids.size());
    EXPECT_TRUE(provider.EndLayer(r.layer_id).ok());
  }
  return served;
}

class OffloadProviderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OffloadProviderTest, EveryPolicyBudgetAndWorkerCountServesExactBytes) {
  const std::string dir = TinyCompressed(GetParam());
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  const auto routings = MakeRoutings(m, 4, 6, 11);
  const uint64_t expert_bytes = ExpertBytes(m);
  for (const char* policy : {"zipmoe", "lru", "fifo", "lfu", "full-load"}) {
    for (double share : {0.1, 0.3, 0.6}) {
      for (int workers : {1, 3}) {
        SCOPED_TRACE(::testing::Message() << policy << " budget " << share << " L=" << workers);
        OffloadConfig config;
        config.model_dir = dir;
        config.memory_budget_bytes = static_cast<uint64_t>(share * expert_bytes);
        config.policy = *cm::ParseCachePolicy(policy);
        config.n_workers = workers;
        auto provider = OffloadExpertProvider::Create(config);
        ASSERT_TRUE(provider.ok()) << provider.status().ToString();
        Drive(**provider, routings, expected);
        const RuntimeStats s = (*provider)->stats();
        EXPECT_LE(s.arena_bytes, config.memory_budget_bytes);
        EXPECT_EQ((*provider)->cache().LivePins(), 0u);
        EXPECT_GT(s.cache.misses, 0u);
        EXPECT_GT(s.io_bytes_e + s.io_bytes_sm, 0u);
        if (std::string(policy) == "full-load") {
          EXPECT_EQ(s.cache.HitsTotal(), 0u);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, OffloadProviderTest, ::testing::Values("qwen2_moe", "deepseek_v2"));

TEST(OffloadProvider, FusedRecoveryServesPlanesAndAdmitsExactBf16IntoF) {
  // Misses come as planes without a recovery op; experts the cache admits into F are recovered while
  // copied there, and their later F hits serve exactly the checkpoint's BF16.
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  for (const char* policy : {"zipmoe", "lru"}) {
    for (double share : {0.3, 0.6}) {
      SCOPED_TRACE(::testing::Message() << policy << " budget " << share);
      OffloadConfig config;
      config.model_dir = dir;
      config.memory_budget_bytes = static_cast<uint64_t>(share * ExpertBytes(m));
      config.policy = *cm::ParseCachePolicy(policy);
      config.n_workers = 2;
      config.fused_recovery = true;
      auto provider = OffloadExpertProvider::Create(config);
      ASSERT_TRUE(provider.ok()) << provider.status().ToString();
      const Served served = Drive(**provider, MakeRoutings(m, 4, 8, 3), expected);
      const RuntimeStats s = (*provider)->stats();
      EXPECT_GT(served.planes, 0);
      EXPECT_GT(served.bf16, 0) << "F hits serve BF16";
      EXPECT_EQ(static_cast<uint64_t>(served.bf16), s.cache.pools[cm::PoolIndex(cm::Pool::kF)].requests);
      EXPECT_EQ(s.recover_ops, 0u);
      EXPECT_GT(s.decode_ops, 0u);
      EXPECT_EQ((*provider)->cache().LivePins(), 0u);
    }
  }
}

TEST(OffloadProvider, FixedRatiosHitEveryPoolAndNeverExceedTheBudget) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = ExpertBytes(m);  // the pools hold a share of the experts in each state
  config.pool_ratios = "F=0.25,C=0.25,S=0.25,E=0.25";
  config.n_workers = 2;
  config.staging_slots = 2;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  Drive(**provider, MakeRoutings(m, 4, 12, 5), expected);
  const RuntimeStats s = (*provider)->stats();
  int pools_hit = 0;
  for (const cm::PoolCounters& p : s.cache.pools) pools_hit += p.requests > 0;
  EXPECT_GE(pools_hit, 3) << RuntimeStatsToJson(s).dump();
  EXPECT_GT(s.cache.misses, 0u);
  EXPECT_LE(s.arena_bytes, config.memory_budget_bytes);
  uint64_t reserved = 0;
  for (const cm::PoolCounters& p : s.cache.pools) reserved += p.capacity_bytes;
  EXPECT_LE(reserved + s.staging_slots * (*provider)->cache().staging_layout().slot_bytes, config.memory_budget_bytes);
}

TEST(OffloadProvider, PreloadPlacesTheTraceFavouritesByRankAndStartsTheCountersAfresh) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = ExpertBytes(m) / 2;
  config.pool_ratios = "F=0.5,C=0.5";
  config.n_workers = 2;
  config.staging_slots = 2;
  config.fused_recovery = true;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  std::set<int32_t> layers;
  for (const ExpertTensorInfo& t : m.expert_tensors) layers.insert(t.layer_id);
  // The "trace" favours the highest expert ids, in descending order: expert e counts 10 * e.
  std::map<int32_t, std::map<int32_t, uint64_t>> counts;
  for (int32_t l : layers)
    for (int32_t e = 0; e < m.n_experts; ++e) counts[l][e] = 10 * static_cast<uint64_t>(e);
  auto done = (*provider)->Preload(counts);
  ASSERT_TRUE(done.ok()) << done.status().ToString();
  const cm::CacheManager& cache = (*provider)->cache();
  uint64_t placed = 0;
  for (int32_t l : layers) {
    const int32_t f = cache.Capacity(l, cm::Pool::kF), c = cache.Capacity(l, cm::Pool::kC);
    ASSERT_GT(f, 0);
    ASSERT_GT(c, 0);
    ASSERT_LE(f + c, m.n_experts);
    for (int32_t r = 0; r < m.n_experts; ++r) {
      const int32_t e = m.n_experts - 1 - r;  // rank r in the trace
      const CompressionState want = r < f ? CompressionState::kF : r < f + c ? CompressionState::kC : CompressionState::kMiss;
      EXPECT_EQ(cache.Peek(l, e), want) << "layer " << l << " expert " << e << " (trace rank " << r << ")";
      placed += want != CompressionState::kMiss;
    }
  }
  EXPECT_EQ(done->experts, placed);
  EXPECT_GT(done->read_bytes, 0u);
  RuntimeStats s = (*provider)->stats();
  EXPECT_EQ(s.cache.lookups, 0u) << "the preload's lookups are not the requests'";
  EXPECT_EQ(s.io_ops, 0u);
  EXPECT_EQ(s.admit_calls, 0u);
  // Requests for the favourites are all hits, with the exact bytes.
  std::vector<LayerRouting> favourites;
  for (int32_t l : layers) {
    LayerRouting r;
    r.layer_id = l;
    for (int32_t e = m.n_experts - 4; e < m.n_experts; ++e) {
      r.expert_ids.push_back(e);
      r.tokens_per_expert.push_back(1);
    }
    favourites.push_back(r);
  }
  Drive(**provider, favourites, expected);
  s = (*provider)->stats();
  EXPECT_EQ(s.cache.misses, 0u);
  EXPECT_EQ(s.cache.lookups, 4 * layers.size());
  EXPECT_EQ(s.io_ops, 0u);
  // Any other request still gets exact bytes (misses read as usual).
  Drive(**provider, MakeRoutings(m, 4, 6, 9), expected);
}

TEST(OffloadProvider, ALayerLargerThanTheStagingRunsInWaves) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.policy = cm::CachePolicy::kFullLoad;
  config.staging_slots = 1;
  config.n_workers = 2;
  auto probe = OffloadExpertProvider::Create([&] {
    OffloadConfig c = config;
    c.memory_budget_bytes = 1ull << 30;
    return c;
  }());
  ASSERT_TRUE(probe.ok());
  config.memory_budget_bytes = (*probe)->minimum_budget_bytes();  // exactly one expert in flight
  probe->reset();
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  Drive(**provider, MakeRoutings(m, 4, 2, 9), expected);  // step 0 selects all 16 experts
  const RuntimeStats s = (*provider)->stats();
  uint64_t waves = 0, runs = 0;
  for (const LayerTotals& t : s.per_layer) {
    waves += t.waves;
    runs += t.runs;
  }
  EXPECT_GT(waves, runs);
}

TEST(OffloadProvider, BudgetBelowOneExpertInFlightNamesTheMinimum) {
  const std::string dir = TinyCompressed("qwen2_moe");
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = 4096;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_FALSE(provider.ok());
  EXPECT_EQ(provider.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(provider.status().message().find("below the minimum"), std::string::npos) << provider.status().ToString();
}

// Copies a compressed directory and flips one byte inside chunk `chunk` of the first tensor of
// (layer, expert). Returns the tensor name.
std::string CorruptCopy(const std::string& src, const std::string& dst, int layer, int expert, bool sm_chunk) {
  EXPECT_EQ(std::system(("cp -r " + src + " " + dst).c_str()), 0);
  auto store = ExpertStore::Open(dst);
  EXPECT_TRUE(store.ok());
  const ExpertTensorInfo* t = (*store)->Find(layer, expert, ExpertProj::kUp);
  const ChunkInfo& c = sm_chunk ? t->chunks.back() : t->chunks.front();
  std::string bytes = testing::ReadAll(dst + "/experts.bin");
  bytes[c.file_offset + c.stored_bytes / 2] ^= 0x40;
  testing::WriteAll(dst + "/experts.bin", bytes);
  return t->name;
}

TEST(OffloadProvider, CorruptChunksAreReportedWithTheTensorAndNothingIsServed) {
  const std::string dir = TinyCompressed("qwen2_moe");
  for (bool sm : {false, true}) {
    TempDir tmp;
    const std::string bad = tmp.Sub("bad");
    const std::string name = CorruptCopy(dir, bad, 1, 5, sm);
    OffloadConfig config;
    config.model_dir = bad;
    config.memory_budget_bytes = 8ull << 20;
    config.n_workers = 2;
    auto provider = OffloadExpertProvider::Create(config);
    ASSERT_TRUE(provider.ok()) << provider.status().ToString();
    LayerRouting r{1, {2, 5, 9}, {1, 1, 1}};
    ASSERT_TRUE((*provider)->BeginLayer(r).ok());
    Status failure;
    int served = 0;
    for (int i = 0; i < 3 && failure.ok(); ++i) {
      auto lease = (*provider)->NextReady();
      if (!lease.ok()) {
        failure = lease.status();
      } else {
        EXPECT_NE((*lease)->weights().expert_id, 5) << "the corrupt expert was served";
        ++served;
      }
    }
    ASSERT_FALSE(failure.ok()) << "corruption not detected (sm=" << sm << ")";
    EXPECT_EQ(failure.code(), StatusCode::kCorruption) << failure.ToString();
    EXPECT_NE(failure.message().find(name), std::string::npos) << failure.ToString();
    EXPECT_LT(served, 3);
    // The provider recovers for the next layer (another expert, intact chunks).
    LayerRouting next{2, {0, 1}, {1, 1}};
    ASSERT_TRUE((*provider)->BeginLayer(next).ok());
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*provider)->NextReady().ok());
    EXPECT_TRUE((*provider)->EndLayer(2).ok());
  }
}

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
  ASSERT_TRUE((*provider)->BeginLayer(LayerRouting{0, {1}, {1}}).ok());
  EXPECT_FALSE((*provider)->BeginLayer(LayerRouting{1, {1}, {1}}).ok());  // layer 0 still active
  EXPECT_FALSE((*provider)->EndLayer(0).ok());                            // expert not taken
  { ASSERT_TRUE((*provider)->NextReady().ok()); }
  EXPECT_FALSE((*provider)->NextReady().ok());  // all delivered
  EXPECT_TRUE((*provider)->EndLayer(0).ok());
}

}  // namespace
}  // namespace zipmoe::runtime

namespace zipmoe::runtime {
namespace {

TEST(OffloadProvider, NoCompressionAblationCachesFullTensorsFromARawDirectory) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 3");
  const std::string raw = CachedCompress(model, "--shards 4 --codec none");
  auto store = ExpertStore::Open(raw);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = raw;
  config.memory_budget_bytes = ExpertBytes(m) / 2;
  config.no_compression = true;
  config.pools = "FCSE";  // overridden: Λ = {F}
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  Drive(**provider, MakeRoutings(m, 4, 6, 2), expected);
  const RuntimeStats s = (*provider)->stats();
  EXPECT_GT(s.cache.pools[cm::PoolIndex(cm::Pool::kF)].requests, 0u);
  for (cm::Pool p : {cm::Pool::kC, cm::Pool::kS, cm::Pool::kE}) {
    EXPECT_EQ(s.cache.pools[cm::PoolIndex(p)].capacity_bytes, 0u) << cm::PoolLetter(p);
  }
  EXPECT_GE(s.io_bytes_e, s.io_bytes_sm);  // raw exponents: as many bytes as the SM planes

  config.model_dir = TinyCompressed("qwen2_moe");  // zstd: refused, naming the fix
  auto refused = OffloadExpertProvider::Create(config);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--codec none"), std::string::npos) << refused.status().ToString();
}

}  // namespace
}  // namespace zipmoe::runtime
