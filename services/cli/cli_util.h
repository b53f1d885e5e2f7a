// Small helpers shared by the `zipmoe` subcommands (argument parsing).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/pipeline/runtime_options.h"

namespace zipmoe::cli {

// ParseByteSize ("512MiB", "50GB"...) and ParseBudgetPercent ("50%") live in services/pipeline/runtime_options.h (the services parse budgets too).
using runtime::ParseBudgetPercent;
using runtime::ParseByteSize;

// A prompts file for benchmarks and load tests: a JSON array whose items are either strings or
// ShareGPT conversations ({"conversations": [{"from": "human", "value": TEXT}, ...]}; the first
// "human" turn is the prompt), e.g. bench/data/sharegpt-first-turn-500.json. Returns the prompts in
// file order. Errors: kNotFound / kIoError (the file), kInvalidArgument naming the file and the item
// index (not JSON, not an array, an item without a human turn or with an empty prompt, no items).
Result<std::vector<std::string>> LoadPromptsFile(const std::string& path);

// --trace-events FILE of generate / serve: records this process's timeline (common/trace_events.h)
// from construction and writes it to FILE on destruction, saying so (or why not) on stderr. An
// empty path does nothing. FILE's directory is checked at construction (a file created there and
// removed): status() says why a trace could not be written, so the command fails before its work
// instead of only saying so at the end.
class TraceToFile {
 public:
  TraceToFile(std::string path, const std::string& process_name);
  ~TraceToFile();
  TraceToFile(const TraceToFile&) = delete;
  TraceToFile& operator=(const TraceToFile&) = delete;
  const Status& status() const { return status_; }

 private:
  std::string path_;
  Status status_;
};

}  // namespace zipmoe::cli
