// Toy checkpoints for the converter's tests (convert_test.cc, convert_fp_test.cc): one MoE layer in
// the Hugging Face layout, BF16 router, experts in BF16, F32 or F16, with optional special values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"

namespace zipmoe::convert::test {

// Special bit patterns mixed into the "special" checkpoints.
inline const uint32_t kF32Specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc12345u,
                                 0x7f800001u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x7f7fffffu, 0xff7fffffu};
inline const uint16_t kF16Specials[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfd55, 0x7c01,
                                 0x0001, 0x83ff, 0x0200, 0x7bff, 0xfbff};

// float -> F16 bits, truncating the mantissa (realistic exponents are all these tests need); values
// below 2^-14 become subnormals, below 2^-24 zero, above the F16 range infinity.
inline uint16_t FloatToF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const int exp = static_cast<int>((u >> 23) & 0xff) - 127 + 15;
  const uint32_t mant = u & 0x7fffffu;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) return exp < -10 ? sign : static_cast<uint16_t>(sign | ((mant | 0x800000u) >> (14 - exp)));
  return static_cast<uint16_t>(sign | exp << 10 | mant >> 13);
}

// One MoE layer of `n_experts` experts, gate/up [rows, cols] and down [cols, rows], in `dtype` (BF16,
// F32 or F16): N(0, 0.02²) weights, and with `specials` (F32, F16) every 7th value one of the special
// patterns.
inline void WriteToyCheckpoint(const std::string& dir, DType dtype, int n_experts, int rows, int cols, uint64_t seed,
                               bool specials = false) {
  ASSERT_TRUE(CreateDirectories(dir).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir, "config.json"),
                              R"({"model_type": "qwen2_moe", "num_hidden_layers": 1, "num_experts": )" +
                                  std::to_string(n_experts) + "}")
                  .ok());
  std::vector<TensorSpec> specs;
  specs.push_back({"model.layers.0.mlp.gate.weight", DType::kBF16, {n_experts, cols}});
  for (int e = 0; e < n_experts; ++e) {
    const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
    specs.push_back({p + "gate_proj.weight", dtype, {rows, cols}});
    specs.push_back({p + "up_proj.weight", dtype, {rows, cols}});
    specs.push_back({p + "down_proj.weight", dtype, {cols, rows}});
  }
  auto st = WriteCheckpointWeights(dir, specs, uint64_t{1} << 40, [&](const TensorSpec& spec, uint8_t* out) {
    std::mt19937_64 rng(seed + std::hash<std::string>()(spec.name));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (int64_t i = 0; i < spec.numel(); ++i) {
      const float f = normal(rng);
      const bool special = specials && i % 7 == 3;
      if (spec.dtype == DType::kF32) {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if (special) u = kF32Specials[(i / 7) % 12];
        std::memcpy(out + 4 * i, &u, 4);
      } else if (spec.dtype == DType::kF16) {
        uint16_t h = FloatToF16Bits(f);
        if (special) h = kF16Specials[(i / 7) % 12];
        std::memcpy(out + 2 * i, &h, 2);
      } else {
        const uint16_t b = FloatToBf16(f);
        std::memcpy(out + 2 * i, &b, 2);
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

}  // namespace zipmoe::convert::test
