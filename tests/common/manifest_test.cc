#include "common/checkpoint/manifest.h"

#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

Manifest SampleManifest() {
  Manifest m;
  m.arch = "qwen2_moe";
  m.config_json = R"({"model_type": "qwen2_moe"})";
  m.codec = Codec::kZstd;
  m.level = 3;
  m.n_shards = 2;
  m.n_layers = 1;
  m.n_experts = 2;
  uint64_t offset = 0;
  for (int e = 0; e < 2; ++e) {
    for (ExpertProj p : {ExpertProj::kGate, ExpertProj::kUp, ExpertProj::kDown}) {
      ExpertTensorInfo t;
      t.name = "model.layers.0.mlp.experts." + std::to_string(e) + "." + ExpertProjName(p) + ".weight";
      t.layer_id = 0;
      t.expert_id = e;
      t.proj = p;
      t.shape = {4, 8};
      t.codec = Codec::kZstd;
      t.level = 3;
      t.n_shards = 2;
      t.chunks.push_back({ChunkKind::kE, 0, 16, offset, 9, 16, 0x1111u + offset});
      t.chunks.push_back({ChunkKind::kE, 16, 16, offset + 4096, 10, 16, 0x2222u + offset});
      t.chunks.push_back({ChunkKind::kSm, 0, 32, offset + 8192, 32, 32, 0x3333u + offset});
      offset += 3 * 4096;
      t.bf16_xxh64 = 0xabcdefu + offset;
      t.record_xxh64 = RecordHash(t);
      m.expert_tensors.push_back(t);
    }
  }
  m.experts_file_bytes = offset;
  m.dense_tensors.push_back({"model.embed_tokens.weight", {16, 8}, DType::kBF16, 0x0123456789abcdefull});
  m.exponent_histogram[127] = 100;
  m.exponent_histogram[120] = 7;
  m.source_files = {"config.json", "tokenizer.json"};
  return m;
}

TEST(ManifestTest, RoundTripsEveryField) {
  const Manifest m = SampleManifest();
  const std::string bytes = SerializeManifest(m);
  auto parsed = ParseManifest("manifest.bin", bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const Manifest& p = parsed.value();
  EXPECT_EQ(p.arch, m.arch);
  EXPECT_EQ(p.config_json, m.config_json);
  EXPECT_EQ(p.level, 3);
  EXPECT_EQ(p.n_experts, 2);
  EXPECT_EQ(p.exponent_histogram, m.exponent_histogram);
  EXPECT_EQ(p.source_files, m.source_files);
  ASSERT_EQ(p.expert_tensors.size(), m.expert_tensors.size());
  for (size_t i = 0; i < m.expert_tensors.size(); ++i) {
    EXPECT_EQ(p.expert_tensors[i].name, m.expert_tensors[i].name);
    EXPECT_EQ(p.expert_tensors[i].shape, m.expert_tensors[i].shape);
    EXPECT_EQ(p.expert_tensors[i].proj, m.expert_tensors[i].proj);
    EXPECT_EQ(p.expert_tensors[i].bf16_xxh64, m.expert_tensors[i].bf16_xxh64);
    ASSERT_EQ(p.expert_tensors[i].chunks.size(), 3u);
    EXPECT_EQ(p.expert_tensors[i].chunks[1].file_offset, m.expert_tensors[i].chunks[1].file_offset);
    EXPECT_EQ(p.expert_tensors[i].chunks[2].xxh64, m.expert_tensors[i].chunks[2].xxh64);
  }
  ASSERT_EQ(p.dense_tensors.size(), 1u);
  EXPECT_EQ(p.dense_tensors[0].shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(p.dense_tensors[0].xxh64, 0x0123456789abcdefull);
}

// A large model at an ordinary K has more than the FlatBuffers verifier's default 1,000,000 tables
// (DeepSeek-V3's 44,544 expert tensors at K = 21): such a manifest reads back.
TEST(ManifestTest, MoreThanAMillionChunkTablesReadBack) {
  Manifest m = SampleManifest();
  ExpertTensorInfo t = m.expert_tensors.back();
  constexpr int64_t kChunks = 1100000;
  t.name = "model.layers.0.mlp.experts.2.down_proj.weight";
  t.expert_id = 2;
  t.shape = {1, kChunks};
  t.n_shards = static_cast<int32_t>(kChunks);
  t.chunks.clear();
  uint64_t offset = m.experts_file_bytes;
  for (int64_t i = 0; i < kChunks; ++i, offset += 4096)
    t.chunks.push_back({ChunkKind::kE, static_cast<uint64_t>(i), 1, offset, 1, 1, 7});
  t.chunks.push_back({ChunkKind::kSm, 0, static_cast<uint64_t>(kChunks), offset, kChunks, kChunks, 8});
  offset += (kChunks + 4095) / 4096 * 4096;
  t.record_xxh64 = RecordHash(t);
  m.expert_tensors.push_back(t);
  m.n_experts = 3;
  m.experts_file_bytes = offset;
  auto parsed = ParseManifest("manifest.bin", SerializeManifest(m));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->expert_tensors.back().chunks.size(), static_cast<size_t>(kChunks + 1));
}

TEST(ManifestTest, EveryFlippedByteIsDetected) {
  const std::string good = SerializeManifest(SampleManifest());
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    auto parsed = ParseManifest("dir/manifest.bin", bad);
    ASSERT_FALSE(parsed.ok()) << "flip at byte " << i << " went unnoticed";
    EXPECT_NE(parsed.status().message().find("dir/manifest.bin"), std::string::npos) << parsed.status().ToString();
  }
}

