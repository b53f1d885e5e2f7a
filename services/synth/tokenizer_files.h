// Per-architecture special tokens and the small tokenizer/generation JSON files of a synthetic
// checkpoint (tokenizer_config.json, generation_config.json). tokenizer.json itself is built by
// bpe_tokenizer_builder.h. Pure; thread-safe.
//
// Id layout: the tokenizer vocabulary is exactly config.vocab_size ids, dense 0..V-1. Special tokens
// take the first ids ("front": mixtral <unk>/<s>/</s> = 0/1/2, olmoe <|endoftext|>/<|padding|> = 0/1,
// as GPT-NeoX) or the last ids ("back": qwen <|endoftext|>/<|im_start|>/<|im_end|>, deepseek
// begin/end of sentence); byte-level BPE tokens fill the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace zipmoe::synth {

struct SpecialTokenLayout {
  int64_t vocab_size = 0;
  std::vector<std::string> front;  // ids 0 .. front.size()-1
  std::vector<std::string> back;   // ids vocab_size - back.size() .. vocab_size-1
  std::string bos_token;           // "" = the model has no BOS
  std::string eos_token;
  std::string pad_token;           // "" = none
  bool prepend_bos = false;        // the tokenizer's post-processor puts bos_token before each sequence

  // Id of a special token, or -1 if it is not one of front/back.
  int64_t IdOf(const std::string& token) const;
  int64_t n_special() const { return static_cast<int64_t>(front.size() + back.size()); }
  int64_t first_bpe_id() const { return static_cast<int64_t>(front.size()); }
};

// Errors: kInvalidArgument (unknown arch; vocab_size too small for 256 byte tokens + specials).
Result<SpecialTokenLayout> SpecialTokensForArch(const std::string& arch, int64_t vocab_size);

// tokenizer_config.json in the style of the real model's file (Qwen: Qwen2Tokenizer + ChatML
// chat_template; Mixtral/DeepSeek: LlamaTokenizerFast with add_bos_token; OLMoE: GPTNeoXTokenizer).
nlohmann::json TokenizerConfigJson(const std::string& arch, const SpecialTokenLayout& layout);

// generation_config.json: bos/eos (and pad where the real model sets it) from config.json.
nlohmann::json GenerationConfigJson(const nlohmann::json& config);

}  // namespace zipmoe::synth
