// The executor <-> scheduler link (remote_provider.h): a RemoteExpertProvider talking to a
// ProviderServer over ipc:// in this process, each test once over ZeroMQ and once over the
// shared-memory pipe (OpenPipe). Ping answers only once the server runs (what the executor waits for
// before it reports ready), a layer round trip delivers the server's bytes in the shared arena, and a
// server that never starts gives kUnavailable naming the endpoint. A new executor's pipe replaces the
// old one (whose open layer is aborted); a pipe the scheduler cannot attach is refused by name. With a
// provider that has a ready listener, experts leave from the thread that made them ready, and an
// abort waits for an expert still loading.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <unistd.h>
#include <zmq.hpp>

#include "common/expert_provider.h"
#include "common/ipc/shm_region.h"
#include "services/links/remote_provider.h"
#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

using std::chrono::milliseconds;
using testing::TempDir;

constexpr int64_t kIntermediate = 4;
constexpr int64_t kHidden = 8;
constexpr int32_t kExperts = 3;
constexpr uint64_t kMatrixBytes = kIntermediate * kHidden * 2;

// Serves expert e of any layer from arena bytes [3e, 3e+3) matrices, filled with a known pattern;
// with `planes`, unrecovered: each matrix's first half as its E plane, second half as its SM plane;
// with `ready_together`, NextIsReady says every expert of the layer is ready (a layer of cache hits).
class ArenaProvider : public ExpertProvider {
 public:
  explicit ArenaProvider(uint8_t* arena, bool planes = false, bool ready_together = false)
      : arena_(arena), planes_(planes), ready_together_(ready_together) {
    for (uint64_t i = 0; i < kExperts * 3 * kMatrixBytes; ++i) arena_[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  Status BeginLayer(const LayerRouting& routing) override {
    routing_ = routing;
    next_ = 0;
    return Status::Ok();
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    if (next_ >= routing_.expert_ids.size()) return Status::InvalidArgument("all delivered");
    const int32_t e = routing_.expert_ids[next_++];
    ExpertWeightsView v;
    v.layer_id = routing_.layer_id;
    v.expert_id = e;
    const uint8_t* m = arena_ + (3 * e) * kMatrixBytes;
    if (planes_) {
      v.gate_planes = {m, m + kMatrixBytes / 2};
      v.up_planes = {m + kMatrixBytes, m + kMatrixBytes + kMatrixBytes / 2};
      v.down_planes = {m + 2 * kMatrixBytes, m + 2 * kMatrixBytes + kMatrixBytes / 2};
    } else {
      v.gate = m;
      v.up = m + kMatrixBytes;
      v.down = m + 2 * kMatrixBytes;
    }
    v.intermediate = kIntermediate;
    v.hidden = kHidden;
    return std::unique_ptr<ExpertLease>(new Lease(v));
  }
  bool NextIsReady() const override { return ready_together_ && next_ < routing_.expert_ids.size(); }
  Status EndLayer(int32_t layer_id) override {
    ++ended_[layer_id];
    return Status::Ok();
  }
  int ended(int32_t layer_id) { return ended_[layer_id]; }

 private:
  class Lease : public ExpertLease {
   public:
    explicit Lease(ExpertWeightsView v) : v_(v) {}
    const ExpertWeightsView& weights() const override { return v_; }

   private:
    ExpertWeightsView v_;
  };
  uint8_t* arena_;
  bool planes_;
  bool ready_together_;
  LayerRouting routing_;
  size_t next_ = 0;
  std::map<int32_t, int> ended_;
};

// A provider with a ready listener (what OffloadExpertProvider is to the scheduler): BeginLayer has
// the layer's first expert ready (a cache hit); the test makes the others ready with MakeReady from a
// thread of its own (a read's or decode's completion), which calls the listener. NextReady waits for
// readiness and records which thread took each expert.
class ListenerProvider : public ExpertProvider {
 public:
  explicit ListenerProvider(uint8_t* arena) : inner_(arena) {}
  Status BeginLayer(const LayerRouting& routing) override {
    std::lock_guard<std::mutex> lock(mu_);
    layer_ = routing.layer_id;
    n_ = routing.expert_ids.size();
    next_ = 0;
    ready_ = std::min<size_t>(1, n_);
    return inner_.BeginLayer(routing);
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return next_ < ready_; });
    ++next_;
    takers_[layer_].push_back(std::this_thread::get_id());
    return inner_.NextReady();
  }
  bool NextIsReady() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return next_ < ready_;
  }
  Status EndLayer(int32_t layer_id) override { return inner_.EndLayer(layer_id); }
  bool SetReadyListener(std::function<void()> listener) override {
    std::lock_guard<std::recursive_mutex> lock(listener_mu_);
    listener_ = std::move(listener);
    return true;
  }
  // k more experts of the open layer are ready; calls the listener on this thread.
  void MakeReady(size_t k) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = std::min(ready_ + k, n_);
    }
    cv_.notify_all();
    std::lock_guard<std::recursive_mutex> lock(listener_mu_);
    if (listener_) listener_();
  }
  std::vector<std::thread::id> takers(int32_t layer_id) {
    std::lock_guard<std::mutex> lock(mu_);
    return takers_[layer_id];
  }
  int ended(int32_t layer_id) { return inner_.ended(layer_id); }

 private:
  ArenaProvider inner_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int32_t layer_ = -1;
  size_t n_ = 0, next_ = 0, ready_ = 0;
  std::map<int32_t, std::vector<std::thread::id>> takers_;
  std::recursive_mutex listener_mu_;
  std::function<void()> listener_;
};

