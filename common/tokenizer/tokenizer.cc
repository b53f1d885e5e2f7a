// Tokenizer: tokenizer.json loading, added-token splitting, encode/decode, post-processing, and
// the streaming decoder (see tokenizer.h).
#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/tokenizer/tokenizer_added.h"
#include "common/tokenizer/tokenizer_bpe.h"
#include "common/tokenizer/tokenizer_decoder.h"
#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_model.h"
#include "common/tokenizer/tokenizer_pretokenizer.h"
#include "common/tokenizer/tokenizer_tiktoken.h"
#include "common/tokenizer/tokenizer_unigram.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe {

using nlohmann::json;
using tokenizer::AddedSplit;
using tokenizer::AddedToken;
using tokenizer::AddedTokenMatcher;
using tokenizer::ConfigTokenText;

struct Tokenizer::Impl {
  std::string source;  // file name for messages
  std::unique_ptr<tokenizer::Model> model;  // BpeModel, UnigramModel or TiktokenModel
  std::unique_ptr<tokenizer::Normalizer> normalizer;      // null: identity
  std::unique_ptr<tokenizer::PreTokenizer> pre_tokenizer;  // null: one piece per segment
  std::unique_ptr<tokenizer::Decoder> decoder;             // null: join with " "
  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized = false
  AddedTokenMatcher normalized_matcher;  // added tokens with normalized = true
  std::unordered_map<int32_t, int32_t> added_by_id;        // id -> index into `added`
  std::unordered_map<std::string, int32_t> added_by_content;  // content -> id
  std::vector<int32_t> prefix_ids;  // post-processor ids before / after the sequence
  std::vector<int32_t> suffix_ids;
  int32_t vocab_size = 0;
  json config;  // tokenizer_config.json or null
  std::optional<int32_t> bos_id, eos_id;
  // The chat template(s), parsed once at load: `chat_template` (the string, or the "default"
  // entry of a list) and `chat_template_tools` (the "tool_use" entry, if the list has one).
  // chat_template_status: why `chat_template` is empty (kNotFound, or the parse error).
  std::optional<jinja::Template> chat_template, chat_template_tools;
  Status chat_template_status;

  void ParseChatTemplates() {
    Result<std::string> plain = zipmoe::ChatTemplateSource(config, /*with_tools=*/false);
    if (!plain.ok()) {
      chat_template_status = plain.status();
      return;
    }
    Result<jinja::Template> parsed = jinja::Template::Parse(*plain, "chat_template");
    if (!parsed.ok()) {
      chat_template_status = parsed.status().WithContext(source);
      return;
    }
    chat_template = std::move(parsed).value();
    Result<std::string> tools = zipmoe::ChatTemplateSource(config, /*with_tools=*/true);
    if (tools.ok() && *tools != *plain) {
      Result<jinja::Template> parsed_tools = jinja::Template::Parse(*tools, "chat_template tool_use");
      if (parsed_tools.ok()) chat_template_tools = std::move(parsed_tools).value();
    }
  }

  std::optional<int32_t> TokenToId(std::string_view token) const {
    auto it = added_by_content.find(std::string(token));
    if (it != added_by_content.end()) return it->second;
    return model->TokenToId(token);
  }
  const std::string* IdToToken(int32_t id) const {
    auto it = added_by_id.find(id);
    if (it != added_by_id.end()) return &added[it->second].content;
    return model->IdToToken(id);
  }
  // tiktoken tokenizers whose Python encode() cuts long texts first (tokenizer_tiktoken.h
  // SplitLongRuns); 0: no cut.
  int64_t max_encode_chars = 0, max_run_chars = 0;
  // Normalizes, pre-tokenizes and BPE-encodes one segment between raw-matched added tokens (cut by
  // SplitLongRuns first when its limits are set).
  Status EncodeSegment(std::string_view segment, bool at_start, std::vector<int32_t>* ids) const;
  Status EncodeUncut(std::string_view segment, bool at_start, std::vector<int32_t>* ids) const;
};

namespace {

// Reads and parses a JSON file. Errors: kNotFound/kIoError (ReadFileToString), kCorruption.
Result<json> ReadJson(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return Status::Corruption(fmt::format("{}: invalid JSON: {}", path, e.what()));
  }
}


struct PostIds {
  std::vector<int32_t> prefix, suffix;
};

