// OffloadExpertProvider driven directly (no model math): every lease must carry exactly the BF16
// bytes of the checkpoint, under every policy and budget, with fused recovery, fixed ratios, preload,
// waves and the no-compression ablation, and failures (budgets, corrupt chunks) must be named.
// Prefetching has a file of its own.
#include "services/pipeline/offload_provider.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
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
using testing::CachedCompress;
using testing::CachedSynth;
using testing::TempDir;
using test::TinyCompressed;
using test::ExpertBytes;
using test::Expected;
using test::MakeRoutings;
using test::Served;
using test::Drive;
using test::CorruptCopy;
using test::DriveDeviceSlots;

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

// A runtime config with pool F on the executor's device: `dir` under `share` of `m`'s expert bytes.
OffloadConfig DeviceFConfig(const std::string& dir, const Manifest& m, double share, const std::string& policy,
                            int workers) {
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = static_cast<uint64_t>(share * ExpertBytes(m));
  config.policy = *cm::ParseCachePolicy(policy);
  config.n_workers = workers;
  config.device_f_pool = true;
  return config;
}

// Pool F on the GPU executor's device (OffloadConfig::device_f_pool, issue 36 item 1): the cache
// decides what F holds, the device holds the bytes (DriveDeviceSlots checks they agree); the arena
// keeps no F bytes; every policy, budget and recovery mode.
TEST(OffloadProvider, DeviceFPoolSlotsHoldWhatTheCacheSaysTheyHold) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  const auto routings = MakeRoutings(m, 4, 10, 17);
  for (const char* policy : {"zipmoe", "lru", "lfu"}) {
    for (double share : {0.25, 0.5}) {
      for (bool fused : {false, true}) {
        SCOPED_TRACE(::testing::Message() << policy << " budget " << share << " fused " << fused);
        OffloadConfig config = DeviceFConfig(dir, m, share, policy, 2);
        config.fused_recovery = fused;
        auto provider = OffloadExpertProvider::Create(config);
        ASSERT_TRUE(provider.ok()) << provider.status().ToString();
        ASSERT_GT((*provider)->device_f_slots(), 0);
        EXPECT_EQ((*provider)->cache().Counters().pools[cm::PoolIndex(cm::Pool::kF)].resident_bytes, 0u);
        const auto [holds, fills] = DriveDeviceSlots(**provider, routings, expected);
        const RuntimeStats s = (*provider)->stats();
        EXPECT_EQ(static_cast<uint64_t>(holds), s.cache.pools[cm::PoolIndex(cm::Pool::kF)].requests);
        EXPECT_GT(holds, 0) << "the cache kept experts in F";
        EXPECT_GT(fills, 0);
        EXPECT_EQ((*provider)->cache().LivePins(), 0u);
      }
    }
  }
}

