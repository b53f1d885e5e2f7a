// The GPU executor's MoE block (moe_device.h) and device F slots (device_expert_cache.h), driven with
// the CPU stand-in for the device (a BF16 CPU x and CPU slots: the same host logic, the kernels' CPU
// references in place of the launches). On a CUDA machine scripts/gpu_check.sh runs the real path.
#include <gtest/gtest.h>

#include <cctype>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/bitfield.h"
#include "common/checkpoint/expert_store.h"
#include "common/observed_expert_provider.h"
#include "common/resident_expert_provider.h"
#include "kernels/fp8_dequant.h"
#include "services/executor/device_expert_cache.h"
#include "services/executor/model.h"
#include "services/executor/model_weights.h"
#include "services/executor/moe_block.h"
#include "services/executor/moe_device.h"
#include "services/pipeline/offload_provider.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

// ---- DeviceExpertCache -------------------------------------------------------------------------

DeviceExpertCache SmallCache(int64_t capacity, int* allocations) {
  return DeviceExpertCache(capacity, [allocations] {
    ++*allocations;
    return at::zeros({4}, at::TensorOptions().dtype(at::kBFloat16));
  });
}

TEST(DeviceExpertCacheTest, HitsMissesAndLeastRecentlyUsedEviction) {
  int allocations = 0;
  DeviceExpertCache c = SmallCache(2, &allocations);
  c.BeginLayer();
  EXPECT_EQ(c.Find(0, 1), nullptr);
  c.Insert(0, 1).fill_(1);
  c.Insert(0, 2).fill_(2);
  c.EndLayer();
  c.BeginLayer();
  ASSERT_NE(c.Find(0, 1), nullptr);  // 1 is now the most recent, 2 the least
  EXPECT_EQ(c.Find(0, 1)->sum().item<float>(), 4.0f);
  c.EndLayer();
  c.BeginLayer();
  c.Insert(1, 7);  // full: evicts (0, 2), not in use
  c.EndLayer();
  EXPECT_TRUE(c.Contains(0, 1));
  EXPECT_FALSE(c.Contains(0, 2));
  EXPECT_TRUE(c.Contains(1, 7));
  EXPECT_EQ(c.stats().hits, 2u);
  EXPECT_EQ(c.stats().misses, 3u);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(allocations, 3);
}

TEST(DeviceExpertCacheTest, ALayerNeverEvictsItsOwnExpertsAndGrowsThenTrims) {
  int allocations = 0;
  DeviceExpertCache c = SmallCache(2, &allocations);
  c.BeginLayer();
  at::Tensor& a = c.Insert(3, 0);
  a.fill_(5);
  c.Insert(3, 1);
  c.Insert(3, 2);  // every entry in use: staged past capacity
  c.Insert(3, 3);
  EXPECT_EQ(c.size(), 4);
  EXPECT_EQ(c.stats().staged, 2u);
  EXPECT_EQ(a.sum().item<float>(), 20.0f);  // the first slot is intact while the layer runs
  c.EndLayer();
  EXPECT_EQ(c.size(), 2);  // trimmed, least recently used first
  EXPECT_TRUE(c.Contains(3, 2));
  EXPECT_TRUE(c.Contains(3, 3));
  EXPECT_EQ(c.stats().evictions, 2u);
}

TEST(DeviceExpertCacheTest, CapacityZeroStagesEveryExpertAndEraseDropsOne) {
  int allocations = 0;
  DeviceExpertCache c = SmallCache(0, &allocations);
  c.BeginLayer();
  c.Insert(0, 0);
  c.Insert(0, 1);
  c.Erase(0, 1);
  EXPECT_FALSE(c.Contains(0, 1));
  c.EndLayer();
  EXPECT_EQ(c.size(), 0);
  c.BeginLayer();
  EXPECT_EQ(c.Find(0, 0), nullptr);
  c.EndLayer();
}

// ---- LayerRouting::AllSelected -----------------------------------------

TEST(LayerRoutingTest, AllSelectedMergesDeviceResidentExpertsInOrder) {
  LayerRouting r(4, {1, 6}, {2, 1});
  r.device_resident = {0, 3, 9};
  r.device_resident_tokens = {1, 3, 1};
  const LayerRouting all = r.AllSelected();
  EXPECT_EQ(all.expert_ids, (std::vector<int32_t>{0, 1, 3, 6, 9}));
  EXPECT_EQ(all.tokens_per_expert, (std::vector<int32_t>{1, 2, 3, 1, 1}));
  EXPECT_TRUE(all.device_resident.empty());
  LayerRouting plain(2, {3}, {1});
  EXPECT_EQ(plain.AllSelected().expert_ids, plain.expert_ids);
}

