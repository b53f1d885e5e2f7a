// The `zipmoe plan` / `zipmoe profile` CLI on a tiny compressed model: planner inputs from the
// manifest and a profile, JSON output for uniform, trace and profile inputs, and every policy's layout.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/checkpoint/manifest.h"
#include "services/cache_manager/plan_cost.h"
#include "services/cache_manager/plan_probability.h"
#include "services/cache_manager/plan_profile.h"
#include "services/cache_manager/plan_trace.h"
#include "services/cache_manager/planner.h"
#include "tests/services/cache_manager/planner_test_util.h"
#include "tests/test_util.h"

namespace zipmoe::cache_manager {
namespace {

using test::Rec;

// --- a real compressed model --------------------------------------------------------------------

// Tiny qwen2_moe (16 experts, top-4, 4 layers) compressed with K = 4, made once for the suite and
// removed after it.
class TinyModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = std::make_unique<testing::TempDir>();
    const std::string model = root_->Sub("tiny");
    auto s = testing::RunCli("synth --arch qwen2_moe --preset tiny --seed 3 --out " + model);
    ASSERT_EQ(s.exit_code, 0) << s.output;
    auto c = testing::RunCli("compress " + model + " " + root_->Sub("tiny.z") + " --shards 4");
    ASSERT_EQ(c.exit_code, 0) << c.output;
  }
  static void TearDownTestSuite() { root_.reset(); }
  static std::string TinyCompressed() { return root_->Sub("tiny.z"); }

 private:
  static std::unique_ptr<testing::TempDir> root_;
};
std::unique_ptr<testing::TempDir> TinyModelTest::root_;

nlohmann::json LastJsonLine(const std::string& output) {
  const size_t at = output.rfind("\n{");
  return nlohmann::json::parse(at == std::string::npos ? output : output.substr(at + 1));
}

TEST_F(TinyModelTest, InputsFromManifestAndProfile) {
  auto manifest = ReadManifest(TinyCompressed());
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  auto in = ModelPlanInputsFromManifest(*manifest, TinyCompressed());
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->n_experts, 16);
  EXPECT_EQ(in->top_k, 4);
  EXPECT_EQ(in->n_shards, 4);
  EXPECT_EQ(in->tensors_per_expert, 3);
  const auto& b = in->pool_costs.bytes_per_expert;
  EXPECT_DOUBLE_EQ(b[kPoolC], b[kPoolS] + b[kPoolE]);
  EXPECT_DOUBLE_EQ(b[kPoolF], 2 * b[kPoolS]);  // SM plane = 1 byte per value
  EXPECT_LT(b[kPoolE], b[kPoolS]);              // exponents compress
  for (int p = 0; p < kPoolCount; ++p) {
    EXPECT_GE(in->slot_costs.bytes_per_expert[p], b[p]);
    EXPECT_EQ(std::fmod(in->slot_costs.bytes_per_expert[p], 4096.0), 0.0);
  }
  auto profile = ProfileStorage(TinyCompressed(), {/*max_tensors=*/8, /*decode_repeats=*/2, /*seed=*/1, true});
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  EXPECT_EQ(profile->sm_reads, 8);
  EXPECT_EQ(profile->e_reads, 32);
  EXPECT_EQ(profile->decodes, 64);
  EXPECT_GT(profile->sm_read_us, 0);
  EXPECT_GT(profile->e_read_us, 0);
  EXPECT_GT(profile->decompress_us, 0);
  EXPECT_TRUE(profile->io_mode == "o_direct" || profile->io_mode == "buffered");
  EXPECT_EQ(profile->io_mode == "buffered", !profile->io_note.empty());
}

