// tiktoken BPE files and the Python-side pattern of Moonlight / Kimi tokenizers (see tokenizer_tiktoken.h).
#include "common/tokenizer/tokenizer_tiktoken.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <functional>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "common/file_util.h"
#include "common/tokenizer/tokenizer_precompiled.h"
#include "common/tokenizer/tokenizer_unicode.h"

namespace zipmoe::tokenizer {

namespace {

using nlohmann::json;

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxRank = (int64_t{1} << 31) - (int64_t{1} << 20);  // room for special ids after it
// Special token ids after the ranks, at most (num_reserved_special_tokens, added_tokens_decoder): Kimi's
// tokenizers reserve 256. Each becomes an added token, so an id far past the ranks would make billions.
constexpr int64_t kMaxSpecialIds = int64_t{1} << 20;

std::string ByteLevel(std::string_view bytes) {
  const std::array<std::string, 256>& alphabet = ByteToUnicodeUtf8();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += alphabet[static_cast<unsigned char>(ch)];
  return out;
}

}  // namespace

Result<std::unique_ptr<TiktokenModel>> TiktokenModel::Load(const std::string& path) {
  ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return Parse(text, path);
}

Result<std::unique_ptr<TiktokenModel>> TiktokenModel::Parse(std::string_view text, const std::string& where) {
  std::unique_ptr<TiktokenModel> m(new TiktokenModel());
  // token_of_id_ is indexed by rank: a rank may leave gaps below it but stays below the file's lines
  // plus kMaxIdGap (tokenizer_model.h; a real file numbers its L tokens 0 .. L-1).
  const int64_t lines = static_cast<int64_t>(std::count(text.begin(), text.end(), '\n')) +
                        (!text.empty() && text.back() != '\n' ? 1 : 0);
  const int64_t rank_limit = std::min<int64_t>(kMaxRank, lines + kMaxIdGap);
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string at = fmt::format("{}: line {}", where, line_no);
    if (space == std::string_view::npos || space == 0 || line.find(' ', space + 1) != std::string_view::npos) {
      return Status::Corruption(at + ": expected '<base64 token> <rank>'");
    }
    std::optional<std::string> bytes = DecodeBase64(line.substr(0, space));
    if (!bytes) return Status::Corruption(at + ": the token is not base64");
    if (bytes->empty()) return Status::Corruption(at + ": empty token");
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = -1;
    const auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0 || rank >= kMaxRank) {
      return Status::Corruption(fmt::format("{}: rank '{}' is not an integer in [0, {})", at, rank_text, kMaxRank));
    }
    if (rank >= rank_limit) {
      return Status::Corruption(fmt::format(
          "{}: rank {} is far past the file's {} lines (ranks number the tokens from 0 with few gaps: at most {})", at,
          rank, lines, rank_limit - 1));
    }
    const auto id = static_cast<int32_t>(rank);
    if (static_cast<size_t>(id) >= m->token_of_id_.size()) {
      m->token_of_id_.resize(static_cast<size_t>(id) + 1);
      m->id_used_.resize(static_cast<size_t>(id) + 1, false);
    }
    if (m->id_used_[id]) return Status::Corruption(fmt::format("{}: rank {} given twice", at, id));
    if (!m->rank_of_bytes_.emplace(*bytes, id).second) {
      return Status::Corruption(fmt::format("{}: token {} given twice", at, line.substr(0, space)));
    }
    m->id_used_[id] = true;
    m->token_of_id_[id] = ByteLevel(*bytes);
    m->id_of_token_.emplace(m->token_of_id_[id], id);
    ++m->n_ranks_;
  }
  for (int b = 0; b < 256; ++b) {
    if (m->rank_of_bytes_.count(std::string(1, static_cast<char>(b))) == 0) {
      return Status::Corruption(fmt::format("{}: no rank for the single byte 0x{:02X} (every byte needs one)", where, b));
    }
  }
  return m;
}

