// tokenizer.json pre-tokenizers (see tokenizer_pretokenizer.h); the normalizers are in
// tokenizer_normalizer.cc.
#include "common/tokenizer/tokenizer_pretokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {

const char kGpt2PreTokenizerRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;
using CharPredicate = std::function<bool(char32_t)>;

// ---- pre-tokenizer helpers ----

// Each character matching `pred` is its own match; runs of other characters are one non-match
// segment (HF's Pattern for Fn(char) -> bool).
std::vector<Segment> CharSegments(std::string_view text, const CharPredicate& pred) {
  std::vector<Segment> segments;
  size_t pos = 0, last = 0;
  while (pos < text.size()) {
    const size_t begin = pos;
    if (!pred(NextCodePoint(text, &pos))) continue;
    if (last < begin) segments.push_back({last, begin, false});
    segments.push_back({begin, pos, true});
    last = pos;
  }
  if (last < text.size()) segments.push_back({last, text.size(), false});
  return segments;
}

// Replaces every piece by the pieces `segment_fn` and `behavior` make of it, dropping empty ones.
template <typename SegmentFn>
Status SplitPieces(std::vector<Piece>* pieces, SplitBehavior behavior, bool invert,
                   const SegmentFn& segment_fn) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (Piece& piece : *pieces) {
    Result<std::vector<Segment>> segments = segment_fn(piece.text);
    if (!segments.ok()) return segments.status();
    if (invert) {
      for (Segment& s : *segments) s.is_match = !s.is_match;
    }
    for (const ByteRange& r : ApplySplitBehavior(*segments, behavior)) {
      if (r.first == r.second) continue;
      out.push_back({piece.text.substr(r.first, r.second - r.first), piece.at_start && r.first == 0});
    }
  }
  *pieces = std::move(out);
  return Status::Ok();
}

// ---- pre-tokenizers ----

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  Status PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
      }
    }
    if (regex_.has_value()) {
      ZM_RETURN_IF_ERROR(SplitPieces(pieces, SplitBehavior::kIsolated, false,
                                     [&](std::string_view t) { return RegexSegments(*regex_, t); }));
    }
    const std::array<std::string, 256>& alphabet = ByteToUnicodeUtf8();
    for (Piece& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char ch : p.text) mapped += alphabet[static_cast<unsigned char>(ch)];
      p.text = std::move(mapped);
    }
    return Status::Ok();
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    return SplitPieces(pieces, behavior_, invert_,
                       [&](std::string_view t) { return RegexSegments(pattern_, t); });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class CharClassPreTokenizer : public PreTokenizer {
 public:
  CharClassPreTokenizer(CharPredicate pred, SplitBehavior behavior)
      : pred_(std::move(pred)), behavior_(behavior) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    return SplitPieces(pieces, behavior_, false, [&](std::string_view t) {
      return Result<std::vector<Segment>>(CharSegments(t, pred_));
    });
  }

 private:
  CharPredicate pred_;
  SplitBehavior behavior_;
};

enum class PrependScheme : uint8_t { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_cp_(replacement), scheme_(scheme), split_(split) {
    AppendUtf8(replacement, &replacement_);
  }

  Status PreTokenize(std::vector<Piece>* pieces) const override {
    for (Piece& p : *pieces) {
      std::string text;
      text.reserve(p.text.size() + replacement_.size());
      for (char ch : p.text) {
        if (ch == ' ') {
          text += replacement_;
        } else {
          text.push_back(ch);
        }
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      // An empty piece stays empty (HF's NormalizedString::prepend does nothing on "").
      if (!starts && !text.empty() &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        text.insert(0, replacement_);
      }
      p.text = std::move(text);
    }
    if (!split_) return Status::Ok();
    const char32_t replacement = replacement_cp_;
    return SplitPieces(pieces, SplitBehavior::kMergedWithNext, false, [&](std::string_view t) {
      return Result<std::vector<Segment>>(
          CharSegments(t, [replacement](char32_t c) { return c == replacement; }));
    });
  }

 private:
  char32_t replacement_cp_;
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Status PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& step : steps_) ZM_RETURN_IF_ERROR(step->PreTokenize(pieces));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

Result<SplitBehavior> ParseBehavior(const json& j, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(std::string name, GetStringOr(j, "behavior", "Isolated", where));
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return Status::Corruption(fmt::format("{}.behavior: unknown split behavior '{}'", where, name));
}

// A single-character string field (Metaspace replacement, CharDelimiterSplit delimiter).
Result<char32_t> GetChar(const json& j, const char* key, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(std::string s, GetString(j, key, where));
  size_t pos = 0;
  char32_t cp = s.empty() || !IsValidUtf8(s) ? 0 : NextCodePoint(s, &pos);
  if (s.empty() || pos != s.size()) {
    return Status::Corruption(fmt::format("{}.{}: expected one character, found '{}'", where, key, s));
  }
  return cp;
}

Result<PrependScheme> ParsePrependScheme(const json& j, const std::string& where) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    ZM_ASSIGN_OR_RETURN(std::string name, GetString(j, "prepend_scheme", where));
    if (name == "always") return PrependScheme::kAlways;
    if (name == "first") return PrependScheme::kFirst;
    if (name == "never") return PrependScheme::kNever;
    return Status::Corruption(fmt::format("{}.prepend_scheme: unknown value '{}'", where, name));
  }
  ZM_ASSIGN_OR_RETURN(bool add_prefix_space, GetBoolOr(j, "add_prefix_space", true, where));
  return add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace

