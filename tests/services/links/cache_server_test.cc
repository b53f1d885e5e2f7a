// The cache behind its seam (cache_backend.h): an OffloadExpertProvider over a RemoteCacheBackend
// talking to a CacheServer (the cache-manager process's loop, here in this process over ipc://) must
// serve the same bytes and leave the cache in the same state as one over the LocalCacheBackend
// (embedded mode), with one round trip per layer; garbage on the cache-manager socket is dropped and
// counted; a client that disappears or is replaced while holding leases gets them reclaimed. With
// pool F on the GPU executor's device, the whole `zipmoe up` chain (cache-manager, scheduler,
// executor: CacheServer, ProviderServer, RemoteExpertProvider) names the same device slots as the
// embedded runtime, and a new executor process never reads a slot it did not write.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zmq.hpp>

#include "common/checkpoint/expert_store.h"
#include "common/ipc/messaging.h"
#include "common/ipc/messaging_channel.h"
#include "kernels/recovery.h"
#include "services/pipeline/cache_backend.h"
#include "services/links/cache_server.h"
#include "services/pipeline/offload_provider.h"
#include "services/links/remote_cache_backend.h"
#include "services/links/remote_provider.h"
#include "tests/services/pipeline/offload_provider_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

namespace cm = cache_manager;
namespace msg = messaging;
using std::chrono::milliseconds;
using testing::CachedCompress;
using testing::CachedSynth;
using testing::Eventually;
using testing::TempDir;

msg::CacheHello HelloOf(uint64_t request_id, uint32_t heartbeat_ms) {
  msg::CacheHello hello;
  hello.request_id = request_id;
  hello.heartbeat_interval_ms = heartbeat_ms;
  return hello;
}

msg::CacheLookup LookupOf(uint64_t request_id, int32_t layer_id, std::vector<int32_t> expert_ids) {
  msg::CacheLookup lookup;
  lookup.request_id = request_id;
  lookup.layer_id = layer_id;
  lookup.expert_ids = std::move(expert_ids);
  return lookup;
}

