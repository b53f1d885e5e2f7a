#include "tests/test_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/file_util.h"

namespace zipmoe::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/zipmoe_test_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << tmpl;
  }
  path_ = buf.data();
}

TempDir::~TempDir() { (void)RemoveTree(path_); }

std::string CliPath() { return ZIPMOE_CLI_PATH; }

CommandResult RunCli(const std::string& args, const std::string& launcher) {
  CommandResult result;
  std::string cmd = (launcher.empty() ? "" : launcher + " ") + std::string(ZIPMOE_CLI_PATH) + " " + args + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return result;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

namespace {

// How long a cache folder of another CLI build may go unused before a new build removes it. A test
// run touches its build's folder at every lookup, so a concurrent run of another checkout keeps its own.
constexpr auto kStaleCacheAge = std::chrono::minutes(30);

// Removes the folders under `root` other than `keep` whose ".last_used" stamp (or, for folders of the
// old flat layout, their own mtime) is older than kStaleCacheAge: every rebuild of the CLI starts a new
// folder, and without this the cache grew by hundreds of MiB per build until the disk was full.
void PruneStaleCacheFolders(const std::filesystem::path& root, const std::filesystem::path& keep) {
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::filesystem::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::path& p = it->path();
    if (p == keep || !it->is_directory(ec)) continue;
    std::error_code tec;
    auto used = std::filesystem::last_write_time(p / ".last_used", tec);
    if (tec) used = std::filesystem::last_write_time(p, tec);
    if (tec || now - used < kStaleCacheAge) continue;
    (void)RemoveTree(p.string());
  }
}

// Runs `zipmoe <command_head> TMP <command_tail>` once per distinct command and CLI build, returning
// the cached output directory: <root>/<hash of the CLI's path, size and mtime>/<hash of the command>.
std::string CachedCliDir(const std::string& command_head, const std::string& command_tail) {
  struct stat st {};
  ::stat(ZIPMOE_CLI_PATH, &st);
  const std::string build_key = std::string(ZIPMOE_CLI_PATH) + "|" + std::to_string(st.st_size) + "|" +
                                std::to_string(static_cast<long long>(st.st_mtime));
  const std::string key = command_head + "|" + command_tail + "|" + build_key;
  const char* env = std::getenv("ZIPMOE_TEST_CACHE_DIR");
  const std::filesystem::path root = env && *env ? env : "/tmp/zipmoe_test_cache";
  const std::filesystem::path build_dir = root / ("build-" + std::to_string(std::hash<std::string>()(build_key)));
  const std::filesystem::path dir = build_dir / std::to_string(std::hash<std::string>()(key));
  std::error_code ec;
  if (!std::filesystem::exists(build_dir, ec)) {
    std::filesystem::create_directories(build_dir, ec);
    PruneStaleCacheFolders(root, build_dir);
  }
  // Marks this build's folder as in use (for PruneStaleCacheFolders in other builds' test runs).
  const std::filesystem::path last_used = build_dir / ".last_used";
  if (!std::filesystem::exists(last_used, ec)) WriteAll(last_used.string(), "");
  std::filesystem::last_write_time(last_used, std::filesystem::file_time_type::clock::now(), ec);
  if (std::filesystem::exists(dir / ".complete", ec)) return dir.string();
  const std::filesystem::path tmp = dir.string() + ".tmp." + std::to_string(::getpid());
  (void)RemoveTree(tmp.string());
  const CommandResult r = RunCli(command_head + " " + tmp.string() + " " + command_tail);
  if (r.exit_code != 0) {
    ADD_FAILURE() << "zipmoe " << command_head << " ... " << command_tail << " failed:\n" << r.output;
    return dir.string();
  }
  WriteAll((tmp / ".complete").string(), key);
  std::filesystem::rename(tmp, dir, ec);  // a concurrent process may have won the race: keep its copy
  if (ec) (void)RemoveTree(tmp.string());
  return dir.string();
}

}  // namespace

std::string CachedSynth(const std::string& synth_args) { return CachedCliDir("synth --out", synth_args); }

std::string CachedCompress(const std::string& model_dir, const std::string& compress_args) {
  return CachedCliDir("compress " + model_dir, compress_args);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) ADD_FAILURE() << "cannot write " << path;
}

}  // namespace zipmoe::testing