// ---- MoeForwardDevice on the CPU stand-in ------------------------------------------------------

// Serves the inner provider's experts, optionally as their E/SM planes (as the runtime does for an
// executor that recovers them itself); records what the executor asked for.
class RecordingProvider : public ExpertProvider {
 public:
  RecordingProvider(ExpertProvider* inner, bool planes, PrefetchMode prefetch = PrefetchMode::kNone)
      : inner_(inner), planes_(planes), prefetch_(prefetch) {}

  Status BeginLayer(const LayerRouting& routing) override {
    begun.push_back(routing);
    return inner_->BeginLayer(routing);
  }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, inner_->NextReady());
    if (!planes_ || lease->weights().dtype != DType::kBF16) return lease;  // planes are BF16's (as the runtime's)
    return std::unique_ptr<ExpertLease>(new PlaneLease(std::move(lease)));
  }
  Status EndLayer(int32_t layer_id) override { return inner_->EndLayer(layer_id); }
  PrefetchMode prefetch_mode() const override { return prefetch_; }
  void Prefetch(const LayerRouting& predicted) override { prefetched.push_back(predicted); }

  std::vector<LayerRouting> begun, prefetched;

 private:
  class PlaneLease : public ExpertLease {
   public:
    explicit PlaneLease(std::unique_ptr<ExpertLease> inner) : inner_(std::move(inner)) {
      view_ = inner_->weights();
      const void* data[3] = {view_.gate, view_.up, view_.down};
      ExpertPlanes* planes[3] = {&view_.gate_planes, &view_.up_planes, &view_.down_planes};
      const int64_t n = view_.intermediate * view_.hidden;
      for (int m = 0; m < 3; ++m) {
        e_[m].resize(static_cast<size_t>(n));
        sm_[m].resize(static_cast<size_t>(n));
        SplitBf16(static_cast<const uint16_t*>(data[m]), n, e_[m].data(), sm_[m].data());
        *planes[m] = {e_[m].data(), sm_[m].data()};
      }
      view_.gate = view_.up = view_.down = nullptr;
    }
    const ExpertWeightsView& weights() const override { return view_; }

   private:
    std::unique_ptr<ExpertLease> inner_;
    ExpertWeightsView view_;
    std::vector<uint8_t> e_[3], sm_[3];
  };

  ExpertProvider* inner_;
  bool planes_;
  PrefetchMode prefetch_;
};

struct Tiny {
  std::unique_ptr<LoadedModel> model;
  std::vector<int32_t> moe_layers;
};

Tiny LoadTiny(const std::string& variant) {
  LoadOptions options;
  options.dtype = at::kBFloat16;
  Result<std::unique_ptr<LoadedModel>> r = LoadModel(testing::TinyModelDir(variant), options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  Tiny t;
  if (!r.ok()) return t;
  t.model = std::move(r).value();
  for (size_t l = 0; l < t.model->weights.layers.size(); ++l)
    if (t.model->weights.layers[l].is_moe) t.moe_layers.push_back(static_cast<int32_t>(l));
  return t;
}

DeviceExpertCache CpuSlots(const ModelConfig& c, int64_t capacity) {
  const int64_t elems = 3 * c.moe_intermediate_size * c.hidden_size;
  return DeviceExpertCache(capacity, [elems] {
    return at::full({elems}, std::nanf(""), at::TensorOptions().dtype(at::kFloat)).to(at::kBFloat16);  // poisoned
  });
}

at::Tensor Input(int64_t n, int64_t hidden) {
  at::manual_seed(5);
  return (at::randn({n, hidden}) * 0.5).to(at::kBFloat16);
}

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.contiguous().data_ptr(), b.contiguous().data_ptr(), a.numel() * a.element_size()) == 0;
}

