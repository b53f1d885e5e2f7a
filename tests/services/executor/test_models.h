// Synthetic tiny models for the executor tests, made once per test binary with `zipmoe synth`
// (and `zipmoe compress`) and removed at exit. Not thread-safe (gtest runs tests sequentially).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"

namespace zipmoe::testing {

// Variants: the five archs, plus "deepseek_v2_qlora" (q_lora_rank 32: q_a_proj/q_b_proj MLA path).
inline const std::vector<std::string>& ExecutorVariants() {
  static const std::vector<std::string> v = {"qwen2_moe", "mixtral",          "qwen3_moe",
                                             "olmoe",     "deepseek_v2",      "deepseek_v2_qlora"};
  return v;
}

struct TinyModel {
  TempDir root;
  std::string path;
};

// Directory of the tiny synthetic HF checkpoint of `variant` (seed 1), created on first use.
inline const std::string& TinyModelDir(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<TinyModel>> models;
  std::unique_ptr<TinyModel>& m = models[variant];
  if (m) return m->path;
  m = std::make_unique<TinyModel>();
  m->path = m->root.Sub("m");
  const bool qlora = variant == "deepseek_v2_qlora";
  const std::string arch = qlora ? "deepseek_v2" : variant;
  const CommandResult r = RunCli("synth --arch " + arch + " --preset tiny --seed 1 --out " + m->path +
                                 (qlora ? " --q-lora-rank 32" : ""));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return m->path;
}

// Compressed (zipmoe compress) copy of TinyModelDir(variant), created on first use.
inline const std::string& TinyCompressedDir(const std::string& variant) {
  static std::map<std::string, std::unique_ptr<TinyModel>> models;
  std::unique_ptr<TinyModel>& m = models[variant];
  if (m) return m->path;
  m = std::make_unique<TinyModel>();
  m->path = m->root.Sub("c");
  const CommandResult r = RunCli("compress " + TinyModelDir(variant) + " " + m->path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return m->path;
}

// Copies model directory `src` to `dst` and applies `edit` to the copy's config.json.
template <typename Edit>
void CopyModelWithConfig(const std::string& src, const std::string& dst, Edit edit) {
  std::filesystem::copy(src, dst, std::filesystem::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(ReadAll(dst + "/config.json"));
  edit(config);
  WriteAll(dst + "/config.json", config.dump(2));
}

}  // namespace zipmoe::testing