Status TiktokenModel::Tokenize(std::string_view piece, std::vector<int32_t>* ids) const {
  if (piece.empty()) return Status::Ok();
  auto rank_of = [&](size_t begin, size_t end) -> int32_t {
    auto it = rank_of_bytes_.find(std::string(piece.substr(begin, end - begin)));
    return it == rank_of_bytes_.end() ? kNoRank : it->second;
  };
  if (const int32_t whole = rank_of(0, piece.size()); whole != kNoRank) {
    ids->push_back(whole);
    return Status::Ok();
  }
  // Parts are byte ranges [start, next[start]); a pair is a part and the one after it. tiktoken's
  // byte_pair_merge rescans for the lowest-ranked pair (leftmost on ties) after every merge; a heap
  // ordered by (rank, start) with stale entries skipped picks the same pair in O(n log n), so a long
  // piece (a run of punctuation) does not cost O(n^2).
  const size_t n = piece.size();
  std::vector<size_t> next(n + 1), prev(n + 1);
  std::vector<bool> alive(n + 1, true);
  for (size_t i = 0; i <= n; ++i) {
    next[i] = i + 1;
    prev[i] = i == 0 ? 0 : i - 1;
  }
  using Entry = std::tuple<int32_t, size_t, size_t>;  // rank, start, end of the pair
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push_pair = [&](size_t start) {
    if (start >= n || next[start] >= n) return;
    const size_t end = next[next[start]];
    const int32_t rank = rank_of(start, end);
    if (rank != kNoRank) heap.emplace(rank, start, end);
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const auto [rank, start, end] = heap.top();
    heap.pop();
    if (!alive[start] || next[start] >= n || next[next[start]] != end) continue;  // stale
    const size_t mid = next[start];
    alive[mid] = false;
    next[start] = end;
    if (end <= n) prev[end] = start;
    push_pair(start);
    if (start > 0) push_pair(prev[start]);
  }
  for (size_t start = 0; start < n; start = next[start]) {
    const int32_t rank = rank_of(start, next[start]);
    if (rank == kNoRank) {  // unreachable after Parse's byte check; kept as an error, not a bad id
      return Status::Internal(fmt::format("tiktoken: no rank for bytes at {} of a piece", start));
    }
    ids->push_back(rank);
  }
  return Status::Ok();
}

std::optional<int32_t> TiktokenModel::TokenToId(std::string_view token) const {
  auto it = id_of_token_.find(std::string(token));
  if (it == id_of_token_.end()) return std::nullopt;
  return it->second;
}

const std::string* TiktokenModel::IdToToken(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= token_of_id_.size() || !id_used_[id]) return nullptr;
  return &token_of_id_[id];
}

// ---- Python source ----

namespace {

bool IsIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool IsStringPrefix(char c) { return c == 'r' || c == 'R' || c == 'u' || c == 'U'; }

// Position just after `name = ` (an assignment, not ==) at the start of a statement, or npos.
size_t FindAssignment(std::string_view src, std::string_view name) {
  for (size_t at = src.find(name); at != std::string_view::npos; at = src.find(name, at + 1)) {
    if (at > 0 && (IsIdentChar(src[at - 1]) || src[at - 1] == '.')) continue;
    size_t p = at + name.size();
    if (p < src.size() && IsIdentChar(src[p])) continue;
    // Only spaces/tabs before it on its line: a statement, not a use inside an expression.
    size_t line = src.rfind('\n', at);
    line = line == std::string_view::npos ? 0 : line + 1;
    if (src.substr(line, at - line).find_first_not_of(" \t") != std::string_view::npos) continue;
    while (p < src.size() && (src[p] == ' ' || src[p] == '\t')) ++p;
    if (p < src.size() && src[p] == ':') {  // annotated: `pat_str: str = ...`
      const size_t eq = src.find('=', p);
      const size_t eol = src.find('\n', p);
      if (eq == std::string_view::npos || (eol != std::string_view::npos && eq > eol)) continue;
      p = eq;
    }
    if (p + 1 < src.size() && src[p] == '=' && src[p + 1] != '=') return p + 1;
  }
  return std::string_view::npos;
}

class PySource {
 public:
  PySource(std::string_view src, size_t pos, std::string where) : s_(src), p_(pos), where_(std::move(where)) {}

