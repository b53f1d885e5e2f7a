// Helpers of the OffloadExpertProvider tests (offload_provider_test.cc,
// offload_provider_prefetch_test.cc): a tiny compressed model per architecture, the expected BF16 of
// every expert tensor, skewed routings, drivers that check every lease's bytes (DriveDeviceSlots: with
// pool F on a simulated device; also used by the links tests), and a copy of a compressed directory
// with one corrupt chunk.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/bitfield.h"
#include "common/checkpoint/expert_store.h"
#include "common/checkpoint/manifest.h"
#include "common/expert_provider.h"
#include "services/pipeline/offload_provider.h"
#include "tests/test_util.h"

namespace zipmoe::runtime::test {

using testing::CachedCompress;
using testing::CachedSynth;

inline std::string TinyCompressed(const std::string& arch) {
  return CachedCompress(CachedSynth("--arch " + arch + " --preset tiny --seed 3"), "--shards 4");
}

inline uint64_t ExpertBytes(const Manifest& m) {
  uint64_t total = 0;
  for (const ExpertTensorInfo& t : m.expert_tensors) total += t.raw_bytes();
  return total;
}

// Expected BF16 of every expert tensor, by (layer, expert, proj).
inline std::map<std::tuple<int, int, int>, std::vector<uint16_t>> Expected(const ExpertStore& store) {
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
inline std::vector<LayerRouting> MakeRoutings(const Manifest& m, int top_k, int steps, uint32_t seed) {
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

// A GPU executor's device as pool F on the device sees it (ExpertProvider::device_f_slots): one
// entry per slot, the three BF16 tensors written there, written only where the executor writes them.
struct SimulatedDevice {
  explicit SimulatedDevice(int64_t n_slots) : slots(static_cast<size_t>(std::max<int64_t>(n_slots, 1))) {}
  std::vector<std::array<std::vector<uint16_t>, 3>> slots;
};

// One lease of DriveDeviceSlots: the expert, its device slot (-1: none) and whether the slot held it.
struct DeviceSlotUse {
  int32_t layer_id = -1;
  int32_t expert_id = -1;
  int32_t slot = -1;
  bool holds = false;
  bool operator==(const DeviceSlotUse& o) const {
    return layer_id == o.layer_id && expert_id == o.expert_id && slot == o.slot && holds == o.holds;
  }
};

// Drives `provider` (pool F on the device) over `routings` as the GPU executor does, with `device`
// (a fresh one when null): whenever a lease says its slot already holds the expert, the slot must
// hold exactly that expert's checkpoint bytes; F hits carry no host bytes; no two experts of a layer
// share a slot. A lease for which `abandon(layer, expert)` is true is abandoned (ExpertLease::Abandon,
// a failed device write) instead of written. *log (if given) gets every lease, each layer's in
// ascending expert order. Returns {hits served from a slot, experts written into one}.
inline std::pair<int, int> DriveDeviceSlots(ExpertProvider& provider, const std::vector<LayerRouting>& routings,
                                            const std::map<std::tuple<int, int, int>, std::vector<uint16_t>>& expected,
                                            SimulatedDevice* device = nullptr, std::vector<DeviceSlotUse>* log = nullptr,
                                            const std::function<bool(int32_t, int32_t)>& abandon = nullptr) {
  const int64_t n_slots = provider.device_f_slots();
  EXPECT_GE(n_slots, 0);
  SimulatedDevice own(n_slots);
  if (device == nullptr) device = &own;
  EXPECT_GE(static_cast<int64_t>(device->slots.size()), n_slots);
  int holds = 0, fills = 0;
  for (const LayerRouting& r : routings) {
    const Status begun = provider.BeginLayer(r);
    EXPECT_TRUE(begun.ok()) << begun.ToString();
    if (!begun.ok()) return {holds, fills};
    std::set<int32_t> slots_this_layer;
    std::map<int32_t, DeviceSlotUse> layer_log;
    for (size_t i = 0; i < r.expert_ids.size(); ++i) {
      Result<std::unique_ptr<ExpertLease>> lease = provider.NextReady();
      EXPECT_TRUE(lease.ok()) << lease.status().ToString();
      if (!lease.ok()) return {holds, fills};
      const ExpertWeightsView& w = (*lease)->weights();
      layer_log[w.expert_id] = DeviceSlotUse{r.layer_id, w.expert_id, w.device_slot, w.device_slot_holds};
      if (w.device_slot >= 0) {
        EXPECT_LT(w.device_slot, n_slots);
        if (w.device_slot >= n_slots) return {holds, fills};
        EXPECT_TRUE(slots_this_layer.insert(w.device_slot).second) << "two experts in one slot";
      }
      auto& slot = device->slots[static_cast<size_t>(std::max(w.device_slot, 0))];
      const bool abandoned = !w.device_slot_holds && w.device_slot >= 0 && abandon && abandon(r.layer_id, w.expert_id);
      const void* ptrs[3] = {w.gate, w.up, w.down};
      const ExpertPlanes planes[3] = {w.gate_planes, w.up_planes, w.down_planes};
      for (int proj = 0; proj < 3; ++proj) {
        const auto& want = expected.at({r.layer_id, w.expert_id, proj});
        if (w.device_slot_holds) {  // an F hit: no host bytes, the device slot has them
          EXPECT_EQ(ptrs[proj], nullptr);
          EXPECT_EQ(planes[proj].e, nullptr);
          EXPECT_EQ(slot[proj], want) << "slot " << w.device_slot << " layer " << r.layer_id << " expert "
                                      << w.expert_id << " proj " << proj;
          continue;
        }
        std::vector<uint16_t> got(want.size());
        if (w.planes()) {
          MergeBf16(planes[proj].e, planes[proj].sm, static_cast<int64_t>(want.size()), got.data());
        } else {
          std::memcpy(got.data(), ptrs[proj], want.size() * 2);
        }
        EXPECT_EQ(got, want);
        if (w.device_slot >= 0 && !abandoned) slot[proj] = got;  // the executor writes it into its slot
      }
      if (abandoned) (*lease)->Abandon();
      ++(w.device_slot_holds ? holds : fills);
      // Released at once (as the executor does before it waits): the next wave needs the staging
      // slot. Every slot of the layer was decided at its lookup, so none is reused in it.
    }
    const Status ended = provider.EndLayer(r.layer_id);
    EXPECT_TRUE(ended.ok()) << ended.ToString();
    if (log != nullptr)
      for (const auto& [e, use] : layer_log) log->push_back(use);
  }
  return {holds, fills};
}

// Leases served as BF16 tensors and as E/SM planes (fused recovery).
struct Served {
  int bf16 = 0;
  int planes = 0;
};

// Drives `provider` through `routings`, checking every lease against `expected` (planes merged).
// `after_begin(i)` runs right after BeginLayer of routings[i] (where an executor would prefetch).
inline Served Drive(OffloadExpertProvider& provider, const std::vector<LayerRouting>& routings,
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

// Copies a compressed directory and flips one byte inside chunk `chunk` of the first tensor of
// (layer, expert). Returns the tensor name.
inline std::string CorruptCopy(const std::string& src, const std::string& dst, int layer, int expert, bool sm_chunk) {
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

}  // namespace zipmoe::runtime::test
