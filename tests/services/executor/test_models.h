// Synthetic tiny models for the executor tests, made with `zipmoe synth` (and `zipmoe compress`)
// once per CLI build and shared by all test processes (tests/test_util.h CachedSynth).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace zipmoe::testing {

// Variants: the five first archs, "deepseek_v2_qlora" (q_lora_rank 32: q_a_proj/q_b_proj MLA path) and the
// hybrid linear-attention ones (Gated DeltaNet state beside the KV cache).
inline const std::vector<std::string>& ExecutorVariants() {
  static const std::vector<std::string> v = {"qwen2_moe",   "mixtral",           "qwen3_moe",  "olmoe",
                                             "deepseek_v2", "deepseek_v2_qlora", "qwen3_next", "qwen3_5_moe"};
  return v;
}

// Directory of the tiny synthetic HF checkpoint of `variant` (seed 1), cached across test processes.
inline std::string TinyModelDir(const std::string& variant) {
  if (variant == "deepseek_v2_qlora") return CachedSynth("--arch deepseek_v2 --preset tiny --seed 1 --q-lora-rank 32");
  return CachedSynth("--arch " + variant + " --preset tiny --seed 1");
}

// Compressed (zipmoe compress, defaults) copy of TinyModelDir(variant), cached likewise.
inline std::string TinyCompressedDir(const std::string& variant) { return CachedCompress(TinyModelDir(variant)); }

// Copies model directory `src` to `dst` and applies `edit` to the copy's config.json.
template <typename Edit>
void CopyModelWithConfig(const std::string& src, const std::string& dst, Edit edit) {
  std::filesystem::copy(src, dst, std::filesystem::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(ReadAll(dst + "/config.json"));
  edit(config);
  WriteAll(dst + "/config.json", config.dump(2));
}

}  // namespace zipmoe::testing