// An arena, an executor's RemoteExpertProvider connected to an ipc:// endpoint, and (StartServer)
// a ProviderServer there over an ArenaProvider. The parameter: whether Link() moves the link onto a
// shared-memory pipe.
class RemoteProviderTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    Result<ShmRegion> arena = ShmRegion::Create(fmt::format("/zipmoe-test-remote-{}", static_cast<long>(::getpid())),
                                                1 << 16);
    ASSERT_TRUE(arena.ok()) << arena.status().ToString();
    arena_.emplace(std::move(arena).value());
    config_.endpoint = "ipc://" + tmp_.path() + "/scheduler.sock";
    config_.arena_name = arena_->name();
    config_.timeout = milliseconds(5000);
    Result<std::unique_ptr<RemoteExpertProvider>> remote = RemoteExpertProvider::Connect(config_);
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();  // a ZeroMQ connect needs nobody listening
    remote_ = std::move(remote).value();
  }
  // A ProviderServer at the executor's endpoint over `provider` (which must outlive it).
  Result<std::unique_ptr<ProviderServer>> Serve(ExpertProvider* provider) {
    ProviderServerConfig server_config;
    server_config.endpoint = config_.endpoint;
    return ProviderServer::Start(context_, server_config, provider, arena_->data(), arena_->size_bytes());
  }
  void StartServer(bool planes, bool ready_together = false) {
    provider_ = std::make_unique<ArenaProvider>(arena_->data(), planes, ready_together);
    Result<std::unique_ptr<ProviderServer>> server = Serve(provider_.get());
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  // What the executor service does once the scheduler serves: Ping, then (parameter) OpenPipe.
  static void Link(RemoteExpertProvider* remote) {
    ASSERT_TRUE(remote->Ping(milliseconds(5000)).ok());
    if (GetParam()) {
      const Status piped = remote->OpenPipe(milliseconds(5000));
      ASSERT_TRUE(piped.ok()) << piped.ToString();
    }
    EXPECT_EQ(remote->on_pipe(), GetParam());
  }
  void Link() { Link(remote_.get()); }
  // The first executor (linked) opens layer 3 of experts {0, 1} and holds expert 0's lease in *held;
  // then a second executor connects and links (a restarted executor, while the old layer is open).
  void OpenLayerThenConnectASecondExecutor(std::unique_ptr<ExpertLease>* held,
                                           std::unique_ptr<RemoteExpertProvider>* second) {
    ASSERT_NO_FATAL_FAILURE(Link());
    ASSERT_TRUE(remote_->BeginLayer(LayerRouting(3, {0, 1}, {1, 1})).ok());
    Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    *held = std::move(lease).value();
    Result<std::unique_ptr<RemoteExpertProvider>> connected = RemoteExpertProvider::Connect(config_);
    ASSERT_TRUE(connected.ok()) << connected.status().ToString();
    ASSERT_NO_FATAL_FAILURE(Link(connected->get()));
    *second = std::move(connected).value();
  }

  TempDir tmp_;
  std::optional<ShmRegion> arena_;
  RemoteProviderConfig config_;
  std::unique_ptr<RemoteExpertProvider> remote_;
  zmq::context_t context_{1};
  std::unique_ptr<ArenaProvider> provider_;  // outlives server_
  std::unique_ptr<ProviderServer> server_;
};

