// Internal to services/api: ApiServer's Request (one HTTP generation request) and Job (one choice =
// one sequence of the batch), shared by its HTTP handlers (api_server.cc) and its batch loop
// (api_batcher.cc). Locking: see the members.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "services/api/api_server.h"
#include "services/api/stop_matcher.h"

namespace zipmoe::api {

// One HTTP generation request: its choices (jobs) and the handler's wait state.
struct ApiServer::Request {
  CompletionRequest request;
  std::string id;
  std::string model;  // echoed in every answer
  int64_t created = 0;
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled{false};  // the client went away or the server stops: end every job
  bool front = false;      // sent by the HTTP front (front_protocol.h): streamed in units
  bool head_sent = false;  // a resumed request whose head unit the client already has
  Mutex mu;                            // guards the jobs' shared fields below
  CondVar cv;                          // waits on mu
  std::vector<std::unique_ptr<Job>> jobs;  // choice index order (prompt-major)
  size_t done_jobs ZM_GUARDED_BY(mu) = 0;
};

// One choice: one sequence in the batch.
struct ApiServer::Job {
  Request* owner = nullptr;
  size_t index = 0;   // the choice's index in the response
  size_t prompt = 0;  // which of request.prompts
  executor::GenerationParams params;
  uint64_t sampler_stream = 0;

  // Shared with the handler (under owner->mu). Not ZM_GUARDED_BY(owner->mu): the analysis cannot tell
  // job->owner->mu from the handler's request->mu, and the handler reads a job's results unlocked
  // once it has seen the job done under the lock (nothing writes them after).
  std::string pending;                               // emit-safe text not sent yet (streaming)
  std::vector<executor::SampledToken> pending_logprobs;  // their tokens' logprobs (streaming)
  std::vector<size_t> pending_offsets;
  std::vector<int32_t> pending_tokens;  // the tokens `pending` came from (streaming; front_protocol.h units)
  bool done = false;
  bool failed = false;
  ApiError error;
  std::string text;  // the whole text once done
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache held (not prefilled)
  std::string finish_reason = "length";
  std::vector<executor::SampledToken> logprobs;  // every token's (when requested)
  std::vector<size_t> offsets;                   // text offset of every token (completions logprobs)
  // The code points of the first offset_bytes bytes of the text so far (text_offset counts characters,
  // as OpenAI's and vLLM's: Python string indices), kept as the text grows.
  size_t offset_bytes = 0, offset_chars = 0;

  // A resumed choice (front_protocol.h), set by the handler before Submit: the tokens the client has,
  // the text each of its units carried (replayed through the chat output parser), and whether it
  // finished (nothing left to run) or ended within those tokens (a stop string, EOS or its token limit:
  // only its finish chunk is left).
  std::vector<int32_t> resume_tokens;
  std::vector<std::string> replayed_texts;
  bool resumed_finished = false;
  bool ended_in_replay = false;
  bool eos_in_replay = false;

  // Batch loop only.
  std::unique_ptr<StopMatcher> matcher;
  std::unique_ptr<StreamDecoder> decoder;
  int64_t count = 0;
  // Feeds generated token t (the count-th) to the stop-string matcher: its text through the stream decoder,
  // none for a stop_token_ids token (it ends the choice); stop strings are matched from the min_tokens-th
  // token on (vLLM's stop checker). Returns whether a stop string has occurred. api_batcher.cc.
  bool FeedText(int32_t t);
  std::chrono::steady_clock::time_point last_token;
  size_t peak_batch = 0;
  // Request grouping (queued, batch loop only): the prompt's predicted experts, once computed, and
  // how many admissions went to sequences queued after it.
  std::optional<ExpertSets> predicted;
  int passed_over = 0;
};

}  // namespace zipmoe::api