// A discrete GPU's pool F has a budget of its own (OffloadConfig::device_f_budget_*): F's slots
// come from it (shared equally by the MoE layers, or one global pool), the host budget plans C/S/E
// and holds no F bytes, and the slots still hold what the cache says.
TEST(OffloadProvider, DeviceFPoolBudgetedApartSizesFFromTheDeviceBudget) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  const uint64_t f_stride =
      AlignSlotBytes(cm::ModelLayout::FromManifest(m).value().slot_bytes(cm::Pool::kF));
  int32_t moe_layers = 0;
  for (int32_t l = 0; l < m.n_layers; ++l) {
    bool has = false;
    for (const ExpertTensorInfo& t : m.expert_tensors) has = has || t.layer_id == l;
    moe_layers += has;
  }
  const auto routings = MakeRoutings(m, 4, 8, 29);
  for (const char* policy : {"zipmoe", "lru"}) {
    SCOPED_TRACE(policy);
    OffloadConfig config = DeviceFConfig(dir, m, 0.3, policy, 2);
    config.device_f_budget_percent = 25;
    auto provider = OffloadExpertProvider::Create(config);
    ASSERT_TRUE(provider.ok()) << provider.status().ToString();
    const uint64_t device_bytes = static_cast<uint64_t>(0.25 * ExpertBytes(m));
    const cm::CacheManager& cache = (*provider)->cache();
    if (std::string(policy) == "lru") {
      EXPECT_EQ(static_cast<uint64_t>((*provider)->device_f_slots()), device_bytes / f_stride);
    } else {
      const int64_t per_layer = static_cast<int64_t>(device_bytes / f_stride) / moe_layers;
      for (int32_t l = 0; l < m.n_layers; ++l) {
        if (cache.Capacity(l, cm::Pool::kF) == 0) continue;
        EXPECT_GE(cache.Capacity(l, cm::Pool::kF), per_layer);
        EXPECT_LE(cache.Capacity(l, cm::Pool::kF), per_layer + 1);
        int32_t total = 0;
        for (cm::Pool p : cm::kPoolOrder) total += cache.Capacity(l, p);
        EXPECT_LE(total, m.n_experts);
      }
      int64_t host_slots = 0;
      for (cm::Pool p : {cm::Pool::kC, cm::Pool::kS, cm::Pool::kE}) host_slots += cache.pool_slots(p);
      EXPECT_GT(host_slots, 0) << "the host budget plans the other pools";
    }
    EXPECT_LE(cache.arena_bytes(), config.memory_budget_bytes);
    const auto [holds, fills] = DriveDeviceSlots(**provider, routings, expected);
    EXPECT_GT(holds, 0);
    EXPECT_GT(fills, 0);
    EXPECT_EQ(cache.LivePins(), 0u);
  }
  // Fixed ratios may not give F a share of the host budget then.
  OffloadConfig config = DeviceFConfig(dir, m, 0.3, "zipmoe", 0);
  config.device_f_budget_bytes = 1 << 20;
  config.pool_ratios = "F=0.5,C=0.5";
  auto refused = OffloadExpertProvider::Create(config);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--pool-ratios"), std::string::npos) << refused.status().ToString();
  config.device_f_budget_bytes = -1;
  config.device_f_budget_percent = 150;
  refused = OffloadExpertProvider::Create(config);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("150%"), std::string::npos) << refused.status().ToString();
}

// Preloading runs without an executor, so nothing could write F's device slots: it fills C/S/E only
// and reserves nothing, leaving F to fill at first use.
TEST(OffloadProvider, DeviceFPoolPreloadLeavesFEmpty) {
  const std::string dir = TinyCompressed("qwen2_moe");
  const Manifest m = ExpertStore::Open(dir).value()->manifest();
  for (const char* policy : {"zipmoe", "lru"}) {
    SCOPED_TRACE(policy);
    OffloadConfig config = DeviceFConfig(dir, m, 0.5, policy, 2);
    if (std::string(policy) == "zipmoe") config.pool_ratios = "F=0.5,C=0.5";
    auto provider = OffloadExpertProvider::Create(config);
    ASSERT_TRUE(provider.ok()) << provider.status().ToString();
    Result<OffloadExpertProvider::PreloadStats> preloaded = (*provider)->Preload({});
    ASSERT_TRUE(preloaded.ok()) << preloaded.status().ToString();
    for (int32_t l = 0; l < m.n_layers; ++l) EXPECT_TRUE((*provider)->cache().Residents(l, cm::Pool::kF).empty());
    int64_t host_slots = 0;  // what C/S/E hold
    for (int32_t l = 0; l < m.n_layers; ++l)
      for (cm::Pool p : {cm::Pool::kC, cm::Pool::kS, cm::Pool::kE})
        host_slots += static_cast<int64_t>((*provider)->cache().Residents(l, p).size());
    EXPECT_LE(host_slots, static_cast<int64_t>(preloaded->experts));
    if (std::string(policy) == "lru") EXPECT_EQ(preloaded->experts, 0u);  // lru has F only
    else EXPECT_GT(host_slots, 0);
    EXPECT_EQ((*provider)->cache().LivePins(), 0u);
  }
}