class MoeDeviceTest : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(Archs, MoeDeviceTest,
                         ::testing::Values("qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3",
                                           "glm4_moe", "glm4_moe_lite", "ernie4_5_moe", "deepseek_v3 --dtype fp8",
                                           "glm4_moe --dtype fp8", "gpt_oss"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

// The same bits whichever way an expert reached its slot (BF16 copy, planes recovered, a hit from
// an earlier step) and whatever the capacity; within BF16 rounding of the torch device path and of
// the float32 CPU path.
TEST_P(MoeDeviceTest, SameBitsFromEverySourceAndCloseToTheOtherPaths) {
  Tiny t = LoadTiny(GetParam());
  ASSERT_FALSE(t.moe_layers.empty());
  const ModelConfig& c = t.model->config;
  const int32_t layer = t.moe_layers.front();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  const at::Tensor x = Input(5, c.hidden_size);
  const int64_t all = c.num_experts;

  at::Tensor first;
  for (bool planes : {false, true}) {
    for (int64_t capacity : {int64_t{0}, int64_t{2}, all}) {
      RecordingProvider provider(t.model->resident_experts.get(), planes);
      DeviceExpertCache cache = CpuSlots(c, capacity);
      for (int step = 0; step < 2; ++step) {
        Result<at::Tensor> y = MoeForwardDevice(c, lw, layer, x, provider, nullptr, 0.0, cache);
        ASSERT_TRUE(y.ok()) << y.status().ToString();
        if (!first.defined()) first = *y;
        EXPECT_TRUE(SameBytes(*y, first)) << "planes " << planes << " capacity " << capacity << " step " << step;
      }
      // Step 2 with every expert kept: the provider is asked for none, told which the device holds.
      const LayerRouting& second = provider.begun.back();
      if (capacity == all) {
        EXPECT_TRUE(second.expert_ids.empty());
        EXPECT_EQ(second.AllSelected().expert_ids, provider.begun.front().expert_ids);
        EXPECT_EQ(cache.stats().hits, provider.begun.front().expert_ids.size());
      } else if (capacity == 0) {
        EXPECT_TRUE(second.device_resident.empty());
        EXPECT_EQ(cache.size(), 0);
      }
    }
  }
  // The torch device path (per-expert linears on the BF16 stand-in) and the float32 CPU path.
  Result<at::Tensor> torch_path = MoeForward(c, lw, layer, x, *t.model->resident_experts);
  ASSERT_TRUE(torch_path.ok()) << torch_path.status().ToString();
  const double scale = first.to(at::kFloat).abs().max().item<double>();
  EXPECT_LT((first.to(at::kFloat) - torch_path->to(at::kFloat)).abs().max().item<double>(), 2e-2 * scale + 1e-3);
}

TEST(MoeDevice, ObserversSeeEverySelectedExpertWhileTheProviderIsAskedForMissesOnly) {
  Tiny t = LoadTiny("qwen2_moe");
  const ModelConfig& c = t.model->config;
  const int32_t layer = t.moe_layers.front();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  std::vector<LayerRouting> observed;
  RecordingProvider inner(t.model->resident_experts.get(), false);
  ObservedExpertProvider provider(&inner, [&](const LayerRouting& r) { observed.push_back(r); });
  DeviceExpertCache cache = CpuSlots(c, c.num_experts);
  const at::Tensor x = Input(3, c.hidden_size);
  for (int step = 0; step < 2; ++step) ASSERT_TRUE(MoeForwardDevice(c, lw, layer, x, provider, nullptr, 0.0, cache).ok());
  ASSERT_EQ(observed.size(), 2u);
  EXPECT_EQ(observed[0].expert_ids, observed[1].expert_ids);
  EXPECT_EQ(observed[0].tokens_per_expert, observed[1].tokens_per_expert);
  EXPECT_TRUE(inner.begun[1].expert_ids.empty());
}

TEST(MoeDevice, PrefetchSkipsExpertsTheDeviceHolds) {
  Tiny t = LoadTiny("qwen2_moe");
  ASSERT_GE(t.moe_layers.size(), 2u);
  const ModelConfig& c = t.model->config;
  const int32_t l0 = t.moe_layers[0], l1 = t.moe_layers[1];
  RecordingProvider provider(t.model->resident_experts.get(), false, PrefetchMode::kTopScore);
  DeviceExpertCache cache = CpuSlots(c, c.num_experts);
  const at::Tensor x = Input(2, c.hidden_size);
  NextMoeLayer next;
  next.layer_id = l1;
  next.weights = &t.model->weights.layers[static_cast<size_t>(l1)];
  ASSERT_TRUE(MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(l0)], l0, x, provider, &next, 0.0, cache).ok());
  ASSERT_EQ(provider.prefetched.size(), 1u);
  const std::vector<int32_t> predicted = provider.prefetched[0].expert_ids;
  ASSERT_FALSE(predicted.empty());
  // Put the predicted experts on the device (run layer l1 on the same x: its router picks them).
  ASSERT_TRUE(MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(l1)], l1, x, provider, nullptr, 0.0, cache).ok());
  for (int32_t e : predicted) EXPECT_TRUE(cache.Contains(l1, e)) << e;
  provider.prefetched.clear();
  ASSERT_TRUE(MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(l0)], l0, x, provider, &next, 0.0, cache).ok());
  EXPECT_TRUE(provider.prefetched.empty());  // nothing left to prefetch
}

