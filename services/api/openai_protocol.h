// The OpenAI API's request semantics (https://platform.openai.com/docs/api-reference, as llama.cpp's
// server and vLLM implement them) mapped onto the executor: parsing and validation of
// POST /v1/completions and POST /v1/chat/completions bodies, and the error object. Torch-free and
// free of HTTP, so every rule is unit-tested (tests/services/api/openai_protocol_test.cc).
//
// Fields (anything else is accepted, has no effect and is listed in CompletionRequest::ignored):
//   model                 any string, echoed in the response (this server serves one model)
//   prompt (completions)  string | [string] | [int] | [[int]]; each prompt yields n choices
//   messages (chat)       [{role, content}]; role: system | developer (rendered as system) | user |
//                         assistant | tool; content: string, an array of {"type":"text","text"}
//                         parts (concatenated), or null on an assistant message (e.g. beside
//                         tool_calls, which are accepted and not rendered: tools are unsupported)
//   max_tokens, max_completion_tokens (chat; wins)  >= 0; absent/null = up to the context length
//                         minus the prompt; prompt + max_tokens beyond the context is a 400
//   temperature (1, >= 0; 0 = greedy), top_p ((0, 1]), top_k (>= 0, 0 = off; vLLM's extension),
//   seed (integer; absent = a fresh random seed per request), n (1..128 choices per prompt),
//   presence_penalty, frequency_penalty ([-2, 2], sampler.h), min_p ([0, 1]) and repetition_penalty
//   ((0, 100], 1 = off; vLLM's extensions, sampler.h), stop (string | [string]), stop_token_ids and
//   min_tokens (vLLM's extensions, CompletionRequest below),
//   stream, stream_options.include_usage (only with stream), ignore_eos (vLLM's extension),
//   stop: at most 64 strings of at most 1024 bytes each
//   logprobs: chat: bool, with top_logprobs 0..20 (top_logprobs needs logprobs: true);
//             completions: integer 0..20
//   echo (completions): the prompt's text is prepended to each choice (not with logprobs)
//   best_of (completions): must equal n; response_format: {"type": "text" | "json_object" |
//   "json_schema", "json_schema": {"name", "schema", "strict"}} (json_grammar.h; a schema it cannot
//   enforce is a 400 naming the keyword); tools (chat), tool_choice none | auto | required | a named function
//   (the last two constrain the answer to one call in a <tool_call> template's syntax, else 400), logit_bias {id: [-100, 100]}; functions, suffix (non-empty),
//   top_a: 400 naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checkpoint/model_config.h"
#include "common/tokenizer/tokenizer.h"
#include "services/api/chat_output_parser.h"
#include "services/api/json_grammar.h"
#include "services/executor/sampler.h"

namespace zipmoe::api {

// A client-visible error: HTTP status and the OpenAI error object {message, type, param, code}.
struct ApiError {
  int http_status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // the request field at fault; "" = null
  std::string code;   // a machine-readable code; "" = null
};

ApiError BadRequest(std::string message, std::string param = "");

// Parses a request body that must be one JSON object. On failure *err says why, quoting at most 64
// bytes of the body: where the JSON syntax broke (byte offset and the parser's reason), or which JSON
// type came instead of an object.
bool ParseJsonObject(const std::string& body, nlohmann::json* out, ApiError* err);

// {"error": {"message", "type", "param", "code"}} (param/code null when empty).
nlohmann::json ErrorJson(const ApiError& error);

enum class Endpoint { kCompletions, kChat };

// One prompt of a request.
struct PromptInput {
  std::vector<int32_t> ids;  // token ids fed to the model
  std::string text;          // the prompt's text (decoded from ids for token prompts); for echo
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                 // as sent ("" when absent)
  std::vector<PromptInput> prompts;  // chat: exactly one
  int n = 1;                         // choices per prompt
  int64_t max_tokens = -1;           // -1 = up to the context length
  executor::SamplingParams sampling;  // seed filled in when absent
  bool seeded = false;               // the client gave the seed
  bool ignore_eos = false;
  std::vector<std::string> stop;
  // vLLM's stop_token_ids: sampling one ends the choice (finish_reason "stop"), its text left out, as vLLM
  // does without include_stop_str_in_output; at most 64 ids in [0, vocab).
  std::vector<int32_t> stop_token_ids;
  // vLLM's min_tokens: before this many tokens EOS and stop_token_ids cannot be sampled and stop strings
  // are not matched; <= max_tokens; not with a constrained answer (grammar). 0 = off.
  int64_t min_tokens = 0;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  bool echo = false;
  int32_t logprobs = -1;             // -1 = none; k >= 0 = the sampled token's and the top k
  std::vector<std::string> ignored;  // fields present and without effect (for the server log)
  // Chat: the reasoning / tool-call markers of the model's template (chat_output_parser.h); inactive
  // for completions and for templates without them.
  ChatSyntax chat_syntax;
  // response_format json_object / json_schema, or a forced tool call (tool_choice required / named):
  // the grammar every choice is constrained to (json_grammar.h); null = free text.
  std::shared_ptr<const JsonGrammar> grammar;

  // The new tokens prompt `i` may generate: max_tokens, or the context length minus its length (the
  // whole context_length for an encoder-decoder model, whose prompt feeds the encoder).
  int64_t MaxNewTokens(size_t i, int64_t context_length, bool encoder_decoder = false) const;
};

// What parsing needs from the loaded model.
struct ProtocolContext {
  const Tokenizer* tokenizer = nullptr;  // null = the directory has no tokenizer (token prompts only)
  const ModelConfig* config = nullptr;   // vocab_size, max_position_embeddings
};

// Parses and validates `body`. Returns false with `*error` set (400 naming the field) for anything
// the client got wrong: not a JSON object, a field of the wrong type or range, an unsupported
// feature, an empty prompt, a prompt (plus max_tokens; max_tokens alone for an encoder-decoder model)
// longer than the context, a chat request for a model without a chat template.
bool ParseCompletionRequest(const std::string& body, Endpoint endpoint, const ProtocolContext& context,
                            CompletionRequest* out, ApiError* error);

}  // namespace zipmoe::api
