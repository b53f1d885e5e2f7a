// zipmoe_chat_template_reference_check REFERENCE_JSONL
//
// Renders each line of REFERENCE_JSONL (written by render_reference.mjs: template source,
// context, and @huggingface/jinja's output or error) with zipmoe's engine (common/jinja) and
// requires byte equality, or an error from both; then encodes each output with zipmoe's tokenizer
// (common/tokenizer, loaded from the package's tokenizer.json) and requires the reference tokenizer's
// ids. Prints the first mismatch with the byte offset, line and an escaped excerpt of both outputs
// (or the first differing token), then "N passed, N failed".
// ZIPMOE_CHAT_ALL_DIFFS=1 prints the details of every mismatch.
// The reference is jinja2 (transformers' engine) where render_jinja2.py added its result to the line,
// else @huggingface/jinja; the reference ids are compared where zipmoe's text equals @huggingface/jinja's.
// Exit 0 iff every render matched, every template whose lines are `required` (absent: required)
// rendered at least one conversation without an error, and there was at least one line.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/jinja/jinja.h"
#include "common/file_util.h"
#include "common/tokenizer/tokenizer.h"

namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

void PrintDiff(const std::string& want, const std::string& got) {
  size_t at = 0;
  while (at < want.size() && at < got.size() && want[at] == got[at]) ++at;
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += want[i] == '\n';
  const size_t from = at > 60 ? at - 60 : 0;
  std::fprintf(stderr, "  first difference at byte %zu (output line %d); lengths: reference %zu, zipmoe %zu\n", at,
               line, want.size(), got.size());
  std::fprintf(stderr, "  reference: ...%s|>>>%s\n", Escape(want.substr(from, at - from)).c_str(),
               Escape(want.substr(at, 80)).c_str());
  std::fprintf(stderr, "  zipmoe:    ...%s|>>>%s\n", Escape(got.substr(from, at - from)).c_str(),
               Escape(got.substr(at, 80)).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s REFERENCE_JSONL\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  std::map<std::string, zipmoe::jinja::Template> parsed;
  std::map<std::string, std::unique_ptr<zipmoe::Tokenizer>> tokenizers;
  int ids_equal = 0;
  std::map<std::string, int> rendered_ok;  // per template: conversations rendered without error
  std::map<std::string, int> engines_differ;  // per template: @huggingface/jinja disagreed with jinja2
  std::set<std::string> required;             // templates that must render at least one conversation
  int passed = 0, failed = 0;
  bool printed = false;
  const char* all_env = std::getenv("ZIPMOE_CHAT_ALL_DIFFS");
  const bool all_details = all_env != nullptr && std::string(all_env) == "1";
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const nlohmann::ordered_json ref = nlohmann::ordered_json::parse(line);
    const std::string tname = ref["template"].get<std::string>();
    const std::string cname = ref["conversation"].get<std::string>();
    rendered_ok.emplace(tname, 0);
    if (ref.value("required", true)) required.insert(tname);
    std::string got;
    std::string error;
    auto it = parsed.find(tname);
    if (it == parsed.end()) {
      auto t = zipmoe::jinja::Template::Parse(ref["source"].get<std::string>(), "chat_template");
      if (!t.ok()) {
        error = t.status().ToString();
      } else {
        it = parsed.emplace(tname, std::move(t).value()).first;
      }
    }
    if (it != parsed.end()) {
      auto r = it->second.Render(ref["context"]);
      if (r.ok()) {
        got = *r;
      } else {
        error = r.status().ToString();
      }
    }
    // The authority: jinja2 (transformers' engine) when render_jinja2.py added its result, else
    // @huggingface/jinja. The reference ids are those of @huggingface/jinja's output.
    const bool has_jinja2 = ref.contains("jinja2_ok");
    const bool hf_ok = ref["ok"].get<bool>();
    const bool ref_ok = has_jinja2 ? ref["jinja2_ok"].get<bool>() : hf_ok;
    const std::string want = !ref_ok ? std::string() : ref[has_jinja2 ? "jinja2_output" : "output"].get<std::string>();
    if (has_jinja2 && (hf_ok != ref_ok || (hf_ok && ref["output"].get<std::string>() != want))) {
      ++engines_differ[tname];
    }
    bool match = false;
    if (ref_ok) {
      match = error.empty() && got == want;
      if (match) ++rendered_ok[tname];
    } else {
      match = !error.empty();
    }
    std::string ids_error;
    if (match && ref_ok && hf_ok && ref.contains("ids") && ref.contains("tokenizer_dir") &&
        ref["output"].get<std::string>() == got) {
      const std::string dir = ref["tokenizer_dir"].get<std::string>();
      auto tk = tokenizers.find(dir);
      if (tk == tokenizers.end()) {
        auto loaded = zipmoe::Tokenizer::Load(zipmoe::JoinPath(dir, "tokenizer.json"));
        if (!loaded.ok()) {
          ids_error = "zipmoe cannot load the tokenizer: " + loaded.status().ToString();
        } else {
          tk = tokenizers.emplace(dir, std::move(loaded).value()).first;
        }
      }
      if (tk != tokenizers.end()) {
        auto ids = tk->second->Encode(got, /*add_special_tokens=*/false);
        const std::vector<int32_t> want_ids = ref["ids"].get<std::vector<int32_t>>();
        if (!ids.ok()) {
          ids_error = "zipmoe cannot encode: " + ids.status().ToString();
        } else if (*ids != want_ids) {
          size_t k = 0;
          while (k < want_ids.size() && k < ids->size() && want_ids[k] == (*ids)[k]) ++k;
          ids_error = "token ids differ at index " + std::to_string(k) + " (reference " +
                      (k < want_ids.size() ? std::to_string(want_ids[k]) : std::string("end")) + ", zipmoe " +
                      (k < ids->size() ? std::to_string((*ids)[k]) : std::string("end")) + "; " +
                      std::to_string(want_ids.size()) + " vs " + std::to_string(ids->size()) + " ids)";
        } else {
          ++ids_equal;
        }
      }
      match = ids_error.empty();
    }
    if (match) {
      ++passed;
      continue;
    }
    ++failed;
    std::fprintf(stderr, "MISMATCH %s x %s\n", tname.c_str(), cname.c_str());
    if (printed && !all_details) continue;  // details for the first mismatch only, unless asked for all
    printed = true;
    if (!ids_error.empty()) {
      std::fprintf(stderr, "  the text is equal; %s\n", ids_error.c_str());
    } else if (!ref_ok) {
      std::fprintf(stderr, "  reference raised \"%s\"; zipmoe rendered %zu bytes\n",
                   ref.value(has_jinja2 ? "jinja2_error" : "error", std::string("?")).c_str(), got.size());
    } else if (!error.empty()) {
      std::fprintf(stderr, "  reference rendered; zipmoe failed: %s\n", error.c_str());
    } else {
      PrintDiff(want, got);
    }
  }
  int status = failed == 0 && passed > 0 ? 0 : 1;
  for (const auto& [tname, n] : rendered_ok) {
    const auto d = engines_differ.find(tname);
    std::fprintf(stderr, "  %s: %d conversations rendered equal%s\n", tname.c_str(), n,
                 d == engines_differ.end() ? ""
                                           : (" (@huggingface/jinja differs from jinja2 on " +
                                              std::to_string(d->second) + ")").c_str());
    if (n == 0 && required.count(tname) > 0) {
      std::fprintf(stderr, "  %s rendered no conversation without an error: the check proves nothing for it\n",
                   tname.c_str());
      status = 1;
    } else if (n == 0) {
      std::fprintf(stderr, "  %s: the reference refuses every conversation (and so does zipmoe)\n", tname.c_str());
    }
  }
  std::printf("%d passed, %d failed (%d encoded to the reference tokenizer's ids)\n", passed, failed, ids_equal);
  return status;
}
