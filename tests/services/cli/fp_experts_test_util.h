// F32 and F16 variants of a synthetic (BF16) Hugging Face checkpoint, for the tests that serve
// F32/F16 experts from a compressed directory (generate_fp_experts_test.cc, up_cli_test.cc): the
// routed-expert tensors are rewritten in the target dtype (BF16 -> F32 exact, BF16 -> F16 by
// truncation: FloatToF16Bits), everything else keeps its bytes, config and tokenizer files are copied.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/checkpoint/expert_names.h"
#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "tests/services/convert_test_util.h"

namespace zipmoe::testing {

// Writes the variant of the checkpoint at `src` (BF16 routed experts) into `dst` (created).
// `keep_bf16(layer, expert)` true keeps that expert in BF16 (mixed-dtype checkpoints for failure tests).
inline void WriteExpertDtypeVariant(const std::string& src, const std::string& dst, DType dtype,
                                    const std::function<bool(int32_t, int32_t)>& keep_bf16 = nullptr) {
  ASSERT_TRUE(dtype == DType::kF32 || dtype == DType::kF16) << DTypeName(dtype);
  ASSERT_TRUE(CreateDirectories(dst).ok());
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(src)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name.find(".safetensors") != std::string::npos) continue;
    fs::copy_file(entry.path(), fs::path(dst) / name, fs::copy_options::overwrite_existing);
  }
  auto ckpt = Checkpoint::Open(src);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::vector<TensorSpec> specs;
  std::vector<const TensorView*> views;
  for (const auto& file : (*ckpt)->files()) {
    for (const TensorView& v : file->tensors()) {
      TensorSpec spec = v.spec;
      const auto expert = ParseExpertTensorName(spec.name, /*num_encoder_layers=*/0);  // decoder-only models
      if (expert && !(keep_bf16 && keep_bf16(expert->layer_id, expert->expert_id))) {
        ASSERT_EQ(spec.dtype, DType::kBF16) << spec.name;
        spec.dtype = dtype;
      }
      specs.push_back(spec);
      views.push_back(&v);
    }
  }
  size_t next = 0;
  const Status st = WriteCheckpointWeights(dst, specs, uint64_t{1} << 40, [&](const TensorSpec& spec, uint8_t* out) {
    const TensorView& v = *views[next++];
    if (spec.dtype == v.spec.dtype) {
      std::memcpy(out, v.data, v.size_bytes());
      return Status::Ok();
    }
    for (int64_t i = 0; i < spec.numel(); ++i) {
      uint16_t b;
      std::memcpy(&b, v.data + 2 * i, 2);
      if (spec.dtype == DType::kF32) {
        const uint32_t u = static_cast<uint32_t>(b) << 16;
        std::memcpy(out + 4 * i, &u, 4);
      } else {
        const uint16_t h = convert::test::FloatToF16Bits(Bf16ToFloat(b));
        std::memcpy(out + 2 * i, &h, 2);
      }
    }
    return Status::Ok();
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
}

}  // namespace zipmoe::testing