TEST_P(RemoteProviderTest, PingAnswersOnlyOnceTheSchedulerServes) {
  const Status early = remote_->Ping(milliseconds(300));
  EXPECT_EQ(early.code(), StatusCode::kUnavailable) << early.ToString();
  EXPECT_NE(early.ToString().find(config_.endpoint), std::string::npos) << early.ToString();

  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false));
  EXPECT_TRUE(remote_->Ping(milliseconds(5000)).ok());
  EXPECT_TRUE(remote_->Ping(milliseconds(5000)).ok()) << "a second ping is answered too";
  ASSERT_NO_FATAL_FAILURE(Link());
  EXPECT_TRUE(remote_->Ping(milliseconds(5000)).ok()) << "a ping over the link in use";

  // The stale ping answers do not disturb a layer: the executor sees the server's bytes.
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(2, {0, 2}, {1, 1})).ok());
  std::map<int32_t, std::vector<uint8_t>> got;
  for (int i = 0; i < 2; ++i) {
    Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    const ExpertWeightsView& v = (*lease)->weights();
    EXPECT_EQ(v.layer_id, 2);
    EXPECT_EQ(v.intermediate, kIntermediate);
    const auto* down = static_cast<const uint8_t*>(v.down);
    got[v.expert_id].assign(down, down + kMatrixBytes);
  }
  ASSERT_TRUE(remote_->EndLayer(2).ok());
  ASSERT_TRUE(remote_->Flush().ok());  // EndLayer does not wait for the scheduler's answer
  EXPECT_EQ(provider_->ended(2), 1);
  ASSERT_EQ(got.size(), 2u);
  for (int32_t e : {0, 2}) {
    const uint8_t* want = arena_->data() + (3 * e + 2) * kMatrixBytes;
    EXPECT_EQ(std::memcmp(got[e].data(), want, kMatrixBytes), 0) << "expert " << e;
  }
  server_->Stop();
}

// An unrecovered expert (fused recovery on a CPU executor) crosses as its E/SM plane offsets: the
// executor's view has planes, not BF16, at the scheduler's bytes.
TEST_P(RemoteProviderTest, UnrecoveredExpertsCrossAsTheirPlanes) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/true));
  ASSERT_NO_FATAL_FAILURE(Link());
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(1, {1}, {2})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const ExpertWeightsView& v = (*lease)->weights();
  ASSERT_TRUE(v.planes());
  const uint8_t* m = arena_->data() + 3 * kMatrixBytes;  // expert 1
  // The executor's own mapping of the arena: the same bytes (the pattern differs at every offset
  // within a 256-byte period, so a wrong offset shows).
  const size_t half = kMatrixBytes / 2;
  EXPECT_EQ(std::memcmp(v.gate_planes.e, m, half), 0);
  EXPECT_EQ(std::memcmp(v.gate_planes.sm, m + half, half), 0);
  EXPECT_EQ(std::memcmp(v.up_planes.e, m + kMatrixBytes, half), 0);
  EXPECT_EQ(std::memcmp(v.down_planes.e, m + 2 * kMatrixBytes, half), 0);
  EXPECT_EQ(std::memcmp(v.down_planes.sm, m + 2 * kMatrixBytes + half, half), 0);
  EXPECT_NE(std::memcmp(v.down_planes.sm, m + 2 * kMatrixBytes, half), 0) << "the pattern tells offsets apart";
  lease->reset();
  ASSERT_TRUE(remote_->EndLayer(1).ok());
  server_->Stop();
}

