// Tokenizers that ship as a tiktoken BPE file instead of tokenizer.json: Moonshot's Moonlight-16B-A3B
// and Kimi-K2 (deepseek_v3 / kimi_k2 checkpoints) carry `tiktoken.model` (mergeable ranks),
// `tokenization_*.py` (its `TikTokenTokenizer` with the split pattern `pat_str` and
// `num_reserved_special_tokens`) and tokenizer_config.json (`added_tokens_decoder`: the special
// tokens after the ranks, bos/eos, the chat template).
//
// Semantics followed: openai/tiktoken's CoreBPE (src/lib.rs `encode`, `byte_pair_merge`), which the
// checkpoints' tokenization_*.py calls as `Encoding(pat_str, mergeable_ranks, special_tokens)` with
// `allowed_special="all"`:
//   - the text is split on special tokens, each piece between them on every match of `pat_str`
//     (text no alternative matches is dropped, as tiktoken's find_iter);
//   - a piece that is itself a token is that token; otherwise its bytes are merged pairwise, always the
//     adjacent pair whose concatenation has the lowest rank, the leftmost among equal ranks, until no
//     concatenation is a token. Every byte must have a rank (the 256 single bytes).
// Token strings (IdToToken, TokenToId, the ByteLevel decoder) are the GPT-2 byte-to-unicode mapping of
// the token's bytes, as the checkpoints' `TikTokenTokenizer.decoder` builds them.
//   - where the Python file's encode() cuts long inputs before tiktoken sees them (tokenization_kimi.py,
//     as Llama 3's tokenizer.py: TIKTOKEN_MAX_ENCODE_CHARS = 400_000, MAX_NO_WHITESPACES_CHARS =
//     25_000), each text between special tokens is cut the same way first (SplitLongRuns).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tokenizer/tokenizer_model.h"

namespace zipmoe::tokenizer {

class TiktokenModel : public Model {
 public:
  // Parses a tiktoken BPE file: one "<base64 token bytes> <rank>" per line (blank lines skipped), as
  // tiktoken.load.load_tiktoken_bpe. Errors (naming `path` and the line): kNotFound/kIoError
  // (unreadable), kCorruption (a malformed line, bad base64, an empty token, a rank outside
  // [0, 2^31 - 2^20), a token or rank given twice, a single byte without a rank).
  static Result<std::unique_ptr<TiktokenModel>> Load(const std::string& path);
  // The same from the file's text; `where` names it in messages.
  static Result<std::unique_ptr<TiktokenModel>> Parse(std::string_view text, const std::string& where);

  // Appends the ids of `piece` (raw UTF-8 bytes of one pre-tokenized piece; not byte-level mapped).
  Status Tokenize(std::string_view piece, std::vector<int32_t>* ids) const override;
  // Id of a byte-level token string ("Ġhello"), or nullopt.
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  // Byte-level token string of `id`, or nullptr if no rank has that id.
  const std::string* IdToToken(int32_t id) const override;
  // 1 + the largest rank.
  int32_t id_limit() const override { return static_cast<int32_t>(token_of_id_.size()); }
  // Number of ranks in the file (tokenization_*.py's num_base_tokens).
  int32_t n_ranks() const { return n_ranks_; }

 private:
  TiktokenModel() = default;
  std::unordered_map<std::string, int32_t> rank_of_bytes_;  // token bytes -> rank (= id)
  std::unordered_map<std::string, int32_t> id_of_token_;    // byte-level string -> id
  std::vector<std::string> token_of_id_;                    // "" where no rank
  std::vector<bool> id_used_;
  int32_t n_ranks_ = 0;
};

// The value of `pat_str` assigned in a tokenizer's Python source (tokenization_kimi.py /
// tokenization_moonshot.py): a string literal, adjacent literals, or `"<sep>".join([literal, ...])`,
// raw (r"...", r"""...""") or plain (Python's escapes \\ \' \" \n \r \t \uXXXX decoded; other escapes
// kept with their backslash, as Python does). Errors: kCorruption naming `where` when no
// `pat_str = ...` is found or its value is not one of those forms.
Result<std::string> ExtractTiktokenPattern(std::string_view python_source, const std::string& where);

// The integer assigned to `name` in Python source (`num_reserved_special_tokens = 256`, `X = 400_000`),
// or nullopt.
std::optional<int64_t> ExtractPythonInt(std::string_view python_source, std::string_view name);

// Rewrites the character-class set operations of Rust's regex syntax (which tiktoken's fancy-regex
// patterns may use; PCRE2 10.42 has none) into lookaheads PCRE2 accepts, matching the same single
// characters: [A&&B] -> (?:(?=B')A') and [A--B] -> (?:(?!B')A'), where A' is [A] and B' is B when B is
// a bracketed class, else [B]. Other text is copied unchanged. Errors: kInvalidArgument naming `where`
// for a class with more than one set operation or a nested class inside A.
Result<std::string> TranslateClassSetOperations(std::string_view pattern, const std::string& where);

// Python's str.isspace for one code point: Unicode category Zs or bidirectional class WS, B or S
// (U+0009-000D, U+001C-001F, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F,
// U+205F, U+3000).
bool PythonIsSpace(char32_t cp);

// The cut of tokenization_kimi.py's encode(): `text` (valid UTF-8) in chunks of `max_chars` code
// points (0: one chunk), each chunk cut where a run of whitespace or of non-whitespace characters
// (PythonIsSpace) grows past `max_run` (0: never), as its _split_whitespaces_or_nonwhitespaces: a cut
// piece ends just before the run's (max_run + 1)-th character and the next starts there. Every piece
// is returned, an empty text as one empty piece.
std::vector<std::string_view> SplitLongRuns(std::string_view text, int64_t max_chars, int64_t max_run);

// What a model directory with tiktoken.model needs besides the model: a tokenizer.json object with
// its pre_tokenizer (Split on `pat_str`, matches kept, the rest dropped), decoder (ByteLevel) and
// added_tokens (every special id from n_ranks on: tokenizer_config.json's `added_tokens_decoder`, the
// others "<|reserved_token_<id>|>", num_reserved_special_tokens of them or up to the largest
// configured id), and the path of the Python file `pat_str` came from.
struct TiktokenDirectory {
  std::unique_ptr<TiktokenModel> model;
  nlohmann::json tokenizer_json;
  std::string pattern_source;
  // SplitLongRuns's limits from the Python file (TIKTOKEN_MAX_ENCODE_CHARS, MAX_NO_WHITESPACES_CHARS);
  // 0 where it sets none.
  int64_t max_encode_chars = 0;
  int64_t max_run_chars = 0;
};

// Reads DIR/tiktoken.model and the pattern from the tokenization_*.py that tokenizer_config.json's
// auto_map.AutoTokenizer names (else the only tokenization_*.py in DIR that assigns pat_str).
// `config` is the parsed tokenizer_config.json (null if none). Errors: kNotFound naming DIR when it
// has no tiktoken.model or no Python file with pat_str; kCorruption / kInvalidArgument as Load,
// ExtractTiktokenPattern, TranslateClassSetOperations and a malformed added_tokens_decoder entry
// (naming the id), or an added token whose id is a rank.
Result<TiktokenDirectory> LoadTiktokenDirectory(const std::string& dir, const nlohmann::json& config);

}  // namespace zipmoe::tokenizer