std::string Model() { return CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 3"), "--shards 4"); }

std::string UniqueShm(const char* tag) {
  static int n = 0;
  return fmt::format("/zipmoe-test-{}-{}-{}", tag, static_cast<long>(::getpid()), n++);
}

uint64_t ExpertBytes(const Manifest& m) {
  uint64_t total = 0;
  for (const ExpertTensorInfo& t : m.expert_tensors) total += t.raw_bytes();
  return total;
}

// top_k skewed experts per MoE layer per step; with `prefill`, step 0 selects every expert (waves).
std::vector<LayerRouting> Routings(const Manifest& m, int top_k, int steps, uint32_t seed, bool prefill = true) {
  std::set<int32_t> layers;
  for (const ExpertTensorInfo& t : m.expert_tensors) layers.insert(t.layer_id);
  std::mt19937 rng(seed);
  std::vector<LayerRouting> out;
  for (int s = 0; s < steps; ++s) {
    for (int32_t layer : layers) {
      std::set<int32_t> chosen;
      if (s == 0 && prefill) {
        for (int e = 0; e < m.n_experts; ++e) chosen.insert(e);
      }
      std::uniform_real_distribution<double> u(0, 1);
      while (static_cast<int>(chosen.size()) < top_k) {
        const int e = static_cast<int>(std::pow(static_cast<double>(m.n_experts) + 1, u(rng))) - 1;
        chosen.insert(std::min(std::max(e, 0), m.n_experts - 1));
      }
      LayerRouting r;
      r.layer_id = layer;
      for (int32_t e : chosen) {
        r.expert_ids.push_back(e);
        r.tokens_per_expert.push_back(1 + e % 3);
      }
      // The step's router scores (what score-based eviction reads): random, the chosen ones higher.
      for (int e = 0; e < m.n_experts; ++e) {
        r.mean_scores.push_back(static_cast<float>(u(rng)) + (chosen.count(e) > 0 ? 1.0f : 0.0f));
      }
      out.push_back(r);
    }
  }
  return out;
}

// Drives the provider; returns a digest of every lease (layer, expert, the three tensors' bytes).
// `batch` > 0: leases are held and released `batch` at a time with ReleaseAll (as the scheduler does
// for the experts the executor computed together), *release_calls counting the calls; 0: each lease
// is released as soon as it is read; kInExpertOrder: every lease of a layer is held until its last
// one is read, then released one at a time in expert order (the staging slots must hold all of a
// layer's misses at once). Leases arrive in the order the workers finish, and which experts are
// still pinned when an admission evicts depends on that order; a policy that may evict an expert of
// the running layer once it is released (smoe, coserve: by score, not recency) then ends in a state
// that depends on thread timing. In expert order, two runs see the same admissions and pins.
constexpr size_t kInExpertOrder = static_cast<size_t>(-1);
std::vector<std::string> Drive(OffloadExpertProvider& provider, const std::vector<LayerRouting>& routings,
                               size_t batch = 0, size_t* release_calls = nullptr) {
  std::vector<std::string> served;
  std::vector<std::unique_ptr<ExpertLease>> held;
  const auto release_held = [&] {
    if (held.empty()) return;
    provider.ReleaseAll(&held);
    EXPECT_TRUE(held.empty());
    if (release_calls != nullptr) ++*release_calls;
  };
  for (const LayerRouting& r : routings) {
    Status begun = provider.BeginLayer(r);
    EXPECT_TRUE(begun.ok()) << begun.ToString();
    if (!begun.ok()) return served;
    std::map<int32_t, std::string> layer;
    for (size_t i = 0; i < r.expert_ids.size(); ++i) {
      Result<std::unique_ptr<ExpertLease>> lease = provider.NextReady();
      EXPECT_TRUE(lease.ok()) << lease.status().ToString();
      if (!lease.ok()) return served;
      const ExpertWeightsView& w = (*lease)->weights();
      const int64_t numel = w.intermediate * w.hidden;
      const size_t bytes = static_cast<size_t>(numel * 2);
      std::string s = fmt::format("{}/{}:", r.layer_id, w.expert_id);
      if (w.planes()) {  // fused recovery: the BF16 the planes stand for (kernels' reference)
        std::vector<uint16_t> bf16(static_cast<size_t>(numel));
        for (const ExpertPlanes* p : {&w.gate_planes, &w.up_planes, &w.down_planes}) {
          kernels::RecoverBf16Reference(p->e, p->sm, bf16.data(), numel);
          s.append(reinterpret_cast<const char*>(bf16.data()), bytes);
        }
      } else {
        for (const void* p : {w.gate, w.up, w.down}) s.append(static_cast<const char*>(p), bytes);
      }
      layer[w.expert_id] = std::move(s);
      if (batch > 0) {
        held.push_back(std::move(lease).value());
        if (held.size() == batch) release_held();  // never for kInExpertOrder
      }
    }
    if (batch == kInExpertOrder) {
      std::sort(held.begin(), held.end(), [](const auto& a, const auto& b) {
        return a->weights().expert_id < b->weights().expert_id;
      });
      for (std::unique_ptr<ExpertLease>& l : held) l.reset();  // one admission/release each
      held.clear();
    }
    release_held();
    EXPECT_TRUE(provider.EndLayer(r.layer_id).ok());
    for (auto& [e, s] : layer) served.push_back(std::move(s));
  }
  return served;
}

using PreloadCounts = std::map<int32_t, std::map<int32_t, uint64_t>>;

// The cache-manager side (LocalCacheBackend + CacheServer) on an ipc:// endpoint in `tmp`; with
// `preload`, its cache filled first as the service's `preload` fills it (CreatePreloadedCache).
struct CacheManagerProcess {
  CacheManagerProcess(const TempDir& tmp, const OffloadConfig& base, const Manifest& manifest,
                      milliseconds heartbeat = milliseconds(500), const PreloadCounts* preload = nullptr) {
    config = base;
    config.shm_name = UniqueShm("cm");
    if (preload != nullptr) {
      auto preloaded = OffloadExpertProvider::CreatePreloadedCache(config, *preload);
      EXPECT_TRUE(preloaded.ok()) << preloaded.status().ToString();
      if (!preloaded.ok()) return;
      config = preloaded->config;
      preload_stats = preloaded->stats;
      backend = std::move(preloaded->cache);
    } else {
      auto created = LocalCacheBackend::Create(&config, manifest);
      EXPECT_TRUE(created.ok()) << created.status().ToString();
      if (!created.ok()) return;
      backend = std::move(created).value();
    }
    CacheServerConfig sc;
    sc.endpoint = "ipc://" + tmp.Sub("cache-manager.sock");
    sc.heartbeat_interval = heartbeat;
    sc.liveness = 3;
    auto started = CacheServer::Start(context, sc, backend.get());
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(started).value();
  }
  ~CacheManagerProcess() {
    if (server != nullptr) server->Stop();
    server.reset();
    backend.reset();
  }
  // `base` as a scheduler attached to this cache-manager configures it: its arena, a remote cache.
  // pipe: the client moves its session onto a shared-memory pipe (RemoteCacheConfig::pipe).
  OffloadConfig SchedulerConfig(OffloadConfig base, bool pipe = false) const {
    base.shm_name = config.shm_name;
    base.cache = RemoteCacheBackendFactory(ClientConfig(pipe));
    return base;
  }
  RemoteCacheConfig ClientConfig(bool pipe = false) const {
    RemoteCacheConfig c;
    c.pipe = pipe;
    c.endpoint = server->endpoint();
    c.arena_name = config.shm_name;
    c.timeout = milliseconds(10000);
    c.connect_timeout = milliseconds(10000);
    return c;
  }
  OffloadConfig config;
  OffloadExpertProvider::PreloadStats preload_stats;
  zmq::context_t context{1};
  std::unique_ptr<LocalCacheBackend> backend;
  std::unique_ptr<CacheServer> server;
};

OffloadConfig BaseConfig(const std::string& dir, const Manifest& m, double share) {
  OffloadConfig c;
  c.model_dir = dir;
  c.memory_budget_bytes = static_cast<uint64_t>(share * ExpertBytes(m));
  c.n_workers = 2;
  c.staging_slots = 4;
  return c;
}

// `base` in a local cache (an arena of its own): the provider, and in *leases the bytes it served for
// `routings`, which a remote run must reproduce. Null (a test failure recorded) if it cannot start.
std::unique_ptr<OffloadExpertProvider> RunLocal(const OffloadConfig& base, const std::vector<LayerRouting>& routings,
                                                std::vector<std::string>* leases, size_t batch = 0) {
  OffloadConfig local_config = base;
  local_config.shm_name = UniqueShm("local");
  auto local = OffloadExpertProvider::Create(local_config);
  EXPECT_TRUE(local.ok()) << local.status().ToString();
  if (!local.ok()) return nullptr;
  *leases = Drive(**local, routings, batch);
  return std::move(local).value();
}

// The remote run served every lease with the local run's bytes, in the same order.
void ExpectSameLeases(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_TRUE(got[i] == want[i]) << "lease " << i << " differs";
}

// Same cache state: the counters of both CacheManagers agree (the remote stats request follows the
// admissions), and the cache-manager holds no pin and saw no failed admission.
void ExpectSameCacheState(OffloadExpertProvider& remote, OffloadExpertProvider& local,
                          const CacheManagerProcess& cache_manager) {
  const RuntimeStats ls = local.stats();
  const RuntimeStats rs = remote.stats();
  EXPECT_EQ(rs.cache.lookups, ls.cache.lookups);
  EXPECT_EQ(rs.cache.misses, ls.cache.misses);
  EXPECT_EQ(rs.cache.drops, ls.cache.drops);
  for (int p = 0; p < cm::kPoolCount; ++p) {
    EXPECT_EQ(rs.cache.pools[p].requests, ls.cache.pools[p].requests) << p;
    EXPECT_EQ(rs.cache.pools[p].admissions, ls.cache.pools[p].admissions) << p;
    EXPECT_EQ(rs.cache.pools[p].evictions, ls.cache.pools[p].evictions) << p;
    EXPECT_EQ(rs.cache.pools[p].resident_experts, ls.cache.pools[p].resident_experts) << p;
  }
  EXPECT_EQ(rs.cache.layer_requests, ls.cache.layer_requests);
  EXPECT_GT(rs.cache.HitsTotal(), 0u);
  EXPECT_EQ(cache_manager.backend->manager().LivePins(), 0u);
  EXPECT_EQ(cache_manager.server->stats().admit_errors, 0u);
}

TEST(CacheServer, RemoteBackendServesTheSameBytesAndCacheStateAsLocal) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  // smoe and coserve also read the steps' router scores, which travel in CacheLookup; they evict by
  // score, so both runs release in expert order (Drive's kInExpertOrder; no prefill step, so the 4
  // staging slots hold a layer's 4 misses at once) or their states would differ with the workers'
  // timing. "zipmoe+fused": misses served as their E/SM planes (a CPU executor's fused recovery); the
  // cache-manager then recovers BF16 for F admissions from the planes (CacheAdmitItem::bf16_from_planes).
  for (const char* variant : {"zipmoe", "lru", "smoe", "coserve", "zipmoe+fused"}) {
    SCOPED_TRACE(variant);
    const std::string name = variant;
    const bool fused = name == "zipmoe+fused";
    const bool by_score = name == "smoe" || name == "coserve";
    const char* policy = fused ? "zipmoe" : variant;
    const auto routings = Routings(m, 4, 8, 7, /*prefill=*/!by_score);
    OffloadConfig base = BaseConfig(dir, m, 0.4);
    base.policy = *cm::ParseCachePolicy(policy);
    base.fused_recovery = fused;
    const size_t order = by_score ? kInExpertOrder : 0;
    std::vector<std::string> want;
    const std::unique_ptr<OffloadExpertProvider> local = RunLocal(base, routings, &want, order);
    ASSERT_NE(local, nullptr);

    TempDir tmp;
    CacheManagerProcess cache_manager(tmp, base, m);
    OffloadConfig remote_config = cache_manager.SchedulerConfig(base);
    auto remote = OffloadExpertProvider::Create(remote_config);
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    EXPECT_EQ((*remote)->config().staging_slots, local->config().staging_slots);
    EXPECT_EQ((*remote)->cache_backend().arena_bytes(), local->cache_backend().arena_bytes());
    auto* client = dynamic_cast<RemoteCacheBackend*>(&(*remote)->cache_backend());
    ASSERT_NE(client, nullptr);
    const uint64_t trips_before = client->round_trips();
    const std::vector<std::string> got = Drive(**remote, routings, order);
    ASSERT_NO_FATAL_FAILURE(ExpectSameLeases(got, want));

    // One round trip per layer, plus a sync only where a layer ran in waves (step 0 here).
    const uint64_t trips = client->round_trips() - trips_before;
    uint64_t waves = 0, runs = 0;
    for (const LayerTotals& t : (*remote)->stats().per_layer) {
      waves += t.waves;
      runs += t.runs;
    }
    EXPECT_GE(trips, routings.size());
    EXPECT_LE(trips, routings.size() + (waves - runs)) << "runs " << runs << " waves " << waves;
    std::printf("%s: %zu layers, %llu round trips (%llu waves), %llu one-way admissions/releases\n", policy,
                routings.size(), static_cast<unsigned long long>(trips), static_cast<unsigned long long>(waves),
                static_cast<unsigned long long>(client->one_way_sends()));

    ExpectSameCacheState(**remote, *local, cache_manager);
  }
}

