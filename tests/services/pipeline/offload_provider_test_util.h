// Helpers of the OffloadExpertProvider tests (offload_provider_test.cc,
// offload_provider_prefetch_test.cc): a tiny compressed model per architecture, the expected BF16 of
// every expert tensor, skewed routings, a driver that checks every lease's bytes, and a copy of a
// compressed directory with one corrupt chunk.
#pragma once

#include <gtest/gtest.h>

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
