#include "services/api/json_grammar.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

namespace zipmoe::api {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// String formats (StringFormat): one character at a time over a state packed in 64 bits.

namespace {

// State fields: the position in the text, the year and month read so far (a date's day depends on
// them), the previous digit (a two-digit group's second digit depends on its first), the time part's
// phase and the fraction's digit count.
struct FormatState {
  uint64_t bits = 0;
  uint32_t Get(int shift, int width) const { return static_cast<uint32_t>(bits >> shift) & ((1u << width) - 1); }
  void Set(int shift, int width, uint32_t v) {
    const uint64_t mask = ((uint64_t{1} << width) - 1) << shift;
    bits = (bits & ~mask) | ((static_cast<uint64_t>(v) << shift) & mask);
  }
  uint32_t pos() const { return Get(0, 8); }
  uint32_t year() const { return Get(8, 14); }
  uint32_t month() const { return Get(22, 4); }
  uint32_t prev() const { return Get(26, 4); }
  uint32_t phase() const { return Get(30, 5); }
  uint32_t frac() const { return Get(35, 4); }
};

constexpr uint32_t kTimeDone = 31;  // the time phase once Z or the offset's last digit is written

bool Leap(uint32_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
uint32_t DaysIn(uint32_t month, uint32_t year) {
  static const uint32_t kDays[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return month == 2 && Leap(year) ? 29 : kDays[month];
}
bool Digit(uint8_t c) { return c >= '0' && c <= '9'; }

// A date's character at position p (0-9) of YYYY-MM-DD.
bool DateStep(FormatState& s, uint32_t p, uint8_t c) {
  if (p == 4 || p == 7) return c == '-';
  if (!Digit(c)) return false;
  const uint32_t d = c - '0';
  if (p < 4) {
    if (p == 3 && s.year() * 10 + d == 0) return false;  // year 0000: not a date Python reads
    s.Set(8, 14, s.year() * 10 + d);
    return true;
  }
  if (p == 5) {
    if (d > 1) return false;
    s.Set(26, 4, d);
    return true;
  }
  if (p == 6) {
    const uint32_t m = s.prev() * 10 + d;
    if (m < 1 || m > 12) return false;
    s.Set(22, 4, m);
    return true;
  }
  const uint32_t days = DaysIn(s.month(), s.year());
  if (p == 8) {
    if (d * 10 > days) return false;
    s.Set(26, 4, d);
    return true;
  }
  const uint32_t day = s.prev() * 10 + d;  // p == 9
  return day >= 1 && day <= days;
}

// A time's next character (RFC 3339 full-time), its phase in the state.
bool TimeStep(FormatState& s, uint8_t c) {
  const uint32_t ph = s.phase();
  const auto two_digits = [&](uint32_t max_first, uint32_t max_value) {  // a group's digits at ph, ph + 1
    if (!Digit(c)) return false;
    const uint32_t d = c - '0';
    if (s.Get(39, 1) == 0) {  // first digit
      if (d > max_first) return false;
      s.Set(26, 4, d);
      s.Set(39, 1, 1);
      return true;
    }
    if (s.prev() * 10 + d > max_value) return false;
    s.Set(39, 1, 0);
    return true;
  };
  switch (ph) {
    case 0: case 1: case 3: case 4: case 6: case 7: {  // HH MM SS
      const bool hours = ph <= 1;
      if (!two_digits(hours ? 2 : 5, hours ? 23 : 59)) return false;
      s.Set(30, 5, ph + 1);
      return true;
    }
    case 2: case 5:
      if (c != ':') return false;
      s.Set(30, 5, ph + 1);
      return true;
    case 8:  // after the seconds
    case 9:  // in the fraction
      if (ph == 8 && c == '.') {
        s.Set(30, 5, 9);
        return true;
      }
      if (ph == 9 && Digit(c)) {
        if (s.frac() >= 9) return false;
        s.Set(35, 4, s.frac() + 1);
        return true;
      }
      if (ph == 9 && s.frac() == 0) return false;  // '.' needs a digit
      if (c == 'Z') {
        s.Set(30, 5, kTimeDone);
        return true;
      }
      if (c == '+' || c == '-') {
        s.Set(30, 5, 10);
        return true;
      }
      return false;
    case 10: case 11: case 13: case 14: {  // the offset's HH MM
      const bool hours = ph <= 11;
      if (!two_digits(hours ? 2 : 5, hours ? 23 : 59)) return false;
      s.Set(30, 5, ph == 14 ? kTimeDone : ph + 1);
      return true;
    }
    case 12:
      if (c != ':') return false;
      s.Set(30, 5, 13);
      return true;
    default: return false;
  }
}

bool FormatStep(StringFormat f, FormatState& s, uint8_t c) {
  const uint32_t p = s.pos();
  if (p >= 200) return false;
  bool ok = false;
  switch (f) {
    case StringFormat::kDate: ok = p < 10 && DateStep(s, p, c); break;
    case StringFormat::kTime: ok = TimeStep(s, c); break;
    case StringFormat::kDateTime: ok = p < 10 ? DateStep(s, p, c) : p == 10 ? c == 'T' : TimeStep(s, c); break;
    case StringFormat::kUuid:
      ok = p < 36 && ((p == 8 || p == 13 || p == 18 || p == 23) ? c == '-' : (Digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
      break;
    default: ok = false;
  }
  if (ok) s.Set(0, 8, p + 1);
  return ok;
}

bool FormatComplete(StringFormat f, const FormatState& s) {
  switch (f) {
    case StringFormat::kDate: return s.pos() == 10;
    case StringFormat::kTime: return s.phase() == kTimeDone;
    case StringFormat::kDateTime: return s.pos() > 10 && s.phase() == kTimeDone;
    case StringFormat::kUuid: return s.pos() == 36;
    default: return true;
  }
}

}  // namespace

StringFormat StringFormatOf(const std::string& name, bool* ok) {
  *ok = true;
  if (name == "date") return StringFormat::kDate;
  if (name == "time") return StringFormat::kTime;
  if (name == "date-time") return StringFormat::kDateTime;
  if (name == "uuid") return StringFormat::kUuid;
  *ok = false;
  return StringFormat::kNone;
}

bool StringFormatAdmits(StringFormat format, const std::string& text) {
  FormatState s;
  for (char ch : text)
    if (!FormatStep(format, s, static_cast<uint8_t>(ch))) return false;
  return FormatComplete(format, s);
}

// ---------------------------------------------------------------------------------------------
// Compilation

class SchemaCompiler {
 public:
  // `documents`: JSON pointers into `root` to subschemas that are schema documents of their own (their
  // "$ref"s resolve against them) and the label their paths start with in errors.
  explicit SchemaCompiler(const json& root, const std::vector<JsonGrammar::Document>& documents = {})
      : root_(root), doc_(&root) {
    for (const JsonGrammar::Document& d : documents) {
      const json* at = nullptr;
      try {
        at = &root.at(json::json_pointer(d.pointer));
      } catch (const json::exception&) {
        continue;  // not in this schema: nothing to scope
      }
      if (at == &root) {
        root_label_ = d.label;
      } else {
        documents_[at] = d.label;
      }
    }
  }

  Result<std::shared_ptr<const JsonGrammar>> Run(bool object_root) {
    auto g = std::make_shared<JsonGrammar>();
    g_ = g.get();
    any_ = Add(SchemaNode{}, "");
    doc_label_ = root_label_;
    ZM_ASSIGN_OR_RETURN(int32_t root, Compile(root_, root_label_));
    if (object_root) {
      SchemaNode& r = g_->nodes_[static_cast<size_t>(root)];
      if (r.kind == SchemaNode::Kind::kAny) {
        SchemaNode obj;
        obj.kind = SchemaNode::Kind::kObject;
        obj.additional = any_;
        root = Add(std::move(obj), root_label_);
      } else if (r.kind != SchemaNode::Kind::kObject) {
        return Status::InvalidArgument("the schema's root must be an object");
      }
    }
    g_->root_ = root;
    g_->alternatives_ = {JsonGrammar::Alternative{"", "", root}};
    ZM_RETURN_IF_ERROR(CheckNoLeftRecursion());
    ZM_RETURN_IF_ERROR(CheckDepth(*g_, paths_));
    return std::shared_ptr<const JsonGrammar>(std::move(g));
  }

  // Each node's path in the schema (for errors), in node order.
  const std::vector<std::string>& paths() const { return paths_; }

  // Refuses a grammar whose values cannot be completed within the matcher's kMaxDepth frames: every
  // alternative's root needs at most kMaxDepth frames less those below it (its suffix text's) and must
  // admit some finite value. Sets every node's min_frames (SchemaNode).
  static Status CheckDepth(JsonGrammar& g, const std::vector<std::string>& paths) {
    std::vector<SchemaNode>& nodes = g.nodes_;
    for (SchemaNode& n : nodes) n.min_frames = kNoFiniteValue;
    // Least fixpoint: a node's value completes in min_frames once its children's do.
    for (bool changed = true; changed;) {
      changed = false;
      for (SchemaNode& n : nodes) {
        int32_t v = 1;
        using K = SchemaNode::Kind;
        const auto child = [&](int32_t i) { return nodes[static_cast<size_t>(i)].min_frames; };
        if (n.kind == K::kArray) {
          if (n.min_items > 0) v = child(n.items) >= kNoFiniteValue ? kNoFiniteValue : 1 + child(n.items);
        } else if (n.kind == K::kObject) {
          for (size_t k = 0; k < n.key_nodes.size() && v < kNoFiniteValue; ++k) {
            if ((n.required >> k & 1) == 0) continue;
            v = child(n.key_nodes[k]) >= kNoFiniteValue ? kNoFiniteValue : std::max(v, 1 + child(n.key_nodes[k]));
          }
        } else if (n.kind == K::kAnyOf) {
          v = kNoFiniteValue;
          for (int32_t a : n.alternatives) v = std::min(v, child(a));
        }
        if (v < n.min_frames) {
          n.min_frames = v;
          changed = true;
        }
      }
    }
    for (const JsonGrammar::Alternative& alt : g.alternatives_) {
      const int32_t base_frames = alt.suffix.empty() ? 0 : 1;
      const int32_t need = nodes[static_cast<size_t>(alt.root)].min_frames;
      const std::string& where = static_cast<size_t>(alt.root) < paths.size() ? paths[static_cast<size_t>(alt.root)] : "";
      if (need >= kNoFiniteValue) {
        // Name the first object or array that cannot be completed: where the recursion is required.
        std::string culprit = where;
        for (size_t i = 0; i < nodes.size() && i < paths.size(); ++i) {
          const SchemaNode& n = nodes[i];
          if (n.min_frames >= kNoFiniteValue &&
              (n.kind == SchemaNode::Kind::kObject || n.kind == SchemaNode::Kind::kArray)) {
            culprit = paths[i];
            break;
          }
        }
        return Status::InvalidArgument(fmt::format(
            "the schema admits no finite value: a required property or minItems item at {} refers back to "
            "itself without end",
            Where(culprit)));
      }
      if (base_frames + need > kMaxDepth)
        return Status::InvalidArgument(fmt::format("the schema at {} requires nesting {} levels deep; at most {}",
                                                   Where(where), need, kMaxDepth - base_frames));
    }
    return Status::Ok();
  }

 private:
  int32_t Add(SchemaNode n, const std::string& path) {
    g_->nodes_.push_back(std::move(n));
    paths_.push_back(path);
    return static_cast<int32_t>(g_->nodes_.size() - 1);
  }
  SchemaNode& At(int32_t i) { return g_->nodes_[static_cast<size_t>(i)]; }

  static std::string Where(const std::string& path) { return path.empty() ? "the root" : path; }

  // An anyOf whose alternatives lead back to it before any byte is written (left recursion, e.g.
  // {"anyOf": [{"$ref": "#"}, {"type": "null"}]}) would expand forever in the matcher: refused.
  Status CheckNoLeftRecursion() {
    const std::vector<SchemaNode>& nodes = g_->nodes_;
    std::vector<uint8_t> state(nodes.size(), 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<int32_t, size_t>> stack;
    for (size_t start = 0; start < nodes.size(); ++start) {
      if (state[start] != 0 || nodes[start].kind != SchemaNode::Kind::kAnyOf) continue;
      stack.emplace_back(static_cast<int32_t>(start), 0);
      state[start] = 1;
      while (!stack.empty()) {
        auto& [node, next] = stack.back();
        const SchemaNode& n = nodes[static_cast<size_t>(node)];
        if (next == n.alternatives.size()) {
          state[static_cast<size_t>(node)] = 2;
          stack.pop_back();
          continue;
        }
        const int32_t alt = n.alternatives[next++];
        if (nodes[static_cast<size_t>(alt)].kind != SchemaNode::Kind::kAnyOf) continue;
        if (state[static_cast<size_t>(alt)] == 1)
          return Status::InvalidArgument(fmt::format(
              "anyOf at {} refers back to itself before any value is written (a $ref cycle through anyOf)",
              Where(paths_[static_cast<size_t>(alt)])));
        if (state[static_cast<size_t>(alt)] == 0) {
          state[static_cast<size_t>(alt)] = 1;
          stack.emplace_back(alt, 0);
        }
      }
    }
    return Status::Ok();
  }

  // Whether the JSON value `v` is valid for the compiled node (enum / const values checked against the
  // keywords beside them).
  bool Admits(int32_t index, const json& v) {
    const SchemaNode& n = At(index);
    using K = SchemaNode::Kind;
    switch (n.kind) {
      case K::kAny: return true;
      case K::kNull: return v.is_null();
      case K::kBoolean: return v.is_boolean();
      case K::kNumber: return v.is_number();
      case K::kInteger: {
        if (!v.is_number()) return false;
        if (v.is_number_float() && std::trunc(v.get<double>()) != v.get<double>()) return false;
        const double d = v.get<double>();  // bounds are within 1e15: exact in a double
        return (!n.has_minimum || d >= static_cast<double>(n.minimum)) &&
               (!n.has_maximum || d <= static_cast<double>(n.maximum));
      }
      case K::kString: {
        if (!v.is_string()) return false;
        if (n.format != 0 && !StringFormatAdmits(static_cast<StringFormat>(n.format), v.get_ref<const std::string&>()))
          return false;
        int64_t points = 0;
        for (unsigned char c : v.get_ref<const std::string&>()) points += (c & 0xC0) != 0x80;
        return points >= n.min_length && (n.max_length < 0 || points <= n.max_length);
      }
      case K::kLiterals: return std::binary_search(n.literals.begin(), n.literals.end(), v.dump());
      case K::kArray: {
        if (!v.is_array()) return false;
        const int64_t size = static_cast<int64_t>(v.size());
        if (size < n.min_items || (n.max_items >= 0 && size > n.max_items)) return false;
        for (const json& item : v)
          if (!Admits(n.items, item)) return false;
        return true;
      }
      case K::kObject: {
        if (!v.is_object()) return false;
        uint64_t seen = 0;
        for (const auto& [key, value] : v.items()) {
          const std::string lit = json(key).dump();
          const auto pos = std::lower_bound(n.keys.begin(), n.keys.end(), lit);
          if (pos != n.keys.end() && *pos == lit) {
            const size_t k = static_cast<size_t>(pos - n.keys.begin());
            seen |= uint64_t{1} << k;
            if (!Admits(n.key_nodes[k], value)) return false;
          } else if (n.additional < 0 || !Admits(n.additional, value)) {
            return false;
          }
        }
        return (seen & n.required) == n.required;
      }
      case K::kAnyOf:
        for (int32_t a : n.alternatives)
          if (Admits(a, v)) return true;
        return false;
    }
    return false;
  }

  Status Unsupported(const std::string& key, const std::string& path) {
    return Status::InvalidArgument(fmt::format("unsupported JSON Schema keyword '{}' at {}", key, Where(path)));
  }

  Result<int32_t> Ref(const std::string& ref, const std::string& path) {
    const auto key = std::make_pair(doc_, ref);
    if (auto it = refs_.find(key); it != refs_.end()) return it->second;
    const json& doc = *doc_;
    const json* target = nullptr;
    if (ref == "#") {
      target = &doc;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p(prefix);
        if (ref.compare(0, p.size(), p) != 0) continue;
        const std::string section = p.substr(2, p.size() - 3);  // "$defs" / "definitions"
        const std::string name = ref.substr(p.size());
        if (doc.is_object() && doc.contains(section) && doc[section].is_object() && doc[section].contains(name))
          target = &doc[section][name];
      }
    }
    if (target == nullptr)
      return Status::InvalidArgument(fmt::format("$ref '{}' at {} does not resolve (only '#', '#/$defs/NAME' and "
                                                 "'#/definitions/NAME' are supported)",
                                                 Clip(ref), Where(path)));
    // The node exists before its body is compiled, so a recursive reference finds it.
    const std::string target_path = doc_label_ + ref.substr(1);
    const int32_t slot = Add(SchemaNode{}, target_path);
    refs_[key] = slot;
    pending_.insert(slot);
    Result<int32_t> body = Compile(*target, target_path);
    if (!body.ok()) return body.status();
    // A reference whose target is only a reference back to one being resolved never reaches a schema
    // ({"$defs": {"A": {"$ref": "#/$defs/A"}}}).
    if (pending_.count(*body) != 0)
      return Status::InvalidArgument(
          fmt::format("$ref '{}' at {} is a cycle of references that never reaches a schema", Clip(ref), Where(path)));
    SchemaNode copy = At(*body);
    At(slot) = std::move(copy);
    pending_.erase(slot);
    return slot;
  }

  Result<int32_t> Compile(const json& s, const std::string& path) {
    // A subschema that is a document of its own (a tool's parameters inside the call's wrapper): its
    // "$ref"s resolve against it and its paths start from its label.
    if (auto it = documents_.find(&s); it != documents_.end() && doc_ != &s) {
      const json* saved_doc = doc_;
      const std::string saved_label = doc_label_;
      doc_ = &s;
      doc_label_ = it->second;
      Result<int32_t> r = Compile(s, it->second);
      doc_ = saved_doc;
      doc_label_ = saved_label;
      return r;
    }
    // A bound on the compiler's own recursion (schema keywords within keywords, $refs followed), far
    // above what values of at most kMaxDepth levels need (an Optional model in $defs takes ~3 per level).
    if (++depth_ > kMaxSchemaNesting)
      return Status::InvalidArgument(fmt::format("the schema nests keywords deeper than {} at {}", kMaxSchemaNesting,
                                                 Where(path)));
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_;
      return Status::InvalidArgument(fmt::format("the schema 'false' at {} admits nothing", Where(path)));
    }
    if (!s.is_object()) return Status::InvalidArgument(fmt::format("the schema at {} must be an object", Where(path)));
    static const std::set<std::string> kIgnored = {"title",   "description", "default",  "examples",  "$schema",
                                                   "$id",     "$comment",    "deprecated", "readOnly", "writeOnly",
                                                   "$defs",   "definitions", "strict"};
    static const std::set<std::string> kKnown = {"type",     "properties", "required",  "additionalProperties",
                                                 "items",    "minItems",   "maxItems",  "minLength",
                                                 "maxLength", "enum",      "const",     "anyOf",
                                                 "$ref",     "minimum",    "maximum",   "exclusiveMinimum",
                                                 "exclusiveMaximum", "format"};
    for (const auto& [key, value] : s.items()) {
      if (kIgnored.count(key) == 0 && kKnown.count(key) == 0) return Unsupported(key, path);
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) return Status::InvalidArgument(fmt::format("$ref at {} must be a string", Where(path)));
      for (const auto& [key, value] : s.items()) {
        if (key != "$ref" && kIgnored.count(key) == 0)
          return Status::InvalidArgument(fmt::format("'{}' beside $ref at {} is not supported", key, Where(path)));
      }
      return Ref(s["$ref"].get<std::string>(), path);
    }
    if (s.contains("enum") || s.contains("const")) {
      // Every keyword of the schema applies (JSON Schema 2020-12 Core §7.7.1): the values of enum and
      // const are kept only where the keywords beside them (type, bounds, lengths, anyOf, ...) admit them.
      std::vector<json> values;
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty())
          return Status::InvalidArgument(fmt::format("enum at {} must be a non-empty array", Where(path)));
        for (const json& v : s["enum"]) values.push_back(v);
      }
      if (s.contains("const")) {
        if (!values.empty() && std::find(values.begin(), values.end(), s["const"]) == values.end())
          return Status::InvalidArgument(fmt::format("const at {} is not one of its enum values", Where(path)));
        values = {s["const"]};
      }
      json rest = json::object();
      for (const auto& [key, value] : s.items())
        if (key != "enum" && key != "const" && kIgnored.count(key) == 0) rest[key] = value;
      if (!rest.empty()) {
        ZM_ASSIGN_OR_RETURN(int32_t beside, Compile(rest, path));
        std::vector<json> kept;
        for (const json& v : values)
          if (Admits(beside, v)) kept.push_back(v);
        if (kept.empty())
          return Status::InvalidArgument(fmt::format(
              "no value of the {} at {} is valid for the keywords beside it", s.contains("const") ? "const" : "enum",
              Where(path)));
        values = std::move(kept);
      }
      SchemaNode n;
      n.kind = SchemaNode::Kind::kLiterals;
      for (const json& v : values) n.literals.push_back(v.dump());
      std::sort(n.literals.begin(), n.literals.end());
      n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
      return Add(std::move(n), path);
    }
    if (s.contains("anyOf")) {
      if (!s["anyOf"].is_array() || s["anyOf"].empty())
        return Status::InvalidArgument(fmt::format("anyOf at {} must be a non-empty array", Where(path)));
      // Keywords beside anyOf would constrain every alternative too; that is not enforced, so refused.
      for (const auto& [key, value] : s.items()) {
        if (key != "anyOf" && kIgnored.count(key) == 0)
          return Status::InvalidArgument(fmt::format(
              "'{}' beside anyOf at {} is not supported (write it inside each alternative)", key, Where(path)));
      }
      SchemaNode n;
      n.kind = SchemaNode::Kind::kAnyOf;
      for (size_t i = 0; i < s["anyOf"].size(); ++i) {
        ZM_ASSIGN_OR_RETURN(int32_t alt, Compile(s["anyOf"][i], fmt::format("{}/anyOf/{}", path, i)));
        n.alternatives.push_back(alt);
      }
      return Add(std::move(n), path);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else if (s["type"].is_array() && !s["type"].empty()) {
        for (const json& t : s["type"]) {
          if (!t.is_string()) return Status::InvalidArgument(fmt::format("type at {} must name types", Where(path)));
          types.push_back(t.get<std::string>());
        }
      } else {
        return Status::InvalidArgument(fmt::format("type at {} must be a string or a list of strings", Where(path)));
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types.push_back("string");  // format constrains strings: a schema with only it means a formatted string
    } else {
      return any_;
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) {
      ZM_ASSIGN_OR_RETURN(int32_t n, Typed(s, t, path));
      alts.push_back(n);
    }
    if (alts.size() == 1) return alts[0];
    SchemaNode n;
    n.kind = SchemaNode::Kind::kAnyOf;
    n.alternatives = std::move(alts);
    return Add(std::move(n), path);
  }

  Result<int32_t> Count(const json& s, const char* key, const std::string& path, int32_t* out) {
    if (!s.contains(key)) return 0;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 0 || s[key].get<int64_t>() > INT32_MAX)
      return Status::InvalidArgument(fmt::format("{} at {} must be a non-negative integer", key, Where(path)));
    *out = static_cast<int32_t>(s[key].get<int64_t>());
    return 0;
  }

