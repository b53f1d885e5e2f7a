#include "services/api/front_protocol.h"

#include <fmt/format.h>

namespace zipmoe::api {

using nlohmann::json;

json ResumeToJson(const ResumeState& state) {
  json choices = json::array();
  for (const ChoiceResume& c : state.choices)
    choices.push_back(json{{"index", c.index}, {"groups", c.groups}, {"finished", c.finished}});
  return json{{"id", state.id}, {"created", state.created}, {"head", state.head_sent}, {"choices", choices}};
}

bool ResumeFromJson(const json& j, ResumeState* state, std::string* error) {
  const std::string where = kResumeField;
  if (!j.is_object()) return *error = where + " must be an object", false;
  if (!j.contains("id") || !j["id"].is_string()) return *error = where + ".id must be a string", false;
  if (!j.contains("created") || !j["created"].is_number_integer())
    return *error = where + ".created must be an integer", false;
  if (!j.contains("head") || !j["head"].is_boolean()) return *error = where + ".head must be a boolean", false;
  if (!j.contains("choices") || !j["choices"].is_array()) return *error = where + ".choices must be an array", false;
  ResumeState out;
  out.id = j["id"].get<std::string>();
  out.created = j["created"].get<int64_t>();
  out.head_sent = j["head"].get<bool>();
  for (size_t i = 0; i < j["choices"].size(); ++i) {
    const json& c = j["choices"][i];
    const std::string at = fmt::format("{}.choices[{}]", where, i);
    if (!c.is_object() || !c.contains("index") || !c["index"].is_number_unsigned())
      return *error = at + ".index must be an integer >= 0", false;
    if (!c.contains("groups") || !c["groups"].is_array()) return *error = at + ".groups must be an array", false;
    if (!c.contains("finished") || !c["finished"].is_boolean())
      return *error = at + ".finished must be a boolean", false;
    ChoiceResume choice;
    choice.index = c["index"].get<size_t>();
    choice.finished = c["finished"].get<bool>();
    for (const json& g : c["groups"]) {
      if (!g.is_array()) return *error = at + ".groups must hold arrays of token ids", false;
      std::vector<int32_t> ids;
      for (const json& t : g) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          return *error = fmt::format("{}.groups: {} is not a token id", at, t.dump()), false;
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      choice.groups.push_back(std::move(ids));
    }
    out.choices.push_back(std::move(choice));
  }
  *state = std::move(out);
  return true;
}

std::string UnitHeader(json meta, size_t payload_bytes) {
  meta["bytes"] = payload_bytes;
  return std::string(kUnitPrefix) + meta.dump() + "\n";
}

}  // namespace zipmoe::api
