#include "common/resident_expert_provider.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "common/file_util.h"
#include "services/convert/compress.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

// 2 layers x 3 experts, gate/up [6, 4], down [4, 6]; element i of tensor t holds bf16 pattern t*1000+i.
void WriteExperts(const std::string& dir, bool drop_one_down = false) {
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"), R"({"model_type": "qwen2_moe"})").ok());
  std::vector<TensorSpec> specs;
  for (int l = 0; l < 2; ++l)
    for (int e = 0; e < 3; ++e) {
      const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
      specs.push_back({p + "gate_proj.weight", DType::kBF16, {6, 4}});
      specs.push_back({p + "up_proj.weight", DType::kBF16, {6, 4}});
      if (!(drop_one_down && l == 1 && e == 2)) specs.push_back({p + "down_proj.weight", DType::kBF16, {4, 6}});
    }
  specs.push_back({"model.norm.weight", DType::kBF16, {4}});
  auto st = WriteCheckpointWeights(dir, specs, 1 << 20, [&](const TensorSpec& s, uint8_t* out) {
    const size_t t = static_cast<size_t>(std::find_if(specs.begin(), specs.end(),
                                                      [&](const TensorSpec& x) { return x.name == s.name; }) -
                                         specs.begin());
    for (int64_t i = 0; i < s.numel(); ++i) {
      const uint16_t v = static_cast<uint16_t>(t * 1000 + static_cast<size_t>(i));
      std::memcpy(out + 2 * i, &v, 2);
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

void ExpectSameExperts(ExpertProvider& a, ExpertProvider& b) {
  for (int l = 0; l < 2; ++l) {
    LayerRouting r{l, {0, 2}, {5, 1}};
    ASSERT_TRUE(a.BeginLayer(r).ok());
    ASSERT_TRUE(b.BeginLayer(r).ok());
    for (int k = 0; k < 2; ++k) {
      auto la = a.NextReady();
      auto lb = b.NextReady();
      ASSERT_TRUE(la.ok() && lb.ok());
      const ExpertWeightsView& wa = (*la)->weights();
      const ExpertWeightsView& wb = (*lb)->weights();
      EXPECT_EQ(wa.layer_id, l);
      EXPECT_EQ(wa.expert_id, r.expert_ids[static_cast<size_t>(k)]);
      EXPECT_EQ(wa.expert_id, wb.expert_id);
      EXPECT_EQ(wa.intermediate, 6);
      EXPECT_EQ(wa.hidden, 4);
      EXPECT_EQ(std::memcmp(wa.gate, wb.gate, 48), 0);
      EXPECT_EQ(std::memcmp(wa.up, wb.up, 48), 0);
      EXPECT_EQ(std::memcmp(wa.down, wb.down, 48), 0);
    }
    EXPECT_FALSE(a.NextReady().ok()) << "only two experts were announced";
    ASSERT_TRUE(a.EndLayer(l).ok());
    ASSERT_TRUE(b.EndLayer(l).ok());
  }
}

TEST(ResidentExpertProviderTest, CheckpointAndStoreServeIdenticalWeights) {
  testing::TempDir tmp;
  WriteExperts(tmp.Sub("m"));
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto from_ckpt = ResidentExpertProvider::FromCheckpoint(**ckpt);
  ASSERT_TRUE(from_ckpt.ok()) << from_ckpt.status().ToString();
  EXPECT_EQ((*from_ckpt)->expert_count(), 6u);

  convert::CompressOptions o;
  o.model_dir = tmp.Sub("m");
  o.out_dir = tmp.Sub("c");
  o.n_shards = 3;
  ASSERT_TRUE(convert::CompressModel(o).ok());
  auto store = ExpertStore::Open(tmp.Sub("c"));
  ASSERT_TRUE(store.ok());
  auto from_store = ResidentExpertProvider::FromStore(**store, 2);
  ASSERT_TRUE(from_store.ok()) << from_store.status().ToString();
  ExpectSameExperts(**from_ckpt, **from_store);

  // Known answer: layer 0 expert 0 gate is the first tensor written: patterns 0, 1, 2, ...
  LayerRouting r{0, {0}, {1}};
  ASSERT_TRUE((*from_store)->BeginLayer(r).ok());
  auto lease = (*from_store)->NextReady();
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(static_cast<const uint16_t*>((*lease)->weights().gate)[5], 5);
  EXPECT_EQ(static_cast<const uint16_t*>((*lease)->weights().down)[0], 2000);
}

TEST(ResidentExpertProviderTest, ProtocolErrors) {
  testing::TempDir tmp;
  WriteExperts(tmp.Sub("m"));
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(ckpt.ok());
  auto p = ResidentExpertProvider::FromCheckpoint(**ckpt);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->NextReady().status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*p)->BeginLayer({0, {7}, {1}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*p)->BeginLayer({0, {1}, {}}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*p)->BeginLayer({1, {1}, {3}}).ok());
  EXPECT_EQ((*p)->BeginLayer({0, {1}, {3}}).code(), StatusCode::kInvalidArgument) << "layer 1 still active";
  EXPECT_EQ((*p)->EndLayer(1).code(), StatusCode::kInvalidArgument) << "expert 1 not taken yet";
  ASSERT_TRUE((*p)->NextReady().ok());
  EXPECT_TRUE((*p)->EndLayer(1).ok());
}

TEST(ResidentExpertProviderTest, MissingProjectionIsNamed) {
  testing::TempDir tmp;
  WriteExperts(tmp.Sub("m"), /*drop_one_down=*/true);
  auto ckpt = Checkpoint::Open(tmp.Sub("m"));
  ASSERT_TRUE(ckpt.ok());
  auto p = ResidentExpertProvider::FromCheckpoint(**ckpt);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("layer 1 expert 2 has no down_proj"), std::string::npos) << p.status().ToString();
}

}  // namespace
}  // namespace zipmoe
