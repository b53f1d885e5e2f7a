// Helpers shared by the libFuzzer harnesses of tests/fuzz/: a per-process scratch directory for
// parsers that read files, lenient JSON parsing, and the fixed models (tokenizer, config) that the
// encode / chat / request targets run against (tests/fuzz/data/, copied from `zipmoe synth --preset
// tiny`). Single-threaded, as libFuzzer runs a harness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/checkpoint/model_config.h"
#include "common/tokenizer/tokenizer.h"

namespace zipmoe::fuzz {

// A directory of this process, created on first use under $TMPDIR (else /tmp) and removed at exit.
const std::string& ScratchDir();

// Writes `size` bytes to `path` (truncating); aborts on an I/O error (a harness bug, not a finding).
void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size);

// The JSON value of `data`, or nullopt when it is not valid JSON (nlohmann's parse error).
std::optional<nlohmann::json> ParseJsonOrNull(const uint8_t* data, size_t size);

// The tokenizers of tests/fuzz/data/<arch>/ (arch "qwen2_moe": byte-level BPE with ChatML;
// "mixtral": SentencePiece-style BPE with byte fallback), loaded once; aborts if they do not load.
const Tokenizer& FixedTokenizer(const std::string& arch);
// tests/fuzz/data/qwen2_moe/config.json + generation_config.json, loaded once.
const ModelConfig& FixedModelConfig();

// Aborts with `what` (a property the harness checks was broken): libFuzzer records a crash.
[[noreturn]] void Fail(const std::string& what);

}  // namespace zipmoe::fuzz
