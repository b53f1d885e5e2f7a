// Helpers of the executor tests (generator_test.cc, generator_errors_test.cc,
// generator_batch_test.cc): a generator on a model directory, the error of one that fails to load,
// a fixed prompt and a bit-exact comparison of logits.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "services/executor/generator.h"

namespace zipmoe::executor::test {

inline constexpr int kThreads = 2;

inline std::unique_ptr<Generator> MakeGenerator(const std::string& dir, ExpertProvider* provider = nullptr) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  options.expert_provider = provider;
  auto g = Generator::Create(options);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

inline Status CreateError(const std::string& dir) {
  GeneratorOptions options;
  options.model_dir = dir;
  options.n_threads = kThreads;
  auto g = Generator::Create(options);
  return g.ok() ? Status::Ok() : g.status();
}

inline const std::vector<int32_t> kPrompt = {5, 17, 300, 1000, 42, 7, 1999, 256, 64, 128, 3, 900};

inline bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace zipmoe::executor::test
