// Next-token selection from one row of logits, torch-free.
//   temperature <= 0: greedy (argmax; ties go to the lowest id).
//   otherwise, in the order of transformers' logits warpers: logits / temperature; keep the top_k
//   largest (0 = all); keep the smallest set of most probable tokens whose probability sum reaches
//   top_p (the token that crosses top_p is kept; at least one token); keep the tokens whose
//   probability is at least min_p times the most probable one's (transformers' MinPLogitsWarper,
//   after top-p as in its warper order); then draw from the renormalised softmax (double precision)
//   with a std::mt19937_64 stream.
// Ties in sorting go to the lowest id, so a draw depends only on (logits, params, seed, stream).
//
// A Sampler is one stream: not thread-safe; use one per sequence.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zipmoe::executor {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // >= 1: no nucleus filter
  uint64_t seed = 0;
  // OpenAI's penalties (API reference, "frequency_penalty"/"presence_penalty"), applied to the raw
  // logits before everything above: logit[t] -= count[t] * frequency_penalty + (count[t] > 0) *
  // presence_penalty, where count[t] is how often t occurs among the tokens this sequence has
  // generated so far (the prompt does not count, as in vLLM). 0 = off; they apply to greedy too.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI's logit_bias: {token id, bias in [-100, 100]} added to the raw logits before the penalties
  // and everything above (-100 bans a token in practice, 100 forces it). Empty = off.
  std::vector<std::pair<int32_t, float>> logit_bias;
  // vLLM's / transformers' repetition_penalty (CTRL, Keskar et al. 2019 §4.1; transformers'
  // RepetitionPenaltyLogitsProcessor, vLLM's apply_penalties): every token that occurs in the prompt or
  // among the generated tokens, once however often, has its logit divided by the penalty when it is > 0
  // and multiplied by it otherwise; after logit_bias, before the OpenAI penalties (vLLM's order). It
  // applies to greedy too. 1 = off; must be > 0 (< 1 favours repeats).
  float repetition_penalty = 1.0f;
  // min_p in [0, 1] (transformers' MinPLogitsWarper, vLLM's and llama.cpp's min_p): see the sampling
  // order above; 0 = off. No effect on greedy.
  float min_p = 0.0f;
};

// The logit adjustments of `params` applied in place to one row of raw logits [vocab] (float32), in
// vLLM's order: logit_bias (ids outside [0, vocab) skipped); repetition_penalty to each distinct token of
// `prompt_tokens` (sorted ascending, unique: PromptTokenSet) and of `generated`; then the OpenAI penalties,
// logit[t] -= generated[t] * frequency_penalty + presence_penalty for each generated token t.
// `generated`: token id -> how often this sequence has generated it.
void AdjustLogits(const SamplingParams& params, const std::vector<int32_t>& prompt_tokens,
                  const std::unordered_map<int32_t, int32_t>& generated, float* logits, int64_t vocab);
// Whether AdjustLogits would change a row: a bias, a repetition penalty with any token seen, or an OpenAI
// penalty with a generated token.
bool AdjustsLogits(const SamplingParams& params, bool any_prompt_token, bool any_generated);
// The distinct ids of `prompt`, sorted: what AdjustLogits' repetition penalty reads for the prompt.
std::vector<int32_t> PromptTokenSet(const std::vector<int32_t>& prompt);

class Sampler {
 public:
  // `stream` distinguishes the sequences of one request: sequence i of a batch uses stream i, so a
  // prompt samples the same tokens alone or in a batch at the same index.
  Sampler(const SamplingParams& params, uint64_t stream);

  // logits: [vocab] float32. Returns a token id in [0, vocab).
  int32_t Sample(const float* logits, int64_t vocab);

  bool greedy() const { return params_.temperature <= 0.0f; }

  // Moves the stream past `n` samples without computing them: every non-greedy Sample consumes
  // exactly one 64-bit draw, so Skip(n) then Sample gives what the (n+1)-th Sample would have given
  // (a sequence resumed after its first n tokens: BatchSession::AddSequence's `generated`).
  void Skip(uint64_t n);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;   // scratch
  std::vector<double> probs_;    // scratch
};

// Argmax with ties to the lowest index (NaN never wins).
int32_t Argmax(const float* logits, int64_t vocab);

}  // namespace zipmoe::executor