TEST(MoeDevice, PreloadPutsEveryExpertOnTheDeviceWhenThereIsRoomAndNothingOtherwise) {
  Tiny t = LoadTiny("deepseek_v2");  // a dense first layer: only MoE layers are preloaded
  const ModelConfig& c = t.model->config;
  const int64_t all = static_cast<int64_t>(t.moe_layers.size()) * c.num_experts;
  {
    DeviceExpertCache small = CpuSlots(c, all - 1);
    Result<int64_t> n = PreloadDeviceExperts(c, t.model->weights.layers, *t.model->resident_experts, small);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 0);
    EXPECT_EQ(small.size(), 0);
  }
  DeviceExpertCache cache = CpuSlots(c, all);
  RecordingProvider provider(t.model->resident_experts.get(), /*planes=*/true);
  Result<int64_t> n = PreloadDeviceExperts(c, t.model->weights.layers, provider, cache);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, all);
  EXPECT_EQ(cache.size(), all);
  EXPECT_EQ(provider.begun.size(), t.moe_layers.size());
  // A forward pass then asks the provider for nothing, with the bits of a cold start.
  const int32_t layer = t.moe_layers.back();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  const at::Tensor x = Input(4, c.hidden_size);
  Result<at::Tensor> warm = MoeForwardDevice(c, lw, layer, x, provider, nullptr, 0.0, cache);
  ASSERT_TRUE(warm.ok()) << warm.status().ToString();
  EXPECT_TRUE(provider.begun.back().expert_ids.empty());
  DeviceExpertCache cold_cache = CpuSlots(c, 0);
  RecordingProvider cold(t.model->resident_experts.get(), false);
  Result<at::Tensor> cold_y = MoeForwardDevice(c, lw, layer, x, cold, nullptr, 0.0, cold_cache);
  ASSERT_TRUE(cold_y.ok());
  EXPECT_TRUE(SameBytes(*warm, *cold_y));
}

// Pool F on the device (issue 36 item 1): the runtime's cache decides what F holds, the executor's
// managed slots hold the bytes. Every MoE layer over several steps gives the bits of the all-resident
// cold path, at every policy and budget, while F hits are served from the slots (no host bytes) and
// the cache counts them (its rank and recency see the device's experts).
TEST(MoeDevice, TheRuntimesPoolFOnTheDeviceGivesTheAllResidentBits) {
  Tiny t = LoadTiny("qwen2_moe");
  const ModelConfig& c = t.model->config;
  const std::string compressed = testing::TinyCompressedDir("qwen2_moe");
  std::vector<at::Tensor> inputs;
  for (int step = 0; step < 6; ++step) {
    at::manual_seed(100 + step);
    inputs.push_back((at::randn({step % 3 == 0 ? 3 : 1, c.hidden_size}) * 0.5).to(at::kBFloat16));
  }
  // The reference: every expert resident, staged per use.
  std::vector<at::Tensor> want;
  {
    DeviceExpertCache cold = CpuSlots(c, 0);
    for (const at::Tensor& x : inputs) {
      for (int32_t layer : t.moe_layers) {
        Result<at::Tensor> y = MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(layer)], layer, x,
                                                *t.model->resident_experts, nullptr, 0.0, cold);
        ASSERT_TRUE(y.ok()) << y.status().ToString();
        want.push_back(*y);
      }
    }
  }
  uint64_t expert_bytes = 0;
  {
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(compressed);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (const ExpertTensorInfo& info : (*store)->manifest().expert_tensors) expert_bytes += info.raw_bytes();
  }
  for (const char* policy : {"zipmoe", "lru"}) {
    for (double share : {0.25, 0.5}) {
      SCOPED_TRACE(::testing::Message() << policy << " budget " << share);
      runtime::OffloadConfig config;
      config.model_dir = compressed;
      config.memory_budget_bytes = static_cast<uint64_t>(share * static_cast<double>(expert_bytes));
      config.policy = *cache_manager::ParseCachePolicy(policy);
      config.n_workers = 2;
      config.fused_recovery = true;  // planes recovered into the slots (the recovery kernel's CPU reference)
      config.device_f_pool = true;
      auto provider = runtime::OffloadExpertProvider::Create(config);
      ASSERT_TRUE(provider.ok()) << provider.status().ToString();
      ASSERT_GT((*provider)->device_f_slots(), 0);
      DeviceExpertCache cache = CpuSlots(c, 0);
      cache.SetManagedSlots((*provider)->device_f_slots());
      size_t i = 0;
      for (const at::Tensor& x : inputs) {
        for (int32_t layer : t.moe_layers) {
          Result<at::Tensor> y = MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(layer)], layer, x,
                                                  **provider, nullptr, 0.0, cache);
          ASSERT_TRUE(y.ok()) << y.status().ToString();
          EXPECT_TRUE(SameBytes(*y, want[i])) << "step " << i / t.moe_layers.size() << " layer " << layer;
          ++i;
        }
      }
      const runtime::RuntimeStats s = (*provider)->stats();
      EXPECT_GT(cache.stats().managed_hits, 0u);
      EXPECT_GT(cache.stats().managed_fills, 0u);
      EXPECT_EQ(cache.stats().managed_hits, s.cache.pools[cache_manager::PoolIndex(cache_manager::Pool::kF)].requests);
      EXPECT_LE(cache.managed_allocated(), cache.managed_slots());
      EXPECT_EQ(cache.stats().hits, 0u) << "the executor's own LRU keeps nothing";
      EXPECT_EQ((*provider)->cache().LivePins(), 0u);
    }
  }
}