  void SkipSpace() {
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p_;
      } else if (c == '\\' && p_ + 1 < s_.size() && s_[p_ + 1] == '\n') {
        p_ += 2;
      } else if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n') ++p_;
      } else {
        break;
      }
    }
  }
  bool Eat(std::string_view token) {
    SkipSpace();
    if (s_.substr(p_, token.size()) != token) return false;
    p_ += token.size();
    return true;
  }
  bool AtString() {
    SkipSpace();
    size_t q = p_;
    while (q < s_.size() && q < p_ + 2 && IsStringPrefix(s_[q])) ++q;
    return q < s_.size() && (s_[q] == '"' || s_[q] == '\'');
  }
  // One or more adjacent string literals, concatenated.
  Result<std::string> Strings() {
    std::string out;
    if (!AtString()) return Error("expected a string literal");
    while (AtString()) {
      ZM_ASSIGN_OR_RETURN(std::string one, OneString());
      out += one;
    }
    return out;
  }
  Status Error(std::string_view what) const {
    const size_t line = static_cast<size_t>(std::count(s_.begin(), s_.begin() + std::min(p_, s_.size()), '\n')) + 1;
    return Status::Corruption(fmt::format("{}: line {}: pat_str: {} (zipmoe reads a string literal, adjacent "
                                          "literals or \"<sep>\".join([literals]))", where_, line, what));
  }

 private:
  Result<std::string> OneString() {
    bool raw = false;
    while (IsStringPrefix(s_[p_])) {
      raw = raw || s_[p_] == 'r' || s_[p_] == 'R';
      ++p_;
    }
    const char quote = s_[p_];
    const bool triple = s_.substr(p_, 3) == std::string(3, quote);
    const std::string close = triple ? std::string(3, quote) : std::string(1, quote);
    p_ += close.size();
    std::string out;
    while (true) {
      if (p_ >= s_.size()) return Error("unterminated string literal");
      if (s_.substr(p_, close.size()) == close) {
        p_ += close.size();
        return out;
      }
      const char c = s_[p_];
      if (!triple && c == '\n') return Error("newline in a string literal");
      if (c != '\\') {
        out += c;
        ++p_;
        continue;
      }
      if (p_ + 1 >= s_.size()) return Error("unterminated string literal");
      const char e = s_[p_ + 1];
      if (raw) {  // a raw string keeps the backslash; \<quote> does not end it
        out += c;
        out += e;
        p_ += 2;
        continue;
      }
      p_ += 2;
      switch (e) {
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case '\n': break;  // line continuation inside the literal
        case 'u': {
          if (p_ + 4 > s_.size()) return Error("truncated \\u escape");
          uint32_t cp = 0;
          const auto [end, ec] = std::from_chars(s_.data() + p_, s_.data() + p_ + 4, cp, 16);
          if (ec != std::errc() || end != s_.data() + p_ + 4) return Error("malformed \\u escape");
          AppendUtf8(static_cast<char32_t>(cp), &out);
          p_ += 4;
          break;
        }
        default:  // unknown escapes keep their backslash (Python)
          out += '\\';
          out += e;
      }
    }
  }

  std::string_view s_;
  size_t p_;
  std::string where_;
};

}  // namespace

