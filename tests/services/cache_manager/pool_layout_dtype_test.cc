// Pool and staging sizes per expert dtype (issue 19: F32/F16 experts served): the F slot holds
// numel · DTypeSize bytes, the SM part SmPlaneBytes, the staging exponent planes one byte per value;
// worked by hand. Mixed expert dtypes are refused naming both tensors. An F32 / F16 expert admitted
// into F from its planes (fused-recovery sources) is recovered in its dtype, bit-exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/bitfield.h"
#include "common/ipc/slot_arena.h"
#include "tests/services/cache_manager/cache_manager_test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::MakeCache;
using test::MakeManifest;
using test::UniqueShmName;

// MakeManifest's experts in `dtype`: SM-chunks resized to SmPlaneBytes.
Manifest ManifestOf(DType dtype, int32_t n_experts, int64_t numel) {
  Manifest m = MakeManifest(1, n_experts, numel, 2, [](int32_t, int32_t, int, int) { return uint64_t{100}; });
  for (ExpertTensorInfo& t : m.expert_tensors) {
    t.dtype = dtype;
    ChunkInfo& sm = t.chunks.back();
    sm.raw_bytes = sm.stored_bytes = SmPlaneBytes(dtype, numel);
  }
  return m;
}

TEST(PoolLayoutDtypeTest, SlotBytesPerDtypeByHand) {
  constexpr int64_t n = 5000;
  struct Want {
    DType dtype;
    uint64_t f_tensor, sm_tensor;  // one tensor's F / SM extent, 4 KiB-rounded
  };
  // F32: 4n = 20000 -> 20480, SM 3n = 15000 -> 16384. F16: 2n = 10000 -> 12288, SM n + 3·625 = 6875
  // -> 8192. BF16: 2n -> 12288, SM n -> 8192.
  for (const Want& w : {Want{DType::kF32, 20480, 16384}, Want{DType::kF16, 12288, 8192},
                        Want{DType::kBF16, 12288, 8192}}) {
    SCOPED_TRACE(DTypeName(w.dtype));
    auto layout = ModelLayout::FromManifest(ManifestOf(w.dtype, 2, n));
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    EXPECT_EQ(layout->dtype(), w.dtype);
    EXPECT_EQ(layout->e_plane_slot_bytes(), AlignSlotBytes(2 * w.f_tensor / DTypeSize(w.dtype) + n));
    EXPECT_EQ(layout->slot_bytes(Pool::kF), 3 * w.f_tensor);
    EXPECT_EQ(layout->slot_bytes(Pool::kS), 3 * w.sm_tensor);
    EXPECT_EQ(layout->slot_bytes(Pool::kE), 3 * 2 * kSlotAlignmentBytes);  // 6 E-chunks of 100 bytes
    EXPECT_EQ(layout->slot_bytes(Pool::kC), 3 * 2 * kSlotAlignmentBytes + 3 * w.sm_tensor);
    const ExpertSlotLayout* e = layout->Find(0, 1);
    ASSERT_NE(e, nullptr);
    for (int p = 0; p < kProjCount; ++p) {
      EXPECT_EQ(e->tensors[p].bf16.offset, p * w.f_tensor);
      EXPECT_EQ(e->tensors[p].bf16.bytes, static_cast<uint64_t>(n * DTypeSize(w.dtype)));
      EXPECT_EQ(e->tensors[p].sm.bytes, SmPlaneBytes(w.dtype, n));
      EXPECT_EQ(e->tensors[p].e_plane.offset, p * w.f_tensor / DTypeSize(w.dtype));
      EXPECT_EQ(e->tensors[p].e_plane.bytes, static_cast<uint64_t>(n));
    }
    // Staging: [E | SM] as a C slot, the exponent planes (F bytes / elem size), the recovered tensors.
    const StagingLayout s = StagingLayout::ForModel(*layout);
    EXPECT_EQ(s.e_plane_offset, layout->slot_bytes(Pool::kC));
    EXPECT_EQ(s.bf16_offset, s.e_plane_offset + AlignSlotBytes(3 * w.f_tensor / DTypeSize(w.dtype)));
    EXPECT_EQ(s.slot_bytes, s.bf16_offset + 3 * w.f_tensor);
    // The last plane ends inside its region.
    EXPECT_LE(e->tensors[2].e_plane.offset + n, s.bf16_offset - s.e_plane_offset);
  }
}