TEST(ManifestTest, CorruptRecordNamesTheTensor) {
  Manifest m = SampleManifest();
  const std::string good = SerializeManifest(m);
  // The bf16 hash of expert 1's up_proj is unique in the buffer; flip its lowest byte.
  const uint64_t target = m.expert_tensors[4].bf16_xxh64;
  std::string needle(reinterpret_cast<const char*>(&target), 8);
  const size_t pos = good.find(needle);
  ASSERT_NE(pos, std::string::npos);
  std::string bad = good;
  bad[pos] ^= 1;
  auto parsed = ParseManifest("manifest.bin", bad);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), StatusCode::kCorruption);
  EXPECT_NE(parsed.status().message().find("model.layers.0.mlp.experts.1.up_proj.weight"), std::string::npos)
      << parsed.status().ToString();
}

TEST(ManifestTest, TruncatedAndForeignFilesAreRejected) {
  const std::string good = SerializeManifest(SampleManifest());
  auto truncated = ParseManifest("m.bin", good.substr(0, good.size() - 1));
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruption);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  EXPECT_EQ(ParseManifest("m.bin", "short").status().code(), StatusCode::kCorruption);
  EXPECT_NE(ParseManifest("m.bin", std::string(64, 'x')).status().message().find("bad magic"), std::string::npos);
}

TEST(ManifestTest, InconsistentChunksAreRejectedWithTensorName) {
  Manifest m = SampleManifest();
  m.expert_tensors[2].chunks[1].file_offset += 1;  // not 4 KiB aligned
  m.expert_tensors[2].record_xxh64 = RecordHash(m.expert_tensors[2]);
  auto parsed = ParseManifest("manifest.bin", SerializeManifest(m));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("experts.0.down_proj"), std::string::npos) << parsed.status().ToString();
  EXPECT_NE(parsed.status().message().find("aligned"), std::string::npos);

  m = SampleManifest();
  m.expert_tensors[0].chunks[1].elem_count = 15;  // E-chunks no longer cover the tensor
  m.expert_tensors[0].chunks[1].raw_bytes = 15;
  m.expert_tensors[0].record_xxh64 = RecordHash(m.expert_tensors[0]);
  parsed = ParseManifest("manifest.bin", SerializeManifest(m));
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("cover"), std::string::npos) << parsed.status().ToString();
}

TEST(ManifestTest, ReadManifestNamesMissingFile) {
  testing::TempDir dir;
  auto r = ReadManifest(dir.path());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("manifest.bin"), std::string::npos);
}

}  // namespace
}  // namespace zipmoe