// EndLayer is pipelined: it returns before the scheduler answers, the next layer's request follows
// at once and still finds the layer ended (one peer's messages are handled in order). A LayerEnd the
// scheduler refuses comes back as an error of the next call that reads from it.
TEST_P(RemoteProviderTest, EndLayerDoesNotWaitAndARefusalSurfacesAtTheNextCall) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false));
  ASSERT_NO_FATAL_FAILURE(Link());
  for (int32_t layer = 0; layer < 3; ++layer) {  // back to back: no Ack waited for in between
    ASSERT_TRUE(remote_->BeginLayer(LayerRouting(layer, {1}, {1})).ok());
    Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
    ASSERT_TRUE(lease.ok()) << "layer " << layer << ": " << lease.status().ToString();
    EXPECT_EQ((*lease)->weights().layer_id, layer);
    lease->reset();
    ASSERT_TRUE(remote_->EndLayer(layer).ok());
  }
  ASSERT_TRUE(remote_->Flush().ok());
  for (int32_t layer = 0; layer < 3; ++layer) EXPECT_EQ(provider_->ended(layer), 1) << "layer " << layer;

  // Ending a layer that is not open: EndLayer itself returns OK, the refusal comes with the next call.
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(4, {0}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->reset();
  ASSERT_TRUE(remote_->EndLayer(5).ok());
  const Status refused = remote_->Flush();
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused.ToString();
  EXPECT_NE(refused.ToString().find("EndLayer(5)"), std::string::npos) << refused.ToString();
  EXPECT_TRUE(remote_->Flush().ok()) << "a refusal is returned once";
  ASSERT_TRUE(remote_->EndLayer(4).ok());
  ASSERT_TRUE(remote_->Flush().ok());
  EXPECT_EQ(provider_->ended(4), 1);

  // The same refusal without Flush: the next BeginLayer... or NextReady returns it.
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(6, {2}, {1})).ok());
  lease = remote_->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->reset();
  ASSERT_TRUE(remote_->EndLayer(7).ok());
  Status next = remote_->BeginLayer(LayerRouting(8, {2}, {1}));
  if (next.ok()) next = remote_->NextReady().status();  // the Ack may still be on its way
  EXPECT_EQ(next.code(), StatusCode::kInvalidArgument) << next.ToString();
  server_->Stop();
}

// Experts that arrived together are ready at once: NextIsReady() takes what is waiting on the socket
// into an inbox (never blocking) and NextReady() reads the inbox first, in arrival order, so an Ack
// that came before an ExpertReady is still taken in before it.
TEST_P(RemoteProviderTest, ExpertsThatArrivedTogetherAreReadyAtOnceInArrivalOrder) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false));
  ASSERT_NO_FATAL_FAILURE(Link());
  const auto wait_ready = [&] {  // the scheduler's next ExpertReady arrives within a moment
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!remote_->NextIsReady()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return true;
  };
  EXPECT_FALSE(remote_->NextIsReady()) << "no layer begun";
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(2, {0, 1, 2}, {1, 1, 1})).ok());
  std::vector<int32_t> got;
  std::vector<std::unique_ptr<ExpertLease>> held;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) {
      ASSERT_TRUE(wait_ready()) << "expert " << i << " never became ready";
    }
    Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ((*lease)->weights().layer_id, 2);
    EXPECT_EQ(std::memcmp((*lease)->weights().gate, arena_->data() + 3 * (*lease)->weights().expert_id * kMatrixBytes,
                          kMatrixBytes), 0);
    got.push_back((*lease)->weights().expert_id);
    held.push_back(std::move(lease).value());
  }
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(remote_->NextIsReady()) << "every expert of the layer was delivered";
  held.clear();
  ASSERT_TRUE(remote_->EndLayer(2).ok());
  ASSERT_TRUE(remote_->Flush().ok());

  // A refused LayerEnd's Ack arrives before the next layer's ExpertReady; NextIsReady() takes both
  // into the inbox, and NextReady() still takes the Ack in first and returns the refusal.
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(4, {0}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  lease->reset();
  ASSERT_TRUE(remote_->EndLayer(5).ok());  // layer 5 is not open: the scheduler refuses it
  Status begun = remote_->BeginLayer(LayerRouting(6, {1}, {1}));
  if (begun.ok()) {  // the Ack may also have come in time for BeginLayer, which then returns it
    ASSERT_TRUE(wait_ready());
    begun = remote_->NextReady().status();
  }
  EXPECT_EQ(begun.code(), StatusCode::kInvalidArgument) << begun.ToString();
  EXPECT_NE(begun.ToString().find("EndLayer(5)"), std::string::npos) << begun.ToString();
  server_->Stop();
}

