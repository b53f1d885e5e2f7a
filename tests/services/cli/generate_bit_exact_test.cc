// End to end through the CLI: `zipmoe generate --memory-budget` must write --logits-out files that
// are byte-equal to the all-resident run, for every policy × budget {10, 25, 50 % of the expert
// bytes} × decompression workers L ∈ {1, 2, 4}, on tiny qwen2_moe, deepseek_v2, deepseek_v3 and glm4_moe,
// the last two also as FP8 checkpoints.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checkpoint/manifest.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::CachedCompress;
using testing::CachedSynth;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;

// BF16 bytes of every routed expert of the compressed directory `dir` (0 and a test failure if its
// manifest does not read).
uint64_t ExpertBytes(const std::string& dir) {
  auto manifest = ReadManifest(dir);
  EXPECT_TRUE(manifest.ok()) << manifest.status().ToString();
  uint64_t bytes = 0;
  if (manifest.ok())
    for (const ExpertTensorInfo& t : manifest->expert_tensors) bytes += t.raw_bytes();
  return bytes;
}

// `generate` of the tests' prompt on `dir`: `new_tokens` greedy tokens, one thread, --json. Every
// run of a test extends this command, so all of them feed the model the same positions.
std::string GenerateCommand(const std::string& dir, int new_tokens) {
  return fmt::format("generate --model {} --prompt-ids 5,17,300,42,9,1000,77 --max-new-tokens {} --ignore-eos "
                     "--threads 1 --json",
                     dir, new_tokens);
}

// The all-resident run of `common` (no --memory-budget): its float32 logits, written under `tmp`.
void ResidentLogits(const std::string& common, const TempDir& tmp, std::string* logits) {
  auto r = RunCli(common + " --logits-out " + tmp.Sub("resident.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  *logits = ReadAll(tmp.Sub("resident.bin"));
  ASSERT_FALSE(logits->empty());
}

class GenerateBitExactTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateBitExactTest, LogitsAreByteEqualToAllResidentForEveryPolicyBudgetAndL) {
  const std::string dir = CachedCompress(CachedSynth("--arch " + GetParam() + " --preset tiny --seed 5"), "--shards 4");
  const uint64_t expert_bytes = ExpertBytes(dir);
  ASSERT_GT(expert_bytes, 0u);
  TempDir tmp;
  const std::string common = GenerateCommand(dir, 4);
  std::string want;
  ASSERT_NO_FATAL_FAILURE(ResidentLogits(common, tmp, &want));
  for (const char* policy : {"zipmoe", "lru", "fifo", "lfu", "full-load"}) {
    for (int percent : {10, 25, 50}) {
      for (int workers : {1, 2, 4}) {
        const std::string tag = fmt::format("{}-{}-{}", policy, percent, workers);
        const std::string out = tmp.Sub(tag + ".bin");
        const std::string stats = tmp.Sub(tag + ".json");
        auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --policy {} --decompress-threads {} "
                                      "--stats-json {}",
                                      common, out, expert_bytes * percent / 100, policy, workers, stats));
        ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
        EXPECT_TRUE(ReadAll(out) == want) << tag << ": logits differ from the all-resident run";
        const auto j = nlohmann::json::parse(ReadAll(stats));
        EXPECT_GT(j["requests"]["misses"].get<uint64_t>(), 0u) << tag;
        EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), expert_bytes * percent / 100) << tag;
        EXPECT_EQ(j["decompress_threads"].get<int>(), workers) << tag;
      }
    }
  }
}

// The two FP8 variants (synth --dtype fp8: F8_E4M3 experts split into a 4-bit exponent plane and a
// packed sign|mantissa plane, block scales in dense.safetensors) and gpt_oss (MXFP4 experts: 2-bit
// exponent fields, the scales in the SM-chunk) and the hybrid models (Gated DeltaNet state beside the
// KV cache; qwen3_5_moe's fused experts) and granitemoeshared (fused experts under other names, a fused
// shared MLP, Granite's multipliers) and lfm2_moe (short-convolution state, per-expert feed_forward names) and afmoe
// (sliding / NoPE layers, sandwich norms, shared experts) run the
// same matrix.
INSTANTIATE_TEST_SUITE_P(Archs, GenerateBitExactTest,
                         ::testing::Values("qwen2_moe", "deepseek_v2", "deepseek_v3", "glm4_moe",
                                           "deepseek_v3 --dtype fp8", "glm4_moe --dtype fp8", "gpt_oss", "qwen3_next",
                                           "qwen3_5_moe", "granitemoeshared", "granitemoehybrid", "lfm2_moe", "afmoe"));