  Result<int32_t> Typed(const json& s, const std::string& type, const std::string& path) {
    SchemaNode n;
    if (type == "object") {
      n.kind = SchemaNode::Kind::kObject;
      std::map<std::string, const json*> props;  // literal text -> schema
      std::map<std::string, std::string> literal_of;
      if (s.contains("properties")) {
        if (!s["properties"].is_object())
          return Status::InvalidArgument(fmt::format("properties at {} must be an object", Where(path)));
        for (const auto& [name, sub] : s["properties"].items()) {
          const std::string lit = json(name).dump();
          props[lit] = &sub;
          literal_of[name] = lit;
        }
      }
      if (props.size() > static_cast<size_t>(kMaxObjectProperties))
        return Status::InvalidArgument(
            fmt::format("the object at {} has {} properties; at most {}", Where(path), props.size(), kMaxObjectProperties));
      for (const auto& [lit, sub] : props) n.keys.push_back(lit);
      if (s.contains("required")) {
        if (!s["required"].is_array())
          return Status::InvalidArgument(fmt::format("required at {} must be an array", Where(path)));
        for (const json& r : s["required"]) {
          if (!r.is_string() || literal_of.count(r.get<std::string>()) == 0)
            return Status::InvalidArgument(fmt::format("required '{}' at {} is not one of its properties",
                                                       Clip(r.dump()), Where(path)));
          const auto pos = std::lower_bound(n.keys.begin(), n.keys.end(), literal_of[r.get<std::string>()]);
          n.required |= uint64_t{1} << (pos - n.keys.begin());
        }
      }
      if (s.contains("additionalProperties")) {
        const json& ap = s["additionalProperties"];
        if (!(ap.is_boolean() && !ap.get<bool>())) {
          if (!props.empty())
            return Status::InvalidArgument(fmt::format(
                "additionalProperties other than false beside properties at {} is not supported", Where(path)));
          ZM_ASSIGN_OR_RETURN(int32_t add, Compile(ap, path + "/additionalProperties"));
          n.additional = add;
        }
      } else if (!s.contains("properties")) {
        n.additional = any_;  // {"type": "object"}: any object; "properties": {} admits only {} (strict mode)
      }
      const int32_t self = Add(std::move(n), path);
      std::vector<int32_t> key_nodes;
      for (const auto& [lit, sub] : props) {
        ZM_ASSIGN_OR_RETURN(int32_t child, Compile(*sub, path + "/properties/" + json::parse(lit).get<std::string>()));
        key_nodes.push_back(child);
      }
      At(self).key_nodes = std::move(key_nodes);
      return self;
    }
    if (type == "array") {
      n.kind = SchemaNode::Kind::kArray;
      ZM_RETURN_IF_ERROR(Count(s, "minItems", path, &n.min_items).status());
      ZM_RETURN_IF_ERROR(Count(s, "maxItems", path, &n.max_items).status());
      if (n.max_items >= 0 && n.min_items > n.max_items)
        return Status::InvalidArgument(fmt::format("minItems > maxItems at {}", Where(path)));
      n.items = any_;
      if (s.contains("items")) {
        if (s["items"].is_array()) return Unsupported("items (as a list; use prefixItems)", path);
        ZM_ASSIGN_OR_RETURN(int32_t items, Compile(s["items"], path + "/items"));
        n.items = items;
      }
      return Add(std::move(n), path);
    }
    if (type == "string") {
      n.kind = SchemaNode::Kind::kString;
      if (s.contains("format")) {
        bool known = false;
        const StringFormat f =
            s["format"].is_string() ? StringFormatOf(s["format"].get<std::string>(), &known) : StringFormat::kNone;
        if (!known)
          return Unsupported(fmt::format("format {} (date, time, date-time and uuid are enforced)", Clip(s["format"].dump())),
                             path);
        if (s.contains("minLength") || s.contains("maxLength"))
          return Status::InvalidArgument(
              fmt::format("minLength / maxLength beside format at {} are not supported", Where(path)));
        n.format = static_cast<uint8_t>(f);
      }
      ZM_RETURN_IF_ERROR(Count(s, "minLength", path, &n.min_length).status());
      ZM_RETURN_IF_ERROR(Count(s, "maxLength", path, &n.max_length).status());
      if (n.max_length >= 0 && n.min_length > n.max_length)
        return Status::InvalidArgument(fmt::format("minLength > maxLength at {}", Where(path)));
      return Add(std::move(n), path);
    }
    if (type == "number" || type == "integer") {
      n.kind = type == "number" ? SchemaNode::Kind::kNumber : SchemaNode::Kind::kInteger;
      for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (!s.contains(key)) continue;
        if (type == "number") return Unsupported(std::string(key) + " (on type number; integers only)", path);
        if (!s[key].is_number())
          return Status::InvalidArgument(fmt::format("{} at {} must be a number", key, Where(path)));
        const double v = s[key].get<double>();
        if (!(std::abs(v) <= static_cast<double>(kMaxIntegerBound)))
          return Status::InvalidArgument(fmt::format("{} {} at {} is beyond +-1e15", key, v, Where(path)));
        const std::string k(key);
        const bool lower = k == "minimum" || k == "exclusiveMinimum";
        const bool exclusive = k.compare(0, 9, "exclusive") == 0;
        // The integers that satisfy the bound: ceil / floor, one further when exclusive and integral.
        int64_t bound = static_cast<int64_t>(lower ? std::ceil(v) : std::floor(v));
        if (exclusive && static_cast<double>(bound) == v) bound += lower ? 1 : -1;
        if (lower) {
          n.minimum = n.has_minimum ? std::max(n.minimum, bound) : bound;
          n.has_minimum = true;
        } else {
          n.maximum = n.has_maximum ? std::min(n.maximum, bound) : bound;
          n.has_maximum = true;
        }
      }
      if (n.has_minimum && n.has_maximum && n.minimum > n.maximum)
        return Status::InvalidArgument(fmt::format("no integer lies within the bounds at {}", Where(path)));
      return Add(std::move(n), path);
    }
    if (type == "boolean") {
      n.kind = SchemaNode::Kind::kBoolean;
      return Add(std::move(n), path);
    }
    if (type == "null") {
      n.kind = SchemaNode::Kind::kNull;
      return Add(std::move(n), path);
    }
    return Status::InvalidArgument(fmt::format("unknown type '{}' at {}", Clip(type), Where(path)));
  }