TEST_F(TinyModelTest, PlanCliJsonOutputUniformTraceAndProfile) {
  const std::string dir = TinyCompressed();
  auto r = testing::RunCli("plan --model " + dir + " --memory-budget 256KiB --json --decompress-threads 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = LastJsonLine(r.output);
  EXPECT_EQ(j["workload"], "uniform");
  EXPECT_EQ(j["n_experts"], 16);
  EXPECT_EQ(j["top_k"], 4);
  EXPECT_EQ(j["n_moe_layers"], 4);
  EXPECT_EQ(j["budget_bytes"], 262144);
  EXPECT_EQ(j["budget_bytes_per_layer"], 65536);
  EXPECT_EQ(j["pools"], "FCSE");
  EXPECT_EQ(j["cost"]["source"], "defaults");
  EXPECT_EQ(j["cost"]["n_workers"], 4);
  double ratio_sum = 0, used = 0;
  for (const char* p : {"F", "C", "S", "E"}) {
    ratio_sum += j["ratios"][p].get<double>();
    used += j["capacities"][p].get<double>() * j["bytes_per_expert"][p].get<double>();
  }
  EXPECT_NEAR(ratio_sum, 1.0, 1e-9);
  EXPECT_LE(used, 65536.0);
  EXPECT_GT(j["expected_makespan_us"].get<double>(), 0);
  EXPECT_LE(j["expected_makespan_us"].get<double>(), j["all_miss_makespan_us"].get<double>());
  EXPECT_LE(j["expected_makespan_us"].get<double>(), j["f_only_makespan_us"].get<double>() + 1e-9);

  // A skewed trace, and a profile measured on this machine.
  testing::TempDir tmp;
  std::string trace;
  for (int step = 0; step < 50; ++step) {
    for (int layer = 0; layer < 4; ++layer) {
      ActivationRecord rec = Rec(step, layer, {0, 1, 2, 3 + step % 13});
      trace += FormatTraceLine(rec) + "\n";
    }
  }
  testing::WriteAll(tmp.Sub("trace.jsonl"), trace);
  auto prof = testing::RunCli("profile --model " + dir + " --out " + tmp.Sub("profile.json") + " --tensors 8");
  ASSERT_EQ(prof.exit_code, 0) << prof.output;
  auto t = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --trace " + tmp.Sub("trace.jsonl") +
                           " --profile " + tmp.Sub("profile.json") + " --pools FS");
  ASSERT_EQ(t.exit_code, 0) << t.output;
  j = LastJsonLine(t.output);
  EXPECT_EQ(j["workload"], "trace");
  EXPECT_EQ(j["trace_records"], 200);
  EXPECT_EQ(j["rank_freq"][0], 1.0);
  EXPECT_EQ(j["cost"]["source"], tmp.Sub("profile.json"));
  EXPECT_EQ(j["ratios"]["C"], 0.0);
  EXPECT_EQ(j["ratios"]["E"], 0.0);

  auto human = testing::RunCli("plan --model " + dir + " --memory-budget 1MiB");
  ASSERT_EQ(human.exit_code, 0) << human.output;
  EXPECT_NE(human.output.find("uniform f_r = k/N"), std::string::npos) << human.output;
  auto bad = testing::RunCli("plan --model " + dir + " --memory-budget 12parsecs");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("memory-budget"), std::string::npos) << bad.output;
  // 0 bytes: an error (it printed a plan of empty pools and a 0 us makespan); a share of the expert bytes
  // as generate and serve read it.
  auto zero = testing::RunCli("plan --model " + dir + " --memory-budget 0");
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("nothing to plan"), std::string::npos) << zero.output;
  auto share = testing::RunCli("plan --model " + dir + " --memory-budget 50% --json");
  ASSERT_EQ(share.exit_code, 0) << share.output;
  auto manifest = ReadManifest(dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  uint64_t expert_bytes = 0;
  for (const ExpertTensorInfo& t : manifest->expert_tensors) expert_bytes += t.raw_bytes();
  EXPECT_EQ(nlohmann::json::parse(share.output)["budget_bytes"].get<uint64_t>(), expert_bytes / 2);
  auto no_batch = testing::RunCli("plan --model " + dir + " --memory-budget 1MiB --batch-size 8 --trace " +
                                  tmp.Sub("trace.jsonl"));
  EXPECT_NE(no_batch.exit_code, 0);
  EXPECT_NE(no_batch.output.find("batch size 8"), std::string::npos) << no_batch.output;
}

// `plan --policy`: what each policy does with the budget, in the runtime's own names.
TEST_F(TinyModelTest, PlanCliNamesEveryPolicysLayout) {
  const std::string dir = TinyCompressed();
  auto zipmoe = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json");
  ASSERT_EQ(zipmoe.exit_code, 0) << zipmoe.output;
  nlohmann::json j = LastJsonLine(zipmoe.output);
  EXPECT_EQ(j["policy"], "zipmoe");
  EXPECT_EQ(j["global_f_experts"], 0);
  const double f_bytes = j["bytes_per_expert"]["F"].get<double>();
  ASSERT_GT(f_bytes, 0);
  const int64_t slots = static_cast<int64_t>(512 * 1024 / static_cast<uint64_t>(f_bytes));
  for (const char* policy : {"lru", "fifo", "lfu", "marking", "smoe", "coserve"}) {
    auto r = testing::RunCli(fmt::format("plan --model {} --memory-budget 512KiB --json --policy {}", dir, policy));
    ASSERT_EQ(r.exit_code, 0) << policy << ": " << r.output;
    j = LastJsonLine(r.output);
    EXPECT_EQ(j["policy"], policy);
    EXPECT_EQ(j["pools"], "F") << policy;
    EXPECT_EQ(j["global_f_experts"], slots) << policy;
    EXPECT_NE(j["policy_layout"].get<std::string>().find(fmt::format("one F pool of {} experts shared", slots)),
              std::string::npos)
        << j["policy_layout"];
    EXPECT_EQ(j["capacities"]["C"], 0) << policy;
  }
  auto dali = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy dali");
  ASSERT_EQ(dali.exit_code, 0) << dali.output;
  EXPECT_NE(dali.output.find(fmt::format("policy     dali: one F pool per MoE layer, {} experts each", slots / 4)),
            std::string::npos)
      << dali.output;
  auto none = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy full-load");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("no cache"), std::string::npos) << none.output;
  auto bad = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy belady");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("cache policy 'belady': unknown (want zipmoe, lru, fifo, lfu, full-load, marking, dali, "
                            "smoe or coserve)"),
            std::string::npos)
      << bad.output;
  // Another policy given pools beyond F gets zipmoe's plan of those pools (issue 17 item 5).
  auto planned = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --policy lru --pools FC");
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  auto zipmoe_fc = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --json --pools FC");
  ASSERT_EQ(zipmoe_fc.exit_code, 0) << zipmoe_fc.output;
  j = LastJsonLine(planned.output);
  const nlohmann::json jz = LastJsonLine(zipmoe_fc.output);
  EXPECT_EQ(j["pools"], "FC");
  EXPECT_EQ(j["capacities"], jz["capacities"]);
  EXPECT_EQ(j["global_f_experts"], 0);
  EXPECT_NE(j["policy_layout"].get<std::string>().find("per-layer pools FC"), std::string::npos) << j["policy_layout"];
  EXPECT_NE(j["policy_layout"].get<std::string>().find("lru chooses the victim"), std::string::npos)
      << j["policy_layout"];
  auto full = testing::RunCli("plan --model " + dir + " --memory-budget 512KiB --policy full-load --pools FC");
  EXPECT_NE(full.exit_code, 0);
  EXPECT_NE(full.output.find("full-load policy caches nothing"), std::string::npos) << full.output;
}

}  // namespace
}  // namespace zipmoe::cache_manager