// Prefetching changes what is read ahead, never what is computed: both predictors, two budgets, a
// ranked and a global policy, on every architecture; the prediction is exercised (issued > 0) and
// DALI's residuals come from `zipmoe profile --prefetch-residuals` on a prompt file.
class GeneratePrefetchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GeneratePrefetchTest, LogitsAreByteEqualToAllResidentWithEveryPredictor) {
  const std::string cached =
      CachedCompress(CachedSynth("--arch " + GetParam() + " --preset tiny --seed 5"), "--shards 2");
  TempDir tmp;
  const std::string dir = tmp.Sub("model");
  ASSERT_EQ(std::system(("cp -r " + cached + " " + dir).c_str()), 0);
  const uint64_t expert_bytes = ExpertBytes(dir);
  testing::WriteAll(tmp.Sub("prompts.txt"),
                    "The quick brown fox jumps over the lazy dog.\n\nA cache keeps experts close.\n"
                    "Debian ships many manual pages.\n");
  auto cal = RunCli(fmt::format("profile --model {} --prefetch-residuals {} --threads 1 --json", dir,
                                tmp.Sub("prompts.txt")));
  ASSERT_EQ(cal.exit_code, 0) << cal.output;
  EXPECT_NE(cal.output.find("\"calibration_prompts\":3"), std::string::npos) << cal.output;
  const std::string common = GenerateCommand(dir, 5);
  std::string want;
  ASSERT_NO_FATAL_FAILURE(ResidentLogits(common, tmp, &want));
  for (const char* prefetch : {"top-score", "residual"}) {
    for (const char* policy : {"zipmoe", "lru"}) {
      for (int percent : {10, 40}) {
        const std::string tag = fmt::format("{}-{}-{}", prefetch, policy, percent);
        const std::string out = tmp.Sub(tag + ".bin");
        const std::string stats = tmp.Sub(tag + ".json");
        auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --policy {} --prefetch {} --stats-json {}",
                                      common, out, expert_bytes * percent / 100, policy, prefetch, stats));
        ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
        EXPECT_TRUE(ReadAll(out) == want) << tag << ": logits differ from the all-resident run";
        const auto j = nlohmann::json::parse(ReadAll(stats));
        EXPECT_EQ(j["prefetch"]["mode"], prefetch) << tag;
        EXPECT_GT(j["prefetch"]["issued"].get<uint64_t>(), 0u) << tag;
        EXPECT_LE(j["prefetch"]["used"].get<uint64_t>() + j["prefetch"]["wasted"].get<uint64_t>(),
                  j["prefetch"]["issued"].get<uint64_t>())
            << tag;
        EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), expert_bytes * percent / 100) << tag;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, GeneratePrefetchTest,
                         ::testing::Values("qwen2_moe", "deepseek_v2", "mixtral", "qwen3_moe", "olmoe", "deepseek_v3",
                                           "glm4_moe", "glm4_moe_lite", "ernie4_5_moe", "gpt_oss", "granitemoe"));

