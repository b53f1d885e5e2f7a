// BatchSession::AddSequence's `generated`: a sequence resumed after k tokens (what the HTTP front does
// when an executor dies mid-request) continues with the tokens and log-probabilities of an
// uninterrupted run, under seeded sampling with penalties and a constraint, on every architecture
// family (attention, MLA, Gated DeltaNet state); and the errors it refuses.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <vector>

#include "services/executor/generator.h"
#include "tests/services/executor/generator_test_util.h"
#include "tests/services/executor/test_models.h"

namespace zipmoe::executor {
namespace {

using testing::TinyModelDir;

// Records what it was asked to accept and bans one token id (so masking has an effect).
class RecordingConstraint : public TokenConstraint {
 public:
  explicit RecordingConstraint(int32_t banned) : banned_(banned) {}
  void Mask(float* logits, int64_t vocab) override {
    if (banned_ < vocab) logits[banned_] = -std::numeric_limits<float>::infinity();
  }
  void Accept(int32_t token) override { accepted.push_back(token); }
  std::vector<int32_t> accepted;

 private:
  int32_t banned_;
};

GenerationParams SampledParams(int64_t max_new) {
  GenerationParams params;
  params.max_new_tokens = max_new;
  params.stop_on_eos = false;
  params.logprobs = 2;
  params.sampling.temperature = 0.9f;
  params.sampling.top_p = 0.95f;
  params.sampling.top_k = 50;
  params.sampling.seed = 1234;
  params.sampling.presence_penalty = 0.3f;
  params.sampling.frequency_penalty = 0.2f;
  return params;
}

struct SequenceRun {
  std::vector<SampledToken> tokens;  // as the callback saw them
  GenerationResult result;
};

// One sequence alone in a session (stream 3), optionally resumed after `generated`.
SequenceRun RunOne(Generator& g, const std::vector<int32_t>& prompt, GenerationParams params,
           std::vector<int32_t> generated = {}) {
  SequenceRun run;
  auto session = g.NewSession();
  auto id = session->AddSequence(
      prompt, params, 3,
      [&run](const SampledToken& t) {
        run.tokens.push_back(t);
        return true;
      },
      std::move(generated));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  while (!session->empty()) {
    for (BatchSession::Finished& f : session->Step()) {
      EXPECT_TRUE(f.status.ok()) << f.status.ToString();
      run.result = std::move(f.result);
    }
  }
  return run;
}

class ResumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeTest, AResumedSequenceContinuesWithTheUninterruptedTokensAndLogprobs) {
  auto g = test::MakeGenerator(TinyModelDir(GetParam()));
  ASSERT_TRUE(g);
  const std::vector<int32_t> prompt = {5, 17, 300, 1000, 42, 7, 1999};
  constexpr int64_t kNew = 16;
  GenerationParams params = SampledParams(kNew);
  auto whole_constraint = std::make_shared<RecordingConstraint>(11);
  params.constraint = whole_constraint;
  const SequenceRun whole = RunOne(*g, prompt, params);
  ASSERT_EQ(whole.tokens.size(), static_cast<size_t>(kNew));
  ASSERT_EQ(whole.result.generated_ids.size(), static_cast<size_t>(kNew));
  // The run samples: a greedy run of the same prompt differs (else the seed would not be exercised).
  GenerationParams greedy = params;
  greedy.sampling.temperature = 0.0f;
  greedy.constraint = std::make_shared<RecordingConstraint>(11);
  EXPECT_NE(RunOne(*g, prompt, greedy).result.generated_ids, whole.result.generated_ids);
  for (size_t k : {size_t{1}, size_t{6}, size_t{kNew - 1}}) {
    SCOPED_TRACE(::testing::Message() << "resumed after " << k << " tokens");
    const std::vector<int32_t> before(whole.result.generated_ids.begin(),
                                      whole.result.generated_ids.begin() + static_cast<std::ptrdiff_t>(k));
    auto constraint = std::make_shared<RecordingConstraint>(11);
    GenerationParams resumed_params = params;
    resumed_params.constraint = constraint;
    const SequenceRun resumed = RunOne(*g, prompt, resumed_params, before);
    EXPECT_EQ(resumed.result.generated_ids, whole.result.generated_ids);
    EXPECT_EQ(resumed.result.prompt_ids, prompt);
    ASSERT_EQ(resumed.tokens.size(), kNew - k);  // the callback sees only the new tokens
    for (size_t i = 0; i < resumed.tokens.size(); ++i) {
      const SampledToken& want = whole.tokens[k + i];
      EXPECT_EQ(resumed.tokens[i].id, want.id) << i;
      EXPECT_EQ(resumed.tokens[i].logprob, want.logprob) << i;  // bit-equal: batch-invariant kernels
      ASSERT_EQ(resumed.tokens[i].top.size(), want.top.size());
      for (size_t j = 0; j < want.top.size(); ++j) {
        EXPECT_EQ(resumed.tokens[i].top[j].id, want.top[j].id);
        EXPECT_EQ(resumed.tokens[i].top[j].logprob, want.top[j].logprob);
      }
    }
    // The constraint accepted the earlier tokens first, then the new ones: the whole run's sequence.
    EXPECT_EQ(constraint->accepted, whole_constraint->accepted);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, ResumeTest, ::testing::Values("qwen2_moe", "deepseek_v2", "qwen3_next"));

TEST(ResumeTest, RefusesTooManyOrForeignTokensNamingThem) {
  auto g = test::MakeGenerator(TinyModelDir("qwen2_moe"));
  ASSERT_TRUE(g);
  auto session = g->NewSession();
  GenerationParams params = SampledParams(4);
  auto full = session->AddSequence({5, 17}, params, 0, nullptr, {1, 2, 3, 4});
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(full.status().ToString().find("max_new_tokens"), std::string::npos) << full.status().ToString();
  auto foreign = session->AddSequence({5, 17}, params, 0, nullptr, {1, -3});
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().ToString().find("generated token -3 (index 1)"), std::string::npos)
      << foreign.status().ToString();
  EXPECT_TRUE(session->empty());
}

}  // namespace
}  // namespace zipmoe::executor
