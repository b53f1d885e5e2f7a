// Tests for common/checkpoint/fused_experts: gpt-oss's fused MXFP4 experts served per expert. The gate is
// the even rows of gate_up, the up projection the odd rows, each row with its own scales; putting the
// unfused tensors back together gives the checkpoint's bytes; malformed checkpoints are refused by name.
#include "common/checkpoint/fused_experts.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/file_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;

constexpr int64_t kE = 3, kH = 64, kI = 32;  // experts, hidden, intermediate (multiples of 32)

// A gpt_oss directory with two layers of fused experts of random bytes (`drop`: a tensor left out;
// `bad_dtype`: a tensor written as I8 instead of U8).
std::map<std::string, std::vector<uint8_t>> WriteFused(const std::string& dir, const std::string& drop = "",
                                                       const std::string& bad_dtype = "") {
  std::mt19937 rng(7);
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::vector<TensorSpec> specs;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    const std::vector<std::pair<std::string, std::vector<int64_t>>> parts = {
        {p + "gate_up_proj_blocks", {kE, 2 * kI, kH / 32, 16}}, {p + "gate_up_proj_scales", {kE, 2 * kI, kH / 32}},
        {p + "down_proj_blocks", {kE, kH, kI / 32, 16}},       {p + "down_proj_scales", {kE, kH, kI / 32}}};
    for (const auto& [name, shape] : parts) {
      if (name == drop) continue;
      TensorSpec s;
      s.name = name;
      s.dtype = name == bad_dtype ? DType::kI8 : DType::kU8;
      s.shape = shape;
      std::vector<uint8_t> b(static_cast<size_t>(s.numel()));
      for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
      bytes[name] = b;
      specs.push_back(s);
    }
  }
  EXPECT_TRUE(WriteSafetensors(JoinPath(dir, "model.safetensors"), specs, [&](const TensorSpec& s, uint8_t* out) {
                const std::vector<uint8_t>& b = bytes.at(s.name);
                std::memcpy(out, b.data(), b.size());
                return Status::Ok();
              }).ok());
  const json config{{"model_type", "gpt_oss"}, {"num_hidden_layers", 2},
                    {"quantization_config", {{"quant_method", "mxfp4"}}}};
  testing::WriteAll(JoinPath(dir, "config.json"), config.dump());
  return bytes;
}

TEST(FusedExperts, GateIsTheEvenRowsUpTheOddAndTheyFuseBack) {
  testing::TempDir tmp;
  const auto bytes = WriteFused(tmp.path());
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_TRUE(HasFusedMxfp4Experts((*ckpt)->config()));
  EXPECT_TRUE(IsFusedExpertTensor("model.layers.12.mlp.experts.down_proj_scales"));
  EXPECT_FALSE(IsFusedExpertTensor("model.layers.12.mlp.experts.down_proj_bias"));
  EXPECT_FALSE(IsFusedExpertTensor("model.layers.x.mlp.experts.down_proj_blocks"));
  auto refs = ListFusedExperts(**ckpt);
  ASSERT_TRUE(refs.ok()) << refs.status().ToString();
  ASSERT_EQ(refs->size(), static_cast<size_t>(2 * kE * 3));
  EXPECT_EQ((*refs)[0].name, "model.layers.0.mlp.experts.0.gate_proj");
  EXPECT_EQ((*refs)[0].shape, (std::vector<int64_t>{kI, kH}));
  EXPECT_EQ((*refs)[2].shape, (std::vector<int64_t>{kH, kI}));
  // Rebuild the fused tensors from the unfused ones: equal to the file, byte for byte.
  std::map<std::string, std::vector<uint8_t>> rebuilt;
  for (const auto& [name, b] : bytes) rebuilt[name].assign(b.size(), 0xAA);
  for (const FusedExpertRef& r : *refs) {
    const int64_t rows = r.shape[0], cols = r.shape[1];
    std::vector<uint8_t> raw(DTypeBytes(DType::kMXFP4, static_cast<uint64_t>(rows * cols)));
    ASSERT_TRUE(ReadFusedExpert(**ckpt, r, raw.data()).ok());
    const bool down = r.id.proj == ExpertProj::kDown;
    const std::string p = "model.layers." + std::to_string(r.id.layer_id) + ".mlp.experts." +
                          (down ? "down_proj" : "gate_up_proj");
    const int64_t fused_rows = down ? rows : 2 * rows;
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t dst = down ? row : 2 * row + (r.id.proj == ExpertProj::kUp ? 1 : 0);
      std::memcpy(rebuilt[p + "_blocks"].data() + (r.id.expert_id * fused_rows + dst) * cols / 2,
                  raw.data() + row * cols / 2, static_cast<size_t>(cols / 2));
      std::memcpy(rebuilt[p + "_scales"].data() + (r.id.expert_id * fused_rows + dst) * cols / 32,
                  raw.data() + rows * cols / 2 + row * cols / 32, static_cast<size_t>(cols / 32));
    }
  }
  EXPECT_EQ(rebuilt, bytes);
  // A ref that does not fit the tensors.
  FusedExpertRef wrong = (*refs)[0];
  wrong.id.expert_id = kE;
  std::vector<uint8_t> sink(DTypeBytes(DType::kMXFP4, kI * kH));
  EXPECT_FALSE(ReadFusedExpert(**ckpt, wrong, sink.data()).ok());
}