// DALI's workload-aware replacement (policies/dali.cc: per-layer F pools), alone and with a
// prefetcher, on two architectures: byte-equal logits, and its pools do fill.
TEST(GenerateRuntimeCli, DaliPolicyIsByteExactAtEveryBudget) {
  for (const char* arch : {"qwen2_moe", "mixtral"}) {
    const std::string dir =
        CachedCompress(CachedSynth(fmt::format("--arch {} --preset tiny --seed 5", arch)), "--shards 2");
    const uint64_t expert_bytes = ExpertBytes(dir);
    TempDir tmp;
    const std::string common = GenerateCommand(dir, 6);
    std::string want;
    ASSERT_NO_FATAL_FAILURE(ResidentLogits(common, tmp, &want));
    for (const char* prefetch : {"none", "top-score"}) {
      for (int percent : {10, 25, 50}) {
        for (int workers : {1, 2}) {
          const std::string tag = fmt::format("{}-{}-{}-{}", arch, prefetch, percent, workers);
          auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --policy dali --prefetch {} "
                                        "--decompress-threads {} --stats-json {}",
                                        common, tmp.Sub(tag + ".bin"), expert_bytes * percent / 100, prefetch, workers,
                                        tmp.Sub(tag + ".json")));
          ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
          EXPECT_TRUE(ReadAll(tmp.Sub(tag + ".bin")) == want) << tag << ": logits differ from the all-resident run";
          const auto j = nlohmann::json::parse(ReadAll(tmp.Sub(tag + ".json")));
          EXPECT_EQ(j["policy"], "dali") << tag;
          if (j["pools"]["F"]["capacity_bytes"].get<uint64_t>() > 0) {  // at 10 % the staging may take it all
            EXPECT_GT(j["pools"]["F"]["admissions"].get<uint64_t>(), 0u) << tag;
          }
          if (percent >= 30) {
            EXPECT_GT(j["pools"]["F"]["capacity_bytes"].get<uint64_t>(), 0u) << tag;
          }
          EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), expert_bytes * percent / 100) << tag;
        }
      }
    }
  }
}

// SMoE's score-based eviction (with its default top-score prefetching) and CoServe's two-stage
// eviction on every architecture and three budgets: byte-equal logits, and the F pool is used.
class GenerateSeedPolicyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = CachedCompress(CachedSynth("--arch " + GetParam() + " --preset tiny --seed 5"), "--shards 2");
    expert_bytes_ = ExpertBytes(dir_);
    common_ = GenerateCommand(dir_, 6);
    ASSERT_NO_FATAL_FAILURE(ResidentLogits(common_, tmp_, &want_));
  }
  // Generates with `flags` at `percent` % of the expert bytes (2 decompression workers): it must
  // succeed with the all-resident logits; *stats = its --stats-json.
  void RunExact(const std::string& tag, int percent, const std::string& flags, nlohmann::json* stats) {
    auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} {} --decompress-threads 2 --stats-json {}",
                                  common_, tmp_.Sub(tag + ".bin"), expert_bytes_ * percent / 100, flags,
                                  tmp_.Sub(tag + ".json")));
    ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
    EXPECT_TRUE(ReadAll(tmp_.Sub(tag + ".bin")) == want_) << tag << ": logits differ from the all-resident run";
    *stats = nlohmann::json::parse(ReadAll(tmp_.Sub(tag + ".json")));
  }

  std::string dir_;
  uint64_t expert_bytes_ = 0;
  TempDir tmp_;
  std::string common_;
  std::string want_;
};

TEST_P(GenerateSeedPolicyTest, SmoeAndCoServeAreByteExactAtEveryBudget) {
  for (const char* policy : {"smoe", "coserve"}) {
    for (int percent : {10, 30, 70}) {
      const std::string tag = fmt::format("{}-{}-{}", GetParam(), policy, percent);
      nlohmann::json j;
      ASSERT_NO_FATAL_FAILURE(RunExact(tag, percent, fmt::format("--policy {}", policy), &j));
      EXPECT_EQ(j["policy"], policy) << tag;
      EXPECT_EQ(j["prefetch"]["mode"], std::string(policy) == "smoe" ? "top-score" : "none") << tag;
      EXPECT_EQ(j["substitution"]["substituted"].get<uint64_t>(), 0u) << tag;
      EXPECT_GT(j["substitution"]["routed"].get<uint64_t>(), 0u) << tag;
      if (percent >= 30) {
        EXPECT_GT(j["pools"]["F"]["requests"].get<uint64_t>(), 0u) << tag;
      }
      EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), expert_bytes_ * percent / 100) << tag;
    }
  }
}