// An expert the executor takes but cannot place (here: a slot beyond those it was given) leaves its
// device slot unwritten: the lease is abandoned, so the runtime's cache never records it in F.
TEST(MoeDevice, AnExpertTheExecutorCannotPlaceIsAbandonedNotRecordedInF) {
  Tiny t = LoadTiny("qwen2_moe");
  const ModelConfig& c = t.model->config;
  const std::string compressed = testing::TinyCompressedDir("qwen2_moe");
  uint64_t expert_bytes = 0;
  {
    Result<std::unique_ptr<ExpertStore>> store = ExpertStore::Open(compressed);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    for (const ExpertTensorInfo& info : (*store)->manifest().expert_tensors) expert_bytes += info.raw_bytes();
  }
  runtime::OffloadConfig config;
  config.model_dir = compressed;
  config.memory_budget_bytes = expert_bytes / 2;
  config.policy = cache_manager::CachePolicy::kLru;
  config.n_workers = 2;
  config.fused_recovery = true;
  config.device_f_pool = true;
  auto provider = runtime::OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();
  ASSERT_GT((*provider)->device_f_slots(), 1);
  DeviceExpertCache cache = CpuSlots(c, 0);
  cache.SetManagedSlots(1);  // fewer than the cache hands out: the first lease naming slot >= 1 fails
  const int32_t layer = t.moe_layers.front();
  Result<at::Tensor> y = MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(layer)], layer,
                                          Input(4, c.hidden_size), **provider, nullptr, 0.0, cache);
  ASSERT_FALSE(y.ok());
  const std::string message = y.status().message();
  const size_t at = message.find(" expert ");
  ASSERT_NE(at, std::string::npos) << message;
  ASSERT_NE(message.find("device slot"), std::string::npos) << message;
  const int32_t expert = std::atoi(message.c_str() + at + 8);
  EXPECT_NE((*provider)->cache().Peek(layer, expert), CompressionState::kF)
      << "expert " << expert << " recorded in F though its slot was never written";
  // The runtime serves on: with every slot given, the next forward passes (the failed layer's
  // untaken experts dropped without admission) and nothing stays pinned.
  cache.SetManagedSlots((*provider)->device_f_slots());
  for (int32_t l : t.moe_layers) {
    Result<at::Tensor> next = MoeForwardDevice(c, t.model->weights.layers[static_cast<size_t>(l)], l,
                                               Input(2, c.hidden_size), **provider, nullptr, 0.0, cache);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
  }
  EXPECT_EQ((*provider)->stats().abandoned_layers, 1u);
  EXPECT_EQ((*provider)->cache().LivePins(), 0u);
}

// A lease whose expert lives only in a device slot reaching a path that does not read slots (the CPU
// kernels) is refused by name, not computed from null pointers.
TEST(MoeDevice, TheCpuPathRefusesAnExpertHeldOnlyInADeviceSlot) {
  Tiny t = LoadTiny("qwen2_moe");
  const ModelConfig& c = t.model->config;
  const int32_t layer = t.moe_layers.front();
  class SlotOnly : public ExpertProvider {
   public:
    explicit SlotOnly(ExpertProvider* inner) : inner_(inner) {}
    Status BeginLayer(const LayerRouting& r) override { return inner_->BeginLayer(r); }
    Result<std::unique_ptr<ExpertLease>> NextReady() override {
      ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> inner, inner_->NextReady());
      return std::unique_ptr<ExpertLease>(new Held(std::move(inner)));
    }
    Status EndLayer(int32_t id) override { return inner_->EndLayer(id); }

   private:
    class Held : public ExpertLease {
     public:
      explicit Held(std::unique_ptr<ExpertLease> inner) : inner_(std::move(inner)), view_(inner_->weights()) {
        view_.gate = view_.up = view_.down = nullptr;
        view_.device_slot = 0;
        view_.device_slot_holds = true;
      }
      const ExpertWeightsView& weights() const override { return view_; }

     private:
      std::unique_ptr<ExpertLease> inner_;
      ExpertWeightsView view_;
    };
    ExpertProvider* inner_;
  } provider(t.model->resident_experts.get());
  Result<at::Tensor> y = MoeForward(c, t.model->weights.layers[static_cast<size_t>(layer)], layer,
                                    Input(2, c.hidden_size), provider);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("device slot"), std::string::npos) << y.status().ToString();
}