// Ids that a post_processor adds around a single sequence.
Result<PostIds> ParsePostProcessor(const json& j, const std::string& where) {
  PostIds ids;
  if (j.is_null()) return ids;
  ZM_ASSIGN_OR_RETURN(std::string type, tokenizer::GetType(j, where));
  if (type == "ByteLevel") return ids;
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    for (const char* key : {"cls", "sep"}) {
      ZM_ASSIGN_OR_RETURN(const json* pair, tokenizer::GetField(j, key, where));
      if (!pair->is_array() || pair->size() != 2 || !(*pair)[1].is_number_integer()) {
        return Status::Corruption(fmt::format("{}.{}: expected [token, id]", where, key));
      }
      (key[0] == 'c' ? ids.prefix : ids.suffix).push_back((*pair)[1].get<int32_t>());
    }
    return ids;
  }
  if (type == "Sequence") {
    ZM_ASSIGN_OR_RETURN(const json* list, tokenizer::GetField(j, "processors", where));
    if (!list->is_array()) return Status::Corruption(where + ".processors: expected an array");
    for (size_t i = 0; i < list->size(); ++i) {
      ZM_ASSIGN_OR_RETURN(PostIds inner, ParsePostProcessor((*list)[i], fmt::format("{}.processors[{}]", where, i)));
      ids.prefix.insert(ids.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      ids.suffix.insert(ids.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return ids;
  }
  if (type != "TemplateProcessing") {
    return Status::InvalidArgument(fmt::format("{}: unsupported post_processor type '{}'", where, type));
  }
  ZM_ASSIGN_OR_RETURN(const json* single, tokenizer::GetField(j, "single", where));
  const json empty = json::object();
  const json& specials = j.contains("special_tokens") ? j["special_tokens"] : empty;
  if (!single->is_array()) return Status::Corruption(where + ".single: expected an array");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string item_where = fmt::format("{}.single[{}]", where, i);
    std::string special;  // name of a special token piece; "" for a sequence piece
    if (item.is_object() && item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    } else if (item.is_object() && item.contains("SpecialToken")) {
      ZM_ASSIGN_OR_RETURN(special, tokenizer::GetString(item["SpecialToken"], "id", item_where + ".SpecialToken"));
    } else if (item.is_string()) {  // legacy "$A" / "<s>" form
      const std::string s = item.get<std::string>();
      if (!s.empty() && s[0] == '$') {
        seen_sequence = true;
        continue;
      }
      special = s.substr(0, s.rfind(':') == std::string::npos ? s.size() : s.rfind(':'));
    } else {
      return Status::Corruption(fmt::format("{}: expected a Sequence or SpecialToken piece, found {}", item_where, item.dump()));
    }
    if (!specials.is_object() || !specials.contains(special) || !specials[special].contains("ids") ||
        !specials[special]["ids"].is_array()) {
      return Status::Corruption(fmt::format("{}.special_tokens: no ids for '{}'", where, special));
    }
    for (const json& id : specials[special]["ids"]) {
      if (!id.is_number_integer()) return Status::Corruption(fmt::format("{}.special_tokens['{}'].ids: not an integer", where, special));
      (seen_sequence ? ids.suffix : ids.prefix).push_back(id.get<int32_t>());
    }
  }
  return ids;
}

}  // namespace

namespace tokenizer {

Result<std::unique_ptr<Model>> ParseModel(const json& model, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(std::string type, GetStringOr(model, "type", "BPE", where));
  if (type == "Unigram") {
    ZM_ASSIGN_OR_RETURN(std::unique_ptr<UnigramModel> unigram, UnigramModel::FromJson(model, where));
    return std::unique_ptr<Model>(std::move(unigram));
  }
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<BpeModel> bpe, BpeModel::FromJson(model, where));
  return std::unique_ptr<Model>(std::move(bpe));
}

}  // namespace tokenizer

Status Tokenizer::Impl::EncodeSegment(std::string_view segment, bool at_start,
                                      std::vector<int32_t>* ids) const {
  if (max_encode_chars <= 0 && max_run_chars <= 0) return EncodeUncut(segment, at_start, ids);
  bool first = true;
  for (std::string_view piece : tokenizer::SplitLongRuns(segment, max_encode_chars, max_run_chars)) {
    ZM_RETURN_IF_ERROR(EncodeUncut(piece, at_start && first, ids));
    first = false;
  }
  return Status::Ok();
}

