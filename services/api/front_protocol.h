// The wire between the HTTP front (`zipmoe service front`, services/front/front_server.h) and the
// executor's API (api_server.h) under `zipmoe up` and compose, so that an executor that dies mid-request
// costs the client nothing (issue 43 item 1): the front re-issues the request to the restarted executor
// with the tokens the client already has, and the stream goes on where it stopped.
//
// Request: the front forwards the client's request with the header `X-Zipmoe-Front: 1` and, on a
// completion without a "seed", a seed of its own (so the sampled tokens are the same on every try). A
// re-issued streaming request carries the body field "zipmoe_resume" (ResumeState below); the
// executor honours it only with the header (without it the field is an unknown one, ignored).
//
// Streaming response (text/event-stream) with the header: the executor writes its server-sent events
// in units, each preceded by one SSE comment line that says what the unit is:
//     ": zipmoe " + JSON{"k": kind, "bytes": N, ...} + "\n"   then exactly N bytes of events
// kinds: "head" (the role chunks of a chat, the echoed prompts), "tok" (one choice's output: "i" its
// index, "t" the token ids sampled since its previous unit, "f" true when its finish chunk is in this
// unit), "tail" (an error event, the usage chunk, "data: [DONE]"). A unit's events are a
// deterministic function of the tokens listed so far (the batch-invariant CPU kernels make the tokens
// themselves deterministic), so the front applies a unit only once it has all N bytes: it records
// the tokens and forwards the events, or on a broken connection neither. SSE clients ignore comment
// lines, and the front removes them anyway.
//
// Resuming: ResumeState lists, per choice, the token groups of every unit the client got (in order),
// whether the choice's finish chunk was sent, whether the head was sent, and the response's id and
// created time (kept in every chunk). The executor replays each group through the detokenizer, the
// stop strings and the chat output parser exactly as the units were cut (so their state, and what
// they still hold back, is what it was), prefills prompt + tokens (executor::BatchSession::AddSequence's
// `generated`), and writes only what follows.
//
// Thread-safety: plain values and functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace zipmoe::api {

inline constexpr const char* kFrontHeader = "X-Zipmoe-Front";    // value "1"
inline constexpr const char* kResumeField = "zipmoe_resume";     // body field of a re-issued request
inline constexpr std::string_view kUnitPrefix = ": zipmoe ";     // starts a unit's comment line

struct ChoiceResume {
  size_t index = 0;                              // the choice's index in the response
  std::vector<std::vector<int32_t>> groups;      // token ids of each unit the client got, in order
  bool finished = false;                         // its finish chunk was sent
};

struct ResumeState {
  std::string id;        // the response's "id" (every chunk carries it)
  int64_t created = 0;   // its "created"
  bool head_sent = false;
  std::vector<ChoiceResume> choices;  // choices that got at least one unit; others start afresh
};

nlohmann::json ResumeToJson(const ResumeState& state);
// Parses the "zipmoe_resume" field; false with *error naming the bad part.
bool ResumeFromJson(const nlohmann::json& j, ResumeState* state, std::string* error);

// The comment line of a unit of `payload_bytes` bytes: ": zipmoe {meta + bytes}\n".
std::string UnitHeader(nlohmann::json meta, size_t payload_bytes);

}  // namespace zipmoe::api