// A lease naming a slot the executor was not given is refused by name.
TEST(MoeDevice, ALeaseNamingAnUnknownManagedSlotIsRefused) {
  Tiny t = LoadTiny("qwen2_moe");
  const ModelConfig& c = t.model->config;
  DeviceExpertCache cache = CpuSlots(c, 0);
  cache.SetManagedSlots(2);
  EXPECT_EQ(cache.ManagedSlot(2, false), nullptr);
  EXPECT_EQ(cache.ManagedSlot(-1, false), nullptr);
  ASSERT_NE(cache.ManagedSlot(1, false), nullptr);
  EXPECT_EQ(cache.managed_allocated(), 1);
  EXPECT_EQ(cache.ManagedSlot(1, true), cache.ManagedSlot(1, true)) << "a stable slot";
  EXPECT_EQ(cache.stats().managed_hits, 2u);
  EXPECT_EQ(cache.stats().managed_fills, 1u);
}

// A provider with one staging slot: it can deliver the next expert only once the last lease is back
// (as the runtime, whose layer continues in waves as leases are released). Holding a lease while
// waiting would hang; here it is an error.
class OneSlotProvider : public ExpertProvider {
 public:
  explicit OneSlotProvider(ExpertProvider* inner) : inner_(inner) {}
  Status BeginLayer(const LayerRouting& r) override { return inner_->BeginLayer(r); }
  Result<std::unique_ptr<ExpertLease>> NextReady() override {
    if (*held_ > 0) return Status::InvalidArgument("NextReady while a lease is held: the one staging slot is taken");
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<ExpertLease> lease, inner_->NextReady());
    ++*held_;
    return std::unique_ptr<ExpertLease>(new Counted(std::move(lease), held_));
  }
  bool NextIsReady() const override { return false; }
  Status EndLayer(int32_t id) override { return inner_->EndLayer(id); }

 private:
  class Counted : public ExpertLease {
   public:
    Counted(std::unique_ptr<ExpertLease> inner, std::shared_ptr<int> held) : inner_(std::move(inner)), held_(held) {}
    ~Counted() override { --*held_; }
    const ExpertWeightsView& weights() const override { return inner_->weights(); }

   private:
    std::unique_ptr<ExpertLease> inner_;
    std::shared_ptr<int> held_;
  };
  ExpertProvider* inner_;
  std::shared_ptr<int> held_ = std::make_shared<int>(0);
};

TEST(MoeDevice, LeasesAreHandedBackBeforeWaitingSoAOneSlotProviderNeverStalls) {
  Tiny t = LoadTiny("olmoe");
  const ModelConfig& c = t.model->config;
  const int32_t layer = t.moe_layers.front();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  const at::Tensor x = Input(6, c.hidden_size);
  OneSlotProvider one(t.model->resident_experts.get());
  DeviceExpertCache cache = CpuSlots(c, c.num_experts);
  Result<at::Tensor> y = MoeForwardDevice(c, lw, layer, x, one, nullptr, 0.0, cache);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  RecordingProvider plain(t.model->resident_experts.get(), false);
  DeviceExpertCache other = CpuSlots(c, 0);
  Result<at::Tensor> want = MoeForwardDevice(c, lw, layer, x, plain, nullptr, 0.0, other);
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(SameBytes(*y, *want));
  DeviceExpertCache fresh = CpuSlots(c, c.num_experts * static_cast<int64_t>(t.moe_layers.size()));
  Result<int64_t> n = PreloadDeviceExperts(c, t.model->weights.layers, one, fresh);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
}

TEST(MoeDevice, FillDeviceSlotLaysOutGateUpDownAndConvertsF32) {
  const int64_t inter = 3, hidden = 4, n = inter * hidden;
  std::vector<float> f32[3];
  for (int m = 0; m < 3; ++m)
    for (int64_t i = 0; i < n; ++i) f32[m].push_back(static_cast<float>(m * 100 + i) + 0.25f);
  ExpertWeightsView ew;
  ew.dtype = DType::kF32;
  ew.intermediate = inter;
  ew.hidden = hidden;
  ew.gate = f32[0].data();
  ew.up = f32[1].data();
  ew.down = f32[2].data();
  at::Tensor slot = at::zeros({3 * n}, at::TensorOptions().dtype(at::kBFloat16));
  bool reads_host = false;
  ASSERT_TRUE(FillDeviceSlot(ew, slot, &reads_host).ok());
  EXPECT_FALSE(reads_host);  // a synchronous conversion
  const at::Tensor want = at::cat({at::tensor(f32[0]), at::tensor(f32[1]), at::tensor(f32[2])}).to(at::kBFloat16);
  EXPECT_TRUE(SameBytes(slot, want));
}

