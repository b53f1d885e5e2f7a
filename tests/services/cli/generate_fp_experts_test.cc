// F32 and F16 experts served from a compressed directory (issue 19: Switch Transformers' checkpoints
// are FP32): `zipmoe generate` on the compressed directory, all-resident and under memory budgets
// {10, 30, 60 %} of the expert bytes with several policies, decompression workers and a prefetcher,
// writes --logits-out files byte-equal to the run on the uncompressed Hugging Face directory; the
// pools never map more than the budget; experts are recovered (F32/F16 are never served as fused
// BF16 planes). Failure paths: mixed expert dtypes are refused naming both tensors, and a damaged
// SM-chunk of an F32 expert fails the run naming experts.bin and the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checkpoint/manifest.h"
#include "tests/services/cli/fp_experts_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::CachedSynth;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;

// The tiny synthetic `arch` with its routed experts in `dtype` at tmp/hf, compressed (K = 2) at tmp/c.
void MakeModel(const TempDir& tmp, const std::string& arch, DType dtype) {
  const std::string bf16 = CachedSynth("--arch " + arch + " --preset tiny --seed 5");
  ASSERT_NO_FATAL_FAILURE(testing::WriteExpertDtypeVariant(bf16, tmp.Sub("hf"), dtype));
  auto r = RunCli(fmt::format("compress {} {} --shards 2", tmp.Sub("hf"), tmp.Sub("c")));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

std::string GenerateCommand(const std::string& dir) {
  return fmt::format("generate --model {} --prompt-ids 5,17,300,42,9,1000,77 --max-new-tokens 4 --ignore-eos "
                     "--threads 1 --json",
                     dir);
}

class GenerateFpExpertsTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(GenerateFpExpertsTest, LogitsAreByteEqualToTheHfDirectoryForEveryPolicyBudgetAndL) {
  const auto& [arch, dtype] = GetParam();
  TempDir tmp;
  ASSERT_NO_FATAL_FAILURE(MakeModel(tmp, arch, dtype));
  auto manifest = ReadManifest(tmp.Sub("c"));
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  uint64_t expert_bytes = 0;
  for (const ExpertTensorInfo& t : manifest->expert_tensors) {
    ASSERT_EQ(t.dtype, dtype) << t.name;
    expert_bytes += t.raw_bytes();
  }
  // The reference: the uncompressed checkpoint, every expert resident in its own dtype.
  auto hf = RunCli(GenerateCommand(tmp.Sub("hf")) + " --logits-out " + tmp.Sub("hf.bin"));
  ASSERT_EQ(hf.exit_code, 0) << hf.output;
  const std::string want = ReadAll(tmp.Sub("hf.bin"));
  ASSERT_FALSE(want.empty());
  const std::string common = GenerateCommand(tmp.Sub("c"));
  auto resident = RunCli(common + " --logits-out " + tmp.Sub("resident.bin"));
  ASSERT_EQ(resident.exit_code, 0) << resident.output;
  EXPECT_TRUE(ReadAll(tmp.Sub("resident.bin")) == want) << "all-resident compressed run differs from the HF run";

  const auto check = [&](const std::string& tag, const std::string& flags, uint64_t budget) {
    const std::string out = tmp.Sub(tag + ".bin"), stats = tmp.Sub(tag + ".json");
    auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --stats-json {} {}", common, out, budget,
                                  stats, flags));
    ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
    EXPECT_TRUE(ReadAll(out) == want) << tag << ": logits differ from the HF run";
    const auto j = nlohmann::json::parse(ReadAll(stats));
    EXPECT_GT(j["requests"]["misses"].get<uint64_t>(), 0u) << tag;
    EXPECT_GT(j["recovery"]["ops"].get<uint64_t>(), 0u) << tag << ": F32/F16 misses are recovered, not fused";
    EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), budget) << tag;
  };
  for (const char* policy : {"zipmoe", "lru", "dali"}) {
    for (int percent : {10, 30, 60}) {
      for (int workers : {1, 2}) {
        check(fmt::format("{}-{}-{}", policy, percent, workers),
              fmt::format("--policy {} --decompress-threads {}", policy, workers), expert_bytes * percent / 100);
      }
    }
  }
  check("prefetch", "--policy zipmoe --prefetch top-score", expert_bytes * 30 / 100);
  check("separate", "--policy lru --separate-recovery", expert_bytes * 30 / 100);
}