Result<std::string> ExtractTiktokenPattern(std::string_view python_source, const std::string& where) {
  const size_t at = FindAssignment(python_source, "pat_str");
  if (at == std::string_view::npos) return Status::Corruption(where + ": no 'pat_str = ...' assignment");
  PySource src(python_source, at, where);
  const bool paren = src.Eat("(");  // `( "|".join(...) )` or `("a" "b")`
  std::string value;
  ZM_ASSIGN_OR_RETURN(std::string first, src.Strings());
  if (src.Eat(".join")) {
    if (!src.Eat("(")) return src.Error("expected '(' after .join");
    const bool list = src.Eat("[") || src.Eat("(");
    bool first_item = true;
    while (true) {
      if (list && (src.Eat("]") || src.Eat(")"))) break;
      if (!first_item && !src.Eat(",")) return src.Error("expected ',' between the joined literals");
      if (list && (src.Eat("]") || src.Eat(")"))) break;  // trailing comma
      ZM_ASSIGN_OR_RETURN(std::string item, src.Strings());
      if (!first_item) value += first;
      value += item;
      first_item = false;
      if (!list) break;
    }
    if (!src.Eat(")")) return src.Error("expected ')' closing .join(");
  } else {
    value = std::move(first);
  }
  if (paren && !src.Eat(")")) return src.Error("expected ')'");
  if (value.empty()) return src.Error("the pattern is empty");
  return value;
}

std::optional<int64_t> ExtractPythonInt(std::string_view python_source, std::string_view name) {
  const size_t at = FindAssignment(python_source, name);
  if (at == std::string_view::npos) return std::nullopt;
  size_t p = python_source.find_first_not_of(" \t", at);
  if (p == std::string_view::npos) return std::nullopt;
  // Digits with Python's underscores between them (400_000).
  std::string digits;
  size_t q = p;
  while (q < python_source.size() && (std::isdigit(static_cast<unsigned char>(python_source[q])) != 0 ||
                                      (python_source[q] == '_' && !digits.empty()))) {
    if (python_source[q] != '_') digits += python_source[q];
    ++q;
  }
  if (digits.empty() || digits.size() > 18 || python_source[q - 1] == '_') return std::nullopt;
  if (q < python_source.size() && (IsIdentChar(python_source[q]) || python_source[q] == '.')) return std::nullopt;
  return std::stoll(digits);
}

bool PythonIsSpace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::vector<std::string_view> SplitLongRuns(std::string_view text, int64_t max_chars, int64_t max_run) {
  std::vector<std::string_view> out;
  size_t chunk_begin = 0;
  while (true) {
    // One chunk: up to max_chars code points.
    size_t chunk_end = chunk_begin;
    for (int64_t k = 0; chunk_end < text.size() && (max_chars <= 0 || k < max_chars); ++k) {
      chunk_end += std::max<size_t>(1, ValidUtf8SequenceLength(text, chunk_end));  // valid input: never 0
    }
    const std::string_view chunk = text.substr(chunk_begin, chunk_end - chunk_begin);
    size_t slice_begin = 0, pos = 0;
    if (max_run > 0 && !chunk.empty()) {
      size_t probe = 0;
      bool run_is_space = PythonIsSpace(NextCodePoint(chunk, &probe));
      int64_t run = 0;
      while (pos < chunk.size()) {
        const size_t at = pos;
        const bool space = PythonIsSpace(NextCodePoint(chunk, &pos));
        if (space != run_is_space) {
          run = 1;
          run_is_space = space;
        } else if (++run > max_run) {
          out.push_back(chunk.substr(slice_begin, at - slice_begin));
          slice_begin = at;
          run = 1;
        }
      }
    }
    out.push_back(chunk.substr(slice_begin));
    chunk_begin = chunk_end;
    if (chunk_begin >= text.size()) break;
  }
  return out;
}

// ---- class set operations ----