// Issue 17 item 5: the other policies over the planner's F/C/S/E pools (--pools FCSE) stay exact.
TEST_P(GenerateSeedPolicyTest, OtherPoliciesOverPlannedPoolsAreByteExact) {
  uint64_t compressed_requests = 0;
  for (const char* policy : {"lru", "dali", "smoe", "coserve"}) {
    for (int percent : {20, 50}) {
      const std::string tag = fmt::format("{}-{}-fcse-{}", GetParam(), policy, percent);
      nlohmann::json j;
      ASSERT_NO_FATAL_FAILURE(RunExact(tag, percent, fmt::format("--policy {} --pools FCSE", policy), &j));
      EXPECT_EQ(j["policy"], policy) << tag;
      EXPECT_EQ(j["pools_enabled"], "FCSE") << tag;
      for (const char* pool : {"C", "S", "E"}) compressed_requests += j["pools"][pool]["requests"].get<uint64_t>();
    }
  }
  EXPECT_GT(compressed_requests, 0u) << "no policy ever hit a compressed pool";
}

INSTANTIATE_TEST_SUITE_P(Archs, GenerateSeedPolicyTest,
                         ::testing::Values("qwen2_moe", "deepseek_v2", "mixtral", "qwen3_moe", "olmoe", "deepseek_v3",
                                           "glm4_moe", "glm4_moe_lite", "ernie4_5_moe", "gpt_oss"));

// SMoE expert substitution is off unless asked; when asked it replaces only experts the cache does
// not hold, counts every replacement, and the output then differs from the exact model's.
TEST(GenerateRuntimeCli, SubstitutionIsCountedAndOffByDefault) {
  const std::string dir = CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 2");
  const uint64_t expert_bytes = ExpertBytes(dir);
  TempDir tmp;
  std::string want;
  ASSERT_NO_FATAL_FAILURE(ResidentLogits(GenerateCommand(dir, 8), tmp, &want));
  const std::string common =
      fmt::format("{} --policy smoe --memory-budget {}", GenerateCommand(dir, 8), expert_bytes * 40 / 100);
  auto exact = RunCli(fmt::format("{} --substitution-alpha 0 --logits-out {}", common, tmp.Sub("exact.bin")));
  ASSERT_EQ(exact.exit_code, 0) << exact.output;
  EXPECT_TRUE(ReadAll(tmp.Sub("exact.bin")) == want);
  auto sub = RunCli(fmt::format("{} --substitution-alpha 0.9 --logits-out {} --stats-json {}", common,
                                tmp.Sub("sub.bin"), tmp.Sub("sub.json")));
  ASSERT_EQ(sub.exit_code, 0) << sub.output;
  const auto j = nlohmann::json::parse(ReadAll(tmp.Sub("sub.json")));
  const uint64_t substituted = j["substitution"]["substituted"].get<uint64_t>();
  EXPECT_GT(substituted, 0u) << j["substitution"].dump();
  EXPECT_LT(substituted, j["substitution"]["routed"].get<uint64_t>());
  EXPECT_EQ(j["substitution"]["alpha"].get<double>(), 0.9);
  EXPECT_NE(sub.output.find("routed experts substituted (alpha 0.9)"), std::string::npos) << sub.output;
  const std::string got = ReadAll(tmp.Sub("sub.bin"));
  EXPECT_EQ(got.size(), want.size());
  EXPECT_FALSE(got == want) << "substitution replaced experts but the logits did not change";
  // Outside [0, 1), and in replay (no router scores): clear errors.
  for (const char* alpha : {"1", "-0.1", "nan"}) {
    auto bad = RunCli(fmt::format("{} --substitution-alpha {}", common, alpha));
    EXPECT_NE(bad.exit_code, 0) << alpha;
    EXPECT_NE(bad.output.find("is outside [0, 1)"), std::string::npos) << alpha << ": " << bad.output;
  }
  testing::WriteAll(tmp.Sub("t.jsonl"), "{\"layer\": 1, \"experts\": [0, 1]}\n");
  auto replay = RunCli(fmt::format("replay --model {} --trace {} --memory-budget 30% --substitution-alpha 0.3", dir,
                                   tmp.Sub("t.jsonl")));
  EXPECT_NE(replay.exit_code, 0);
  EXPECT_NE(replay.output.find("replay replays recorded routing"), std::string::npos) << replay.output;
}

