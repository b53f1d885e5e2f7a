#include "services/cli/cli_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/trace_events.h"

namespace zipmoe::cli {

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
  if (path_.empty()) return;
  const std::string probe = fmt::format("{}.probe.{}", path_, ::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    status_ = Status::IoError(fmt::format("--trace-events {}: cannot create a file there: {}", path_,
                                          std::strerror(errno)));
    path_.clear();
    return;
  }
  ::close(fd);
  ::unlink(probe.c_str());
  trace::Enable(process_name);
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