Result<std::string> TranslateClassSetOperations(std::string_view pattern, const std::string& where) {
  std::string out;
  out.reserve(pattern.size() + 32);
  size_t i = 0;
  auto fail = [&](size_t at, std::string_view what) {
    return Status::InvalidArgument(fmt::format("{}: pat_str at offset {}: {}", where, at, what));
  };
  while (i < pattern.size()) {
    const char c = pattern[i];
    if (c == '\\') {  // an escape outside a class: copy it whole (\p{..} included)
      out += pattern.substr(i, std::min<size_t>(2, pattern.size() - i));
      i += 2;
      continue;
    }
    if (c != '[') {
      out += c;
      ++i;
      continue;
    }
    // A class: find its end, the depth-0 set operator and any nested class.
    const size_t open = i;
    size_t j = i + 1;
    if (j < pattern.size() && pattern[j] == '^') ++j;
    if (j < pattern.size() && pattern[j] == ']') ++j;  // a leading ']' is literal
    int depth = 0;
    size_t op = std::string_view::npos;
    std::string op_kind;
    bool nested_before_op = false;
    for (; j < pattern.size(); ++j) {
      const char d = pattern[j];
      if (d == '\\') {
        ++j;
        if (j < pattern.size() && (pattern[j] == 'p' || pattern[j] == 'P') && j + 1 < pattern.size() && pattern[j + 1] == '{') {
          const size_t close = pattern.find('}', j);
          if (close == std::string_view::npos) return fail(j, "unterminated \\p{");
          j = close;
        }
        continue;
      }
      if (d == '[') {
        if (pattern.substr(j, 2) == "[:") {  // POSIX [:name:]
          const size_t close = pattern.find(":]", j + 2);
          if (close != std::string_view::npos) {
            j = close + 1;
            continue;
          }
        }
        if (op == std::string_view::npos) nested_before_op = true;
        ++depth;
        continue;
      }
      if (d == ']') {
        if (depth == 0) break;
        --depth;
        continue;
      }
      if (depth == 0 && (pattern.substr(j, 2) == "&&" || pattern.substr(j, 2) == "--")) {
        if (op != std::string_view::npos) return fail(j, "more than one set operation in a character class");
        op = j;
        op_kind = std::string(pattern.substr(j, 2));
        ++j;
      }
    }
    if (j >= pattern.size()) return fail(open, "unterminated character class");
    const size_t close = j;
    if (op == std::string_view::npos) {  // a plain class: copied unchanged
      out += pattern.substr(open, close + 1 - open);
      i = close + 1;
      continue;
    }
    if (nested_before_op) return fail(open, "a nested class before a set operation");
    if (pattern[open + 1] == '^') return fail(open, "a negated class with a set operation");
    const std::string_view left = pattern.substr(open + 1, op - open - 1);
    std::string_view right = pattern.substr(op + 2, close - op - 2);
    if (left.empty() || right.empty()) return fail(op, "an empty operand of a set operation");
    std::string right_class;
    if (right.front() == '[' && right.back() == ']') {
      ZM_ASSIGN_OR_RETURN(right_class, TranslateClassSetOperations(right, where));
    } else {
      right_class = "[" + std::string(right) + "]";
    }
    out += op_kind == "&&" ? "(?:(?=" : "(?:(?!";
    out += right_class;
    out += ")[";
    out += left;
    out += "])";
    i = close + 1;
  }
  return out;
}

// ---- a model directory ----