// Experts the provider has ready together (NextIsReady) cross in one ExpertsReady frame (message
// version 4) and come out of NextReady one by one, in order, with their bytes.
TEST_P(RemoteProviderTest, ExpertsReadyTogetherCrossInOneFrame) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false, /*ready_together=*/true));
  ASSERT_NO_FATAL_FAILURE(Link());
  const uint64_t frames_before = remote_->channel_stats().received;
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(7, {0, 1, 2}, {1, 1, 1})).ok());
  std::vector<std::unique_ptr<ExpertLease>> held;
  for (int32_t e = 0; e < 3; ++e) {
    Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    EXPECT_EQ((*lease)->weights().layer_id, 7);
    EXPECT_EQ((*lease)->weights().expert_id, e);
    EXPECT_EQ(std::memcmp((*lease)->weights().down, arena_->data() + (3 * e + 2) * kMatrixBytes, kMatrixBytes), 0);
    held.push_back(std::move(lease).value());
  }
  EXPECT_EQ(remote_->channel_stats().received - frames_before, 1u) << "three experts, one frame";
  held.clear();
  ASSERT_TRUE(remote_->EndLayer(7).ok());
  ASSERT_TRUE(remote_->Flush().ok());
  EXPECT_EQ(provider_->ended(7), 1);
  server_->Stop();
}

// A second executor connects while the first holds a lease of an open layer: its pipe replaces the
// first one, its first LayerRequest aborts the old layer (its leases released, the layer ended), and
// it is served; replies to the old executor are dropped.
TEST_P(RemoteProviderTest, ANewExecutorReplacesTheOldOneAndItsOpenLayer) {
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false));
  std::unique_ptr<ExpertLease> held;
  std::unique_ptr<RemoteExpertProvider> second;
  ASSERT_NO_FATAL_FAILURE(OpenLayerThenConnectASecondExecutor(&held, &second));
  ASSERT_TRUE(second->BeginLayer(LayerRouting(9, {2}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = second->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)->weights().layer_id, 9);
  EXPECT_EQ(std::memcmp((*lease)->weights().up, arena_->data() + (3 * 2 + 1) * kMatrixBytes, kMatrixBytes), 0);
  lease->reset();
  ASSERT_TRUE(second->EndLayer(9).ok());
  ASSERT_TRUE(second->Flush().ok());
  EXPECT_EQ(provider_->ended(3), 1) << "the old executor's layer was ended";
  EXPECT_EQ(provider_->ended(9), 1);
  EXPECT_EQ(server_->stats().aborted_layers, 1u);
  held.reset();  // the old executor's release is stale now: ignored
  server_->Stop();
}

