// StopMatcher: the "stop" strings of an OpenAI completion request (services/api/openai_protocol.h)
// over the text a sequence generates, token piece by token piece. It says when a stop string occurs
// (the text is cut before it; the stop string itself is never returned) and how much of the text is
// safe to stream: the last (longest stop string - 1) bytes, which could still be the start of a stop
// string, are held back, and the boundary never splits a UTF-8 sequence.
// Thread-compatible (one per sequence, used by the batch loop only). No errors.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace zipmoe::api {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stop) : stop_(std::move(stop)) {
    for (const auto& s : stop_) hold_ = std::max(hold_, s.size() > 0 ? s.size() - 1 : 0);
  }
  // Appends `piece`; returns true once a stop string occurs (the text is then cut before it). `match`
  // false: the text grows without being searched (vLLM's min_tokens); a later search still finds a stop
  // string that ends in a later piece and starts up to (longest stop string - 1) bytes before it.
  bool Append(const std::string& piece, bool match = true) {
    if (stopped_) return true;
    const size_t from = text_.size() > hold_ ? text_.size() - hold_ : 0;
    text_ += piece;
    if (!match) return false;
    size_t cut = std::string::npos;
    for (const auto& s : stop_) {
      if (s.empty()) continue;
      const size_t pos = text_.find(s, from);
      if (pos != std::string::npos) cut = std::min(cut, pos);
    }
    if (cut == std::string::npos) return false;
    text_.resize(cut);
    stopped_ = true;
    return true;
  }
  // The text not emitted yet that can no longer turn into a stop string; `all` = the stream ended.
  std::string TakeSafe(bool all) {
    size_t end = text_.size();
    if (!all && !stopped_) {
      end = text_.size() > hold_ ? text_.size() - hold_ : 0;
      while (end > emitted_ && end < text_.size() && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
    }
    if (end <= emitted_) return std::string();
    std::string out = text_.substr(emitted_, end - emitted_);
    emitted_ = end;
    return out;
  }
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_;
  size_t hold_ = 0;
  std::string text_;
  size_t emitted_ = 0;
  bool stopped_ = false;
};

}  // namespace zipmoe::api