// An executor that could not write an expert into its F slot abandons the lease: the reservation is
// dropped, not committed, while the same layer's other expert enters F.
TEST(OffloadProvider, DeviceFPoolAnAbandonedFillIsNotAdmitted) {
  const std::string dir = TinyCompressed("qwen2_moe");
  const Manifest m = ExpertStore::Open(dir).value()->manifest();
  const OffloadConfig config = DeviceFConfig(dir, m, 0.5, "lru", 1);
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  ASSERT_TRUE((*provider)->BeginLayer(LayerRouting(0, {0, 1}, {1, 1})).ok());
  for (int i = 0; i < 2; ++i) {
    Result<std::unique_ptr<ExpertLease>> lease = (*provider)->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    ASSERT_GE((*lease)->weights().device_slot, 0);
    ASSERT_FALSE((*lease)->weights().device_slot_holds);
    if ((*lease)->weights().expert_id == 0) (*lease)->Abandon();
  }
  ASSERT_TRUE((*provider)->EndLayer(0).ok());
  EXPECT_EQ((*provider)->cache().Peek(0, 0), CompressionState::kMiss);
  EXPECT_EQ((*provider)->cache().Peek(0, 1), CompressionState::kF);
  EXPECT_EQ((*provider)->cache().LivePins(), 0u);
}

// A failed layer cancels the F slots reserved at its lookup: nothing stays pinned, and no later
// lease claims a slot holds an expert that was never written there.
TEST(OffloadProvider, DeviceFPoolReservationsOfAFailedLayerAreCancelled) {
  const std::string good = TinyCompressed("qwen2_moe");
  TempDir tmp;
  CorruptCopy(good, tmp.Sub("bad"), 0, 1, /*sm_chunk=*/true);
  const OffloadConfig config =
      DeviceFConfig(tmp.Sub("bad"), ExpertStore::Open(good).value()->manifest(), 0.5, "lru", 1);
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  const LayerRouting bad_layer(0, {0, 1, 2}, {1, 1, 1});
  ASSERT_TRUE((*provider)->BeginLayer(bad_layer).ok());
  Status failed;
  std::vector<std::unique_ptr<ExpertLease>> leases;
  for (int i = 0; i < 3 && failed.ok(); ++i) {
    Result<std::unique_ptr<ExpertLease>> lease = (*provider)->NextReady();
    if (!lease.ok()) failed = lease.status();
    else leases.push_back(std::move(lease).value());
  }
  EXPECT_EQ(failed.code(), StatusCode::kCorruption) << failed.ToString();
  leases.clear();
  // The next layer begins (draining the failed one); expert 1 is not in F.
  ASSERT_TRUE((*provider)->BeginLayer(LayerRouting(1, {1}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> next = (*provider)->NextReady();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_FALSE((*next)->weights().device_slot_holds);
  next->reset();
  ASSERT_TRUE((*provider)->EndLayer(1).ok());
  EXPECT_NE((*provider)->cache().Peek(0, 1), CompressionState::kF);
  EXPECT_EQ((*provider)->cache().LivePins(), 0u);
}

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

// A GPU executor that holds every selected expert in device slots announces a layer with no expert
// to serve (LayerRouting::device_resident names them): the runtime must take it, serve nothing, and
// go on serving the next layers as usual.
TEST(OffloadProvider, ALayerWithNothingToServeBeginsAndEnds) {
  const std::string dir = TinyCompressed("qwen2_moe");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto expected = Expected(**store);
  const Manifest& m = (*store)->manifest();
  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = ExpertBytes(m) / 2;
  config.n_workers = 1;
  config.fused_recovery = true;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  const std::vector<LayerRouting> routings = MakeRoutings(m, 2, 3, 9);
  for (const LayerRouting& r : routings) {
    LayerRouting empty(r.layer_id, {}, {});
    empty.device_resident = r.expert_ids;
    empty.device_resident_tokens = r.tokens_per_expert;
    ASSERT_TRUE((*provider)->BeginLayer(empty).ok());
    EXPECT_FALSE((*provider)->NextReady().ok());  // nothing was asked for
    ASSERT_TRUE((*provider)->EndLayer(r.layer_id).ok());
  }
  Drive(**provider, routings, expected);  // and it serves the same layers exactly afterwards
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