TEST(FusedExperts, MalformedCheckpointsAreRefusedByName) {
  {
    testing::TempDir tmp;
    WriteFused(tmp.path(), "model.layers.1.mlp.experts.down_proj_scales");
    auto ckpt = Checkpoint::Open(tmp.path());
    ASSERT_TRUE(ckpt.ok());
    auto refs = ListFusedExperts(**ckpt);
    ASSERT_FALSE(refs.ok());
    EXPECT_NE(refs.status().message().find("model.layers.1.mlp.experts.down_proj_scales"), std::string::npos)
        << refs.status().message();
  }
  {
    testing::TempDir tmp;
    WriteFused(tmp.path(), "", "model.layers.0.mlp.experts.gate_up_proj_scales");
    auto ckpt = Checkpoint::Open(tmp.path());
    ASSERT_TRUE(ckpt.ok());
    auto refs = ListFusedExperts(**ckpt);
    ASSERT_FALSE(refs.ok());
    EXPECT_NE(refs.status().message().find("expected U8"), std::string::npos) << refs.status().message();
  }
  // gpt_oss without quant_method mxfp4 reads the dense runtime tensors, which this checkpoint lacks.
  testing::TempDir tmp;
  WriteFused(tmp.path());
  testing::WriteAll(JoinPath(tmp.path(), "config.json"), R"({"model_type": "gpt_oss", "num_hidden_layers": 2})");
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  auto refs = ListFusedExperts(**ckpt);
  ASSERT_FALSE(refs.ok());
  EXPECT_NE(refs.status().message().find("model.layers.0.mlp.experts.gate_up_proj'"), std::string::npos)
      << refs.status().message();
  // Another model_type: nothing is unfused.
  testing::WriteAll(JoinPath(tmp.path(), "config.json"), R"({"model_type": "mixtral", "num_hidden_layers": 2})");
  auto other = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(other.ok());
  refs = ListFusedExperts(**other);
  ASSERT_TRUE(refs.ok());
  EXPECT_TRUE(refs->empty());
}

