// Helpers of the cache manager tests (cache_manager_test.cc, cache_manager_policies_test.cc,
// cache_manager_pins_test.cc): a hand-made manifest, deterministic expert bytes and their sources, and
// a cache made from a config (budget from the plan when none is given).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "services/cache_manager/cache_manager.h"

namespace zipmoe::cache_manager::test {

inline std::string UniqueShmName(const char* tag) {
  static std::atomic<int> counter{0};
  return "/zipmoe-cache-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag;
}

// E-chunk stored bytes of (layer, expert, proj, shard).
using EStoredFn = std::function<uint64_t(int32_t, int32_t, int, int)>;

// A manifest of n_layers × n_experts experts, each with gate/up/down of `numel` BF16 values, K
// E-chunks (stored sizes from `e_stored`) and one SM-chunk. File offsets are irrelevant here.
inline Manifest MakeManifest(int32_t n_layers, int32_t n_experts, int64_t numel, int32_t n_shards,
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

inline uint64_t PlanBytes(const Manifest& m, const CachePlan& plan) {
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
        if (lookup.Full(proj) == nullptr || std::memcmp(lookup.Full(proj), bf16[p].data(), 2 * bf16[p].size()) != 0) {
          return false;
        }
      }
    }
    return true;
  }
};

inline constexpr AvailableParts kAllParts{true, true, true};

// Looks (layer, expert) up `times` times, releasing each lease at once.
inline void Activate(CacheManager& cache, int32_t layer, int32_t expert, int times) {
  for (int i = 0; i < times; ++i) {
    auto lookup = cache.Lookup(layer, expert);
    ASSERT_TRUE(lookup.ok()) << lookup.status().ToString();
  }
}

inline std::unique_ptr<CacheManager> MakeCache(const Manifest& m, CacheConfig config) {
  if (config.budget_bytes == 0 && config.policy == CachePolicy::kZipMoe) config.budget_bytes = PlanBytes(m, config.plan);
  auto cache = CacheManager::Create(m, config);
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

}  // namespace zipmoe::cache_manager::test
