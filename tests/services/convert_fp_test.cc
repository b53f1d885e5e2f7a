// Lossless F32 and F16 expert tensors (issue 19 item 3): compress -> verify bit-exact without
// --convert-dtype, special values (NaN payloads, Inf, subnormals, -0), a damaged F32 SM-chunk named in
// the error, per-dtype inspect output, and the compressed size against the exponent-entropy bound.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bitfield.h"
#include "common/dtype.h"
#include "common/checkpoint/expert_store.h"
#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "services/convert/compress.h"
#include "services/convert/inspect.h"
#include "services/convert/verify.h"
#include "tests/services/convert_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::convert {
namespace {

using testing::TempDir;
using test::WriteToyCheckpoint;

CompressOptions Options(const std::string& model, const std::string& out, int k) {
  CompressOptions o;
  o.model_dir = model;
  o.out_dir = out;
  o.codec.codec = Codec::kZstd;
  o.n_shards = k;
  o.n_threads = 2;
  return o;
}

class ConvertFpTest : public ::testing::TestWithParam<DType> {};

TEST_P(ConvertFpTest, CompressVerifyBitExactWithSpecialValues) {
  const DType dtype = GetParam();
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), dtype, 2, 24, 40, 3, /*specials=*/true);
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), 3));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->expert_bytes_raw, uint64_t{6} * 24 * 40 * DTypeSize(dtype));

  auto v = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->expert_tensors, 6);

  // Independently of verify: the records carry the dtype and the SM-chunk size, and every tensor
  // reads back as the checkpoint's bytes.
  auto store = ExpertStore::Open(tmp.Sub("c"), ExpertDTypes::kAny);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(ckpt.ok());
  for (const ExpertTensorInfo& t : (*store)->manifest().expert_tensors) {
    EXPECT_EQ(t.dtype, dtype) << t.name;
    EXPECT_EQ(t.chunks.back().stored_bytes, SmPlaneBytes(dtype, t.numel())) << t.name;
    std::vector<uint8_t> got(t.raw_bytes());
    ASSERT_TRUE((*store)->ReadTensor(t, got.data()).ok()) << t.name;
    auto view = (*ckpt)->Find(t.name);
    ASSERT_TRUE(view.ok());
    ASSERT_EQ(view->size_bytes(), got.size());
    EXPECT_EQ(std::memcmp(got.data(), view->data, got.size()), 0) << t.name;
    std::vector<uint16_t> bf16(static_cast<size_t>(t.numel()));
    EXPECT_EQ((*store)->ReadTensorBf16(t, bf16.data()).code(), StatusCode::kInvalidArgument);
  }

  // inspect: one dtype entry, with its entropy and bound.
  auto j = InspectCompressed(tmp.Sub("c"));
  ASSERT_TRUE(j.ok());
  ASSERT_EQ((*j)["dtypes"].size(), 1u) << j->dump();
  const auto& d = (*j)["dtypes"][0];
  EXPECT_EQ(d["dtype"], DTypeName(dtype));
  EXPECT_EQ(d["tensors"], 6);
  EXPECT_EQ(d["sm_bits_per_value"], SmBitsPerValue(dtype));
  EXPECT_NEAR(d["entropy_bound_ratio"].get<double>(),
              (SmBitsPerValue(dtype) + d["exponent_entropy_bits"].get<double>()) / (8.0 * DTypeSize(dtype)), 1e-12);
  EXPECT_NEAR((*j)["entropy_bound_ratio"].get<double>(), d["entropy_bound_ratio"].get<double>(), 1e-12);
  auto cli = testing::RunCli("inspect " + tmp.Sub("c"));
  ASSERT_EQ(cli.exit_code, 0) << cli.output;
  EXPECT_NE(cli.output.find(std::string(DTypeName(dtype)) + " "), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find("exponent entropy"), std::string::npos) << cli.output;
}

