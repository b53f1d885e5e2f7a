// ExpertStore::Open and expert dtypes: the serving default opens BF16, F16 and F32 experts when every
// expert tensor has the same dtype and recovers them bit-exact; it refuses mixed dtypes naming both
// tensors (ExpertDTypes::kAny, for verify, opens them); a damaged chunk of an F32 expert is a
// kCorruption naming the tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/checkpoint/expert_store.h"
#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "services/convert/compress.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

// The bytes every expert tensor of the checkpoint holds (same pattern for any dtype).
uint8_t ByteAt(uint64_t i) { return static_cast<uint8_t>(i * 37 + 11); }

// A one-layer checkpoint of one expert per entry of `dtypes` (expert e's tensors are dtypes[e]),
// compressed into tmp/c.
std::string CompressedOf(const testing::TempDir& tmp, const std::vector<DType>& dtypes) {
  const std::string model = tmp.Sub("m");
  EXPECT_TRUE(CreateDirectories(model).ok());
  EXPECT_TRUE(WriteFileAtomic(JoinPath(model, "config.json"),
                              R"({"model_type": "qwen2_moe", "num_experts": )" + std::to_string(dtypes.size()) + "}")
                  .ok());
  std::vector<TensorSpec> specs;
  for (size_t e = 0; e < dtypes.size(); ++e) {
    const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    specs.push_back({p + "gate_proj.weight", dtypes[e], {4, 8}});
    specs.push_back({p + "up_proj.weight", dtypes[e], {4, 8}});
    specs.push_back({p + "down_proj.weight", dtypes[e], {8, 4}});
  }
  EXPECT_TRUE(WriteCheckpointWeights(model, specs, 1 << 20, [](const TensorSpec& s, uint8_t* out) {
                for (uint64_t i = 0; i < s.size_bytes(); ++i) out[i] = ByteAt(i);
                return Status::Ok();
              }).ok());
  convert::CompressOptions o;
  o.model_dir = model;
  o.out_dir = tmp.Sub("c");
  o.n_shards = 2;
  o.n_threads = 1;
  auto s = convert::CompressModel(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return o.out_dir;
}

TEST(ExpertStoreDtypeTest, ServingOpensF32AndF16ExpertsAndRecoversThemBitExact) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    testing::TempDir tmp;
    const std::string dir = CompressedOf(tmp, {dtype, dtype});
    auto store = ExpertStore::Open(dir);
    ASSERT_TRUE(store.ok()) << DTypeName(dtype) << ": " << store.status().ToString();
    EXPECT_EQ((*store)->expert_dtype(), dtype);
    const ExpertTensorInfo* t = (*store)->Find(0, 1, ExpertProj::kDown);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->raw_bytes(), 32u * DTypeSize(dtype));
    std::vector<uint8_t> got(t->raw_bytes() + 1);
    ASSERT_TRUE((*store)->ReadTensor(*t, got.data() + 1).ok());  // any alignment
    for (uint64_t i = 0; i < t->raw_bytes(); ++i) ASSERT_EQ(got[i + 1], ByteAt(i)) << DTypeName(dtype) << " byte " << i;
    std::vector<uint16_t> bf16(32);
    EXPECT_EQ((*store)->ReadTensorBf16(*t, bf16.data()).code(), StatusCode::kInvalidArgument);
  }
}

TEST(ExpertStoreDtypeTest, ServingRefusesMixedDtypesNamingBothTensors) {
  testing::TempDir tmp;
  const std::string dir = CompressedOf(tmp, {DType::kBF16, DType::kF32});
  auto store = ExpertStore::Open(dir);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
  const std::string& msg = store.status().message();
  EXPECT_NE(msg.find("manifest.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'model.layers.0.mlp.experts.1.gate_proj.weight' (layer 0, expert 1) is F32 but "
                     "'model.layers.0.mlp.experts.0.gate_proj.weight' is BF16"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--convert-dtype"), std::string::npos) << msg;

  auto any = ExpertStore::Open(dir, ExpertDTypes::kAny);
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ((*any)->manifest().expert_tensors.size(), 6u);
}

// A torn write: the second half of an F32 expert's SM-chunk is zeros (experts.bin keeps its size, so
// Open succeeds); reading the tensor fails its chunk hash, naming file, tensor, layer and expert.
TEST(ExpertStoreDtypeTest, TruncatedSmChunkOfAnF32ExpertIsCorruptionNamingTheTensor) {
  testing::TempDir tmp;
  const std::string dir = CompressedOf(tmp, {DType::kF32});
  uint64_t sm_offset = 0, sm_bytes = 0;
  {
    auto store = ExpertStore::Open(dir);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    const ExpertTensorInfo* t = (*store)->Find(0, 0, ExpertProj::kUp);
    ASSERT_NE(t, nullptr);
    sm_offset = t->chunks.back().file_offset;
    sm_bytes = t->chunks.back().stored_bytes;
    ASSERT_EQ(sm_bytes, 3u * 32u);
  }
  const std::string path = JoinPath(dir, "experts.bin");
  std::string bytes = testing::ReadAll(path);
  ASSERT_GE(bytes.size(), sm_offset + sm_bytes);
  std::memset(&bytes[sm_offset + sm_bytes / 2], 0, sm_bytes - sm_bytes / 2);
  testing::WriteAll(path, bytes);

  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ExpertTensorInfo* t = (*store)->Find(0, 0, ExpertProj::kUp);
  std::vector<uint32_t> out(32);
  const Status st = (*store)->ReadTensor(*t, reinterpret_cast<uint8_t*>(out.data()));
  EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("experts.bin"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("SM-chunk 2 of 'model.layers.0.mlp.experts.0.up_proj.weight' (layer 0, expert 0)"),
            std::string::npos)
      << st.message();
  // A file cut short is refused at Open, naming experts.bin.
  testing::WriteAll(path, bytes.substr(0, sm_offset + sm_bytes / 2));
  auto cut = ExpertStore::Open(dir);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), StatusCode::kCorruption);
  EXPECT_NE(cut.status().message().find("experts.bin"), std::string::npos) << cut.status().message();
}

TEST(ExpertStoreDtypeTest, ServingOpensBf16Experts) {
  testing::TempDir tmp;
  const std::string dir = CompressedOf(tmp, {DType::kBF16});
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->expert_dtype(), DType::kBF16);
  const ExpertTensorInfo* t = (*store)->Find(0, 0, ExpertProj::kDown);
  ASSERT_NE(t, nullptr);
  std::vector<uint16_t> got(32);
  ASSERT_TRUE((*store)->ReadTensorBf16(*t, got.data()).ok());
}

}  // namespace
}  // namespace zipmoe
