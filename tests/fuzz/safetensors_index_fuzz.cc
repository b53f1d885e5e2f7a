// libFuzzer target: model.safetensors.index.json through Checkpoint::Open. The input is the index;
// the scratch checkpoint directory holds a fixed config.json and two small shards
// (model-00001-of-00002.safetensors: "a", "b"; model-00002-of-00002.safetensors: "c") written once.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/file_util.h"
#include "common/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

const std::string& CheckpointDir() {
  static const std::string dir = [] {
    const std::string d = zipmoe::fuzz::ScratchDir() + "/ckpt";
    if (!zipmoe::CreateDirectories(d).ok()) zipmoe::fuzz::Fail("mkdir " + d);
    const char config[] = "{\"model_type\": \"qwen2_moe\"}";
    zipmoe::fuzz::WriteFileOrDie(d + "/config.json", reinterpret_cast<const uint8_t*>(config), sizeof config - 1);
    auto fill = [](const zipmoe::TensorSpec& spec, uint8_t* out) {
      if (spec.size_bytes() != 0) std::memset(out, 0x3f, spec.size_bytes());
      return zipmoe::Status::Ok();
    };
    using zipmoe::DType;
    if (!zipmoe::WriteSafetensors(d + "/model-00001-of-00002.safetensors",
                                  {{"a", DType::kBF16, {2, 3}}, {"b", DType::kF32, {4}}}, fill).ok() ||
        !zipmoe::WriteSafetensors(d + "/model-00002-of-00002.safetensors", {{"c", DType::kBF16, {0, 8}}}, fill).ok())
      zipmoe::fuzz::Fail("cannot write the fixed shards");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = CheckpointDir();
  zipmoe::fuzz::WriteFileOrDie(dir + "/model.safetensors.index.json", data, size);
  auto ckpt = zipmoe::Checkpoint::Open(dir);
  if (!ckpt.ok()) return 0;
  for (const std::string& name : (*ckpt)->names())
    if (!(*ckpt)->Find(name).ok()) zipmoe::fuzz::Fail("a listed tensor is not found: " + name);
  return 0;
}