  const json& root_;
  std::string root_label_;                        // the root document's label ("" = "the root")
  std::map<const json*, std::string> documents_;  // nested documents and their labels
  const json* doc_;                               // the document "$ref"s resolve against now
  std::string doc_label_;                         // its label
  JsonGrammar* g_ = nullptr;
  int32_t any_ = -1;
  int depth_ = 0;
  std::map<std::pair<const json*, std::string>, int32_t> refs_;
  std::set<int32_t> pending_;       // reference slots whose target is being compiled
  std::vector<std::string> paths_;  // per node
};

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::Compile(const json& schema, bool object_root) {
  return SchemaCompiler(schema).Run(object_root);
}

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::CompileFramed(const json& schema, std::string prefix,
                                                                      std::string suffix) {
  return CompileAlternatives({Framing{schema, std::move(prefix), std::move(suffix)}});
}

const TagTexts& TagTextsOf(TagSyntax syntax) {
  static const TagTexts kNone{};
  static const TagTexts kGlmTexts{"<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>"};
  static const TagTexts kQwenTexts{"<parameter=", ">\n", "\n</parameter>"};
  switch (syntax) {
    case TagSyntax::kGlm: return kGlmTexts;
    case TagSyntax::kQwenXml: return kQwenTexts;
    default: return kNone;
  }
}

