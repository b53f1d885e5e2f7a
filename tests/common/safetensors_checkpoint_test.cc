// Tests for common/safetensors' checkpoint directories: single file, sharded + index, oversize tensors,
// stale files, fallback, symlinks as in the hub cache, and every directory / index corruption path.
#include "common/checkpoint/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/common/safetensors_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using ::testing::HasSubstr;
using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;
using safetensors::test::Payload;
using safetensors::test::ViewBytes;
using safetensors::test::ListDir;
using safetensors::test::ExpectError;
using safetensors::test::MakePayload;

// ---------------------------------------------------------------------------------------------
// Checkpoint directories.

class CheckpointTest : public ::testing::Test {
 protected:
  void WriteConfig() { WriteAll(tmp_.Sub("config.json"), R"({"model_type":"mixtral","num_local_experts":8})"); }

  // Opens the directory and checks every tensor of `specs` bit-exact against `payload`.
  void ExpectReadsBack(const std::vector<TensorSpec>& specs, const Payload& payload) {
    auto ckpt = Checkpoint::Open(tmp_.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_EQ((*ckpt)->config().at("model_type"), "mixtral");
    std::vector<std::string> want;
    for (const auto& s : specs) want.push_back(s.name);
    std::sort(want.begin(), want.end());
    EXPECT_EQ((*ckpt)->names(), want);
    for (const auto& s : specs) {
      auto view = (*ckpt)->Find(s.name);
      ASSERT_TRUE(view.ok()) << view.status().ToString();
      EXPECT_EQ(view->spec.shape, s.shape);
      EXPECT_EQ(view->spec.dtype, s.dtype);
      EXPECT_EQ(ViewBytes(*view), payload.bytes.at(s.name)) << s.name;
    }
  }

  Status OpenStatus() {
    auto ckpt = Checkpoint::Open(tmp_.path());
    EXPECT_FALSE(ckpt.ok());
    return ckpt.ok() ? Status::Ok() : ckpt.status();
  }

  // Writes a small valid file holding U8 tensors `names` (4 bytes each) into `file`.
  void WriteU8File(const std::string& file, const std::vector<std::string>& names) {
    std::vector<TensorSpec> specs;
    for (const auto& n : names) specs.push_back({n, DType::kU8, {4}});
    ASSERT_TRUE(WriteSafetensors(tmp_.Sub(file), specs, MakePayload(specs, 5).Filler()).ok());
  }

  TempDir tmp_;
};

std::vector<TensorSpec> ExpertSpecs() {
  std::vector<TensorSpec> specs;
  for (int e = 0; e < 4; ++e)
    for (const char* w : {"w1", "w2", "w3"})
      specs.push_back({"model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + w + ".weight",
                       DType::kBF16, {16, 8}});  // 256 bytes each
  specs.push_back({"model.norm.weight", DType::kF32, {16}});
  specs.push_back({"model.zero", DType::kF16, {0}});
  return specs;
}

TEST_F(CheckpointTest, SingleFileRoundTrip) {
  WriteConfig();
  const auto specs = ExpertSpecs();
  const Payload payload = MakePayload(specs, 100);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"config.json", "model.safetensors"}));
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, ShardedRoundTrip) {
  WriteConfig();
  const auto specs = ExpertSpecs();  // 12 x 256 + 64 + 0 bytes
  const Payload payload = MakePayload(specs, 200);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1000, payload.Filler()).ok());
  // Greedy: 3 x 256 per shard -> 4 shards of experts, the norm (64 B) and the 0-size tensor join the last.
  EXPECT_EQ(ListDir(tmp_.path()),
            (std::vector<std::string>{"config.json", "model-00001-of-00004.safetensors",
                                      "model-00002-of-00004.safetensors", "model-00003-of-00004.safetensors",
                                      "model-00004-of-00004.safetensors", "model.safetensors.index.json"}));
  const auto index = nlohmann::json::parse(ReadAll(tmp_.Sub("model.safetensors.index.json")));
  EXPECT_EQ(index.at("metadata").at("total_size"), 12 * 256 + 64);
  EXPECT_EQ(index.at("weight_map").size(), specs.size());
  EXPECT_EQ(index.at("weight_map").at(specs[0].name), "model-00001-of-00004.safetensors");
  EXPECT_EQ(index.at("weight_map").at("model.norm.weight"), "model-00004-of-00004.safetensors");
  EXPECT_THAT(ReadAll(tmp_.Sub("model.safetensors.index.json")), HasSubstr("\n  \"metadata\""));
  ExpectReadsBack(specs, payload);
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_EQ((*ckpt)->files().size(), 4u);
}

