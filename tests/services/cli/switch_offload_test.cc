// Gate-less experts through the offloading runtime: a BF16 switch_transformers checkpoint (`synth
// --dtype bf16`; experts wi/wo = up/down, no gate), compressed, must give `generate --logits-out` files
// byte-equal to the HF directory's under every policy, several budgets and 1/2 decompression workers,
// with the recovery fused into the CPU matmul and separate; and through `zipmoe up` (every service its
// own process, experts over the shm arena and the wire) the same log-probabilities as the embedded
// server. The prompts
// are a ragged batch whose long one overflows expert_capacity in the encoder.
#include <gtest/gtest.h>

#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/checkpoint/manifest.h"
#include "tests/services/cli/http_test_util.h"
#include "tests/services/cli/up_cli_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::CachedCompress;
using testing::CachedSynth;
using testing::Http;
using testing::HttpReply;
using testing::ReadAll;
using testing::RunCli;
using testing::TempDir;

const char* const kSynth = "--arch switch_transformers --preset tiny --seed 5 --dtype bf16";
const char* const kLongPrompt = "a prompt long enough that the experts of the encoder overflow their capacity";

// `generate` on `dir` over a ragged batch of two text prompts (the long one drops tokens: 8 experts x
// capacity 2), 6 greedy tokens each, one thread.
std::string GenerateCommand(const std::string& dir, const TempDir& tmp) {
  testing::WriteAll(tmp.Sub("prompts.json"), json::array({"hi there", kLongPrompt}).dump());
  return fmt::format("generate --model {} --prompts-file {} --batch 2 --max-new-tokens 6 --ignore-eos --threads 1",
                     dir, tmp.Sub("prompts.json"));
}

uint64_t ExpertBytes(const std::string& dir) {
  auto manifest = ReadManifest(dir);
  EXPECT_TRUE(manifest.ok()) << manifest.status().ToString();
  uint64_t bytes = 0;
  if (manifest.ok()) {
    for (const ExpertTensorInfo& t : manifest->expert_tensors) {
      EXPECT_NE(t.proj, ExpertProj::kGate) << t.name;
      EXPECT_EQ(t.dtype, DType::kBF16) << t.name;
      bytes += t.raw_bytes();
    }
  }
  return bytes;
}

TEST(SwitchOffload, LogitsAreByteEqualToTheHfDirectoryForEveryPolicyBudgetAndL) {
  const std::string hf = CachedSynth(kSynth);
  const std::string dir = CachedCompress(hf, "--shards 4");
  const uint64_t expert_bytes = ExpertBytes(dir);
  ASSERT_GT(expert_bytes, 0u);
  TempDir tmp;
  std::string want;
  for (const std::string& d : {hf, dir}) {  // HF F32-free checkpoint and compressed dir, all resident
    auto r = RunCli(GenerateCommand(d, tmp) + " --logits-out " + tmp.Sub("resident.bin"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    if (want.empty()) want = ReadAll(tmp.Sub("resident.bin"));
    ASSERT_EQ(ReadAll(tmp.Sub("resident.bin")), want) << d << ": compressed resident differs from the HF dir";
  }
  ASSERT_EQ(want.size(), 2u * 6 * 512 * 4);  // 2 sequences x 6 decoder rows x vocab 512, float32
  const std::string common = GenerateCommand(dir, tmp);
  for (const char* policy : {"zipmoe", "lru", "fifo", "lfu", "full-load", "dali", "smoe", "coserve"}) {
    for (int percent : {25, 45, 70}) {  // the minimum (one staging slot) is ~19 %
      for (const char* mode : {"", "--separate-recovery"}) {
        const int workers = percent == 45 ? 2 : 1;
        const std::string tag = fmt::format("{}-{}-{}{}", policy, percent, workers, mode[0] ? "-separate" : "");
        const std::string out = tmp.Sub(tag + ".bin");
        const std::string stats = tmp.Sub(tag + ".json");
        auto run = RunCli(fmt::format("{} --logits-out {} --memory-budget {} --policy {} --decompress-threads {} {} "
                                      "--stats-json {}",
                                      common, out, expert_bytes * percent / 100, policy, workers, mode, stats));
        ASSERT_EQ(run.exit_code, 0) << tag << "\n" << run.output;
        EXPECT_TRUE(ReadAll(out) == want) << tag << ": logits differ from the HF directory's";
        const auto j = json::parse(ReadAll(stats));
        EXPECT_GT(j["requests"]["misses"].get<uint64_t>(), 0u) << tag;
        EXPECT_LE(j["arena"]["mapped_bytes"].get<uint64_t>(), expert_bytes * percent / 100) << tag;
      }
    }
  }
}

// Greedy decoding of the random tiny model mostly repeats one token, so the check is on the
// log-probabilities (top 5 of each step, computed from the raw logits): `zipmoe up` must answer
// exactly what the embedded server (`zipmoe serve`, every expert resident) answers.
TEST(SwitchOffload, UpServesTheSameLogprobsAsTheEmbeddedServer) {
  const std::string model = CachedCompress(CachedSynth(kSynth), "--shards 4");
  constexpr int kNewTokens = 8;
  TempDir tmp;
  const json request{{"prompt", json::array({kLongPrompt, "hi there"})},
                     {"max_tokens", kNewTokens},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"logprobs", 5}};
  json want;
  {
    testing::ServeProcess serve(tmp, fmt::format("--model {} --threads 1", model));
    ASSERT_TRUE(serve.healthy()) << serve.log();
    const HttpReply reply = Http(tmp, serve.port(), "POST", "/v1/completions", request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body;
    want = json::parse(reply.body)["choices"];
  }
  ASSERT_EQ(want.size(), 2u);
  ASSERT_EQ(want[0]["logprobs"]["top_logprobs"].size(), static_cast<size_t>(kNewTokens));
  ASSERT_EQ(want[0]["logprobs"]["top_logprobs"][0].size(), 5u);
  ASSERT_NE(want[0]["logprobs"], want[1]["logprobs"]);  // the encoder input matters
  for (int decompressors : {1, 2}) {
    SCOPED_TRACE(fmt::format("{} decompressors", decompressors));
    up_cli::test::Up up(tmp, model, decompressors);
    ASSERT_TRUE(up.WaitHealthy()) << up.log();
    const HttpReply reply = Http(tmp, up.port(), "POST", "/v1/completions", request.dump());
    ASSERT_EQ(reply.status, 200) << reply.body << up.log();
    const json got = json::parse(reply.body)["choices"];
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got[i]["text"], want[i]["text"]) << i;
      EXPECT_EQ(got[i]["logprobs"], want[i]["logprobs"]) << i;
    }
    EXPECT_TRUE(up.Stop()) << up.log();
  }
}

}  // namespace
}  // namespace zipmoe
