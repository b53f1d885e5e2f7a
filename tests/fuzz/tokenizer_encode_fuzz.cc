// libFuzzer target: Tokenizer::Encode / Decode / StreamDecoder on fuzzed bytes with the fixed
// tokenizers of tests/fuzz/data/ (the first byte picks one, and the flags). Encode must succeed
// on any bytes with ids in the vocabulary; Decode's and the StreamDecoder's output must be valid
// UTF-8. The input read as int32 ids (any value) is decoded too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/tokenizer_unicode.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using zipmoe::fuzz::Fail;
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const zipmoe::Tokenizer& tok = zipmoe::fuzz::FixedTokenizer((flags & 1) ? "mixtral" : "qwen2_moe");
  const bool add_special = (flags & 2) != 0;
  const bool skip_special = (flags & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  auto ids = tok.Encode(text, add_special);
  if (!ids.ok()) Fail("Encode failed: " + ids.status().ToString());
  for (int32_t id : *ids)
    if (id < 0 || id >= tok.vocab_size()) Fail("Encode produced an id outside the vocabulary");
  const std::string decoded = tok.Decode(*ids, skip_special);
  if (!zipmoe::tokenizer::IsValidUtf8(decoded)) Fail("Decode produced invalid UTF-8");

  zipmoe::StreamDecoder stream(tok, skip_special);
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Step(id);
  streamed += stream.Flush();
  if (!zipmoe::tokenizer::IsValidUtf8(streamed)) Fail("StreamDecoder produced invalid UTF-8");

  std::vector<int32_t> raw_ids((size - 1) / 4);
  if (!raw_ids.empty()) std::memcpy(raw_ids.data(), data + 1, raw_ids.size() * 4);
  if (!zipmoe::tokenizer::IsValidUtf8(tok.Decode(raw_ids, skip_special))) Fail("Decode of raw ids produced invalid UTF-8");
  zipmoe::StreamDecoder raw_stream(tok, skip_special);
  for (int32_t id : raw_ids) (void)raw_stream.Step(id);
  (void)raw_stream.Flush();
  return 0;
}