namespace {

// Fills the tagged-pair texts of every node (SchemaNode::tag_keys, tag_literals) for `syntax`, and
// checks that each alternative's root is an object of named properties.
Status PrepareTags(TagSyntax syntax, const std::vector<JsonGrammar::Alternative>& alts, std::vector<SchemaNode>* nodes) {
  const TagTexts& t = TagTextsOf(syntax);
  for (size_t i = 0; i < alts.size(); ++i) {
    const SchemaNode& root = (*nodes)[static_cast<size_t>(alts[i].root)];
    if (root.kind != SchemaNode::Kind::kObject || root.additional >= 0)
      return Status::InvalidArgument(fmt::format(
          "alternative {}: tagged arguments need an object schema with 'properties' (and no other keys)", i));
  }
  for (SchemaNode& n : *nodes) {
    if (n.kind == SchemaNode::Kind::kString && n.format != 0)
      return Status::InvalidArgument("format cannot be enforced on tagged arguments (their strings are written raw)");
    if (n.kind == SchemaNode::Kind::kObject) {
      std::vector<std::pair<std::string, int32_t>> keys;
      for (size_t k = 0; k < n.keys.size(); ++k) {
        const std::string name = json::parse(n.keys[k]).get<std::string>();
        if (name.empty() || name.find(t.key_close.substr(0, 1)) != std::string::npos ||
            name.find('\n') != std::string::npos || name.find('<') != std::string::npos)
          return Status::InvalidArgument(fmt::format("the property name {} cannot be written as a tagged argument",
                                                     n.keys[k]));
        keys.emplace_back(name, static_cast<int32_t>(k));
      }
      std::sort(keys.begin(), keys.end());
      n.tag_keys.clear();
      n.tag_key_index.clear();
      for (auto& [text, index] : keys) {
        n.tag_keys.push_back(std::move(text));
        n.tag_key_index.push_back(index);
      }
    } else if (n.kind == SchemaNode::Kind::kLiterals) {
      n.tag_literals.clear();
      bool strings = true;
      for (const std::string& l : n.literals) {
        const json v = json::parse(l);
        if (!v.is_string()) {
          strings = false;
          break;
        }
        if (v.get<std::string>().find(t.value_close) != std::string::npos)
          return Status::InvalidArgument(fmt::format("the enum value {} holds '{}'", l, t.value_close));
        n.tag_literals.push_back(v.get<std::string>());
      }
      if (!strings) {
        n.tag_literals.clear();
      } else {
        std::sort(n.tag_literals.begin(), n.tag_literals.end());
      }
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::shared_ptr<const JsonGrammar>> JsonGrammar::CompileAlternatives(const std::vector<Framing>& framings,
                                                                            std::string free_until, TagSyntax tags) {
  if (framings.empty()) return Status::InvalidArgument("a framed grammar needs at least one alternative");
  if (framings.size() > static_cast<size_t>(kMaxAlternatives))
    return Status::InvalidArgument(
        fmt::format("{} alternatives; at most {} can be enforced at once", framings.size(), kMaxAlternatives));
  auto out = std::make_shared<JsonGrammar>();
  std::vector<std::string> paths;
  for (size_t i = 0; i < framings.size(); ++i) {
    SchemaCompiler compiler(framings[i].schema, framings[i].documents);
    Result<std::shared_ptr<const JsonGrammar>> g = compiler.Run(false);
    if (!g.ok()) {
      if (framings.size() == 1) return g.status();
      return Status::InvalidArgument(fmt::format("alternative {}: {}", i, g.status().message()));
    }
    paths.insert(paths.end(), compiler.paths().begin(), compiler.paths().end());
    // The alternative's nodes after those already there: every node index shifts by `off`.
    const int32_t off = static_cast<int32_t>(out->nodes_.size());
    for (SchemaNode n : (*g)->nodes_) {
      for (int32_t& k : n.key_nodes) k += off;
      for (int32_t& a : n.alternatives) a += off;
      if (n.additional >= 0) n.additional += off;
      if (n.items >= 0) n.items += off;
      out->nodes_.push_back(std::move(n));
    }
    out->alternatives_.push_back(Alternative{framings[i].prefix, framings[i].suffix, (*g)->root_ + off});
  }
  out->root_ = out->alternatives_[0].root;
  ZM_RETURN_IF_ERROR(SchemaCompiler::CheckDepth(*out, paths));  // sets min_frames
  out->free_until_ = std::move(free_until);
  if (tags != TagSyntax::kJson) {
    ZM_RETURN_IF_ERROR(PrepareTags(tags, out->alternatives_, &out->nodes_));
    out->tags_ = tags;
  }
  return std::shared_ptr<const JsonGrammar>(std::move(out));
}

std::shared_ptr<const JsonGrammar> JsonGrammar::WithFreeTextBefore(std::shared_ptr<const JsonGrammar> grammar,
                                                                   std::string free_until) {
  if (free_until.empty()) return grammar;
  auto copy = std::make_shared<JsonGrammar>(*grammar);
  copy->free_until_ = std::move(free_until);
  return copy;
}

std::shared_ptr<const JsonGrammar> JsonGrammar::WithPrefix(std::shared_ptr<const JsonGrammar> grammar,
                                                           const std::string& prefix) {
  auto copy = std::make_shared<JsonGrammar>(*grammar);
  for (Alternative& a : copy->alternatives_) a.prefix = prefix + a.prefix;
  return copy;
}

// ---------------------------------------------------------------------------------------------
// Matching

namespace {

enum Kind : uint8_t { kValue = 1, kObject, kArray, kString, kNumber, kLiteral, kText, kFree, kTagged, kRawString };
// Tagged-arguments phases (kTagged: the root object as tagged pairs, TagSyntax; Frame::seen = the
// properties written, b = the property being written, c = position in a fixed text)
enum : uint8_t {
  kTagBetween, kTagKeyOpen, kTagKey, kTagKeyClose, kTagValueStart, kTagValueRaw, kTagValueEnum, kTagValueClose,
  kTagValueJson, kTagAfterJson
};
// Text phases (which of the alternative's fixed texts; the alternative is Frame::a)
enum : uint8_t { kTextPrefix, kTextSuffix };
// Object phases
enum : uint8_t { kObjOpen, kObjKey, kObjAfterKey, kObjValue, kObjAfterValue, kObjComma };
// Array phases
enum : uint8_t { kArrOpen, kArrItem, kArrAfterItem, kArrComma };
// String phases. \uXXXX escapes stay well-formed UTF-16 (RFC 8259 §7; a strict parser such as serde_json
// refuses an unpaired surrogate, and one cannot be encoded as UTF-8): a high surrogate D800-DBFF must be
// followed by \u and a low one DC00-DFFF (kStrLow*), a low one never stands alone, and the pair counts
// as one character, as JSON Schema's lengths count code points. In the \u phases Frame::b counts the
// hex digits and Frame::c holds their value.
enum : uint8_t { kStrPlain, kStrEscape, kStrUnicode, kStrLowEscape, kStrLowU, kStrLowUnicode };
// Number phases
enum : uint8_t { kNumMinus, kNumZero, kNumInt, kNumDot, kNumFrac, kNumExp, kNumExpSign, kNumExpDigits, kNumStart };
// Literal lists
enum : uint8_t { kLitNode, kLitKeys, kLitBool, kLitNull, kLitAny, kLitTagKeys, kLitTagValue };

const std::vector<std::string>& BoolLiterals() {
  static const std::vector<std::string> v = {"false", "true"};
  return v;
}
const std::vector<std::string>& NullLiteral() {
  static const std::vector<std::string> v = {"null"};
  return v;
}
const std::vector<std::string>& AnyLiterals() {
  static const std::vector<std::string> v = {"false", "null", "true"};
  return v;
}

bool IsWs(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Text scanned for `marker` (a free text's free_until, a raw string's closing tag): the text so far
// ends with marker[0, k); returns how much of the marker the text ends with after `c` (marker.size()
// when c completes it): the longest prefix of the marker that marker[0, k) + c ends with.
size_t MarkerProgress(const std::string& marker, size_t k, uint8_t c) {
  if (static_cast<uint8_t>(marker[k]) == c) return k + 1;
  const std::string seen = marker.substr(0, k) + static_cast<char>(c);
  for (size_t len = std::min(seen.size(), marker.size() - 1); len > 0; --len) {
    if (seen.compare(seen.size() - len, len, marker, 0, len) == 0) return len;
  }
  return 0;
}
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }
bool IsHex(uint8_t c) { return IsDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool NumberAccepting(uint8_t phase) {
  return phase == kNumZero || phase == kNumInt || phase == kNumFrac || phase == kNumExpDigits;
}

constexpr size_t kMaxStacks = 64;

bool IntegerInBounds(const SchemaNode& n, bool negative, uint64_t magnitude) {
  if (magnitude > static_cast<uint64_t>(kMaxIntegerBound) * 100) return false;
  const int64_t v = negative ? -static_cast<int64_t>(magnitude) : static_cast<int64_t>(magnitude);
  return (!n.has_minimum || v >= n.minimum) && (!n.has_maximum || v <= n.maximum);
}

// Whether an integer typed so far (sign, magnitude, phase: kNumMinus = only "-", kNumZero = "0" or
// "-0", else digits that more digits may follow) can still end within the node's bounds.
bool IntegerFeasible(const SchemaNode& n, bool negative, uint64_t magnitude, uint8_t phase) {
  const int64_t lo = n.has_minimum ? n.minimum : INT64_MIN, hi = n.has_maximum ? n.maximum : INT64_MAX;
  if (phase == kNumMinus) return lo <= -1;  // some negative integer fits ("-0" is not offered)
  if (phase == kNumZero) return !negative && lo <= 0 && 0 <= hi;
  // Completions: magnitude * 10^k + [0, 10^k - 1], k = 0, 1, ... while they stay within 1e17.
  uint64_t span = 1;
  for (uint64_t base = magnitude; base <= static_cast<uint64_t>(kMaxIntegerBound) * 100; base *= 10, span *= 10) {
    const int64_t a = static_cast<int64_t>(base), b = static_cast<int64_t>(base + span - 1);
    const int64_t from = negative ? -b : a, to = negative ? -a : b;
    if (from <= hi && to >= lo) return true;
    if (base == 0) break;
  }
  return false;
}

}  // namespace

JsonMatcher::JsonMatcher(std::shared_ptr<const JsonGrammar> grammar) : grammar_(std::move(grammar)) {
  // One stack per alternative, bottom to top: the suffix waiting for the value, the value, the prefix
  // to write first, the free text before them.
  const auto& alts = grammar_->alternatives();
  for (size_t i = 0; i < alts.size(); ++i) {
    Stack s;
    auto push = [&](uint8_t kind, uint8_t phase, int32_t node) {
      Frame& f = s.frames[s.depth++];
      f.kind = kind;
      f.phase = phase;
      f.node = node;
      f.a = static_cast<int32_t>(i);
    };
    if (!alts[i].suffix.empty()) push(kText, kTextSuffix, -1);
    if (grammar_->tags() != TagSyntax::kJson) {
      push(kTagged, kTagBetween, alts[i].root);
      s.frames[s.depth - 1].seen = 0;
    } else {
      push(kValue, 0, alts[i].root);
    }
    if (!alts[i].prefix.empty()) push(kText, kTextPrefix, -1);
    if (!grammar_->free_until().empty()) push(kFree, 0, -1);
    stacks_.push_back(s);
  }
}

const std::vector<std::string>& JsonMatcher::LiteralsOf(const Frame& f) const {
  switch (f.phase) {
    case kLitNode: return grammar_->node(f.node).literals;
    case kLitKeys: return grammar_->node(f.node).keys;
    case kLitTagKeys: return grammar_->node(f.node).tag_keys;
    case kLitTagValue: return grammar_->node(f.node).tag_literals;
    case kLitBool: return BoolLiterals();
    case kLitNull: return NullLiteral();
    default: return AnyLiterals();
  }
}

// The top frame completed (key: the object key index a key literal matched, else -1): pop it and
// advance its parent.
void JsonMatcher::ChildDone(Stack& s) const {
  const Frame& done = s.frames[s.depth - 1];
  int32_t key = done.kind == kLiteral && done.phase == kLitKeys ? done.a : -1;  // the single candidate left
  if (done.kind == kLiteral && done.phase == kLitTagKeys)
    key = grammar_->node(done.node).tag_key_index[static_cast<size_t>(done.a)];
  --s.depth;
  if (s.depth == 0) return;
  Frame& p = s.frames[s.depth - 1];
  if (p.kind == kTagged) {
    if (p.phase == kTagKey) {
      p.seen |= uint64_t{1} << key;
      p.b = key;
      p.phase = kTagKeyClose;
      p.c = 0;
    } else if (p.phase == kTagValueJson) {
      p.phase = kTagAfterJson;
      p.c = 0;
    } else if (p.phase == kTagValueEnum) {
      p.phase = kTagValueClose;
      p.c = 0;
    } else {  // a raw string, its closing text included
      p.phase = kTagBetween;
    }
    return;
  }
  if (p.kind == kObject) {
    if (p.phase == kObjKey) {
      if (key >= 0) p.seen |= uint64_t{1} << key;
      p.c = key;
      p.phase = kObjAfterKey;
    } else {
      p.phase = kObjAfterValue;
    }
  } else if (p.kind == kArray) {
    ++p.a;
    p.phase = kArrAfterItem;
  }
}

// A literal-list frame (kLiteral) over every literal of `phase`'s list for `node`, nothing matched yet.
JsonMatcher::Frame JsonMatcher::LiteralFrame(uint8_t phase, int32_t node) const {
  Frame f;
  f.kind = kLiteral;
  f.phase = phase;
  f.node = node;
  f.a = 0;
  f.b = static_cast<int32_t>(LiteralsOf(f).size());
  f.c = 0;
  return f;
}

// Object / tagged-pairs frame `obj` with `depth` frames on the stack up to and including it: whether
// property k is not written yet and its value can still be completed within kMaxDepth.
bool JsonMatcher::KeyOpen(const Frame& obj, int32_t depth, int32_t k) const {
  const SchemaNode& n = grammar_->node(obj.node);
  if (obj.seen >> k & 1) return false;
  return depth + grammar_->node(n.key_nodes[static_cast<size_t>(k)]).min_frames <= kMaxDepth;
}

bool JsonMatcher::AnyKeyOpen(const Frame& obj, int32_t depth) const {
  const int32_t keys = static_cast<int32_t>(grammar_->node(obj.node).keys.size());
  for (int32_t k = 0; k < keys; ++k)
    if (KeyOpen(obj, depth, k)) return true;
  return false;
}

// An object of free keys (any object, or additionalProperties): whether a key (a string frame) and its
// value still fit above `depth` frames.
bool JsonMatcher::FreeValueFits(const Frame& obj, int32_t depth) const {
  const SchemaNode& n = grammar_->node(obj.node);
  const int32_t value = n.kind == SchemaNode::Kind::kAny ? obj.node : n.additional;
  return depth + std::max(1, grammar_->node(value).min_frames) <= kMaxDepth;
}

// Replaces nothing: `s` has no frame for the value yet; pushes the frame that `c` starts (for every
// alternative of an anyOf) and consumes c. False when c cannot start a value of the node.
bool JsonMatcher::StartValue(Stack& s, int32_t node_index, uint8_t c, std::vector<Stack>* out) const {
  const SchemaNode& n = grammar_->node(node_index);
  if (n.kind == SchemaNode::Kind::kAnyOf) {
    for (int32_t alt : n.alternatives) {
      Stack t = s;
      StartValue(t, alt, c, out);
    }
    return false;
  }
  if (s.depth + n.min_frames > kMaxDepth) return false;  // could not be completed
  Frame f;
  f.node = node_index;
  using K = SchemaNode::Kind;
  const bool any = n.kind == K::kAny;
  if (c == '{' && (any || n.kind == K::kObject)) {
    f.kind = kObject;
    f.phase = kObjOpen;
    s.frames[s.depth++] = f;
    out->push_back(s);
    return true;
  }
  if (c == '[' && (any || n.kind == K::kArray)) {
    f.kind = kArray;
    f.phase = kArrOpen;
    s.frames[s.depth++] = f;
    out->push_back(s);
    return true;
  }
  if (c == '"' && (any || n.kind == K::kString)) {
    f.kind = kString;
    f.phase = kStrPlain;
    f.node = any ? -1 : node_index;
    s.frames[s.depth++] = f;
    out->push_back(s);
    return true;
  }
  if ((c == '-' || IsDigit(c)) && (any || n.kind == K::kNumber || n.kind == K::kInteger)) {
    f.kind = kNumber;
    f.phase = kNumStart;
    s.frames[s.depth++] = f;
    Step(s, c, out);
    return true;
  }
  if (n.kind == K::kLiterals || n.kind == K::kBoolean || n.kind == K::kNull || (any && (c == 't' || c == 'f' || c == 'n'))) {
    s.frames[s.depth++] = LiteralFrame(
        n.kind == K::kLiterals ? kLitNode : n.kind == K::kBoolean ? kLitBool : n.kind == K::kNull ? kLitNull : kLitAny,
        node_index);
    Step(s, c, out);
    return true;
  }
  return false;
}

void JsonMatcher::Step(const Stack& s0, uint8_t c, std::vector<Stack>* out) const {
  Stack s = s0;
  const bool ws = IsWs(c);
  if (s.depth == 0) {  // a complete value: whitespace only
    if (ws && s.ws < kMaxWhitespaceRun) {
      ++s.ws;
      out->push_back(s);
    }
    return;
  }
  Frame& f = s.frames[s.depth - 1];
  auto whitespace = [&] {
    if (s.ws >= kMaxWhitespaceRun) return;
    ++s.ws;
    out->push_back(s);
  };
  // A special token writes only fixed texts: the alternatives' prefixes and suffixes, the free text's
  // marker, and the tagged pairs' texts (kTagged phases; a raw string's closing text).
  if (fixed_text_only_ && f.kind != kText && f.kind != kFree && f.kind != kTagged && f.kind != kRawString) return;
  switch (f.kind) {
    case kFree: {  // free text until free_until: f.c = how much of the marker the text ends with
      const std::string& m = grammar_->free_until();
      const size_t k = MarkerProgress(m, static_cast<size_t>(f.c), c);
      // A special token may complete the marker, never be free text.
      if (fixed_text_only_ && k != static_cast<size_t>(f.c) + 1) return;
      s.ws = 0;
      if (k == m.size()) {
        --s.depth;  // the marker is written: the alternative's prefix or value goes on
      } else {
        f.c = static_cast<int32_t>(k);
      }
      out->push_back(s);
      return;
    }
    case kText: {
      const JsonGrammar::Alternative& alt = grammar_->alternatives()[static_cast<size_t>(f.a)];
      const std::string& text = f.phase == kTextPrefix ? alt.prefix : alt.suffix;
      // whitespace between the value and the suffix, or between the free text and the prefix
      if (ws && f.c == 0 && (f.phase == kTextSuffix || !grammar_->free_until().empty())) {
        Stack t = s;
        if (t.ws < kMaxWhitespaceRun) {
          ++t.ws;
          out->push_back(t);
        }
      }
      if (static_cast<size_t>(f.c) >= text.size() || static_cast<uint8_t>(text[static_cast<size_t>(f.c)]) != c) return;
      s.ws = 0;
      if (static_cast<size_t>(++f.c) == text.size()) --s.depth;  // written: the frame below goes on
      out->push_back(s);
      return;
    }
    case kValue: {
      if (ws) return whitespace();
      s.ws = 0;
      const int32_t node = f.node;
      --s.depth;
      StartValue(s, node, c, out);
      return;
    }
    case kTagged: {
      const SchemaNode& n = grammar_->node(f.node);
      const TagTexts& t = TagTextsOf(grammar_->tags());
      switch (f.phase) {
        case kTagBetween: {
          if (ws) return whitespace();
          if ((f.seen & n.required) == n.required) {  // the pairs may end: c belongs to what follows
            Stack done = s;
            ChildDone(done);
            done.ws = 0;
            Step(done, c, out);
          }
          if (!AnyKeyOpen(f, s.depth) || static_cast<uint8_t>(t.key_open[0]) != c) return;
          s.ws = 0;
          f.phase = kTagKeyOpen;
          f.c = 1;
          out->push_back(s);
          return;
        }
        case kTagKeyOpen: {
          if (static_cast<uint8_t>(t.key_open[static_cast<size_t>(f.c)]) != c) return;
          if (static_cast<size_t>(++f.c) == t.key_open.size()) {
            if (s.depth >= kMaxDepth) return;
            f.phase = kTagKey;
            s.frames[s.depth++] = LiteralFrame(kLitTagKeys, f.node);
          }
          out->push_back(s);
          return;
        }
        case kTagKeyClose:
        case kTagValueClose: {  // fixed texts after a key name and after an enum value
          const std::string& text = f.phase == kTagKeyClose ? t.key_close : t.value_close;
          if (static_cast<uint8_t>(text[static_cast<size_t>(f.c)]) != c) return;
          s.ws = 0;
          if (static_cast<size_t>(++f.c) == text.size()) {
            f.phase = f.phase == kTagKeyClose ? kTagValueStart : kTagBetween;
            f.c = 0;
          }
          out->push_back(s);
          return;
        }
        case kTagValueStart: {
          if (fixed_text_only_) return;  // a special token never starts a value
          if (s.depth >= kMaxDepth) return;
          const int32_t value = n.key_nodes[static_cast<size_t>(f.b)];
          const SchemaNode& v = grammar_->node(value);
          if (v.kind == SchemaNode::Kind::kString) {
            f.phase = kTagValueRaw;
            Frame g;
            g.node = value;
            g.kind = kRawString;
            g.a = 0;
            g.b = 0;
            g.c = 0xBF << 8 | 0x80;
            g.seen = 0;
            s.frames[s.depth++] = g;
            Step(s, c, out);
          } else if (v.kind == SchemaNode::Kind::kLiterals && !v.tag_literals.empty()) {
            f.phase = kTagValueEnum;
            s.frames[s.depth++] = LiteralFrame(kLitTagValue, value);
            Step(s, c, out);
          } else {
            f.phase = kTagValueJson;
            s.ws = 0;
            StartValue(s, value, c, out);
          }
          return;
        }
        case kTagAfterJson: {  // whitespace, then value_close without its leading whitespace
          size_t lead = 0;
          while (lead < t.value_close.size() && IsWs(static_cast<uint8_t>(t.value_close[lead]))) ++lead;
          const std::string_view close = std::string_view(t.value_close).substr(lead);
          if (ws && f.c == 0) return whitespace();
          if (static_cast<uint8_t>(close[static_cast<size_t>(f.c)]) != c) return;
          s.ws = 0;
          if (static_cast<size_t>(++f.c) == close.size()) {
            f.phase = kTagBetween;
            f.c = 0;
          }
          out->push_back(s);
          return;
        }
        default: return;
      }
    }
    case kRawString: {  // a string property's raw text up to value_close (Frame::seen: how much of it
                        // the text ends with; a: code points including that part; b, c: UTF-8 as kString)
      s.ws = 0;
      const std::string& m = TagTextsOf(grammar_->tags()).value_close;
      const SchemaNode& n = grammar_->node(f.node);
      if (f.b > 0) {  // inside a UTF-8 sequence (value_close is ASCII: never part of it)
        const uint8_t lo = static_cast<uint8_t>(f.c & 0xFF), hi = static_cast<uint8_t>(f.c >> 8);
        if (c < lo || c > hi) return;
        --f.b;
        f.c = 0xBF << 8 | 0x80;
        out->push_back(s);
        return;
      }
      const size_t k = MarkerProgress(m, static_cast<size_t>(f.seen), c);
      // A special token may write value_close, never content.
      if (fixed_text_only_ && k != static_cast<size_t>(f.seen) + 1) return;
      if (k == m.size()) {  // closed: the value is what came before value_close
        if (f.a - static_cast<int32_t>(m.size() - 1) < n.min_length) return;
        ChildDone(s);
        out->push_back(s);
        return;
      }
      int32_t pending = 0;
      uint8_t lo = 0, hi = 0;
      if ((c < 0x20 && c != '\n' && c != '\t') || !Utf8Lead(c, &pending, &lo, &hi)) return;
      // Code points that are surely content: all but the part that may still become value_close.
      if (n.max_length >= 0 && f.a + 1 - static_cast<int32_t>(k) > n.max_length) return;
      ++f.a;
      f.b = pending;
      f.c = hi << 8 | lo;
      f.seen = k;
      out->push_back(s);
      return;
    }
    case kObject: {
      const SchemaNode& n = grammar_->node(f.node);
      const bool free = n.kind == SchemaNode::Kind::kAny || n.additional >= 0;
      if (ws) {
        if (f.phase == kObjOpen || f.phase == kObjAfterKey || f.phase == kObjAfterValue || f.phase == kObjComma)
          whitespace();
        return;
      }
      s.ws = 0;
      if ((f.phase == kObjOpen || f.phase == kObjComma) && c == '"') {
        f.phase = kObjKey;
        if (s.depth >= kMaxDepth) return;
        if (free) {
          if (!FreeValueFits(f, s.depth)) return;
          Frame k;
          k.kind = kString;
          k.phase = kStrPlain;
          k.node = -1;
          s.frames[s.depth++] = k;
          out->push_back(s);
        } else {
          if (!AnyKeyOpen(f, s.depth)) return;  // every property written (or none fits)
          s.frames[s.depth++] = LiteralFrame(kLitKeys, f.node);
          Step(s, c, out);
        }
        return;
      }
      if ((f.phase == kObjOpen || f.phase == kObjAfterValue) && c == '}') {
        if ((f.seen & n.required) != n.required) return;
        ChildDone(s);
        out->push_back(s);
        return;
      }
      if (f.phase == kObjAfterKey && c == ':') {
        f.phase = kObjValue;
        if (s.depth >= kMaxDepth) return;
        Frame v;
        v.kind = kValue;
        v.node = n.kind == SchemaNode::Kind::kAny ? f.node
                 : f.c >= 0                        ? n.key_nodes[static_cast<size_t>(f.c)]
                                                   : n.additional;
        s.frames[s.depth++] = v;
        out->push_back(s);
        return;
      }
      if (f.phase == kObjAfterValue && c == ',') {
        if (free ? !FreeValueFits(f, s.depth) : !AnyKeyOpen(f, s.depth)) return;
        f.phase = kObjComma;
        out->push_back(s);
      }
      return;
    }
    case kArray: {
      const SchemaNode& n = grammar_->node(f.node);
      const bool any = n.kind == SchemaNode::Kind::kAny;
      const int32_t min_items = any ? 0 : n.min_items, max_items = any ? -1 : n.max_items;
      const int32_t items = any ? f.node : n.items;
      if (ws) {
        if (f.phase != kArrItem) whitespace();
        return;
      }
      s.ws = 0;
      if ((f.phase == kArrOpen && c == ']' && min_items == 0) || (f.phase == kArrAfterItem && c == ']' && f.a >= min_items)) {
        ChildDone(s);
        out->push_back(s);
        return;
      }
      if (f.phase == kArrAfterItem) {
        if (c == ',' && (max_items < 0 || f.a < max_items) &&
            s.depth + grammar_->node(items).min_frames <= kMaxDepth) {
          f.phase = kArrComma;
          out->push_back(s);
        }
        return;
      }
      if (f.phase == kArrOpen && max_items == 0) return;
      f.phase = kArrItem;  // kArrOpen or kArrComma: c starts an item
      StartValue(s, items, c, out);
      return;
    }
    case kString: {
      s.ws = 0;
      if (f.node >= 0 && grammar_->node(f.node).format != 0) {  // a format: its automaton, state in f.seen
        const auto format = static_cast<StringFormat>(grammar_->node(f.node).format);
        FormatState st{f.seen};
        if (c == '"') {
          if (!FormatComplete(format, st)) return;
          ChildDone(s);
          out->push_back(s);
          return;
        }
        if (!FormatStep(format, st, c)) return;
        f.seen = st.bits;
        ++f.a;
        out->push_back(s);
        return;
      }
      const int32_t max_len = f.node >= 0 ? grammar_->node(f.node).max_length : -1;
      const int32_t min_len = f.node >= 0 ? grammar_->node(f.node).min_length : 0;
      if (f.phase == kStrEscape) {
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') {
          f.phase = kStrPlain;
          ++f.a;
          out->push_back(s);
        } else if (c == 'u') {
          f.phase = kStrUnicode;
          f.b = 0;
          f.c = 0;
          out->push_back(s);
        }
        return;
      }
      if (f.phase == kStrLowEscape || f.phase == kStrLowU) {  // after a high surrogate: "\u" must follow
        if (c != (f.phase == kStrLowEscape ? '\\' : 'u')) return;
        f.phase = f.phase == kStrLowEscape ? kStrLowU : kStrLowUnicode;
        f.b = 0;
        f.c = 0;
        out->push_back(s);
        return;
      }
      if (f.phase == kStrUnicode || f.phase == kStrLowUnicode) {
        if (!IsHex(c)) return;
        const int32_t digit = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        if (f.phase == kStrLowUnicode) {  // DC00-DFFF
          if ((f.b == 0 && digit != 0xD) || (f.b == 1 && digit < 0xC)) return;
        } else if (f.b == 1 && f.c == 0xD && digit >= 0xC) {
          return;  // DC00-DFFF: a low surrogate without its high one
        }
        f.c = f.c * 16 + digit;
        if (++f.b == 4) {
          const bool high = f.phase == kStrUnicode && f.c >= 0xD800 && f.c <= 0xDBFF;
          f.phase = high ? kStrLowEscape : kStrPlain;  // a pair counts once, when complete
          if (!high) ++f.a;
          f.b = 0;
          f.c = 0;
        }
        out->push_back(s);
        return;
      }
      if (f.b > 0) {  // inside a UTF-8 sequence: continuation bytes only, the first within [lo, hi]
        const uint8_t lo = static_cast<uint8_t>(f.c & 0xFF), hi = static_cast<uint8_t>(f.c >> 8);
        if (c < lo || c > hi) return;
        --f.b;
        f.c = 0xBF << 8 | 0x80;
        out->push_back(s);
        return;
      }
      if (c == '"') {
        if (f.a < min_len) return;
        ChildDone(s);
        out->push_back(s);
        return;
      }
      int32_t pending = 0;
      uint8_t lo = 0, hi = 0;
      if (c < 0x20 || !Utf8Lead(c, &pending, &lo, &hi)) return;
      if (max_len >= 0 && f.a >= max_len) return;
      if (c == '\\') {
        f.phase = kStrEscape;
        out->push_back(s);
        return;
      }
      ++f.a;
      f.b = pending;
      f.c = hi << 8 | lo;
      out->push_back(s);
      return;
    }
    case kNumber: {
      const bool integer = grammar_->node(f.node).kind == SchemaNode::Kind::kInteger;
      uint8_t next = 0xFF;
      switch (f.phase) {
        case kNumStart: next = c == '-' ? kNumMinus : c == '0' ? kNumZero : IsDigit(c) ? kNumInt : 0xFF; break;
        case kNumMinus: next = c == '0' ? kNumZero : IsDigit(c) ? kNumInt : 0xFF; break;
        case kNumZero: next = (!integer && c == '.') ? kNumDot : (!integer && (c == 'e' || c == 'E')) ? kNumExp : 0xFF; break;
        case kNumInt:
          next = IsDigit(c) ? kNumInt : (!integer && c == '.') ? kNumDot : (!integer && (c == 'e' || c == 'E')) ? kNumExp : 0xFF;
          break;
        case kNumDot: next = IsDigit(c) ? kNumFrac : 0xFF; break;
        case kNumFrac: next = IsDigit(c) ? kNumFrac : (c == 'e' || c == 'E') ? kNumExp : 0xFF; break;
        case kNumExp: next = (c == '+' || c == '-') ? kNumExpSign : IsDigit(c) ? kNumExpDigits : 0xFF; break;
        case kNumExpSign: next = IsDigit(c) ? kNumExpDigits : 0xFF; break;
        case kNumExpDigits: next = IsDigit(c) && f.b < kMaxExponentDigits ? kNumExpDigits : 0xFF; break;
      }
      const SchemaNode& num = grammar_->node(f.node);
      const bool bounded = integer && (num.has_minimum || num.has_maximum);
      if (next != 0xFF && f.a < kMaxNumberChars) {
        Stack t = s;
        Frame& g = t.frames[t.depth - 1];
        g.phase = next;
        ++g.a;
        if (next == kNumExpDigits) ++g.b;
        if (bounded) {  // g.c: negative; g.seen: the magnitude so far
          if (next == kNumMinus) g.c = 1;
          if (IsDigit(c)) g.seen = g.seen * 10 + static_cast<uint64_t>(c - '0');
          if (!IntegerFeasible(num, g.c != 0, g.seen, next == kNumZero || next == kNumMinus ? next : static_cast<uint8_t>(kNumInt))) return;
        }
        t.ws = 0;
        out->push_back(t);
        return;  // a character that continues a number never also ends it
      }
      if (NumberAccepting(f.phase) && (!bounded || IntegerInBounds(num, f.c != 0, f.seen))) {
        ChildDone(s);  // the number ended before c: c belongs to the parent
        Step(s, c, out);
      }
      return;
    }
    case kLiteral: {
      const std::vector<std::string>& lits = LiteralsOf(f);
      const size_t pos = static_cast<size_t>(f.c);
      // A literal matched exactly so far may end here (enum 1 beside 12): c then belongs to the parent.
      if (f.phase != kLitKeys) {
        for (int32_t i = f.a; i < f.b; ++i) {
          if (lits[static_cast<size_t>(i)].size() == pos && pos > 0) {
            if (f.phase == kLitTagKeys) {  // a raw name that ends here ("a" beside "ab"), if not written yet
              const int32_t property = grammar_->node(f.node).tag_key_index[static_cast<size_t>(i)];
              if (!KeyOpen(s.frames[s.depth - 2], s.depth - 1, property)) break;
            }
            Stack t = s;
            t.frames[t.depth - 1].a = i;  // the candidate that ended (ChildDone reads it for keys)
            ChildDone(t);
            Step(t, c, out);
            break;
          }
        }
      }
      int32_t lo = f.b, hi = f.a;
      for (int32_t i = f.a; i < f.b; ++i) {
        const std::string& l = lits[static_cast<size_t>(i)];
        if (l.size() > pos && static_cast<uint8_t>(l[pos]) == c) {
          lo = std::min(lo, i);
          hi = std::max(hi, i + 1);
        }
      }
      if (lo >= hi) return;
      // The property index of literal i (a key literal): its own index, or via tag_key_index.
      const auto property = [&](int32_t i) {
        return f.phase == kLitTagKeys ? grammar_->node(f.node).tag_key_index[static_cast<size_t>(i)] : i;
      };
      const bool keys = f.phase == kLitKeys || f.phase == kLitTagKeys;
      if (keys) {
        bool open = false;
        for (int32_t i = lo; i < hi && !open; ++i) open = KeyOpen(s.frames[s.depth - 2], s.depth - 1, property(i));
        if (!open) return;
      }
      s.ws = 0;
      f.a = lo;
      f.b = hi;
      f.c = static_cast<int32_t>(pos + 1);
      // One candidate left and fully matched: nothing longer can follow, so it is complete now.
      if (hi - lo == 1 && lits[static_cast<size_t>(lo)].size() == pos + 1) {
        if (keys && !KeyOpen(s.frames[s.depth - 2], s.depth - 1, property(lo))) return;
        ChildDone(s);
      }
      out->push_back(s);
      return;
    }
    default: return;
  }
}

bool JsonMatcher::Feed(std::string_view bytes) {
  std::vector<Stack> cur = stacks_;
  for (char ch : bytes) {
    scratch_.clear();
    for (const Stack& s : cur) {
      Step(s, static_cast<uint8_t>(ch), &scratch_);
      if (scratch_.size() > kMaxStacks) break;
    }
    if (scratch_.empty()) {
      scratch_.clear();
      return false;
    }
    if (scratch_.size() > kMaxStacks) scratch_.resize(kMaxStacks);
    cur.swap(scratch_);
  }
  stacks_.swap(cur);
  scratch_.clear();  // nothing stale to copy with the matcher
  return true;
}

bool JsonMatcher::FeedFixedText(std::string_view bytes) {
  fixed_text_only_ = true;
  const bool ok = Feed(bytes);
  fixed_text_only_ = false;
  return ok;
}

bool JsonMatcher::InFixedText() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) {
    if (s.depth == 0) return false;
    const uint8_t kind = s.frames[s.depth - 1].kind;
    return kind == kText || kind == kFree || kind == kTagged || kind == kRawString;
  });
}

bool JsonMatcher::InFreeTextAtRest() const {
  return !stacks_.empty() && std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) {
    return s.depth > 0 && s.frames[s.depth - 1].kind == kFree && s.frames[s.depth - 1].c == 0;
  });
}