// FP8 experts (issue 40): the slot holds the BF16 rounding of the float32 weight the CPU kernels use
// (kernels/fp8_dequant.h), gate | up | down; no scales or FP8 planes are refused. The layer's output on
// the stand-in stays within BF16 rounding of the float32 CPU path on the same checkpoint.
TEST(MoeDevice, Fp8ExpertsAreDequantizedIntoTheSlotAndCloseToTheCpuPath) {
  Tiny t = LoadTiny("glm4_moe --dtype fp8");
  ASSERT_FALSE(t.moe_layers.empty());
  const ModelConfig& c = t.model->config;
  ASSERT_TRUE(c.fp8());
  const int32_t layer = t.moe_layers.front();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  ExpertProvider& resident = *t.model->resident_experts;
  ASSERT_TRUE(resident.BeginLayer(LayerRouting(layer, {1}, {1})).ok());
  Result<std::unique_ptr<ExpertLease>> lease = resident.NextReady();
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  const ExpertWeightsView& ew = (*lease)->weights();
  ASSERT_EQ(ew.dtype, DType::kF8E4M3);
  Result<Fp8ExpertScales> fp8 = ExpertFp8Scales(c, lw, layer, ew);
  ASSERT_TRUE(fp8.ok()) << fp8.status().ToString();
  const int64_t inter = ew.intermediate, hidden = ew.hidden, n = inter * hidden;
  at::Tensor slot = at::zeros({3 * n}, at::TensorOptions().dtype(at::kBFloat16));
  bool reads_host = false;
  ASSERT_TRUE(FillDeviceSlot(ew, slot, &reads_host, &*fp8).ok());
  const void* data[3] = {ew.gate, ew.up, ew.down};
  const int64_t rows[3] = {inter, inter, hidden};
  for (int m = 0; m < 3; ++m) {
    std::vector<uint16_t> want(static_cast<size_t>(n));
    kernels::DequantizeF8E4M3ToBf16Reference(static_cast<const uint8_t*>(data[m]), fp8->scale_inv[static_cast<size_t>(m)],
                                             rows[m], n / rows[m], c.fp8_block_rows, c.fp8_block_cols, want.data());
    EXPECT_EQ(std::memcmp(static_cast<const uint16_t*>(slot.data_ptr()) + m * n, want.data(), n * 2), 0) << "matrix " << m;
  }
  EXPECT_FALSE(FillDeviceSlot(ew, slot, &reads_host).ok());  // no scales
  ExpertWeightsView as_planes = ew;
  as_planes.up = nullptr;
  EXPECT_FALSE(FillDeviceSlot(as_planes, slot, &reads_host, &*fp8).ok());
  lease->reset();
  ASSERT_TRUE(resident.EndLayer(layer).ok());

  // The layer on the stand-in against the CPU kernels on a float32 load of the same directory.
  const at::Tensor x = Input(5, c.hidden_size);
  RecordingProvider provider(&resident, false);
  DeviceExpertCache cache = CpuSlots(c, c.num_experts);
  Result<at::Tensor> y = MoeForwardDevice(c, lw, layer, x, provider, nullptr, 0.0, cache);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  LoadOptions f32;
  f32.dtype = at::kFloat;
  Result<std::unique_ptr<LoadedModel>> cpu = LoadModel(testing::TinyModelDir("glm4_moe --dtype fp8"), f32);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  Result<at::Tensor> want = MoeForward((*cpu)->config, (*cpu)->weights.layers[static_cast<size_t>(layer)], layer,
                                       x.to(at::kFloat), *(*cpu)->resident_experts);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  const double scale = want->abs().max().item<double>();
  EXPECT_GT(scale, 0.0);
  EXPECT_LT((y->to(at::kFloat) - *want).abs().max().item<double>(), 2e-2 * scale + 1e-3);
}

