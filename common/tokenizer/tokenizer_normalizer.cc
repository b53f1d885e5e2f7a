// tokenizer.json normalizers (see tokenizer_pretokenizer.h): Unicode forms, Precompiled, Lowercase,
// Strip, Prepend, Replace and Sequence, and ParseNormalizer. Pre-tokenizers are in
// tokenizer_pretokenizer.cc.
#include "common/tokenizer/tokenizer_pretokenizer.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/tokenizer/tokenizer_json.h"
#include "common/tokenizer/tokenizer_precompiled.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {
namespace {

using nlohmann::json;
using NormPtr = std::unique_ptr<Normalizer>;

// ---- normalizers ----

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  Status Normalize(std::string* text) const override {
    ZM_ASSIGN_OR_RETURN(*text, tokenizer::Normalize(*text, form_));
    return Status::Ok();
  }

 private:
  NormalizationForm form_;
};

class PrecompiledNormalizer : public Normalizer {
 public:
  explicit PrecompiledNormalizer(PrecompiledCharsMap map) : map_(std::move(map)) {}
  Status Normalize(std::string* text) const override {
    *text = map_.Normalize(*text);
    return Status::Ok();
  }

 private:
  PrecompiledCharsMap map_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  Status Normalize(std::string* text) const override {
    *text = Lowercase(*text);
    return Status::Ok();
  }
};

// Strips White_Space characters from the left and/or right end.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  Status Normalize(std::string* text) const override {
    size_t begin = 0, end = text->size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!IsWhitespace(NextCodePoint(*text, &next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>((*text)[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!IsWhitespace(NextCodePoint(*text, &next))) break;
        end = start;
      }
    }
    *text = text->substr(begin, end - begin);
    return Status::Ok();
  }

 private:
  bool left_, right_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  Status Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prepend_);
    return Status::Ok();
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status Normalize(std::string* text) const override {
    ZM_ASSIGN_OR_RETURN(*text, ReplaceAll(pattern_, *text, content_));
    return Status::Ok();
  }

 private:
  Regex pattern_;
  std::string content_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  Status Normalize(std::string* text) const override {
    for (const auto& step : steps_) ZM_RETURN_IF_ERROR(step->Normalize(text));
    return Status::Ok();
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j, const std::string& where) {
  if (j.is_null()) return NormPtr();
  ZM_ASSIGN_OR_RETURN(std::string type, GetType(j, where));
  if (type == "NFC") return NormPtr(std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc));
  if (type == "NFD") return NormPtr(std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd));
  if (type == "NFKC") return NormPtr(std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc));
  if (type == "NFKD") return NormPtr(std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd));
  if (type == "Lowercase") return NormPtr(std::make_unique<LowercaseNormalizer>());
  if (type == "Precompiled") {
    // An empty or null charsmap (a SentencePiece model with the identity rule) normalizes nothing.
    ZM_ASSIGN_OR_RETURN(const json* charsmap, GetField(j, "precompiled_charsmap", where));
    if (charsmap->is_null()) return NormPtr();
    if (!charsmap->is_string()) return Status::Corruption(where + ".precompiled_charsmap: expected a base64 string");
    const std::string& base64 = charsmap->get_ref<const std::string&>();
    if (base64.empty()) return NormPtr();
    ZM_ASSIGN_OR_RETURN(PrecompiledCharsMap map, PrecompiledCharsMap::ParseBase64(base64, where));
    return NormPtr(std::make_unique<PrecompiledNormalizer>(std::move(map)));
  }
  if (type == "Strip") {
    ZM_ASSIGN_OR_RETURN(bool left, GetBoolOr(j, "strip_left", true, where));
    ZM_ASSIGN_OR_RETURN(bool right, GetBoolOr(j, "strip_right", true, where));
    return NormPtr(std::make_unique<StripNormalizer>(left, right));
  }
  if (type == "Prepend") {
    ZM_ASSIGN_OR_RETURN(std::string prepend, GetString(j, "prepend", where));
    return NormPtr(std::make_unique<PrependNormalizer>(std::move(prepend)));
  }
  if (type == "Replace") {
    ZM_ASSIGN_OR_RETURN(const json* pattern_json, GetField(j, "pattern", where));
    ZM_ASSIGN_OR_RETURN(Regex pattern, ParsePattern(*pattern_json, where + ".pattern"));
    ZM_ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where));
    return NormPtr(std::make_unique<ReplaceNormalizer>(std::move(pattern), std::move(content)));
  }
  if (type == "Sequence") {
    ZM_ASSIGN_OR_RETURN(const json* list, GetField(j, "normalizers", where));
    if (!list->is_array()) return Status::Corruption(where + ".normalizers: expected an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list->size(); ++i) {
      ZM_ASSIGN_OR_RETURN(auto step, ParseNormalizer((*list)[i], fmt::format("{}.normalizers[{}]", where, i)));
      if (step != nullptr) steps.push_back(std::move(step));
    }
    return NormPtr(std::make_unique<SequenceNormalizer>(std::move(steps)));
  }
  return Status::InvalidArgument(fmt::format("{}: unsupported normalizer type '{}'", where, type));
}

}  // namespace zipmoe::tokenizer