// ReleaseAll of several leases sends their admissions in one CacheAdmit (RemoteCacheBackend::
// HoldAdmits/FlushAdmits): the same bytes and the same cache state as releasing them one by one in a
// local cache, and exactly one one-way message per batch.
TEST(CacheServer, BatchedReleasesSendOneAdmissionMessagePerBatch) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  const auto routings = Routings(m, 4, 8, 11);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "separate");
    OffloadConfig base = BaseConfig(dir, m, 0.4);
    base.fused_recovery = fused;
    std::vector<std::string> want;
    const std::unique_ptr<OffloadExpertProvider> local = RunLocal(base, routings, &want);
    ASSERT_NE(local, nullptr);

    TempDir tmp;
    CacheManagerProcess cache_manager(tmp, base, m);
    auto remote = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(base));
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    auto* client = dynamic_cast<RemoteCacheBackend*>(&(*remote)->cache_backend());
    ASSERT_NE(client, nullptr);
    const uint64_t one_way_before = client->one_way_sends();
    const uint64_t trips_before = client->round_trips();
    size_t release_calls = 0;
    const std::vector<std::string> got = Drive(**remote, routings, /*batch=*/3, &release_calls);
    ASSERT_NO_FATAL_FAILURE(ExpectSameLeases(got, want));
    // One message per batch; a batch whose release restarts a wave is split where the wave's staging
    // slot needs a sync (the held admissions go first): at most one more message per sync.
    const uint64_t one_way = client->one_way_sends() - one_way_before;
    const uint64_t syncs = client->round_trips() - trips_before - routings.size();
    EXPECT_GE(one_way, release_calls);
    EXPECT_LE(one_way, release_calls + syncs);
    EXPECT_LT(one_way, got.size());

    ExpectSameCacheState(**remote, *local, cache_manager);  // its stats request follows the held admissions
    EXPECT_EQ(cache_manager.server->stats().admits, got.size());
  }
}

