// tokenizer.json decoders (see tokenizer_decoder.h).
#include "common/tokenizer/tokenizer_decoder.h"

#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_regex.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

using nlohmann::json;
using DecoderPtr = std::unique_ptr<Decoder>;

std::string ReplaceLiteral(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(text);
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.data() + pos, hit - pos);
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.data() + pos, text.size() - pos);
  return out;
}

// Maps each token's characters back to bytes through the GPT-2 alphabet (a token with a character
// outside the alphabet contributes its own UTF-8 bytes), then repairs the bytes lossily. The whole
// chain becomes one string.
class ByteLevelDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    std::string bytes;
    for (const std::string& token : *tokens) {
      const size_t mark = bytes.size();
      bool all_mapped = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const int b = UnicodeToByte(NextCodePoint(token, &pos));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all_mapped) {
        bytes.resize(mark);
        bytes += token;
      }
    }
    tokens->assign(1, keep_bytes ? bytes : Utf8Lossy(bytes));
  }
};

// The replacement character becomes ' '; in the first token (unless prepend_scheme is "never")
// every replacement character is dropped, as HF does.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = ReplaceLiteral((*tokens)[i], replacement_, i == 0 && strip_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::optional<std::string> literal, std::optional<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    for (std::string& token : *tokens) {
      if (literal_.has_value()) {
        token = ReplaceLiteral(token, *literal_, content_);
      } else {
        Result<std::string> replaced = ReplaceAll(*regex_, token, content_);
        if (replaced.ok()) token = std::move(replaced).value();  // on a PCRE2 failure keep the token
      }
    }
  }

 private:
  std::optional<std::string> literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// Runs of "<0xXX>" tokens become the UTF-8 text of their bytes, or one U+FFFD per byte if the
// run is not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&]() {
      if (run_tokens == 0) return;
      if (keep_bytes || IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back(kReplacementUtf8);
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : *tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') {
        byte = ParseHexByte(token[3], token[4]);
      }
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int ParseHexByte(char hi, char lo) {
    const int h = HexDigit(hi), l = HexDigit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    std::string joined;
    for (const std::string& t : *tokens) joined += t;
    tokens->assign(1, std::move(joined));
  }
};

// Removes up to `start` leading and `stop` trailing occurrences of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, int64_t start, int64_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    for (std::string& token : *tokens) {
      std::vector<size_t> offsets;  // byte offset of each character, plus the end
      std::vector<char32_t> chars;
      size_t pos = 0;
      while (pos < token.size()) {
        offsets.push_back(pos);
        chars.push_back(NextCodePoint(token, &pos));
      }
      offsets.push_back(token.size());
      size_t begin = 0, end = chars.size();
      while (begin < chars.size() && static_cast<int64_t>(begin) < start_ && chars[begin] == content_) ++begin;
      for (int64_t i = 0; i < stop_ && end > begin && chars[end - 1] == content_; ++i) --end;
      token = token.substr(offsets[begin], offsets[end] - offsets[begin]);
    }
  }

 private:
  char32_t content_;
  int64_t start_, stop_;
};

// BPEDecoder: the end-of-word suffix becomes ' ' (removed in the last token).
class SuffixDecoder : public Decoder {
 public:
  explicit SuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      (*tokens)[i] = ReplaceLiteral((*tokens)[i], suffix_, i + 1 == tokens->size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<DecoderPtr> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens, bool keep_bytes) const override {
    for (const DecoderPtr& step : steps_) step->DecodeChain(tokens, keep_bytes);
  }

 private:
  std::vector<DecoderPtr> steps_;
};

}  // namespace

Result<DecoderPtr> ParseDecoder(const json& j, const std::string& where) {
  if (j.is_null()) return DecoderPtr();
  ZM_ASSIGN_OR_RETURN(std::string type, GetType(j, where));
  if (type == "ByteLevel") return DecoderPtr(std::make_unique<ByteLevelDecoder>());
  if (type == "ByteFallback") return DecoderPtr(std::make_unique<ByteFallbackDecoder>());
  if (type == "Fuse") return DecoderPtr(std::make_unique<FuseDecoder>());
  if (type == "Metaspace") {
    ZM_ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where));
    bool strip_first = true;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      ZM_ASSIGN_OR_RETURN(std::string scheme, GetString(j, "prepend_scheme", where));
      strip_first = scheme != "never";
    } else {
      ZM_ASSIGN_OR_RETURN(strip_first, GetBoolOr(j, "add_prefix_space", true, where));
    }
    return DecoderPtr(std::make_unique<MetaspaceDecoder>(std::move(replacement), strip_first));
  }
  if (type == "Replace") {
    ZM_ASSIGN_OR_RETURN(const json* pattern, GetField(j, "pattern", where));
    ZM_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    if (pattern->is_object() && pattern->contains("String") && (*pattern)["String"].is_string()) {
      return DecoderPtr(std::make_unique<ReplaceDecoder>((*pattern)["String"].get<std::string>(),
                                                         std::nullopt, std::move(content)));
    }
    ZM_ASSIGN_OR_RETURN(Regex regex, ParsePattern(*pattern, where + ".pattern"));
    return DecoderPtr(std::make_unique<ReplaceDecoder>(std::nullopt, std::move(regex), std::move(content)));
  }
  if (type == "Strip") {
    ZM_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    size_t pos = 0;
    const char32_t cp = content.empty() || !IsValidUtf8(content) ? 0 : NextCodePoint(content, &pos);
    if (content.empty() || pos != content.size()) {
      return Status::Corruption(fmt::format("{}.content: expected one character, found '{}'", where, content));
    }
    ZM_ASSIGN_OR_RETURN(int64_t start, GetIntOr(j, "start", 0, where));
    ZM_ASSIGN_OR_RETURN(int64_t stop, GetIntOr(j, "stop", 0, where));
    return DecoderPtr(std::make_unique<StripDecoder>(cp, start, stop));
  }
  if (type == "BPEDecoder") {
    ZM_ASSIGN_OR_RETURN(std::string suffix, GetStringOr(j, "suffix", "</w>", where));
    return DecoderPtr(std::make_unique<SuffixDecoder>(std::move(suffix)));
  }
  if (type == "Sequence") {
    ZM_ASSIGN_OR_RETURN(const json* list, GetField(j, "decoders", where));
    if (!list->is_array()) return Status::Corruption(where + ".decoders: expected an array");
    std::vector<DecoderPtr> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ZM_ASSIGN_OR_RETURN(DecoderPtr step, ParseDecoder((*list)[i], fmt::format("{}.decoders[{}]", where, i)));
      if (step != nullptr) steps.push_back(std::move(step));
    }
    return DecoderPtr(std::make_unique<SequenceDecoder>(std::move(steps)));
  }
  return Status::InvalidArgument(fmt::format("{}: unsupported decoder type '{}'", where, type));
}

}  // namespace zipmoe::tokenizer