TEST(GenerateRuntimeCli, PrefetchOptionsAreChecked) {
  const std::string dir = CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 2");
  const std::string common =
      fmt::format("generate --model {} --prompt-ids 5,17 --max-new-tokens 1 --memory-budget 30% ", dir);
  auto bad = RunCli(common + "--prefetch sometimes");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("prefetch 'sometimes': unknown (want none, top-score or residual)"), std::string::npos)
      << bad.output;
  // residual without calibrated residual vectors: named, with the command that makes them.
  auto missing = RunCli(common + "--prefetch residual");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("prefetch_residuals.safetensors: no residual vectors"), std::string::npos)
      << missing.output;
  EXPECT_NE(missing.output.find("zipmoe profile --model DIR --prefetch-residuals"), std::string::npos) << missing.output;
  // replay has no router inputs to predict from.
  TempDir tmp;
  testing::WriteAll(tmp.Sub("t.jsonl"), "{\"layer\": 1, \"experts\": [0, 1]}\n");
  auto replay = RunCli(fmt::format("replay --model {} --trace {} --memory-budget 30% --prefetch top-score", dir,
                                   tmp.Sub("t.jsonl")));
  EXPECT_NE(replay.exit_code, 0);
  EXPECT_NE(replay.output.find("replay has no router inputs"), std::string::npos) << replay.output;
}

TEST(GenerateRuntimeCli, PreloadFromTheTraceServesItsRequestWithoutAMissAndTheSameLogits) {
  const std::string dir = CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 4");
  const uint64_t expert_bytes = ExpertBytes(dir);
  ASSERT_GT(expert_bytes, 0u);
  TempDir tmp;
  const std::string common = fmt::format(
      "generate --model {} --prompt-ids 5,17,300,42,9,1000,77 --max-new-tokens 4 --ignore-eos --threads 1", dir);
  const std::string ref = tmp.Sub("resident.bin"), trace = tmp.Sub("trace.jsonl");
  auto r = RunCli(fmt::format("{} --logits-out {} --trace-out {}", common, ref, trace));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Room for every expert: the preload places every traced one, so the same request never misses.
  for (const char* policy : {"zipmoe", "lru"}) {
    const std::string out = tmp.Sub(std::string(policy) + ".bin"), stats = tmp.Sub(std::string(policy) + ".json");
    auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --policy {} --plan-trace {} --preload "
                                  "--stats-json {}",
                                  common, out, expert_bytes * 3 / 2, policy, trace, stats));
    ASSERT_EQ(run.exit_code, 0) << policy << "\n" << run.output;
    EXPECT_NE(run.output.find("I: preload: "), std::string::npos) << run.output;
    EXPECT_TRUE(ReadAll(out) == ReadAll(ref)) << policy << ": logits differ from the all-resident run";
    const auto j = nlohmann::json::parse(ReadAll(stats));
    EXPECT_EQ(j["requests"]["misses"].get<uint64_t>(), 0u) << policy << " " << j["requests"].dump();
    EXPECT_GT(j["requests"]["total"].get<uint64_t>(), 0u) << policy;
    EXPECT_EQ(j["io"]["ops"].get<uint64_t>(), 0u) << policy << ": the request read nothing";
  }
  // A tight budget still gives the same logits (the preload fills what fits, misses read the rest).
  const std::string tight = tmp.Sub("tight.bin");
  auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --plan-trace {} --preload", common, tight,
                                expert_bytes / 5, trace));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(ReadAll(tight) == ReadAll(ref));
  // A missing trace is named.
  auto bad = RunCli(fmt::format("{} --memory-budget {} --plan-trace {} --preload", common, expert_bytes / 2,
                                tmp.Sub("missing.jsonl")));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("missing.jsonl"), std::string::npos) << bad.output;
}