// The same session over a shared-memory pipe (PipeOpen after the Hello): the same bytes and cache
// state as a local cache; a second scheduler's Hello replaces the first one and retires its pipe; a
// scheduler that leaves (Disconnect through its pipe) is reclaimed and its pipe retired.
TEST(CacheServer, OverAPipeTheSameBytesAndCacheStateAndALeavingClientIsReclaimed) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  const auto routings = Routings(m, 4, 8, 7);
  for (const bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused" : "separate");
    OffloadConfig base = BaseConfig(dir, m, 0.4);
    base.fused_recovery = fused;
    std::vector<std::string> want;
    const std::unique_ptr<OffloadExpertProvider> local = RunLocal(base, routings, &want);
    ASSERT_NE(local, nullptr);

    TempDir tmp;
    CacheManagerProcess cache_manager(tmp, base, m);
    auto remote = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(base, /*pipe=*/true));
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    auto* client = dynamic_cast<RemoteCacheBackend*>(&(*remote)->cache_backend());
    ASSERT_NE(client, nullptr);
    EXPECT_TRUE(client->on_pipe());
    EXPECT_EQ(cache_manager.server->stats().pipes, 1u);
    const std::vector<std::string> got = Drive(**remote, routings);
    ASSERT_NO_FATAL_FAILURE(ExpectSameLeases(got, want));
    ExpectSameCacheState(**remote, *local, cache_manager);
    EXPECT_EQ(cache_manager.server->stats().bad_messages, 0u);

    auto second = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(base, /*pipe=*/true));
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    EXPECT_EQ(cache_manager.server->stats().clients, 1u) << "the second Hello replaced the first client";
    EXPECT_EQ(cache_manager.server->stats().pipes, 1u) << "and retired its pipe";
    EXPECT_FALSE(Drive(**second, routings).empty());
    remote->reset();
    second->reset();  // Disconnect through its pipe
    EXPECT_TRUE(Eventually([&] {
      const CacheServerStats st = cache_manager.server->stats();
      return st.clients == 0 && st.pipes == 0;
    }));
    EXPECT_EQ(cache_manager.backend->manager().LivePins(), 0u);
  }
}

// A client whose session the cache-manager dropped (here: a newer client said hello) learns it on its
// next round trip, and every later one fails at once instead of waiting out the timeout (an "exiting"
// scheduler's provider thread, looking up layer after layer, kept the process alive for minutes).
TEST(CacheServer, AfterItsSessionIsLostEveryRoundTripFailsAtOnce) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  for (const bool pipe : {false, true}) {
    SCOPED_TRACE(pipe ? "pipe" : "zeromq");
    OffloadConfig base = BaseConfig(dir, m, 0.4);
    TempDir tmp;
    CacheManagerProcess cache_manager(tmp, base, m);
    RemoteCacheConfig rc = cache_manager.ClientConfig(pipe);
    rc.timeout = milliseconds(1500);
    OffloadConfig first_config = base;
    auto first = RemoteCacheBackend::Connect(rc, m, &first_config);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    OffloadConfig second_config = base;
    auto second = RemoteCacheBackend::Connect(rc, m, &second_config);  // replaces the first client
    ASSERT_TRUE(second.ok()) << second.status().ToString();
    std::vector<CachedExpert> out;
    EXPECT_FALSE((*first)->LookupLayer(0, {0, 1}, &out).ok());
    EXPECT_TRUE((*first)->session_lost());
    const auto t0 = std::chrono::steady_clock::now();
    for (int layer = 0; layer < 4; ++layer) {
      const Status st = (*first)->LookupLayer(layer, {0, 1}, &out);
      EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
      EXPECT_NE(st.message().find("dropped this session"), std::string::npos) << st.ToString();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(500));
    EXPECT_TRUE((*second)->LookupLayer(0, {0, 1}, &out).ok());
    for (const CachedExpert& e : out)
      if (e.lease != kNoLease) (*second)->ReleaseLeases({e.lease});
  }
}

