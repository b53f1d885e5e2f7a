// Typed access to tokenizer.json / tokenizer_config.json fields with error messages that name the
// file and the JSON path ("<where>.<key>"), shared by the tokenizer's parsers. Pure; thread-safe.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "common/tokenizer/tokenizer_regex.h"

namespace zipmoe::tokenizer {

// Required string field. Errors: kCorruption "<where>.<key>: missing" or "...: expected a string".
Result<std::string> GetString(const nlohmann::json& j, const char* key, const std::string& where);
// Optional fields: `fallback` when absent or null. Errors: kCorruption if present with another type.
Result<std::string> GetStringOr(const nlohmann::json& j, const char* key, const std::string& fallback,
                                const std::string& where);
Result<bool> GetBoolOr(const nlohmann::json& j, const char* key, bool fallback,
                       const std::string& where);
Result<int64_t> GetIntOr(const nlohmann::json& j, const char* key, int64_t fallback,
                         const std::string& where);
// Required field of any type. Errors: kCorruption if missing.
Result<const nlohmann::json*> GetField(const nlohmann::json& j, const char* key,
                                       const std::string& where);

// A tokenizer.json pattern object: {"String": "<literal>"} or {"Regex": "<pattern>"}.
// Errors: kCorruption (neither form), kInvalidArgument (the regex does not compile).
Result<Regex> ParsePattern(const nlohmann::json& j, const std::string& where);

// The "type" of a pipeline component. Errors: kCorruption if not an object with a string "type".
Result<std::string> GetType(const nlohmann::json& j, const std::string& where);

// Text of a special-token entry of tokenizer_config.json ("text", {"content": "text", ...}, or
// null/absent -> ""). Never fails.
std::string ConfigTokenText(const nlohmann::json& config, const char* key);

}  // namespace zipmoe::tokenizer
