// Typed JSON field access for the tokenizer parsers (see tokenizer_json.h).
#include "common/tokenizer/tokenizer_json.h"

#include <fmt/format.h>

namespace zipmoe::tokenizer {
namespace {

Status Mistyped(const std::string& where, const char* key, const char* expected,
                const nlohmann::json& found) {
  return Status::Corruption(
      fmt::format("{}.{}: expected {}, found {}", where, key, expected, found.type_name()));
}

}  // namespace

Result<const nlohmann::json*> GetField(const nlohmann::json& j, const char* key,
                                       const std::string& where) {
  if (!j.is_object()) {
    return Status::Corruption(fmt::format("{}: expected an object, found {}", where, j.type_name()));
  }
  auto it = j.find(key);
  if (it == j.end()) return Status::Corruption(fmt::format("{}.{}: missing", where, key));
  return &*it;
}

Result<std::string> GetString(const nlohmann::json& j, const char* key, const std::string& where) {
  ZM_ASSIGN_OR_RETURN(const nlohmann::json* field, GetField(j, key, where));
  if (!field->is_string()) return Mistyped(where, key, "a string", *field);
  return field->get<std::string>();
}

Result<std::string> GetStringOr(const nlohmann::json& j, const char* key, const std::string& fallback,
                                const std::string& where) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) return Mistyped(where, key, "a string", *it);
  return it->get<std::string>();
}

Result<bool> GetBoolOr(const nlohmann::json& j, const char* key, bool fallback,
                       const std::string& where) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return Mistyped(where, key, "a boolean", *it);
  return it->get<bool>();
}

Result<int64_t> GetIntOr(const nlohmann::json& j, const char* key, int64_t fallback,
                         const std::string& where) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return Mistyped(where, key, "an integer", *it);
  return it->get<int64_t>();
}

Result<Regex> ParsePattern(const nlohmann::json& j, const std::string& where) {
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    return Regex::Compile(j["String"].get<std::string>(), /*literal=*/true);
  }
  if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    Result<Regex> regex = Regex::Compile(j["Regex"].get<std::string>(), /*literal=*/false);
    if (!regex.ok()) return regex.status().WithContext(where);
    return regex;
  }
  return Status::Corruption(
      fmt::format("{}: expected {{\"String\": ...}} or {{\"Regex\": ...}}, found {}", where, j.dump()));
}

Result<std::string> GetType(const nlohmann::json& j, const std::string& where) {
  return GetString(j, "type", where);
}

std::string ConfigTokenText(const nlohmann::json& config, const char* key) {
  if (!config.is_object()) return "";
  auto it = config.find(key);
  if (it == config.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return "";
}

}  // namespace zipmoe::tokenizer
