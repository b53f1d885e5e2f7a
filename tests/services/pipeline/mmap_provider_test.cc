// Tests for services/pipeline/mmap_provider: the llama.cpp-like `--policy mmap` baseline serves the
// checkpoint's own bytes (logits byte-equal to the all-resident run, tiny qwen2_moe and deepseek_v2,
// also for a `--batch` of rotated prompts),
// counts what it served, and refuses a compressed directory with a message naming it.
#include "services/pipeline/mmap_provider.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace zipmoe::runtime {
namespace {

using ::testing::HasSubstr;
using zipmoe::testing::CachedCompress;
using zipmoe::testing::CachedSynth;
using zipmoe::testing::ReadAll;
using zipmoe::testing::RunCli;
using zipmoe::testing::TempDir;

class MmapGenerateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MmapGenerateTest, LogitsAreByteEqualToAllResident) {
  const std::string hf = CachedSynth("--arch " + GetParam() + " --preset tiny --seed 5");
  const std::string compressed = CachedCompress(hf, "--shards 4");
  TempDir tmp;
  const std::string common = "--prompt-ids 5,17,300,42,9,1000,77 --max-new-tokens 4 --ignore-eos --threads 1 --json";
  const std::string ref = tmp.Sub("resident.bin");
  auto r = RunCli(fmt::format("generate --model {} {} --logits-out {}", compressed, common, ref));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = ReadAll(ref);
  ASSERT_FALSE(want.empty());

  const std::string out = tmp.Sub("mmap.bin");
  const std::string stats = tmp.Sub("mmap.json");
  auto run = RunCli(fmt::format("generate --model {} {} --policy mmap --memory-budget 50% --logits-out {} "
                                "--stats-json {}",
                                hf, common, out, stats));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--memory-budget ignored"));
  EXPECT_TRUE(ReadAll(out) == want) << "mmap logits differ from the all-resident run";
  const auto j = nlohmann::json::parse(ReadAll(stats));
  EXPECT_EQ(j["policy"], "mmap");
  EXPECT_GT(j["mmap"]["experts_served"].get<uint64_t>(), 0u);
  EXPECT_GT(j["mmap"]["expert_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(j["tpot_s"].get<double>(), 0.0);
}

TEST(MmapGenerateBatchTest, BatchOfRotatedPromptsEqualsAllResident) {
  const std::string hf = CachedSynth("--arch qwen2_moe --preset tiny --seed 5");
  const std::string compressed = CachedCompress(hf, "--shards 4");
  TempDir tmp;
  const std::string common = "--prompt-ids 5,17,300,42,9 --max-new-tokens 3 --ignore-eos --threads 1 --json --batch 3";
  const std::string ref = tmp.Sub("resident.bin");
  auto r = RunCli(fmt::format("generate --model {} {} --logits-out {}", compressed, common, ref));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string want = ReadAll(ref);
  // --logits-out holds every sequence's rows: three times the rows of one sequence.
  auto one = RunCli(fmt::format("generate --model {} {} --logits-out {}", compressed,
                                "--prompt-ids 5,17,300,42,9 --max-new-tokens 3 --ignore-eos --threads 1 --json",
                                tmp.Sub("one.bin")));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(want.size(), 3 * ReadAll(tmp.Sub("one.bin")).size());
  const std::string out = tmp.Sub("mmap.bin");
  auto run = RunCli(fmt::format("generate --model {} {} --policy mmap --logits-out {}", hf, common, out));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(ReadAll(out) == want) << "batched mmap logits differ from the batched all-resident run";
  const auto j = nlohmann::json::parse(run.output.substr(run.output.rfind("{\"")));
  EXPECT_EQ(j["batch"].get<int>(), 3);
}

INSTANTIATE_TEST_SUITE_P(Archs, MmapGenerateTest, ::testing::Values("qwen2_moe", "deepseek_v2"));

TEST(MmapExpertProviderTest, CompressedDirectoryIsRefusedWithItsName) {
  const std::string hf = CachedSynth("--arch qwen2_moe --preset tiny --seed 5");
  const std::string compressed = CachedCompress(hf, "--shards 4");
  auto p = MmapExpertProvider::Create(compressed);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr(compressed));
  EXPECT_THAT(p.status().message(), HasSubstr("uncompressed"));
  auto run = RunCli(fmt::format("generate --model {} --prompt-ids 1,2 --max-new-tokens 1 --policy mmap", compressed));
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("Hugging Face directory"));
}

TEST(MmapExpertProviderTest, ServesTheCheckpointBytesAndCountsThem) {
  const std::string hf = CachedSynth("--arch qwen2_moe --preset tiny --seed 5");
  auto p = MmapExpertProvider::Create(hf);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto ckpt = Checkpoint::Open(hf);
  ASSERT_TRUE(ckpt.ok());
  LayerRouting routing;
  routing.layer_id = 1;
  routing.expert_ids = {0, 3};
  routing.tokens_per_expert = {1, 2};
  ASSERT_TRUE((*p)->BeginLayer(routing).ok());
  uint64_t bytes = 0;
  for (int32_t e : routing.expert_ids) {
    auto lease = (*p)->NextReady();
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    const ExpertWeightsView& w = (*lease)->weights();
    EXPECT_EQ(w.layer_id, 1);
    EXPECT_EQ(w.expert_id, e);
    auto gate = (*ckpt)->Find(fmt::format("model.layers.1.mlp.experts.{}.gate_proj.weight", e));
    ASSERT_TRUE(gate.ok());
    ASSERT_EQ(gate->spec.size_bytes(), static_cast<uint64_t>(w.intermediate * w.hidden * 2));
    EXPECT_EQ(std::memcmp(w.gate, gate->data, gate->spec.size_bytes()), 0);
    bytes += 3 * gate->spec.size_bytes();
  }
  EXPECT_FALSE((*p)->NextReady().ok());
  ASSERT_TRUE((*p)->EndLayer(1).ok());
  EXPECT_EQ((*p)->stats().experts_served, 2u);
  EXPECT_EQ((*p)->stats().expert_bytes, bytes);
}

}  // namespace
}  // namespace zipmoe::runtime