TEST_P(ConvertFpTest, CompressedSizeIsWithin06PointOfTheEntropyBound) {
  const DType dtype = GetParam();
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), dtype, 4, 512, 704, 11, /*specials=*/false);
  auto s = CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), 4));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto j = InspectCompressed(tmp.Sub("c"));
  ASSERT_TRUE(j.ok());
  const auto& d = (*j)["dtypes"][0];
  const double ratio = d["ratio"].get<double>();
  const double bound = d["entropy_bound_ratio"].get<double>();
  const double entropy = d["exponent_entropy_bits"].get<double>();
  EXPECT_GT(ratio, bound) << "cannot beat the Shannon bound";
  EXPECT_LE(ratio - bound, 0.006) << j->dump();
  EXPECT_NEAR(entropy, 2.55, 0.05) << "N(0, 0.02^2): exponent entropy about 2.55 bits in either dtype";
  EXPECT_EQ((*j)["expert_bytes_raw"].get<uint64_t>(), uint64_t{12} * 512 * 704 * DTypeSize(dtype));
  std::printf("%s: ratio %.5f, entropy bound %.5f (H = %.4f bits), gap %.3f pt\n", DTypeName(dtype), ratio, bound,
              entropy, 100 * (ratio - bound));
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ConvertFpTest, ::testing::Values(DType::kF32, DType::kF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(ConvertFpCorruptionTest, DamagedF32SmChunkNamesTheTensor) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kF32, 2, 16, 24, 5, /*specials=*/true);
  ASSERT_TRUE(CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), 2)).ok());
  auto m = ReadManifest(tmp.Sub("c"));
  ASSERT_TRUE(m.ok());
  const ExpertTensorInfo t = m->expert_tensors[4];
  const ChunkInfo sm = t.chunks.back();
  ASSERT_EQ(sm.kind, ChunkKind::kSm);
  ASSERT_EQ(sm.stored_bytes, uint64_t{3} * 16 * 24);

  // A flipped byte in the SM-chunk: verify names experts.bin, the tensor and the SM-chunk.
  const std::string experts = JoinPath(tmp.Sub("c"), "experts.bin");
  const std::string original = testing::ReadAll(experts);
  std::string bytes = original;
  bytes[sm.file_offset + sm.stored_bytes - 1] ^= 0x10;  // in the hi plane (sign/top mantissa bits)
  testing::WriteAll(experts, bytes);
  auto r = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("'" + t.name + "'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("SM-chunk"), std::string::npos) << r.status().ToString();
  testing::WriteAll(experts, original);

  // A truncated SM-chunk record (as if written for BF16: 1 byte per value): the manifest is rejected,
  // naming the tensor, its dtype and the expected size.
  Manifest bad = *m;
  ExpertTensorInfo& bt = bad.expert_tensors[4];
  bt.chunks.back().stored_bytes = bt.chunks.back().raw_bytes = static_cast<uint64_t>(bt.numel());
  bt.record_xxh64 = RecordHash(bt);
  const std::string manifest_path = JoinPath(tmp.Sub("c"), "manifest.bin");
  ASSERT_TRUE(WriteFileAtomic(manifest_path, SerializeManifest(bad)).ok());
  r = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("'" + t.name + "'"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("F32 SM-chunk"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(std::to_string(3 * 16 * 24)), std::string::npos) << r.status().ToString();

  // A truncated experts.bin (the last SM-chunk cut short): verify fails naming experts.bin.
  ASSERT_TRUE(WriteFileAtomic(manifest_path, SerializeManifest(*m)).ok());
  testing::WriteAll(experts, original.substr(0, original.size() - 4096));
  r = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("experts.bin"), std::string::npos) << r.status().ToString();
}

TEST(ConvertFpCorruptionTest, CheckpointWithAnotherDtypeFailsVerify) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kF16, 1, 8, 16, 4, /*specials=*/false);
  ASSERT_TRUE(CompressModel(Options(tmp.Sub("m"), tmp.Sub("c"), 2)).ok());
  // The checkpoint is rewritten with BF16 experts of the same shapes (and bytes count per value).
  ASSERT_TRUE(RemoveTree(tmp.Sub("m")).ok());
  WriteToyCheckpoint(tmp.Sub("m"), DType::kBF16, 1, 8, 16, 4, /*specials=*/false);
  auto r = VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("F16 in the manifest, BF16 in"), std::string::npos) << r.status().ToString();
}

TEST(ConvertFpRoundingTest, ConvertDtypeStillRoundsF16ToBf16) {
  TempDir tmp;
  WriteToyCheckpoint(tmp.Sub("m"), DType::kF16, 1, 8, 16, 9, /*specials=*/false);
  CompressOptions o = Options(tmp.Sub("m"), tmp.Sub("c"), 2);
  o.convert_dtype = true;
  ASSERT_TRUE(CompressModel(o).ok());
  auto store = ExpertStore::Open(tmp.Sub("c"));  // BF16 now
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(ckpt.ok());
  const ExpertTensorInfo& t = (*store)->manifest().expert_tensors.front();
  EXPECT_EQ(t.dtype, DType::kBF16);
  std::vector<uint16_t> got(static_cast<size_t>(t.numel()));
  ASSERT_TRUE((*store)->ReadTensorBf16(t, got.data()).ok());
  auto view = (*ckpt)->Find(t.name);
  for (size_t i = 0; i < got.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, view->data + 2 * i, 2);
    ASSERT_EQ(got[i], FloatToBf16(F16ToFloat(h))) << i;
  }
  EXPECT_TRUE(VerifyCompressed({tmp.Sub("m"), tmp.Sub("c"), 2}).ok());
}

}  // namespace
}  // namespace zipmoe::convert
