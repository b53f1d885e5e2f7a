// Helpers of the safetensors tests (safetensors_test.cc, safetensors_corrupt_test.cc,
// safetensors_checkpoint_test.cc): deterministic tensor bytes and their filler, hand-packed files,
// directory listings and error checks.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint/safetensors.h"
#include "common/status.h"

namespace zipmoe::safetensors::test {

using ::testing::HasSubstr;

// Deterministic bytes for a tensor: mt19937 seeded from `seed`.
inline std::string RandomBytes(uint32_t seed, uint64_t size_bytes) {
  std::mt19937 rng(seed);
  std::string out(size_bytes, '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

// Holds the expected bytes of each tensor and fills from them.
struct Payload {
  std::map<std::string, std::string> bytes;

  void Add(const TensorSpec& spec, uint32_t seed) { bytes[spec.name] = RandomBytes(seed, spec.size_bytes()); }
  TensorFiller Filler() const {
    return [this](const TensorSpec& spec, uint8_t* out) {
      const std::string& b = bytes.at(spec.name);
      if (b.size() != spec.size_bytes()) return Status::Internal("size mismatch for " + spec.name);
      if (!b.empty()) std::memcpy(out, b.data(), b.size());
      return Status::Ok();
    };
  }
};

inline std::string ViewBytes(const TensorView& view) {
  return std::string(reinterpret_cast<const char*>(view.data), view.size_bytes());
}

// u64 little-endian length + header + data, as a safetensors file.
inline std::string PackFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

inline std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const auto& part : parts) EXPECT_THAT(st.message(), HasSubstr(part));
}

inline std::vector<TensorSpec> MixedSpecs() {
  return {{"model.embed_tokens.weight", DType::kBF16, {7, 5}},
          {"model.layers.0.mlp.experts.0.w1", DType::kF16, {3, 4, 2}},
          {"model.norm.weight", DType::kF32, {9}},
          {"model.empty", DType::kBF16, {0, 16}},
          {"lm_head.scale", DType::kF32, {}}};
}

inline Payload MakePayload(const std::vector<TensorSpec>& specs, uint32_t seed) {
  Payload p;
  for (size_t i = 0; i < specs.size(); ++i) p.Add(specs[i], seed + static_cast<uint32_t>(i));
  return p;
}

}  // namespace zipmoe::safetensors::test
