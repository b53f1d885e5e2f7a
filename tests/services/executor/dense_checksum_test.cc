// Dense tensors of a compressed directory are checked at load against the manifest's XXH64 (issue
// 15's reproduction: flipped bytes in dense.safetensors used to generate different tokens, rc 0).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "tests/test_util.h"

namespace zipmoe::testing {
namespace {

namespace fs = std::filesystem;

TEST(DenseChecksumTest, FlippedBytesInDenseTensorsFailTheLoadNamingTheTensor) {
  const std::string model = CachedSynth("--arch qwen2_moe --preset tiny --seed 7");
  const std::string compressed = CachedCompress(model);
  TempDir tmp;
  const std::string copy = tmp.Sub("copy");
  fs::copy(compressed, copy, fs::copy_options::recursive);
  const std::string args = fmt::format("generate --model {} --prompt-ids 5,17,300 --max-new-tokens 4 --threads 1", copy);
  const CommandResult clean = RunCli(args);
  ASSERT_EQ(clean.exit_code, 0) << clean.output;

  // XOR 0x40 into every 3001st byte of the last ~1.2 MB (or the last half) of the file: tensor data.
  const std::string dense_path = copy + "/dense.safetensors";
  std::string bytes = ReadAll(dense_path);
  ASSERT_GT(bytes.size(), 4096u);
  const size_t from = bytes.size() - std::min<size_t>(bytes.size() / 2, 1200000);
  for (size_t i = from; i < bytes.size(); i += 3001) bytes[i] = static_cast<char>(bytes[i] ^ 0x40);
  WriteAll(dense_path, bytes);
  const CommandResult damaged = RunCli(args);
  EXPECT_NE(damaged.exit_code, 0) << damaged.output;
  EXPECT_NE(damaged.output.find("dense.safetensors"), std::string::npos) << damaged.output;
  EXPECT_NE(damaged.output.find("checksum"), std::string::npos) << damaged.output;
  EXPECT_NE(damaged.output.find("tensor '"), std::string::npos) << damaged.output;
}

}  // namespace
}  // namespace zipmoe::testing
