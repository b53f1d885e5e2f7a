#include "services/cli/cli_util.h"

#include "common/trace_events.h"

#include <cctype>
#include <cmath>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"

namespace zipmoe::cli {

Result<uint64_t> ParseByteSize(const std::string& text, const std::string& flag) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    return Status::InvalidArgument(fmt::format("{} '{}': expected a size such as 512MiB", flag, text));
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  for (char& ch : unit) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  double scale = 0;
  const std::pair<const char*, double> units[] = {
      {"", 1},         {"b", 1},          {"k", 1e3},         {"kb", 1e3},        {"kib", 1024.0},
      {"m", 1e6},      {"mb", 1e6},       {"mib", 1048576.0}, {"g", 1e9},         {"gb", 1e9},
      {"gib", 1073741824.0}, {"t", 1e12}, {"tb", 1e12},       {"tib", 1099511627776.0}};
  for (const auto& [name, s] : units) {
    if (unit == name) scale = s;
  }
  if (scale == 0 || !(value >= 0) || !std::isfinite(value)) {
    return Status::InvalidArgument(fmt::format("{} '{}': unknown unit '{}' (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)",
                                               flag, text, unit));
  }
  return static_cast<uint64_t>(std::floor(value * scale));
}

Result<std::vector<std::string>> LoadPromptsFile(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::InvalidArgument(fmt::format("prompts file {}: not valid JSON", path));
  if (!doc.is_array()) {
    return Status::InvalidArgument(fmt::format("prompts file {}: expected a JSON array of strings or ShareGPT "
                                               "conversations, got a JSON {}", path, doc.type_name()));
  }
  std::vector<std::string> prompts;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& item = doc[i];
    std::string prompt;
    if (item.is_string()) {
      prompt = item.get<std::string>();
    } else if (item.is_object() && item.contains("conversations") && item["conversations"].is_array()) {
      for (const nlohmann::json& turn : item["conversations"]) {
        if (turn.is_object() && turn.value("from", "") == "human" && turn.contains("value") &&
            turn["value"].is_string()) {
          prompt = turn["value"].get<std::string>();
          break;
        }
      }
    } else {
      return Status::InvalidArgument(fmt::format("prompts file {}: item {} is neither a string nor an object with "
                                                 "a \"conversations\" array", path, i));
    }
    if (prompt.empty()) {
      return Status::InvalidArgument(fmt::format("prompts file {}: item {} has no (or an empty) human prompt", path, i));
    }
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) return Status::InvalidArgument(fmt::format("prompts file {}: no prompts", path));
  return prompts;
}

TraceToFile::TraceToFile(std::string path, const std::string& process_name) : path_(std::move(path)) {
  if (!path_.empty()) trace::Enable(process_name);
}

TraceToFile::~TraceToFile() {
  if (path_.empty()) return;
  const Status st = trace::WriteTraceFile(path_);
  if (st.ok()) {
    std::fprintf(stderr, "I: trace of %zu events written to %s (open it in ui.perfetto.dev)\n", trace::EventCount(),
                 path_.c_str());
  } else {
    std::fprintf(stderr, "E: writing the trace: %s\n", st.ToString().c_str());
  }
}

}  // namespace zipmoe::cli
