// Tests of `zipmoe generate` (services/cli/cmd_generate.cc): --logits-out layout, --json, text and
// chat prompts, HF vs compressed directories, and error reporting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "services/executor/generator.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using testing::RunCli;
using testing::TinyCompressedDir;
using testing::TinyModelDir;

std::vector<float> ReadFloats(const std::string& path) {
  const std::string bytes = testing::ReadAll(path);
  EXPECT_EQ(bytes.size() % 4, 0u);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

TEST(GenerateCliTest, LogitsOutHoldsThePromptRowsForZeroNewTokens) {
  testing::TempDir tmp;
  const std::string dir = TinyModelDir("qwen2_moe");
  const auto r = RunCli("generate --model " + dir + " --prompt-ids 5,17,300,1000 --max-new-tokens 0 --threads 2 "
                        "--logits-out " + tmp.Sub("l.bin"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<float> logits = ReadFloats(tmp.Sub("l.bin"));
  ASSERT_EQ(logits.size(), 4u * 2048u);  // [4 positions, vocab 2048]
  // Same numbers as the in-process executor with the same thread count.
  executor::GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = 2;
  auto g = executor::Generator::Create(options);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto want = (*g)->ForwardChunks({{5, 17, 300, 1000}});
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(want->size(), logits.size());
  EXPECT_EQ(std::memcmp(want->data(), logits.data(), logits.size() * 4), 0);
}

TEST(GenerateCliTest, JsonAndLogitsRowsWithGeneratedTokens) {
  testing::TempDir tmp;
  const auto r = RunCli("generate --model " + TinyModelDir("deepseek_v2") +
                        " --prompt-ids 5,17,300 --max-new-tokens 4 --threads 2 --json --logits-out " +
                        tmp.Sub("l.bin") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["prompt_ids"], nlohmann::json({5, 17, 300}));
  const size_t n_generated = j["generated_ids"].size();
  ASSERT_GE(n_generated, 1u);
  ASSERT_LE(n_generated, 4u);
  for (const char* key : {"text", "ttft_s", "tpot_s", "tokens_per_s"}) EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_TRUE(j["text"].is_string());
  // One row per fed position: 3 prompt rows + every generated token but the last.
  EXPECT_EQ(ReadFloats(tmp.Sub("l.bin")).size(), (3 + n_generated - 1) * 2048u);
}

// --json batch_* list every sequence of a batch with its own ids and --logits-out row count, and the
// rows follow each other in batch order.
TEST(GenerateCliTest, JsonBatchFieldsDescribeEverySequenceAndItsLogitsRows) {
  testing::TempDir tmp;
  const auto r = RunCli("generate --model " + TinyModelDir("deepseek_v2") +
                        " --prompt-ids 5,17,300 --batch 2 --max-new-tokens 3 --ignore-eos --threads 2 --json"
                        " --logits-out " + tmp.Sub("l.bin") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output.substr(r.output.rfind("{\"")));  // no nested objects
  ASSERT_EQ(j["batch_prompt_ids"].size(), 2u);
  EXPECT_EQ(j["batch_prompt_ids"][0], nlohmann::json({5, 17, 300}));
  EXPECT_EQ(j["batch_prompt_ids"][1], nlohmann::json({17, 300, 5}));  // rotated left by 1
  EXPECT_EQ(j["batch_generated_ids"][0], j["generated_ids"]);
  size_t rows = 0;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(j["batch_generated_ids"][i].size(), 3u);
    EXPECT_EQ(j["batch_logits_rows"][i].get<size_t>(), 3u + 3u - 1u);
    rows += j["batch_logits_rows"][i].get<size_t>();
  }
  EXPECT_EQ(ReadFloats(tmp.Sub("l.bin")).size(), rows * 2048u);
}

TEST(GenerateCliTest, HfAndCompressedDirectoriesWriteIdenticalLogits) {
  testing::TempDir tmp;
  for (const char* which : {"hf", "zip"}) {
    const std::string dir = std::string(which) == "hf" ? TinyModelDir("olmoe") : TinyCompressedDir("olmoe");
    const auto r = RunCli("generate --model " + dir + " --prompt-ids 9,8,7,6,5 --max-new-tokens 3 --threads 2 "
                          "--logits-out " + tmp.Sub(std::string(which) + ".bin"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_EQ(testing::ReadAll(tmp.Sub("hf.bin")), testing::ReadAll(tmp.Sub("zip.bin")));
}

// --kv-cache-dtype bf16 reaches the executor (other logits than f32's, the same ones from the HF and the
// compressed directory under a budget); f32 is the default; anything else is refused naming the flag.
TEST(GenerateCliTest, KvCacheDtypeBf16ChangesTheLogitsAlikeEverywhere) {
  testing::TempDir tmp;
  const std::string common = " --prompt-ids 9,8,7,6,5,4,3,2,1 --max-new-tokens 4 --ignore-eos --threads 2 --logits-out ";
  const auto run = [&](const std::string& dir, const std::string& flags, const std::string& out) {
    const auto r = RunCli("generate --model " + dir + common + tmp.Sub(out) + " " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return testing::ReadAll(tmp.Sub(out));
  };
  const std::string f32 = run(TinyModelDir("qwen3_moe"), "", "f32.bin");
  EXPECT_EQ(run(TinyModelDir("qwen3_moe"), "--kv-cache-dtype f32", "f32b.bin"), f32);
  const std::string bf16 = run(TinyModelDir("qwen3_moe"), "--kv-cache-dtype bf16", "bf16.bin");
  EXPECT_NE(bf16, f32);
  EXPECT_EQ(run(TinyCompressedDir("qwen3_moe"), "--kv-cache-dtype bf16 --memory-budget 30%", "bf16zip.bin"), bf16);
  const auto bad = RunCli("generate --model " + TinyModelDir("qwen3_moe") + " --prompt-ids 1 --kv-cache-dtype f16");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--kv-cache-dtype"), std::string::npos) << bad.output;
}

TEST(GenerateCliTest, TextAndChatPromptsUseTheTokenizer) {
  const std::string dir = TinyModelDir("qwen3_moe");
  auto r = RunCli("generate --model " + dir + " --prompt 'The quick brown fox' --max-new-tokens 5 --threads 2 --json"
                  " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["prompt_ids"].size(), 1u);
  EXPECT_GE(j["generated_ids"].size(), 1u);
  EXPECT_LE(j["generated_ids"].size(), 5u);  // fewer only if an EOS id came up
  const size_t plain_len = j["prompt_ids"].size();

  r = RunCli("generate --model " + dir + " --prompt 'The quick brown fox' --chat --max-new-tokens 2 --threads 2"
             " --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_GT(j["prompt_ids"].size(), plain_len + 4);  // <|im_start|>user\n ... <|im_end|>\n<|im_start|>assistant\n

  r = RunCli("generate --model " + dir + " --prompt 'hello' --max-new-tokens 3 --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokens/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(2 compute threads)"), std::string::npos) << r.output;

  // --threads 0 (the default) follows the affinity mask: pinned to one CPU by taskset, one compute
  // thread, whatever the machine's CPU count.
  r = RunCli("generate --model " + dir + " --prompt-ids 1,2 --max-new-tokens 1 --threads 2 --json 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["threads"], 2);
  if (std::system("taskset -c 0 true >/dev/null 2>&1") == 0) {
    r = RunCli("generate --model " + dir + " --prompt-ids 1,2 --max-new-tokens 1 --json 2>/dev/null", "taskset -c 0");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(nlohmann::json::parse(r.output)["threads"], 1) << r.output;
  } else {
    GTEST_LOG_(INFO) << "taskset unavailable: the pinned default is checked by CpuTopologyTest only";
  }
}

TEST(GenerateCliTest, F8TileCheckFollowsTheEnvironment) {
  // ZIPMOE_F8_TILE_CHECK picks how the x86 FP8 tiles meet NaN / subnormal codes (kernels/bf16_gemm.h
  // F8TileCheck); --json names it. An FP8 checkpoint's generated ids and logits do not depend on it (same bits).
  const std::string dir = TinyModelDir("deepseek_v3 --dtype fp8");
  testing::TempDir tmp;
  const auto run = [&](const std::string& check) {
    return RunCli("generate --model " + dir + " --prompt-ids 5,6,7,8 --max-new-tokens 3 --threads 2 --json --logits-out " +
                      tmp.Sub("f8_" + check + ".bin"),
                  "env ZIPMOE_F8_TILE_CHECK=" + check);
  };
  const auto scan = run("scan");
  ASSERT_EQ(scan.exit_code, 0) << scan.output;
  const auto fused = run("fused");
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  // The loader's notes go to stderr, which RunCli joins: the object is the output's last `{"` (no nested objects).
  const nlohmann::json s = nlohmann::json::parse(scan.output.substr(scan.output.rfind("{\""))),
                       f = nlohmann::json::parse(fused.output.substr(fused.output.rfind("{\"")));
  EXPECT_EQ(s["f8_tile_check"], "scan");
  EXPECT_EQ(f["f8_tile_check"], "fused");
  EXPECT_EQ(s["generated_ids"], f["generated_ids"]);
  const std::string scan_logits = testing::ReadAll(tmp.Sub("f8_scan.bin")),
                    fused_logits = testing::ReadAll(tmp.Sub("f8_fused.bin"));
  EXPECT_FALSE(scan_logits.empty());
  EXPECT_TRUE(scan_logits == fused_logits) << "the two schemes' logits differ";

  const auto bad = RunCli("generate --model " + dir + " --prompt-ids 1,2 --max-new-tokens 1 --json",
                          "env ZIPMOE_F8_TILE_CHECK=sometimes");
  ASSERT_EQ(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("ZIPMOE_F8_TILE_CHECK=sometimes"), std::string::npos) << bad.output;
}

TEST(GenerateCliTest, GemvPrefetchFollowsTheEnvironment) {
  // ZIPMOE_GEMV_PREFETCH picks the CPU GEMV's weight prefetch (kernels/bf16_gemm.h GemvPrefetch); --json names
  // it and the matrix kernel. The generated ids do not depend on it (same bits).
  const std::string cmd = "generate --model " + TinyModelDir("qwen3_moe") +
                          " --prompt-ids 1,2,3 --max-new-tokens 3 --threads 2 --json 2>/dev/null";
  const auto ahead = RunCli(cmd, "env ZIPMOE_GEMV_PREFETCH=ahead");
  ASSERT_EQ(ahead.exit_code, 0) << ahead.output;
  const auto hardware = RunCli(cmd, "env ZIPMOE_GEMV_PREFETCH=hardware");
  ASSERT_EQ(hardware.exit_code, 0) << hardware.output;
  const nlohmann::json a = nlohmann::json::parse(ahead.output), h = nlohmann::json::parse(hardware.output);
  EXPECT_EQ(a["gemv_prefetch"], "ahead");
  EXPECT_EQ(h["gemv_prefetch"], "hardware");
  EXPECT_EQ(a["generated_ids"], h["generated_ids"]);
  EXPECT_FALSE(a["gemm_isa"].get<std::string>().empty());

  // An unknown value is reported and the CPU's default used.
  const auto bad = RunCli("generate --model " + TinyModelDir("qwen3_moe") + " --prompt-ids 1,2 --max-new-tokens 1 --json",
                          "env ZIPMOE_GEMV_PREFETCH=sideways");
  ASSERT_EQ(bad.exit_code, 0) << bad.output;
  EXPECT_NE(bad.output.find("ZIPMOE_GEMV_PREFETCH=sideways"), std::string::npos) << bad.output;
}

TEST(GenerateCliTest, ErrorsAreReported) {
  testing::TempDir tmp;
  auto r = RunCli("generate --model " + tmp.path() + " --prompt-ids 1,2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("NotFound"), std::string::npos) << r.output;

  r = RunCli("generate --model " + TinyModelDir("mixtral") + " --prompt-ids 1,x,3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("'x'"), std::string::npos) << r.output;

  testing::CopyModelWithConfig(TinyModelDir("mixtral"), tmp.Sub("m"),
                               [](nlohmann::json& c) { c["max_position_embeddings"] = 2; });
  r = RunCli("generate --model " + tmp.Sub("m") + " --prompt-ids 1,2,3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("3 tokens"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("max_position_embeddings 2"), std::string::npos) << r.output;

  // A NaN temperature or top-p sampled the least likely token whatever the seed; --threads 100000 hung;
  // a budget of 2^64 bytes or more wrapped to 0; a negative one was an "unknown unit".
  for (const char* flags : {"--temperature nan", "--top-p nan", "--temperature inf", "--threads 100000",
                            "--memory-budget 16777217TiB", "--memory-budget -5MiB",
                            "--trace-events /nonexistent-zipmoe-dir/t.json"}) {
    r = RunCli("generate --model " + TinyModelDir("mixtral") + " --prompt-ids 1 --max-new-tokens 1 " + flags);
    EXPECT_NE(r.exit_code, 0) << flags;
    const std::string flag = std::string(flags).substr(0, std::string(flags).find(' '));
    EXPECT_NE(r.output.find(flag), std::string::npos) << flags << ": " << r.output;
    EXPECT_EQ(r.output.find("unknown unit"), std::string::npos) << flags << ": " << r.output;
  }
}

// Overwrites every byte of tensor `name` in safetensors file `file` with `pattern`, repeated.
void FillTensor(const std::string& file, const std::string& name, const std::string& pattern) {
  std::string bytes = testing::ReadAll(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const nlohmann::json h = nlohmann::json::parse(bytes.substr(8, header));
  ASSERT_TRUE(h.contains(name)) << name;
  const uint64_t begin = h[name]["data_offsets"][0], end = h[name]["data_offsets"][1];
  for (uint64_t i = begin; i < end; ++i) bytes[8 + header + i] = pattern[(i - begin) % pattern.size()];
  testing::WriteAll(file, bytes);
}

// gpt-oss's fused MXFP4 experts with a NaN scale (E8M0 0xFF): refused at load naming the tensor and
// block, as compress refuses them (served, every logit was NaN and the answer token 0 forever).
TEST(GenerateCliTest, NanMxfp4ScalesAreRefusedAtLoad) {
  testing::TempDir tmp;
  std::filesystem::copy(TinyModelDir("gpt_oss"), tmp.Sub("m"), std::filesystem::copy_options::recursive);
  FillTensor(tmp.Sub("m/model.safetensors"), "model.layers.1.mlp.experts.down_proj_scales", {'\xFF'});
  const auto r = RunCli("generate --model " + tmp.Sub("m") + " --prompt-ids 1,2 --max-new-tokens 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("down_proj"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("NaN"), std::string::npos) << r.output;
}

// A step whose every logit is NaN (here a NaN final norm weight) fails the sequence, naming the cause,
// where the sampler, which skips NaN logits, used to answer token 0 forever.
TEST(GenerateCliTest, AllNanLogitsFailTheSequence) {
  testing::TempDir tmp;
  std::filesystem::copy(TinyModelDir("qwen2_moe"), tmp.Sub("m"), std::filesystem::copy_options::recursive);
  FillTensor(tmp.Sub("m/model.safetensors"), "model.norm.weight", {'\xC0', '\x7F'});  // BF16 NaN 0x7fc0, LE
  for (const char* sampling : {"", " --temperature 0.8 --seed 3"}) {
    const auto r = RunCli("generate --model " + tmp.Sub("m") + " --prompt-ids 1,2 --max-new-tokens 3" + sampling);
    EXPECT_NE(r.exit_code, 0) << sampling;
    EXPECT_NE(r.output.find("NaN"), std::string::npos) << sampling << ": " << r.output;
  }
}

// --trace-events: the run's timeline as Chrome trace JSON, with the forward steps, the layers, the
// waits for experts and, under a memory budget, the runtime's chunk reads and decodes; the logits do
// not change.
// --no-mmap copies the weights into anonymous memory (and says so); the logits are the same bytes.
TEST(GenerateCliTest, NoMmapSaysWhereTheWeightsWentAndChangesNoLogit) {
  testing::TempDir tmp;
  const std::string common = "generate --model " + TinyModelDir("qwen2_moe") +
                             " --prompt-ids 4,8,15,16 --max-new-tokens 3 --ignore-eos --threads 1";
  auto mapped = RunCli(common + " --logits-out " + tmp.Sub("a.bin"));
  auto copied = RunCli(common + " --no-mmap --logits-out " + tmp.Sub("b.bin"));
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  ASSERT_EQ(copied.exit_code, 0) << copied.output;
  EXPECT_EQ(testing::ReadAll(tmp.Sub("a.bin")), testing::ReadAll(tmp.Sub("b.bin")));
  EXPECT_EQ(mapped.output.find("I: weights:"), std::string::npos) << mapped.output;
  EXPECT_NE(copied.output.find("in anonymous memory, 0.0 MiB mapped from the files"), std::string::npos) << copied.output;
}

TEST(GenerateCliTest, TraceEventsRecordTheRunWithoutChangingIt) {
  testing::TempDir tmp;
  const std::string common = "generate --model " + TinyCompressedDir("qwen2_moe") +
                             " --prompt-ids 4,8,15,16 --max-new-tokens 3 --ignore-eos --threads 1 --memory-budget 30%";
  auto plain = RunCli(common + " --logits-out " + tmp.Sub("a.bin"));
  auto traced = RunCli(common + " --logits-out " + tmp.Sub("b.bin") + " --trace-events " + tmp.Sub("t.json"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(traced.exit_code, 0) << traced.output;
  EXPECT_EQ(testing::ReadAll(tmp.Sub("a.bin")), testing::ReadAll(tmp.Sub("b.bin")));
  EXPECT_NE(traced.output.find("written to " + tmp.Sub("t.json")), std::string::npos) << traced.output;
  const nlohmann::json doc = nlohmann::json::parse(testing::ReadAll(tmp.Sub("t.json")));
  std::map<std::string, int> spans;  // category -> count
  int steps = 0;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans[e["cat"].get<std::string>()];
    if (e["cat"] == "step") ++steps;
    EXPECT_GE(e["dur"].get<double>(), 0.0);
  }
  EXPECT_EQ(steps, 3);  // the prefill and two decode steps (the last token is not fed)
  for (const char* cat : {"layer", "expert", "io", "decode"}) EXPECT_GT(spans[cat], 0) << cat;
  EXPECT_EQ(doc["otherData"]["process"], "zipmoe generate");
}

// --device-assignment greedy on a CPU-only machine: said so, nothing assigned, the same tokens and
// logits as without it; an unknown mode is named.
TEST(GenerateCliTest, DeviceAssignmentDegeneratesOnTheCpu) {
  testing::TempDir tmp;
  const std::string common = "generate --model " + TinyModelDir("qwen2_moe") +
                             " --prompt-ids 4,8,15,16 --max-new-tokens 3 --ignore-eos --threads 1 --json";
  auto plain = RunCli(common + " --logits-out " + tmp.Sub("a.bin") + " 2>/dev/null");
  auto greedy = RunCli(common + " --device-assignment greedy --logits-out " + tmp.Sub("b.bin"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  EXPECT_NE(greedy.output.find("no accelerator"), std::string::npos) << greedy.output;
  EXPECT_EQ(testing::ReadAll(tmp.Sub("a.bin")), testing::ReadAll(tmp.Sub("b.bin")));
  const size_t brace = greedy.output.find("{\"");
  ASSERT_NE(brace, std::string::npos) << greedy.output;
  const nlohmann::json j = nlohmann::json::parse(greedy.output.substr(brace));
  EXPECT_EQ(j["device_assignment"]["accelerator"], false);
  EXPECT_EQ(j["device_assignment"]["gpu_experts"], 0);
  EXPECT_EQ(j["generated_ids"], nlohmann::json::parse(plain.output)["generated_ids"]);

  auto bad = RunCli(common + " --device-assignment optimal");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--device-assignment: unknown value 'optimal'"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zipmoe

namespace zipmoe {
namespace {

TEST(GenerateCliTest, IgnoreEosGeneratesExactlyMaxNewTokensWithTheSamePrefix) {
  const std::string dir = testing::TinyModelDir("qwen2_moe");
  // Long enough that the tiny random model emits an EOS id on most prompts; asserted below either way.
  const std::string common = "generate --model " + dir + " --prompt-ids 7,8,9 --max-new-tokens 24 --threads 2 --json";
  const auto stop = testing::RunCli(common + " 2>/dev/null");
  const auto go = testing::RunCli(common + " --ignore-eos 2>/dev/null");
  ASSERT_EQ(stop.exit_code, 0) << stop.output;
  ASSERT_EQ(go.exit_code, 0) << go.output;
  const auto a = nlohmann::json::parse(stop.output)["generated_ids"].get<std::vector<int>>();
  const auto b = nlohmann::json::parse(go.output)["generated_ids"].get<std::vector<int>>();
  EXPECT_EQ(b.size(), 24u);
  ASSERT_LE(a.size(), b.size());
  EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "greedy tokens before EOS must not change";
}

}  // namespace
}  // namespace zipmoe

namespace zipmoe {
namespace {

TEST(GenerateCliTest, TraceOutRecordsEveryStepAndLayerAndFeedsThePlanner) {
  testing::TempDir tmp;
  const std::string dir = testing::TinyCompressedDir("qwen2_moe");  // 4 MoE layers, 16 experts, top-4
  const auto r = testing::RunCli("generate --model " + dir + " --prompt-ids 5,17,300 --max-new-tokens 3 --ignore-eos "
                                 "--threads 2 --json --trace-out " + tmp.Sub("t.jsonl") + " 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(testing::ReadAll(tmp.Sub("t.jsonl")));
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(lines, line);) records.push_back(nlohmann::json::parse(line));
  // Steps: the 3-token prefill, then 2 fed-back tokens (the 3rd generated token is not fed) -> 3 x 4 layers.
  ASSERT_EQ(records.size(), 12u);
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& rec = records[i];
    EXPECT_EQ(rec["step"].get<int>(), static_cast<int>(i / 4));
    EXPECT_EQ(rec["layer"].get<int>(), static_cast<int>(i % 4));
    const auto experts = rec["experts"].get<std::vector<int>>();
    const auto tokens = rec["tokens"].get<std::vector<int>>();
    ASSERT_EQ(experts.size(), tokens.size());
    EXPECT_TRUE(std::is_sorted(experts.begin(), experts.end()));
    const int n_tokens = i < 4 ? 3 : 1;
    EXPECT_EQ(std::accumulate(tokens.begin(), tokens.end(), 0), n_tokens * 4) << rec.dump();
    if (n_tokens == 1) {
      EXPECT_EQ(experts.size(), 4u) << rec.dump();
    }
  }
  const auto plan = testing::RunCli("plan --model " + dir + " --memory-budget 256KiB --json --trace " + tmp.Sub("t.jsonl"));
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_NE(plan.output.find("\"workload\""), std::string::npos) << plan.output;
  EXPECT_EQ(plan.output.find("\"workload\":\"uniform\""), std::string::npos) << "a trace was given: " << plan.output;
}

}  // namespace
}  // namespace zipmoe

namespace zipmoe {
namespace {

// --prompts-file: a mix of real prompts (strings and ShareGPT conversations) as the sequences of a batch.
TEST(GenerateCliTest, PromptsFileFeedsEachSequenceItsOwnPromptAndBadFilesAreNamed) {
  testing::TempDir tmp;
  const std::string dir = testing::TinyModelDir("qwen2_moe");
  const std::vector<std::string> texts = {"Tell me about lighthouses.", "How do I sort a list in Python?",
                                          "hi"};
  nlohmann::json file = nlohmann::json::array();
  file.push_back(texts[0]);
  file.push_back({{"id", "x"},
                  {"conversations", {{{"from", "gpt"}, {"value", "ignored"}}, {{"from", "human"}, {"value", texts[1]}}}}});
  file.push_back(texts[2]);
  const std::string path = tmp.Sub("prompts.json");
  testing::WriteAll(path, file.dump());
  const std::string common = " --max-new-tokens 3 --ignore-eos --threads 2 --json 2>/dev/null";

  // Alone: each prompt's ids and greedy tokens.
  std::vector<nlohmann::json> alone;
  for (const std::string& t : texts) {
    const auto r = testing::RunCli("generate --model " + dir + " --prompt '" + t + "'" + common);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    alone.push_back(nlohmann::json::parse(r.output));
  }
  // Batch of 3 from index 1 wraps around: prompts 1, 2, 0.
  const auto r = testing::RunCli("generate --model " + dir + " --prompts-file " + path +
                                 " --prompt-index 1 --batch 3" + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["prompt_ids"], alone[1]["prompt_ids"]);        // the first sequence is prompt 1 (the human turn)
  EXPECT_EQ(j["generated_ids"], alone[1]["generated_ids"]);  // batching does not change its greedy tokens
  EXPECT_EQ(j["prompt_tokens_total"].get<size_t>(),
            alone[0]["prompt_ids"].size() + alone[1]["prompt_ids"].size() + alone[2]["prompt_ids"].size());
  EXPECT_EQ(j["generated_tokens_total"].get<size_t>(), 9u);

  // Errors name the file, the item or the index.
  auto bad = testing::RunCli("generate --model " + dir + " --prompts-file " + path + " --prompt-index 3");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--prompt-index 3 is outside " + path + " (3 prompts)"), std::string::npos) << bad.output;
  testing::WriteAll(tmp.Sub("obj.json"), R"({"prompts": []})");
  bad = testing::RunCli("generate --model " + dir + " --prompts-file " + tmp.Sub("obj.json"));
  EXPECT_NE(bad.output.find("expected a JSON array"), std::string::npos) << bad.output;
  testing::WriteAll(tmp.Sub("nohuman.json"), R"(["ok", {"conversations": [{"from": "gpt", "value": "x"}]}])");
  bad = testing::RunCli("generate --model " + dir + " --prompts-file " + tmp.Sub("nohuman.json"));
  EXPECT_NE(bad.output.find(tmp.Sub("nohuman.json") + ": item 1 has no"), std::string::npos) << bad.output;
  testing::WriteAll(tmp.Sub("trunc.json"), R"(["ok", "cut)");
  bad = testing::RunCli("generate --model " + dir + " --prompts-file " + tmp.Sub("trunc.json"));
  EXPECT_NE(bad.output.find("not valid JSON"), std::string::npos) << bad.output;
  bad = testing::RunCli("generate --model " + dir + " --prompts-file " + path + " --prompt hi");
  EXPECT_NE(bad.output.find("give one of --prompt, --prompt-ids or --prompts-file"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace zipmoe