// Issue 37 item 5: a record length outside the executor's receiving ring (ring 1 of its pipe)
// breaks the pipe. The layer that finds it fails with kCorruption; the link falls back to ZeroMQ,
// and the next layer pings, offers a new pipe, and is served the right bytes through it.
TEST_P(RemoteProviderTest, ABrokenPipeFailsOneLayerAndTheNextRunsOnANewPipe) {
  if (!GetParam()) GTEST_SKIP() << "a pipe case";
  ASSERT_NO_FATAL_FAILURE(StartServer(/*planes=*/false));
  ASSERT_NO_FATAL_FAILURE(Link());
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(1, {1}, {1})).ok());
  ASSERT_TRUE(remote_->NextReady().ok());
  ASSERT_TRUE(remote_->EndLayer(1).ok());
  ASSERT_TRUE(remote_->Flush().ok());
  const std::string old_pipe = remote_->pipe_name();
  ASSERT_FALSE(old_pipe.empty());
  {
    // The pipe's layout (common/ipc/shm_pipe.cc): a 4096-byte header {magic[8], ring_bytes, pid, then two
    // 64-byte-aligned rings of {head, tail, doorbell} lines of 64 bytes each}, then ring 0's data and
    // ring 1's. The executor created the pipe: the scheduler writes ring 1, the executor reads it.
    Result<ShmRegion> raw = ShmRegion::Attach(old_pipe);
    ASSERT_TRUE(raw.ok()) << raw.status().ToString();
    uint32_t ring_bytes = 0;
    std::memcpy(&ring_bytes, raw->data() + 8, sizeof ring_bytes);
    auto* tail = reinterpret_cast<std::atomic<uint64_t>*>(raw->data() + 64 + 192 + 64);
    const uint64_t at = tail->load();
    const uint32_t header[2] = {ring_bytes * 2, 0};  // a record longer than the ring
    std::memcpy(raw->data() + 4096 + ring_bytes + at % ring_bytes, header, sizeof header);
    tail->store(at + 64);
  }
  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(2, {0}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> broken = remote_->NextReady();
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kCorruption) << broken.status().ToString();
  EXPECT_NE(broken.status().message().find(old_pipe), std::string::npos) << broken.status().ToString();
  EXPECT_FALSE(remote_->on_pipe());

  ASSERT_TRUE(remote_->BeginLayer(LayerRouting(3, {2}, {1})).ok());
  EXPECT_TRUE(remote_->on_pipe()) << "a new pipe was offered and taken";
  EXPECT_NE(remote_->pipe_name(), old_pipe);
  Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)->weights().layer_id, 3);
  EXPECT_EQ(std::memcmp((*lease)->weights().up, arena_->data() + (3 * 2 + 1) * kMatrixBytes, kMatrixBytes), 0);
  lease->reset();
  ASSERT_TRUE(remote_->EndLayer(3).ok());
  ASSERT_TRUE(remote_->Flush().ok());
  server_->Stop();
}

// With a ready listener the server has no deliverer thread: the cache hit goes out from the
// LayerRequest's handler, each later expert from the thread that made it ready (the listener's).
TEST_P(RemoteProviderTest, WithAReadyListenerExpertsAreSentFromTheThreadThatMadeThemReady) {
  ListenerProvider provider(arena_->data());
  Result<std::unique_ptr<ProviderServer>> server = Serve(&provider);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_NO_FATAL_FAILURE(Link());
  for (int32_t layer : {2, 3}) {
    ASSERT_TRUE(remote_->BeginLayer(LayerRouting(layer, {0, 1, 2}, {1, 1, 1})).ok());
    std::vector<std::unique_ptr<ExpertLease>> held;
    Result<std::unique_ptr<ExpertLease>> hit = remote_->NextReady();  // ready at BeginLayer
    ASSERT_TRUE(hit.ok()) << hit.status().ToString();
    EXPECT_EQ((*hit)->weights().expert_id, 0);
    held.push_back(std::move(hit).value());
    std::thread::id completer;
    std::thread completion([&] {
      completer = std::this_thread::get_id();
      provider.MakeReady(2);
    });
    completion.join();
    for (int32_t e : {1, 2}) {
      Result<std::unique_ptr<ExpertLease>> lease = remote_->NextReady();
      ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      EXPECT_EQ((*lease)->weights().layer_id, layer);
      EXPECT_EQ((*lease)->weights().expert_id, e);
      EXPECT_EQ(std::memcmp((*lease)->weights().up, arena_->data() + (3 * e + 1) * kMatrixBytes, kMatrixBytes), 0);
      held.push_back(std::move(lease).value());
    }
    const std::vector<std::thread::id> takers = provider.takers(layer);
    ASSERT_EQ(takers.size(), 3u);
    EXPECT_NE(takers[0], completer) << "the hit was sent before the completion";
    EXPECT_EQ(takers[1], completer) << "expert 1 was not sent from the thread that made it ready";
    EXPECT_EQ(takers[2], completer);
    held.clear();
    ASSERT_TRUE(remote_->EndLayer(layer).ok());
  }
  ASSERT_TRUE(remote_->Flush().ok());
  EXPECT_EQ(provider.ended(2), 1);
  EXPECT_EQ(provider.ended(3), 1);
  (*server)->Stop();
  provider.MakeReady(1);  // after Stop: the listener is gone, nothing is sent
}

