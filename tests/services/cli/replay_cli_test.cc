// `zipmoe generate --trace-out` then `zipmoe replay --trace`: the replay drives the same runtime from
// the recorded routing and reports the same number of expert requests.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::CachedCompress;
using testing::CachedSynth;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;

TEST(ReplayCli, ReplaysAGenerationTraceWithTheSameRequestsAndFailsOnBadInput) {
  const std::string dir = CachedCompress(CachedSynth("--arch deepseek_v2 --preset tiny --seed 5"), "--shards 4");
  TempDir tmp;
  const std::string trace = tmp.Sub("trace.jsonl");
  const std::string gen_stats = tmp.Sub("gen.json");
  auto gen = RunCli(fmt::format("generate --model {} --prompt-ids 5,17,300,42 --max-new-tokens 6 --ignore-eos "
                                "--threads 1 --json --trace-out {} --memory-budget 2MiB --stats-json {}",
                                dir, trace, gen_stats));
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const std::string replay_stats = tmp.Sub("replay.json");
  auto rep = RunCli(fmt::format("replay --model {} --trace {} --memory-budget 2MiB --stats-json {}", dir, trace,
                                replay_stats));
  ASSERT_EQ(rep.exit_code, 0) << rep.output;
  EXPECT_NE(rep.output.find("replay "), std::string::npos) << rep.output;
  const auto g = nlohmann::json::parse(ReadAll(gen_stats));
  const auto r = nlohmann::json::parse(ReadAll(replay_stats));
  EXPECT_EQ(r["requests"]["total"], g["requests"]["total"]);
  EXPECT_EQ(r["steps"].get<int>(), 6);  // prefill + 5 fed-back tokens
  EXPECT_GT(r["io"]["bytes_e"].get<uint64_t>(), 0u);
  EXPECT_GT(r["mean_makespan_us"].get<double>(), 0.0);

  // An expert id the model does not have: a clear error naming the trace record.
  testing::WriteAll(tmp.Sub("bad.jsonl"), "{\"step\":0,\"layer\":1,\"experts\":[999]}\n");
  auto bad = RunCli(fmt::format("replay --model {} --trace {} --memory-budget 2MiB", dir, tmp.Sub("bad.jsonl")));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("record 1"), std::string::npos) << bad.output;
  auto missing = RunCli(fmt::format("replay --model {} --trace {} --memory-budget 2MiB", dir, tmp.Sub("nope")));
  EXPECT_NE(missing.exit_code, 0);
}

}  // namespace
}  // namespace zipmoe
