// See fuzz_util.h.
#include "tests/fuzz/fuzz_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

namespace zipmoe::fuzz {

namespace {
char scratch_path[4096];  // the directory's path, for the exit handler (after statics are destroyed)
}  // namespace

const std::string& ScratchDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/zipmoe-fuzz.XXXXXX";
    if (pattern.size() >= sizeof scratch_path) Fail("TMPDIR too long");
    std::memcpy(scratch_path, pattern.c_str(), pattern.size() + 1);
    if (mkdtemp(scratch_path) == nullptr) Fail("mkdtemp " + pattern);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_path, ec);
    });
    return std::string(scratch_path);
  }();
  return dir;
}

void WriteFileOrDie(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) Fail("cannot create " + path);
  if (size != 0 && std::fwrite(data, 1, size, f) != size) Fail("short write to " + path);
  if (std::fclose(f) != 0) Fail("close " + path);
}

std::optional<nlohmann::json> ParseJsonOrNull(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

const Tokenizer& FixedTokenizer(const std::string& arch) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find(arch);
  if (it == loaded.end()) {
    const std::string path = std::string(ZIPMOE_FUZZ_DATA_DIR) + "/" + arch + "/tokenizer.json";
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::Load(path);
    if (!tok.ok()) Fail(tok.status().ToString());
    it = loaded.emplace(arch, std::move(tok).value()).first;
  }
  return *it->second;
}

const ModelConfig& FixedModelConfig() {
  static const ModelConfig config = [] {
    Result<ModelConfig> c = LoadModelConfig(std::string(ZIPMOE_FUZZ_DATA_DIR) + "/qwen2_moe");
    if (!c.ok()) Fail(c.status().ToString());
    return std::move(c).value();
  }();
  return config;
}

void Fail(const std::string& what) {
  std::fprintf(stderr, "zipmoe fuzz harness: %s\n", what.c_str());
  std::abort();
}

}  // namespace zipmoe::fuzz