TEST(CacheServer, GarbageAndTruncatedFlatBuffersAreDroppedAndCounted) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  TempDir tmp;
  CacheManagerProcess cache_manager(tmp, BaseConfig(dir, m, 0.4), m);
  const std::string good = msg::EncodeMessage("test", LookupOf(7, 0, {0, 1}));
  zmq::context_t context(1);
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(cache_manager.server->endpoint());
  dealer.send(zmq::buffer(std::string("\x00\xff garbage, not a flatbuffer", 27)), zmq::send_flags::none);
  dealer.send(zmq::buffer(good.substr(0, good.size() - 5)), zmq::send_flags::none);  // truncated
  std::string wrong = good;
  wrong[7] ^= 0x40;  // file identifier / offsets
  dealer.send(zmq::buffer(wrong), zmq::send_flags::none);
  msg::LayerEnd end;
  end.layer_id = 3;
  dealer.send(zmq::buffer(msg::EncodeMessage("test", end)), zmq::send_flags::none);  // not for it
  EXPECT_TRUE(Eventually([&] { return cache_manager.server->stats().bad_messages >= 4; }))
      << cache_manager.server->stats().bad_messages;
  // A CacheAdmit whose offsets point outside the arena is refused, not executed.
  {
    msg::ChannelOptions options;
    options.kind = msg::SocketKind::kDealer;
    options.endpoint = cache_manager.server->endpoint();
    msg::Channel channel = std::move(msg::Channel::Open(context, options).value());
    ASSERT_TRUE(channel.Send(HelloOf(1, 100), milliseconds(1000)).ok());
    Result<msg::Received> hello = channel.Recv(milliseconds(5000));
    ASSERT_TRUE(hello.ok()) << hello.status().ToString();
    msg::CacheAdmit admit;
    admit.request_id = 2;
    admit.want_reply = true;
    auto item = std::make_unique<msg::CacheAdmitItem>();
    item->layer_id = m.expert_tensors.front().layer_id;
    item->expert_id = 0;
    item->admit = true;
    item->parts = msg::kCachePartBf16;
    item->bf16_offsets = {~0ull - 10, 0, 0};
    admit.items.push_back(std::move(item));
    ASSERT_TRUE(channel.Send(admit, milliseconds(1000)).ok());
    Result<msg::Received> reply = channel.Recv(milliseconds(5000));
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(cache_manager.server->stats().admit_errors, 1u);
  }
  // The server still serves a real client.
  OffloadConfig remote_config = cache_manager.SchedulerConfig(BaseConfig(dir, m, 0.4));
  auto remote = OffloadExpertProvider::Create(remote_config);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_FALSE(Drive(**remote, Routings(m, 4, 2, 3)).empty());
}

TEST(CacheServer, LeasesOfADisappearedOrReplacedClientAreReclaimed) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  TempDir tmp;
  CacheManagerProcess cache_manager(tmp, BaseConfig(dir, m, 0.6), m, milliseconds(50));
  const auto routings = Routings(m, 4, 6, 5);
  {  // Warm the cache through a real scheduler-side provider.
    auto remote = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(BaseConfig(dir, m, 0.6)));
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    Drive(**remote, routings);
  }
  ASSERT_TRUE(Eventually([&] { return cache_manager.server->stats().clients == 0; }));  // it said Disconnect
  const int32_t layer = routings.back().layer_id;
  std::vector<int32_t> all;
  for (int e = 0; e < m.n_experts; ++e) all.push_back(e);

  // A raw client takes leases on every cached expert of a layer, then vanishes without a word.
  auto take_leases = [&](zmq::context_t& context, uint32_t heartbeat_ms) {
    msg::ChannelOptions options;
    options.kind = msg::SocketKind::kDealer;
    options.endpoint = cache_manager.server->endpoint();
    msg::Channel channel = std::move(msg::Channel::Open(context, options).value());
    EXPECT_TRUE(channel.Send(HelloOf(1, heartbeat_ms), milliseconds(1000)).ok());
    EXPECT_TRUE(channel.Recv(milliseconds(5000)).ok());
    EXPECT_TRUE(channel.Send(LookupOf(2, layer, all), milliseconds(1000)).ok());
    Result<msg::Received> got = channel.Recv(milliseconds(5000));
    EXPECT_TRUE(got.ok());
    size_t leases = 0;
    if (got.ok()) {
      for (const msg::CacheEntry& e : std::get<msg::CacheLookupReply>(got->message.body).entries) {
        leases += e.lease_id() != 0;
      }
    }
    return std::make_pair(std::move(channel), leases);
  };
  {
    zmq::context_t context(1);
    // 1 s heartbeats: dead after 3 s of silence, long enough that a loaded CI machine cannot stall the
    // checks below past it.
    auto [channel, leases] = take_leases(context, 1000);
    ASSERT_GT(leases, 0u);
    EXPECT_EQ(cache_manager.backend->manager().LivePins(), leases);
    EXPECT_EQ(cache_manager.server->stats().leases_held, leases);
  }  // socket closed: no Disconnect, no heartbeats
  EXPECT_TRUE(Eventually([&] { return cache_manager.backend->manager().LivePins() == 0; }, milliseconds(20000)));
  EXPECT_GT(cache_manager.server->stats().reclaimed_leases, 0u);
  EXPECT_EQ(cache_manager.server->stats().clients, 0u);

  // Replaced: a second scheduler's Hello reclaims what the first one holds, at once.
  zmq::context_t context(1);
  auto [first, leases] = take_leases(context, 60000);
  ASSERT_GT(leases, 0u);
  const uint64_t reclaimed = cache_manager.server->stats().reclaimed_leases;
  auto second = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(BaseConfig(dir, m, 0.6)));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(cache_manager.server->stats().reclaimed_leases, reclaimed + leases);
  EXPECT_EQ(cache_manager.backend->manager().LivePins(), 0u);
  EXPECT_FALSE(Drive(**second, routings).empty());  // it got every staging slot
}