TEST(MoeDevice, AnUnrequestedExpertIsRefusedAndItsSlotDropped) {
  Tiny t = LoadTiny("mixtral");
  const ModelConfig& c = t.model->config;
  const int32_t layer = t.moe_layers.front();
  const LayerWeights& lw = t.model->weights.layers[static_cast<size_t>(layer)];
  // An input whose routing does not select expert 0 (found with a well-behaved provider).
  at::Tensor x;
  for (int seed = 0; seed < 100 && !x.defined(); ++seed) {
    at::manual_seed(seed);
    const at::Tensor candidate = (at::randn({1, c.hidden_size}) * 0.5).to(at::kBFloat16);
    RecordingProvider probe(t.model->resident_experts.get(), false);
    DeviceExpertCache none = CpuSlots(c, 0);
    ASSERT_TRUE(MoeForwardDevice(c, lw, layer, candidate, probe, nullptr, 0.0, none).ok());
    if (probe.begun[0].expert_ids.front() != 0) x = candidate;
  }
  ASSERT_TRUE(x.defined()) << "no input routed away from expert 0";
  // A provider that delivers expert 0 whatever was asked.
  class Wrong : public ExpertProvider {
   public:
    explicit Wrong(ExpertProvider* inner) : inner_(inner) {}
    Status BeginLayer(const LayerRouting& r) override { return inner_->BeginLayer(LayerRouting(r.layer_id, {0}, {1})); }
    Result<std::unique_ptr<ExpertLease>> NextReady() override { return inner_->NextReady(); }
    Status EndLayer(int32_t id) override { return inner_->EndLayer(id); }

   private:
    ExpertProvider* inner_;
  } wrong(t.model->resident_experts.get());
  DeviceExpertCache cache = CpuSlots(c, c.num_experts);
  Result<at::Tensor> y = MoeForwardDevice(c, lw, layer, x, wrong, nullptr, 0.0, cache);
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(y.status().message().find("not requested"), std::string::npos) << y.status().ToString();
  EXPECT_FALSE(cache.Contains(layer, 0));
}


// gpt_oss on the torch device path (issue 41): the BF16 load on the CPU stands in for the GPU (the
// same torch operators: attention with sinks and sliding windows, the router's bias, MXFP4 experts
// dequantized, biased experts with the clamped SwiGLU). Its prompt and decode logits stay within
// BF16 rounding of the float32 CPU kernels, with a prompt longer than the sliding window.
TEST(GptOssTorchPath, LogitsFollowTheCpuKernelsWithinBf16Rounding) {
  const std::string dir = testing::TinyModelDir("gpt_oss");
  LoadOptions bf16;
  bf16.dtype = at::kBFloat16;
  Result<std::unique_ptr<LoadedModel>> stand_in = LoadModel(dir, bf16);
  ASSERT_TRUE(stand_in.ok()) << stand_in.status().ToString();
  Result<std::unique_ptr<LoadedModel>> cpu = LoadModel(dir, LoadOptions());
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  const ModelConfig& c = (*cpu)->config;
  ASSERT_EQ(c.arch, ModelArch::kGptOss);
  int64_t window = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) window = std::max(window, c.attention_window(l));
  ASSERT_GT(window, 0);
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < window + 9; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % c.vocab_size));
  // A router bias that decides the routing (the synthetic one is small): the same in both loads.
  for (std::unique_ptr<LoadedModel>* m : {&*stand_in, &*cpu})
    for (LayerWeights& lw : (*m)->weights.layers)
      if (lw.router_logit_bias.defined())
        lw.router_logit_bias = at::arange(c.num_experts, at::TensorOptions().dtype(at::kFloat)).remainder(3) * 2.0;
  Model a(**stand_in, (*stand_in)->resident_experts.get(), at::Device(at::kCPU), at::kBFloat16);
  Model b(**cpu, (*cpu)->resident_experts.get(), at::Device(at::kCPU), at::kFloat);
  KvCache ka = a.NewCache(), kb = b.NewCache();
  std::vector<int32_t> step = prompt;
  for (int s = 0; s < 3; ++s) {  // the prompt, then two decode steps on the float32 path's greedy tokens
    Result<at::Tensor> la = a.Forward({&step}, {&ka}, false);
    Result<at::Tensor> lb = b.Forward({&step}, {&kb}, false);
    ASSERT_TRUE(la.ok()) << la.status().ToString();
    ASSERT_TRUE(lb.ok()) << lb.status().ToString();
    const double scale = lb->abs().max().item<double>();
    const double diff = (*la - *lb).abs().max().item<double>();
    EXPECT_LT(diff, 3e-2 * scale) << "step " << s << " (max |logit| " << scale << ")";
    EXPECT_GT(diff, 0.0) << "the stand-in computed in float32: it would not test the BF16 path";
    step = {static_cast<int32_t>(lb->argmax(-1).item<int64_t>())};
  }
}

}  // namespace
}  // namespace zipmoe::executor
