#include "services/api/json_constraint.h"

#include <algorithm>
#include <climits>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

namespace zipmoe::api {
namespace {

// Ordinary string content: no '"', '\\' or control byte, and whole UTF-8 sequences only.
bool Plain(const std::string& b, int32_t* code_points) {
  int32_t cps = 0, pending = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  for (unsigned char c : b) {
    if (pending > 0) {
      if (c < lo || c > hi) return false;
      --pending;
      lo = 0x80;
      hi = 0xBF;
      continue;
    }
    if (c == '"' || c == '\\' || c < 0x20 || !Utf8Lead(c, &pending, &lo, &hi)) return false;
    ++cps;
  }
  *code_points = cps;
  return pending == 0 && !b.empty();
}

}  // namespace

std::shared_ptr<const ConstraintVocabulary> ConstraintVocabulary::Build(const Tokenizer& tokenizer, int64_t model_vocab,
                                                                        std::vector<int32_t> eos_ids) {
  auto v = std::make_shared<ConstraintVocabulary>();
  v->bytes_.assign(static_cast<size_t>(std::max<int64_t>(model_vocab, 0)), std::string());
  // An anchor token before each one, so that decoders that drop a leading space at the start of a
  // text (SentencePiece's Metaspace) give the bytes the token adds in the middle of one.
  int32_t anchor = -1;
  if (Result<std::vector<int32_t>> a = tokenizer.Encode("a", false); a.ok() && a->size() == 1) anchor = (*a)[0];
  const std::string anchor_text = anchor >= 0 ? tokenizer.DecodeBytes({anchor}) : std::string();
  const int32_t n = static_cast<int32_t>(std::min<int64_t>(model_vocab, tokenizer.vocab_size()));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsSpecialToken(id)) {
      if (std::find(eos_ids.begin(), eos_ids.end(), id) == eos_ids.end()) {
        std::string text = tokenizer.DecodeBytes({id});
        if (!text.empty()) v->specials_.emplace_back(id, std::move(text));
      }
      continue;
    }
    std::string b;
    if (anchor >= 0) {
      b = tokenizer.DecodeBytes({anchor, id});
      if (b.compare(0, anchor_text.size(), anchor_text) == 0) {
        b.erase(0, anchor_text.size());
      } else {
        b = tokenizer.DecodeBytes({id});
      }
    } else {
      b = tokenizer.DecodeBytes({id});
    }
    v->bytes_[static_cast<size_t>(id)] = std::move(b);
  }
  // The byte trie: children as sibling lists; a node's token ids contiguous in trie_tokens_.
  std::vector<std::map<uint8_t, int32_t>> children(1);
  std::vector<std::vector<int32_t>> ends(1);
  std::vector<std::pair<int32_t, int32_t>> plain;  // (code points, id)
  for (int32_t id = 0; id < static_cast<int32_t>(v->bytes_.size()); ++id) {
    const std::string& b = v->bytes_[static_cast<size_t>(id)];
    if (b.empty()) continue;
    int32_t node = 0;
    for (unsigned char c : b) {
      auto it = children[static_cast<size_t>(node)].find(c);
      if (it == children[static_cast<size_t>(node)].end()) {
        const int32_t child = static_cast<int32_t>(children.size());
        children[static_cast<size_t>(node)][c] = child;
        children.emplace_back();
        ends.emplace_back();
        node = child;
      } else {
        node = it->second;
      }
    }
    ends[static_cast<size_t>(node)].push_back(id);
    int32_t cps = 0;
    if (Plain(b, &cps)) {
      plain.emplace_back(cps, id);
    } else {
      v->other_ids_.push_back(id);
    }
  }
  v->trie_.resize(children.size());
  for (size_t i = 0; i < children.size(); ++i) {
    TrieNode& t = v->trie_[i];
    t.tokens_begin = static_cast<int32_t>(v->trie_tokens_.size());
    v->trie_tokens_.insert(v->trie_tokens_.end(), ends[i].begin(), ends[i].end());
    t.tokens_end = static_cast<int32_t>(v->trie_tokens_.size());
    int32_t prev = -1;
    for (const auto& [byte, child] : children[i]) {
      v->trie_[static_cast<size_t>(child)].byte = byte;
      if (prev < 0) {
        t.first_child = child;
      } else {
        v->trie_[static_cast<size_t>(prev)].next_sibling = child;
      }
      prev = child;
    }
  }
  std::sort(plain.begin(), plain.end());
  for (const auto& [cps, id] : plain) {
    v->plain_cps_.push_back(cps);
    v->plain_ids_.push_back(id);
  }
  for (int32_t e : eos_ids)
    if (e >= 0 && e < model_vocab) v->eos_.push_back(e);
  return v;
}

