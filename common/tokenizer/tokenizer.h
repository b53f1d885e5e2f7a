// Tokenizer: a Hugging Face tokenizer.json tokenizer in C++ (no torch, no Python), following the HF
// `tokenizers` library: byte-level BPE as Qwen, DeepSeek, OLMoE and GPT-2 use it, the
// SentencePiece-style BPE with byte fallback of Mixtral/Llama, and the SentencePiece Unigram model
// of T5 / Switch Transformers (tokenizer_unigram.h; Metaspace pre-tokenizer and decoder,
// <extra_id_N> sentinels as added tokens, TemplateProcessing's "</s>"); and the tiktoken BPE of
// checkpoints that ship tiktoken.model instead (LoadDir, tokenizer_tiktoken.h).
//
// Encode pipeline (HF order):
//   1. invalid UTF-8 in the input is replaced first: each maximal ill-formed subsequence becomes
//      U+FFFD (as Python's bytes.decode(errors="replace") and Rust's from_utf8_lossy), so
//      Decode(Encode(s)) == Utf8Lossy(s) for a lossless tokenizer;
//   2. the text is split on added tokens (leftmost-longest; specials map straight to their id;
//      single_word / lstrip / rstrip honoured); tokens with normalized=true are matched after
//      normalization;
//   3. each remaining segment is normalized, pre-tokenized and encoded by the model
//      (tokenizer_pretokenizer.h; tokenizer_bpe.h or tokenizer_unigram.h);
//   4. with add_special_tokens, the post-processor's ids are added (TemplateProcessing,
//      BertProcessing, RobertaProcessing, Sequence; ByteLevel adds none). If tokenizer_config.json
//      sets add_bos_token / add_eos_token, that choice replaces the post-processor, as
//      transformers' LlamaTokenizerFast.update_post_processor does.
// Decode: ids -> token strings (unknown ids are skipped; special tokens too if asked) -> decoder
// (tokenizer_decoder.h) -> concatenation; bytes that are not valid UTF-8 come out as U+FFFD.
// Not supported: WordPiece/WordLevel models, offsets, truncation/padding, pair sequences, BPE dropout, transformers' clean_up_tokenization_spaces.
//
// Thread-safety: a loaded Tokenizer is immutable (the BPE word cache is internally locked), so
// Encode/Decode/ApplyChatTemplate may be called from many threads at once. A StreamDecoder
// belongs to one stream (one thread) and must not outlive its Tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tokenizer/tokenizer_chat.h"

namespace zipmoe {

namespace tokenizer {
class Model;  // tokenizer_model.h
}  // namespace tokenizer

class Tokenizer {
 public:
  // Loads `tokenizer_json_path` and, if it exists in the same directory, tokenizer_config.json
  // (add_bos_token/add_eos_token, bos_token/eos_token, chat_template).
  // Errors: kNotFound (no tokenizer.json), kIoError (unreadable), kCorruption naming the file and
  // field (malformed JSON, unknown model type, merge of a token not in the vocab, malformed
  // Unigram vocab or unk_id, added token without id), kInvalidArgument naming an unsupported normalizer/pre_tokenizer/decoder/
  // post_processor type or a regex PCRE2 rejects.
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& tokenizer_json_path);

  // As Load, from parsed JSON. `tokenizer_config` may be null (no config); `source` names the
  // tokenizer in error messages.
  static Result<std::unique_ptr<Tokenizer>> FromJson(const nlohmann::json& tokenizer_json,
                                                     const nlohmann::json& tokenizer_config,
                                                     const std::string& source);