TEST_F(CheckpointTest, OversizeTensorGetsItsOwnShard) {
  WriteConfig();
  const std::vector<TensorSpec> specs = {{"small.a", DType::kU8, {10}},
                                         {"big", DType::kU8, {100}},
                                         {"small.b", DType::kU8, {10}}};
  const Payload payload = MakePayload(specs, 300);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 50, payload.Filler()).ok());
  const auto index = nlohmann::json::parse(ReadAll(tmp_.Sub("model.safetensors.index.json")));
  EXPECT_EQ(index.at("weight_map").at("small.a"), "model-00001-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("big"), "model-00002-of-00003.safetensors");
  EXPECT_EQ(index.at("weight_map").at("small.b"), "model-00003-of-00003.safetensors");
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, RewriteRemovesStaleWeightFiles) {
  WriteConfig();
  const auto specs = ExpertSpecs();
  const Payload payload = MakePayload(specs, 400);
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1000, payload.Filler()).ok());
  EXPECT_FALSE(FileExists(tmp_.Sub("model.safetensors")));
  ExpectReadsBack(specs, payload);
  // Sharded -> fewer shards -> single file: old index and shards go.
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 2000, payload.Filler()).ok());
  EXPECT_FALSE(FileExists(tmp_.Sub("model-00004-of-00004.safetensors")));
  ASSERT_TRUE(WriteCheckpointWeights(tmp_.path(), specs, 1 << 20, payload.Filler()).ok());
  EXPECT_EQ(ListDir(tmp_.path()), (std::vector<std::string>{"config.json", "model.safetensors"}));
  ExpectReadsBack(specs, payload);
}

TEST_F(CheckpointTest, WriteRejectsDuplicateAcrossShards) {
  const std::vector<TensorSpec> specs = {{"x", DType::kU8, {100}}, {"x", DType::kU8, {100}}};
  const Payload payload = MakePayload({specs[0]}, 1);
  ExpectError(WriteCheckpointWeights(tmp_.path(), specs, 100, payload.Filler()), StatusCode::kInvalidArgument,
              {"duplicate", "'x'"});
  EXPECT_TRUE(ListDir(tmp_.path()).empty());
}

TEST_F(CheckpointTest, FallsBackToAnySafetensorsFile) {
  WriteConfig();
  WriteU8File("consolidated.safetensors", {"tok_embeddings.weight", "norm.weight"});
  WriteU8File("extra.safetensors", {"output.weight"});
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"norm.weight", "output.weight", "tok_embeddings.weight"}));
  ASSERT_EQ((*ckpt)->files().size(), 2u);
  EXPECT_EQ((*ckpt)->files()[0]->path(), tmp_.Sub("consolidated.safetensors"));
}

TEST_F(CheckpointTest, FollowsSymlinksLikeTheHubCache) {
  // huggingface_hub snapshots are symlinks into ../blobs.
  WriteConfig();
  const std::string blobs = tmp_.Sub("blobs");
  ASSERT_TRUE(CreateDirectories(blobs).ok());
  const std::string snapshot = tmp_.Sub("snapshot");
  ASSERT_TRUE(CreateDirectories(snapshot).ok());
  WriteU8File("blobs/abc123", {"w"});
  ASSERT_EQ(::symlink("../blobs/abc123", (snapshot + "/model.safetensors").c_str()), 0);
  ASSERT_EQ(::symlink("../config.json", (snapshot + "/config.json").c_str()), 0);
  auto ckpt = Checkpoint::Open(snapshot);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"w"}));
}