Result<TiktokenDirectory> LoadTiktokenDirectory(const std::string& dir, const json& config) {
  const std::string model_path = JoinPath(dir, "tiktoken.model");
  if (!FileExists(model_path)) return Status::NotFound(fmt::format("{}: no tokenizer.json and no tiktoken.model", dir));
  TiktokenDirectory out;
  ZM_ASSIGN_OR_RETURN(out.model, TiktokenModel::Load(model_path));

  // The Python file: auto_map.AutoTokenizer's module first ("tokenization_kimi.TikTokenTokenizer").
  std::vector<std::string> candidates;
  if (config.is_object() && config.contains("auto_map") && config["auto_map"].is_object() &&
      config["auto_map"].contains("AutoTokenizer")) {
    const json& entry = config["auto_map"]["AutoTokenizer"];
    std::vector<std::string> names;
    if (entry.is_string()) names.push_back(entry.get<std::string>());
    if (entry.is_array()) {
      for (const json& e : entry) {
        if (e.is_string()) names.push_back(e.get<std::string>());
      }
    }
    for (const std::string& name : names) {
      const size_t dot = name.rfind('.');
      std::string module = dot == std::string::npos ? name : name.substr(0, dot);
      const size_t sep = module.rfind("--");  // "repo--module" form of remote code
      if (sep != std::string::npos) module = module.substr(sep + 2);
      candidates.push_back(JoinPath(dir, module + ".py"));
    }
  }
  std::vector<std::string> others;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("tokenization_", 0) == 0 && name.size() > 3 && name.substr(name.size() - 3) == ".py")
      others.push_back(JoinPath(dir, name));
  }
  std::sort(others.begin(), others.end());
  candidates.insert(candidates.end(), others.begin(), others.end());
  std::string source;
  for (const std::string& path : candidates) {
    if (!FileExists(path)) continue;
    ZM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    if (FindAssignment(text, "pat_str") == std::string_view::npos) continue;
    source = std::move(text);
    out.pattern_source = path;
    break;
  }
  if (out.pattern_source.empty()) {
    return Status::NotFound(fmt::format("{}: tiktoken.model needs the tokenization_*.py that sets its pat_str (the "
                                        "checkpoint's TikTokenTokenizer); none found", dir));
  }
  ZM_ASSIGN_OR_RETURN(std::string pat_str, ExtractTiktokenPattern(source, out.pattern_source));
  ZM_ASSIGN_OR_RETURN(std::string pcre_pattern, TranslateClassSetOperations(pat_str, out.pattern_source));

  // Special tokens: ids n_ranks .. n_ranks + reserved - 1 (tokenization_*.py), named by
  // added_tokens_decoder where it names them.
  const int32_t base = out.model->id_limit();
  int64_t last = base + ExtractPythonInt(source, "num_reserved_special_tokens").value_or(256) - 1;
  std::unordered_map<int64_t, json> configured;
  const std::string where = JoinPath(dir, "tokenizer_config.json") + ": added_tokens_decoder";
  if (config.is_object() && config.contains("added_tokens_decoder")) {
    const json& decoder = config["added_tokens_decoder"];
    if (!decoder.is_object()) return Status::Corruption(where + ": expected an object");
    for (const auto& [key, value] : decoder.items()) {
      int64_t id = -1;
      const auto [end, conv] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (conv != std::errc() || end != key.data() + key.size() || id < 0 || id >= kMaxRank + (int64_t{1} << 20)) {
        return Status::Corruption(fmt::format("{}: key '{}' is not a token id", where, key));
      }
      if (!value.is_object() || !value.contains("content") || !value["content"].is_string() ||
          value["content"].get<std::string>().empty()) {
        return Status::Corruption(fmt::format("{}[\"{}\"]: expected an object with a non-empty \"content\"", where, key));
      }
      if (id < base) {
        return Status::Corruption(fmt::format("{}[\"{}\"]: id {} is a rank of tiktoken.model (special tokens follow the "
                                              "{} ranks)", where, key, id, base));
      }
      configured[id] = value;
      last = std::max(last, id);
    }
  }
  if (last - base >= kMaxSpecialIds) {
    return Status::Corruption(fmt::format(
        "{}: special token ids run from {} to {} ({} ids; at most {} follow the ranks): num_reserved_special_tokens "
        "of {} or an added_tokens_decoder key is far too large", where, base, last, last - base + 1, kMaxSpecialIds,
        out.pattern_source));
  }
  json added = json::array();
  for (int64_t id = base; id <= last; ++id) {
    auto it = configured.find(id);
    const std::string content =
        it != configured.end() ? it->second["content"].get<std::string>() : fmt::format("<|reserved_token_{}|>", id);
    added.push_back({{"id", id}, {"content", content}, {"special", true}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}});
  }
  out.max_encode_chars = std::max<int64_t>(0, ExtractPythonInt(source, "TIKTOKEN_MAX_ENCODE_CHARS").value_or(0));
  out.max_run_chars = std::max<int64_t>(0, ExtractPythonInt(source, "MAX_NO_WHITESPACES_CHARS").value_or(0));
  out.tokenizer_json = {
      {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", pcre_pattern}}}, {"behavior", "Removed"}, {"invert", true}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
      {"added_tokens", std::move(added)},
  };
  return out;
}

}  // namespace zipmoe::tokenizer