Status Tokenizer::Impl::EncodeUncut(std::string_view segment, bool at_start, std::vector<int32_t>* ids) const {
  std::string normalized(segment);
  if (normalizer != nullptr) ZM_RETURN_IF_ERROR(normalizer->Normalize(&normalized));
  std::vector<AddedSplit> splits;
  if (normalized_matcher.empty()) {
    splits.push_back({0, normalized.size(), -1});
  } else {
    splits = normalized_matcher.Split(normalized, added);
  }
  std::vector<tokenizer::Piece> pieces;
  for (const AddedSplit& split : splits) {
    if (split.token_index >= 0) {
      ids->push_back(added[split.token_index].id);
      continue;
    }
    pieces.clear();
    pieces.push_back({normalized.substr(split.begin, split.end - split.begin), at_start && split.begin == 0});
    if (pre_tokenizer != nullptr) ZM_RETURN_IF_ERROR(pre_tokenizer->PreTokenize(&pieces));
    for (const tokenizer::Piece& piece : pieces) ZM_RETURN_IF_ERROR(model->Tokenize(piece.text, ids));
  }
  return Status::Ok();
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

namespace {

// DIR/tokenizer_config.json (null when absent), its chat_template replaced by DIR/chat_template.jinja
// when that exists (as transformers).
Result<json> ReadTokenizerConfig(const std::string& dir) {
  const std::string config_path = JoinPath(dir, "tokenizer_config.json");
  json config;  // null when absent
  if (FileExists(config_path)) {
    ZM_ASSIGN_OR_RETURN(config, ReadJson(config_path));
  }
  const std::string template_path = JoinPath(dir, "chat_template.jinja");
  if (FileExists(template_path)) {
    ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(template_path));
    if (!config.is_object()) config = json::object();
    config["chat_template"] = std::move(text);
  }
  return config;
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& tokenizer_json_path) {
  ZM_ASSIGN_OR_RETURN(json tokenizer_json, ReadJson(tokenizer_json_path));
  const size_t slash = tokenizer_json_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : tokenizer_json_path.substr(0, slash);
  ZM_ASSIGN_OR_RETURN(json config, ReadTokenizerConfig(dir));
  return FromJson(tokenizer_json, config, tokenizer_json_path);
}

bool Tokenizer::DirHasTokenizer(const std::string& dir) {
  return FileExists(JoinPath(dir, "tokenizer.json")) || FileExists(JoinPath(dir, "tiktoken.model"));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::LoadDir(const std::string& dir) {
  const std::string json_path = JoinPath(dir, "tokenizer.json");
  if (FileExists(json_path) || !FileExists(JoinPath(dir, "tiktoken.model"))) return Load(json_path);
  ZM_ASSIGN_OR_RETURN(json config, ReadTokenizerConfig(dir));
  ZM_ASSIGN_OR_RETURN(tokenizer::TiktokenDirectory files, tokenizer::LoadTiktokenDirectory(dir, config));
  ZM_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok,
                      Build(files.tokenizer_json, std::move(files.model), config, JoinPath(dir, "tiktoken.model")));
  tok->impl_->max_encode_chars = files.max_encode_chars;
  tok->impl_->max_run_chars = files.max_run_chars;
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const json& tokenizer_json,
                                                       const json& tokenizer_config,
                                                       const std::string& source) {
  return Build(tokenizer_json, nullptr, tokenizer_config, source);
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::Build(const json& tokenizer_json, std::unique_ptr<tokenizer::Model> model,
                                                    const json& tokenizer_config, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  if (!tokenizer_json.is_object()) {
    return Status::Corruption(fmt::format("{}: expected a JSON object, found {}", source, tokenizer_json.type_name()));
  }
  const json null_json;
  auto field = [&](const char* key) -> const json& {
    return tokenizer_json.contains(key) ? tokenizer_json[key] : null_json;
  };
  if (model != nullptr) {
    impl->model = std::move(model);
  } else {
    if (!tokenizer_json.contains("model")) return Status::Corruption(source + ": model: missing");
    ZM_ASSIGN_OR_RETURN(impl->model, tokenizer::ParseModel(tokenizer_json["model"], source + ": model"));
  }
  ZM_ASSIGN_OR_RETURN(impl->normalizer, tokenizer::ParseNormalizer(field("normalizer"), source + ": normalizer"));
  ZM_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                      tokenizer::ParsePreTokenizer(field("pre_tokenizer"), source + ": pre_tokenizer"));
  ZM_ASSIGN_OR_RETURN(impl->decoder, tokenizer::ParseDecoder(field("decoder"), source + ": decoder"));

  // Added tokens.
  const json& added = field("added_tokens");
  if (!added.is_null() && !added.is_array()) {
    return Status::Corruption(fmt::format("{}: added_tokens: expected an array, found {}", source, added.type_name()));
  }
  impl->vocab_size = impl->model->id_limit();
  for (size_t i = 0; added.is_array() && i < added.size(); ++i) {
    const std::string where = fmt::format("{}: added_tokens[{}]", source, i);
    const json& t = added[i];
    AddedToken token;
    ZM_ASSIGN_OR_RETURN(const json* id, tokenizer::GetField(t, "id", where));
    if (!id->is_number_integer() || id->get<int64_t>() < 0 || id->get<int64_t>() > INT32_MAX) {
      return Status::Corruption(fmt::format("{}.id: expected an integer in [0, 2^31), found {}", where, id->dump()));
    }
    token.id = id->get<int32_t>();
    ZM_ASSIGN_OR_RETURN(token.content, tokenizer::GetString(t, "content", where));
    ZM_ASSIGN_OR_RETURN(token.special, tokenizer::GetBoolOr(t, "special", false, where));
    ZM_ASSIGN_OR_RETURN(token.single_word, tokenizer::GetBoolOr(t, "single_word", false, where));
    ZM_ASSIGN_OR_RETURN(token.lstrip, tokenizer::GetBoolOr(t, "lstrip", false, where));
    ZM_ASSIGN_OR_RETURN(token.rstrip, tokenizer::GetBoolOr(t, "rstrip", false, where));
    ZM_ASSIGN_OR_RETURN(token.normalized, tokenizer::GetBoolOr(t, "normalized", !token.special, where));
    if (token.content.empty()) return Status::Corruption(where + ".content: empty");
    const auto index = static_cast<int32_t>(impl->added.size());
    if (token.normalized) {
      std::string pattern = token.content;
      if (impl->normalizer != nullptr) ZM_RETURN_IF_ERROR(impl->normalizer->Normalize(&pattern).WithContext(where));
      impl->normalized_matcher.Add(pattern, index);
    } else {
      impl->raw_matcher.Add(token.content, index);
    }
    impl->added_by_id[token.id] = index;
    impl->added_by_content[token.content] = token.id;
    impl->vocab_size = std::max(impl->vocab_size, token.id + 1);
    impl->added.push_back(std::move(token));
  }

  // Post-processor, then tokenizer_config.json's add_bos_token / add_eos_token override.
  ZM_ASSIGN_OR_RETURN(PostIds post, ParsePostProcessor(field("post_processor"), source + ": post_processor"));
  impl->config = tokenizer_config;
  impl->ParseChatTemplates();
  const std::string config_name = "tokenizer_config.json";
  for (const auto& [key, out] : {std::make_pair("bos_token", &impl->bos_id), std::make_pair("eos_token", &impl->eos_id)}) {
    const std::string text = ConfigTokenText(tokenizer_config, key);
    if (!text.empty()) *out = impl->TokenToId(text);
  }
  const bool has_add_bos = tokenizer_config.is_object() && tokenizer_config.contains("add_bos_token") &&
                           tokenizer_config["add_bos_token"].is_boolean();
  const bool has_add_eos = tokenizer_config.is_object() && tokenizer_config.contains("add_eos_token") &&
                           tokenizer_config["add_eos_token"].is_boolean();
  if (has_add_bos || has_add_eos) {
    const bool add_bos = has_add_bos && tokenizer_config["add_bos_token"].get<bool>();
    const bool add_eos = has_add_eos && tokenizer_config["add_eos_token"].get<bool>();
    post = PostIds();
    if (add_bos) {
      if (!impl->bos_id) {
        return Status::Corruption(fmt::format("{}: add_bos_token is true but bos_token '{}' is not a token of {}",
                                              config_name, ConfigTokenText(tokenizer_config, "bos_token"), source));
      }
      post.prefix.push_back(*impl->bos_id);
    }
    if (add_eos) {
      if (!impl->eos_id) {
        return Status::Corruption(fmt::format("{}: add_eos_token is true but eos_token '{}' is not a token of {}",
                                              config_name, ConfigTokenText(tokenizer_config, "eos_token"), source));
      }
      post.suffix.push_back(*impl->eos_id);
    }
  }
  impl->prefix_ids = std::move(post.prefix);
  impl->suffix_ids = std::move(post.suffix);
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!tokenizer::IsValidUtf8(text)) {
    repaired = tokenizer::Utf8Lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = impl_->prefix_ids;
  if (impl_->raw_matcher.empty()) {
    ZM_RETURN_IF_ERROR(impl_->EncodeSegment(text, true, &ids));
  } else {
    for (const AddedSplit& split : impl_->raw_matcher.Split(text, impl_->added)) {
      if (split.token_index >= 0) {
        ids.push_back(impl_->added[split.token_index].id);
      } else {
        ZM_RETURN_IF_ERROR(impl_->EncodeSegment(text.substr(split.begin, split.end - split.begin),
                                                split.begin == 0, &ids));
      }
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return ids;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string text = DecodeJoined(ids, skip_special_tokens, /*keep_bytes=*/false);
  if (!tokenizer::IsValidUtf8(text)) text = tokenizer::Utf8Lossy(text);
  return text;
}

std::string Tokenizer::DecodeBytes(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return DecodeJoined(ids, skip_special_tokens, /*keep_bytes=*/true);
}

std::string Tokenizer::DecodeJoined(const std::vector<int32_t>& ids, bool skip_special_tokens, bool keep_bytes) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && IsSpecialToken(id)) continue;
    const std::string* token = impl_->IdToToken(id);
    if (token != nullptr) tokens.push_back(*token);
  }
  std::string text;
  if (impl_->decoder != nullptr) {
    impl_->decoder->DecodeChain(&tokens, keep_bytes);
    for (const std::string& t : tokens) text += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i == 0 ? "" : " ") + tokens[i];
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const { return impl_->TokenToId(token); }

std::string Tokenizer::IdToToken(int32_t id) const {
  const std::string* token = impl_->IdToToken(id);
  return token == nullptr ? std::string() : *token;
}

bool Tokenizer::IsSpecialToken(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }
const json& Tokenizer::config() const { return impl_->config; }

Result<std::string> Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                                 bool add_generation_prompt) const {
  return ApplyChatTemplate(ChatMessagesJson(messages), nlohmann::ordered_json(nullptr), add_generation_prompt,
                           nlohmann::ordered_json(nullptr));
}