TEST_F(CheckpointTest, MissingConfigIsNotFound) {
  WriteU8File("model.safetensors", {"w"});
  ExpectError(OpenStatus(), StatusCode::kNotFound, {"config.json"});
}

TEST_F(CheckpointTest, BadConfigIsCorruption) {
  WriteU8File("model.safetensors", {"w"});
  WriteAll(tmp_.Sub("config.json"), "{\"model_type\": ");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"config.json", "invalid JSON"});
  WriteAll(tmp_.Sub("config.json"), "[1]");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"config.json", "not a JSON object"});
}

TEST_F(CheckpointTest, NoWeightsIsNotFound) {
  WriteConfig();
  ExpectError(OpenStatus(), StatusCode::kNotFound, {"no safetensors weights in", tmp_.path()});
}

TEST_F(CheckpointTest, IndexNamingMissingShardIsNotFound) {
  WriteConfig();
  WriteU8File("model-00001-of-00002.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
           R"("b":"model-00002-of-00002.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kNotFound,
              {"model-00002-of-00002.safetensors", "model.safetensors.index.json"});
}

TEST_F(CheckpointTest, IndexTensorAbsentFromShardIsCorruption) {
  WriteConfig();
  WriteU8File("model-00001-of-00001.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00001.safetensors","ghost":"model-00001-of-00001.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption,
              {"'ghost'", "model-00001-of-00001.safetensors", "absent"});
}

TEST_F(CheckpointTest, IndexTensorInWrongShardIsCorruption) {
  WriteConfig();
  WriteU8File("s1.safetensors", {"a"});
  WriteU8File("s2.safetensors", {"b"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"s2.safetensors","b":"s2.safetensors","c":"s1.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"'a'", "s1.safetensors", "s2.safetensors"});
}

TEST_F(CheckpointTest, SameTensorInTwoShardsIsCorruption) {
  WriteConfig();
  WriteU8File("model-00001-of-00002.safetensors", {"a", "shared"});
  WriteU8File("model-00002-of-00002.safetensors", {"b", "shared"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors",)"
           R"("shared":"model-00001-of-00002.safetensors"}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption,
              {"'shared'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, UnlistedShardTensorsAreIncluded) {
  WriteConfig();
  WriteU8File("model-00001-of-00001.safetensors", {"a", "unlisted"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"),
           R"({"weight_map":{"a":"model-00001-of-00001.safetensors"}})");
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->names(), (std::vector<std::string>{"a", "unlisted"}));
}

TEST_F(CheckpointTest, BadIndexIsCorruption) {
  WriteConfig();
  WriteU8File("model.safetensors", {"a"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"), R"({"weight_map": [)");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors.index.json", "invalid JSON"});
  WriteAll(tmp_.Sub("model.safetensors.index.json"), R"({"metadata": {}})");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors.index.json", "weight_map"});
}

TEST_F(CheckpointTest, CorruptShardErrorNamesShard) {
  WriteConfig();
  WriteAll(tmp_.Sub("model.safetensors"), "abc");
  ExpectError(OpenStatus(), StatusCode::kCorruption, {"model.safetensors"});
}

TEST_F(CheckpointTest, FindMissingTensorIsNotFound) {
  WriteConfig();
  WriteU8File("model.safetensors", {"a"});
  auto ckpt = Checkpoint::Open(tmp_.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  auto view = (*ckpt)->Find("model.layers.9.mlp.gate.weight");
  ASSERT_FALSE(view.ok());
  ExpectError(view.status(), StatusCode::kNotFound, {"'model.layers.9.mlp.gate.weight'", tmp_.path()});
}

}  // namespace
}  // namespace zipmoe