// MXFP4 (gpt-oss's experts, 17/32 bytes a value): the F slot holds blocks + scales, the exponent planes
// (a byte a value, then the scales: more than the F part) are laid one after the other in the staging slot.
TEST(PoolLayoutDtypeTest, Mxfp4PlanesNeedMoreThanTheFPart) {
  constexpr int64_t n = 4992;  // 156 blocks of 32
  auto layout = ModelLayout::FromManifest(ManifestOf(DType::kMXFP4, 2, n));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->dtype(), DType::kMXFP4);
  const uint64_t f_tensor = AlignSlotBytes(n / 2 + n / 32);  // 2496 + 156 -> 4096
  EXPECT_EQ(layout->slot_bytes(Pool::kF), 3 * f_tensor);
  const ExpertSlotLayout* e = layout->Find(0, 1);
  ASSERT_NE(e, nullptr);
  for (int p = 0; p < kProjCount; ++p) {
    EXPECT_EQ(e->tensors[p].bf16.bytes, static_cast<uint64_t>(n / 2 + n / 32));
    EXPECT_EQ(e->tensors[p].e_plane.offset, static_cast<uint64_t>(p) * AlignSlotBytes(n + n / 32));  // 8192 apart
    EXPECT_EQ(e->tensors[p].e_plane.bytes, static_cast<uint64_t>(n + n / 32));  // 4992 fields + 156 scales
  }
  EXPECT_EQ(layout->e_plane_slot_bytes(), 3 * AlignSlotBytes(n + n / 32));
  const StagingLayout s = StagingLayout::ForModel(*layout);
  EXPECT_EQ(s.bf16_offset, s.e_plane_offset + 3 * AlignSlotBytes(n + n / 32));
  EXPECT_GT(s.bf16_offset - s.e_plane_offset, layout->slot_bytes(Pool::kF));
  EXPECT_EQ(s.slot_bytes, s.bf16_offset + 3 * f_tensor);
}

TEST(PoolLayoutDtypeTest, MixedExpertDtypesAreRefusedNamingBothTensors) {
  Manifest m = ManifestOf(DType::kBF16, 2, 64);
  ExpertTensorInfo& t = m.expert_tensors[4];  // expert 1, up
  t.dtype = DType::kF32;
  t.chunks.back().raw_bytes = t.chunks.back().stored_bytes = SmPlaneBytes(DType::kF32, 64);
  auto layout = ModelLayout::FromManifest(m);
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find("'model.layers.0.mlp.experts.1.up_proj.weight' (layer 0, expert 1) is F32 but "
                                           "'model.layers.0.mlp.experts.0.gate_proj.weight' is BF16"),
            std::string::npos)
      << layout.status().message();
}

TEST(PoolLayoutDtypeTest, AdmissionIntoFRecoversFromPlanesInTheExpertDtype) {
  constexpr int64_t n = 777;
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Manifest m = ManifestOf(dtype, 1, n);
    CacheConfig config;
    config.shm_name = UniqueShmName("dtype");
    config.plan.capacity = {{1, 0, 0, 0}};  // rank 0 -> F
    auto cache = MakeCache(m, config);
    ASSERT_NE(cache, nullptr);
    ASSERT_NE(cache->arena_base(), nullptr);
    test::Activate(*cache, 0, 0, 1);
    // Planes split from deterministic bit patterns (any pattern splits losslessly): F must hold those.
    std::vector<std::vector<uint8_t>> want(kProjCount), e(kProjCount), sm(kProjCount);
    ExpertSources sources;
    for (int p = 0; p < kProjCount; ++p) {
      want[p].resize(static_cast<size_t>(n * DTypeSize(dtype)));
      for (size_t i = 0; i < want[p].size(); ++i) want[p][i] = static_cast<uint8_t>(i * 131 + p * 17 + 3);
      e[p].resize(n);
      sm[p].resize(SmPlaneBytes(dtype, n));
      if (dtype == DType::kF32) {
        std::vector<uint32_t> v(n);
        std::memcpy(v.data(), want[p].data(), want[p].size());
        SplitF32(v.data(), n, e[p].data(), sm[p].data());
      } else {
        std::vector<uint16_t> v(n);
        std::memcpy(v.data(), want[p].data(), want[p].size());
        SplitF16(v.data(), n, e[p].data(), sm[p].data());
      }
      sources.e_plane[p] = e[p].data();
      sources.sm[p] = sm[p].data();
    }
    auto r = cache->Admit(0, 0, AvailableParts{false, false, true}, sources);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->state, CompressionState::kF);
    auto f = cache->Lookup(0, 0);
    ASSERT_TRUE(f.ok());
    ASSERT_EQ(f->state, CompressionState::kF);
    for (int p = 0; p < kProjCount; ++p) {
      const uint8_t* got = f->Full(static_cast<ExpertProj>(p));
      ASSERT_NE(got, nullptr);
      EXPECT_EQ(std::memcmp(got, want[p].data(), want[p].size()), 0) << "proj " << p;
    }
  }
}

}  // namespace
}  // namespace zipmoe::cache_manager