TEST(GenerateRuntimeCli, FcsePoolsAllServeHitsAndTheBudgetFloorIsNamed) {
  const std::string dir = CachedCompress(CachedSynth("--arch qwen2_moe --preset tiny --seed 5"), "--shards 4");
  const uint64_t expert_bytes = ExpertBytes(dir);
  ASSERT_GT(expert_bytes, 0u);
  TempDir tmp;
  // One prompt, every pool a quarter of the budget; `tokens` new tokens, statistics to `stats_path`.
  auto run_fcse = [&](int tokens, const std::string& stats_path) {
    return RunCli(fmt::format("generate --model {} --prompt-ids 5,17,300,42,9,1000,77,8,8,123 --max-new-tokens {} "
                              "--ignore-eos --threads 1 --memory-budget {} --pool-ratios F=0.25,C=0.25,S=0.25,E=0.25 "
                              "--stats-json {}",
                              dir, tokens, expert_bytes, stats_path));
  };
  const std::string stats = tmp.Sub("s.json");
  auto run = run_fcse(12, stats);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto j = nlohmann::json::parse(ReadAll(stats));
  int hit_pools = 0;
  for (const char* p : {"F", "C", "S", "E"}) hit_pools += j["pools"][p]["requests"].get<uint64_t>() > 0;
  EXPECT_GE(hit_pools, 3) << j.dump(2);
  EXPECT_GT(j["requests"]["misses"].get<uint64_t>(), 0u);
  EXPECT_GT(j["io"]["bytes_e"].get<uint64_t>(), 0u);
  EXPECT_GT(j["io"]["bytes_sm"].get<uint64_t>(), 0u);
  EXPECT_GT(j["decode"]["ops"].get<uint64_t>(), 0u);
  EXPECT_GT(j["mean_makespan_over_bound"].get<double>(), 0.0);
  EXPECT_GT(j["tpot_s"].get<double>(), 0.0);
  EXPECT_FALSE(j["layers"].empty());

  // "prefill": the counters when the first token was sampled. Its requests are the prompt's routing
  // alone (independent of the cache), so they equal a 1-token run's totals; decode adds to them.
  const std::string one_stats = tmp.Sub("one.json");
  auto one = run_fcse(1, one_stats);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto o = nlohmann::json::parse(ReadAll(one_stats));
  EXPECT_EQ(j["prefill"]["requests"], o["requests"]["total"]);
  EXPECT_LT(j["prefill"]["requests"].get<uint64_t>(), j["requests"]["total"].get<uint64_t>());
  EXPECT_GT(j["prefill"]["io"]["bytes_e"].get<uint64_t>(), 0u);
  EXPECT_LE(j["prefill"]["io"]["bytes_e"].get<uint64_t>(), j["io"]["bytes_e"].get<uint64_t>());
  EXPECT_LE(j["prefill"]["misses"].get<uint64_t>(), j["requests"]["misses"].get<uint64_t>());
  EXPECT_EQ(o["prefill"]["requests"], o["requests"]["total"]);
  EXPECT_EQ(o["prefill"]["misses"], o["requests"]["misses"]);
  EXPECT_EQ(o["prefill"]["io"]["bytes_e"], o["io"]["bytes_e"]) << "1 token: everything happened in the prefill";
  EXPECT_EQ(o["prefill"]["io"]["bytes_sm"], o["io"]["bytes_sm"]);

  // A percentage of the BF16 expert bytes.
  const std::string pct_stats = tmp.Sub("pct.json");
  auto pct = RunCli(fmt::format("generate --model {} --prompt-ids 5,17 --max-new-tokens 1 --memory-budget 50% "
                                "--stats-json {}", dir, pct_stats));
  ASSERT_EQ(pct.exit_code, 0) << pct.output;
  EXPECT_EQ(nlohmann::json::parse(ReadAll(pct_stats))["arena"]["budget_bytes"].get<uint64_t>(), expert_bytes / 2);
  auto bad_pct = RunCli(fmt::format("generate --model {} --prompt-ids 5 --memory-budget 0%", dir));
  EXPECT_NE(bad_pct.exit_code, 0);
  EXPECT_NE(bad_pct.output.find("percentage"), std::string::npos) << bad_pct.output;

  auto low = RunCli(fmt::format("generate --model {} --prompt-ids 5,17 --max-new-tokens 1 --memory-budget 8KiB", dir));
  EXPECT_NE(low.exit_code, 0);
  EXPECT_NE(low.output.find("below the minimum"), std::string::npos) << low.output;
  auto hf = RunCli(fmt::format("generate --model {} --prompt-ids 5,17 --max-new-tokens 1 --memory-budget 1GiB",
                               CachedSynth("--arch qwen2_moe --preset tiny --seed 5")));
  EXPECT_NE(hf.exit_code, 0);
  EXPECT_NE(hf.output.find("compressed directory"), std::string::npos) << hf.output;
}

}  // namespace
}  // namespace zipmoe