std::string Tokenizer::ChatTemplateSource(bool with_tools) const {
  Result<std::string> source = zipmoe::ChatTemplateSource(impl_->config, with_tools);
  return source.ok() ? std::move(source).value() : std::string();
}

Result<std::string> Tokenizer::ApplyChatTemplate(const nlohmann::ordered_json& messages,
                                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                                 const nlohmann::ordered_json& extra_kwargs) const {
  const bool with_tools = tools.is_array() && !tools.empty();
  const jinja::Template* tmpl = with_tools && impl_->chat_template_tools ? &*impl_->chat_template_tools
                                : impl_->chat_template                   ? &*impl_->chat_template
                                                                         : nullptr;
  if (tmpl == nullptr) return impl_->chat_template_status;
  return tmpl->Render(ChatTemplateContext(impl_->config, messages, tools, add_generation_prompt, extra_kwargs));
}

// ---- StreamDecoder ----

namespace {

bool EndsWithReplacement(const std::string& s) {
  const size_t n = sizeof(tokenizer::kReplacementUtf8) - 1;
  return s.size() >= n && s.compare(s.size() - n, n, tokenizer::kReplacementUtf8) == 0;
}

// The part of `text` after what was already emitted (`prefix`); if `text` does not start with
// `prefix`, the part after their longest common prefix (cut back to a character boundary).
std::string NewSuffix(const std::string& text, const std::string& prefix) {
  size_t common = 0;
  while (common < text.size() && common < prefix.size() && text[common] == prefix[common]) ++common;
  while (common > 0 && common < text.size() && (static_cast<unsigned char>(text[common]) & 0xC0) == 0x80) --common;
  return text.substr(common);
}

}  // namespace

std::string StreamDecoder::Step(int32_t id) {
  if (drop_special_ && tokenizer_->IsSpecialToken(id) &&
      std::find(keep_special_.begin(), keep_special_.end(), id) == keep_special_.end())
    return "";
  window_.push_back(id);
  const std::string text = tokenizer_->Decode(window_, skip_special_tokens_);
  if (text.size() <= prefix_.size() || EndsWithReplacement(text)) return "";
  std::string out = NewSuffix(text, prefix_);
  // Keep the ids of the chunk just emitted as context for the next one (a Metaspace/Strip decoder
  // treats the first token of a window differently).
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(prefix_count_));
  prefix_count_ = window_.size();
  prefix_ = tokenizer_->Decode(window_, skip_special_tokens_);
  return out;
}

std::string StreamDecoder::Flush() {
  const std::string text = tokenizer_->Decode(window_, skip_special_tokens_);
  std::string out = text.size() > prefix_.size() ? NewSuffix(text, prefix_) : std::string();
  window_.clear();
  prefix_count_ = 0;
  prefix_.clear();
  return out;
}

}  // namespace zipmoe
