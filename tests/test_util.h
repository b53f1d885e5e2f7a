// Test helpers: a temporary directory removed at scope exit, and running the zipmoe CLI.
#pragma once

#include <string>

namespace zipmoe::testing {

class TempDir {
 public:
  TempDir();   // mkdtemp under $TMPDIR or /tmp
  ~TempDir();  // rm -rf
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs "<build>/bin/zipmoe <args>" through the shell and captures its output.
CommandResult RunCli(const std::string& args);

// Reads/writes whole files (test setup only; failures abort the test via ADD_FAILURE + empty result).
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);

}  // namespace zipmoe::testing
