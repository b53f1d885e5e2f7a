// The arena is the runtime's only home for expert bytes: an accounting operator new (replaced for
// this test binary) shows that serving many layers allocates no heap memory on the order of an
// expert, so the memory budget (the arena, mmap'ed shared memory) bounds what experts occupy.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <set>
#include <string>

#include "common/checkpoint/expert_store.h"
#include "services/pipeline/offload_provider.h"
#include "tests/test_util.h"

namespace {

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
constexpr size_t kHeader = 16;  // keeps max_align_t alignment

void* CountedAlloc(size_t n) {
  void* p = std::malloc(n + kHeader);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(p) = n;
  const int64_t live = g_live_bytes.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kHeader;
}

void CountedFree(void* p) {
  if (p == nullptr) return;
  char* block = static_cast<char*>(p) - kHeader;
  g_live_bytes.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t*>(block)));
  std::free(block);
}

}  // namespace

void* operator new(size_t n) { return CountedAlloc(n); }
void* operator new[](size_t n) { return CountedAlloc(n); }
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }

namespace zipmoe::runtime {
namespace {

TEST(RuntimeHeapAccounting, ServingLayersAllocatesNoExpertSizedHeapMemory) {
  const std::string dir =
      testing::CachedCompress(testing::CachedSynth("--arch qwen2_moe --preset tiny --seed 3"), "--shards 4");
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const Manifest& m = (*store)->manifest();
  uint64_t expert_bytes = 0;
  for (const ExpertTensorInfo& t : m.expert_tensors) expert_bytes += t.raw_bytes();
  const uint64_t one_expert_bytes = 3 * m.expert_tensors.front().raw_bytes();  // gate + up + down

  OffloadConfig config;
  config.model_dir = dir;
  config.memory_budget_bytes = expert_bytes * 3 / 10;
  config.n_workers = 2;
  auto provider = OffloadExpertProvider::Create(config);
  ASSERT_TRUE(provider.ok()) << provider.status().ToString();

  // Warm-up step (tables and maps reach their steady size), then measure 10 steps of every layer.
  auto step = [&](int s) {
    std::set<int32_t> layers;
    for (const ExpertTensorInfo& t : m.expert_tensors) layers.insert(t.layer_id);
    for (int32_t layer : layers) {
      LayerRouting r;
      r.layer_id = layer;
      for (int e = 0; e < m.n_experts; e += 1 + (s + layer) % 4) {
        r.expert_ids.push_back(e);
        r.tokens_per_expert.push_back(1);
      }
      ASSERT_TRUE((*provider)->BeginLayer(r).ok());
      for (size_t i = 0; i < r.expert_ids.size(); ++i) {
        auto lease = (*provider)->NextReady();
        ASSERT_TRUE(lease.ok()) << lease.status().ToString();
      }
      ASSERT_TRUE((*provider)->EndLayer(layer).ok());
    }
  };
  step(0);
  const int64_t base = g_live_bytes.load();
  g_peak_bytes.store(base);
  for (int s = 1; s <= 10; ++s) step(s);
  const int64_t growth = g_peak_bytes.load() - base;
  // Bookkeeping (op tables, schedules) is allowed; any expert's weights on the heap are not. The tiny
  // preset's experts are small (48 KiB), so this bound is tight: the bookkeeping of a 16-expert layer
  // measured 30 KiB.
  EXPECT_LT(growth, static_cast<int64_t>(one_expert_bytes))
      << "heap peak grew by " << growth << " bytes while serving; one expert is " << one_expert_bytes;
  EXPECT_LE((*provider)->stats().arena_bytes, config.memory_budget_bytes);
}

}  // namespace
}  // namespace zipmoe::runtime