TEST(CacheServer, ASchedulerConfiguredForAnotherArenaIsRefused) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  TempDir tmp;
  CacheManagerProcess cache_manager(tmp, BaseConfig(dir, m, 0.4), m);
  OffloadConfig c = BaseConfig(dir, m, 0.4);
  RemoteCacheConfig client = cache_manager.ClientConfig();
  client.arena_name = "/zipmoe-some-other-arena";
  c.cache = RemoteCacheBackendFactory(client);
  auto refused = OffloadExpertProvider::Create(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("arena mismatch"), std::string::npos) << refused.status().ToString();
}

// `zipmoe up` with pool F on the executor's device (issue 36 item 1), all three hops in this process:
// the cache-manager (LocalCacheBackend + CacheServer, device F), the scheduler (OffloadExpertProvider
// over a RemoteCacheBackend, served by a ProviderServer) and the executor (RemoteExpertProvider).
struct DeviceFChain {
  DeviceFChain(const TempDir& tmp, const OffloadConfig& base, const Manifest& m) : cache_manager(tmp, base, m) {
    OffloadConfig scheduler_config = cache_manager.SchedulerConfig(base);
    scheduler_config.device_f_pool = false;  // as the scheduler service: only the cache-manager decides it
    auto created = OffloadExpertProvider::Create(scheduler_config);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    if (!created.ok()) return;
    scheduler = std::move(created).value();
    ProviderServerConfig sc;
    sc.endpoint = "ipc://" + tmp.Sub("scheduler.sock");
    const CacheBackend& cache = scheduler->cache_backend();
    auto started = ProviderServer::Start(context, sc, scheduler.get(), cache.arena_base(), cache.arena_bytes());
    EXPECT_TRUE(started.ok()) << started.status().ToString();
    if (started.ok()) server = std::move(started).value();
  }
  ~DeviceFChain() {
    if (server != nullptr) server->Stop();
    server.reset();
    scheduler.reset();
  }
  // A new executor process (its own device epoch), linked as the executor service does (Ping).
  std::unique_ptr<RemoteExpertProvider> Executor() const {
    RemoteProviderConfig rc;
    rc.endpoint = server->endpoint();
    rc.arena_name = cache_manager.config.shm_name;
    rc.timeout = milliseconds(10000);
    auto connected = RemoteExpertProvider::Connect(rc);
    EXPECT_TRUE(connected.ok()) << connected.status().ToString();
    if (!connected.ok()) return nullptr;
    const Status ping = (*connected)->Ping(milliseconds(10000));
    EXPECT_TRUE(ping.ok()) << ping.ToString();
    return std::move(connected).value();
  }
  CacheManagerProcess cache_manager;
  zmq::context_t context{1};
  std::unique_ptr<OffloadExpertProvider> scheduler;
  std::unique_ptr<ProviderServer> server;
};

OffloadConfig DeviceFBase(const std::string& dir, const Manifest& m, const char* policy) {
  OffloadConfig base = BaseConfig(dir, m, 0.4);
  base.policy = *cm::ParseCachePolicy(policy);
  base.fused_recovery = true;  // as `zipmoe up` (the executor recovers misses from their planes)
  base.device_f_pool = true;
  return base;
}

