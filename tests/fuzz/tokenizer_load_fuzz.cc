// libFuzzer target: tokenizer.json through Tokenizer::FromJson (no tokenizer_config.json). Input
// that is not JSON is dropped early; a tokenizer that loads encodes and decodes a fixed text with
// and without special tokens, and decodes every id around its vocabulary.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto json = zipmoe::fuzz::ParseJsonOrNull(data, size);
  if (!json) return 0;
  auto tok = zipmoe::Tokenizer::FromJson(*json, nlohmann::json(), "fuzz/tokenizer.json");
  if (!tok.ok()) return 0;
  const zipmoe::Tokenizer& t = **tok;
  for (bool special : {false, true}) {
    auto ids = t.Encode("Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd <|im_start|>\n\t  x\xff", special);
    if (ids.ok()) (void)t.Decode(*ids, special);
  }
  std::vector<int32_t> all;
  const int32_t n = t.vocab_size();
  for (int32_t id = -2; id < n + 2 && id < 4096; ++id) all.push_back(id);
  (void)t.Decode(all);
  (void)t.Decode(all, /*skip_special_tokens=*/true);
  (void)t.IdToToken(n - 1);
  return 0;
}
