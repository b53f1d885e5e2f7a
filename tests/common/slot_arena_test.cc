// Tests for common/slot_arena: layout and 4 KiB alignment, capacity, budget accounting (also under
// seeded random alloc/free), unbacked arenas, a peer's view through ShmRegion::Attach, double free.
#include "common/ipc/slot_arena.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace zipmoe {
namespace {

using ::testing::HasSubstr;

std::string UniqueName(const char* tag) {
  static std::atomic<int> counter{0};
  return "/zipmoe-arena-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + tag;
}

// Strides: A 5000 -> 8192, B 4096 -> 4096, C 1 -> 4096. Total 3*8192 + 2*4096 + 4096 = 36864.
std::vector<SlotPoolSpec> ThreePools() { return {{"A", 5000, 3}, {"B", 4096, 2}, {"C", 1, 1}}; }
constexpr uint64_t kThreePoolsBytes = 36864;

TEST(SlotArenaTest, LayoutIsAlignedAndPacked) {
  auto arena = SlotArena::Create(UniqueName("layout"), kThreePoolsBytes, ThreePools());
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  SlotArena& a = **arena;
  EXPECT_TRUE(a.backed());
  EXPECT_EQ(a.mapped_bytes(), kThreePoolsBytes);
  ASSERT_NE(a.region(), nullptr);
  EXPECT_EQ(a.region()->size_bytes(), kThreePoolsBytes);
  EXPECT_EQ(a.slot_stride(0), 8192u);
  EXPECT_EQ(a.slot_stride(1), 4096u);
  EXPECT_EQ(a.slot_stride(2), 4096u);
  EXPECT_EQ(a.slot_bytes(0), 5000u);
  const std::vector<std::vector<uint64_t>> want = {{0, 8192, 16384}, {24576, 28672}, {32768}};
  for (int p = 0; p < a.n_pools(); ++p) {
    for (uint32_t s = 0; s < a.n_slots(p); ++s) {
      EXPECT_EQ(a.SlotOffset(p, s), want[p][s]) << p << "/" << s;
      EXPECT_EQ(a.SlotOffset(p, s) % kSlotAlignmentBytes, 0u);
      EXPECT_EQ(a.SlotData(p, s), a.base() + a.SlotOffset(p, s));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a.SlotData(p, s)) % kSlotAlignmentBytes, 0u);  // O_DIRECT-ready
    }
  }
}

TEST(SlotArenaTest, PoolsMustFitTheBudget) {
  auto over = SlotArena::Create(UniqueName("over"), kThreePoolsBytes - 1, ThreePools());
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(over.status().message(), HasSubstr("'C'"));
  auto exact = SlotArena::Create("", kThreePoolsBytes, ThreePools());
  ASSERT_TRUE(exact.ok());
  // A bigger budget maps only what the pools reserve.
  auto roomy = SlotArena::Create(UniqueName("roomy"), 1 << 20, ThreePools());
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ((*roomy)->mapped_bytes(), kThreePoolsBytes);
  EXPECT_EQ((*roomy)->budget_bytes(), 1u << 20);
  auto zero_bytes = SlotArena::Create("", 1 << 20, {{"Z", 0, 2}});
  EXPECT_EQ(zero_bytes.status().code(), StatusCode::kInvalidArgument);
  auto huge = SlotArena::Create("", UINT64_MAX, {{"H", UINT64_MAX / 2, 4}});
  EXPECT_EQ(huge.status().code(), StatusCode::kInvalidArgument);
}

TEST(SlotArenaTest, AllocateUntilFullThenFree) {
  auto arena = SlotArena::Create("", kThreePoolsBytes, ThreePools());
  ASSERT_TRUE(arena.ok());
  SlotArena& a = **arena;
  EXPECT_FALSE(a.backed());
  EXPECT_EQ(a.SlotData(0, 0), nullptr);
  for (uint32_t want = 0; want < 3; ++want) {
    auto s = a.Allocate(0);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(*s, want);  // lowest index first
    EXPECT_TRUE(a.IsAllocated(0, *s));
  }
  auto full = a.Allocate(0);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(full.status().message(), HasSubstr("'A' full"));
  EXPECT_EQ(a.n_allocated(0), 3u);
  a.Free(0, 1);
  EXPECT_FALSE(a.IsAllocated(0, 1));
  auto again = a.Allocate(0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 1u);
  EXPECT_EQ(a.Allocate(7).status().code(), StatusCode::kInvalidArgument);
}