  // The tokenizer of a model directory: DIR/tokenizer.json (Load), else a tiktoken tokenizer from
  // DIR/tiktoken.model, the tokenization_*.py that sets its split pattern and tokenizer_config.json's
  // special tokens (Moonlight-16B-A3B, Kimi-K2; tokenizer_tiktoken.h), with the same config and
  // chat-template handling. Errors: kNotFound naming DIR when it has neither file; as Load or
  // tokenizer::LoadTiktokenDirectory.
  static Result<std::unique_ptr<Tokenizer>> LoadDir(const std::string& dir);
  // Whether DIR has a tokenizer LoadDir reads (tokenizer.json or tiktoken.model).
  static bool DirHasTokenizer(const std::string& dir);

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  // Token ids of `text` (any bytes; see step 1 above). add_special_tokens adds the
  // post-processor's BOS/EOS (Mixtral/DeepSeek: BOS; Qwen: nothing). Special-token text inside
  // `text` (e.g. "<|im_start|>") is always recognised, as HF does by default.
  // Errors: kInternal if a regex fails while matching; kCorruption if the vocab lacks unk_token.
  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens = false) const;

  // Text of `ids` (valid UTF-8; incomplete or invalid byte sequences become U+FFFD).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  // The same bytes before that replacement: a byte-level token that is part of a UTF-8 sequence
  // comes back as its raw byte(s) (what /tokenize's pieces and logprobs' `bytes` report).
  std::string DecodeBytes(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  // 1 + the largest id of the vocab and the added tokens (the embedding rows it can address).
  int32_t vocab_size() const;
  // Id of a token string (added tokens first, then the model vocab).
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Token string of `id` (e.g. "Ġhello", "<|im_end|>", "<0x0A>"); "" for an id without a token.
  std::string IdToToken(int32_t id) const;
  // True for added tokens marked special.
  bool IsSpecialToken(int32_t id) const;
  // Ids of tokenizer_config.json's bos_token / eos_token, if set there.
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  // The parsed tokenizer_config.json, or null if there was none.
  const nlohmann::json& config() const;
  // ApplyChatTemplate(config(), ...) (tokenizer_chat.h). Encode its result with
  // add_special_tokens = false: the template already contains the BOS where the model wants one.
  Result<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                        bool add_generation_prompt) const;
  // The chat template (parsed once at load; a "tool_use" one when `tools` is a non-empty list and
  // the config has one) rendered with OpenAI message objects (tool_calls etc. pass through),
  // `tools` (null: none) and `extra_kwargs` (chat_template_kwargs such as enable_thinking; null:
  // none). Errors: as zipmoe::ApplyChatTemplate (tokenizer_chat.h).
  Result<std::string> ApplyChatTemplate(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_kwargs) const;
  // The text of the template ApplyChatTemplate renders (the "tool_use" one when `with_tools` and the
  // config has it); "" when the model has none. For reading its markers (the API's reasoning and
  // tool-call parser, services/api/chat_output_parser.h).
  std::string ChatTemplateSource(bool with_tools) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  // FromJson with the model given (null: parsed from tokenizer_json["model"]).
  static Result<std::unique_ptr<Tokenizer>> Build(const nlohmann::json& tokenizer_json,
                                                  std::unique_ptr<tokenizer::Model> model,
                                                  const nlohmann::json& tokenizer_config, const std::string& source);
  std::string DecodeJoined(const std::vector<int32_t>& ids, bool skip_special_tokens, bool keep_bytes) const;
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming generation: Step(id) returns the text that the new token
// completes, holding back text while the decoded tail is an incomplete UTF-8 sequence (it decodes
// to a trailing U+FFFD), e.g. the four byte tokens of "👋" give "", "", "", "👋". Flush() returns
// what is held back, with U+FFFD for bytes that never completed, and resets the stream.
// The concatenated output equals Decode() of all ids, except around ill-formed byte runs that a
// later token turns well-formed again (see StreamDecoder::Step). Works for every decoder because it
// re-decodes a short window of recent ids (the approach of HF's DecodeStream).
// Not thread-safe; `tokenizer` must outlive the StreamDecoder.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}
  // Skips every special token but those of `keep_special_ids`, which come out as their text (the
  // markers a chat-output parser reads, e.g. a special "[TOOL_CALLS]" or "</think>").
  StreamDecoder(const Tokenizer& tokenizer, std::vector<int32_t> keep_special_ids)
      : tokenizer_(&tokenizer), skip_special_tokens_(false), drop_special_(true),
        keep_special_(std::move(keep_special_ids)) {}

  // Text completed by `id`; "" while a character is incomplete. If the window's text no longer
  // starts with what was already emitted (an invalid byte run completed by a later byte), only
  // the part after the common prefix is emitted.
  std::string Step(int32_t id);
  // The held-back text (incomplete sequences as U+FFFD); the stream starts afresh afterwards.
  std::string Flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  bool drop_special_ = false;           // Step drops special ids not in keep_special_
  std::vector<int32_t> keep_special_;
  std::vector<int32_t> window_;  // ids since the start of the previously emitted chunk
  size_t prefix_count_ = 0;      // window_[0, prefix_count_) decode to prefix_
  std::string prefix_;           // Decode(window_[0, prefix_count_)), already emitted
};

}  // namespace zipmoe