// A new executor aborts an open layer whose last expert is not ready yet: with a ready listener the
// abort waits for it (its completion's listener call finds the delivery taken) and ends the layer.
TEST_P(RemoteProviderTest, WithAReadyListenerANewExecutorAbortsALayerStillLoading) {
  ListenerProvider provider(arena_->data());
  Result<std::unique_ptr<ProviderServer>> server = Serve(&provider);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::unique_ptr<ExpertLease> held;
  std::unique_ptr<RemoteExpertProvider> second;
  ASSERT_NO_FATAL_FAILURE(OpenLayerThenConnectASecondExecutor(&held, &second));
  std::thread completion([&] {
    std::this_thread::sleep_for(milliseconds(200));  // the abort is waiting for expert 1 by now
    provider.MakeReady(1);
  });
  ASSERT_TRUE(second->BeginLayer(LayerRouting(9, {2}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = second->NextReady();
  completion.join();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  EXPECT_EQ((*lease)->weights().layer_id, 9);
  EXPECT_EQ(std::memcmp((*lease)->weights().gate, arena_->data() + 3 * 2 * kMatrixBytes, kMatrixBytes), 0);
  lease->reset();
  ASSERT_TRUE(second->EndLayer(9).ok());
  ASSERT_TRUE(second->Flush().ok());
  EXPECT_EQ(provider.ended(3), 1) << "the old executor's layer was ended";
  EXPECT_EQ(provider.ended(9), 1);
  EXPECT_EQ(provider.takers(3).size(), 2u) << "the abort took the expert still loading";
  EXPECT_EQ((*server)->stats().aborted_layers, 1u);
  held.reset();
  (*server)->Stop();
}

INSTANTIATE_TEST_SUITE_P(Link, RemoteProviderTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "Pipe" : "ZeroMQ"; });

// A PipeOpen naming a region the scheduler cannot attach is refused with an Ack that names it; the
// link stays on ZeroMQ and keeps working.
TEST(RemotePipeTest, APipeTheSchedulerCannotAttachIsRefusedByName) {
  TempDir tmp;
  Result<ShmRegion> arena = ShmRegion::Create(fmt::format("/zipmoe-test-remote-pipe-{}", static_cast<long>(::getpid())),
                                              1 << 16);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  ArenaProvider provider(arena->data());
  zmq::context_t context(1);
  ProviderServerConfig server_config;
  server_config.endpoint = "ipc://" + tmp.path() + "/scheduler.sock";
  Result<std::unique_ptr<ProviderServer>> server =
      ProviderServer::Start(context, server_config, &provider, arena->data(), arena->size_bytes());
  ASSERT_TRUE(server.ok()) << server.status().ToString();

  messaging::ChannelOptions options;
  options.kind = messaging::SocketKind::kDealer;
  options.endpoint = server_config.endpoint;
  Result<messaging::Channel> raw = messaging::Channel::Open(context, options);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  messaging::PipeOpen open;
  open.name = fmt::format("/zipmoe-test-no-such-pipe-{}", static_cast<long>(::getpid()));
  open.ring_bytes = 4096;
  ASSERT_TRUE(raw->Send(open, milliseconds(5000)).ok());
  Result<messaging::Received> answer = raw->Recv(milliseconds(5000));
  ASSERT_TRUE(answer.ok()) << answer.status().ToString();
  const auto* ack = std::get_if<messaging::Ack>(&answer->message.body);
  ASSERT_NE(ack, nullptr);
  const Status refused = messaging::StatusOf(*ack);
  EXPECT_EQ(refused.code(), StatusCode::kNotFound) << refused.ToString();
  EXPECT_NE(refused.ToString().find(open.name), std::string::npos) << refused.ToString();

  ASSERT_TRUE(raw->Send(LayerRequestToWire(LayerRouting(1, {2}, {1}), false), milliseconds(5000)).ok());
  Result<messaging::Received> ready = raw->Recv(milliseconds(5000));
  ASSERT_TRUE(ready.ok()) << ready.status().ToString();
  const auto* expert = std::get_if<messaging::ExpertReady>(&ready->message.body);
  ASSERT_NE(expert, nullptr) << messaging::BodyName(ready->message.body);
  EXPECT_EQ(expert->expert_id, 2);
  (*server)->Stop();
}

}  // namespace
}  // namespace zipmoe::runtime
