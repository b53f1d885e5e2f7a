// ExpertStore and MXFP4 experts (issue 41): a model directory written here by hand (split planes, packed
// zstd E-chunks of the 2-bit fields, an E-chunk of the scales, the raw SM-chunk) opens, and ReadTensor
// recovers the raw MXFP4 bytes (blocks then scales, common/dtype.h) bit-exact at any output alignment;
// raw_bytes() is n/2 + n/32. A directory in the first MXFP4 layout (scales at the end of the SM-chunk) is
// refused with what to do.
// Independent of the converter, which learns MXFP4 separately (services/convert).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/bitfield.h"
#include "common/checkpoint/expert_store.h"
#include "common/codec.h"
#include "common/file_util.h"
#include "common/hash.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

// Appends `bytes` to `file` at the next 4 KiB boundary; returns the offset.
uint64_t Append(std::string* file, const std::vector<uint8_t>& bytes) {
  file->resize((file->size() + kChunkAlignmentBytes - 1) / kChunkAlignmentBytes * kChunkAlignmentBytes, '\0');
  const uint64_t offset = file->size();
  file->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return offset;
}

// Writes a one-expert directory whose up_proj is `raw` ([rows, cols] MXFP4) split into K E-chunks: K - 1 of
// fields (packed), the last of the n/32 scales (bytes). `first_layout`: the layout before the scales had an
// E-chunk (K E-chunks of fields, the scales after the fields in the SM-chunk).
void WriteStore(const std::string& dir, const std::vector<uint8_t>& raw, int64_t rows, int64_t cols, int k,
                bool first_layout = false) {
  const int64_t n = rows * cols;
  std::vector<uint8_t> e(static_cast<size_t>(n + n / 32)), sm(static_cast<size_t>(n / 4));
  // Written out here rather than by SplitMxfp4: value i's nibble v gives e[i] = (v >> 1) & 3 and the 2-bit
  // field (v >> 3) << 1 | (v & 1) at bits 2(i % 4) of sm[i / 4]; the scales follow.
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t v = (raw[static_cast<size_t>(i / 2)] >> (4 * (i % 2))) & 15u;
    e[static_cast<size_t>(i)] = static_cast<uint8_t>((v >> 1) & 3u);
    sm[static_cast<size_t>(i / 4)] |= static_cast<uint8_t>(((v >> 3) << 1 | (v & 1u)) << (2 * (i % 4)));
  }
  std::copy(raw.begin() + n / 2, raw.end(), e.begin() + n);
  if (first_layout) {
    sm.insert(sm.end(), e.begin() + n, e.end());
    e.resize(static_cast<size_t>(n));
  }
  ExpertTensorInfo t;
  t.name = "model.layers.0.mlp.experts.0.up_proj.weight";
  t.proj = ExpertProj::kUp;
  t.shape = {rows, cols};
  t.dtype = DType::kMXFP4;
  t.n_shards = k;
  std::string file;
  auto ranges = ShardRanges(n, first_layout ? k : k - 1);
  if (!first_layout) ranges.emplace_back(n, n / 32);
  for (const auto& [offset, count] : ranges) {
    std::vector<uint8_t> stored;
    const DType chunk_dtype = offset >= n ? DType::kU8 : DType::kMXFP4;
    ASSERT_TRUE(
        CompressEChunk(chunk_dtype, {Codec::kZstd, 0}, e.data() + offset, static_cast<uint64_t>(count), &stored).ok());
    const uint64_t at = Append(&file, stored);
    t.chunks.push_back({ChunkKind::kE, static_cast<uint64_t>(offset), static_cast<uint64_t>(count), at,
                        stored.size(), static_cast<uint64_t>(count), Xxh64(stored.data(), stored.size())});
  }
  const uint64_t at = Append(&file, sm);
  t.chunks.push_back(
      {ChunkKind::kSm, 0, static_cast<uint64_t>(n), at, sm.size(), sm.size(), Xxh64(sm.data(), sm.size())});
  t.bf16_xxh64 = Xxh64(raw.data(), raw.size());
  t.record_xxh64 = RecordHash(t);
  Manifest m;
  m.arch = "gpt_oss";
  m.n_layers = 1;
  m.n_experts = 1;
  m.n_shards = k;
  m.experts_file_bytes = file.size();
  m.expert_tensors = {t};
  DTypeHistogram h{DType::kMXFP4, {}};
  for (int64_t i = 0; i < n; ++i) ++h.counts[e[static_cast<size_t>(i)]];
  m.exponent_histograms = {h};
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, kManifestFileName), SerializeManifest(m)).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, kExpertsFileName), file).ok());
}

TEST(ExpertStoreMxfp4Test, ReadTensorRecoversTheRawBlocksAndScales) {
  const int64_t rows = 24, cols = 96;  // 2304 values in 72 blocks; K = 3 E-chunks: 1152 + 1152 fields, 72 scales
  std::mt19937_64 rng(41);
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, rows * cols));
  for (uint8_t& b : raw) b = static_cast<uint8_t>(rng());
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("c");
  WriteStore(dir, raw, rows, cols, 3);
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->expert_dtype(), DType::kMXFP4);
  const ExpertTensorInfo* t = (*store)->Find(0, 0, ExpertProj::kUp);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->raw_bytes(), static_cast<uint64_t>(rows * cols / 2 + rows * cols / 32));
  for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {
    std::vector<uint8_t> got(t->raw_bytes() + misalign, 0x5a);
    const Status st = (*store)->ReadTensor(*t, got.data() + misalign);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(std::vector<uint8_t>(got.begin() + static_cast<int64_t>(misalign), got.end()), raw) << misalign;
  }
  std::vector<uint16_t> bf16(static_cast<size_t>(rows * cols));
  EXPECT_EQ((*store)->ReadTensorBf16(*t, bf16.data()).code(), StatusCode::kInvalidArgument);
}

TEST(ExpertStoreMxfp4Test, TheFirstLayoutIsRefusedSayingToCompressAgain) {
  const int64_t rows = 8, cols = 64;
  std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, rows * cols), 0x21);
  testing::TempDir tmp;
  const std::string dir = tmp.Sub("old");
  WriteStore(dir, raw, rows, cols, 2, /*first_layout=*/true);
  auto store = ExpertStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(store.status().message().find("up_proj"), std::string::npos) << store.status().ToString();
  EXPECT_NE(store.status().message().find("run `zipmoe compress` on the checkpoint again"), std::string::npos)
      << store.status().ToString();
}

}  // namespace
}  // namespace zipmoe
