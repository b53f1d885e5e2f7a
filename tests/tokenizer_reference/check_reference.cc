// zipmoe_tokenizer_reference_check DIR: compares zipmoe's Tokenizer (Tokenizer::LoadDir) with a reference on every
// string of DIR/inputs.json (tests/tokenizer_reference/run.sh writes DIR: make_t5_tokenizer.py the
// tokenizer and inputs, reference_encode.mjs the reference ids and decodings in reference.jsonl).
// For each input: Encode(text, add_special_tokens = true) must equal the reference ids exactly, and
// Decode(ids) / Decode(ids, skip_special_tokens) the reference decodings. Prints the first mismatch
// of each kind with both id lists (and their token strings), then a summary; `--prompts N` says how
// many leading inputs are the ShareGPT prompts (counted apart in the summary). A reference line
// without "decoded" (SentencePiece's, spm_reference.py: its decode is not HF's) checks the ids only.
// zipmoe's ids are also written to DIR/zipmoe_ids.jsonl, one line per input, for spm_reference.py
// --compare (which tells Viterbi ties from real differences).
// Exit 0 iff everything matched (1: a mismatch, 2: bad arguments or files).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/tokenizer/tokenizer.h"

namespace {

using nlohmann::json;
using zipmoe::Tokenizer;

std::string IdsText(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", ids[i]);
  out += "]\n      tokens: [";
  for (size_t i = 0; i < ids.size(); ++i) out += fmt::format("{}{}", i ? ", " : "", json(tokenizer.IdToToken(ids[i])).dump());
  return out + "]";
}

std::string Excerpt(const std::string& text) {
  return json(text.size() > 300 ? text.substr(0, 300) + "..." : text).dump(-1, ' ', false, json::error_handler_t::replace);
}

int Run(const std::string& dir, size_t n_prompts) {
  auto tokenizer_or = Tokenizer::LoadDir(dir);
  if (!tokenizer_or.ok()) {
    fmt::print(stderr, "E: {}\n", tokenizer_or.status().ToString());
    return 2;
  }
  const Tokenizer& tokenizer = **tokenizer_or;
  auto inputs_text = zipmoe::ReadFileToString(dir + "/inputs.json");
  auto reference_text = zipmoe::ReadFileToString(dir + "/reference.jsonl");
  if (!inputs_text.ok() || !reference_text.ok()) {
    fmt::print(stderr, "E: {}\n", (!inputs_text.ok() ? inputs_text.status() : reference_text.status()).ToString());
    return 2;
  }
  std::vector<std::string> inputs;
  std::vector<json> reference;
  try {
    inputs = json::parse(*inputs_text).get<std::vector<std::string>>();
    size_t begin = 0;
    const std::string& r = *reference_text;
    while (begin < r.size()) {
      size_t end = r.find('\n', begin);
      if (end == std::string::npos) end = r.size();
      if (end > begin) reference.push_back(json::parse(r.substr(begin, end - begin)));
      begin = end + 1;
    }
  } catch (const json::exception& e) {
    fmt::print(stderr, "E: {}: {}\n", dir, e.what());
    return 2;
  }
  if (inputs.size() != reference.size()) {
    fmt::print(stderr, "E: {} inputs but {} reference lines\n", inputs.size(), reference.size());
    return 2;
  }
  n_prompts = std::min(n_prompts, inputs.size());
  size_t ids_ok_prompts = 0, ids_ok_other = 0, decode_ok = 0, decode_checked = 0, tokens = 0;
  bool shown_ids = false, shown_decode = false;
  std::string ids_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int32_t> want = reference[i].at("ids").get<std::vector<int32_t>>();
    auto got_or = tokenizer.Encode(inputs[i], /*add_special_tokens=*/true);
    if (!got_or.ok()) {
      fmt::print("input {}: Encode failed: {}\n", i, got_or.status().ToString());
      ids_out += "null\n";
      continue;
    }
    const std::vector<int32_t>& got = *got_or;
    ids_out += json(got).dump() + "\n";
    tokens += got.size();
    if (got == want) {
      ++(i < n_prompts ? ids_ok_prompts : ids_ok_other);
    } else if (!shown_ids) {
      shown_ids = true;
      size_t k = 0;
      while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
      fmt::print("FIRST ID MISMATCH: input {} {}, first difference at position {}\n  text: {}\n  zipmoe:    {}\n  reference: {}\n",
                 i, i < n_prompts ? "(ShareGPT prompt)" : "(extra input)", k, Excerpt(inputs[i]),
                 IdsText(tokenizer, got), IdsText(tokenizer, want));
    }
    if (!reference[i].contains("decoded")) continue;
    ++decode_checked;
    // Decode the reference ids, so that a decode mismatch is not an encode mismatch in disguise.
    const std::string decoded = tokenizer.Decode(want, false);
    const std::string decoded_skip = tokenizer.Decode(want, true);
    if (decoded == reference[i].at("decoded").get<std::string>() &&
        decoded_skip == reference[i].at("decoded_skip").get<std::string>()) {
      ++decode_ok;
    } else if (!shown_decode) {
      shown_decode = true;
      fmt::print("FIRST DECODE MISMATCH: input {}\n  ids: {}\n  zipmoe:    {} / skip special: {}\n  reference: {} / skip special: {}\n",
                 i, IdsText(tokenizer, want), Excerpt(decoded), Excerpt(decoded_skip),
                 Excerpt(reference[i].at("decoded").get<std::string>()),
                 Excerpt(reference[i].at("decoded_skip").get<std::string>()));
    }
  }
  if (const zipmoe::Status st = zipmoe::WriteFileAtomic(dir + "/zipmoe_ids.jsonl", ids_out); !st.ok()) {
    fmt::print(stderr, "E: {}\n", st.ToString());
    return 2;
  }
  fmt::print("{}: ids equal on {}/{} ShareGPT prompts and {}/{} extra inputs ({} tokens); decodings equal on {}/{}\n",
             dir, ids_ok_prompts, n_prompts, ids_ok_other, inputs.size() - n_prompts, tokens, decode_ok, decode_checked);
  const bool all = ids_ok_prompts + ids_ok_other == inputs.size() && decode_ok == decode_checked;
  return all ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--prompts")) {
    fmt::print(stderr, "usage: {} DIR [--prompts N]\n", argv[0]);
    return 2;
  }
  return Run(argv[1], argc == 4 ? std::strtoul(argv[3], nullptr, 10) : 0);
}
