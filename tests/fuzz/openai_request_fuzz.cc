// libFuzzer target: the HTTP API's request bodies through api::ParseCompletionRequest, for both
// /v1/completions and /v1/chat/completions, against the fixed tiny Qwen2-MoE tokenizer and
// config.json of tests/fuzz/data/qwen2_moe (chat template: ChatML), then once more without a
// tokenizer (token prompts only). A request that parses must be consistent: prompts non-empty
// with ids in the vocabulary and n in 1..128.
#include <cstddef>
#include <cstdint>
#include <string>

#include "services/api/openai_protocol.h"
#include "tests/fuzz/fuzz_util.h"

namespace api = zipmoe::api;

namespace {

void ParseOne(const std::string& body, api::Endpoint endpoint, const api::ProtocolContext& context) {
  api::CompletionRequest request;
  api::ApiError error;
  if (!api::ParseCompletionRequest(body, endpoint, context, &request, &error)) {
    (void)api::ErrorJson(error).dump();
    return;
  }
  if (request.prompts.empty()) zipmoe::fuzz::Fail("a parsed request has no prompt");
  if (request.n < 1 || request.n > 128) zipmoe::fuzz::Fail("a parsed request has n out of range");
  const int64_t context_length = context.config->max_position_embeddings;
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    const api::PromptInput& p = request.prompts[i];
    if (p.ids.empty()) zipmoe::fuzz::Fail("a parsed request has an empty prompt");
    for (int32_t id : p.ids)
      if (id < 0 || id >= context.config->vocab_size) zipmoe::fuzz::Fail("a prompt id is outside the vocabulary");
    if (request.MaxNewTokens(i, context_length) < 0) zipmoe::fuzz::Fail("negative MaxNewTokens");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  api::ProtocolContext with_tokenizer{&zipmoe::fuzz::FixedTokenizer("qwen2_moe"), &zipmoe::fuzz::FixedModelConfig()};
  api::ProtocolContext without_tokenizer{nullptr, &zipmoe::fuzz::FixedModelConfig()};
  for (api::Endpoint endpoint : {api::Endpoint::kCompletions, api::Endpoint::kChat}) {
    ParseOne(body, endpoint, with_tokenizer);
    ParseOne(body, endpoint, without_tokenizer);
  }
  return 0;
}
