// libFuzzer target: ApplyChatTemplate with a fuzzed tokenizer_config.json and messages. The input
// is split at NUL bytes: part 0 is the tokenizer_config JSON (dropped unless it parses), then
// (role, content) pairs, contents any bytes; add_generation_prompt is the input size's parity.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer_chat.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back().push_back(static_cast<char>(data[i]));
  }
  auto config = zipmoe::fuzz::ParseJsonOrNull(reinterpret_cast<const uint8_t*>(parts[0].data()), parts[0].size());
  if (!config) return 0;
  std::vector<zipmoe::ChatMessage> messages;
  for (size_t i = 1; i + 1 < parts.size(); i += 2) messages.push_back({parts[i], parts[i + 1]});
  (void)zipmoe::ApplyChatTemplate(*config, messages, /*add_generation_prompt=*/size % 2 == 1);
  return 0;
}
