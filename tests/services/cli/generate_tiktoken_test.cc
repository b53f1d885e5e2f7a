// End to end through the CLI: a checkpoint that ships tiktoken.model + tokenization_*.py instead of
// tokenizer.json (as Moonlight-16B-A3B and Kimi-K2 do) serves text prompts: `generate --prompt` encodes
// with the tiktoken files (known ids from the small rank table of tests/common/tiktoken_test_util.h),
// decodes the generated ids, and `compress` carries the files so the compressed directory does the same.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/tokenizer/tokenizer.h"
#include "tests/common/tiktoken_test_util.h"
#include "tests/test_util.h"

namespace zipmoe {
namespace {

using nlohmann::json;
using testing::CachedSynth;
using testing::RunCli;
using testing::TempDir;

json Generate(const std::string& model, const std::string& prompt) {
  auto r = RunCli(fmt::format("generate --model {} --prompt '{}' --max-new-tokens 3 --ignore-eos --threads 1 --json "
                              "2>/dev/null",
                              model, prompt));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t brace = r.output.find('{');
  return brace == std::string::npos ? json() : json::parse(r.output.substr(brace));
}

TEST(GenerateTiktoken, TextPromptsEncodeWithTheTiktokenFilesBeforeAndAfterCompress) {
  TempDir tmp;
  const std::string hf = tmp.Sub("moonlight");
  // A tiny deepseek_v3 (Moonlight's architecture) with its tokenizer.json replaced by tiktoken files.
  std::filesystem::copy(CachedSynth("--arch deepseek_v3 --preset tiny --seed 5"), hf,
                        std::filesystem::copy_options::recursive);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"})
    std::filesystem::remove(hf + "/" + name);
  tokenizer::test::WriteTiktokenFiles(hf, tokenizer::test::MoonshotTokenizerConfig());

  // hello (259), " world" (263), <|im_end|> (267), Han apart from letters: 中 = E4 B8 (264) AD, then a b.
  const std::vector<int32_t> want = {259, 263, 267, 264, 0xAD, 'a', 'b'};
  const json from_hf = Generate(hf, "hello world<|im_end|>中ab");
  ASSERT_TRUE(from_hf.contains("prompt_ids")) << from_hf.dump();
  EXPECT_EQ(from_hf["prompt_ids"].get<std::vector<int32_t>>(), want);
  ASSERT_EQ(from_hf["generated_ids"].size(), 3u);

  // The text is the tiktoken decode of the generated ids (special ids skipped).
  auto tok = Tokenizer::LoadDir(hf);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(from_hf["text"].get<std::string>(),
            (*tok)->Decode(from_hf["generated_ids"].get<std::vector<int32_t>>(), /*skip_special_tokens=*/true));

  const std::string packed = tmp.Sub("moonlight.zipmoe");
  auto c = RunCli(fmt::format("compress {} {} --shards 2", hf, packed));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_TRUE(std::filesystem::exists(packed + "/tiktoken.model"));
  EXPECT_TRUE(std::filesystem::exists(packed + "/tokenization_moonshot.py"));
  const json from_packed = Generate(packed, "hello world<|im_end|>中ab");
  EXPECT_EQ(from_packed["prompt_ids"], from_hf["prompt_ids"]);
  EXPECT_EQ(from_packed["generated_ids"], from_hf["generated_ids"]);
  EXPECT_EQ(from_packed["text"], from_hf["text"]);
}

}  // namespace
}  // namespace zipmoe
