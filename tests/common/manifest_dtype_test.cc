// Per-dtype manifest records (issue 19 item 3): F32/F16 SM-chunk sizes are validated against the
// dtype, per-dtype exponent histograms round-trip, and a BF16-only manifest is byte-identical to one
// written before F16/F32 experts existed.
#include <gtest/gtest.h>

#include <string>

#include "common/bitfield.h"
#include "common/checkpoint/manifest.h"

namespace zipmoe {
namespace {

// One expert tensor of `dtype`, shape [rows, cols], K = 2, SM-chunk sized for `sm_dtype` (MXFP4: an E-chunk of
// the n fields, then one of the n/32 scales).
ExpertTensorInfo Record(DType dtype, DType sm_dtype, int64_t rows, int64_t cols, int expert_id) {
  ExpertTensorInfo t;
  t.name = "model.layers.0.mlp.experts." + std::to_string(expert_id) + ".up_proj.weight";
  t.expert_id = expert_id;
  t.proj = ExpertProj::kUp;
  t.shape = {rows, cols};
  t.dtype = dtype;
  t.n_shards = 2;
  const uint64_t n = static_cast<uint64_t>(rows * cols), base = static_cast<uint64_t>(expert_id) * 3 * 4096;
  if (dtype == DType::kMXFP4) {
    t.chunks.push_back({ChunkKind::kE, 0, n, base, 5, n, 1});
    t.chunks.push_back({ChunkKind::kE, n, n / 32, base + 4096, 5, n / 32, 2});
  } else {
    t.chunks.push_back({ChunkKind::kE, 0, n / 2, base, 5, n / 2, 1});
    t.chunks.push_back({ChunkKind::kE, n / 2, n - n / 2, base + 4096, 5, n - n / 2, 2});
  }
  const uint64_t sm = SmPlaneBytes(sm_dtype, static_cast<int64_t>(n));
  t.chunks.push_back({ChunkKind::kSm, 0, n, base + 8192, sm, sm, 3});
  t.bf16_xxh64 = 42;
  t.record_xxh64 = RecordHash(t);
  return t;
}

Manifest WithTensors(std::vector<ExpertTensorInfo> tensors) {
  Manifest m;
  m.arch = "qwen2_moe";
  m.n_layers = 1;
  m.n_experts = static_cast<int32_t>(tensors.size());
  m.expert_tensors = std::move(tensors);
  return m;
}

TEST(ManifestDtypeTest, F32AndF16RecordsRoundTripWithPerDtypeHistograms) {
  Manifest m = WithTensors({Record(DType::kF16, DType::kF16, 5, 7, 0), Record(DType::kF32, DType::kF32, 4, 6, 1)});
  m.exponent_histogram[15] = 30;
  m.exponent_histogram[120] = 20;
  DTypeHistogram f16{DType::kF16, {}}, f32{DType::kF32, {}};
  f16.counts[15] = 30;
  f32.counts[120] = 20;
  m.exponent_histograms = {f16, f32};
  auto p = ParseManifest("m.bin", SerializeManifest(m));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->expert_tensors.size(), 2u);
  EXPECT_EQ(p->expert_tensors[0].dtype, DType::kF16);
  EXPECT_EQ(p->expert_tensors[0].chunks.back().raw_bytes, 35u + 3 * 5);  // 35 values: 5 packed groups
  EXPECT_EQ(p->expert_tensors[1].dtype, DType::kF32);
  EXPECT_EQ(p->expert_tensors[1].raw_bytes(), 24u * 4);
  ASSERT_EQ(p->exponent_histograms.size(), 2u);
  EXPECT_EQ(p->exponent_histograms[0].dtype, DType::kF16);
  EXPECT_EQ(p->exponent_histograms[0].counts, f16.counts);
  EXPECT_EQ(p->exponent_histograms[1].dtype, DType::kF32);
  EXPECT_EQ(p->exponent_histograms[1].counts, f32.counts);
}

TEST(ManifestDtypeTest, SmChunkSizeIsCheckedPerDtype) {
  // F32 with a BF16-sized (1 byte/value) SM-chunk, F16 with one byte short, BF16 with an F32-sized one.
  const struct {
    DType dtype, sm_dtype;
  } cases[] = {{DType::kF32, DType::kBF16}, {DType::kF16, DType::kBF16}, {DType::kBF16, DType::kF32}};
  for (const auto& c : cases) {
    const ExpertTensorInfo t = Record(c.dtype, c.sm_dtype, 4, 6, 3);
    auto p = ParseManifest("dir/manifest.bin", SerializeManifest(WithTensors({t})));
    ASSERT_FALSE(p.ok()) << DTypeName(c.dtype);
    EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
    const std::string& msg = p.status().message();
    EXPECT_NE(msg.find("dir/manifest.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + t.name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string(DTypeName(c.dtype)) + " SM-chunk"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expected " + std::to_string(SmPlaneBytes(c.dtype, 24))), std::string::npos) << msg;
  }
}

TEST(ManifestDtypeTest, DtypesWithoutASplitAreRejected) {
  const ExpertTensorInfo t = Record(DType::kF64, DType::kF32, 2, 2, 0);
  auto p = ParseManifest("m.bin", SerializeManifest(WithTensors({t})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
  EXPECT_NE(p.status().message().find("dtype F64 (expected BF16, F16, F32, F8_E4M3 or MXFP4)"), std::string::npos)
      << p.status().ToString();
  EXPECT_NE(p.status().message().find(t.name), std::string::npos);
}

// MXFP4 (issue 41): the record round-trips with its SM-chunk of n/4 bytes, its scales' E-chunk and raw_bytes
// n/2 + n/32, and the scale histogram with it; a wrong SM size, a last E-chunk that is not the scales, a
// record of the first layout (scales in the SM-chunk) or a tensor that is not whole blocks of 32 is refused,
// naming the tensor.
TEST(ManifestDtypeTest, Mxfp4RecordsRoundTripAndPartialBlocksAreRefused) {
  Manifest m = WithTensors({Record(DType::kMXFP4, DType::kMXFP4, 4, 64, 0)});
  DTypeHistogram h{DType::kMXFP4, {}};
  h.counts[2] = 256;
  m.exponent_histograms = {h};
  m.mxfp4_scale_histogram[121] = 5;
  m.mxfp4_scale_histogram[122] = 3;
  auto p = ParseManifest("m.bin", SerializeManifest(m));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const ExpertTensorInfo& t = p->expert_tensors[0];
  EXPECT_EQ(t.dtype, DType::kMXFP4);
  EXPECT_EQ(t.chunks.back().raw_bytes, 256u / 4);
  EXPECT_EQ(t.raw_bytes(), 256u / 2 + 256u / 32);
  EXPECT_EQ(EChunkDType(t, t.chunks[0]), DType::kMXFP4);
  EXPECT_EQ(EChunkDType(t, t.chunks[1]), DType::kU8);  // the scales: bytes
  ASSERT_EQ(p->exponent_histograms.size(), 1u);
  EXPECT_EQ(p->exponent_histograms[0].dtype, DType::kMXFP4);
  EXPECT_EQ(p->exponent_histograms[0].counts, h.counts);
  EXPECT_EQ(p->mxfp4_scale_histogram, m.mxfp4_scale_histogram);

  ExpertTensorInfo first_layout = Record(DType::kMXFP4, DType::kMXFP4, 4, 64, 0);
  first_layout.chunks[0] = {ChunkKind::kE, 0, 128, 0, 5, 128, 1};
  first_layout.chunks[1] = {ChunkKind::kE, 128, 128, 4096, 5, 128, 2};
  first_layout.chunks[2].raw_bytes = first_layout.chunks[2].stored_bytes = 256 / 4 + 256 / 32;
  first_layout.record_xxh64 = RecordHash(first_layout);
  p = ParseManifest("dir/manifest.bin", SerializeManifest(WithTensors({first_layout})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("earlier layout (block scales in the SM-chunk)"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("zipmoe compress"), std::string::npos) << p.status().message();

  ExpertTensorInfo no_scales = Record(DType::kMXFP4, DType::kMXFP4, 4, 64, 0);  // E-chunks over 264 fields
  no_scales.chunks[0] = {ChunkKind::kE, 0, 132, 0, 5, 132, 1};
  no_scales.chunks[1] = {ChunkKind::kE, 132, 132, 4096, 5, 132, 2};
  no_scales.record_xxh64 = RecordHash(no_scales);
  p = ParseManifest("dir/manifest.bin", SerializeManifest(WithTensors({no_scales})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
  EXPECT_NE(p.status().message().find("expected the 8 block scales [256, +8)"), std::string::npos)
      << p.status().message();

  const ExpertTensorInfo bf16_sized = Record(DType::kMXFP4, DType::kBF16, 4, 64, 0);
  p = ParseManifest("dir/manifest.bin", SerializeManifest(WithTensors({bf16_sized})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
  EXPECT_NE(p.status().message().find("MXFP4 SM-chunk of 256 elements"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("expected 64"), std::string::npos) << p.status().message();

  const ExpertTensorInfo partial = Record(DType::kMXFP4, DType::kF8E4M3, 3, 16, 0);  // 48 values
  p = ParseManifest("dir/manifest.bin", SerializeManifest(WithTensors({partial})));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorruption);
  EXPECT_NE(p.status().message().find("'" + partial.name + "'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("MXFP4 tensor of 48 elements (not whole blocks of 32)"), std::string::npos)
      << p.status().message();
}

TEST(ManifestDtypeTest, Bf16OnlyManifestIsUnchangedByPerDtypeHistograms) {
  Manifest m = WithTensors({Record(DType::kBF16, DType::kBF16, 4, 6, 0)});
  m.exponent_histogram[127] = 24;
  const std::string without = SerializeManifest(m);  // as written before the field existed
  m.exponent_histograms = {{DType::kBF16, m.exponent_histogram}};
  EXPECT_EQ(SerializeManifest(m), without);
  // Reading it back (or an older directory) yields the BF16 histogram from exponent_histogram.
  auto p = ParseManifest("m.bin", without);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->exponent_histograms.size(), 1u);
  EXPECT_EQ(p->exponent_histograms[0].dtype, DType::kBF16);
  EXPECT_EQ(p->exponent_histograms[0].counts, m.exponent_histogram);
  EXPECT_EQ(SerializeManifest(*p), without);
}

}  // namespace
}  // namespace zipmoe