TEST(SlotArenaTest, EmptyPoolIsAllowedAndAlwaysFull) {
  auto arena = SlotArena::Create("", 4096, {{"F", 123456, 0}, {"S", 100, 1}});
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  EXPECT_EQ((*arena)->reserved_bytes(0), 0u);
  EXPECT_EQ((*arena)->Allocate(0).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE((*arena)->Allocate(1).ok());
}

// A pool whose bytes live elsewhere (the GPU executor's device F slots) is slot accounting only: it
// maps nothing, counts nothing against the budget, and its slots have no bytes here.
TEST(SlotArenaTest, BytesElsewherePoolAccountsSlotsWithoutMemory) {
  std::vector<SlotPoolSpec> pools = ThreePools();
  pools.insert(pools.begin() + 1, SlotPoolSpec{"F-device", 1 << 20, 8, /*bytes_elsewhere=*/true});
  auto arena = SlotArena::Create(UniqueName("elsewhere"), kThreePoolsBytes, pools);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  SlotArena& a = **arena;
  EXPECT_EQ(a.mapped_bytes(), kThreePoolsBytes);  // 8 MiB of device slots fit a 36 KiB budget
  EXPECT_EQ(a.reserved_bytes(1), 0u);
  EXPECT_TRUE(a.bytes_elsewhere(1));
  EXPECT_FALSE(a.bytes_elsewhere(0));
  std::set<uint32_t> taken;
  for (int i = 0; i < 8; ++i) {
    Result<uint32_t> s = a.Allocate(1);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(a.SlotData(1, *s), nullptr);
    taken.insert(*s);
  }
  EXPECT_EQ(taken.size(), 8u);
  EXPECT_FALSE(a.Allocate(1).ok());
  // The pools after it sit where they would without it.
  EXPECT_EQ(a.SlotOffset(2, 0), 3u * 8192);
  ASSERT_NE(a.SlotData(0, 0), nullptr);
  EXPECT_EQ(a.SlotData(2, 0), a.SlotData(0, 0) + 3 * 8192);
}

TEST(SlotArenaTest, AccountingNeverExceedsBudgetUnderRandomAllocFree) {
  const std::vector<SlotPoolSpec> pools = {{"F", 3 * 4096 + 1, 5}, {"C", 4096, 7}, {"S", 100, 4}, {"E", 9000, 3}};
  uint64_t reserved = 0;
  for (const auto& p : pools) reserved += AlignSlotBytes(p.slot_bytes) * p.n_slots;
  auto arena = SlotArena::Create(UniqueName("random"), reserved, pools);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  SlotArena& a = **arena;

  std::mt19937 rng(20240611);
  std::vector<std::set<uint32_t>> held(pools.size());
  for (int step = 0; step < 20000; ++step) {
    const int p = static_cast<int>(rng() % pools.size());
    if (rng() % 2 == 0) {
      auto s = a.Allocate(p);
      if (held[p].size() == pools[p].n_slots) {
        ASSERT_FALSE(s.ok()) << "allocated beyond capacity in pool " << p;
        ASSERT_EQ(s.status().code(), StatusCode::kUnavailable);
      } else {
        ASSERT_TRUE(s.ok());
        ASSERT_TRUE(held[p].insert(*s).second) << "slot handed out twice";
        // Tag the slot's first and last byte; a later overlap would clobber a tag.
        a.SlotData(p, *s)[0] = static_cast<uint8_t>(p * 31 + *s);
        a.SlotData(p, *s)[pools[p].slot_bytes - 1] = static_cast<uint8_t>(p * 17 + *s);
      }
    } else if (!held[p].empty()) {
      auto it = held[p].begin();
      std::advance(it, rng() % held[p].size());
      a.Free(p, *it);
      held[p].erase(it);
    }
    uint64_t in_use = 0;
    for (int q = 0; q < a.n_pools(); ++q) {
      ASSERT_EQ(a.n_allocated(q), held[q].size());
      in_use += a.n_allocated(q) * a.slot_stride(q);
    }
    ASSERT_LE(in_use, a.mapped_bytes());
    ASSERT_LE(a.mapped_bytes(), a.budget_bytes());
  }
  for (int p = 0; p < a.n_pools(); ++p) {
    for (uint32_t s : held[p]) {
      EXPECT_EQ(a.SlotData(p, s)[0], static_cast<uint8_t>(p * 31 + s));
      EXPECT_EQ(a.SlotData(p, s)[pools[p].slot_bytes - 1], static_cast<uint8_t>(p * 17 + s));
    }
  }
}

TEST(SlotArenaTest, PeerSeesSlotAtItsOffset) {
  const std::string name = UniqueName("peer");
  auto arena = SlotArena::Create(name, kThreePoolsBytes, ThreePools());
  ASSERT_TRUE(arena.ok());
  auto slot = (*arena)->Allocate(1);
  ASSERT_TRUE(slot.ok());
  std::memcpy((*arena)->SlotData(1, *slot), "sm-chunk", 8);
  auto peer = ShmRegion::Attach(name);
  ASSERT_TRUE(peer.ok()) << peer.status().ToString();
  EXPECT_EQ(std::memcmp(peer->data() + (*arena)->SlotOffset(1, *slot), "sm-chunk", 8), 0);
}

TEST(SlotArenaDeathTest, DoubleFreeAborts) {
  auto arena = SlotArena::Create("", kThreePoolsBytes, ThreePools());
  ASSERT_TRUE(arena.ok());
  auto s = (*arena)->Allocate(2);
  ASSERT_TRUE(s.ok());
  (*arena)->Free(2, *s);
  EXPECT_DEATH((*arena)->Free(2, *s), "double free");
  EXPECT_DEATH((*arena)->Free(9, 0), "check failed");
}

}  // namespace
}  // namespace zipmoe