Result<std::vector<Segment>> RegexSegments(const Regex& regex, std::string_view text) {
  std::vector<Segment> segments;
  if (text.empty()) {
    segments.push_back({0, 0, false});
    return segments;
  }
  ZM_ASSIGN_OR_RETURN(std::vector<ByteRange> matches, regex.FindAll(text));
  size_t prev = 0;
  for (const ByteRange& m : matches) {
    if (prev != m.first) segments.push_back({prev, m.first, false});
    segments.push_back({m.first, m.second, true});
    prev = m.second;
  }
  if (prev != text.size()) segments.push_back({prev, text.size(), false});
  return segments;
}

std::vector<ByteRange> ApplySplitBehavior(const std::vector<Segment>& segments,
                                          SplitBehavior behavior) {
  std::vector<ByteRange> out;
  out.reserve(segments.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segments) {
        if (!s.is_match) out.emplace_back(s.begin, s.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segments) out.emplace_back(s.begin, s.end);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Segment& s : segments) {
        if (s.is_match && !previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().first = it->begin;
        } else {
          out.emplace_back(it->begin, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Segment& s : segments) {
        if (s.is_match == previous_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.begin, s.end);
        }
        previous_match = s.is_match;
      }
      break;
  }
  return out;
}

Result<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j, const std::string& where) {
  using Ptr = std::unique_ptr<PreTokenizer>;
  if (j.is_null()) return Ptr();
  ZM_ASSIGN_OR_RETURN(std::string type, GetType(j, where));
  if (type == "ByteLevel") {
    ZM_ASSIGN_OR_RETURN(bool add_prefix_space, GetBoolOr(j, "add_prefix_space", true, where));
    ZM_ASSIGN_OR_RETURN(bool use_regex, GetBoolOr(j, "use_regex", true, where));
    std::optional<Regex> regex;
    if (use_regex) {
      ZM_ASSIGN_OR_RETURN(Regex compiled, Regex::Compile(kGpt2PreTokenizerRegex, false));
      regex.emplace(std::move(compiled));
    }
    return Ptr(std::make_unique<ByteLevelPreTokenizer>(add_prefix_space, std::move(regex)));
  }
  if (type == "Split") {
    ZM_ASSIGN_OR_RETURN(const json* pattern_json, GetField(j, "pattern", where));
    ZM_ASSIGN_OR_RETURN(Regex pattern, ParsePattern(*pattern_json, where + ".pattern"));
    ZM_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j, where));
    ZM_ASSIGN_OR_RETURN(bool invert, GetBoolOr(j, "invert", false, where));
    return Ptr(std::make_unique<SplitPreTokenizer>(std::move(pattern), behavior, invert));
  }
  if (type == "Metaspace") {
    ZM_ASSIGN_OR_RETURN(char32_t replacement, GetChar(j, "replacement", where));
    ZM_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j, where));
    ZM_ASSIGN_OR_RETURN(bool split, GetBoolOr(j, "split", true, where));
    return Ptr(std::make_unique<MetaspacePreTokenizer>(replacement, scheme, split));
  }
  if (type == "Digits") {
    ZM_ASSIGN_OR_RETURN(bool individual, GetBoolOr(j, "individual_digits", false, where));
    return Ptr(std::make_unique<CharClassPreTokenizer>(
        IsNumeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
  }
  if (type == "Punctuation") {
    ZM_ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(j, where));
    return Ptr(std::make_unique<CharClassPreTokenizer>(IsPunctuation, behavior));
  }
  if (type == "WhitespaceSplit") {
    return Ptr(std::make_unique<CharClassPreTokenizer>(IsWhitespace, SplitBehavior::kRemoved));
  }
  if (type == "CharDelimiterSplit") {
    ZM_ASSIGN_OR_RETURN(char32_t delimiter, GetChar(j, "delimiter", where));
    return Ptr(std::make_unique<CharClassPreTokenizer>([delimiter](char32_t c) { return c == delimiter; },
                                         SplitBehavior::kRemoved));
  }
  if (type == "Whitespace") {  // keeps the matches of \w+|[^\w\s]+, drops the rest
    ZM_ASSIGN_OR_RETURN(Regex regex, Regex::Compile(R"(\w+|[^\w\s]+)", false));
    return Ptr(std::make_unique<SplitPreTokenizer>(std::move(regex), SplitBehavior::kRemoved, /*invert=*/true));
  }
  if (type == "BertPreTokenizer") {
    std::vector<Ptr> steps;
    steps.push_back(Ptr(std::make_unique<CharClassPreTokenizer>(IsWhitespace, SplitBehavior::kRemoved)));
    steps.push_back(Ptr(std::make_unique<CharClassPreTokenizer>(IsPunctuation, SplitBehavior::kIsolated)));
    return Ptr(std::make_unique<SequencePreTokenizer>(std::move(steps)));
  }
  if (type == "Sequence") {
    ZM_ASSIGN_OR_RETURN(const json* list, GetField(j, "pretokenizers", where));
    if (!list->is_array()) return Status::Corruption(where + ".pretokenizers: expected an array");
    std::vector<Ptr> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ZM_ASSIGN_OR_RETURN(Ptr step, ParsePreTokenizer((*list)[i], fmt::format("{}.pretokenizers[{}]", where, i)));
      if (step != nullptr) steps.push_back(std::move(step));
    }
    return Ptr(std::make_unique<SequencePreTokenizer>(std::move(steps)));
  }
  return Status::InvalidArgument(fmt::format("{}: unsupported pre_tokenizer type '{}'", where, type));
}

}  // namespace zipmoe::tokenizer