bool JsonMatcher::StackAccepting(const Stack& s) const {
  if (s.depth == 0) return true;
  if (s.depth != 1) return false;
  const Frame& f = s.frames[0];
  if (f.kind == kNumber) {
    const SchemaNode& num = grammar_->node(f.node);
    const bool bounded = num.kind == SchemaNode::Kind::kInteger && (num.has_minimum || num.has_maximum);
    return NumberAccepting(f.phase) && (!bounded || IntegerInBounds(num, f.c != 0, f.seen));
  }
  if (f.kind == kLiteral && f.phase != kLitKeys && f.phase != kLitTagKeys && f.phase != kLitTagValue) {
    const std::vector<std::string>& lits = LiteralsOf(f);
    for (int32_t i = f.a; i < f.b; ++i)
      if (lits[static_cast<size_t>(i)].size() == static_cast<size_t>(f.c)) return true;
  }
  return false;
}

bool JsonMatcher::Accepting() const {
  return std::any_of(stacks_.begin(), stacks_.end(), [&](const Stack& s) { return StackAccepting(s); });
}

bool JsonMatcher::InPlainString(int32_t* room) const {
  int32_t r = INT32_MAX;
  for (const Stack& s : stacks_) {
    if (s.depth == 0) return false;
    const Frame& f = s.frames[s.depth - 1];
    if (f.kind != kString || f.phase != kStrPlain || f.b != 0) return false;
    if (f.node >= 0 && grammar_->node(f.node).format != 0) return false;  // every character moves its automaton
    if (f.node >= 0 && grammar_->node(f.node).max_length >= 0)
      r = std::min(r, grammar_->node(f.node).max_length - f.a);
  }
  *room = r;
  return !stacks_.empty();
}

void JsonMatcher::AdvancePlainString(int32_t code_points) {
  for (Stack& s : stacks_) {
    s.frames[s.depth - 1].a += code_points;
    s.ws = 0;
  }
}

}  // namespace zipmoe::api