// A dequantized gpt-oss (no quantization_config): transformers' runtime tensors gate_up_proj [E, H, 2I] and
// down_proj [E, I, H] (x @ W), unfused to [out, in]: gate[i][h] = gate_up[h][2i], up[i][h] = gate_up[h][2i+1],
// down[h][i] = down_proj[i][h].
TEST(FusedExperts, DenseRuntimeTensorsAreTransposedPerExpert) {
  testing::TempDir tmp;
  std::vector<TensorSpec> specs(2);
  specs[0].name = "model.layers.0.mlp.experts.gate_up_proj";
  specs[0].dtype = DType::kBF16;
  specs[0].shape = {kE, kH, 2 * kI};
  specs[1].name = "model.layers.0.mlp.experts.down_proj";
  specs[1].dtype = DType::kBF16;
  specs[1].shape = {kE, kI, kH};
  const auto value = [](const TensorSpec& s, int64_t flat) { return static_cast<uint16_t>(flat * 7 + s.shape[2]); };
  ASSERT_TRUE(WriteSafetensors(tmp.Sub("model.safetensors"), specs, [&](const TensorSpec& s, uint8_t* out) {
                for (int64_t i = 0; i < s.numel(); ++i) {
                  const uint16_t v = value(s, i);
                  std::memcpy(out + 2 * i, &v, 2);
                }
                return Status::Ok();
              }).ok());
  testing::WriteAll(tmp.Sub("config.json"), R"({"model_type": "gpt_oss", "num_hidden_layers": 1})");
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  EXPECT_TRUE(HasFusedExperts((*ckpt)->config()));
  EXPECT_FALSE(HasFusedMxfp4Experts((*ckpt)->config()));
  auto refs = ListFusedExperts(**ckpt);
  ASSERT_TRUE(refs.ok()) << refs.status().ToString();
  ASSERT_EQ(refs->size(), static_cast<size_t>(kE * 3));
  for (const FusedExpertRef& r : *refs) {
    EXPECT_EQ(r.dtype, DType::kBF16);
    const bool down = r.id.proj == ExpertProj::kDown;
    ASSERT_EQ(r.shape, down ? (std::vector<int64_t>{kH, kI}) : (std::vector<int64_t>{kI, kH}));
    std::vector<uint16_t> got(static_cast<size_t>(kI * kH));
    ASSERT_TRUE(ReadFusedExpert(**ckpt, r, reinterpret_cast<uint8_t*>(got.data())).ok());
    const int64_t e = r.id.expert_id;
    for (int64_t row = 0; row < r.shape[0]; ++row) {
      for (int64_t col = 0; col < r.shape[1]; ++col) {
        const int64_t src = down ? (e * kI + col) * kH + row
                                 : (e * kH + col) * 2 * kI + 2 * row + (r.id.proj == ExpertProj::kUp ? 1 : 0);
        ASSERT_EQ(got[static_cast<size_t>(row * r.shape[1] + col)], value(specs[down ? 1 : 0], src))
            << r.name << " [" << row << ", " << col << "]";
      }
    }
  }
}

