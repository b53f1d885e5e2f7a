// libFuzzer target: a safetensors file (u64 header length, JSON header, data section) through
// SafetensorsFile::Open, which maps a path: each input is written to a scratch file first. Every
// tensor view the parser accepts must lie inside the mapping: its first and last bytes are read.
#include <cstddef>
#include <cstdint>

#include "common/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = zipmoe::fuzz::ScratchDir() + "/input.safetensors";
  zipmoe::fuzz::WriteFileOrDie(path, data, size);
  auto file = zipmoe::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  volatile uint8_t sink = 0;
  for (const zipmoe::TensorView& view : (*file)->tensors()) {
    if ((*file)->Find(view.spec.name) != &view) zipmoe::fuzz::Fail("Find does not return the listed view");
    const uint64_t bytes = view.size_bytes();
    if (bytes != 0) sink = sink + view.data[0] + view.data[bytes - 1];
  }
  (void)sink;
  return 0;
}