JsonConstraint::JsonConstraint(std::shared_ptr<const JsonGrammar> grammar, std::shared_ptr<const ConstraintVocabulary> vocab)
    : vocab_(std::move(vocab)), matcher_(std::move(grammar)) {}

void JsonConstraint::Walk(int32_t node, const JsonMatcher& state) {
  const auto& trie = vocab_->trie_;
  for (int32_t child = trie[static_cast<size_t>(node)].first_child; child >= 0;
       child = trie[static_cast<size_t>(child)].next_sibling) {
    const auto& t = trie[static_cast<size_t>(child)];
    JsonMatcher next = state;
    const char byte = static_cast<char>(t.byte);
    if (!next.Feed(std::string_view(&byte, 1))) continue;
    for (int32_t i = t.tokens_begin; i < t.tokens_end; ++i) Allow(vocab_->trie_tokens_[static_cast<size_t>(i)]);
    Walk(child, next);
  }
}

void JsonConstraint::AllowFreeText() {
  if (!free_classes_ready_) {
    const char first = matcher_.grammar().free_until()[0];
    free_allowed_.assign(vocab_->bytes_.size(), 0);
    for (size_t id = 0; id < vocab_->bytes_.size(); ++id) {
      const std::string& b = vocab_->bytes_[id];
      if (b.empty()) continue;
      if (b.find(first) != std::string::npos) {
        free_marked_ids_.push_back(static_cast<int32_t>(id));
      } else {
        free_allowed_[id] = 1;
        ++free_allowed_count_;
      }
    }
    free_classes_ready_ = true;
  }
  allowed_ = free_allowed_;
  allowed_count_ = free_allowed_count_;
  for (int32_t id : free_marked_ids_) {
    JsonMatcher m = matcher_;
    if (m.Feed(vocab_->bytes_[static_cast<size_t>(id)])) Allow(id);
  }
}

const std::vector<uint8_t>& JsonConstraint::Allowed() {
  allowed_.assign(vocab_->bytes_.size(), 0);
  allowed_count_ = 0;
  if (!broken_) {
    int32_t room = 0;
    if (matcher_.InFreeTextAtRest()) {
      AllowFreeText();
    } else if (matcher_.InPlainString(&room)) {
      for (size_t i = 0; i < vocab_->plain_ids_.size() && vocab_->plain_cps_[i] <= room; ++i)
        Allow(vocab_->plain_ids_[i]);
      for (int32_t id : vocab_->other_ids_) {
        JsonMatcher m = matcher_;
        if (m.Feed(vocab_->bytes_[static_cast<size_t>(id)])) Allow(id);
      }
    } else if (!vocab_->trie_.empty()) {
      Walk(0, matcher_);
    }
    if (matcher_.InFixedText()) {
      for (const auto& [id, text] : vocab_->specials_) {
        JsonMatcher m = matcher_;
        if (m.FeedFixedText(text)) Allow(id);
      }
    }
  }
  // EOS once the value is complete; and when nothing else can follow (a dead end the vocabulary
  // cannot get out of, or a foreign token), so that the sequence ends instead of running on.
  if (broken_ || matcher_.Accepting() || allowed_count_ == 0) {
    for (int32_t e : vocab_->eos_) allowed_[static_cast<size_t>(e)] = 1;
  }
  return allowed_;
}

void JsonConstraint::Mask(float* logits, int64_t vocab) {
  const std::vector<uint8_t>& allowed = Allowed();
  const int64_t n = std::min<int64_t>(vocab, static_cast<int64_t>(allowed.size()));
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t t = 0; t < n; ++t)
    if (!allowed[static_cast<size_t>(t)]) logits[t] = kNegInf;
  for (int64_t t = n; t < vocab; ++t) logits[t] = kNegInf;
}

void JsonConstraint::Accept(int32_t token) {
  if (broken_ || token < 0 || token >= vocab_->size()) return;
  if (std::find(vocab_->eos_.begin(), vocab_->eos_.end(), token) != vocab_->eos_.end()) return;
  int32_t room = 0;
  const std::string& b = vocab_->bytes_[static_cast<size_t>(token)];
  int32_t cps = 0;
  if (matcher_.InPlainString(&room) && Plain(b, &cps) && cps <= room) {
    matcher_.AdvancePlainString(cps);
    return;
  }
  if (b.empty()) {
    for (const auto& [id, text] : vocab_->specials_) {
      if (id == token) {
        if (!matcher_.FeedFixedText(text)) broken_ = true;
        return;
      }
    }
    broken_ = true;
    return;
  }
  if (!matcher_.Feed(b)) broken_ = true;
}

}  // namespace zipmoe::api
