// ExpertStore::Open and expert dtypes: the serving default refuses F32/F16 experts with an error
// naming the tensor and its dtype; ExpertDTypes::kAny (verify) opens them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/expert_store.h"
#include "common/file_util.h"
#include "common/safetensors.h"
#include "services/convert/compress.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

// A one-layer, one-expert checkpoint whose expert tensors are `dtype`, compressed into tmp/c.
std::string CompressedOf(const testing::TempDir& tmp, DType dtype) {
  const std::string model = tmp.Sub("m");
  EXPECT_TRUE(CreateDirectories(model).ok());
  EXPECT_TRUE(
      WriteFileAtomic(JoinPath(model, "config.json"), R"({"model_type": "qwen2_moe", "num_experts": 1})").ok());
  const std::string p = "model.layers.0.mlp.experts.0.";
  const std::vector<TensorSpec> specs = {{p + "gate_proj.weight", dtype, {4, 8}},
                                         {p + "up_proj.weight", dtype, {4, 8}},
                                         {p + "down_proj.weight", dtype, {8, 4}}};
  EXPECT_TRUE(WriteCheckpointWeights(model, specs, 1 << 20, [](const TensorSpec& s, uint8_t* out) {
                for (uint64_t i = 0; i < s.size_bytes(); ++i) out[i] = static_cast<uint8_t>(i * 37 + 11);
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

TEST(ExpertStoreDtypeTest, ServingRefusesF32AndF16ExpertsNamingTensorAndDtype) {
  for (DType dtype : {DType::kF32, DType::kF16}) {
    testing::TempDir tmp;
    const std::string dir = CompressedOf(tmp, dtype);
    auto store = ExpertStore::Open(dir);
    ASSERT_FALSE(store.ok()) << DTypeName(dtype);
    EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
    const std::string& msg = store.status().message();
    EXPECT_NE(msg.find("'model.layers.0.mlp.experts.0.gate_proj.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("is ") + DTypeName(dtype) + "; the runtime serves BF16 experts"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("compress/verify/inspect keep F32/F16 bit-exact"), std::string::npos) << msg;
    EXPECT_NE(msg.find("manifest.bin"), std::string::npos) << msg;

    auto any = ExpertStore::Open(dir, ExpertDTypes::kAny);
    ASSERT_TRUE(any.ok()) << any.status().ToString();
    EXPECT_EQ((*any)->manifest().expert_tensors.size(), 3u);
  }
}

TEST(ExpertStoreDtypeTest, ServingOpensBf16Experts) {
  testing::TempDir tmp;
  const std::string dir = CompressedOf(tmp, DType::kBF16);
  auto store = ExpertStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const ExpertTensorInfo* t = (*store)->Find(0, 0, ExpertProj::kDown);
  ASSERT_NE(t, nullptr);
  std::vector<uint16_t> got(32);
  ASSERT_TRUE((*store)->ReadTensorBf16(*t, got.data()).ok());
}

}  // namespace
}  // namespace zipmoe