INSTANTIATE_TEST_SUITE_P(
    ArchsAndDtypes, GenerateFpExpertsTest,
    ::testing::Combine(::testing::Values("qwen2_moe", "mixtral"), ::testing::Values(DType::kF32, DType::kF16)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
      return std::get<0>(info.param) + "_" + DTypeName(std::get<1>(info.param));
    });

TEST(GenerateFpExperts, MixedExpertDtypesAreRefusedNamingBothTensors) {
  TempDir tmp;
  const std::string bf16 = CachedSynth("--arch qwen2_moe --preset tiny --seed 5");
  ASSERT_NO_FATAL_FAILURE(testing::WriteExpertDtypeVariant(bf16, tmp.Sub("hf"), DType::kF32,
                                                           [](int32_t, int32_t expert) { return expert == 0; }));
  auto c = RunCli(fmt::format("compress {} {} --shards 2", tmp.Sub("hf"), tmp.Sub("c")));
  ASSERT_EQ(c.exit_code, 0) << c.output;  // compress keeps every dtype bit-exact
  for (const std::string flags : {"", " --memory-budget 50000000"}) {
    auto run = RunCli(GenerateCommand(tmp.Sub("c")) + flags);
    EXPECT_NE(run.exit_code, 0) << flags << "\n" << run.output;
    EXPECT_NE(run.output.find("manifest.bin"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(".experts.1.gate_proj.weight' (layer"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("is F32 but 'model.layers."), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(".experts.0.gate_proj.weight' is BF16"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("--convert-dtype"), std::string::npos) << run.output;
  }
}

// Every SM-chunk of the first MoE layer loses its second half (a torn write; experts.bin keeps its
// size): the run fails with a kCorruption naming experts.bin, the chunk and the tensor.
TEST(GenerateFpExperts, DamagedSmChunkOfAnF32ExpertFailsNamingTheTensor) {
  TempDir tmp;
  ASSERT_NO_FATAL_FAILURE(MakeModel(tmp, "qwen2_moe", DType::kF32));
  auto manifest = ReadManifest(tmp.Sub("c"));
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  int32_t first_layer = INT32_MAX;
  for (const ExpertTensorInfo& t : manifest->expert_tensors) first_layer = std::min(first_layer, t.layer_id);
  const std::string path = tmp.Sub("c") + "/experts.bin";
  std::string bytes = ReadAll(path);
  for (const ExpertTensorInfo& t : manifest->expert_tensors) {
    if (t.layer_id != first_layer) continue;
    const ChunkInfo& sm = t.chunks.back();
    ASSERT_EQ(sm.stored_bytes, 3 * static_cast<uint64_t>(t.numel())) << t.name;
    std::memset(&bytes[sm.file_offset + sm.stored_bytes / 2], 0, sm.stored_bytes - sm.stored_bytes / 2);
  }
  testing::WriteAll(path, bytes);
  for (const std::string& flags : {std::string(), fmt::format(" --memory-budget {} --policy lru", bytes.size())}) {
    auto run = RunCli(GenerateCommand(tmp.Sub("c")) + flags);
    EXPECT_NE(run.exit_code, 0) << flags << "\n" << run.output;
    EXPECT_NE(run.output.find("experts.bin@"), std::string::npos) << flags << "\n" << run.output;
    EXPECT_NE(run.output.find(fmt::format("SM-chunk 2 of 'model.layers.{}.mlp.experts.", first_layer)),
              std::string::npos)
        << flags << "\n" << run.output;
    EXPECT_NE(run.output.find("xxh64"), std::string::npos) << flags << "\n" << run.output;
  }
}

}  // namespace
}  // namespace zipmoe