// Granite-MoE (GraniteMoeParallelExperts): input_linear [E, 2I, H] whose first I rows are the gate
// (chunk(2) of the output, the first half activated), output_linear [E, H, I]; unfused as contiguous blocks.
TEST(FusedExperts, GraniteInputLinearIsGateRowsThenUpRows) {
  for (const char* type : {"granitemoe", "granitemoeshared"}) {
    testing::TempDir tmp;
    std::vector<TensorSpec> specs(2);
    specs[0].name = "model.layers.1.block_sparse_moe.input_linear.weight";
    specs[0].dtype = DType::kBF16;
    specs[0].shape = {kE, 2 * kI, kH};
    specs[1].name = "model.layers.1.block_sparse_moe.output_linear.weight";
    specs[1].dtype = DType::kBF16;
    specs[1].shape = {kE, kH, kI};
    const auto value = [](const TensorSpec& s, int64_t flat) { return static_cast<uint16_t>(flat * 5 + s.shape[1]); };
    ASSERT_TRUE(WriteSafetensors(tmp.Sub("model.safetensors"), specs, [&](const TensorSpec& s, uint8_t* out) {
                  for (int64_t i = 0; i < s.numel(); ++i) {
                    const uint16_t v = value(s, i);
                    std::memcpy(out + 2 * i, &v, 2);
                  }
                  return Status::Ok();
                }).ok());
    testing::WriteAll(tmp.Sub("config.json"), json{{"model_type", type}, {"num_hidden_layers", 2}}.dump());
    auto ckpt = Checkpoint::Open(tmp.path());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    EXPECT_TRUE(HasFusedExperts((*ckpt)->config())) << type;
    EXPECT_FALSE(HasFusedMxfp4Experts((*ckpt)->config())) << type;
    EXPECT_TRUE(IsFusedExpertTensor(specs[0].name));
    EXPECT_TRUE(IsFusedExpertTensor(specs[1].name));
    EXPECT_FALSE(IsFusedExpertTensor("model.layers.1.block_sparse_moe.router.layer.weight"));
    EXPECT_FALSE(IsFusedExpertTensor("model.layers.1.shared_mlp.input_linear.weight"));
    EXPECT_FALSE(IsFusedExpertTensor("model.layers.1.block_sparse_moe.experts.0.w1.weight"));  // mixtral
    auto refs = ListFusedExperts(**ckpt);
    ASSERT_TRUE(refs.ok()) << refs.status().ToString();
    ASSERT_EQ(refs->size(), static_cast<size_t>(kE * 3));
    for (const FusedExpertRef& r : *refs) {
      EXPECT_EQ(r.id.layer_id, 1);
      EXPECT_EQ(r.name, UnfusedExpertName(1, r.id.expert_id, r.id.proj));
      const bool down = r.id.proj == ExpertProj::kDown;
      ASSERT_EQ(r.shape, down ? (std::vector<int64_t>{kH, kI}) : (std::vector<int64_t>{kI, kH}));
      std::vector<uint16_t> got(static_cast<size_t>(kI * kH));
      ASSERT_TRUE(ReadFusedExpert(**ckpt, r, reinterpret_cast<uint8_t*>(got.data())).ok());
      const int64_t e = r.id.expert_id, first_row = r.id.proj == ExpertProj::kUp ? kI : 0;
      for (int64_t row = 0; row < r.shape[0]; ++row) {
        for (int64_t col = 0; col < r.shape[1]; ++col) {
          const int64_t src = down ? (e * kH + row) * kI + col : (e * 2 * kI + first_row + row) * kH + col;
          ASSERT_EQ(got[static_cast<size_t>(row * r.shape[1] + col)], value(specs[down ? 1 : 0], src))
              << type << " " << r.name << " [" << row << ", " << col << "]";
        }
      }
    }
  }
  // output_linear not [E, H, I] for input_linear's E and I: refused naming both tensors.
  testing::TempDir tmp;
  std::vector<TensorSpec> specs(2);
  specs[0].name = "model.layers.0.block_sparse_moe.input_linear.weight";
  specs[0].dtype = DType::kBF16;
  specs[0].shape = {kE, 2 * kI, kH};
  specs[1].name = "model.layers.0.block_sparse_moe.output_linear.weight";
  specs[1].dtype = DType::kBF16;
  specs[1].shape = {kE, kI, kH};
  ASSERT_TRUE(WriteSafetensors(tmp.Sub("model.safetensors"), specs, [](const TensorSpec& s, uint8_t* out) {
                std::memset(out, 0, static_cast<size_t>(s.numel() * 2));
                return Status::Ok();
              }).ok());
  testing::WriteAll(tmp.Sub("config.json"), R"({"model_type": "granitemoe", "num_hidden_layers": 1})");
  auto ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok());
  auto refs = ListFusedExperts(**ckpt);
  ASSERT_FALSE(refs.ok());
  EXPECT_NE(refs.status().message().find("output_linear"), std::string::npos) << refs.status().ToString();
  EXPECT_NE(refs.status().message().find("input_linear"), std::string::npos) << refs.status().ToString();
}

}  // namespace
}  // namespace zipmoe