TEST(CacheServer, PoolFOnTheExecutorsDeviceAcrossProcessesNamesTheSameSlotsAsEmbedded) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  const auto expected = test::Expected(**store);
  const auto routings = Routings(m, 4, 8, 13);
  for (const char* policy : {"zipmoe", "lru"}) {
    SCOPED_TRACE(policy);
    const OffloadConfig base = DeviceFBase(dir, m, policy);
    OffloadConfig local_config = base;
    local_config.shm_name = UniqueShm("local");
    auto local = OffloadExpertProvider::Create(local_config);
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    std::vector<test::DeviceSlotUse> want;
    const auto [local_holds, local_fills] = test::DriveDeviceSlots(**local, routings, expected, nullptr, &want);
    ASSERT_GT(local_holds, 0);

    TempDir tmp;
    DeviceFChain chain(tmp, base, m);
    ASSERT_NE(chain.server, nullptr);
    const std::unique_ptr<RemoteExpertProvider> executor = chain.Executor();
    ASSERT_NE(executor, nullptr);
    EXPECT_EQ(executor->device_f_slots(), (*local)->device_f_slots()) << "the Ping answer names F's slots";
    std::vector<test::DeviceSlotUse> got;
    const auto [holds, fills] = test::DriveDeviceSlots(*executor, routings, expected, nullptr, &got);
    ASSERT_TRUE(executor->Flush().ok());
    EXPECT_EQ(holds, local_holds);
    EXPECT_EQ(fills, local_fills);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(got[i] == want[i]) << "lease " << i << ": layer " << got[i].layer_id << " expert "
                                     << got[i].expert_id << " slot " << got[i].slot << " holds " << got[i].holds
                                     << ", embedded: expert " << want[i].expert_id << " slot " << want[i].slot
                                     << " holds " << want[i].holds;
    }
    // Nothing stays pinned, and the cache-manager counted what the embedded cache counted. Flush() answers
    // once the scheduler has the last release; the admissions it carries reach the cache-manager after
    // that, so wait (up to 5 s) for the pins to drop and the counters to agree before comparing them one
    // by one, for a message that names the pool.
    const cm::CacheCounters local_counters = (*local)->cache().Counters();
    const auto counted_alike = [&] {
      const cm::CacheCounters c = chain.cache_manager.backend->manager().Counters();
      for (int p = 0; p < cm::kPoolCount; ++p) {
        if (c.pools[p].requests != local_counters.pools[p].requests ||
            c.pools[p].admissions != local_counters.pools[p].admissions) {
          return false;
        }
      }
      return chain.cache_manager.backend->manager().LivePins() == 0;
    };
    Eventually(counted_alike);
    EXPECT_EQ(chain.cache_manager.backend->manager().LivePins(), 0u);
    const cm::CacheCounters remote_counters = chain.cache_manager.backend->manager().Counters();
    for (int p = 0; p < cm::kPoolCount; ++p) {
      EXPECT_EQ(remote_counters.pools[p].requests, local_counters.pools[p].requests) << p;
      EXPECT_EQ(remote_counters.pools[p].admissions, local_counters.pools[p].admissions) << p;
    }
  }
}

// An executor that could not write an expert into its F slot abandons the lease; across processes the
// abandonment travels with the release (LeaseRelease.abandoned_expert_ids), so the cache-manager
// never records F for bytes that were never written (DriveDeviceSlots would then find a later hit's
// slot empty).
TEST(CacheServer, AnAbandonedDeviceFillAcrossProcessesIsNotRecordedInF) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  const auto expected = test::Expected(**store);
  const auto routings = Routings(m, 4, 6, 17);
  TempDir tmp;
  DeviceFChain chain(tmp, DeviceFBase(dir, m, "zipmoe"), m);
  ASSERT_NE(chain.server, nullptr);
  const std::unique_ptr<RemoteExpertProvider> executor = chain.Executor();
  ASSERT_NE(executor, nullptr);
  std::set<std::pair<int32_t, int32_t>> abandoned;
  const auto abandon_first_fills = [&](int32_t layer, int32_t expert) {
    if (abandoned.size() >= 3 || (!abandoned.empty() && abandoned.begin()->first != layer)) return false;
    abandoned.insert({layer, expert});
    return true;
  };
  const auto [holds, fills] = test::DriveDeviceSlots(*executor, {routings.front()}, expected, nullptr, nullptr,
                                                     abandon_first_fills);
  EXPECT_EQ(holds + fills, static_cast<int>(routings.front().expert_ids.size()));
  ASSERT_TRUE(executor->Flush().ok());
  ASSERT_FALSE(abandoned.empty());
  // The releases reach the cache-manager after Flush() answers: once no pin is left they all have.
  ASSERT_TRUE(Eventually([&] { return chain.cache_manager.backend->manager().LivePins() == 0; }));
  for (const auto& [layer, expert] : abandoned) {
    EXPECT_NE(chain.cache_manager.backend->manager().Peek(layer, expert), CompressionState::kF)
        << "layer " << layer << " expert " << expert;
  }
  EXPECT_EQ(chain.cache_manager.server->stats().admit_errors, 0u);
}

