// The executor's error paths (services/executor/generator.h): unsupported model types, missing
// tensors, shape mismatches, over-long prompts, tokens outside the vocabulary and non-model directories.
#include "services/executor/generator.h"

#include <gtest/gtest.h>

#include "common/resident_expert_provider.h"
#include "common/checkpoint/safetensors.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"
#include "tests/test_util.h"

namespace zipmoe::executor {
namespace {

using testing::TinyCompressedDir;
using testing::TinyModelDir;
using test::MakeGenerator;
using test::CreateError;
using test::kPrompt;

TEST(ExecutorErrorTest, UnsupportedModelTypeNamesIt) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("mixtral"), tmp.Sub("m"), [](nlohmann::json& c) { c["model_type"] = "jamba"; });
  const Status st = CreateError(tmp.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("jamba"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("qwen2_moe, mixtral, qwen3_moe, olmoe, deepseek_v2"), std::string::npos);
}

TEST(ExecutorErrorTest, MissingTensorNamesTensorAndDirectory) {
  for (const std::string& src : {TinyModelDir("qwen2_moe"), TinyCompressedDir("qwen2_moe")}) {
    testing::TempDir tmp;
    // One layer more than the weights hold: layer 4's tensors are missing.
    testing::CopyModelWithConfig(src, tmp.Sub("m"), [](nlohmann::json& c) { c["num_hidden_layers"] = 5; });
    const Status st = CreateError(tmp.Sub("m"));
    EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
    EXPECT_NE(st.message().find("model.layers.4."), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(tmp.Sub("m")), std::string::npos) << st.message();
  }
}

TEST(ExecutorErrorTest, ShapeMismatchNamesTensorAndShapes) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("deepseek_v2"), tmp.Sub("m"), [](nlohmann::json& c) { c["vocab_size"] = 2047; });
  Status st = CreateError(tmp.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("model.embed_tokens.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2048, 128]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2047, 128]"), std::string::npos) << st.message();

  // An expert whose width differs from moe_intermediate_size (compressed dir: from the manifest).
  testing::TempDir tmp2;
  testing::CopyModelWithConfig(TinyCompressedDir("qwen3_moe"), tmp2.Sub("m"),
                               [](nlohmann::json& c) { c["moe_intermediate_size"] = 32; });
  st = CreateError(tmp2.Sub("m"));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("mlp.experts.0.gate_proj.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[64, 128]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[32, 128]"), std::string::npos) << st.message();
}

TEST(ExecutorErrorTest, PromptLongerThanMaxPositionsNamesBothLengths) {
  testing::TempDir tmp;
  testing::CopyModelWithConfig(TinyModelDir("qwen2_moe"), tmp.Sub("m"),
                               [](nlohmann::json& c) { c["max_position_embeddings"] = 8; });
  auto g = MakeGenerator(tmp.Sub("m"));
  ASSERT_TRUE(g);
  auto r = g->Generate({kPrompt}, GenerationParams{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("12 tokens"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("max_position_embeddings 8"), std::string::npos) << r.status().message();
  // A prompt that fits generates until the positions run out.
  GenerationParams params;
  params.max_new_tokens = 10;
  params.stop_on_eos = false;
  auto ok = g->Generate({{1, 2, 3, 4, 5, 6}}, params);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->front().generated_ids.size(), 3u);  // fed positions 6 and 7, then full
}

TEST(ExecutorErrorTest, TokenOutsideVocabularyAndEmptyPrompt) {
  auto g = MakeGenerator(TinyModelDir("olmoe"));
  ASSERT_TRUE(g);
  auto r = g->Generate({{1, 2, 5000}}, GenerationParams{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("5000"), std::string::npos);
  auto e = g->Generate({{}}, GenerationParams{});
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  // The generator stays usable after an error.
  EXPECT_TRUE(g->ForwardChunks({{1, 2}}).ok());
}

TEST(ExecutorErrorTest, NotAModelDirectory) {
  testing::TempDir tmp;
  const Status st = CreateError(tmp.path());
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find(tmp.path()), std::string::npos);
}

}  // namespace
}  // namespace zipmoe::executor