// A restarted executor is a new process with new device memory: its first layer carries a new device
// epoch, and the cache-manager empties F before it names any slot as holding an expert, so the new
// executor reads only slots it wrote (its simulated device starts empty: a stale "holds" would find
// no bytes there).
TEST(CacheServer, ANewExecutorProcessFindsPoolFEmptiedBeforeItsFirstLayer) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  const auto expected = test::Expected(**store);
  const auto routings = Routings(m, 4, 6, 19);
  TempDir tmp;
  DeviceFChain chain(tmp, DeviceFBase(dir, m, "lru"), m);
  ASSERT_NE(chain.server, nullptr);
  {
    const std::unique_ptr<RemoteExpertProvider> first = chain.Executor();
    ASSERT_NE(first, nullptr);
    const auto [holds, fills] = test::DriveDeviceSlots(*first, routings, expected);
    EXPECT_GT(holds, 0);
    ASSERT_TRUE(first->Flush().ok());
  }
  ASSERT_TRUE(Eventually([&] { return chain.cache_manager.backend->manager().LivePins() == 0; }));
  const uint64_t resident = chain.cache_manager.backend->manager().Counters().pools[cm::PoolIndex(cm::Pool::kF)]
                                .resident_experts;
  ASSERT_GT(resident, 0u) << "the first executor left experts in F";
  const std::unique_ptr<RemoteExpertProvider> second = chain.Executor();
  ASSERT_NE(second, nullptr);
  test::SimulatedDevice fresh(second->device_f_slots());
  std::vector<test::DeviceSlotUse> uses;
  const auto [holds, fills] = test::DriveDeviceSlots(*second, routings, expected, &fresh, &uses);
  ASSERT_TRUE(second->Flush().ok());
  EXPECT_GT(holds, 0) << "the second executor's own fills are hits later";
  for (const test::DeviceSlotUse& u : uses) {
    if (u.layer_id != routings.front().layer_id) break;
    EXPECT_FALSE(u.holds) << "expert " << u.expert_id << " said held in slot " << u.slot << " before any write";
  }
  EXPECT_GE(chain.cache_manager.backend->manager().Counters().pools[cm::PoolIndex(cm::Pool::kF)].removals, resident);
}

// `zipmoe up --preload`: the cache-manager fills its cache before serving (the service's `preload`,
// OffloadExpertProvider::CreatePreloadedCache) exactly as embedded mode's --preload fills its own: the
// same experts in the same pools, the counters started afresh, and then a scheduler attached to it
// serves every lease with the bytes, hits and admissions of the preloaded embedded runtime.
TEST(CacheServer, APreloadedCacheManagerServesWhatAnEmbeddedPreloadServes) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  std::set<int32_t> layers;
  for (const ExpertTensorInfo& t : m.expert_tensors) layers.insert(t.layer_id);
  PreloadCounts counts;  // a "trace" that favours a different order of experts in each layer
  for (int32_t l : layers)
    for (int32_t e = 0; e < m.n_experts; ++e) counts[l][e] = static_cast<uint64_t>((e * 7 + l * 3) % m.n_experts);
  const auto routings = Routings(m, 4, 6, 23);
  for (const char* policy : {"zipmoe", "lru"}) {
    SCOPED_TRACE(policy);
    OffloadConfig base = BaseConfig(dir, m, 0.5);
    base.policy = *cm::ParseCachePolicy(policy);
    OffloadConfig local_config = base;
    local_config.shm_name = UniqueShm("local");
    auto local = OffloadExpertProvider::Create(local_config);
    ASSERT_TRUE(local.ok()) << local.status().ToString();
    auto local_preload = (*local)->Preload(counts);
    ASSERT_TRUE(local_preload.ok()) << local_preload.status().ToString();
    ASSERT_GT(local_preload->experts, 0u);

    TempDir tmp;
    CacheManagerProcess cache_manager(tmp, base, m, milliseconds(500), &counts);
    ASSERT_NE(cache_manager.server, nullptr);
    EXPECT_EQ(cache_manager.preload_stats.experts, local_preload->experts);
    EXPECT_EQ(cache_manager.preload_stats.read_bytes, local_preload->read_bytes);
    const cm::CacheManager& served = cache_manager.backend->manager();
    for (int32_t l : layers) {
      for (int32_t e = 0; e < m.n_experts; ++e) {
        EXPECT_EQ(served.Peek(l, e), (*local)->cache().Peek(l, e)) << "layer " << l << " expert " << e;
      }
    }
    EXPECT_EQ(served.LivePins(), 0u) << "the preload's runtime left nothing pinned";
    for (const cm::PoolCounters& p : served.Counters().pools) EXPECT_EQ(p.requests, 0u) << "counters start afresh";

    const std::vector<std::string> want = Drive(**local, routings);
    auto remote = OffloadExpertProvider::Create(cache_manager.SchedulerConfig(base));
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    const std::vector<std::string> got = Drive(**remote, routings);
    ASSERT_NO_FATAL_FAILURE(ExpectSameLeases(got, want));
    ExpectSameCacheState(**remote, **local, cache_manager);
  }
}

TEST(CacheServer, APreloadedCacheIsThisProcesssOwn) {
  const std::string dir = Model();
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  TempDir tmp;
  CacheManagerProcess cache_manager(tmp, BaseConfig(dir, m, 0.4), m);
  const auto refused =
      OffloadExpertProvider::CreatePreloadedCache(cache_manager.SchedulerConfig(BaseConfig(dir, m, 0.4)), {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("OffloadConfig::cache"), std::string::npos) << refused.status().ToString();
}

}  // namespace
}  // namespace zipmoe::runtime
